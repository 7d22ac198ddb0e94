"""`hightide bench --workload group`: consumer group figures on a real local cluster (printed, never asserted).

Room: services/client (benchmarks). Two figures, beside the produce workload's:

| figure                         | how                                                                             |
| ------------------------------ | ------------------------------------------------------------------------------- |
| group consumer records/s       | one `group.id` consumer reads 100 B records of a 6-partition topic from the     |
|                                | start, from its first record to its last (the join before it is not counted)   |
| group rebalance time           | a second member subscribes to the Stable group: from its first poll until both |
|                                | members hold an assignment in the new generation (JoinGroup, the leader's      |
|                                | assignment, SyncGroup persisted with acks=all, the committed offsets fetched)   |

The rebalance time is mostly the first member's wait for its next heartbeat (`heartbeat.interval.ms`, 3 s), which
is when it hears REBALANCE_IN_PROGRESS, as in Kafka.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Final

from hightide.client.bench_cluster import BenchCluster, bench_producer_config, create_topic
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer, ConsumerConfig
from hightide.client.producer import Producer

RECORDS: Final = 100_000
RECORD_BYTES: Final = 100
TOPIC: Final = "bench-group"
DEADLINE_S: Final = 180.0


async def consumer_throughput(conn: ClusterConnection, count: int) -> tuple[float, Consumer]:
    """records/s of one group consumer reading `count` records; the consumer, still in the group."""
    await create_topic(conn, TOPIC)
    value = os.urandom(RECORD_BYTES)
    async with Producer(conn, bench_producer_config()) as producer:
        for _ in range(count):
            await producer.send(TOPIC, value)
        await asyncio.wait_for(producer.flush(), DEADLINE_S)
    config = ConsumerConfig(group_id="bench", auto_offset_reset="earliest", group_instance_id="bench-1")
    consumer = Consumer(conn, config)
    consumer.subscribe([TOPIC])
    seen, first_at = 0, 0.0
    deadline = time.monotonic() + DEADLINE_S
    while seen < count and time.monotonic() < deadline:
        records = await consumer.poll()
        if records and not seen:
            first_at = time.perf_counter()
        seen += len(records)
    elapsed = time.perf_counter() - first_at
    return (seen / elapsed if seen and elapsed > 0 else 0.0), consumer


async def rebalance_seconds(conn: ClusterConnection, first: Consumer) -> float:
    """From a second member's first poll until both members hold an assignment of the new generation."""
    assert first.group is not None
    second = Consumer(conn, ConsumerConfig(group_id="bench", group_instance_id="bench-2"))
    second.subscribe([TOPIC])
    started = time.perf_counter()
    deadline = time.monotonic() + DEADLINE_S

    def settled() -> bool:
        a, b = first.group, second.group
        assert a is not None and b is not None
        return bool(a.assigned) and bool(b.assigned) and a.generation == b.generation and not a.needs_join

    async def keep_polling(consumer: Consumer) -> None:
        # Each member polls on its own, as an application does: a member's rejoin rides on its polls.
        while not settled() and time.monotonic() < deadline:
            await consumer.poll()

    await asyncio.gather(keep_polling(first), keep_polling(second))
    elapsed = time.perf_counter() - started
    await second.close()
    return elapsed


async def run_group_bench(work: Path, duration_scale: float = 1.0) -> tuple[float, float]:
    """(records/s, rebalance seconds) on a fresh cluster."""
    async with BenchCluster(work) as conn:
        throughput, consumer = await consumer_throughput(conn, max(1_000, round(RECORDS * duration_scale)))
        try:
            seconds = await rebalance_seconds(conn, consumer)
        finally:
            await consumer.close()
    return throughput, seconds
