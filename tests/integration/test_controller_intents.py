"""A controller decision and its events are one: the events are in the outbox before the metadata append, and the
history keeps exactly the decisions that committed.

Method: real controller services (`ControllerService`, each with its own NATS connection and its own outbox file,
as two processes have) on a real nats-server from tests/support/nats.py, driven over NATS by a test broker that
registers and heartbeats and by a create_topics request. The controller under test is frozen between its intent
and its append by holding its call to the metadata log (the append never reaches NATS until released): then it is
either killed there (its task cancelled: nothing more comes from it, as after kill -9) or released after a second
controller took over (its append is fenced by the stream). The outboxes are read back, rebuilt with
`hightide.audit.rebuild`, and compared with the metadata log replayed from the stream. Waits are conditions with
deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import pytest
import structlog
from nats.aio.client import Client

from hightide.audit.rebuild import PartitionState, rebuild
from hightide.controller.service import ControllerService, ControllerSettings
from hightide.core.controller import ControllerConfig
from hightide.core.metadata_image import MetadataImage
from hightide.protocol import events, wire
from hightide.protocol.envelope import Emitter, Envelope, decode_envelopes
from hightide.protocol.metadata import MetadataBatch
from hightide.protocol.subjects import ControllerApi, controller_api
from hightide.runtime.event_store import OutboxEventSink
from hightide.runtime.metadata_log import MetadataLog
from hightide.runtime.outbox import OutboxHeader, OutboxReader, OutboxWriter
from support.nats import NatsServer

CLUSTER = "intents"
LOG = structlog.get_logger("test")
DEADLINE_S = 30.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    running = NatsServer(tmp_path / "nats").start()
    yield running
    running.stop()


@dataclass
class Controller:
    """One controller process: its NATS connection, outbox and service, and a hold on its metadata log appends."""

    service: ControllerService
    nc: Client
    writer: OutboxWriter
    task: asyncio.Task[None] | None = None
    appends_held: asyncio.Event = field(default_factory=asyncio.Event)
    renewals_held: asyncio.Event = field(default_factory=asyncio.Event)
    append_reached: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def start(cls, url: str, controller_id: int, directory: Path) -> Controller:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=-1)
        header = OutboxHeader(CLUSTER, "controller", controller_id, f"controller-{controller_id}")
        writer = OutboxWriter.create(directory / f"controller-{controller_id}", header)
        sink = OutboxEventSink(CLUSTER, Emitter("controller", controller_id, header.incarnation), writer)
        settings = ControllerSettings(
            controller_id=controller_id, cluster_id=CLUSTER, config=ControllerConfig(), lease_ms=1_000
        )
        controller = cls(ControllerService(settings, nc, sink, LOG), nc, writer)
        controller.task = asyncio.create_task(controller.service.run())
        return controller

    def freeze_before_appending(self) -> None:
        """From now on, each metadata append waits (before it reaches NATS) until `release_appends`; the same for
        lease renewals when `renewals_held` is cleared too. A paused process does exactly this."""
        self.appends_held.clear()
        self.renewals_held.set()
        append, renew = self.service.metadata_log.append, self.service.leases.renew

        async def held_append(batch: MetadataBatch, expected_last_sequence: int) -> int:
            self.append_reached.set()
            await self.appends_held.wait()
            return await append(batch, expected_last_sequence)

        async def held_renew(lease: Any) -> Any:
            await self.renewals_held.wait()
            return await renew(lease)

        self.service.metadata_log.append = held_append  # type: ignore[method-assign]
        self.service.leases.renew = held_renew  # type: ignore[method-assign]

    def release_appends(self) -> None:
        self.appends_held.set()

    async def kill(self) -> None:
        """Nothing more from this process: its task is cancelled where it is, its outbox stays as it was."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.nc.close()

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.service.stopping.set()
            self.appends_held.set()
            self.renewals_held.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.task, 10)
        if not self.nc.is_closed:
            await self.nc.close()

    def envelopes(self) -> list[Envelope]:
        reader = OutboxReader(self.writer.path)
        try:
            return [e for record in reader.records(0) for e in decode_envelopes(record.data)]
        finally:
            reader.close()

    def events_of(self, kind: type[events.Event]) -> list[Any]:
        return [e.event for e in self.envelopes() if isinstance(e.event, kind)]


async def until(condition: Callable[[], Awaitable[bool] | bool], what: str) -> None:
    end = asyncio.get_running_loop().time() + DEADLINE_S
    while True:
        value = condition()
        if value if isinstance(value, bool) else await value:
            return
        assert asyncio.get_running_loop().time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)  # polling a condition with a deadline


async def ask(nc: Client, api: ControllerApi, request: wire.Wire, answer: type[wire.W], timeout_s: float = 5) -> wire.W:
    reply = await nc.request(controller_api(CLUSTER, api), wire.encode(request), timeout=timeout_s)
    return wire.decode(answer, reply.data)


async def an_active_broker(nc: Client) -> None:
    """Broker 1 registers and is unfenced, as a broker process does (the topic needs one active broker)."""
    registration = wire.BrokerRegistrationRequest(broker_id=1, incarnation_id="broker-1", previous_broker_epoch=-1)
    registered = await ask(nc, ControllerApi.REGISTER_BROKER, registration, wire.BrokerRegistrationResponse)
    assert registered.error == 0, registered
    heartbeat = wire.BrokerHeartbeatRequest(
        broker_id=1, broker_epoch=registered.broker_epoch, current_metadata_offset=10**9
    )
    answer = await ask(nc, ControllerApi.BROKER_HEARTBEAT, heartbeat, wire.BrokerHeartbeatResponse)
    assert answer.error == 0 and not answer.is_fenced, answer


def create_topic(name: str) -> wire.CreateTopicsRequest:
    return wire.CreateTopicsRequest(topics=(wire.CreatableTopic(name=name, num_partitions=1, replication_factor=1),))


async def metadata_log(nc: Client) -> tuple[int, MetadataImage, list[MetadataBatch]]:
    """The metadata log as the stream holds it: its last sequence, the image it makes, and its batches."""
    log = MetadataLog(nc, CLUSTER)
    end = await log.last_sequence()
    batches = [batch async for _, batch in log.read(0, until=end)]
    return end, MetadataImage().apply_all(r for b in batches for r in b.records), batches


def assert_history_is_the_log(history: list[Envelope], image: MetadataImage) -> None:
    """No decision without its events and no event without its decision: the rebuilt partitions and topics are
    exactly the metadata log's."""
    rebuilt = rebuild(history)
    assert rebuilt.anomalies == (), rebuilt.anomalies
    assert dict(rebuilt.partitions) == {
        (tp.topic, tp.partition): PartitionState(
            p.replicas, p.isr, p.elr, p.last_known_elr, p.leader, p.leader_epoch, p.partition_epoch
        )
        for tp, p in image.all_partitions()
    }
    kept_topics = {
        (e.event.topic, e.event.topic_id)
        for e in history
        if isinstance(e.event, events.TopicCreated)
        and (e.emitter, e.sequence) not in {(a.emitter, a.sequence) for a in rebuilt.abandoned}
    }
    assert kept_topics == {(name, topic_id) for name, topic_id in image.topic_ids.items()}


def test_a_controller_killed_between_its_intent_and_its_append_leaves_an_intent_the_history_ignores(
    tmp_path: Path, server: NatsServer
) -> None:
    """Given controller 1 frozen after writing the events of a topic creation to its outbox, before the append,
    when it is killed and controller 2 takes over and creates the topic again, then controller 1's outbox holds
    the intent at the offset where controller 2's takeover landed, the rebuilt history ignores it and equals the
    metadata log, and the topic has controller 2's topic id."""

    async def scenario() -> None:
        admin = await nats.connect(server.url)
        first = await Controller.start(server.url, 1, tmp_path)
        second: Controller | None = None
        try:
            await until(lambda: first.service.active, "controller 1 active")
            await an_active_broker(admin)
            first.freeze_before_appending()
            asked = asyncio.create_task(
                ask(admin, ControllerApi.CREATE_TOPICS, create_topic("orders"), wire.CreateTopicsResponse)
            )
            await until(first.append_reached.is_set, "controller 1 to reach its append")
            intents = first.events_of(events.TopicCreated)
            end, _, _ = await metadata_log(admin)
            assert [(e.topic, e.controller_epoch, e.metadata_offset) for e in intents] == [("orders", 1, end + 1)]
            await first.kill()
            with contextlib.suppress(Exception):
                await asked  # the client's request times out: it never learns the outcome
            second = await Controller.start(server.url, 2, tmp_path)
            await until(lambda: second is not None and second.service.active, "controller 2 active")
            (elected,) = second.events_of(events.ControllerElected)
            assert (elected.controller_epoch, elected.metadata_offset) == (2, end + 1)  # where the intent would be
            created = await ask(admin, ControllerApi.CREATE_TOPICS, create_topic("orders"), wire.CreateTopicsResponse)
            assert created.topics[0].error == 0, created
            _, image, _ = await metadata_log(admin)
            history = first.envelopes() + second.envelopes()
            rebuilt = rebuild(history)
            assert {
                (a.event_type, a.controller_epoch, a.metadata_offset, a.committed_below) for a in rebuilt.abandoned
            } == {
                ("TopicCreated", 1, end + 1, end + 1),
                ("PartitionChanged", 1, end + 1, end + 1),
            }
            assert_history_is_the_log(history, image)
            assert image.topic_ids["orders"] == created.topics[0].topic_id != intents[0].topic_id
        finally:
            await first.stop()
            if second is not None:
                await second.stop()
            await admin.close()

    asyncio.run(scenario())


def test_a_controller_whose_append_is_fenced_by_its_successor_reports_it_and_its_intent_is_ignored(
    tmp_path: Path, server: NatsServer
) -> None:
    """Given controller 1 frozen between the intent of a topic creation and its append, and unable to renew its
    lease, when controller 2 takes over and controller 1's append then reaches the stream, then the stream refuses
    it (the log moved on), controller 1 emits ControllerDeposed (append_fenced) after its intent and stands by, and
    the rebuilt history has no such topic, as the metadata log has none."""

    async def scenario() -> None:
        admin = await nats.connect(server.url)
        first = await Controller.start(server.url, 1, tmp_path)
        second: Controller | None = None
        try:
            await until(lambda: first.service.active, "controller 1 active")
            await an_active_broker(admin)
            first.freeze_before_appending()
            first.renewals_held.clear()  # a paused process renews nothing: its lease lapses
            asked = asyncio.create_task(
                ask(admin, ControllerApi.CREATE_TOPICS, create_topic("orders"), wire.CreateTopicsResponse)
            )
            await until(first.append_reached.is_set, "controller 1 to reach its append")
            second = await Controller.start(server.url, 2, tmp_path)
            await until(lambda: second is not None and second.service.active, "controller 2 active")
            first.release_appends()
            await until(lambda: bool(first.events_of(events.ControllerDeposed)), "controller 1 deposed")
            with contextlib.suppress(Exception):
                await asked
            kinds = [type(e.event).__name__ for e in first.envelopes()]
            assert kinds[-3:] == ["TopicCreated", "PartitionChanged", "ControllerDeposed"], kinds
            (deposed,) = first.events_of(events.ControllerDeposed)
            assert (deposed.controller, deposed.controller_epoch, deposed.reason) == (1, 1, "append_fenced")
            await until(lambda: not first.service.active, "controller 1 standing by")
            _, image, batches = await metadata_log(admin)
            assert image.topic("orders") is None
            assert [b.controller_epoch for b in batches if not b.records][-1] == 2  # controller 2's takeover batch
            history = first.envelopes() + second.envelopes()
            assert [a.event_type for a in rebuild(history).abandoned] == ["TopicCreated", "PartitionChanged"]
            assert_history_is_the_log(history, image)
        finally:
            await first.stop()
            if second is not None:
                await second.stop()
            await admin.close()

    asyncio.run(scenario())
