"""The controller's decisions: KRaft's ReplicationControlManager and ClusterControlManager.

Room: libs/core (rules, pure). `ReplicationControl` holds a `MetadataImage` and the brokers' heartbeat sessions,
and answers each request with a `ControllerResult`: the metadata records that make the change, the events that
report it, and the reply. It never does I/O, reads a clock or draws randomness: the time comes in as `now_ms`,
placement's draws come from the injected `choose`, topic ids come from the caller.

The controller's concerns live in their own modules, and this one re-exports the names its users know:
`controller_config` (ControllerConfig), `controller_results` (ControllerResult and the replies),
`partition_change` (PartitionChangeBuilder, elections, the golden rules of a registration), `broker_lifecycle`
(broker states and heartbeat sessions), `topic_rules` (topic checks, placement, effective configs) and
`topic_configs` (the table of topic configs).

The shell's contract (as Kafka's QuorumController replays its records before deciding anything else):

1. ask for one decision; 2. store its events, stamped with the controller epoch and the metadata offset the
decision lands at (`result.events_at`), durably: they are the decision's write-ahead intent; 3. append
`result.records` to the metadata log (all or none); 4. once they are committed, `apply` them (which moves the
image on); 5. only then answer and ask for the next decision. A decision asked while records are outstanding is a
bug and trips an assertion. A controller whose append failed has lost its lease: build a new one from the log.
An intent whose append never committed is told apart by the history from the next controller's takeover offset
(hightide.audit.rebuild), so no decision is without its events and no event stands for a decision not made.

Broker lifecycle: the table of `broker_lifecycle`. Elections: `partition_change`. ISR members removed by a fencing,
a controlled shutdown or an unclean restart are handled as Kafka's generateLeaderAndIsrUpdates does.

Offline replicas (KIP-858 by partition): a heartbeat reports the broker's replicas whose storage refused; each
newly reported one is recorded in the broker's registration, leaves its ISR and ELR and its leadership moves; it
is neither elected nor let back into an ISR (INELIGIBLE_REPLICA) until the broker registers again.

Events: every PartitionRecord and PartitionChangeRecord has its PartitionChanged (`reason`: created, isr_shrink,
isr_expand, election, controlled_shutdown, broker_fenced, broker_unfenced, broker_restarted, unclean_shutdown,
broker_unregistered, replica_offline, log_dir_replaced), every leader change its LeaderElected (`election`: clean,
elr, unclean, preferred, controlled_shutdown); brokers get BrokerRegistered (after a LogDirReplaced when its log
dir is new), BrokerUnfenced, ControlledShutdownStarted and BrokerFenced (`reason`: session_timeout,
controlled_shutdown, requested, unregistered); a replica reported
offline its ReplicaMarkedOffline; topics TopicCreated and TopicDeleted; every AlterPartition its
AlterPartitionAnswered.

Partition reassignment (KIP-455 as KRaft does it, `alter_partition_reassignments`): a target starts one (replicas
:= target + removing, adding := target - current, removing := current - target; PartitionReassignmentStarted);
the brokers host the added replicas as followers and the leader's ISR expansions bring them in; the change that
puts every target replica in the ISR completes it (partition_change; PartitionReassignmentCompleted, and a
LeaderElected with election `reassignment` if the leader was removed); a null target cancels it
(PartitionReassignmentCancelled). Their PartitionChanged have reason `reassignment`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hightide.core.broker_lifecycle import (
    BrokerSession,
    BrokerSessions,
    BrokerState,
    current_broker_state,
    next_broker_state,
)
from hightide.core.controller_config import ControllerConfig, InvalidControllerConfig
from hightide.core.controller_results import (
    BrokerHeartbeatReply,
    BrokerRegistrationReply,
    ControllerResult,
    CreateTopicReply,
    ElectionType,
    OngoingReassignment,
    PartitionElectionReply,
    PartitionReassignmentReply,
    RebalanceReply,
    Reply,
)
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicImage, TopicPartition
from hightide.core.partition_change import (
    Assignment,
    Election,
    PartitionChange,
    build_partition_change,
    change_violations,
    elect_leader,
    partition_violations,
    revert_reassignment,
    validate_isr,
)
from hightide.core.placement import Choose, choose_first
from hightide.core.topic_configs import (
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIGS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    InvalidTopicConfig,
    topic_config,
    validate,
)
from hightide.core.topic_rules import (
    RECORDS_PER_REQUEST_MAX,
    TOPIC_NAME_LENGTH_MAX,
    check_new_topic,
    effective_min_isr,
    no_such_topic,
    preferred_elections_due,
    replicas_for_new_partitions,
    replicas_for_new_topic,
    topic_name_error,
    unclean_leader_election_enabled,
)
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.metadata import (
    NO_LEADER_CHANGE,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from hightide.protocol.wire import AlterPartitionRequest, AlterPartitionResponse

__all__ = [
    "RECORDS_PER_REQUEST_MAX",
    "TOPIC_CONFIGS",
    "TOPIC_NAME_LENGTH_MAX",
    "MIN_INSYNC_REPLICAS",
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "BrokerHeartbeatReply",
    "BrokerRegistrationReply",
    "BrokerSession",
    "BrokerState",
    "ControllerConfig",
    "ControllerResult",
    "CreateTopicReply",
    "Election",
    "ElectionType",
    "InvalidControllerConfig",
    "OngoingReassignment",
    "PartitionReassignmentReply",
    "PartitionChange",
    "PartitionElectionReply",
    "RebalanceReply",
    "ReplicationControl",
    "Reply",
    "build_partition_change",
    "change_violations",
    "effective_min_isr",
    "elect_leader",
    "image_violations",
    "log_dir_replaced",
    "next_broker_state",
    "partition_violations",
    "preferred_elections_due",
    "topic_name_error",
    "unclean_leader_election_enabled",
    "validate_isr",
]

R = TypeVar("R")


# -- invariants ------------------------------------------------------------------------------------------------


def image_violations(
    image: MetadataImage, config: ControllerConfig, *, unclean_reverts: Mapping[TopicPartition, int] | None = None
) -> list[str]:
    """Everything wrong with an image (empty: nothing): each partition on its own, and against the brokers:
    a leader is an eligible replica (its broker active, its replica not offline), an ISR holds only eligible
    replicas but for the last member of a leaderless ISR with ELR disabled (KRaft keeps it there rather than
    empty the ISR), and an ELR holds no offline replica.

    `unclean_reverts` names the partitions whose reassignment was cancelled when no ISR member was an original
    replica, with the partition epoch that cancellation left. Kafka's PartitionReassignmentRevert then makes the
    first original replica the ISR, eligible or not, and the builder writes it as it is (an unclean election
    follows where that replica can lead), so until the partition's next change its one-member leaderless ISR
    is what Kafka leaves there too, not a violation."""
    violations: list[str] = []
    reverts = unclean_reverts or {}
    for tp, partition in image.all_partitions():
        topic = image.topic(tp.topic)
        assert topic is not None
        min_isr = effective_min_isr(topic, config)
        found = partition_violations(partition, min_isr=min_isr, elr_enabled=config.eligible_leader_replicas_enable)
        if partition.has_leader and not image.is_active(partition.leader):
            found.append(f"leader {partition.leader} is not an active broker")
        offline = set(image.offline_replicas(*tp))
        if partition.leader in offline:
            found.append(f"leader {partition.leader}'s replica is offline")
        inactive = [r for r in partition.isr if not image.is_active(r)]
        last_member_kept = not config.eligible_leader_replicas_enable and len(partition.isr) == 1
        reverted = reverts.get(tp) == partition.partition_epoch and partition.isr == partition.replicas[:1]
        exempt = (last_member_kept or reverted) and not partition.has_leader
        if inactive and not exempt:
            found.append(f"ISR {partition.isr} holds inactive brokers {inactive}")
        if offline & set(partition.isr) and not exempt:
            found.append(f"ISR {partition.isr} holds offline replicas {sorted(offline & set(partition.isr))}")
        if offline & set(partition.elr):
            found.append(f"ELR {partition.elr} holds offline replicas {sorted(offline & set(partition.elr))}")
        violations.extend(f"{tp.topic}-{tp.partition}: {v}" for v in found)
    for broker_id, registration in image.brokers.items():
        if registration.broker_epoch > image.last_broker_epoch:
            violations.append(f"broker {broker_id} has epoch {registration.broker_epoch} past the last one")
    return violations


# -- the controller -----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Decision:
    """A decision in the making: the records so far, applied in turn to a working image so each step sees the
    ones before it (as Kafka's controller replays its records before the next one is computed)."""

    image: MetadataImage
    records: list[MetadataRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def add(self, record: MetadataRecord, *reported: Event) -> None:
        self.image = self.image.apply(record)
        self.records.append(record)
        self.events.extend(reported)


@dataclass(frozen=True, slots=True)
class _Context:
    """Why partitions are being changed: the PartitionChanged reason and the LeaderElected election name."""

    reason: str
    election_name: str = "clean"
    broker_to_remove: int | None = None
    broker_to_add: int | None = None
    broker_with_unclean_shutdown: int | None = None
    broker_with_replaced_log_dir: int | None = None


def log_dir_replaced(previous_directory_id: str, directory_id: str) -> bool:
    """Whether a broker registers on a log dir other than its previous registration's (KIP-858: a new
    meta.properties `directory.id` is a new, empty directory). An unknown id ("", a broker or a log written before
    directory ids) is never taken for a replacement."""
    return bool(previous_directory_id) and bool(directory_id) and previous_directory_id != directory_id


class ReplicationControl:
    """The active controller's decisions over a metadata image and the brokers' sessions."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        image: MetadataImage | None = None,
        *,
        choose: Choose = choose_first,
    ) -> None:
        self.config = config or ControllerConfig()
        self._image = image or MetadataImage()
        self._choose = choose
        self._sessions = BrokerSessions(self.config.broker_session_timeout_ms)
        self._outstanding: deque[MetadataRecord] = deque()

    @property
    def image(self) -> MetadataImage:
        return self._image

    def elected(self, controller: int, controller_epoch: int, metadata_offset: int) -> events.ControllerElected:
        """The event of this controller's takeover at `metadata_offset`, naming the min.insync.replicas it gives
        every topic without its own (the audit's default for them)."""
        return events.ControllerElected(
            controller=controller,
            controller_epoch=controller_epoch,
            metadata_offset=metadata_offset,
            min_insync_replicas=self.config.min_insync_replicas,
        )

    @property
    def sessions(self) -> Mapping[int, BrokerSession]:
        return self._sessions.view

    def apply(self, records: Iterable[MetadataRecord]) -> None:
        """Move the image on by committed records: the last result's records, in order, then any others."""
        for record in records:
            if self._outstanding:
                expected = self._outstanding.popleft()
                assert record == expected, f"applied {record} while {expected} of the last result was due"
            self._image = self._image.apply(record)

    # -- brokers ------------------------------------------------------------------------------------------------

    def register_broker(
        self,
        broker_id: int,
        incarnation_id: str,
        previous_broker_epoch: int,
        now_ms: int,
        kafka_listener: str = "",
        directory_id: str = "",
    ) -> ControllerResult[BrokerRegistrationReply]:
        """Kafka's registerBroker. The new broker epoch is the offset the result's first record will get. A new
        incarnation's old partitions are handled first: as a fencing after a clean shutdown (the broker's epoch
        on disk equals its last registration's), or with ELR enabled, after an unclean one, by removing it from
        every ISR and ELR. A broker whose log dir is not the one it last registered with (`log_dir_replaced`: its
        disk was wiped or replaced) leaves every ISR, ELR and last known ELR whatever its shutdown looked like
        (LogDirReplaced). The broker registers fenced and is unfenced by a later heartbeat."""
        self._check_no_outstanding()
        existing = self._image.broker(broker_id)
        if broker_id < 0:
            return self._reply(BrokerRegistrationReply(ErrorCode.INVALID_REQUEST, message="negative broker id"))
        new_incarnation = existing is None or existing.incarnation_id != incarnation_id
        if (
            existing is not None
            and new_incarnation
            and self._sessions.has_valid_session(self._image, broker_id, now_ms)
        ):
            message = "Another broker is registered with that broker id."
            return self._reply(BrokerRegistrationReply(ErrorCode.DUPLICATE_BROKER_REGISTRATION, message=message))
        work = _Decision(self._image)
        broker_epoch = self._image.next_offset
        if existing is not None and (new_incarnation or not existing.fenced):
            # A same-incarnation retry of an unfenced broker is clean; Kafka writes its fenced registration
            # without moving its leaderships, Hightide moves them first so no fenced broker ever leads.
            clean = not new_incarnation or existing.broker_epoch == previous_broker_epoch
            if log_dir_replaced(existing.directory_id, directory_id):
                self._handle_replaced_log_dir(work, broker_id, existing.directory_id, directory_id, broker_epoch)
            else:
                self._handle_restart(work, broker_id, clean)
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            incarnation_id=incarnation_id,
            previous_broker_epoch=previous_broker_epoch,
            kafka_listener=kafka_listener,
            directory_id=directory_id,
        )
        registered = events.BrokerRegistered(
            broker=broker_id, broker_epoch=broker_epoch, previous_broker_epoch=previous_broker_epoch, fenced=True
        )
        work.add(record, registered)
        self._sessions.start(broker_id, now_ms)
        return self._result(work, BrokerRegistrationReply(ErrorCode.NONE, broker_epoch=broker_epoch))

    def heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        now_ms: int,
        *,
        want_fence: bool = False,
        want_shutdown: bool = False,
        metadata_offset: int | None = None,
        offline_replicas: Iterable[TopicPartition] = (),
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """Kafka's processBrokerHeartbeat: STALE_BROKER_EPOCH unless `broker_epoch` is the broker's current one;
        otherwise the transition of the table in broker_lifecycle, and the session is renewed.

        `offline_replicas` are the broker's replicas whose storage refused (Kafka's OfflineLogDirs, KIP-858, by
        partition), sent in every heartbeat while they are offline: each one newly reported is recorded, leaves
        the ISR and ELR, and loses its leadership (`_mark_offline`); one already recorded changes nothing. Unlike
        Kafka, which handles the offline directories after the state transition, they are handled first, so the
        unfencing of the same heartbeat never elects a replica it reports offline."""
        self._check_no_outstanding()
        registration = self._image.broker(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            return self._reply(BrokerHeartbeatReply(ErrorCode.STALE_BROKER_EPOCH))
        work = _Decision(self._image)
        self._mark_offline(work, broker_id, offline_replicas)
        session = self._sessions.session(broker_id, now_ms)
        current = current_broker_state(registration.fenced, registration.in_controlled_shutdown)
        caught_up = metadata_offset is None or metadata_offset >= registration.registration_offset
        next_state = next_broker_state(
            current,
            want_fence=want_fence,
            want_shutdown=want_shutdown,
            caught_up=caught_up,
            leads_partitions=bool(work.image.partitions_led_by(broker_id)),
            others_caught_up=session.controlled_shutdown_offset <= self._sessions.lowest_active_offset(self._image),
            started_controlled_shutdown=registration.in_controlled_shutdown,
        )
        if next_state is not current:
            self._transition(work, broker_id, next_state, fence_reason="requested" if want_fence else "")
        session.last_contact_ms = now_ms
        session.metadata_offset = metadata_offset
        if next_state is BrokerState.CONTROLLED_SHUTDOWN and current is not next_state:
            session.controlled_shutdown_offset = self._image.next_offset + len(work.records) - 1
        if next_state in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW):
            session.controlled_shutdown_offset = -1
        reply = BrokerHeartbeatReply(
            ErrorCode.NONE,
            is_caught_up=caught_up,
            is_fenced=next_state in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW),
            in_controlled_shutdown=next_state is BrokerState.CONTROLLED_SHUTDOWN,
            should_shut_down=next_state is BrokerState.SHUTDOWN_NOW,
        )
        return self._result(work, reply)

    def controlled_shutdown(
        self, broker_id: int, broker_epoch: int, now_ms: int, *, metadata_offset: int | None = None
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """A heartbeat asking to shut down: leaderships move to other ISR members and the broker leaves every ISR
        (CONTROLLED_SHUTDOWN); once it leads nothing and the others have caught up, it is fenced (SHUTDOWN_NOW)."""
        return self.heartbeat(broker_id, broker_epoch, now_ms, want_shutdown=True, metadata_offset=metadata_offset)

    def tick(self, now_ms: int) -> ControllerResult[tuple[int, ...]]:
        """Fence every unfenced broker whose session expired (no heartbeat for broker.session.timeout.ms), the
        longest silent first. Kafka fences one per run so each fencing sees the one before; the working image
        gives the same order of effects in one result. Replies with the fenced broker ids."""
        self._check_no_outstanding()
        stale = self._sessions.expired(self._image, now_ms)
        work = _Decision(self._image)
        for broker_id in stale:
            self._fence(work, broker_id, reason="session_timeout")
            self._sessions.session(broker_id, now_ms).controlled_shutdown_offset = -1
        return self._result(work, tuple(stale))

    def unregister_broker(self, broker_id: int) -> ControllerResult[Reply]:
        """Kafka's unregisterBroker: leave every ISR (and ELR), then remove the registration."""
        self._check_no_outstanding()
        registration = self._image.broker(broker_id)
        if registration is None:
            message = f"Broker ID {broker_id} is not currently registered"
            return self._reply(Reply(ErrorCode.BROKER_ID_NOT_REGISTERED, message))
        work = _Decision(self._image)
        context = _Context(reason="broker_unregistered", broker_to_remove=broker_id)
        self._update_partitions(work, work.image.partitions_with_isr_member(broker_id), context)
        self._update_partitions(work, work.image.partitions_with_elr_member(broker_id), context)
        fenced = events.BrokerFenced(broker=broker_id, broker_epoch=registration.broker_epoch, reason="unregistered")
        work.add(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.broker_epoch), fenced)
        self._sessions.remove(broker_id)
        return self._result(work, Reply(ErrorCode.NONE))

    def allocate_producer_ids(self, count: int = 1) -> ControllerResult[int]:
        """Kafka's allocateProducerIds: hand out `count` producer ids from the next free one; the reply is the
        first. The record makes the allocation survive a controller failover."""
        self._check_no_outstanding()
        assert count >= 1
        first = self._image.next_producer_id
        work = _Decision(self._image)
        allocated = events.ProducerIdsAllocated(first_producer_id=first, next_producer_id=first + count)
        work.add(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=first + count), allocated)
        return self._result(work, first)

    # -- topics -------------------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        topic_id: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> ControllerResult[CreateTopicReply]:
        """Kafka's createTopics for one topic, with its checks in its order: INVALID_TOPIC_EXCEPTION (illegal or
        colliding name), TOPIC_ALREADY_EXISTS, INVALID_CONFIG, then either the manual `assignments` (partition i
        gets `assignments[i]`; INVALID_REQUEST unless partitions and RF are -1, INVALID_REPLICA_ASSIGNMENT) or
        INVALID_REPLICATION_FACTOR / INVALID_PARTITIONS and placement over the active brokers (-1: the defaults).
        Each partition's ISR is its active replicas in replica order and its leader the first of them."""
        self._check_no_outstanding()
        configs = dict(configs or {})
        error = check_new_topic(self._image, name, topic_id, configs)
        if error is not None:
            return self._reply(error)
        replicas_or_error = replicas_for_new_topic(
            self._image, self.config, self._choose, partitions, replication_factor, assignments
        )
        if isinstance(replicas_or_error, CreateTopicReply):
            return self._reply(replicas_or_error)
        replica_lists = replicas_or_error
        if 1 + len(configs) + len(replica_lists) > RECORDS_PER_REQUEST_MAX:
            message = f"Creating {len(replica_lists)} partitions exceeds {RECORDS_PER_REQUEST_MAX} records."
            return self._reply(CreateTopicReply(ErrorCode.INVALID_PARTITIONS, message))
        work = _Decision(self._image)
        set_configs = tuple(sorted((k, v) for k, v in configs.items() if v is not None))
        created = events.TopicCreated(
            topic=name,
            topic_id=topic_id,
            partitions=len(replica_lists),
            replication_factor=len(replica_lists[0]),
            configs=set_configs,
        )
        work.add(TopicRecord(name=name, topic_id=topic_id), created)
        for key, value in set_configs:
            work.add(ConfigRecord(topic=name, name=key, value=value))
        self._add_partitions(work, name, topic_id, 0, replica_lists)
        reply = CreateTopicReply(
            ErrorCode.NONE, topic_id=topic_id, partitions=len(replica_lists), replication_factor=len(replica_lists[0])
        )
        return self._result(work, reply)

    def delete_topic(self, name: str) -> ControllerResult[Reply]:
        """Kafka's deleteTopics for one topic (by name): one RemoveTopicRecord."""
        self._check_no_outstanding()
        topic = self._image.topic(name)
        if topic is None:
            return self._reply(Reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_such_topic(name)))
        work = _Decision(self._image)
        work.add(RemoveTopicRecord(topic_id=topic.topic_id), events.TopicDeleted(topic=name, topic_id=topic.topic_id))
        return self._result(work, Reply(ErrorCode.NONE))

    def alter_topic_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: Sequence[str] = (),
        *,
        validate_only: bool = False,
    ) -> ControllerResult[Reply]:
        """Kafka's incrementalAlterConfigs for a topic: SET and DELETE operations, checked first and in this order
        (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for a name both set and deleted, INVALID_CONFIG for an
        unknown name or a bad value), then one ConfigRecord per config whose value actually changes. With
        `validate_only` nothing is written."""
        self._check_no_outstanding()
        if self._image.topic(name) is None:
            return self._reply(Reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_such_topic(name)))
        both = sorted(set(set_configs) & set(delete_configs))
        if both:
            return self._reply(Reply(ErrorCode.INVALID_REQUEST, f"Duplicate config keys: {','.join(both)}"))
        try:
            for key in [*set_configs, *delete_configs]:
                topic_config(key)
            validate(set_configs)
        except InvalidTopicConfig as error:
            return self._reply(Reply(error.error_code, error.message))
        topic = self._image.topic(name)
        assert topic is not None
        current = topic.configs
        changes: dict[str, str | None] = {k: v for k, v in set_configs.items() if current.get(k) != v}
        changes.update({k: None for k in delete_configs if k in current})
        work = _Decision(self._image)
        if validate_only or not changes:
            return self._result(work, Reply(ErrorCode.NONE))
        altered = events.TopicConfigsAltered(topic=name, configs=tuple(sorted(changes.items())))
        for index, (key, new_value) in enumerate(sorted(changes.items())):
            work.add(ConfigRecord(topic=name, name=key, value=new_value), *([altered] if index == 0 else []))
        return self._result(work, Reply(ErrorCode.NONE))

    def create_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None = None
    ) -> ControllerResult[Reply]:
        """Kafka's createPartitions: grow a topic to `count` partitions, placed like the first ones (the new
        leaders continue the rotation from partition 0's leader) or as `assignments` says."""
        self._check_no_outstanding()
        topic = self._image.topic(name)
        if topic is None:
            return self._reply(Reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_such_topic(name)))
        current = len(topic.partitions)
        if count == current:
            return self._reply(Reply(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."))
        if count < current:
            message = f"The topic {name} currently has {current} partition(s); {count} would not be an increase."
            return self._reply(Reply(ErrorCode.INVALID_PARTITIONS, message))
        additional = count - current
        if additional > RECORDS_PER_REQUEST_MAX:
            message = f"Adding {additional} partitions exceeds {RECORDS_PER_REQUEST_MAX} records."
            return self._reply(Reply(ErrorCode.INVALID_PARTITIONS, message))
        if assignments is not None and len(assignments) != additional:
            message = (
                f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                "assignment(s) were specified."
            )
            return self._reply(Reply(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message))
        replicas_or_error = replicas_for_new_partitions(self._image, self._choose, topic, additional, assignments)
        if isinstance(replicas_or_error, Reply):
            return self._reply(replicas_or_error)
        work = _Decision(self._image)
        self._add_partitions(work, name, topic.topic_id, current, replicas_or_error)
        return self._result(work, Reply(ErrorCode.NONE))

    # -- partitions ---------------------------------------------------------------------------------------------

    def alter_partition(self, request: AlterPartitionRequest) -> ControllerResult[AlterPartitionResponse]:
        """Kafka's alterPartition for one partition, its checks in its order (`alter_partition_error`); then
        the ISR becomes the proposed one (partition epoch + 1; with ELR enabled, members dropped below min ISR
        move to the ELR). The answer carries the partition's state after the change."""
        self._check_no_outstanding()
        error = self.alter_partition_error(request)
        work = _Decision(self._image)
        if error is not ErrorCode.NONE:
            response = AlterPartitionResponse(topic=request.topic, partition=request.partition, error=int(error))
            work.events.append(_answered(request, response))
            return self._result(work, response)
        topic = self._image.topic(request.topic)
        assert topic is not None
        before = topic.partitions[request.partition]
        change = build_partition_change(
            before,
            topic_id=topic.topic_id,
            partition_id=request.partition,
            is_acceptable_leader=lambda replica: self._image.is_eligible_replica(
                replica, request.topic, request.partition
            ),
            min_isr=effective_min_isr(topic, self.config),
            elr_enabled=self.config.eligible_leader_replicas_enable,
            election=self._election_for(topic),
            target_isr=request.new_isr,
        )
        if change is not None:
            # The leader is in the new ISR and active, so it stays leader unless the change completes a
            # reassignment that removes it (Kafka then answers NEW_LEADER_ELECTED, below).
            assert change.record.leader in (NO_LEADER_CHANGE, request.broker_id) or before.reassigning, change
            grew = not set(request.new_isr) <= set(before.isr)
            reason = "isr_expand" if grew else "isr_shrink"
            if before.reassigning and change.record.replicas is not None:
                reason = "reassignment"
            self._commit(work, topic, request.partition, change, _Context(reason=reason, election_name="reassignment"))
        after = work.image.partition(request.topic, request.partition)
        assert after is not None
        if after.leader != request.broker_id:
            # Kafka's alterPartition: the change committed, but it elected another leader; the sender must read
            # the new metadata (an error and a record at once, as Kafka answers).
            response = AlterPartitionResponse(
                topic=request.topic, partition=request.partition, error=int(ErrorCode.NEW_LEADER_ELECTED)
            )
            work.events.append(_answered(request, response))
            return self._result(work, response)
        response = AlterPartitionResponse(
            topic=request.topic,
            partition=request.partition,
            error=int(ErrorCode.NONE),
            leader=after.leader,
            leader_epoch=after.leader_epoch,
            isr=after.isr,
            partition_epoch=after.partition_epoch,
        )
        work.events.append(_answered(request, response))
        return self._result(work, response)

    def alter_partition_error(self, request: AlterPartitionRequest) -> ErrorCode:
        """Kafka's checks of an AlterPartition, first failure wins: STALE_BROKER_EPOCH (the sender's epoch),
        UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER (leader epoch, then partition epoch, ahead of ours),
        FENCED_LEADER_EPOCH, INVALID_REQUEST (sender not the leader), INVALID_UPDATE_VERSION (stale partition
        epoch), INVALID_REQUEST (ISR not a duplicate-free subset of the replicas; ISR without the leader),
        INELIGIBLE_REPLICA (a member unregistered, shutting down, fenced, of another broker epoch, or whose replica
        its broker reported offline)."""
        sender = self._image.broker(request.broker_id)
        if sender is None or sender.broker_epoch != request.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        partition = self._image.partition(request.topic, request.partition)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # A leader ahead of us means this controller is likely no longer the active one.
        if request.leader_epoch > partition.leader_epoch or request.partition_epoch > partition.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if request.leader_epoch < partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request.broker_id != partition.leader:
            return ErrorCode.INVALID_REQUEST
        if request.partition_epoch < partition.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        if len(request.new_isr_broker_epochs) != len(request.new_isr):
            return ErrorCode.INVALID_REQUEST  # Kafka pairs them in one struct; a mismatch cannot be sent there
        if not validate_isr(partition.replicas, request.new_isr) or partition.leader not in request.new_isr:
            return ErrorCode.INVALID_REQUEST
        for member, member_epoch in zip(request.new_isr, request.new_isr_broker_epochs, strict=True):
            registration = self._image.broker(member)
            if registration is None or not self._image.is_eligible_replica(member, request.topic, request.partition):
                return ErrorCode.INELIGIBLE_REPLICA
            if member_epoch not in (-1, registration.broker_epoch):  # -1: the sender did not check it
                return ErrorCode.INELIGIBLE_REPLICA
        return ErrorCode.NONE

    def elect_leaders(
        self, election_type: ElectionType | str, partitions: Sequence[tuple[str, int]] | None = None
    ) -> ControllerResult[tuple[PartitionElectionReply, ...]]:
        """Kafka's electLeaders: ELECTION_NOT_NEEDED (preferred: already led by its preferred replica; unclean:
        has a leader), PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE (no change possible),
        UNKNOWN_TOPIC_OR_PARTITION. `partitions` None: every partition, answering only those not ELECTION_NOT_NEEDED."""
        self._check_no_outstanding()
        election_type = ElectionType(election_type)  # also takes "preferred" / "unclean"
        every = partitions is None
        targets = [tp for tp, _ in self._image.all_partitions()] if partitions is None else partitions
        work = _Decision(self._image)
        replies: list[PartitionElectionReply] = []
        for topic_name, partition_id in targets:
            reply = self._elect(work, election_type, topic_name, partition_id)
            if not (every and reply.error is ErrorCode.ELECTION_NOT_NEEDED):
                replies.append(reply)
        return self._result(work, tuple(replies))

    def auto_leader_rebalance(self) -> ControllerResult[RebalanceReply]:
        """The periodic check (auto.leader.rebalance.enable, every leader.imbalance.check.interval.seconds): a
        preferred election for each partition `preferred_elections_due`, at most max_elections_per_imbalance."""
        self._check_no_outstanding()
        work = _Decision(self._image)
        if not self.config.auto_leader_rebalance_enable:
            return self._result(work, RebalanceReply(elected=(), more=False))
        due = preferred_elections_due(self._image, self.config.leader_imbalance_per_broker_percentage)
        elected = []
        for topic_name, partition_id in due[: self.config.max_elections_per_imbalance]:
            if self._elect(work, ElectionType.PREFERRED, topic_name, partition_id).error is ErrorCode.NONE:
                elected.append(TopicPartition(topic_name, partition_id))
        more = len(due) > self.config.max_elections_per_imbalance
        return self._result(work, RebalanceReply(elected=tuple(elected), more=more))

    # -- partition reassignment (issue 13) -----------------------------------------------------------------------

    def alter_partition_reassignments(
        self, targets: Sequence[tuple[str, int, Sequence[int] | None]]
    ) -> ControllerResult[tuple[PartitionReassignmentReply, ...]]:
        """Kafka's alterPartitionReassignments: for each (topic, partition, target replicas or None), start (or
        replace) a reassignment towards the target, or cancel the one in progress (None). Each partition answers
        on its own (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS); the ones
        that succeed are written together. As KRaft, a new target replaces one in progress (no
        REASSIGNMENT_IN_PROGRESS: that was the ZooKeeper controller's answer)."""
        self._check_no_outstanding()
        work = _Decision(self._image)
        replies = tuple(self._reassign(work, topic, partition_id, target) for topic, partition_id, target in targets)
        return self._result(work, replies)

    def list_partition_reassignments(
        self, partitions: Sequence[tuple[str, int]] | None = None
    ) -> tuple[OngoingReassignment, ...]:
        """Kafka's listPartitionReassignments: the partitions with a reassignment in progress, all of them or
        those of `partitions` (unknown ones are left out, as Kafka does). Reads the image; writes nothing."""
        wanted = None if partitions is None else set(partitions)
        return tuple(
            OngoingReassignment(tp.topic, tp.partition, p.replicas, p.adding_replicas, p.removing_replicas)
            for tp, p in self._image.all_partitions()
            if p.reassigning and (wanted is None or (tp.topic, tp.partition) in wanted)
        )

    def _reassign(
        self, work: _Decision, topic_name: str, partition_id: int, target: Sequence[int] | None
    ) -> PartitionReassignmentReply:
        """Kafka's alterPartitionReassignment for one partition."""

        def answer(error: ErrorCode, message: str = "") -> PartitionReassignmentReply:
            return PartitionReassignmentReply(topic_name, partition_id, error, message)

        topic = work.image.topic(topic_name)
        if topic is None:
            return answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}.")
        partition = topic.partition(partition_id)
        if partition is None:
            message = f"Unable to find partition {topic_name}:{partition_id}."
            return answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message)
        if target is None:
            return answer(*self._cancel_reassignment(work, topic, partition_id))
        error = self._assignment_error(work.image, target)
        if error:
            return answer(ErrorCode.INVALID_REPLICA_ASSIGNMENT, error)
        assignment = Assignment.towards(partition.replicas, target)
        change = build_partition_change(
            partition,
            topic_id=topic.topic_id,
            partition_id=partition_id,
            is_acceptable_leader=lambda r: work.image.is_eligible_replica(r, topic_name, partition_id),
            min_isr=effective_min_isr(topic, self.config),
            elr_enabled=self.config.eligible_leader_replicas_enable,
            target_assignment=assignment,
        )
        if change is None:
            return answer(ErrorCode.NONE)  # the target is the current assignment: nothing to do
        started = events.PartitionReassignmentStarted(
            topic=topic_name,
            partition=partition_id,
            original_replicas=partition.original_replicas,
            target_replicas=tuple(target),
            adding_replicas=assignment.adding,
            removing_replicas=assignment.removing,
        )
        work.events.append(started)
        context = _Context(reason="reassignment", election_name="reassignment")
        self._commit(work, topic, partition_id, change, context)
        after = work.image.partition(topic_name, partition_id)
        assert after is not None
        completed_by_commit = partition.reassigning and after.replicas == partition.target_replicas
        if not after.reassigning and not completed_by_commit:
            # Started and completed at once (the ISR already held the target): say so, as a completion would.
            work.events.append(_reassignment_completed(topic_name, partition_id, partition, after))
        return answer(ErrorCode.NONE)

    def _cancel_reassignment(self, work: _Decision, topic: TopicImage, partition_id: int) -> tuple[ErrorCode, str]:
        """Kafka's cancelPartitionReassignment: back to the original replicas, the added ones out of the ISR."""
        partition = topic.partitions[partition_id]
        if not partition.reassigning:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
        assignment, isr, unclean = revert_reassignment(partition)
        if unclean and not unclean_leader_election_enabled(topic, self.config):
            message = (
                f"Unable to revert partition assignment for {topic.name}:{partition_id} because it would "
                "require an unclean leader election."
            )
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, message
        change = build_partition_change(
            partition,
            topic_id=topic.topic_id,
            partition_id=partition_id,
            is_acceptable_leader=lambda r: work.image.is_eligible_replica(r, topic.name, partition_id),
            min_isr=effective_min_isr(topic, self.config),
            elr_enabled=self.config.eligible_leader_replicas_enable,
            election=self._election_for(topic),
            target_isr=isr,
            target_assignment=assignment,
        )
        assert change is not None, partition  # the adding and removing lists at least are emptied
        self._commit(work, topic, partition_id, change, _Context(reason="reassignment", election_name="reassignment"))
        after = work.image.partition(topic.name, partition_id)
        assert after is not None
        cancelled = events.PartitionReassignmentCancelled(
            topic=topic.name,
            partition=partition_id,
            replicas=after.replicas,
            dropped_replicas=partition.adding_replicas,
            leader=after.leader,
            leader_epoch=after.leader_epoch,
        )
        work.events.append(cancelled)
        return ErrorCode.NONE, ""

    @staticmethod
    def _assignment_error(image: MetadataImage, target: Sequence[int]) -> str:
        """Kafka's validateManualPartitionAssignment, its messages and order (brokers ascending); "" if valid."""
        if not target:
            return "The manual partition assignment includes an empty replica list."
        previous = None
        for broker_id in sorted(target):
            if image.broker(broker_id) is None:
                return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
            if broker_id == previous:
                return f"The manual partition assignment includes the broker {broker_id} more than once."
            previous = broker_id
        return ""

    # -- broker transitions -------------------------------------------------------------------------------------

    def _mark_offline(self, work: _Decision, broker_id: int, reported: Iterable[TopicPartition]) -> None:
        """Kafka's handleDirectoriesOffline, by partition: record the broker's newly offline replicas (the whole
        set, in one BrokerRegistrationChangeRecord), then take each out of its ISR and ELR, electing where it led
        (generateLeaderAndIsrUpdates with that broker removed; it is excluded from the ELR as after an unclean
        shutdown, since its log cannot be trusted). A reported partition that does not exist, or that has no
        replica on the broker, is ignored: the broker's metadata may lag a deletion or a reassignment."""
        registration = work.image.broker(broker_id)
        assert registration is not None
        newly: dict[tuple[str, int], TopicPartition] = {}
        for topic_name, partition_id in reported:
            topic = work.image.topic(topic_name)
            partition = None if topic is None else topic.partition(partition_id)
            if topic is None or partition is None or broker_id not in partition.replicas:
                continue
            ref = (topic.topic_id, partition_id)
            if ref not in registration.offline_replicas:
                newly[ref] = TopicPartition(topic_name, partition_id)
        if not newly:
            return
        offline = tuple(sorted(registration.offline_replicas | set(newly)))
        change = BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=registration.broker_epoch, offline_replicas=offline
        )
        marked = [
            events.ReplicaMarkedOffline(
                topic=tp.topic, partition=tp.partition, replica=broker_id, broker_epoch=registration.broker_epoch
            )
            for _, tp in sorted(newly.items(), key=lambda item: item[1])
        ]
        work.add(change, *marked)
        context = _Context(reason="replica_offline", broker_with_unclean_shutdown=broker_id)
        self._update_partitions(work, sorted(newly.values()), context)

    def _transition(self, work: _Decision, broker_id: int, next_state: BrokerState, fence_reason: str) -> None:
        registration = work.image.broker(broker_id)
        assert registration is not None
        if next_state is BrokerState.UNFENCED:
            unfence = BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.broker_epoch, fenced=False
            )
            work.add(unfence, events.BrokerUnfenced(broker=broker_id, broker_epoch=registration.broker_epoch))
            context = _Context(reason="broker_unfenced", broker_to_add=broker_id)
            self._update_partitions(work, work.image.leaderless_partitions(), context)
        elif next_state is BrokerState.CONTROLLED_SHUTDOWN:
            started = BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.broker_epoch, in_controlled_shutdown=True
            )
            work.add(
                started, events.ControlledShutdownStarted(broker=broker_id, broker_epoch=registration.broker_epoch)
            )
            context = _Context(
                reason="controlled_shutdown", election_name="controlled_shutdown", broker_to_remove=broker_id
            )
            self._update_partitions(work, work.image.partitions_with_isr_member(broker_id), context)
        else:
            reason = fence_reason or "controlled_shutdown"
            self._fence(work, broker_id, reason=reason)

    def _fence(self, work: _Decision, broker_id: int, reason: str) -> None:
        """Kafka's handleBrokerFenced: leave every ISR (electing where it led), then the fence record. A broker
        that is fenced already only leaves the ISRs."""
        registration = work.image.broker(broker_id)
        assert registration is not None
        context = _Context(reason="broker_fenced", broker_to_remove=broker_id)
        self._update_partitions(work, work.image.partitions_with_isr_member(broker_id), context)
        if not registration.fenced:
            fence = BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.broker_epoch, fenced=True
            )
            work.add(
                fence, events.BrokerFenced(broker=broker_id, broker_epoch=registration.broker_epoch, reason=reason)
            )

    def _handle_restart(self, work: _Decision, broker_id: int, clean: bool) -> None:
        """Kafka's handleBrokerShutdown, run when a broker registers again: after an unclean shutdown with ELR
        enabled its log may have lost records, so it leaves every ISR and ELR and may not lead; otherwise it is
        handled as a fencing."""
        if self.config.eligible_leader_replicas_enable and not clean:
            context = _Context(reason="unclean_shutdown", broker_with_unclean_shutdown=broker_id)
            self._update_partitions(work, work.image.partitions_with_isr_member(broker_id), context)
            self._update_partitions(work, work.image.partitions_with_elr_member(broker_id), context)
        else:
            context = _Context(reason="broker_restarted", broker_to_remove=broker_id)
            self._update_partitions(work, work.image.partitions_with_isr_member(broker_id), context)

    def _handle_replaced_log_dir(
        self, work: _Decision, broker_id: int, previous_directory_id: str, directory_id: str, broker_epoch: int
    ) -> None:
        """KIP-858 for a whole log dir: the broker's replicas on the old directory are gone, so (as after an
        unclean shutdown with ELR, but whether or not its shutdown was clean) it leaves every ISR and ELR, and
        every last known ELR too; without ELR the last ISR member is still kept (the legacy rule)."""
        replaced = events.LogDirReplaced(
            broker=broker_id,
            broker_epoch=broker_epoch,
            previous_directory_id=previous_directory_id,
            directory_id=directory_id,
        )
        work.events.append(replaced)
        context = _Context(
            reason="log_dir_replaced", broker_with_unclean_shutdown=broker_id, broker_with_replaced_log_dir=broker_id
        )
        self._update_partitions(work, work.image.partitions_with_isr_member(broker_id), context)
        self._update_partitions(work, work.image.partitions_with_elr_member(broker_id), context)
        self._update_partitions(work, work.image.partitions_with_last_known_elr_member(broker_id), context)

    # -- partition changes --------------------------------------------------------------------------------------

    def _update_partitions(self, work: _Decision, partitions: Iterable[TopicPartition], context: _Context) -> None:
        """Kafka's generateLeaderAndIsrUpdates: for each partition, the ISR without the broker being removed (or
        restarted uncleanly), and an election where that broker led, counting the one being added as active."""
        removed = {b for b in (context.broker_to_remove, context.broker_with_unclean_shutdown) if b is not None}
        unclean = context.broker_with_unclean_shutdown
        for topic_name, partition_id in partitions:
            topic = work.image.topic(topic_name)
            assert topic is not None
            partition = topic.partitions[partition_id]
            change = build_partition_change(
                partition,
                topic_id=topic.topic_id,
                partition_id=partition_id,
                is_acceptable_leader=_acceptor(work.image, TopicPartition(topic_name, partition_id), removed, context),
                min_isr=effective_min_isr(topic, self.config),
                elr_enabled=self.config.eligible_leader_replicas_enable,
                election=self._election_for(topic),
                target_isr=[r for r in partition.isr if r not in removed],
                unclean_shutdown_replicas=frozenset() if unclean is None else frozenset({unclean}),
                emptied_replicas=frozenset({b for b in (context.broker_with_replaced_log_dir,) if b is not None}),
            )
            if change is not None:
                self._commit(work, topic, partition_id, change, context)

    def _elect(
        self, work: _Decision, election_type: ElectionType, topic_name: str, partition_id: int
    ) -> PartitionElectionReply:
        """Kafka's electLeader for one partition of an ElectLeaders request."""
        topic = work.image.topic(topic_name)
        if topic is None:
            return PartitionElectionReply(
                topic_name, partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_such_topic(topic_name)
            )
        partition = topic.partition(partition_id)
        if partition is None:
            message = f"No such partition as {topic_name}-{partition_id}"
            return PartitionElectionReply(topic_name, partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message)
        preferred = election_type is ElectionType.PREFERRED
        if (preferred and partition.has_preferred_leader) or (not preferred and partition.has_leader):
            return PartitionElectionReply(topic_name, partition_id, ErrorCode.ELECTION_NOT_NEEDED)
        change = build_partition_change(
            partition,
            topic_id=topic.topic_id,
            partition_id=partition_id,
            is_acceptable_leader=lambda replica: work.image.is_eligible_replica(replica, topic_name, partition_id),
            min_isr=effective_min_isr(topic, self.config),
            elr_enabled=self.config.eligible_leader_replicas_enable,
            election=Election.PREFERRED if preferred else Election.UNCLEAN,
        )
        if change is None:
            error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if preferred else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            return PartitionElectionReply(topic_name, partition_id, error)
        context = _Context(reason="election", election_name="preferred" if preferred else "clean")
        self._commit(work, topic, partition_id, change, context)
        return PartitionElectionReply(topic_name, partition_id, ErrorCode.NONE)

    def _election_for(self, topic: TopicImage) -> Election:
        """ONLINE, or UNCLEAN where the topic (or the cluster default) allows unclean leader election."""
        return Election.UNCLEAN if unclean_leader_election_enabled(topic, self.config) else Election.ONLINE

    def _commit(
        self, work: _Decision, topic: TopicImage, partition_id: int, change: PartitionChange, context: _Context
    ) -> None:
        """Add one change record and its events, and check the golden rules on the partition it leaves."""
        before = topic.partitions[partition_id]
        work.add(change.record)
        after = work.image.partition(topic.name, partition_id)
        assert after is not None
        min_isr = effective_min_isr(topic, self.config)
        violations = partition_violations(
            after, min_isr=min_isr, elr_enabled=self.config.eligible_leader_replicas_enable
        )
        violations += change_violations(before, after)
        assert not violations, (topic.name, partition_id, before, change, violations)
        work.events.append(_partition_changed(topic.name, partition_id, after, context.reason))
        completed = before.reassigning and not after.reassigning and after.replicas == before.target_replicas
        if after.leader != before.leader:
            name = (
                "last_known_leader"
                if change.from_last_known_leader
                else "unclean"
                if change.unclean
                else "elr"
                if change.from_elr
                else context.election_name
            )
            elected = events.LeaderElected(
                topic=topic.name,
                partition=partition_id,
                previous_leader=before.leader,
                leader=after.leader,
                leader_epoch=after.leader_epoch,
                election=name,
            )
            work.events.append(elected)
        if completed:
            work.events.append(_reassignment_completed(topic.name, partition_id, before, after))
        if partition_id == 0 and len(after.replicas) != len(before.replicas):
            self._refresh_elrs(work, topic.name, min_isr)

    def _refresh_elrs(self, work: _Decision, topic_name: str, min_isr_before: int) -> None:
        """A reassignment that changes partition 0's replica count changes the topic's effective min ISR (Kafka's
        getTopicEffectiveMinIsr caps min.insync.replicas at partition 0's replica count). Unlike Kafka, which
        leaves it to each partition's next change, every partition's ELR is re-evaluated against the new min ISR
        in the same decision, so no partition keeps an ELR once its ISR reaches min ISR (KIP-966)."""
        topic = work.image.topic(topic_name)
        assert topic is not None
        min_isr = effective_min_isr(topic, self.config)
        if not self.config.eligible_leader_replicas_enable or min_isr == min_isr_before:
            return
        for partition_id in range(len(topic.partitions)):
            current = work.image.topic(topic_name)
            assert current is not None
            change = build_partition_change(
                current.partitions[partition_id],
                topic_id=current.topic_id,
                partition_id=partition_id,
                is_acceptable_leader=_eligible_in(work, topic_name, partition_id),
                min_isr=min_isr,
                elr_enabled=True,
                election=self._election_for(current),
            )
            if change is not None:
                self._commit(work, current, partition_id, change, _Context(reason="reassignment"))

    def _add_partitions(
        self, work: _Decision, name: str, topic_id: str, first: int, replica_lists: Sequence[tuple[int, ...]]
    ) -> None:
        """Kafka's buildPartitionRegistration: ISR = the active replicas in replica order, leader = its first."""
        for offset, replicas in enumerate(replica_lists):
            isr = tuple(r for r in replicas if work.image.is_active(r))
            assert isr, (name, replicas)
            record = PartitionRecord(
                topic_id=topic_id, partition=first + offset, replicas=replicas, isr=isr, leader=isr[0]
            )
            work.add(record)
            created = work.image.partition(name, first + offset)
            assert created is not None
            work.events.append(_partition_changed(name, first + offset, created, "created"))

    # -- results ------------------------------------------------------------------------------------------------

    def _check_no_outstanding(self) -> None:
        assert not self._outstanding, "apply the last result's records before asking for another decision"

    def _result(self, work: _Decision, response: R) -> ControllerResult[R]:
        self._outstanding.extend(work.records)
        return ControllerResult(records=tuple(work.records), events=tuple(work.events), response=response)

    def _reply(self, response: R) -> ControllerResult[R]:
        return ControllerResult(records=(), events=(), response=response)


def _acceptor(image: MetadataImage, tp: TopicPartition, removed: set[int], context: _Context) -> Callable[[int], bool]:
    """Kafka's LeaderAcceptor for one partition of generateLeaderAndIsrUpdates: not a broker being removed, not a
    replica reported offline, and active (or the broker being added)."""

    def acceptable(replica: int) -> bool:
        if replica in removed or image.replica_offline(replica, tp.topic, tp.partition):
            return False
        return replica == context.broker_to_add or image.is_active(replica)

    return acceptable


def _eligible_in(work: _Decision, topic: str, partition: int) -> Callable[[int], bool]:
    """Kafka's LeaderAcceptor over the decision's working image (as it stands when the election runs)."""
    return lambda replica: work.image.is_eligible_replica(replica, topic, partition)


def _partition_changed(
    topic: str, partition_id: int, partition: PartitionRegistration, reason: str
) -> events.PartitionChanged:
    return events.PartitionChanged(
        topic=topic,
        partition=partition_id,
        replicas=partition.replicas,
        isr=partition.isr,
        elr=partition.elr,
        last_known_elr=partition.last_known_elr,
        leader=partition.leader,
        leader_epoch=partition.leader_epoch,
        partition_epoch=partition.partition_epoch,
        reason=reason,
    )


def _reassignment_completed(
    topic: str, partition_id: int, before: PartitionRegistration, after: PartitionRegistration
) -> events.PartitionReassignmentCompleted:
    return events.PartitionReassignmentCompleted(
        topic=topic,
        partition=partition_id,
        replicas=after.replicas,
        removed_replicas=tuple(r for r in before.replicas if r not in after.replicas),
        leader=after.leader,
        leader_epoch=after.leader_epoch,
    )


def _answered(request: AlterPartitionRequest, response: AlterPartitionResponse) -> events.AlterPartitionAnswered:
    committed = response.error_code is ErrorCode.NONE
    return events.AlterPartitionAnswered(
        topic=request.topic,
        partition=request.partition,
        leader=request.broker_id,
        leader_epoch=request.leader_epoch,
        partition_epoch=response.partition_epoch if committed else request.partition_epoch,
        proposed_isr=tuple(request.new_isr),
        error=response.error_code.name,
    )
