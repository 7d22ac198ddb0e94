"""The broker-replica service: hosts replicas on disk, serves produce, fetch and offsets, and follows leaders.

Room: services/broker (wiring). The replication rules are `hightide.core.partition.Partition`; the log is
`hightide.storage`; this module connects them to NATS and the clock. Its parts:

- one driving task that alone calls the cores, taking inputs from a bounded inbox in order: requests (produce,
  fetch, list offsets, offsets for leader epoch, metadata), metadata log batches, fetch responses from the
  follower fetchers, AlterPartition answers, and ticks;
- the metadata follower: replays the metadata log (a JetStream ordered consumer) into a `MetadataImage`;
- the lifecycle: register with the controller once the metadata is read, heartbeat every
  `broker.heartbeat.interval.ms`, and on SIGTERM a controlled shutdown before a clean one;
- one follower fetcher per leader broker, fetching every partition it follows from that leader in one request;
- delayed fetches (Kafka's DelayedFetch): a fetch with nothing to return waits until new data or a HW change on
  one of its partitions, or `max_wait_ms`.

A restarted broker acts on partition state only after it has registered and read the metadata log past its own
registration: the controller moves a restarted broker's leaderships away before registering it, so the image then
never makes it lead from a stale state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from nats.aio.client import Client
from nats.aio.msg import Msg

from hightide.broker.replica import DiskReplica, Outputs
from hightide.core.clock import WallMs
from hightide.core.effects import CONTROLLER, Effect
from hightide.core.metadata_image import MetadataImage, PartitionRegistration
from hightide.core.partition import PartitionConfig
from hightide.core.producer_state import APPEND, Verdict, last_sequence, next_sequence
from hightide.core.truncation import offsets_for_leader_epoch
from hightide.protocol import messages, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.metadata import MetadataBatch
from hightide.protocol.records import iter_batch_headers
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
from hightide.runtime.metadata_log import MetadataLog
from hightide.runtime.rpc import Inbox, RequestFailed, reply, request
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError
from hightide.storage.manager import LogManager

TICK_INTERVAL_S: Final = 0.05
RESPONSE_OVERHEAD_BYTES: Final = 64 * 1024
REGISTRATION_RETRY_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    broker_id: int
    cluster_id: str
    data_dir: Path
    partition_config: PartitionConfig
    log_config: LogConfig
    broker_heartbeat_interval_ms: int = 2_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    log_retention_check_interval_ms: int = 300_000
    controller_request_timeout_ms: int = 5_000
    controlled_shutdown_timeout_ms: int = 30_000


@dataclass(slots=True)
class ParkedFetch:
    """A fetch waiting for data (Kafka's DelayedFetch)."""

    msg: Msg
    request: wire.FetchRequest
    deadline: float
    partitions: frozenset[TopicPartition]
    woken: bool = False  # one of its partitions appended or moved its high watermark since it was last read


@dataclass(slots=True)
class PendingProduceRequest:
    """A produce request some of whose partitions wait for the HW (acks=all)."""

    msg: Msg
    answers: dict[TopicPartition, wire.ProducePartitionResponse] = field(default_factory=dict)
    waiting: int = 0
    collecting: bool = True  # still reading the request's partitions: not complete even if none waits yet


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
        self.metadata_sequence = 0
        self.logs: LogManager | None = None
        self.replicas: dict[TopicPartition, DiskReplica] = {}
        self.views: dict[TopicPartition, PartitionRegistration] = {}
        self.broker_epochs: dict[int, int] = {}
        self.incarnation_id = uuid.uuid4().hex
        self.previous_broker_epoch = -1
        self.broker_epoch = -1
        self.fenced = True
        self.stopping = asyncio.Event()
        self.metadata_ready = asyncio.Event()
        self.registered = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        self._fetchers: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._parked: list[ParkedFetch] = []
        self._applied_configs: dict[str, dict[str, str]] = {}  # each hosted topic's configs as its replicas have them
        self._finished_produces: list[PendingProduceRequest] = []
        self._produces: dict[int, tuple[PendingProduceRequest, TopicPartition]] = {}
        self._request_ids = itertools.count(1)
        self._hw_told: dict[tuple[int, TopicPartition], int] = {}
        self._next_hw_checkpoint = 0.0
        self._next_retention = 0.0
        self._startup_target = 0
        self._handlers: dict[str, Callable[[Msg], Any]] = {
            BrokerApi.PRODUCE: self._on_produce,
            BrokerApi.FETCH: self._on_fetch,
            BrokerApi.LIST_OFFSETS: self._on_list_offsets,
            BrokerApi.OFFSETS_FOR_LEADER_EPOCH: self._on_offsets_for_leader_epoch,
            BrokerApi.METADATA: self._on_metadata,
        }

    @property
    def ready(self) -> bool:
        return self.registered.is_set() and not self.fenced

    # -- the life cycle ------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Recover the logs, follow the metadata, register, serve; on stop, shut down cleanly."""
        self._open_logs()
        await self.metadata_log.ensure_stream()  # the broker may start before any controller has
        self._startup_target = await self.metadata_log.last_sequence()
        if self._startup_target == 0:
            self.metadata_ready.set()
        subscriptions = [
            await self.nc.subscribe(
                broker_api_wildcard(self.settings.cluster_id, self.id), cb=self.inbox.subscriber("request")
            ),
            await self.nc.subscribe(
                any_broker_metadata(self.settings.cluster_id), queue=BROKER_QUEUE, cb=self.inbox.subscriber("request")
            ),
        ]
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                driver = group.create_task(self._drive())
                follower = group.create_task(self._follow_metadata())
                ticker = group.create_task(self._tick())
                await self._lifecycle()
                for task in (driver, follower, ticker, *self._tasks):
                    task.cancel()
                self._fetchers.clear()
        finally:
            for subscription in subscriptions:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
            self._close_logs()

    def _open_logs(self) -> None:
        now = _now_ms()
        self.logs = LogManager.open(
            self.settings.data_dir, self.settings.log_config, WallMs(now)
        )  # FIXME(issue 11, item 4)
        if self.logs.previous_clean_shutdown is not None:
            self.previous_broker_epoch = self.logs.previous_clean_shutdown.broker_epoch
        high_watermarks = self.logs.read_high_watermarks()
        reason = "recovered" if self.logs.previous_clean_shutdown is None else "clean_shutdown"
        for tp, partition_log in self.logs.logs.items():
            replica = DiskReplica.open(
                partition_log, self.id, self.settings.partition_config, high_watermarks.get(tp, 0)
            )
            replica.core.broker_epochs = self.broker_epochs
            self.replicas[tp] = replica
            # What recovery left (a torn tail cut, the HW from its checkpoint, the epochs cut at the LEO) is
            # announced before anything else happens to the replica: a history rebuilt from events needs no disk.
            self._apply(replica, replica.core.log_opened(reason), now)
        self.log.info("logs_recovered", partitions=len(self.replicas), previous_broker_epoch=self.previous_broker_epoch)

    def _close_logs(self) -> None:
        if self.logs is None:
            return
        if self.stopping.is_set():
            self.logs.checkpoint_high_watermarks()
            self.logs.shutdown(self.broker_epoch)
            self.log.info("clean_shutdown", broker_epoch=self.broker_epoch)
        self.logs = None

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
            broker_id=self.id, incarnation_id=self.incarnation_id, previous_broker_epoch=self.previous_broker_epoch
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
        self.broker_epoch = answer.broker_epoch
        self.registered.set()
        self.log.info("broker_registered", broker_epoch=self.broker_epoch)
        self.inbox.put_nowait("reconcile", None)

    async def _heartbeat(self, *, want_shut_down: bool) -> wire.BrokerHeartbeatResponse | None:
        body = wire.BrokerHeartbeatRequest(
            broker_id=self.id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.image.next_offset,
            want_shut_down=want_shut_down,
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
            self.log.warning("heartbeat_stale_epoch", broker_epoch=self.broker_epoch)
            return answer
        if answer.error_code is ErrorCode.NONE and self.fenced != answer.is_fenced:
            self.fenced = answer.is_fenced
            self.log.info("broker_fenced" if self.fenced else "broker_unfenced", broker_epoch=self.broker_epoch)
        return answer

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move leaderships away and take this broker out of every ISR, then stop."""
        self.log.info("controlled_shutdown_started", broker_epoch=self.broker_epoch)
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
        """The one task that calls the cores."""
        while True:
            envelope = await self.inbox.get()
            kind, payload = envelope.kind, envelope.payload
            if kind == "request":
                assert isinstance(payload, Msg)
                await self._serve(payload)
            elif kind == "metadata":
                assert isinstance(payload, tuple)
                self._on_metadata_batch(payload[0], payload[1])
            elif kind == "reconcile":
                self._reconcile()
            elif kind == "fetch_response":
                assert isinstance(payload, tuple)
                self._on_fetch_response(payload[0], payload[1])
                payload[2].set_result(None)
            elif kind == "alter_partition_response":
                self._on_alter_partition_response(payload)  # type: ignore[arg-type]
            elif kind == "tick":
                await self._on_tick()
            self.events.flush()  # the events of what just happened are in the outbox before any answer leaves
            await self._deliver()

    async def _serve(self, msg: Msg) -> None:
        started = time.perf_counter()
        api = api_of(msg.subject)
        handler = self._handlers.get(api)
        answer: wire.Response | None
        if handler is None:
            answer = wire.Response(error=int(ErrorCode.INVALID_REQUEST), message=f"unknown API {api[:64]}")
        else:
            try:
                answer = handler(msg)
            except wire.InvalidRequest as error:
                answer = wire.error_response(wire.RESPONSE_OF[api], error.error_code, str(error))
        if answer is not None:
            self.events.flush()
            await reply(self.nc, msg, answer)
        if self.metrics is not None:
            error_name = "NONE" if answer is None else answer.error_code.name
            # Any token after `broker.<id>.` reaches here: one label for all unknown APIs bounds the series.
            request_label = api if handler is not None else "unknown"
            self.metrics.requests.observe(request_label, error_name, (time.perf_counter() - started) * 1000)

    # -- metadata ------------------------------------------------------------------------------------------------

    def _on_metadata_batch(self, sequence: int, batch: MetadataBatch) -> None:
        self.image = self.image.apply_all(batch.records)
        self.metadata_sequence = sequence
        if sequence >= self._startup_target:
            self.metadata_ready.set()
        self._reconcile()

    def _reconcile(self) -> None:
        """Lead or follow every hosted partition as the image says (once registered and caught up)."""
        if not self.registered.is_set() or self.image.next_offset <= self.broker_epoch:
            return
        self.broker_epochs.clear()
        self.broker_epochs.update({b.broker_id: b.broker_epoch for b in self.image.brokers.values() if b.active})
        for replica in self.replicas.values():
            replica.core.local_broker_epoch = self.broker_epoch  # the leader's AlterPartition carries it
        now = _now_ms()
        hosted: set[TopicPartition] = set()
        for (topic, index), registration in self.image.all_partitions():
            if self.id not in registration.replicas:
                continue
            tp = TopicPartition(topic, index)
            hosted.add(tp)
            if self.views.get(tp) == registration:
                continue
            self.views[tp] = registration
            self._become(tp, registration, now)
        for tp in [tp for tp in self.replicas if tp not in hosted and tp.topic not in self.image.topic_ids]:
            self._delete_replica(tp)
        self._apply_topic_configs()
        self._start_fetchers()

    def _become(self, tp: TopicPartition, registration: PartitionRegistration, now: int) -> None:
        replica = self.replicas.get(tp) or self._create_replica(tp, now)
        core = replica.core
        if registration.leader == self.id:
            if registration.leader_epoch > core.leader_epoch:
                # A new leader knows its producers only from its log (Kafka keeps snapshots; we scan headers).
                replica.producers.rebuild(replica.log.batch_headers())
            effects = core.make_leader(
                registration.leader_epoch, registration.partition_epoch, registration.replicas, registration.isr, now
            )
            self._answer_fetches_of(registration.replicas)
        else:
            effects = core.make_follower(
                registration.leader,
                registration.leader_epoch,
                registration.partition_epoch,
                registration.replicas,
                registration.isr,
            )
        self._apply(replica, effects, now)

    def _configs_of(self, topic_name: str) -> tuple[LogConfig, PartitionConfig]:
        """The log and partition configs of a topic's replicas: the broker's defaults overridden by the topic's
        own configs, as in Kafka (the core reads min.insync.replicas per partition)."""
        topic = self.image.topic(topic_name)
        log_config, partition_config = self.settings.log_config, self.settings.partition_config
        if topic is None or not topic.configs:
            return log_config, partition_config
        log_names = LogConfig().to_properties()
        log_config = LogConfig.from_properties(
            {k: v for k, v in topic.configs.items() if k in log_names}, base=log_config
        )
        if "min.insync.replicas" in topic.configs:
            partition_config = replace(partition_config, min_insync_replicas=int(topic.configs["min.insync.replicas"]))
        return log_config, partition_config

    def _apply_topic_configs(self) -> None:
        """Give hosted replicas the configs their topics have now: logs recovered at start opened with the
        broker's defaults, and a topic config may be altered while its replicas are open."""
        for topic_name in {tp.topic for tp in self.replicas}:
            topic = self.image.topic(topic_name)
            configs = dict(topic.configs) if topic is not None else {}
            previous = self._applied_configs.get(topic_name)
            if previous == configs:
                continue
            self._applied_configs[topic_name] = configs
            log_config, partition_config = self._configs_of(topic_name)
            for tp, replica in self.replicas.items():
                if tp.topic == topic_name:
                    replica.log.update_config(log_config)
                    replica.core.config = partition_config
            if previous is not None:
                self.log.info("topic_configs_applied", topic=topic_name, configs=configs)

    def _create_replica(self, tp: TopicPartition, now: int) -> DiskReplica:
        assert self.logs is not None
        log_config, partition_config = self._configs_of(tp.topic)
        partition_log = self.logs.get_or_create_log(tp, WallMs(now), log_config)  # FIXME(issue 11, item 4)
        replica = DiskReplica.open(partition_log, self.id, partition_config, 0)
        replica.core.broker_epochs = self.broker_epochs
        replica.core.local_broker_epoch = self.broker_epoch
        self.replicas[tp] = replica
        self._apply(replica, replica.core.log_opened("created"), now)
        return replica

    def _delete_replica(self, tp: TopicPartition) -> None:
        assert self.logs is not None
        replica = self.replicas.pop(tp)
        self.views.pop(tp, None)
        with contextlib.suppress(StorageError):
            self.logs.delete_log(tp)
        self._apply(replica, replica.core.log_deleted("topic_deleted"), _now_ms())
        self.log.info("partition_deleted", topic=tp.topic, partition=tp.partition)

    # -- effects -------------------------------------------------------------------------------------------------

    def _apply(self, replica: DiskReplica, effects: list[Effect], now: int, validated: Any = None) -> Outputs:
        out = replica.apply(effects, now, validated)
        for event in out.events:
            self.events.emit(event)
        for send in out.sends:
            self._send(send.destination, send.message)
        for completion in out.completions:
            self._complete_produce(completion)
        if out.appended or out.high_watermark_moved:
            self._wake_parked(TopicPartition(replica.core.topic, replica.core.partition))
        return out

    def _send(self, destination: int, message: object) -> None:
        assert destination == CONTROLLER and isinstance(message, wire.AlterPartitionRequest), message
        self._spawn(self._alter_partition(message))

    def _spawn(self, coroutine: Any) -> None:
        """A task of the service's group that shutdown cancels (fetchers, AlterPartition calls)."""
        assert self._group is not None
        task = self._group.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _alter_partition(self, message: wire.AlterPartitionRequest) -> None:
        try:
            answer = await self._controller(ControllerApi.ALTER_PARTITION, message, wire.AlterPartitionResponse)
        except RequestFailed as error:
            self.log.info("alter_partition_unanswered", error=error.error_code.name, topic=message.topic)
            return  # the core sends it again after alter.partition timeout
        if answer.error_code is not ErrorCode.NONE:
            self.log.info(
                "alter_partition_refused",
                error=answer.error_code.name,
                topic=message.topic,
                partition=message.partition,
                new_isr=list(message.new_isr),
            )
        # The answer to this request: a top-level error carries no topic.
        response = answer.model_copy(update={"topic": message.topic, "partition": message.partition})
        await self.inbox.put("alter_partition_response", response)

    def _on_alter_partition_response(self, response: wire.AlterPartitionResponse) -> None:
        assert response.topic is not None and response.partition is not None
        replica = self.replicas.get(TopicPartition(response.topic, response.partition))
        if replica is not None:
            now = _now_ms()
            self._apply(replica, replica.core.on_alter_partition_response(response, now), now)

    async def _deliver(self) -> None:
        """Answer produce requests whose every partition is done (collected while effects were applied)."""
        done, self._finished_produces = self._finished_produces, []
        for pending in done:
            answers = tuple(pending.answers.values())
            await reply(self.nc, pending.msg, wire.ProduceResponse(partitions=answers))
        await self._answer_parked()

    # -- produce -------------------------------------------------------------------------------------------------

    def _on_produce(self, msg: Msg) -> None:
        request = wire.decode(wire.ProduceRequest, msg.data)
        pending = PendingProduceRequest(msg)
        now = _now_ms()
        for data in request.partitions:
            tp = TopicPartition(data.topic, data.partition)
            error, message = self._produce_partition(pending, tp, data.records, request, now)
            if error is not None:
                pending.answers[tp] = wire.ProducePartitionResponse(
                    topic=tp.topic, partition=tp.partition, error=int(error), message=message
                )
        pending.collecting = False
        if pending.waiting == 0:
            self._finished_produces.append(pending)

    def _produce_partition(
        self, pending: PendingProduceRequest, tp: TopicPartition, records: bytes, request: wire.ProduceRequest, now: int
    ) -> tuple[ErrorCode | None, str]:
        replica = self.replicas.get(tp)
        if replica is None or not replica.core.is_leader:
            known = self.image.partition(tp.topic, tp.partition) is not None
            return (ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ""
        if tp in pending.answers:
            return ErrorCode.INVALID_REQUEST, "the partition appears twice in the request"
        try:
            headers = replica.validate(records)
        except StorageError as error:
            return error.error_code, str(error)
        verdict = self._check_sequences(replica, headers)
        if verdict.kind == "error":
            return verdict.error, verdict.reason
        if verdict.kind == "duplicate":
            assert verdict.duplicate_of is not None
            # Kafka answers a retried batch it already has with the original offsets (DUPLICATE_SEQUENCE handling).
            pending.answers[tp] = wire.ProducePartitionResponse(
                topic=tp.topic, partition=tp.partition, error=0, base_offset=verdict.duplicate_of.first_offset
            )
            return None, ""
        count = sum(h.record_count for h in headers)
        base_offset = replica.core.log_end_offset
        request_id = next(self._request_ids)
        self._produces[request_id] = (pending, tp)
        pending.waiting += 1
        effects = replica.core.append_as_leader(request_id, records, count, request.acks, now, request.timeout_ms)
        out = self._apply(replica, effects, now, validated=headers)
        if out.appended:
            self._remember_sequences(replica, headers, base_offset)
        if self.metrics is not None:
            self.metrics.bytes_in.inc(len(records))
            self.metrics.messages_in.inc(count)
        return None, ""

    def _check_sequences(self, replica: DiskReplica, headers: list[Any]) -> Verdict:
        """The idempotent producer's check (KIP-98): the first batch against the table, the rest must continue it."""
        first = headers[0]
        if first.producer_id < 0:
            return APPEND
        if first.base_sequence < 0:
            # Kafka's LogValidator: an idempotent batch needs a sequence (and next_sequence asserts it has one).
            return Verdict("error", ErrorCode.INVALID_RECORD, reason=f"invalid sequence {first.base_sequence}")
        last_seq = last_sequence(first.base_sequence, first.last_offset_delta)
        verdict = replica.producers.check(first.producer_id, first.producer_epoch, first.base_sequence, last_seq)
        for header in headers[1:]:
            continues = header.producer_id == first.producer_id and header.base_sequence == next_sequence(last_seq)
            if verdict.kind != "append" or not continues:
                return Verdict("error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, reason="batches of one request")
            last_seq = last_sequence(header.base_sequence, header.last_offset_delta)
        return verdict

    def _remember_sequences(self, replica: DiskReplica, headers: list[Any], base_offset: int) -> None:
        offset = base_offset
        for header in headers:
            last = offset + header.last_offset_delta
            if header.producer_id >= 0:
                replica.producers.update(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    offset,
                    last,
                )
            offset = last + 1

    def _complete_produce(self, completion: Any) -> None:
        entry = self._produces.pop(completion.request_id, None)
        if entry is None:
            return
        pending, tp = entry
        replica = self.replicas.get(tp)
        pending.answers[tp] = wire.ProducePartitionResponse(
            topic=tp.topic,
            partition=tp.partition,
            error=int(completion.error),
            base_offset=completion.base_offset,
            log_start_offset=-1 if replica is None else replica.core.log_start_offset,
        )
        pending.waiting -= 1
        if pending.waiting == 0 and not pending.collecting:
            self._finished_produces.append(pending)

    # -- fetch ---------------------------------------------------------------------------------------------------

    def _on_fetch(self, msg: Msg) -> wire.FetchResponse | None:
        request = wire.decode(wire.FetchRequest, msg.data)
        response, ready = self._read_fetch(request)
        if ready or request.max_wait_ms == 0:
            return response
        deadline = time.monotonic() + request.max_wait_ms / 1000
        partitions = frozenset(TopicPartition(p.topic, p.partition) for p in request.partitions)
        self._parked.append(ParkedFetch(msg, request, deadline, partitions))
        return None

    def _read_fetch(self, request: wire.FetchRequest) -> tuple[wire.FetchResponse, bool]:
        """Answer every partition now; ready means the answer should go now rather than wait for data."""
        now = _now_ms()
        budget = min(request.max_bytes, self.nc.max_payload - RESPONSE_OVERHEAD_BYTES)
        answers: list[wire.FetchPartitionResponse] = []
        size = 0
        ready = False
        for fetch in request.partitions:
            tp = TopicPartition(fetch.topic, fetch.partition)
            answer = self._fetch_partition(request, fetch, tp, max(budget - size, 0), now)
            size += len(answer.records)
            answers.append(answer)
            ready = ready or answer.error != 0 or answer.diverging_epoch >= 0
            if request.replica_id >= 0 and answer.error == 0:
                told = self._hw_told.get((request.replica_id, tp))
                ready = ready or told != answer.high_watermark
                self._hw_told[(request.replica_id, tp)] = answer.high_watermark
        ready = ready or size >= max(request.min_bytes, 1)
        return wire.FetchResponse(partitions=tuple(answers)), ready

    def _fetch_partition(
        self, request: wire.FetchRequest, fetch: wire.FetchPartitionRequest, tp: TopicPartition, budget: int, now: int
    ) -> wire.FetchPartitionResponse:
        replica = self.replicas.get(tp)
        if replica is None:
            known = self.image.partition(tp.topic, tp.partition) is not None
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return wire.FetchPartitionResponse(topic=tp.topic, partition=tp.partition, error=int(error))
        core_fetch = messages.FetchPartition(
            topic=tp.topic,
            partition=tp.partition,
            fetch_offset=fetch.fetch_offset,
            current_leader_epoch=fetch.current_leader_epoch,
            last_fetched_epoch=fetch.last_fetched_epoch,
            log_start_offset=fetch.log_start_offset,
            max_bytes=min(fetch.partition_max_bytes, budget) if budget > 0 else 0,
        )
        effects = replica.core.on_fetch(request.replica_id, request.broker_epoch, core_fetch, now)
        out = self._apply(replica, effects, now)
        (answer,) = out.fetch_answers
        if self.metrics is not None and answer.records:
            self.metrics.bytes_out.inc(len(answer.records))
        return wire.FetchPartitionResponse(
            topic=tp.topic,
            partition=tp.partition,
            error=int(answer.error),
            high_watermark=answer.high_watermark,
            log_start_offset=answer.log_start_offset,
            log_end_offset=answer.log_end_offset,
            diverging_epoch=answer.diverging_epoch,
            diverging_end_offset=answer.diverging_end_offset,
            records=answer.records,
        )

    def _answer_fetches_of(self, replicas: tuple[int, ...]) -> None:
        """A partition's new followers have fetches parked here that do not name it: answer them now, so their
        next fetch does (else its first records wait a whole replica.fetch.wait.max.ms for the followers)."""
        for parked in self._parked:
            if parked.request.replica_id in replicas:
                parked.deadline = 0.0

    def _wake_parked(self, tp: TopicPartition) -> None:
        for parked in self._parked:
            if tp in parked.partitions:
                parked.woken = True  # read again at the end of this input, with everything it changed

    async def _answer_parked(self) -> None:
        """Answer the parked fetches that now have something (a consumer's only once the high watermark lets it
        read: an append alone does not answer it empty) or whose max wait is over; the rest stay parked."""
        for _ in range(3):  # reading a follower's fetch can move a high watermark and wake others: a few passes
            now = time.monotonic()
            if not any(p.woken or p.deadline <= now for p in self._parked):
                return
            answered: set[int] = set()
            for parked in list(self._parked):  # _read_fetch may wake entries of the list (never add any)
                if parked.woken or parked.deadline <= now:
                    parked.woken = False
                    response, ready = self._read_fetch(parked.request)
                    if ready or parked.deadline <= now:
                        answered.add(id(parked))
                        self.events.flush()  # reading a fetch emits (FetchServed, a moved HW)
                        await reply(self.nc, parked.msg, response)
            self._parked = [p for p in self._parked if id(p) not in answered]

    # -- follower fetchers ---------------------------------------------------------------------------------------

    def _followed_from(self, leader: int) -> list[DiskReplica]:
        return [r for r in self.replicas.values() if r.core.leader == leader and not r.core.is_leader]

    def _start_fetchers(self) -> None:
        assert self._group is not None
        leaders = {r.core.leader for r in self.replicas.values() if r.core.leader >= 0 and not r.core.is_leader}
        for leader in leaders - self._fetchers:
            self._fetchers.add(leader)
            self._spawn(self._fetch_from(leader))

    async def _fetch_from(self, leader: int) -> None:
        """Kafka's ReplicaFetcherThread for one leader: one request for every partition followed from it."""
        subject = broker_api(self.settings.cluster_id, leader, BrokerApi.FETCH)
        wait_ms = self.settings.replica_fetch_wait_max_ms
        try:
            while not self.stopping.is_set():
                followed = self._followed_from(leader)
                if not followed:
                    return
                body = wire.FetchRequest(
                    replica_id=self.id,
                    broker_epoch=self.broker_epoch,
                    max_wait_ms=wait_ms,
                    min_bytes=1,
                    max_bytes=self.settings.replica_fetch_response_max_bytes,
                    partitions=tuple(self._fetch_request_partition(r) for r in followed),
                )
                try:
                    response = await request(self.nc, subject, body, wire.FetchResponse, timeout_s=wait_ms / 1000 + 5.0)
                except RequestFailed as error:
                    self.log.debug("fetch_failed", leader=leader, error=error.error_code.name)
                    await self._wait_stopping(self.settings.replica_fetch_backoff_ms / 1000)
                    continue
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                await self.inbox.put("fetch_response", (leader, response, done))
                await self._applied_or_stopping(done)
                if response.error != 0 or any(p.error != 0 for p in response.partitions):
                    await self._wait_stopping(self.settings.replica_fetch_backoff_ms / 1000)
        finally:
            self._fetchers.discard(leader)

    async def _applied_or_stopping(self, done: asyncio.Future[None]) -> None:
        """Wait until the driver has applied a fetch response (the next fetch starts from what it changed), or the
        broker stops. The driver is cancelled at shutdown, and a fetcher may outlive its own cancellation: in
        Python 3.11 `asyncio.wait_for` (under `nc.request`) drops a cancel that lands as the reply arrives. Waiting
        for `done` alone then hangs the shutdown; once stopping, no next fetch follows, so nothing waits on it."""
        stopper: asyncio.Future[Any] = asyncio.ensure_future(self.stopping.wait())
        waiting: set[asyncio.Future[Any]] = {done, stopper}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()

    def _fetch_request_partition(self, replica: DiskReplica) -> wire.FetchPartitionRequest:
        fetch = replica.core.fetch_partition(self.settings.replica_fetch_max_bytes)
        return wire.FetchPartitionRequest(
            topic=fetch.topic,
            partition=fetch.partition,
            fetch_offset=fetch.fetch_offset,
            current_leader_epoch=fetch.current_leader_epoch,
            last_fetched_epoch=fetch.last_fetched_epoch,
            log_start_offset=fetch.log_start_offset,
            partition_max_bytes=fetch.max_bytes,
        )

    def _on_fetch_response(self, leader: int, response: wire.FetchResponse) -> None:
        now = _now_ms()
        for answer in response.partitions:
            replica = self.replicas.get(TopicPartition(answer.topic, answer.partition))
            if replica is None:
                continue
            try:
                batches = tuple(
                    messages.BatchSummary(h.base_offset, h.last_offset, h.partition_leader_epoch)
                    for _, h in iter_batch_headers(answer.records)
                )
            except Exception as error:  # a leader's bytes that do not parse: drop them, fetch again
                self.log.warning("fetched_records_unreadable", leader=leader, error=str(error))
                continue
            core_answer = messages.FetchResponsePartition(
                topic=answer.topic,
                partition=answer.partition,
                error=wire.error_code_of(answer.error),
                high_watermark=answer.high_watermark,
                log_start_offset=answer.log_start_offset,
                log_end_offset=answer.log_end_offset,
                diverging_epoch=answer.diverging_epoch,
                diverging_end_offset=answer.diverging_end_offset,
                records=answer.records,
                batches=batches,
            )
            try:
                self._apply(replica, replica.core.on_fetch_response(leader, core_answer, now), now)
            except StorageError as error:
                self.log.warning(
                    "follower_append_failed", topic=answer.topic, partition=answer.partition, error=str(error)
                )

    # -- offsets and metadata ------------------------------------------------------------------------------------

    def _on_list_offsets(self, msg: Msg) -> wire.ListOffsetsResponse:
        request = wire.decode(wire.ListOffsetsRequest, msg.data)
        return wire.ListOffsetsResponse(partitions=tuple(self._list_offset(p) for p in request.partitions))

    def _list_offset(self, query: wire.ListOffsetsPartition) -> wire.ListOffsetsPartitionResponse:
        tp = TopicPartition(query.topic, query.partition)
        replica = self.replicas.get(tp)
        base: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition}
        if replica is None or not replica.core.is_leader:
            return wire.ListOffsetsPartitionResponse(**base, error=int(self._not_leader_error(tp)))
        core = replica.core
        if query.current_leader_epoch >= 0 and query.current_leader_epoch != core.leader_epoch:
            error = (
                ErrorCode.FENCED_LEADER_EPOCH
                if query.current_leader_epoch < core.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
            return wire.ListOffsetsPartitionResponse(**base, error=int(error))
        if query.timestamp == wire.EARLIEST_TIMESTAMP:
            offset, timestamp = core.log_start_offset, -1
        elif query.timestamp == wire.LATEST_TIMESTAMP:
            offset, timestamp = core.high_watermark, -1
        elif query.timestamp < 0:
            return wire.ListOffsetsPartitionResponse(**base, error=int(ErrorCode.INVALID_REQUEST))
        else:
            found = replica.log.offset_for_timestamp(query.timestamp)
            if found is None or found[1] >= core.high_watermark:
                return wire.ListOffsetsPartitionResponse(**base, error=0)
            timestamp, offset = found
        epoch = core.epoch_cache.epoch_for_offset(offset) if offset < core.log_end_offset else core.leader_epoch
        return wire.ListOffsetsPartitionResponse(
            **base, error=0, timestamp=timestamp, offset=offset, leader_epoch=-1 if epoch is None else epoch
        )

    def _on_offsets_for_leader_epoch(self, msg: Msg) -> wire.OffsetsForLeaderEpochResponse:
        request = wire.decode(wire.OffsetsForLeaderEpochRequest, msg.data)
        answers = []
        for query in request.partitions:
            tp = TopicPartition(query.topic, query.partition)
            replica = self.replicas.get(tp)
            base: dict[str, Any] = {"topic": query.topic, "partition": query.partition}
            if replica is None or not replica.core.is_leader:
                answers.append(wire.EpochEndOffsetResponse(**base, error=int(self._not_leader_error(tp))))
                continue
            core = replica.core
            error, answer = offsets_for_leader_epoch(
                core.epoch_cache, core.log_end_offset, core.leader_epoch, query.current_leader_epoch, query.leader_epoch
            )
            answers.append(
                wire.EpochEndOffsetResponse(
                    **base, error=int(error), leader_epoch=answer.epoch, end_offset=answer.end_offset
                )
            )
        return wire.OffsetsForLeaderEpochResponse(partitions=tuple(answers))

    def _not_leader_error(self, tp: TopicPartition) -> ErrorCode:
        """Why this broker cannot answer for `tp` as its leader: Kafka's code for a partition it does not know."""
        known = self.image.partition(tp.topic, tp.partition) is not None
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def _on_metadata(self, msg: Msg) -> wire.MetadataResponse:
        request = wire.decode(wire.MetadataRequest, msg.data)
        return metadata_response(self.image, request.topics)

    # -- time ----------------------------------------------------------------------------------------------------

    async def _on_tick(self) -> None:
        now = _now_ms()
        for replica in list(self.replicas.values()):
            self._apply(replica, replica.core.tick(now), now)
        assert self.logs is not None
        self.logs.flush_due_logs(WallMs(now))  # FIXME(issue 11, item 4): monotonic passed as wall
        clock = time.monotonic()
        if clock >= self._next_hw_checkpoint:
            self._next_hw_checkpoint = clock + self.settings.replica_high_watermark_checkpoint_interval_ms / 1000
            self.logs.checkpoint_high_watermarks()
            self.logs.checkpoint_recovery_points()
            self._update_gauges()
        if clock >= self._next_retention:
            self._next_retention = clock + self.settings.log_retention_check_interval_ms / 1000
            self._run_retention(now)

    def _run_retention(self, now: int) -> None:
        """Retention for every hosted log (Kafka's LogManager.cleanupLogs): deleted segments and the log start
        offsets they move are announced, and the cores follow, so fetches below the new start are refused."""
        assert self.logs is not None
        for replica in list(self.replicas.values()):
            out = replica.run_retention(now)
            for event in out.events:
                self.events.emit(event)
        self.logs.checkpoint_log_start_offsets()

    def _update_gauges(self) -> None:
        if self.metrics is None:
            return
        leaders = [r for r in self.replicas.values() if r.core.is_leader]
        self.metrics.partition_count.set(len(self.replicas))
        self.metrics.leader_count.set(len(leaders))
        self.metrics.under_replicated_partitions.set(sum(1 for r in leaders if len(r.core.isr) < len(r.core.replicas)))


def metadata_response(image: MetadataImage, topics: tuple[str, ...] | None) -> wire.MetadataResponse:
    names = sorted(image.topic_ids) if topics is None else list(topics)
    answers = []
    for name in names:
        topic = image.topic(name)
        if topic is None:
            answers.append(wire.TopicMetadata(name=name, error=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            continue
        partitions = tuple(
            wire.PartitionMetadata(
                partition=index,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                replicas=p.replicas,
                isr=p.isr,
                elr=p.elr,
                last_known_elr=p.last_known_elr,
            )
            for index, p in enumerate(topic.partitions)
        )
        answers.append(
            wire.TopicMetadata(name=name, topic_id=topic.topic_id, partitions=partitions, configs=dict(topic.configs))
        )
    brokers = tuple(
        wire.BrokerMetadata(
            broker_id=b.broker_id,
            broker_epoch=b.broker_epoch,
            fenced=b.fenced,
            in_controlled_shutdown=b.in_controlled_shutdown,
        )
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
    )
    return wire.MetadataResponse(brokers=brokers, topics=tuple(answers), metadata_offset=image.next_offset)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
