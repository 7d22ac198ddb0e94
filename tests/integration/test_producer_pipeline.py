"""The producer keeps up to max.in.flight.requests.per.connection batches in flight per partition, and after a
refusal sends the refused window again one batch at a time in sequence order.

Method: a real nats-server, the real Producer and ClusterConnection, and a scripted leader on the other end: a
NATS subscriber that answers the cluster's metadata and InitProducerId requests and holds each produce request
until the test answers it, so the test decides what the leader says and in which order. Every wait is on a
condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from hightide.client.bench_nats import LocalNatsCluster
from hightide.client.connection import ClusterConnection
from hightide.client.producer import Producer, ProducerConfig
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import iter_batch_headers
from hightide.protocol.subjects import BrokerApi, ControllerApi, any_broker_metadata, broker_api, controller_api

CLUSTER = "pipeline"
TOPIC = "orders"
DEADLINE_S = 15.0


@dataclass
class Produce:
    msg: Msg
    base_sequence: int
    records: int


@dataclass
class ScriptedLeader:
    """Broker 1, leader of orders-0: holds produce requests for the test to answer."""

    nc: Client
    waiting: list[Produce] = field(default_factory=list)
    arrived: list[int] = field(default_factory=list)  # base sequences, in arrival order
    most_outstanding: int = 0
    next_offset: int = 0

    async def start(self) -> None:
        await self.nc.subscribe(any_broker_metadata(CLUSTER), cb=self._metadata)
        await self.nc.subscribe(broker_api(CLUSTER, 1, BrokerApi.METADATA), cb=self._metadata)
        await self.nc.subscribe(controller_api(CLUSTER, ControllerApi.INIT_PRODUCER_ID), cb=self._producer_id)
        await self.nc.subscribe(broker_api(CLUSTER, 1, BrokerApi.PRODUCE), cb=self._produce)
        await self.nc.flush()

    async def _metadata(self, msg: Msg) -> None:
        partition = wire.PartitionMetadata(
            partition=0, leader=1, leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,)
        )
        broker = wire.BrokerMetadata(broker_id=1, broker_epoch=0, fenced=False, in_controlled_shutdown=False)
        topic = wire.TopicMetadata(name=TOPIC, topic_id="t", partitions=(partition,))
        await msg.respond(wire.encode(wire.MetadataResponse(brokers=(broker,), topics=(topic,))))

    async def _producer_id(self, msg: Msg) -> None:
        await msg.respond(wire.encode(wire.InitProducerIdResponse(producer_id=7, producer_epoch=0)))

    async def _produce(self, msg: Msg) -> None:
        request = wire.decode(wire.ProduceRequest, msg.data)
        ((_, header),) = list(iter_batch_headers(request.partitions[0].records))
        self.waiting.append(Produce(msg, header.base_sequence, header.record_count))
        self.arrived.append(header.base_sequence)
        self.most_outstanding = max(self.most_outstanding, len(self.waiting))

    async def answer(self, produce: Produce, error: ErrorCode) -> None:
        self.waiting.remove(produce)
        base_offset = -1
        if error is ErrorCode.NONE:
            base_offset, self.next_offset = self.next_offset, self.next_offset + produce.records
        result = wire.ProducePartitionResponse(topic=TOPIC, partition=0, error=int(error), base_offset=base_offset)
        await produce.msg.respond(wire.encode(wire.ProduceResponse(partitions=(result,))))


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)  # polling a condition with a deadline


def one_record_per_batch() -> ProducerConfig:
    # Short timeouts only so that a failing test ends soon: the scripted leader answers within milliseconds.
    return ProducerConfig(
        linger_ms=0,
        batch_size=1,
        retry_backoff_ms=10,
        max_in_flight_requests_per_connection=5,
        request_timeout_ms=3_000,
        delivery_timeout_ms=8_000,
    )


async def scenario(test: Callable[[ScriptedLeader, Producer], object]) -> None:
    async with LocalNatsCluster(1, jetstream=False) as server:
        leader_nc = await nats.connect(server.urls[0])
        leader = ScriptedLeader(leader_nc)
        await leader.start()
        conn = await ClusterConnection.open(server.urls[0], CLUSTER)
        try:
            async with Producer(conn, one_record_per_batch()) as producer:
                await test(leader, producer)  # type: ignore[misc]
        finally:
            await conn.close()
            await leader_nc.close()


def test_five_batches_go_before_any_answer_and_no_more() -> None:
    async def test(leader: ScriptedLeader, producer: Producer) -> None:
        futures = [await producer.send(TOPIC, b"%d" % i) for i in range(8)]
        await until(lambda: len(leader.waiting) == 5, "five batches in flight")
        await producer.conn.nc.flush()  # anything more the producer had sent has reached the server by now
        await leader.nc.flush()
        assert leader.arrived == [0, 1, 2, 3, 4]
        while len(leader.arrived) < 8 or leader.waiting:
            await until(lambda: bool(leader.waiting), "a batch to answer")
            await leader.answer(leader.waiting[0], ErrorCode.NONE)
        await producer.flush()
        assert [f.result().offset for f in futures] == list(range(8))
        assert leader.most_outstanding == 5

    asyncio.run(scenario(test))


def test_a_refused_window_is_sent_again_one_batch_at_a_time_in_sequence_order() -> None:
    async def test(leader: ScriptedLeader, producer: Producer) -> None:
        futures = [await producer.send(TOPIC, b"%d" % i) for i in range(7)]
        await until(lambda: len(leader.waiting) == 5, "five batches in flight")
        first, *rest = list(leader.waiting)
        # What a new leader says: the first batch is not its partition's any more (retriable), and each later one
        # is out of order because the first never arrived.
        await leader.answer(first, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for produce in rest:
            await leader.answer(produce, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        retried_from = len(leader.arrived)
        while len(leader.arrived) < retried_from + 5:
            await until(lambda: bool(leader.waiting), "the next retried batch")
            assert len(leader.waiting) == 1, "retried batches go one at a time"
            await leader.answer(leader.waiting[0], ErrorCode.NONE)
        assert leader.arrived[retried_from:] == [0, 1, 2, 3, 4]
        while len(leader.arrived) < retried_from + 7 or leader.waiting:
            await until(lambda: bool(leader.waiting), "the batches after the retries")
            await leader.answer(leader.waiting[0], ErrorCode.NONE)
        await producer.flush()
        assert leader.arrived[retried_from + 5 :] == [5, 6]
        assert [f.result().offset for f in futures] == list(range(7))  # sent order is offset order

    asyncio.run(scenario(test))


def test_an_out_of_order_answer_without_an_earlier_refusal_fails_the_batch() -> None:
    async def test(leader: ScriptedLeader, producer: Producer) -> None:
        future = await producer.send(TOPIC, b"x")
        await until(lambda: len(leader.waiting) == 1, "the batch")
        await leader.answer(leader.waiting[0], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        await producer.flush()
        error = future.exception()
        assert error is not None and getattr(error, "error_code", None) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    asyncio.run(scenario(test))


# -- issue 14 (clustered NATS): one lost answer must not let later batches push its batch out of the dedup window --


def test_no_batch_goes_five_or_more_past_one_whose_answer_has_not_come() -> None:
    """Over NATS one answer can be lost alone (the leader's NATS node died) while later ones come back. The leader
    remembers its producer's last five batches, so the producer sends at most four batches past the oldest one
    without an outcome: when that one is sent again it is still a duplicate the leader recognises, not an
    OUT_OF_ORDER_SEQUENCE_NUMBER."""

    async def test(leader: ScriptedLeader, producer: Producer) -> None:
        futures = [await producer.send(TOPIC, b"%d" % i) for i in range(10)]
        await until(lambda: len(leader.waiting) == 5, "five batches in flight")
        stuck = leader.waiting[0]
        assert stuck.base_sequence == 0
        for _ in range(4):  # the later ones are answered; the first one's answer never comes
            await until(lambda: len(leader.waiting) > 1, "a later batch to answer")
            await leader.answer(leader.waiting[1], ErrorCode.NONE)
        await producer.conn.nc.flush()
        await leader.nc.flush()
        assert leader.arrived == [0, 1, 2, 3, 4], "no batch went five past the unanswered one"
        await leader.answer(stuck, ErrorCode.NONE)
        while len(leader.arrived) < 10 or leader.waiting:
            await until(lambda: bool(leader.waiting), "a batch to answer")
            await leader.answer(leader.waiting[0], ErrorCode.NONE)
        await producer.flush()
        assert all(f.exception() is None for f in futures)

    asyncio.run(scenario(test))
