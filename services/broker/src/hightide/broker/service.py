"""The broker-replica service: NATS and a log directory around the replica manager.

Room: services/broker (wiring). Every rule of hosting replicas, serving produce and fetch and following leaders is
`hightide.core.replica_manager.ReplicaManager`, the object the simulator drives too. This module:

- decodes requests from NATS and hands them to the manager with the time (`Now`: the monotonic clock for timeouts,
  the wall clock for retention), one input at a time, from a bounded inbox, in one driving task;
- carries out the manager's effects in order (`DiskStorage` for the log directory, NATS for answers, follower
  fetches and AlterPartition, the event sink for events), flushing events to the outbox before any answer or
  request leaves, and hands a refused storage effect back to the manager; the periodic CheckpointHighWatermarks
  takes the offsets on the driving task and writes the files (their fsyncs) on a thread, as Kafka's scheduler does;
- follows the metadata log (a JetStream ordered consumer) into the `MetadataImage` the manager reads;
- runs the log cleaner (`log.cleaner.enable`): every `log.cleaner.backoff.ms` it prepares cleanings of the
  compacted logs, builds them on a thread (the driving task goes on serving), and swaps them in back on the driving
  task, reporting LogCompacted;
- lives: registers with the controller once it has read the metadata log as far as it went at start, heartbeats
  every `broker.heartbeat.interval.ms` (with the replicas whose storage failed), joins the queue group that answers
  clients' metadata requests only once the manager is caught up, and on SIGTERM shuts down under control.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from hightide.broker.groups import (
    GroupSettings,
    append_outcome,
    append_request,
    find_coordinator,
    leadership_changes,
    led_offsets_partitions,
    read_partition,
)
from hightide.broker.kafka_listener import KafkaListener, ListenerConfig
from hightide.broker.storage import DiskStorage
from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.effects import (
    CONTROLLER,
    AnswerFetch,
    AnswerProduce,
    AppendAsLeader,
    CheckpointHighWatermarks,
    Effect,
    Emit,
    Send,
    SendFetch,
    StorageEffect,
)
from hightide.core.group_coordinator import (
    AnswerGroup,
    AppendGroupRecords,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupEffect,
    LoadGroupPartition,
)
from hightide.core.metadata_image import MetadataImage
from hightide.core.partition import PartitionConfig
from hightide.core.replica_manager import (
    LogReadError,
    ReplicaManager,
    ReplicaManagerConfig,
    StorageOutcome,
    StorageRefusal,
    carry_out,
)
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.metadata import MetadataBatch
from hightide.protocol.subjects import (
    BROKER_QUEUE,
    BrokerApi,
    ControllerApi,
    any_broker_metadata,
    api_of,
    broker_api,
    broker_api_wildcard,
    controller_api,
)
from hightide.runtime.events import EventSink
from hightide.runtime.memory import freeze_long_lived
from hightide.runtime.metadata_log import MetadataLog
from hightide.runtime.metrics import BrokerMetrics
from hightide.runtime.rpc import Inbox, RequestFailed, reply, request
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.cleaner import CleaningJob
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError
from hightide.storage.manager import remove_log_dirs

TICK_INTERVAL_S: Final = 0.05
RESPONSE_OVERHEAD_BYTES: Final = 64 * 1024
REGISTRATION_RETRY_S: Final = 0.25
CLEANER_STOP_TIMEOUT_S: Final = 10.0
METADATA_STREAM_POLL_S: Final = 0.1  # waiting for a controller to make the metadata log


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    broker_id: int
    cluster_id: str
    data_dir: Path
    partition_config: PartitionConfig
    log_config: LogConfig
    log_defaults: dict[str, str] = field(default_factory=dict)  # topic-config defaults set for this broker
    broker_heartbeat_interval_ms: int = 2_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    log_retention_check_interval_ms: int = 300_000
    controller_request_timeout_ms: int = 5_000
    controlled_shutdown_timeout_ms: int = 30_000
    # Log compaction (issue 13): Kafka's log.cleaner.enable and log.cleaner.backoff.ms.
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    groups: GroupSettings = field(default_factory=GroupSettings)
    group_coordinator: GroupCoordinatorConfig = field(default_factory=GroupCoordinatorConfig)

    kafka_listener: ListenerConfig | None = None  # issue 15: `listeners` / `advertised.listeners`
    # Incremental fetch sessions (KIP-227) kept for followers as a leader; 0 turns them off.
    max_incremental_fetch_session_cache_slots: int = 1_000
    static_configs: dict[str, str] = field(default_factory=dict)  # the configs as given (DescribeConfigs' source)

    def manager_config(self, fetch_response_bytes_max: int) -> ReplicaManagerConfig:
        return ReplicaManagerConfig(
            broker_id=self.broker_id,
            partition=self.partition_config,
            log_defaults=self.log_defaults,
            replica_fetch_wait_max_ms=self.replica_fetch_wait_max_ms,
            replica_fetch_max_bytes=self.replica_fetch_max_bytes,
            replica_fetch_response_max_bytes=self.replica_fetch_response_max_bytes,
            replica_fetch_backoff_ms=self.replica_fetch_backoff_ms,
            replica_fetch_timeout_ms=self.replica_fetch_wait_max_ms + 5_000,
            fetch_response_bytes_max=fetch_response_bytes_max,
            log_retention_check_interval_ms=self.log_retention_check_interval_ms,
            replica_high_watermark_checkpoint_interval_ms=self.replica_high_watermark_checkpoint_interval_ms,
            max_incremental_fetch_session_cache_slots=self.max_incremental_fetch_session_cache_slots,
        )


@dataclass(frozen=True, slots=True)
class _FetchDone:
    """A follower fetch's answer (None: it failed) for the driving task."""

    leader: int
    fetch_id: int
    response: wire.FetchResponse | None


@dataclass(frozen=True, slots=True)
class _CleaningDone:
    """The cleaner thread finished building `jobs` (`error`: why it could not) for the driving task to commit."""

    jobs: list[tuple[TopicPartition, CleaningJob]]
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class _CheckpointRefused:
    """The disk refused the periodic checkpoint being written on a thread: for the driving task to hand on."""

    error: StorageError


@dataclass(frozen=True, slots=True)
class _AlterPartitionDone:
    request: wire.AlterPartitionRequest
    response: wire.AlterPartitionResponse


KAFKA_GROUP_REQUESTS: Final = (
    wire.FindCoordinatorRequest,
    wire.JoinGroupRequest,
    wire.SyncGroupRequest,
    wire.HeartbeatRequest,
    wire.LeaveGroupRequest,
    wire.OffsetCommitRequest,
    wire.OffsetFetchRequest,
    wire.ListGroupsRequest,
    wire.DescribeGroupsRequest,
    wire.DeleteGroupsRequest,
)
"""The group requests the Kafka listener hands to the coordinator (issue 15)."""


@dataclass(frozen=True, slots=True)
class _KafkaRequest:
    """A Kafka client's request, translated, for the driving task; `answer` gets the internal response."""

    api: BrokerApi
    body: wire.Wire
    answer: asyncio.Future[Any]


def now() -> Now:
    """Both clocks, read once."""
    return Now(MonoMs(time.monotonic_ns() // 1_000_000), WallMs(time.time_ns() // 1_000_000))


class BrokerService:
    def __init__(self, settings: BrokerSettings, nc: Client, events: EventSink, log: Any, metrics: Any = None) -> None:
        self.settings = settings
        self.id = settings.broker_id
        self.nc = nc
        self.events = events
        self.log = log
        self.metrics = metrics
        self.metadata_log = MetadataLog(nc, settings.cluster_id)
        self.inbox = Inbox()
        self.image = MetadataImage()
        self.storage = DiskStorage(settings.broker_id, settings.data_dir, settings.log_config)
        budget = max(nc.max_payload - RESPONSE_OVERHEAD_BYTES, 1)
        self.manager = ReplicaManager(settings.manager_config(budget), self.storage)
        self.incarnation_id = uuid.uuid4().hex
        self.fenced = True
        self.stopping = asyncio.Event()
        self.metadata_ready = asyncio.Event()
        self.registered = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._startup_target = 0
        # request id -> (its NATS message, or the Kafka listener's future, and whether it is a consumer's fetch)
        self._requests: dict[int, tuple[Msg | asyncio.Future[Any], bool]] = {}
        self._outgoing: list[tuple[Msg | asyncio.Future[Any], wire.Wire]] = []  # sent once its events are stored
        self._spawned = False  # a task was spawned (a follower fetch, an AlterPartition) during this input
        self.kafka = None if settings.kafka_listener is None else KafkaListener(settings.kafka_listener, self)
        self._request_ids = itertools.count(1)
        self._client_metadata: Subscription | None = None
        # The log cleaner: the jobs being built on a thread (at most one round at a time), and when to look next.
        self._cleaning: list[tuple[TopicPartition, CleaningJob]] | None = None
        self._cleaning_thread: asyncio.Future[None] | None = None
        self._next_cleaning_mono_ms = 0
        self._checkpointing: asyncio.Future[None] | None = None  # the periodic checkpoint being written on a thread
        self._handlers: dict[str, Callable[[Msg, Now], list[Effect] | wire.Response]] = {
            BrokerApi.PRODUCE: self._on_produce,
            BrokerApi.FETCH: self._on_fetch,
            BrokerApi.REPLICA_FETCH: self._on_replica_fetch,
            BrokerApi.LIST_OFFSETS: lambda msg, _: self.manager.list_offsets(
                wire.decode(wire.ListOffsetsRequest, msg.data)
            ),
            BrokerApi.OFFSETS_FOR_LEADER_EPOCH: lambda msg, _: self.manager.offsets_for_leader_epoch(
                wire.decode(wire.OffsetsForLeaderEpochRequest, msg.data)
            ),
            BrokerApi.METADATA: lambda msg, _: self.manager.metadata(wire.decode(wire.MetadataRequest, msg.data)),
        }
        self._init_groups()

    @property
    def ready(self) -> bool:
        return self.registered.is_set() and not self.fenced

    # -- the life cycle ------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Recover the logs, follow the metadata, register, serve; on stop, shut down cleanly."""
        self._open_logs()
        freeze_long_lived()  # the modules and the recovered logs: left out of every later full collection
        # The broker may start before any controller has made the metadata log; only a controller may make it.
        while not await self.metadata_log.stream_exists():
            await self._wait_stopping(METADATA_STREAM_POLL_S)
            if self.stopping.is_set():
                self.storage.close(self.manager.broker_epoch, clean=True)
                return
        self._startup_target = await self.metadata_log.last_sequence()
        if self._startup_target == 0:
            self.metadata_ready.set()
        own = await self.nc.subscribe(
            broker_api_wildcard(self.settings.cluster_id, self.id), cb=self.inbox.subscriber("request")
        )
        if self.kafka is not None:
            await self.kafka.start()  # before registering: the registration carries its advertised address
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                driver = group.create_task(self._drive())
                follower = group.create_task(self._follow_metadata())
                ticker = group.create_task(self._tick())
                await self._lifecycle()
                for task in (driver, follower, ticker, *self._tasks):
                    task.cancel()
        finally:
            if self.kafka is not None:
                await self.kafka.close()
            for subscription in (own, self._client_metadata):
                if subscription is not None:
                    with contextlib.suppress(Exception):
                        await subscription.unsubscribe()
            await self._stop_cleaning()
            if self._checkpointing is not None:  # its files are written before the shutdown's own (newer) ones
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._checkpointing)
            self.storage.close(self.manager.broker_epoch, clean=self.stopping.is_set())
            if self.stopping.is_set():
                self.log.info("clean_shutdown", broker_epoch=self.manager.broker_epoch)

    def _open_logs(self) -> None:
        at = now()
        reason, states = self.storage.open(at.wall_ms)
        for state in states:
            # What recovery left is announced before anything else happens to the replica.
            self._carry_out(self.manager.open_log(state, reason, at), at)
        previous = self.storage.previous_broker_epoch
        self.log.info("logs_recovered", partitions=len(states), previous_broker_epoch=previous)

    async def _lifecycle(self) -> None:
        await self._until_stopping(self.metadata_ready.wait())
        while not self.stopping.is_set() and not self.registered.is_set():
            await self._register()
        while not self.stopping.is_set():
            await self._heartbeat(want_shut_down=False)
            await self._wait_stopping(self.settings.broker_heartbeat_interval_ms / 1000)
        if self.registered.is_set():
            await self._controlled_shutdown()

    async def _until_stopping(self, awaitable: Any) -> None:
        waiter = asyncio.ensure_future(awaitable)
        stopper = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for task in (waiter, stopper):
            task.cancel()

    async def _wait_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _controller(
        self, api: ControllerApi, body: wire.Wire, kind: type[Any], timeout_ms: int | None = None
    ) -> Any:
        return await request(
            self.nc,
            controller_api(self.settings.cluster_id, api),
            body,
            kind,
            timeout_s=(timeout_ms or self.settings.controller_request_timeout_ms) / 1000,
            unavailable=ErrorCode.NOT_CONTROLLER,
        )

    async def _register(self) -> None:
        body = wire.BrokerRegistrationRequest(
            broker_id=self.id,
            incarnation_id=self.incarnation_id,
            previous_broker_epoch=self.storage.previous_broker_epoch,
            kafka_listener="" if self.kafka is None else self.kafka.advertised,
            directory_id=self.storage.directory_id,
        )
        try:
            answer = await self._controller(ControllerApi.REGISTER_BROKER, body, wire.BrokerRegistrationResponse)
        except RequestFailed as error:
            self.log.info("registration_retry", error=error.error_code.name)
            await self._wait_stopping(REGISTRATION_RETRY_S)
            return
        if answer.error_code is not ErrorCode.NONE:
            self.log.info("registration_refused", error=answer.error_code.name, message=answer.message)
            await self._wait_stopping(REGISTRATION_RETRY_S)
            return
        self.registered.set()
        # The metadata replayed up to here and the state it built live on: frozen too, before any traffic comes.
        frozen = freeze_long_lived()
        self.log.info("broker_registered", broker_epoch=answer.broker_epoch, gc_frozen_objects=frozen)
        await self.inbox.put("registered", answer.broker_epoch)

    async def _heartbeat(self, *, want_shut_down: bool) -> wire.BrokerHeartbeatResponse | None:
        body = wire.BrokerHeartbeatRequest(
            broker_id=self.id,
            broker_epoch=self.manager.broker_epoch,
            current_metadata_offset=self.image.next_offset,
            want_shut_down=want_shut_down,
            offline_replicas=tuple(
                wire.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in self.manager.offline_replicas
            ),
        )
        try:
            # A heartbeat must not wait longer than its interval: a paused ex-controller still in the queue group
            # may have taken it, and the next try should reach the active one before the session expires.
            answer: wire.BrokerHeartbeatResponse = await self._controller(
                ControllerApi.BROKER_HEARTBEAT,
                body,
                wire.BrokerHeartbeatResponse,
                timeout_ms=min(self.settings.controller_request_timeout_ms, self.settings.broker_heartbeat_interval_ms),
            )
        except RequestFailed as error:
            self.log.debug("heartbeat_failed", error=error.error_code.name)
            return None
        if answer.error_code is ErrorCode.STALE_BROKER_EPOCH:
            self.log.warning("heartbeat_stale_epoch", broker_epoch=self.manager.broker_epoch)
            return answer
        if answer.error_code is ErrorCode.NONE and self.fenced != answer.is_fenced:
            self.fenced = answer.is_fenced
            self.log.info("broker_fenced" if self.fenced else "broker_unfenced", broker_epoch=self.manager.broker_epoch)
        return answer

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leaderships away and take this broker out of every ISR, then stop."""
        self.log.info("controlled_shutdown_started", broker_epoch=self.manager.broker_epoch)
        deadline = time.monotonic() + self.settings.controlled_shutdown_timeout_ms / 1000
        while time.monotonic() < deadline:
            answer = await self._heartbeat(want_shut_down=True)
            if answer is not None and (answer.should_shut_down or answer.error_code is ErrorCode.STALE_BROKER_EPOCH):
                self.log.info("controlled_shutdown_completed")
                return
            await asyncio.sleep(0.1)  # the controller's pace: poll its answer, bounded by the deadline above
        self.log.warning("controlled_shutdown_timed_out")

    # -- inputs --------------------------------------------------------------------------------------------------

    async def _follow_metadata(self) -> None:
        async for sequence, batch in self.metadata_log.read(0):
            await self.inbox.put("metadata", (sequence, batch))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S)  # a timer: the cores' time moves on even when nothing arrives
            self.inbox.put_nowait("tick", None)

    async def _drive(self) -> None:
        """The one task that calls the manager: an input, then its effects (`carry_out` ends it with the poll)."""
        while True:
            envelope = await self.inbox.get()
            kind, payload = envelope.kind, envelope.payload
            at = now()
            if kind == "request":
                assert isinstance(payload, Msg)
                effects = self._serve(payload, at)
            elif kind == "metadata":
                assert isinstance(payload, tuple)
                effects = self._on_metadata_batch(payload[0], payload[1], at)
            elif kind == "kafka":
                assert isinstance(payload, _KafkaRequest)
                effects = self._serve_kafka(payload, at)
            elif kind == "registered":
                assert isinstance(payload, int)
                effects = self.manager.on_registered(payload, at)
            elif isinstance(payload, _FetchDone):
                if payload.response is None:
                    effects = self.manager.on_fetch_failed(payload.leader, payload.fetch_id, at)
                else:
                    effects = self.manager.on_fetch_response(payload.leader, payload.fetch_id, payload.response, at)
            elif isinstance(payload, _AlterPartitionDone):
                effects = self.manager.on_alter_partition_response(payload.request, payload.response, at)
            elif isinstance(payload, _CleaningDone):
                effects = []
                self._finish_cleaning(payload, at)
            elif isinstance(payload, _CheckpointRefused):
                effects = self._checkpoint_refused(payload, at)
            else:
                assert kind == "tick", kind
                effects = self.manager.tick(at)
                self.storage.flush_due(at.wall_ms)
                self._remove_deleted_logs(at)
                self._maybe_start_cleaning(at)
            self._carry_out(effects, at)
            self._groups_after_input(at, tick=kind == "tick", leadership=kind in ("metadata", "registered"))
            self.events.flush()  # the events of what just happened are in the outbox before any answer leaves
            answered = await self._deliver()
            await self._join_client_metadata()
            await self._let_out(answered)

    def _serve(self, msg: Msg, at: Now) -> list[Effect]:
        started = time.perf_counter()
        api = api_of(msg.subject)
        handler = self._handlers.get(api)
        effects: list[Effect] = []
        answer: wire.Response | None = None
        if handler is None:
            answer = wire.Response(error=int(ErrorCode.INVALID_REQUEST), message=f"unknown API {api[:64]}")
        else:
            try:
                outcome = handler(msg, at)
            except wire.InvalidRequest as error:
                outcome = wire.error_response(wire.RESPONSE_OF[api], error.error_code, str(error))
            if isinstance(outcome, list):
                effects = outcome
            else:
                answer = outcome
        if answer is not None:
            self._outgoing.append((msg, answer))
        if self.metrics is not None:
            error_name = "NONE" if answer is None else answer.error_code.name
            # Any token after `broker.<id>.` reaches here: one label for all unknown APIs bounds the series.
            request_label = api if handler is not None else "unknown"
            self.metrics.requests.observe(request_label, error_name, (time.perf_counter() - started) * 1000)
        return effects

    def _on_produce(self, msg: Msg, at: Now) -> list[Effect]:
        body = wire.decode(wire.ProduceRequest, msg.data)
        request_id = next(self._request_ids)
        self._requests[request_id] = (msg, False)
        return self.manager.on_produce(request_id, body, at)

    def _on_fetch(self, msg: Msg, at: Now) -> list[Effect]:
        """A consumer's fetch. A replica's goes to `replica_fetch`, a subject only brokers may publish on (NATS
        permissions), so a client cannot pose as a follower and move the ISR or the high watermark."""
        body = wire.decode(wire.FetchRequest, msg.data)
        if body.replica_id >= 0:
            raise wire.InvalidRequest(f"a fetch with replica_id {body.replica_id} must be sent to replica_fetch")
        return self._fetch_request(msg, body, at)

    def _on_replica_fetch(self, msg: Msg, at: Now) -> list[Effect]:
        body = wire.decode(wire.FetchRequest, msg.data)
        if body.replica_id < 0:
            raise wire.InvalidRequest("a replica_fetch needs the fetching broker's id as its replica_id")
        return self._fetch_request(msg, body, at)

    def _fetch_request(self, msg: Msg, body: wire.FetchRequest, at: Now) -> list[Effect]:
        request_id = next(self._request_ids)
        self._requests[request_id] = (msg, body.replica_id < 0)
        return self.manager.on_fetch(request_id, body, at)

    # -- the Kafka listener's requests (issue 15): the same manager calls as the NATS handlers -----------------

    async def kafka_request(self, api: BrokerApi, body: wire.Wire) -> Any:
        """Hand a Kafka client's request, translated, to the driving task; its internal answer."""
        return await (await self.kafka_submit(api, body))

    async def kafka_submit(self, api: BrokerApi, body: wire.Wire) -> asyncio.Future[Any]:
        """Hand a Kafka client's request to the driving task (in the order of the calls); the future of its answer."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.inbox.put("kafka", _KafkaRequest(api, body, answer))
        return answer

    def _serve_kafka(self, request: _KafkaRequest, at: Now) -> list[Effect]:
        started = time.perf_counter()
        body = request.body
        effects: list[Effect] = []
        if isinstance(body, wire.ProduceRequest):
            request_id = next(self._request_ids)
            self._requests[request_id] = (request.answer, False)
            effects = self.manager.on_produce(request_id, body, at)
        elif isinstance(body, wire.FetchRequest):
            request_id = next(self._request_ids)
            self._requests[request_id] = (request.answer, True)
            effects = self.manager.on_fetch(request_id, body, at)
        elif isinstance(body, wire.ListOffsetsRequest):
            self._outgoing.append((request.answer, self.manager.list_offsets(body)))
        elif isinstance(body, wire.OffsetsForLeaderEpochRequest):
            self._outgoing.append((request.answer, self.manager.offsets_for_leader_epoch(body)))
        elif isinstance(body, KAFKA_GROUP_REQUESTS):
            self._serve_kafka_group(request, at)
        else:
            assert isinstance(body, wire.MetadataRequest), body
            self._outgoing.append((request.answer, self.manager.metadata(body)))
        if self.metrics is not None:
            self.metrics.requests.observe(f"kafka.{request.api}", "NONE", (time.perf_counter() - started) * 1000)
        return effects

    def _on_metadata_batch(self, sequence: int, batch: MetadataBatch, at: Now) -> list[Effect]:
        self.image = self.image.apply_all(batch.records)
        if sequence >= self._startup_target:
            self.metadata_ready.set()
        return self.manager.on_metadata(self.image, at)

    async def _join_client_metadata(self) -> None:
        """Answer clients' metadata requests (any broker may) only once caught up with the metadata log: a broker
        that has just restarted would otherwise call a live topic unknown."""
        if self._client_metadata is None and self.manager.ready:
            self._client_metadata = await self.nc.subscribe(
                any_broker_metadata(self.settings.cluster_id), queue=BROKER_QUEUE, cb=self.inbox.subscriber("request")
            )
            self.log.info("serving_clients", metadata_offset=self.image.next_offset)

    # -- effects -------------------------------------------------------------------------------------------------

    def _carry_out(self, effects: list[Effect], at: Now) -> None:
        """Each effect in order (`carry_out`: a storage refusal goes back to the manager with the effects not yet
        carried out). Answers are queued for `_deliver`, which sends them after the events are in the outbox."""
        carry_out(self.manager, effects, at, storage=lambda effect: self._store(effect, at), deliver=self._deliver_one)

    def _store(self, effect: StorageEffect | CheckpointHighWatermarks, at: Now) -> StorageOutcome:
        if isinstance(effect, CheckpointHighWatermarks) and self._group is not None:
            self._checkpoint_on_thread()
            self._update_gauges()
            return StorageOutcome()
        try:
            outcome = self.storage.apply(effect, at.wall_ms)
        except StorageRefusal as refusal:
            self.log.warning("storage_refused", effect=type(effect).__name__, error=str(refusal)[:512])
            raise
        if self.metrics is not None and isinstance(effect, AppendAsLeader):
            self.metrics.bytes_in.inc(len(effect.records))
            self.metrics.messages_in.inc(sum(h.record_count for h in effect.headers))
        if isinstance(effect, CheckpointHighWatermarks):
            self._update_gauges()
        return outcome

    def _deliver_one(self, effect: Effect) -> None:
        match effect:
            case Emit(event=event):
                self.events.emit(event)
                self._count_isr_change(event)
            case AnswerProduce(request_id=request_id, response=response) if request_id in self._group_appends:
                self._append_results.append((self._group_appends.pop(request_id), append_outcome(response)))
            case AnswerProduce(request_id=request_id, response=response):
                msg, _ = self._requests.pop(request_id)
                self._outgoing.append((msg, response))
            case AnswerFetch(request_id=request_id, response=response):
                msg, consumer = self._requests.pop(request_id)
                if self.metrics is not None and consumer:
                    self.metrics.bytes_out.inc(sum(len(p.records) for p in response.partitions))
                self._outgoing.append((msg, response))
            case SendFetch(leader=leader, fetch_id=fetch_id, request=body):
                self._spawn(self._fetch(leader, fetch_id, body))
            case Send(destination=destination, message=message):
                assert destination == CONTROLLER
                self._spawn(self._alter_partition(message))
            case _:
                raise AssertionError(f"an effect the broker does not know: {effect!r}")

    async def _deliver(self) -> bool:
        """Send the answers of this input, after its events are in the outbox; whether there were any."""
        outgoing, self._outgoing = self._outgoing, []
        for target, answer in outgoing:
            if isinstance(target, Msg):
                await reply(self.nc, target, answer)
            elif not target.done():  # a Kafka listener's request (its connection may have gone)
                target.set_result(answer)
        return bool(outgoing)

    async def _let_out(self, answered: bool) -> None:
        """When more inputs wait, let this one's answers and requests leave before the next is taken: the NATS
        client's writes, the Kafka listener's answers and the follower fetches just spawned are tasks of this loop,
        and the inbox's `get` does not give way while it holds inputs (issue 15: an answer otherwise waited for
        every input queued behind it). One turn of the loop runs the answers' writers; a fetch task publishes its
        request in that turn and the NATS client writes it in the next."""
        spawned, self._spawned = self._spawned, False
        if not self.inbox.qsize() or not (answered or spawned):
            return
        await asyncio.sleep(0)
        if spawned:
            await asyncio.sleep(0)

    def _spawn(self, coroutine: Any) -> None:
        """A task of the service's group that shutdown cancels (fetches, AlterPartition calls)."""
        assert self._group is not None
        self._spawned = True
        task = self._group.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fetch(self, leader: int, fetch_id: int, body: wire.FetchRequest) -> None:
        """One follower fetch (Kafka's ReplicaFetcherThread's request): its answer, or its failure, goes back to
        the manager, which sends the next one."""
        subject = broker_api(self.settings.cluster_id, leader, BrokerApi.REPLICA_FETCH)
        timeout_s = (body.max_wait_ms + 5_000) / 1000
        response: wire.FetchResponse | None = None
        try:
            response = await request(self.nc, subject, body, wire.FetchResponse, timeout_s=timeout_s)
        except RequestFailed as error:
            self.log.debug("fetch_failed", leader=leader, error=error.error_code.name)
        await self.inbox.put("fetch_response", _FetchDone(leader, fetch_id, response))

    async def _alter_partition(self, message: wire.AlterPartitionRequest) -> None:
        try:
            answer = await self._controller(ControllerApi.ALTER_PARTITION, message, wire.AlterPartitionResponse)
        except RequestFailed as error:
            self.log.info("alter_partition_unanswered", error=error.error_code.name, topic=message.topic)
            return  # the core sends it again after alter.partition.timeout.ms
        if answer.error_code is not ErrorCode.NONE:
            self.log.info(
                "alter_partition_refused",
                error=answer.error_code.name,
                topic=message.topic,
                partition=message.partition,
                new_isr=list(message.new_isr),
            )
        await self.inbox.put("alter_partition_response", _AlterPartitionDone(message, answer))

    # -- the periodic checkpoints ----------------------------------------------------------------------------------

    def _checkpoint_on_thread(self) -> None:
        """The manager's periodic CheckpointHighWatermarks: the offsets are taken now, on the driving task, and the
        files (two fsyncs each) written on a thread, as Kafka's scheduler writes them beside its request threads
        (issue 15: written here, they held every input of the broker for 15-90 ms every 5 s). A round still being
        written when the next falls due is not joined by another: the next due one takes the offsets of then."""
        if self._checkpointing is not None and not self._checkpointing.done():
            return
        write = self.storage.periodic_checkpoints()
        self._checkpointing = asyncio.get_running_loop().run_in_executor(None, write)
        self._spawn(self._report_checkpoint(self._checkpointing))

    async def _report_checkpoint(self, writing: asyncio.Future[None]) -> None:
        try:
            await asyncio.shield(writing)
        except StorageError as error:  # a written checkpoint needs nothing more from the driving task
            await self.inbox.put("checkpoint_refused", _CheckpointRefused(error))

    def _checkpoint_refused(self, done: _CheckpointRefused, at: Now) -> list[Effect]:
        """A refused checkpoint goes to the manager as a refusal of its CheckpointHighWatermarks, exactly as one
        refused on the driving task would (`carry_out`: the StorageRefused events, then every replica offline)."""
        refusal = StorageRefusal(str(done.error), done.error.error_code)
        self.log.warning("storage_refused", effect="CheckpointHighWatermarks", error=str(refusal)[:512])

        def refuse(_: StorageEffect | CheckpointHighWatermarks) -> StorageOutcome:
            raise refusal

        carry_out(self.manager, [CheckpointHighWatermarks()], at, storage=refuse, deliver=self._deliver_one)
        return []

    def _remove_deleted_logs(self, at: Now) -> None:
        """The dirs of deleted partitions whose file.delete.delay.ms has passed, removed on a thread, as Kafka's
        kafka-delete-logs task removes them beside its request threads: a large log's files take the file system a
        while to free, and nothing on the driving task reads them any more."""
        due = self.storage.deleted_logs_due(at.wall_ms)
        if due:
            self._spawn(self._remove_on_thread(due))

    async def _remove_on_thread(self, paths: list[Path]) -> None:
        failed = dict(await asyncio.to_thread(remove_log_dirs, paths))
        for path in paths:
            if path in failed:  # left for the next start, which removes every `-delete` dir it finds
                self.log.warning("deleted_log_not_removed", path=str(path), error=failed[path])
            else:
                self.log.info("deleted_log_removed", path=str(path))

    # -- the log cleaner (issue 13) -------------------------------------------------------------------------------

    def _maybe_start_cleaning(self, at: Now) -> None:
        """Kafka's CleanerThread loop: when no round is running and the backoff has passed, prepare a round of
        cleanings (on this task) and build it on a thread; the round's answer comes back through the inbox."""
        if not self.settings.log_cleaner_enable or self._cleaning is not None or self.stopping.is_set():
            return
        if at.mono_ms < self._next_cleaning_mono_ms:
            return
        self._next_cleaning_mono_ms = at.mono_ms + self.settings.log_cleaner_backoff_ms
        try:
            jobs = self.storage.prepare_cleanings(at.wall_ms)
        except StorageError as error:
            self.log.warning("log_cleaner_prepare_failed", error=str(error)[:512])
            return
        if jobs:
            self._cleaning = jobs
            self._spawn(self._build_cleanings(jobs))

    async def _build_cleanings(self, jobs: list[tuple[TopicPartition, CleaningJob]]) -> None:
        self._cleaning_thread = asyncio.get_running_loop().run_in_executor(None, _build_all, jobs)
        error: BaseException | None = None
        try:
            await asyncio.shield(self._cleaning_thread)
        except Exception as failure:  # the round's failure is reported and its files discarded by the driver
            error = failure
        await self.inbox.put("cleaning_done", _CleaningDone(jobs, error))

    def _finish_cleaning(self, done: _CleaningDone, at: Now) -> None:
        self._cleaning, self._cleaning_thread = None, None
        if done.error is not None:
            for _, job in done.jobs:
                job.discard()
            self.log.warning("log_cleaner_failed", error=str(done.error)[:512])
            return
        try:
            compacted = self.storage.commit_cleanings(done.jobs, at.wall_ms)
        except StorageError as error:
            self.log.warning("log_cleaner_swap_failed", error=str(error)[:512])
            compacted = []
        for event in compacted:
            self.events.emit(event)
        if compacted:
            self._next_cleaning_mono_ms = at.mono_ms  # more may be dirty: look again at the next tick (Kafka)

    async def _stop_cleaning(self) -> None:
        """At shutdown: ask a round being built to stop, wait for its thread (it stops at its next batch), and
        delete what it wrote."""
        jobs, thread = self._cleaning, self._cleaning_thread
        if jobs is None:
            return
        for _, job in jobs:
            job.abort()
        if thread is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(thread), CLEANER_STOP_TIMEOUT_S)
        for _, job in jobs:
            job.discard()
        self._cleaning = None

    # -- the group coordinator (issue 13): hightide.broker.groups translates, the core decides ---------------------

    def _init_groups(self) -> None:
        self.coordinator = GroupCoordinator(self.id, self.settings.group_coordinator)
        self._group_requests: dict[int, Msg | asyncio.Future[Any]] = {}  # request id -> its message (or listener's)
        self._group_appends: dict[int, int] = {}  # produce request id -> the coordinator's append id
        self._append_results: list[tuple[int, ErrorCode]] = []
        self._offsets_leadership: dict[int, int] = {}  # what the coordinator was told: partition -> leader epoch
        self._creating_offsets_topic = False
        self._handlers.update(
            {
                BrokerApi.FIND_COORDINATOR: self._on_find_coordinator,
                BrokerApi.JOIN_GROUP: lambda msg, at: self._group_request(
                    msg,
                    at,
                    lambda rid: self.coordinator.on_join_group(
                        rid, wire.decode(wire.JoinGroupRequest, msg.data), str(uuid.uuid4()), at
                    ),
                ),
                BrokerApi.SYNC_GROUP: lambda msg, at: self._group_request(
                    msg,
                    at,
                    lambda rid: self.coordinator.on_sync_group(rid, wire.decode(wire.SyncGroupRequest, msg.data), at),
                ),
                BrokerApi.HEARTBEAT: lambda msg, at: self._group_request(
                    msg,
                    at,
                    lambda rid: self.coordinator.on_heartbeat(rid, wire.decode(wire.HeartbeatRequest, msg.data), at),
                ),
                BrokerApi.LEAVE_GROUP: lambda msg, at: self._group_request(
                    msg,
                    at,
                    lambda rid: self.coordinator.on_leave_group(rid, wire.decode(wire.LeaveGroupRequest, msg.data), at),
                ),
                BrokerApi.OFFSET_COMMIT: lambda msg, at: self._group_request(
                    msg,
                    at,
                    lambda rid: self.coordinator.on_offset_commit(
                        rid, wire.decode(wire.OffsetCommitRequest, msg.data), at, self._partition_known
                    ),
                ),
                BrokerApi.DELETE_GROUPS: lambda msg, at: self._group_request(
                    msg,
                    at,
                    lambda rid: self.coordinator.on_delete_groups(
                        rid, wire.decode(wire.DeleteGroupsRequest, msg.data), at
                    ),
                ),
                BrokerApi.OFFSET_FETCH: lambda msg, _: self.coordinator.on_offset_fetch(
                    wire.decode(wire.OffsetFetchRequest, msg.data)
                ),
                BrokerApi.LIST_GROUPS: lambda msg, _: self.coordinator.on_list_groups(
                    wire.decode(wire.ListGroupsRequest, msg.data)
                ),
                BrokerApi.DESCRIBE_GROUPS: lambda msg, _: self.coordinator.on_describe_groups(
                    wire.decode(wire.DescribeGroupsRequest, msg.data)
                ),
            }
        )

    def _partition_known(self, topic: str, partition: int) -> bool:
        """Whether this broker's metadata has the partition (an offset commit for one it has not is refused)."""
        return self.image.partition(topic, partition) is not None

    def _group_request(self, msg: Msg, at: Now, call: Callable[[int], list[GroupEffect]]) -> list[Effect]:
        """A group request the coordinator may answer later: its message is kept under a request id."""
        request_id = next(self._request_ids)
        effects = call(request_id)  # decodes first: a bad body raises InvalidRequest before the id is kept
        self._group_requests[request_id] = msg
        self._carry_out_groups(effects, at)
        return []

    def _on_find_coordinator(self, msg: Msg, at: Now) -> wire.Response:
        del at
        answer, create = find_coordinator(
            self.image, wire.decode(wire.FindCoordinatorRequest, msg.data), self.settings.groups
        )
        if create and not self._creating_offsets_topic:
            self._creating_offsets_topic = True
            self._spawn(self._create_offsets_topic())
        return answer

    async def _create_offsets_topic(self) -> None:
        """Kafka's auto-creation of `__consumer_offsets` on the first FindCoordinator."""
        body = wire.CreateTopicsRequest(topics=(self.settings.groups.creatable_topic(),))
        try:
            answer = await self._controller(ControllerApi.CREATE_TOPICS, body, wire.CreateTopicsResponse)
            errors = [wire.error_code_of(t.error).name for t in answer.topics]
            self.log.info("offsets_topic_create", error=answer.error_code.name, topics=errors)
        except RequestFailed as error:
            self.log.info("offsets_topic_create_failed", error=error.error_code.name)
        finally:
            self._creating_offsets_topic = False

    def _groups_after_input(self, at: Now, *, tick: bool, leadership: bool) -> None:
        """After every input: appends that completed; after the metadata moved, leadership of `__consumer_offsets`
        partitions that changed (only the metadata changes who leads: the data path does not pay for the look);
        on a tick, whatever fell due (sessions, join phases)."""
        effects: list[GroupEffect] = []
        if leadership:
            led = led_offsets_partitions(self.manager)
            effects += leadership_changes(self.coordinator, self._offsets_leadership, led, at)
            self._offsets_leadership = led
        if tick:
            effects += self.coordinator.poll(at)
        self._carry_out_groups(effects, at)

    def _carry_out_groups(self, effects: list[GroupEffect], at: Now) -> None:
        """The coordinator's effects in order, and the outcomes of its appends as they come back."""
        queue = list(effects)
        while queue or self._append_results:
            if not queue:
                append_id, error = self._append_results.pop(0)
                queue = self.coordinator.on_append_done(append_id, error, at)
                continue
            effect = queue.pop(0)
            if isinstance(effect, AnswerGroup):
                self._outgoing.append((self._group_requests.pop(effect.request_id), effect.response))
            elif isinstance(effect, Emit):
                self.events.emit(effect.event)
            elif isinstance(effect, AppendGroupRecords):
                request_id = next(self._request_ids)
                self._group_appends[request_id] = effect.append_id
                body = append_request(effect, at, self.settings.groups.offsets_commit_timeout_ms)
                self._carry_out(self.manager.on_produce(request_id, body, at), at)
            else:
                assert isinstance(effect, LoadGroupPartition), effect
                try:
                    records = read_partition(self.storage, self.manager, effect.partition)
                except LogReadError as error:
                    self.log.warning("offsets_load_failed", partition=effect.partition, error=str(error)[:512])
                    continue
                loaded = self.coordinator.on_partition_loaded(effect.partition, effect.leader_epoch, records, at)
                self.log.info("offsets_partition_loaded", partition=effect.partition, records=len(records))
                queue = loaded + queue

    # -- the Kafka listener's group requests (issue 15): the same coordinator calls as the NATS handlers above ------

    def _serve_kafka_group(self, request: _KafkaRequest, at: Now) -> None:
        """A Kafka client's group request, translated: answered now (FindCoordinator, OffsetFetch, ListGroups,
        DescribeGroups) or kept under a request id until the coordinator answers, exactly as a NATS one."""
        body = request.body
        answer: wire.Response | None = None
        if isinstance(body, wire.FindCoordinatorRequest):
            answer, create = find_coordinator(self.image, body, self.settings.groups)
            if create and not self._creating_offsets_topic:
                self._creating_offsets_topic = True
                self._spawn(self._create_offsets_topic())
        elif isinstance(body, wire.OffsetFetchRequest):
            answer = self.coordinator.on_offset_fetch(body)
        elif isinstance(body, wire.ListGroupsRequest):
            answer = self.coordinator.on_list_groups(body)
        elif isinstance(body, wire.DescribeGroupsRequest):
            answer = self.coordinator.on_describe_groups(body)
        else:
            request_id = next(self._request_ids)
            self._group_requests[request_id] = request.answer
            self._carry_out_groups(self._kafka_group_call(request_id, body, at), at)
        if answer is not None:
            self._outgoing.append((request.answer, answer))

    def _kafka_group_call(self, request_id: int, body: wire.Wire, at: Now) -> list[GroupEffect]:
        if isinstance(body, wire.JoinGroupRequest):
            return self.coordinator.on_join_group(request_id, body, str(uuid.uuid4()), at)
        if isinstance(body, wire.SyncGroupRequest):
            return self.coordinator.on_sync_group(request_id, body, at)
        if isinstance(body, wire.HeartbeatRequest):
            return self.coordinator.on_heartbeat(request_id, body, at)
        if isinstance(body, wire.LeaveGroupRequest):
            return self.coordinator.on_leave_group(request_id, body, at)
        if isinstance(body, wire.OffsetCommitRequest):
            return self.coordinator.on_offset_commit(request_id, body, at, self._partition_known)
        assert isinstance(body, wire.DeleteGroupsRequest), body
        return self.coordinator.on_delete_groups(request_id, body, at)

    # -- metrics -------------------------------------------------------------------------------------------------

    def _count_isr_change(self, event: events.Event) -> None:
        """Kafka's IsrShrinksPerSec and IsrExpandsPerSec: a leader's proposed change, once committed."""
        if self.metrics is not None and isinstance(event, events.IsrChangeCompleted) and event.error == "NONE":
            count_isr_change(self.metrics, event)

    def _update_gauges(self) -> None:
        if self.metrics is None:
            return
        cores = self.manager.replicas.values()
        leaders = [core for core in cores if core.is_leader]
        self.metrics.partition_count.set(len(self.manager.replicas))
        self.metrics.leader_count.set(len(leaders))
        self.metrics.under_replicated_partitions.set(sum(1 for core in leaders if len(core.isr) < len(core.replicas)))


def _build_all(jobs: list[tuple[TopicPartition, CleaningJob]]) -> None:
    """The cleaner thread's work: build every job of the round (reads and writes files, touches no log)."""
    for _, job in jobs:
        job.build()


def count_isr_change(metrics: BrokerMetrics, completed: events.IsrChangeCompleted) -> None:
    """A committed ISR change, counted as Kafka's IsrShrinksPerSec or IsrExpandsPerSec."""
    if completed.error != "NONE":
        return
    if completed.change == "shrink":
        metrics.isr_shrinks.inc()
    elif completed.change == "expand":
        metrics.isr_expands.inc()
