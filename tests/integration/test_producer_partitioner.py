"""Records without a key spread over every partition of a topic, even at a low rate (Kafka's uniform sticky
partitioner, KIP-794): the sticky partition switches after `batch.size` bytes, whatever the batching; with
`partitioner.ignore.keys` keyed records spread too; with `partitioner.availability.timeout.ms`, a partition whose
leader takes nothing gets no new records.

Method: a real nats-server, the real Producer and ClusterConnection, and a scripted cluster on the other end:
NATS subscribers that answer metadata (topic `orders`, partitions 0, 1, 2 led by brokers 1, 2, 3) and
InitProducerId, and answer each produce at once, or, for a broker the test holds, not until the test lets it go.
The records go one at a time with a pause between them (a low rate: each batch holds one record, so no batch ever
fills, which used to keep every record on one partition), with a small `batch.size` so that the run is short but
the partition switches many times. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from hightide.client.bench_nats import LocalNatsCluster
from hightide.client.connection import ClusterConnection
from hightide.client.producer import Producer, ProducerConfig, RecordFuture
from hightide.core.partitioner import partition_for_key
from hightide.protocol import wire
from hightide.protocol.records import iter_batch_headers
from hightide.protocol.subjects import BrokerApi, ControllerApi, any_broker_metadata, broker_api, controller_api

CLUSTER = "partitioner"
TOPIC = "orders"
PARTITIONS = 3
DEADLINE_S = 30.0
RECORDS = 300
PAUSE_S = 0.001  # between records: about a thousand records a second at most, one record per batch
VALUE = b"v" * 100  # 124 bytes with the record overhead: a 256-byte batch.size switches every 3 records
SHARE_MIN = 0.15  # a third each on average; over ~100 random switches a share under 15% is a 4-sigma event


@dataclass
class ScriptedCluster:
    """Brokers 1, 2, 3 leading orders-0, -1, -2; each produce answered at once unless its broker is held."""

    nc: Client
    held_brokers: set[int] = field(default_factory=set)
    held: list[tuple[Msg, int, int]] = field(default_factory=list)  # (request, partition, records)
    next_offsets: list[int] = field(default_factory=lambda: [0] * PARTITIONS)

    async def start(self) -> None:
        await self.nc.subscribe(any_broker_metadata(CLUSTER), cb=self._metadata)
        await self.nc.subscribe(controller_api(CLUSTER, ControllerApi.INIT_PRODUCER_ID), cb=self._producer_id)
        for broker in range(1, PARTITIONS + 1):
            await self.nc.subscribe(broker_api(CLUSTER, broker, BrokerApi.METADATA), cb=self._metadata)
            await self.nc.subscribe(broker_api(CLUSTER, broker, BrokerApi.PRODUCE), cb=self._produce(broker))
        await self.nc.flush()

    async def _metadata(self, msg: Msg) -> None:
        partitions = tuple(
            wire.PartitionMetadata(
                partition=p, leader=p + 1, leader_epoch=0, partition_epoch=0, replicas=(p + 1,), isr=(p + 1,)
            )
            for p in range(PARTITIONS)
        )
        brokers = tuple(
            wire.BrokerMetadata(broker_id=b, broker_epoch=0, fenced=False, in_controlled_shutdown=False)
            for b in range(1, PARTITIONS + 1)
        )
        topic = wire.TopicMetadata(name=TOPIC, topic_id="t", partitions=partitions)
        await msg.respond(wire.encode(wire.MetadataResponse(brokers=brokers, topics=(topic,))))

    async def _producer_id(self, msg: Msg) -> None:
        await msg.respond(wire.encode(wire.InitProducerIdResponse(producer_id=7, producer_epoch=0)))

    def _produce(self, broker: int) -> Callable[[Msg], Awaitable[None]]:
        async def on_produce(msg: Msg) -> None:
            request = wire.decode(wire.ProduceRequest, msg.data)
            data = request.partitions[0]
            ((_, header),) = list(iter_batch_headers(data.records))
            if broker in self.held_brokers:
                self.held.append((msg, data.partition, header.record_count))
            else:
                await self._answer(msg, data.partition, header.record_count)

        return on_produce

    async def _answer(self, msg: Msg, partition: int, records: int) -> None:
        base_offset = self.next_offsets[partition]
        self.next_offsets[partition] += records
        result = wire.ProducePartitionResponse(topic=TOPIC, partition=partition, error=0, base_offset=base_offset)
        await msg.respond(wire.encode(wire.ProduceResponse(partitions=(result,))))

    async def release(self) -> None:
        """Answer every held produce, and answer the later ones at once."""
        self.held_brokers.clear()
        held, self.held = self.held, []
        for msg, partition, records in held:
            await self._answer(msg, partition, records)


def config(**overrides: object) -> ProducerConfig:
    values: dict[str, object] = {"linger_ms": 0, "batch_size": 256, "request_timeout_ms": 20_000}
    values.update(overrides)
    return ProducerConfig(**values)  # type: ignore[arg-type]


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)  # polling a condition with a deadline


async def scenario(
    producer_config: ProducerConfig, test: Callable[[ScriptedCluster, Producer], Awaitable[None]]
) -> None:
    async with LocalNatsCluster(1, jetstream=False) as server:
        cluster_nc = await nats.connect(server.urls[0])
        cluster = ScriptedCluster(cluster_nc)
        await cluster.start()
        conn = await ClusterConnection.open(server.urls[0], CLUSTER)
        try:
            async with Producer(conn, producer_config) as producer:
                try:
                    await test(cluster, producer)
                finally:
                    await cluster.release()  # so that the producer's close does not wait on held produces
        finally:
            await conn.close()
            await cluster_nc.close()


async def send_slowly(producer: Producer, count: int, key: bytes | None = None) -> list[RecordFuture]:
    futures = []
    for _ in range(count):
        futures.append(await producer.send(TOPIC, VALUE, key=key))
        await asyncio.sleep(PAUSE_S)  # the rate limit: the sender sends each record's batch before the next record
    return futures


async def stall_orders_0(cluster: ScriptedCluster, producer: Producer) -> list[RecordFuture]:
    """Keyless records until broker 1 holds a full window of orders-0's batches and more of its records wait in
    the producer, and every partition has had a record (Kafka weighs partitions only once each has a queue)."""
    futures: list[RecordFuture] = []

    def stalled() -> bool:
        window_full = len(cluster.held) >= producer.config.max_in_flight_requests_per_connection
        in_flight = sum(records for _, _, records in cluster.held)
        queued = sum(1 for f in futures if f.partition == 0) - in_flight
        return window_full and queued > 0 and {f.partition for f in futures} == set(range(PARTITIONS))

    while not stalled():
        futures += await send_slowly(producer, 1)
        assert len(futures) < 10 * RECORDS, "orders-0 never stalled"
    return futures


def shares(futures: list[RecordFuture]) -> dict[int, float]:
    counts = Counter(future.partition for future in futures)
    return {p: counts[p] / len(futures) for p in range(PARTITIONS)}


def test_keyless_records_at_a_low_rate_land_on_every_partition_in_real_shares() -> None:
    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        # Given a 3-partition topic and linger.ms 0, when 300 keyless records go one at a time
        futures = await send_slowly(producer, RECORDS)
        await producer.flush()
        # Then every record was acknowledged, and every partition got a real share of them
        offsets = sorted((f.result().partition, f.result().offset) for f in futures)
        assert len(set(offsets)) == RECORDS
        assert all(share >= SHARE_MIN for share in shares(futures).values()), shares(futures)
        # and the records of each partition are at offsets 0, 1, 2, ... (one batch per record: nothing batched)
        for p in range(PARTITIONS):
            assert [o for q, o in offsets if q == p] == list(range(cluster.next_offsets[p]))

    asyncio.run(scenario(config(), test))


def test_keyed_records_keep_their_partition_unless_partitioner_ignore_keys() -> None:
    key = b"customer-42"
    expected = partition_for_key(key, PARTITIONS)

    async def keyed(cluster: ScriptedCluster, producer: Producer) -> None:
        # Given the default partitioner.ignore.keys=false, when 60 records with one key go
        futures = await send_slowly(producer, 60, key=key)
        await producer.flush()
        # Then all land on murmur2's partition for the key
        assert {f.partition for f in futures} == {expected}

    async def ignored(cluster: ScriptedCluster, producer: Producer) -> None:
        # Given partitioner.ignore.keys=true, when 300 records with one key go
        futures = await send_slowly(producer, RECORDS, key=key)
        await producer.flush()
        # Then they spread over every partition as keyless records do
        assert all(share >= SHARE_MIN for share in shares(futures).values()), shares(futures)

    asyncio.run(scenario(config(), keyed))
    asyncio.run(scenario(config(partitioner_ignore_keys=True), ignored))


def test_a_partition_whose_leader_takes_nothing_gets_no_new_records_after_the_availability_timeout() -> None:
    timeout_ms = 200

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        # Given broker 1 (leader of orders-0) holding every produce: once five are in flight, orders-0 takes nothing
        cluster.held_brokers.add(1)
        futures = await stall_orders_0(cluster, producer)
        # When its window has been full for longer than partitioner.availability.timeout.ms
        full_at = time.monotonic()
        await until(lambda: time.monotonic() > full_at + 2 * timeout_ms / 1000, "the availability timeout to pass")
        later = await send_slowly(producer, RECORDS)
        # Then, once the sticky partition has switched (at most twice batch.size: 5 records), orders-0 gets no
        # new record, and the other two share the rest
        assert [f.partition for f in later[5:]].count(0) == 0
        assert {f.partition for f in later[5:]} == {1, 2}
        await cluster.release()
        await producer.flush()
        assert all(f.done() and f.exception() is None for f in futures + later)

    asyncio.run(scenario(config(partitioner_availability_timeout_ms=timeout_ms), test))


def test_a_stalled_partition_gets_a_smaller_share_with_adaptive_partitioning_and_a_full_one_without() -> None:
    async def stalled_share(cluster: ScriptedCluster, producer: Producer) -> None:
        # Given broker 1 holding every produce, so that orders-0's batches pile up in the producer
        cluster.held_brokers.add(1)
        await stall_orders_0(cluster, producer)
        # When 300 more records go
        later = await send_slowly(producer, RECORDS)
        results.append(shares(later))
        await cluster.release()
        await producer.flush()

    results: list[dict[int, float]] = []
    asyncio.run(scenario(config(partitioner_adaptive_partitioning_enable=False), stalled_share))
    asyncio.run(scenario(config(), stalled_share))
    uniform, adaptive = results
    # Then without adaptive partitioning orders-0 keeps a real share; with it (the default), orders-0, whose queue is
    # the longest, gets less than either other partition
    assert uniform[0] >= SHARE_MIN, uniform
    assert adaptive[0] < min(adaptive[1], adaptive[2]), adaptive
