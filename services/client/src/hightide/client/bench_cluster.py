"""Hightide's own produce benchmark on a real local cluster, beside the NATS baselines of the same run.

Room: services/client (the `hightide bench --workload produce` command). A fresh cluster as `hightide cluster up`
starts it (its own nats-server with JetStream on 127.0.0.1, one controller, three brokers, each a process) in a
directory under the bench's work directory, removed afterwards. Measured through the public client:

| figure                  | how                                                                                   |
| ----------------------- | ------------------------------------------------------------------------------------- |
| throughput, 100 B       | `PRODUCE_COUNT` records sent as fast as `send` takes them, then `flush`; every record  |
|                         | acknowledged (acks=all, RF=3, min.insync.replicas=2); records/s and MB/s               |
| throughput, 16 KiB      | the same with 16 KiB records (compared with JetStream R3's MB/s at 16 KiB)             |
| produce-to-consume      | 100-byte records stamped with the monotonic clock, sent at a fixed rate on a schedule |
| latency                 | (record i at t0 + i/R); a consumer in the same process reads them (only below the     |
|                         | high watermark, so after replication) and the latency is arrival minus stamp           |
| emission cost           | the 100 B throughput again on a second fresh cluster whose services emit no events    |
|                         | (`HIGHTIDE_BENCH_EVENTS=off`, a benchmark-only setting); cost = 1 - on / off          |

The producer runs with Kafka's defaults (acks=all, idempotence, linger.ms=5) except `batch.size`, which is
`BENCH_BATCH_SIZE`, just under max.request.size, as a throughput run sets it: with one batch in flight per
partition, records per request is what a Python producer's throughput turns on (16 KiB batches give about a
third of it). Every wait has a deadline; numbers are
printed, never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hightide.client.admin import Admin
from hightide.client.bench_nats import (
    LARGE_RECORD_BYTES,
    RECORD_BYTES,
    BaselineResult,
    LatencyResult,
    latency_result,
    paced,
)
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer
from hightide.client.local_cluster import LocalCluster
from hightide.client.producer import Producer, ProducerConfig
from hightide.protocol.permissions import Role
from hightide.runtime.service import BENCH_EVENTS_ENV

PRODUCE_COUNT: Final = 300_000
LARGE_PRODUCE_COUNT: Final = 10_000
LATENCY_RATE_PER_S: Final = 10_000
LATENCY_SECONDS: Final = 5.0
PARTITIONS: Final = 6
BENCH_BATCH_SIZE: Final = 1_000_000  # just under max.request.size (1 MiB), as a throughput run sets it
READY_DEADLINE_S: Final = 60.0
DRAIN_DEADLINE_S: Final = 120.0
POLL_INTERVAL_S: Final = 0.1  # polling a condition inside a deadline loop

_STAMP: Final = struct.Struct(">q")


@dataclass(frozen=True)
class ClusterFigures:
    throughputs: list[BaselineResult]
    latency: LatencyResult
    events_off: BaselineResult  # the 100 B throughput with event emission switched off


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` (None: left as it is) for the processes started inside."""
    previous = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


class BenchCluster:
    """A local cluster for the benchmark: `async with BenchCluster(work) as conn:` gives a connection to it."""

    def __init__(self, work: Path, *, events: bool = True) -> None:
        self.directory = work / ("cluster" if events else "cluster-events-off")
        self.local = LocalCluster(self.directory)
        self.conn: ClusterConnection | None = None
        self.events = events

    async def __aenter__(self) -> ClusterConnection:
        with _environment(BENCH_EVENTS_ENV, None if self.events else "off"):
            state = self.local.up(brokers=3, controllers=1, cluster_id="bench", config=[])
        try:
            # the admin (it creates the benchmark's topics; NATS permissions, issue 14)
            admin = state.credentials_file(Role.ADMIN)
            self.conn = await ClusterConnection.open(state.nats_url, state.cluster_id, credentials_file=admin)
            await _until(lambda: _three_active(self.conn), READY_DEADLINE_S, "three active brokers")
        except BaseException:
            await self._stop()
            raise
        return self.conn

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop()

    async def _stop(self) -> None:
        if self.conn is not None:
            await self.conn.close()
        self.local.down()
        shutil.rmtree(self.directory, ignore_errors=True)


async def _three_active(conn: ClusterConnection | None) -> bool:
    assert conn is not None
    described = await Admin(conn).describe_cluster()
    return described.error == 0 and len([b for b in described.brokers if not b.fenced]) == 3


async def _until(condition: Callable[[], Awaitable[bool]], deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while not await condition():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {deadline_s:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_INTERVAL_S)


async def create_topic(conn: ClusterConnection, name: str, partitions: int = PARTITIONS) -> None:
    """RF=3, min.insync.replicas=2, and wait until every partition has a leader and a full ISR."""
    admin = Admin(conn)
    created = await admin.create_topic(name, partitions, 3, configs={"min.insync.replicas": "2"})
    if created.error != 0:
        raise RuntimeError(f"creating {name}: {created.message or created.error}")

    async def full_isr() -> bool:
        described = await admin.describe_topics((name,))
        if not described.topics or described.topics[0].error != 0:
            return False
        return all(p.leader >= 0 and len(p.isr) == 3 for p in described.topics[0].partitions)

    await _until(full_isr, READY_DEADLINE_S, f"a full ISR on every partition of {name}")
    await conn.metadata((name,))


def bench_producer_config() -> ProducerConfig:
    return ProducerConfig(acks=-1, batch_size=BENCH_BATCH_SIZE)


async def produce_throughput(conn: ClusterConnection, topic: str, count: int, size: int) -> BaselineResult:
    """`count` records of `size` bytes, every one acknowledged (acks=all); the sticky partitioner spreads them."""
    await create_topic(conn, topic)
    value = os.urandom(size)
    async with Producer(conn, bench_producer_config()) as producer:
        started = time.perf_counter()
        futures = [await producer.send(topic, value) for _ in range(count)]
        await asyncio.wait_for(producer.flush(), DRAIN_DEADLINE_S)
        seconds = time.perf_counter() - started
    failed = [f for f in futures if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} of {count} records failed, first: {failed[0].exception()!r}")
    return BaselineResult(f"hightide produce acks=all RF=3 {_size_label(size)}", count, seconds, size)


async def produce_to_consume_latency(
    conn: ClusterConnection, topic: str, rate_per_s: int, duration_s: float
) -> LatencyResult:
    """Records stamped with perf_counter_ns, sent at `rate_per_s`; a consumer measures arrival minus stamp."""
    await create_topic(conn, topic)
    samples = max(1, round(rate_per_s * duration_s))
    padding = os.urandom(RECORD_BYTES - _STAMP.size)
    consumer = Consumer(conn)
    consumer.assign({(topic, p): 0 for p in range(PARTITIONS)})
    latencies: list[int] = []

    async def consume() -> None:
        while len(latencies) < samples:
            for record in await consumer.poll():
                arrived = time.perf_counter_ns()
                assert record.value is not None
                latencies.append(arrived - _STAMP.unpack_from(record.value)[0])

    try:
        async with Producer(conn, bench_producer_config()) as producer:
            reader = asyncio.create_task(consume())

            async def send(_index: int) -> None:
                await producer.send(topic, _STAMP.pack(time.perf_counter_ns()) + padding)

            await paced(samples, rate_per_s, send)
            await asyncio.wait_for(producer.flush(), DRAIN_DEADLINE_S)
            try:
                await asyncio.wait_for(reader, DRAIN_DEADLINE_S)
            except TimeoutError:
                raise RuntimeError(f"consumed {len(latencies)} of {samples} records before the deadline") from None
    finally:
        await consumer.close()
    return latency_result(f"hightide produce->consume {_size_label(RECORD_BYTES)}", rate_per_s, latencies)


async def run_cluster_bench(work: Path, duration_scale: float = 1.0) -> ClusterFigures:
    """Every Hightide figure, on one fresh cluster; `duration_scale` sizes the counts and the latency run."""

    def scaled(count: int) -> int:
        return max(1, round(count * duration_scale))

    async with BenchCluster(work, events=False) as conn:
        off = await produce_throughput(conn, "bench-100b", scaled(PRODUCE_COUNT), RECORD_BYTES)
    async with BenchCluster(work) as conn:
        small = await produce_throughput(conn, "bench-100b", scaled(PRODUCE_COUNT), RECORD_BYTES)
        large = await produce_throughput(conn, "bench-16k", scaled(LARGE_PRODUCE_COUNT), LARGE_RECORD_BYTES)
        latency = await produce_to_consume_latency(
            conn, "bench-latency", LATENCY_RATE_PER_S, LATENCY_SECONDS * duration_scale
        )
    events_off = BaselineResult(f"{off.name}, event emission off", off.records, off.seconds, off.record_bytes)
    return ClusterFigures([small, large], latency, events_off)


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"
