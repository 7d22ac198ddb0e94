"""The controller service: one process that is either the active controller or a standby.

Room: services/controller (wiring). The rules are `hightide.core.controller.ReplicationControl`; this module feeds
it requests from NATS and the time, and carries out its results: append the records to the metadata log, then
apply them, then answer (the shell contract of ControllerResult). Life of a controller:

    standby ── lease acquired ──> catching up ──> active ── lease lost / log moved on ──> standby
       ^  replays the log          replays to the      serves requests, fences brokers,
       └─ every poll interval       log's end           renews the lease

A standby replays the metadata log as it grows, so taking over needs only the tail. While active it subscribes to
the controller subjects in a queue group (only the active one answers), and one task drives the core. Every
decision is fenced twice: the lease must still be valid on the local monotonic clock, and the metadata log
append carries the expected last sequence, so a controller that was paused past its lease cannot write.

A decision and its events are one (write-ahead intent). Taking over, the controller first appends an empty batch
at the log's end (KRaft's leader writes a LeaderChange record the same way), so no append of a deposed
controller can land after the log it read, and only then announces ControllerElected with that offset. Each
decision's events, stamped with the controller epoch and the metadata offset the decision lands at, are in the
outbox (flushed) before its records are appended: a controller killed or fenced in between leaves an intent
whose offset is at or past the next controller's takeover offset, which the history ignores
(hightide.audit.rebuild). Stepping down for any reason emits ControllerDeposed before standing by.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from hightide.core.controller import ControllerConfig, ControllerResult, ReplicationControl
from hightide.core.metadata_image import MetadataImage, TopicPartition
from hightide.core.replica_manager import broker_metadata
from hightide.core.topic_rules import refusals_before_the_controller
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.events import ControllerDeposed, LeaderElected
from hightide.protocol.metadata import MetadataBatch
from hightide.protocol.subjects import CONTROLLER_QUEUE, ControllerApi, api_of, controller_api_wildcard
from hightide.runtime.events import EventSink
from hightide.runtime.metadata_log import ControllerLease, Lease, MetadataLog, NotActiveController
from hightide.runtime.rpc import Inbox, reply
from hightide.runtime.stream_replicas import DEFAULT_STREAM_REPLICAS

TICK_INTERVAL_S: Final = 0.1
STANDBY_POLL_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    controller_id: int
    cluster_id: str
    config: ControllerConfig
    lease_ms: int = 3_000
    metadata_log_replicas: int = DEFAULT_STREAM_REPLICAS


class Deposed(NotActiveController):
    """This controller must step down; `reason` is ControllerDeposed's."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class ControllerService:
    def __init__(
        self, settings: ControllerSettings, nc: Client, events: EventSink, log: Any, metrics: Any | None = None
    ) -> None:
        self.settings = settings
        self.nc = nc
        self.events = events
        self.log = log
        self.metrics = metrics
        self.metadata_log = MetadataLog(nc, settings.cluster_id, replicas=settings.metadata_log_replicas)
        self.leases = ControllerLease(
            nc, settings.cluster_id, lease_ms=settings.lease_ms, replicas=settings.metadata_log_replicas
        )
        self.image = MetadataImage()
        self.last_sequence = 0
        self.lease: Lease | None = None
        self.lease_valid_until = 0.0
        self.control: ReplicationControl | None = None
        self.stopping = asyncio.Event()
        self.ready = False
        self._next_rebalance = 0.0
        self._handlers: dict[str, Callable[[Msg], Awaitable[wire.Response]]] = {
            ControllerApi.REGISTER_BROKER: self._on_register_broker,
            ControllerApi.BROKER_HEARTBEAT: self._on_broker_heartbeat,
            ControllerApi.ALTER_PARTITION: self._on_alter_partition,
            ControllerApi.CREATE_TOPICS: self._on_create_topics,
            ControllerApi.DELETE_TOPICS: self._on_delete_topics,
            ControllerApi.CREATE_PARTITIONS: self._on_create_partitions,
            ControllerApi.ALTER_CONFIGS: self._on_alter_configs,
            ControllerApi.ELECT_LEADERS: self._on_elect_leaders,
            ControllerApi.DESCRIBE_CLUSTER: self._on_describe_cluster,
            ControllerApi.INIT_PRODUCER_ID: self._on_init_producer_id,
            # partition reassignment (issue 13)
            ControllerApi.ALTER_PARTITION_REASSIGNMENTS: self._on_alter_partition_reassignments,
            ControllerApi.LIST_PARTITION_REASSIGNMENTS: self._on_list_partition_reassignments,
        }

    @property
    def active(self) -> bool:
        return self.control is not None

    # -- the life cycle ------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Stand by and lead, in turn, until asked to stop."""
        await self.metadata_log.ensure_stream()
        await self.leases.kv()
        self.ready = True
        while not self.stopping.is_set():
            try:
                await self._catch_up()
                lease = await self.leases.try_acquire(self.settings.controller_id)
            except (nats.errors.Error, TimeoutError) as error:
                # NATS is away (an outage, a restart): stand by and try again; it reconnects by itself.
                self.log.warning("controller_standby_unavailable", error=type(error).__name__, detail=str(error)[:200])
                await self._wait_stopping(STANDBY_POLL_S)
                continue
            if lease is None:
                await self._wait_stopping(STANDBY_POLL_S)
                continue
            try:
                await self._lead(lease)
            except NotActiveController as error:
                self._step_down(lease, error.reason if isinstance(error, Deposed) else "lease_lost", str(error))
            except (nats.errors.Error, TimeoutError) as error:
                self._step_down(lease, "nats_error", f"NATS: {type(error).__name__}")
            finally:
                self.control = None
                self._set_active_metric(0)

    def _step_down(self, lease: Lease, reason: str, detail: str) -> None:
        """ControllerDeposed, in the outbox before this process stands by (only once it had been elected: a
        takeover that failed before its ControllerElected never led)."""
        self.log.warning("controller_deposed", reason=reason, detail=detail, controller_epoch=lease.controller_epoch)
        if self.control is None:
            return
        deposed = ControllerDeposed(
            controller=lease.controller_id,
            controller_epoch=lease.controller_epoch,
            reason=reason,
            metadata_offset=self.last_sequence,
        )
        self.events.emit(deposed)
        self.events.flush()

    async def _wait_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _catch_up(self) -> None:
        """Apply every metadata log message after the last one applied."""
        end = await self.metadata_log.last_sequence()
        async for sequence, batch in self.metadata_log.read(self.last_sequence, until=end):
            self.image = self.image.apply_all(batch.records)
            self.last_sequence = sequence

    async def _lead(self, lease: Lease) -> None:
        self.lease = lease
        self.lease_valid_until = time.monotonic() + self.leases.ttl_s
        await self._catch_up()  # the previous controller may have written until its lease lapsed
        takeover = await self._append(MetadataBatch(lease.controller_id, lease.controller_epoch, ()))
        self.control = ReplicationControl(self.settings.config, self.image)
        self._next_rebalance = time.monotonic() + self.settings.config.leader_imbalance_check_interval_seconds
        self.events.emit(self.control.elected(lease.controller_id, lease.controller_epoch, takeover))
        self.events.flush()
        self.log.info(
            "controller_active", controller_epoch=lease.controller_epoch, metadata_sequence=self.last_sequence
        )
        self._set_active_metric(1)
        inbox = Inbox()
        subscription = await self.nc.subscribe(
            controller_api_wildcard(self.settings.cluster_id), queue=CONTROLLER_QUEUE, cb=inbox.subscriber("request")
        )
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._renew_lease())
                group.create_task(self._tick(inbox))
                group.create_task(self._drive(inbox))
        except BaseExceptionGroup as failures:
            # Not `except*` with a `raise` in it: Python 3.11.2 (Debian bookworm's, the images') wraps an exception
            # raised there in a new ExceptionGroup (fixed in 3.11.4), which escaped `run` and ended the process
            # instead of stepping down (found by the container suites, issue 14).
            deposed, rest = failures.split(NotActiveController)
            if deposed is None or rest is not None:
                raise
            raise deposed.exceptions[0] from None
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
            if self.stopping.is_set() and self.lease is not None:
                with contextlib.suppress(Exception):
                    await self.leases.release(self.lease)

    async def _renew_lease(self) -> None:
        interval = self.leases.ttl_s / 3
        while not self.stopping.is_set():
            await self._wait_stopping(interval)
            if self.stopping.is_set():
                raise Deposed("shutdown", "stopping")
            assert self.lease is not None
            started = time.monotonic()
            try:
                self.lease = await self.leases.renew(self.lease)
            except NotActiveController as error:
                raise Deposed("lease_lost", str(error)) from None
            except (nats.errors.Error, TimeoutError) as error:
                raise Deposed("nats_error", f"lease renewal: NATS: {type(error).__name__}") from None
            self.lease_valid_until = started + self.leases.ttl_s

    async def _tick(self, inbox: Inbox) -> None:
        while not self.stopping.is_set():
            await self._wait_stopping(TICK_INTERVAL_S)
            inbox.put_nowait("tick", None)
        raise Deposed("shutdown", "stopping")

    async def _drive(self, inbox: Inbox) -> None:
        """The one task that calls the core: requests and ticks in arrival order."""
        while True:
            envelope = await inbox.get()
            self._check_lease()
            if envelope.kind == "tick":
                await self._on_tick()
                continue
            msg = envelope.payload
            assert isinstance(msg, Msg)
            response = await self._handle(msg)
            await reply(self.nc, msg, response)

    def _check_lease(self) -> None:
        if time.monotonic() >= self.lease_valid_until:
            raise Deposed("lease_lost", "the lease lapsed on the local clock (was this process paused?)")

    async def _handle(self, msg: Msg) -> wire.Response:
        api = api_of(msg.subject)
        handler = self._handlers.get(api)
        if handler is None:
            return wire.Response(error=int(ErrorCode.INVALID_REQUEST), message="unknown API")
        try:
            return await handler(msg)
        except wire.InvalidRequest as error:
            return wire.error_response(wire.RESPONSE_OF[api], error.error_code, str(error))

    # -- committing ----------------------------------------------------------------------------------------------

    async def _commit(self, result: ControllerResult[Any]) -> Any:
        """Store the decision's events as its intent (stamped with this controller epoch and the metadata offset
        the decision lands at, flushed to the outbox), then append its records (fenced by the expected last
        sequence), then apply them. Any failure to append leaves the outcome unknown, so the controller steps down
        and replays; the intent it left is reconciled by the history against the next takeover."""
        assert self.control is not None and self.lease is not None
        for event in result.events_at(self.lease.controller_epoch, self.last_sequence + 1):
            self.events.emit(event)
        self.events.flush()
        if result.records:
            await self._append(MetadataBatch(self.settings.controller_id, self.lease.controller_epoch, result.records))
            self.control.apply(result.records)
            self.image = self.control.image
        for event in result.events:
            self._count_election(event)
        return result.response

    async def _append(self, batch: MetadataBatch) -> int:
        """Append one batch at the log's end as this controller knows it; its offset (the stream sequence)."""
        expected = self.last_sequence
        try:
            sequence = await self.metadata_log.append(batch, expected)
        except NotActiveController as error:
            raise Deposed("append_fenced", str(error)) from None
        except Exception as error:
            raise Deposed("append_failed", f"metadata log append failed: {type(error).__name__}: {error}") from None
        # The append was accepted only if the log ended at `expected`: it landed right after it.
        assert sequence == expected + 1, (sequence, expected)
        self.last_sequence = sequence
        return sequence

    def _count_election(self, event: object) -> None:
        if self.metrics is not None and isinstance(event, LeaderElected):
            self.metrics.leader_elections.inc()
            if event.election == "unclean":
                self.metrics.unclean_leader_elections.inc()

    def _set_active_metric(self, value: int) -> None:
        if self.metrics is not None:
            self.metrics.active_controller_count.set(value)

    async def _on_tick(self) -> None:
        assert self.control is not None
        now_ms = _now_ms()
        fenced = await self._commit(self.control.tick(now_ms))
        if fenced:
            self.log.info("brokers_fenced", brokers=list(fenced), reason="session_timeout")
        if time.monotonic() >= self._next_rebalance:
            rebalance = await self._commit(self.control.auto_leader_rebalance())
            delay = 0.0 if rebalance.more else self.settings.config.leader_imbalance_check_interval_seconds
            self._next_rebalance = time.monotonic() + delay
        self._update_gauges()

    def _update_gauges(self) -> None:
        if self.metrics is None:
            return
        image = self.image
        partitions = [p for _, p in image.all_partitions()]
        self.metrics.global_partition_count.set(len(partitions))
        self.metrics.offline_partitions_count.set(sum(1 for p in partitions if not p.has_leader))
        self.metrics.fenced_broker_count.set(sum(1 for b in image.brokers.values() if b.fenced))
        self.metrics.active_broker_count.set(sum(1 for b in image.brokers.values() if not b.fenced))

    # -- requests ------------------------------------------------------------------------------------------------

    async def _on_register_broker(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.BrokerRegistrationRequest, msg.data)
        assert self.control is not None
        result = self.control.register_broker(
            request.broker_id,
            request.incarnation_id,
            request.previous_broker_epoch,
            _now_ms(),
            kafka_listener=request.kafka_listener,
            directory_id=request.directory_id,
        )
        answer = await self._commit(result)
        return wire.BrokerRegistrationResponse(
            error=int(answer.error), message=answer.message, broker_epoch=answer.broker_epoch
        )

    async def _on_broker_heartbeat(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.BrokerHeartbeatRequest, msg.data)
        assert self.control is not None
        result = self.control.heartbeat(
            request.broker_id,
            request.broker_epoch,
            _now_ms(),
            want_fence=request.want_fence,
            want_shutdown=request.want_shut_down,
            metadata_offset=request.current_metadata_offset,
            offline_replicas=[TopicPartition(r.topic, r.partition) for r in request.offline_replicas],
        )
        answer = await self._commit(result)
        return wire.BrokerHeartbeatResponse(
            error=int(answer.error),
            is_caught_up=answer.is_caught_up,
            is_fenced=answer.is_fenced,
            should_shut_down=answer.should_shut_down,
            in_controlled_shutdown=answer.in_controlled_shutdown,
        )

    async def _on_alter_partition(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.AlterPartitionRequest, msg.data)
        assert self.control is not None
        answer: wire.AlterPartitionResponse = await self._commit(self.control.alter_partition(request))
        return answer

    async def _on_create_topics(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.CreateTopicsRequest, msg.data)
        refused = refusals_before_the_controller([topic.name for topic in request.topics], creating=True)
        results = []
        for topic in request.topics:
            assert self.control is not None
            if topic.name in refused:
                continue
            try:
                result = self.control.create_topic(
                    topic.name,
                    topic_id=new_topic_id(),
                    partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    configs=dict(topic.configs),
                    assignments=topic.assignments,
                )
            except HightideError as error:
                results.append(wire.TopicResult(name=topic.name, error=int(error.error_code), message=str(error)))
                continue
            answer = await self._commit(result)
            results.append(
                wire.TopicResult(
                    name=topic.name,
                    error=int(answer.error),
                    message=answer.message,
                    topic_id=answer.topic_id,
                    num_partitions=answer.partitions,
                    replication_factor=answer.replication_factor,
                )
            )
        return wire.CreateTopicsResponse(topics=(*results, *_refused(refused)))

    async def _on_delete_topics(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.DeleteTopicsRequest, msg.data)
        refused = refusals_before_the_controller(request.topics, creating=False)
        results = []
        for name in request.topics:
            assert self.control is not None
            if name in refused:
                continue
            answer = await self._commit(self.control.delete_topic(name))
            results.append(wire.TopicResult(name=name, error=int(answer.error), message=answer.message))
        return wire.DeleteTopicsResponse(topics=(*results, *_refused(refused)))

    async def _on_create_partitions(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.CreatePartitionsRequest, msg.data)
        assert self.control is not None
        answer = await self._commit(self.control.create_partitions(request.topic, request.count, request.assignments))
        return wire.CreatePartitionsResponse(error=int(answer.error), message=answer.message)

    async def _on_alter_configs(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.AlterConfigsRequest, msg.data)
        assert self.control is not None
        decision = self.control.alter_topic_configs(
            request.topic, request.set_configs, request.delete_configs, validate_only=request.validate_only
        )
        answer = await self._commit(decision)
        return wire.AlterConfigsResponse(error=int(answer.error), message=answer.message)

    async def _on_elect_leaders(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.ElectLeadersRequest, msg.data)
        assert self.control is not None
        targets = None if request.partitions is None else [(p.topic, p.partition) for p in request.partitions]
        answers = await self._commit(self.control.elect_leaders(request.election_type, targets))
        results = tuple(
            wire.ElectionResult(topic=a.topic, partition=a.partition, error=int(a.error), message=a.message)
            for a in answers
        )
        return wire.ElectLeadersResponse(results=results)

    async def _on_init_producer_id(self, msg: Msg) -> wire.Response:
        wire.decode(wire.InitProducerIdRequest, msg.data)
        assert self.control is not None
        producer_id = await self._commit(self.control.allocate_producer_ids(1))
        return wire.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    async def _on_describe_cluster(self, msg: Msg) -> wire.Response:
        wire.decode(wire.DescribeClusterRequest, msg.data)
        assert self.lease is not None
        return wire.DescribeClusterResponse(
            cluster_id=self.settings.cluster_id,
            controller_id=self.settings.controller_id,
            controller_epoch=self.lease.controller_epoch,
            metadata_offset=self.image.next_offset,
            brokers=broker_metadata(self.image),
        )

    # -- partition reassignment (issue 13) -------------------------------------------------------------------------

    async def _on_alter_partition_reassignments(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.AlterPartitionReassignmentsRequest, msg.data)
        assert self.control is not None
        targets = [(p.topic, p.partition, p.replicas) for p in request.partitions]
        answers = await self._commit(self.control.alter_partition_reassignments(targets))
        results = tuple(
            wire.ReassignmentResult(topic=a.topic, partition=a.partition, error=int(a.error), message=a.message)
            for a in answers
        )
        return wire.AlterPartitionReassignmentsResponse(results=results)

    async def _on_list_partition_reassignments(self, msg: Msg) -> wire.Response:
        request = wire.decode(wire.ListPartitionReassignmentsRequest, msg.data)
        assert self.control is not None
        wanted = None if request.partitions is None else [(p.topic, p.partition) for p in request.partitions]
        ongoing = tuple(
            wire.OngoingPartitionReassignment(
                topic=r.topic,
                partition=r.partition,
                replicas=r.replicas,
                adding_replicas=r.adding_replicas,
                removing_replicas=r.removing_replicas,
            )
            for r in self.control.list_partition_reassignments(wanted)
        )
        return wire.ListPartitionReassignmentsResponse(reassignments=ongoing)


def new_topic_id() -> str:
    """Kafka's topic id text: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _refused(refused: dict[str, tuple[ErrorCode, str]]) -> tuple[wire.TopicResult, ...]:
    """The results of the names `refusals_before_the_controller` answered, after the others' (as ControllerApis)."""
    return tuple(
        wire.TopicResult(name=name, error=int(error), message=message) for name, (error, message) in refused.items()
    )
