"""Failover as the clients see it: a request in flight to a leader that the metadata shows gone ends at once and
goes to the new leader with the same producer id, epoch and sequence; a broker nobody serves fails a request at
once; delivery.timeout.ms bounds every record; every error Kafka's clients retry is retried; `send` waits for a
topic's metadata up to max.block.ms; a consumer's fetch to a dead leader ends when the leadership moves.

Method: a real nats-server, the real Producer, Consumer and ClusterConnection, and a scripted cluster on the other
end: NATS subscribers that answer metadata as the test sets it (which broker leads orders-0, at which leader
epoch, which broker is fenced or registered again) and, for brokers 1 and 2, hold each produce and fetch request
or answer it by the test's rule. Each scenario's old behaviour waited request.timeout.ms (30 s and more); the
bounds asserted here are a few seconds, so they tell the behaviours apart without timing the code. Every wait is
on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from hightide.client.bench_nats import LocalNatsCluster
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer, ConsumerConfig
from hightide.client.producer import ProduceFailed, Producer, ProducerConfig
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import encode_batch, iter_batch_headers
from hightide.protocol.subjects import BrokerApi, ControllerApi, any_broker_metadata, broker_api, controller_api

CLUSTER = "failover"
TOPIC = "orders"
DEADLINE_S = 20.0
# Well under any request.timeout.ms used here (the old wait), well over what the new behaviour needs (a few
# retry.backoff.ms and metadata round trips): it tells the behaviours apart on a loaded machine.
PROMPTLY_S = 5.0
DELIVERY_BOUND_S = 1.0  # how late past delivery.timeout.ms a failure may surface


@dataclass
class Produce:
    broker: int
    msg: Msg
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int
    arrived_at: float

    @property
    def identity(self) -> tuple[int, int, int]:
        return self.producer_id, self.producer_epoch, self.base_sequence


Rule = Callable[[Produce], ErrorCode | None]  # the answer to a produce, or None: hold it


@dataclass
class ScriptedCluster:
    """Brokers 1 and 2 of a cluster whose metadata and answers the test decides."""

    nc: Client
    leader: int = 1
    leader_epoch: int = 0
    broker_epochs: dict[int, int] = field(default_factory=lambda: {1: 10, 2: 20})
    fenced: set[int] = field(default_factory=set)
    topic_known: bool = True
    metadata_offset: int = 100
    metadata_requests: int = 0
    rule: Rule = lambda _produce: None
    arrivals: list[Produce] = field(default_factory=list)
    waiting: list[Produce] = field(default_factory=list)
    next_offset: int = 0
    fetch_records: dict[int, bytes] = field(default_factory=dict)  # what each broker's fetch answers; absent: hold
    fetches: list[int] = field(default_factory=list)  # the broker of each fetch, in arrival order
    held: list[Msg] = field(default_factory=list)
    subscriptions: dict[int, list[Subscription]] = field(default_factory=dict)

    async def start(self) -> None:
        await self.nc.subscribe(any_broker_metadata(CLUSTER), cb=self._metadata)
        await self.nc.subscribe(controller_api(CLUSTER, ControllerApi.INIT_PRODUCER_ID), cb=self._producer_id)
        for broker in (1, 2):
            self.subscriptions[broker] = [
                await self.nc.subscribe(broker_api(CLUSTER, broker, BrokerApi.PRODUCE), cb=self._produce(broker)),
                await self.nc.subscribe(broker_api(CLUSTER, broker, BrokerApi.FETCH), cb=self._fetch(broker)),
                await self.nc.subscribe(broker_api(CLUSTER, broker, BrokerApi.LIST_OFFSETS), cb=self._list_offsets),
            ]
        await self.nc.flush()

    async def stop_serving(self, broker: int) -> None:
        """What a kill -9 leaves on NATS: no subscription of the broker's, so a new request finds no responder."""
        for subscription in self.subscriptions.pop(broker):
            await subscription.unsubscribe()
        await self.nc.flush()

    def move_leadership(self, to: int, *, fence: int | None = None) -> None:
        """The controller's election: a new leader and leader epoch, newer metadata."""
        self.leader, self.leader_epoch = to, self.leader_epoch + 1
        if fence is not None:
            self.fenced.add(fence)
        self.metadata_offset += 1

    def register_again(self, broker: int) -> None:
        """The broker restarted: a new broker epoch, same leadership."""
        self.broker_epochs[broker] += 100
        self.metadata_offset += 1

    def at(self, broker: int) -> list[Produce]:
        return [p for p in self.arrivals if p.broker == broker]

    async def _metadata(self, msg: Msg) -> None:
        self.metadata_requests += 1
        brokers = tuple(
            wire.BrokerMetadata(broker_id=b, broker_epoch=e, fenced=b in self.fenced, in_controlled_shutdown=False)
            for b, e in sorted(self.broker_epochs.items())
        )
        if self.topic_known:
            partition = wire.PartitionMetadata(
                partition=0,
                leader=self.leader,
                leader_epoch=self.leader_epoch,
                partition_epoch=self.leader_epoch,
                replicas=(1, 2),
                isr=(self.leader,),
            )
            topic = wire.TopicMetadata(name=TOPIC, topic_id="t", partitions=(partition,))
        else:
            topic = wire.TopicMetadata(name=TOPIC, error=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        answer = wire.MetadataResponse(brokers=brokers, topics=(topic,), metadata_offset=self.metadata_offset)
        await msg.respond(wire.encode(answer))

    async def _producer_id(self, msg: Msg) -> None:
        await msg.respond(wire.encode(wire.InitProducerIdResponse(producer_id=7, producer_epoch=0)))

    def _produce(self, broker: int) -> Callable[[Msg], Awaitable[None]]:
        async def on_produce(msg: Msg) -> None:
            request = wire.decode(wire.ProduceRequest, msg.data)
            ((_, header),) = list(iter_batch_headers(request.partitions[0].records))
            produce = Produce(
                broker,
                msg,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.record_count,
                time.monotonic(),
            )
            self.arrivals.append(produce)
            error = self.rule(produce)
            if error is None:
                self.waiting.append(produce)
            else:
                await self.answer(produce, error)

        return on_produce

    async def answer(self, produce: Produce, error: ErrorCode) -> None:
        if produce in self.waiting:
            self.waiting.remove(produce)
        base_offset = -1
        if error is ErrorCode.NONE:
            base_offset, self.next_offset = self.next_offset, self.next_offset + produce.records
        result = wire.ProducePartitionResponse(topic=TOPIC, partition=0, error=int(error), base_offset=base_offset)
        await produce.msg.respond(wire.encode(wire.ProduceResponse(partitions=(result,))))

    def _fetch(self, broker: int) -> Callable[[Msg], Awaitable[None]]:
        async def on_fetch(msg: Msg) -> None:
            self.fetches.append(broker)
            records = self.fetch_records.get(broker)
            if records is None:
                self.held.append(msg)  # a dead leader: the fetch is never answered
                return
            request = wire.decode(wire.FetchRequest, msg.data)
            asked = request.partitions[0]
            data = records if asked.fetch_offset == 0 else b""
            high_watermark = max((h.next_offset for _, h in iter_batch_headers(records)), default=0)
            result = wire.FetchPartitionResponse(
                topic=TOPIC, partition=0, error=0, high_watermark=high_watermark, records=data
            )
            await msg.respond(wire.encode(wire.FetchResponse(partitions=(result,))))

        return on_fetch

    async def _list_offsets(self, msg: Msg) -> None:
        result = wire.ListOffsetsPartitionResponse(topic=TOPIC, partition=0, error=0, offset=0)
        await msg.respond(wire.encode(wire.ListOffsetsResponse(partitions=(result,))))


async def until(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)  # polling a condition with a deadline


def config(**overrides: int) -> ProducerConfig:
    """One record per batch, sent at once; Kafka's defaults otherwise (request.timeout.ms 30 s, retry.backoff.ms
    100 ms, delivery.timeout.ms 120 s) unless the test says."""
    values: dict[str, int] = {"linger_ms": 0, "batch_size": 1}
    values.update(overrides)
    return ProducerConfig(**values)  # type: ignore[arg-type]


Scenario = Callable[[ScriptedCluster, Producer], Awaitable[None]]


def run(test: Scenario, producer_config: ProducerConfig) -> None:
    async def main() -> None:
        async with LocalNatsCluster(1, jetstream=False) as server:
            scripted_nc = await nats.connect(server.urls[0])
            cluster = ScriptedCluster(scripted_nc)
            await cluster.start()
            conn = await ClusterConnection.open(server.urls[0], CLUSTER)
            try:
                async with Producer(conn, producer_config) as producer:
                    await test(cluster, producer)
            finally:
                await conn.close()
                await scripted_nc.close()

    asyncio.run(main())


async def flushed(producer: Producer) -> None:
    await asyncio.wait_for(producer.flush(), DEADLINE_S)


def test_an_attempt_in_flight_to_a_leader_that_moved_ends_at_once_and_goes_to_the_new_leader_unchanged() -> None:
    """Given three batches in flight to broker 1, which never answers (killed with -9), when the metadata names
    broker 2 leader at a newer leader epoch and broker 1 fenced, then the attempts end long before
    request.timeout.ms, and broker 2 gets the same three batches, with the same producer id, epoch and
    sequences, one at a time in sequence order; the records get broker 2's offsets in send order."""

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        futures = [await producer.send(TOPIC, b"%d" % i) for i in range(3)]
        await until(lambda: len(cluster.waiting) == 3, "three batches in flight to broker 1")
        cluster.rule = lambda p: ErrorCode.NONE if p.broker == 2 else None
        moved_at = time.monotonic()
        cluster.move_leadership(to=2, fence=1)
        await flushed(producer)
        assert [p.identity for p in cluster.at(2)] == [p.identity for p in cluster.at(1)]
        assert [p.base_sequence for p in cluster.at(2)] == [0, 1, 2]
        assert cluster.at(2)[0].arrived_at - moved_at < PROMPTLY_S
        assert [f.result().offset for f in futures] == [0, 1, 2]

    run(test, config(request_timeout_ms=120_000, delivery_timeout_ms=240_000))


def test_an_attempt_in_flight_to_a_leader_that_registered_again_goes_again_to_its_new_incarnation() -> None:
    """A leader killed and restarted before the controller moved its leadership: the old incarnation will never
    answer; the new broker epoch in the metadata ends the attempt and the same batch goes to broker 1 again."""

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        future = await producer.send(TOPIC, b"x")
        await until(lambda: len(cluster.waiting) == 1, "the batch in flight")
        cluster.rule = lambda _p: ErrorCode.NONE
        cluster.register_again(1)
        await flushed(producer)
        first, again = cluster.at(1)
        assert again.identity == first.identity
        assert again.arrived_at - first.arrived_at < PROMPTLY_S
        assert future.result().offset == 0

    run(test, config(request_timeout_ms=120_000, delivery_timeout_ms=240_000))


def test_an_attempt_whose_leader_is_unchanged_waits_for_its_answer() -> None:
    """The watch ends only what the metadata says is gone: a slow leader still named by the metadata is waited
    for (many metadata refreshes later), and its answer is taken."""

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        future = await producer.send(TOPIC, b"x")
        await until(lambda: len(cluster.waiting) == 1, "the batch in flight")
        refreshes = cluster.metadata_requests
        await until(lambda: cluster.metadata_requests >= refreshes + 5, "the producer watching the metadata")
        assert len(cluster.arrivals) == 1, "the attempt was not given up"
        await cluster.answer(cluster.waiting[0], ErrorCode.NONE)
        await flushed(producer)
        assert future.result().offset == 0

    run(test, config())


def test_a_leader_nobody_serves_refuses_at_once_and_the_record_waits_for_the_next_leader() -> None:
    """Broker 1 is gone from NATS (no responders) while the metadata still names it: each attempt fails at once
    (NETWORK_EXCEPTION, retried every retry.backoff.ms with fresh metadata), and once broker 2 leads, the record
    is acknowledged by it."""

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        await cluster.stop_serving(1)
        cluster.rule = lambda _p: ErrorCode.NONE
        future = await producer.send(TOPIC, b"x")
        refreshes = cluster.metadata_requests
        await until(lambda: cluster.metadata_requests >= refreshes + 3, "retries with fresh metadata")
        assert not future.done()
        cluster.move_leadership(to=2, fence=1)
        await flushed(producer)
        assert future.result().offset == 0
        assert [p.broker for p in cluster.arrivals] == [2]

    run(test, config())


def test_a_record_whose_leader_nobody_serves_fails_definitely_at_its_delivery_timeout() -> None:
    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        await cluster.stop_serving(1)
        started = time.monotonic()
        future = await producer.send(TOPIC, b"x")
        await flushed(producer)
        elapsed = time.monotonic() - started
        error = future.exception()
        assert isinstance(error, ProduceFailed) and error.error_code is ErrorCode.NETWORK_EXCEPTION
        assert not error.indefinite, "no broker ever got the batch"
        assert elapsed < 1.5 + DELIVERY_BOUND_S

    run(test, config(delivery_timeout_ms=1_500))


def test_delivery_timeout_fails_a_batch_in_flight_and_one_queued_behind_it_at_their_deadline() -> None:
    """Given a leader that never answers and one batch in flight at a time, the batch in flight fails at its
    delivery deadline as REQUEST_TIMED_OUT, indefinite (it may be in the log), and the batch queued behind it as
    REQUEST_TIMED_OUT, definite (never sent): at delivery.timeout.ms, not request.timeout.ms (30 s) later."""

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        started = time.monotonic()
        futures = [await producer.send(TOPIC, b"%d" % i) for i in range(2)]
        await flushed(producer)
        elapsed = time.monotonic() - started
        errors = [f.exception() for f in futures]
        assert all(isinstance(e, ProduceFailed) and e.error_code is ErrorCode.REQUEST_TIMED_OUT for e in errors)
        assert [getattr(e, "indefinite", None) for e in errors] == [True, False]
        assert len(cluster.arrivals) == 1
        assert 1.5 <= elapsed < 1.5 + DELIVERY_BOUND_S

    run(test, config(delivery_timeout_ms=1_500, max_in_flight_requests_per_connection=1))


def test_a_refusal_retried_until_the_delivery_timeout_fails_with_the_refusal() -> None:
    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        cluster.rule = lambda _p: ErrorCode.NOT_ENOUGH_REPLICAS
        started = time.monotonic()
        future = await producer.send(TOPIC, b"x")
        await flushed(producer)
        error = future.exception()
        assert isinstance(error, ProduceFailed) and error.error_code is ErrorCode.NOT_ENOUGH_REPLICAS
        assert not error.indefinite
        assert len(cluster.arrivals) > 3, "retried every retry.backoff.ms"
        assert time.monotonic() - started < 1.5 + DELIVERY_BOUND_S

    run(test, config(delivery_timeout_ms=1_500))


RETRIABLE = [
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
]


@pytest.mark.parametrize("refusal", RETRIABLE, ids=lambda e: e.name)
def test_every_error_kafkas_producer_retries_is_retried_with_the_same_sequence(refusal: ErrorCode) -> None:
    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        cluster.rule = lambda _p: refusal if len(cluster.arrivals) == 1 else ErrorCode.NONE
        future = await producer.send(TOPIC, b"x")
        await flushed(producer)
        assert future.result().offset == 0
        first, retried = cluster.arrivals
        assert retried.identity == first.identity

    run(test, config())


@pytest.mark.parametrize("refusal", [ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE], ids=lambda e: e.name)
def test_an_error_kafkas_producer_does_not_retry_fails_the_batch_at_once(refusal: ErrorCode) -> None:
    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        cluster.rule = lambda _p: refusal
        future = await producer.send(TOPIC, b"x")
        await flushed(producer)
        error = future.exception()
        assert isinstance(error, ProduceFailed) and error.error_code is refusal
        assert len(cluster.arrivals) == 1

    run(test, config())


def test_send_waits_for_a_topic_the_metadata_does_not_have_yet() -> None:
    """A broker that has just restarted may call a live topic unknown: `send` asks again every retry.backoff.ms
    (Kafka's waitOnMetadata) and goes on once the topic is known."""

    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        cluster.topic_known = False
        cluster.rule = lambda _p: ErrorCode.NONE
        sending = asyncio.ensure_future(producer.send(TOPIC, b"x"))
        refreshes = cluster.metadata_requests
        await until(lambda: cluster.metadata_requests >= refreshes + 3, "send asking for the topic again")
        assert not sending.done()
        cluster.topic_known = True
        future = await asyncio.wait_for(sending, DEADLINE_S)
        await flushed(producer)
        assert future.result().offset == 0

    run(test, config())


def test_send_gives_up_on_a_topic_unknown_for_max_block_ms() -> None:
    async def test(cluster: ScriptedCluster, producer: Producer) -> None:
        cluster.topic_known = False
        started = time.monotonic()
        with pytest.raises(ProduceFailed) as raised:
            await producer.send(TOPIC, b"x")
        elapsed = time.monotonic() - started
        assert raised.value.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "not present in metadata after 500 ms" in str(raised.value)
        assert 0.5 <= elapsed < 0.5 + DELIVERY_BOUND_S
        assert cluster.arrivals == []

    run(test, config(max_block_ms=500))


def test_a_fetch_in_flight_to_a_dead_leader_ends_when_the_leadership_moves() -> None:
    """Given a consumer whose fetch waits on broker 1, which never answers, when the metadata names broker 2,
    then the next poll brings broker 2's records long before request.timeout.ms (30 s)."""

    async def main() -> None:
        async with LocalNatsCluster(1, jetstream=False) as server:
            scripted_nc = await nats.connect(server.urls[0])
            cluster = ScriptedCluster(scripted_nc)
            await cluster.start()
            cluster.fetch_records[2] = encode_batch([b"a", b"b"], timestamps=0)
            conn = await ClusterConnection.open(server.urls[0], CLUSTER)
            consumer = Consumer(conn, ConsumerConfig())
            try:
                await conn.metadata((TOPIC,))
                consumer.assign({(TOPIC, 0): 0})
                polling = asyncio.ensure_future(poll_until_records(consumer))
                await until(lambda: 1 in cluster.fetches, "a fetch held by broker 1")
                moved_at = time.monotonic()
                cluster.move_leadership(to=2, fence=1)
                records = await asyncio.wait_for(polling, DEADLINE_S)
                assert time.monotonic() - moved_at < PROMPTLY_S
                assert [r.value for r in records] == [b"a", b"b"]
                assert cluster.fetches.count(1) == 1, "one fetch went to broker 1, and it was given up"
            finally:
                await consumer.close()
                await conn.close()
                await scripted_nc.close()

    asyncio.run(main())


async def poll_until_records(consumer: Consumer) -> list[object]:
    while True:
        records = await consumer.poll()
        if records:
            return list(records)


def test_the_cli_reports_a_record_send_refused_and_exits_1_without_a_traceback(tmp_path: Path) -> None:
    """`hightide produce` to a topic the metadata never knows: after max.block.ms the first record is reported
    with Kafka's error name, nothing later is sent, and the command exits 1."""

    async def main() -> None:
        async with LocalNatsCluster(1, jetstream=True) as server:
            scripted_nc = await nats.connect(server.urls[0])
            cluster = ScriptedCluster(scripted_nc, topic_known=False)
            await cluster.start()
            try:
                command = [sys.executable, "-m", "hightide.client.cli", "produce", TOPIC, "--count", "3",
                           "--print-acks", "--producer-property", "max.block.ms=300", "--nats-url", server.urls[0],
                           "--cluster-id", CLUSTER, "--data-dir", str(tmp_path)]  # fmt: skip
                process = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                out, err = await asyncio.wait_for(process.communicate(), 60)
            finally:
                await scripted_nc.close()
            assert process.returncode == 1, err
            lines = out.decode().splitlines()
            assert lines == ['{"value": "0", "key": null, "partition": null, "offset": null, '
                             '"error": "UNKNOWN_TOPIC_OR_PARTITION"}']  # fmt: skip
            assert "Traceback" not in err.decode()
            assert "not present in metadata after 300 ms" in err.decode()
            assert cluster.arrivals == []

    asyncio.run(main())
