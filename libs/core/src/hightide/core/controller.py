"""The controller's decisions: KRaft's ReplicationControlManager, ClusterControlManager and PartitionChangeBuilder.

Room: libs/core (rules, pure). `ReplicationControl` holds a `MetadataImage` and the brokers' heartbeat sessions,
and answers each request with a `ControllerResult`: the metadata records that make the change, the events that
report it, and the reply. It never does I/O, reads a clock or draws randomness: the time comes in as `now_ms`,
placement's draws come from the injected `choose`, topic ids come from the caller.

The shell's contract (as Kafka's QuorumController replays its records before deciding anything else):

1. ask for one decision; 2. append `result.records` to the metadata log (all or none); 3. once they are
committed, `apply` them (which moves the image on) and publish `result.events`; 4. only then ask for the next
decision. A decision asked while records are outstanding is a bug and trips an assertion. A controller whose
append failed has lost its lease: build a new one from the log.

Broker lifecycle (Kafka's BrokerHeartbeatManager.calculateNextBrokerState; the state is read from the image, so
it survives a controller failover):

| state               | heartbeat asks                       | next state          | records                      |
| ------------------- | ------------------------------------ | ------------------- | ---------------------------- |
| FENCED              | shutdown                             | SHUTDOWN_NOW        | none (already fenced)        |
| FENCED              | not fence, caught up (*)             | UNFENCED            | unfence, elect leaderless    |
| UNFENCED            | fence (and shutdown)                 | FENCED/SHUTDOWN_NOW | leave ISRs, elect, fence     |
| UNFENCED            | shutdown, leads partitions           | CONTROLLED_SHUTDOWN | shutting down, leave ISRs    |
| UNFENCED            | shutdown, leads nothing              | SHUTDOWN_NOW        | leave ISRs, fence            |
| CONTROLLED_SHUTDOWN | leads nothing, others caught up (**) | SHUTDOWN_NOW        | fence                        |
| any unfenced        | (tick) no heartbeat for the session  | FENCED              | leave ISRs, elect, fence     |

(*) its metadata offset has reached its own registration record, and it did not start a controlled shutdown.
(**) every active broker has read up to the last record of its controlled shutdown.

Elections (Kafka's PartitionChangeBuilder, ported rule by rule in `build_partition_change`): a valid leader is
in the target ISR, or in the ELR when the target ISR is empty, and acceptable (registered, unfenced, not
shutting down, not the broker being removed). ONLINE keeps a valid current leader, else takes the first valid
replica in replica order; PREFERRED tries the first replica first. With ELR (KIP-966) enabled, an empty ISR and
ELR fall back to the last known leader if it is acceptable; UNCLEAN (the topic allows it, or an admin asks)
then takes the first acceptable replica and resets the ISR to it.

Events: every PartitionRecord and PartitionChangeRecord has its PartitionChanged (`reason`: created, isr_shrink,
isr_expand, election, controlled_shutdown, broker_fenced, broker_unfenced, broker_restarted, unclean_shutdown,
broker_unregistered), every leader change its LeaderElected (`election`: clean, elr, unclean, preferred,
controlled_shutdown); brokers get BrokerRegistered, BrokerUnfenced, ControlledShutdownStarted and BrokerFenced
(`reason`: session_timeout, controlled_shutdown, requested, unregistered); topics TopicCreated and TopicDeleted;
every AlterPartition its AlterPartitionAnswered.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Final, Generic, TypeVar

from hightide.core.effects import Emit
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicImage, TopicPartition
from hightide.core.placement import Choose, InvalidReplicaAssignment, assign_replicas_to_brokers, choose_first
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.events import Event
from hightide.protocol.metadata import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from hightide.protocol.wire import AlterPartitionRequest, AlterPartitionResponse

RECORDS_PER_REQUEST_MAX: Final = 10_000
"""Kafka's MAX_RECORDS_PER_USER_OP: the most records one admin request may produce."""
TOPIC_NAME_LENGTH_MAX: Final = 249
MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"

_LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")
_UNBOUNDED_OFFSET: Final = 2**63 - 1


class InvalidControllerConfig(HightideError):
    """A controller setting Kafka would refuse."""

    error_code = ErrorCode.INVALID_CONFIG


# -- configuration ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's settings, Kafka's names (dots for underscores) and KRaft's defaults.

    `leader_imbalance_per_broker_percentage` is the ZooKeeper controller's rule, which KRaft dropped (it elects
    every imbalanced partition); set it to 0 for KRaft's behaviour. `max_elections_per_imbalance` is KRaft's
    constant MAX_ELECTIONS_PER_IMBALANCE, a setting here only so tests can lower it.
    """

    broker_session_timeout_ms: int = 9_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    eligible_leader_replicas_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    default_replication_factor: int = 1
    num_partitions: int = 1
    max_elections_per_imbalance: int = 1_000

    def __post_init__(self) -> None:
        checks = {
            "broker.session.timeout.ms": self.broker_session_timeout_ms >= 1,
            MIN_INSYNC_REPLICAS: self.min_insync_replicas >= 1,
            "leader.imbalance.per.broker.percentage": 0 <= self.leader_imbalance_per_broker_percentage <= 100,
            "leader.imbalance.check.interval.seconds": self.leader_imbalance_check_interval_seconds >= 1,
            "default.replication.factor": self.default_replication_factor >= 1,
            "num.partitions": self.num_partitions >= 1,
            "max.elections.per.imbalance": self.max_elections_per_imbalance >= 1,
        }
        for name, valid in checks.items():
            if not valid:
                raise InvalidControllerConfig(f"Invalid value for {name}.")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ControllerConfig:
        """Settings by Kafka's dotted names, values as in a server.properties file."""
        values: dict[str, int | bool] = {}
        for name, text in properties.items():
            attribute = name.replace(".", "_")
            kind = _CONFIG_TYPES.get(attribute)
            if kind is None:
                raise InvalidControllerConfig(f"Unknown controller config name: {name}")
            parsed = _parse_bool(text) if kind is bool else _parse_int(text)
            if parsed is None:
                raise InvalidControllerConfig(f"Invalid value {text} for configuration {name}")
            values[attribute] = parsed
        return cls(**values)  # type: ignore[arg-type]


_CONFIG_TYPES: Final[dict[str, type]] = {
    name: (bool if isinstance(getattr(ControllerConfig(), name), bool) else int)
    for name in ControllerConfig.__dataclass_fields__
}


def _parse_bool(text: str) -> bool | None:
    """Kafka's ConfigDef BOOLEAN: "true" or "false", any case."""
    lowered = text.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


def _parse_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1


def _valid_int(low: int, high: int) -> Callable[[str], bool]:
    """Kafka's INT or LONG config with its lower bound: a value outside the type is refused as Kafka refuses it."""

    def check(text: str) -> bool:
        value = _parse_int(text)
        return value is not None and low <= value <= high

    return check


def _valid_cleanup_policy(text: str) -> bool:
    policies = [p.strip() for p in text.split(",")]
    return bool(policies) and all(p in ("delete", "compact") for p in policies)


TOPIC_CONFIGS: Final[Mapping[str, Callable[[str], bool]]] = {
    MIN_INSYNC_REPLICAS: _valid_int(1, _INT_MAX),
    UNCLEAN_LEADER_ELECTION_ENABLE: lambda text: _parse_bool(text) is not None,
    "retention.ms": _valid_int(-1, _LONG_MAX),
    # Kafka takes any LONG and reads a negative one as "unlimited"; the brokers' log config (hightide.storage)
    # takes -1 for that, and a committed config a broker cannot apply would stop every broker hosting the topic.
    "retention.bytes": _valid_int(-1, _LONG_MAX),
    "segment.bytes": _valid_int(14, _INT_MAX),
    "segment.ms": _valid_int(1, _LONG_MAX),
    "max.message.bytes": _valid_int(0, _INT_MAX),
    "cleanup.policy": _valid_cleanup_policy,
}
"""The topic configs a topic may be created with, and whether a value is valid (Kafka's LogConfig checks, with
the bounds of each config's type: the brokers build their log config from these values and must accept them)."""


# -- results -------------------------------------------------------------------------------------------------------

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """One decision: the records that make it (append, then `apply`), the events that report it, the reply."""

    records: tuple[MetadataRecord, ...]
    events: tuple[Event, ...]
    response: R

    @property
    def effects(self) -> tuple[Emit, ...]:
        """The events as effects, to publish once the records are committed."""
        return tuple(Emit(event) for event in self.events)


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to an admin request that has nothing else to say."""

    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    error: ErrorCode
    broker_epoch: int = -1
    message: str = ""


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    """Kafka's BrokerHeartbeatReply: what the broker must do next."""

    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    in_controlled_shutdown: bool = False
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopicReply:
    error: ErrorCode
    message: str = ""
    topic_id: str = ""
    partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class PartitionElectionReply:
    """One partition of an ElectLeaders answer."""

    topic: str
    partition: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class RebalanceReply:
    """What an auto leader rebalance did: the partitions moved back to their preferred leader, and whether the
    cap on elections per run left some for the next run (run again at once, as Kafka reschedules)."""

    elected: tuple[TopicPartition, ...]
    more: bool


class ElectionType(StrEnum):
    """The elections an admin may ask for (Kafka's ElectionType)."""

    PREFERRED = "preferred"
    UNCLEAN = "unclean"


# -- the partition change builder -----------------------------------------------------------------------------


class Election(Enum):
    """How to pick a leader (Kafka's PartitionChangeBuilder.Election)."""

    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A partition change and how its leader was chosen: `unclean` from outside the ISR and ELR (the ISR is reset
    to it; data may be lost), `from_elr` from the ELR (the ISR is reset to it, KIP-966)."""

    record: PartitionChangeRecord
    unclean: bool = False
    from_elr: bool = False
    # Kafka's balanced recovery (KIP-966): with ISR and ELR empty, the last known leader is elected. Kafka marks
    # it unclean; it loses data only if that replica lost its tail in a crash since, and the event says which.
    from_last_known_leader: bool = False


def build_partition_change(
    partition: PartitionRegistration,
    *,
    topic_id: str,
    partition_id: int,
    is_acceptable_leader: Callable[[int], bool],
    min_isr: int,
    elr_enabled: bool,
    election: Election = Election.ONLINE,
    target_isr: Sequence[int] | None = None,
    unclean_shutdown_replicas: frozenset[int] = frozenset(),
) -> PartitionChange | None:
    """Kafka's `PartitionChangeBuilder.build()` without reassignment or leader recovery state; None if nothing
    changes. The steps, in Kafka's order:

    1. populate the target ELR (KIP-966): if |target ISR| >= min ISR the ELR and last known ELR are emptied;
       otherwise ELR := (ELR | ISR) - target ISR - unclean shutdown replicas (ascending, as Java's HashSet of
       small ints iterates).
    2. elect (`elect_leader`); a leader from the ELR becomes the whole ISR and leaves the ELR; an unclean one
       becomes the whole ISR and empties the ELR.
    3. set the ISR if it changed; with ELR disabled it never becomes empty (the last member stays, leaderless).
    4. the last known ELR holds the last leader, set when the ISR first becomes empty and cleared once the
       partition has a leader again (Kafka's useLastKnownLeaderInBalancedRecovery, its default).
    """
    target = list(partition.isr if target_isr is None else target_isr)
    elr = list(partition.elr)
    if elr_enabled:
        elr = _populate_target_elr(partition, target, min_isr, unclean_shutdown_replicas)
    node, unclean = elect_leader(
        partition,
        target_isr=target,
        target_elr=elr,
        is_acceptable_leader=is_acceptable_leader,
        election=election,
        elr_enabled=elr_enabled,
    )
    leader = NO_LEADER_CHANGE
    isr: tuple[int, ...] | None = None
    from_elr = False
    from_last_known_leader = (
        unclean and not target and not elr and partition.last_known_elr == (node,) and node != NO_LEADER
    )
    if node != partition.leader:
        if node in elr:
            from_elr = True
            target = [node]
            elr = [r for r in elr if r != node]
        leader = node
        if unclean:
            isr = (node,)
    if isr is not None or not elr_enabled:
        elr = []  # an unclean election, or ELR disabled, clears the ELR
    record_elr = tuple(elr) if tuple(elr) != partition.elr else None
    if isr is None and (target or elr_enabled) and tuple(target) != partition.isr:
        isr = tuple(target)
    record = PartitionChangeRecord(
        topic_id=topic_id,
        partition=partition_id,
        leader=leader,
        isr=isr,
        elr=record_elr,
        last_known_elr=_last_known_leader(partition, isr, leader) if elr_enabled else None,
    )
    if record.isr is None and record.elr is None and record.last_known_elr is None and leader == NO_LEADER_CHANGE:
        return None
    return PartitionChange(
        record=record, unclean=unclean, from_elr=from_elr, from_last_known_leader=from_last_known_leader
    )


def _populate_target_elr(
    partition: PartitionRegistration, target_isr: list[int], min_isr: int, unclean_shutdown: frozenset[int]
) -> list[int]:
    """Kafka's maybePopulateTargetElr, the ELR half (the last known ELR is the last leader, see build)."""
    if len(target_isr) >= min_isr:
        return []
    candidates = set(partition.elr) | set(partition.isr)
    return sorted(r for r in candidates if r not in target_isr and r not in unclean_shutdown)


def _last_known_leader(
    partition: PartitionRegistration, record_isr: tuple[int, ...] | None, record_leader: int
) -> tuple[int, ...] | None:
    """Kafka's maybeUpdateLastKnownLeader. Unlike Kafka, a partition that was already leaderless when its ISR
    empties keeps its last known ELR instead of recording -1 as its last leader."""
    if record_isr is not None and not record_isr:
        if partition.has_leader and partition.last_known_elr != (partition.leader,):
            return (partition.leader,)
        return None
    keeps_a_leader = record_leader >= 0 or (partition.has_leader and record_leader != NO_LEADER)
    if keeps_a_leader and partition.last_known_elr:
        return ()
    return None


def elect_leader(
    partition: PartitionRegistration,
    *,
    target_isr: Sequence[int],
    target_elr: Sequence[int],
    is_acceptable_leader: Callable[[int], bool],
    election: Election,
    elr_enabled: bool,
) -> tuple[int, bool]:
    """Kafka's electLeader: (the new leader or NO_LEADER, whether the choice was unclean)."""

    def valid(replica: int) -> bool:
        in_quorum = replica in target_isr or (not target_isr and replica in target_elr)
        return in_quorum and is_acceptable_leader(replica)

    replicas = partition.replicas
    if election is Election.PREFERRED and valid(replicas[0]):
        return replicas[0], False
    if valid(partition.leader):
        return partition.leader, False  # the current leader meets every constraint: no change
    for replica in replicas[1:] if election is Election.PREFERRED else replicas:
        if valid(replica):
            return replica, False
    if _can_elect_last_known_leader(partition, target_isr, target_elr, is_acceptable_leader, elr_enabled):
        return partition.last_known_elr[0], True
    if election is Election.UNCLEAN:
        for replica in replicas:
            if is_acceptable_leader(replica):
                return replica, True
    return NO_LEADER, False


def _can_elect_last_known_leader(
    partition: PartitionRegistration,
    target_isr: Sequence[int],
    target_elr: Sequence[int],
    is_acceptable_leader: Callable[[int], bool],
    elr_enabled: bool,
) -> bool:
    """Only when ISR and ELR are both empty and the last known leader is acceptable. Kafka up to 4.0 forgot the
    last test and elected a fenced last leader; KAFKA-19522 (4.1) added it, and so does Hightide."""
    if not elr_enabled or target_isr or target_elr or len(partition.last_known_elr) != 1:
        return False
    return is_acceptable_leader(partition.last_known_elr[0])


def validate_isr(replicas: Sequence[int], isr: Sequence[int]) -> bool:
    """Kafka's Replicas.validateIsr: the ISR is duplicate-free, non-negative and a subset of the replicas."""
    return len(set(isr)) == len(isr) and all(r >= 0 for r in isr) and set(isr) <= set(replicas)


# -- invariants -------------------------------------------------------------------------------------------------


def partition_violations(partition: PartitionRegistration, *, min_isr: int, elr_enabled: bool) -> list[str]:
    """What is wrong with one partition's registration, on its own (empty: nothing). KIP-966's
    ValidControllerIsrAndElr, plus: the leader is in the ISR, and without ELR the ISR is never empty."""
    violations: list[str] = []
    replicas, isr, elr = set(partition.replicas), set(partition.isr), set(partition.elr)
    if not partition.replicas or len(replicas) != len(partition.replicas):
        violations.append(f"replicas {partition.replicas} are empty or repeat a broker")
    if len(isr) != len(partition.isr) or not isr <= replicas:
        violations.append(f"ISR {partition.isr} repeats a broker or is not within replicas {partition.replicas}")
    if partition.leader != NO_LEADER and partition.leader not in isr:
        violations.append(f"leader {partition.leader} is not in ISR {partition.isr}")
    if not elr <= replicas or not set(partition.last_known_elr) <= replicas:
        violations.append(f"ELR {partition.elr} or last known ELR {partition.last_known_elr} is not within replicas")
    if elr & isr:
        violations.append(f"ELR {partition.elr} and ISR {partition.isr} share {sorted(elr & isr)}")
    if not elr_enabled and not isr:
        violations.append("the ISR is empty with ELR disabled")
    if not elr_enabled and (elr or partition.last_known_elr):
        violations.append(f"ELR {partition.elr} / last known ELR {partition.last_known_elr} with ELR disabled")
    if elr_enabled and len(isr) >= min_isr and elr:
        violations.append(f"ELR {partition.elr} is kept while ISR {partition.isr} reaches min ISR {min_isr}")
    if not 0 <= partition.leader_epoch <= partition.partition_epoch:
        violations.append(f"leader epoch {partition.leader_epoch} vs partition epoch {partition.partition_epoch}")
    return violations


def change_violations(before: PartitionRegistration, after: PartitionRegistration) -> list[str]:
    """What is wrong with one partition change (one PartitionChangeRecord applied): the partition epoch goes up
    by one, the leader epoch goes up by one exactly when the leader changes, the replicas stay."""
    violations: list[str] = []
    if after.partition_epoch != before.partition_epoch + 1:
        violations.append(f"partition epoch {before.partition_epoch} -> {after.partition_epoch}")
    expected_leader_epoch = before.leader_epoch + (1 if after.leader != before.leader else 0)
    if after.leader_epoch != expected_leader_epoch:
        violations.append(
            f"leader {before.leader} -> {after.leader} moved the leader epoch "
            f"{before.leader_epoch} -> {after.leader_epoch}"
        )
    if after.replicas != before.replicas:
        violations.append(f"replicas {before.replicas} -> {after.replicas} without a reassignment")
    return violations


def image_violations(image: MetadataImage, config: ControllerConfig) -> list[str]:
    """Everything wrong with an image (empty: nothing): each partition on its own, and against the brokers:
    a leader is active, and an ISR holds only active brokers but for the last member of a leaderless ISR with
    ELR disabled (KRaft keeps it there rather than empty the ISR)."""
    violations: list[str] = []
    for tp, partition in image.all_partitions():
        topic = image.topic(tp.topic)
        assert topic is not None
        min_isr = effective_min_isr(topic, config)
        found = partition_violations(partition, min_isr=min_isr, elr_enabled=config.eligible_leader_replicas_enable)
        if partition.has_leader and not image.is_active(partition.leader):
            found.append(f"leader {partition.leader} is not an active broker")
        inactive = [r for r in partition.isr if not image.is_active(r)]
        last_member_kept = not config.eligible_leader_replicas_enable and len(partition.isr) == 1
        if inactive and not (last_member_kept and not partition.has_leader):
            found.append(f"ISR {partition.isr} holds inactive brokers {inactive}")
        violations.extend(f"{tp.topic}-{tp.partition}: {v}" for v in found)
    for broker_id, registration in image.brokers.items():
        if registration.broker_epoch > image.last_broker_epoch:
            violations.append(f"broker {broker_id} has epoch {registration.broker_epoch} past the last one")
    return violations


# -- topic rules ----------------------------------------------------------------------------------------------


def effective_min_isr(topic: TopicImage, config: ControllerConfig) -> int:
    """Kafka's getTopicEffectiveMinIsr: the topic's min.insync.replicas (or the default), at most its RF."""
    configured = _parse_int(topic.configs.get(MIN_INSYNC_REPLICAS, "")) or config.min_insync_replicas
    replication_factor = len(topic.partitions[0].replicas) if topic.partitions else configured
    return min(configured, replication_factor)


def unclean_leader_election_enabled(topic: TopicImage, config: ControllerConfig) -> bool:
    configured = topic.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)
    parsed = None if configured is None else _parse_bool(configured)
    return config.unclean_leader_election_enable if parsed is None else parsed


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate: why a topic name is illegal, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} characters, topic name: {name}"
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return f"Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def _colliding_topic(image: MetadataImage, name: str) -> str | None:
    """Kafka refuses a name that equals an existing one once '.' is read as '_' (metric names would clash)."""
    if "." not in name and "_" not in name:
        return None
    unified = name.replace(".", "_")
    colliding = sorted(n for n in image.topic_ids if ("." in n or "_" in n) and n.replace(".", "_") == unified)
    return colliding[0] if colliding else None


def preferred_elections_due(image: MetadataImage, percentage: int) -> tuple[TopicPartition, ...]:
    """The auto rebalance check (the ZooKeeper controller's checkAndTriggerAutoLeaderRebalance): for each broker
    B, of the partitions whose preferred replica is B, the share not led by B; when it is strictly above
    `percentage`, those of them whose B is active and in the ISR are due a preferred election.

    With 10 partitions preferring B, 1 led elsewhere (10%) is not above 10%, 2 (20%) are.
    """
    by_preferred: dict[int, list[tuple[TopicPartition, PartitionRegistration]]] = {}
    for tp, partition in image.all_partitions():
        by_preferred.setdefault(partition.preferred_leader, []).append((tp, partition))
    due: list[TopicPartition] = []
    for broker_id in sorted(by_preferred):
        preferred_here = by_preferred[broker_id]
        elsewhere = [(tp, p) for tp, p in preferred_here if p.leader != broker_id]
        if len(elsewhere) * 100 > percentage * len(preferred_here):
            due.extend(tp for tp, p in elsewhere if image.is_active(broker_id) and broker_id in p.isr)
    return tuple(sorted(due))


# -- broker heartbeat state -------------------------------------------------------------------------------------


class BrokerState(Enum):
    """Kafka's BrokerControlState."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass(slots=True)
class BrokerSession:
    """The controller's soft state of one broker (Kafka's BrokerHeartbeatState): never in the log. A new active
    controller starts every session at its first look, as Kafka's does on activation."""

    last_contact_ms: int
    metadata_offset: int | None = None
    """The broker's last reported metadata offset; None: it reports none and counts as caught up."""
    controlled_shutdown_offset: int = -1
    """The last offset of its controlled shutdown records; -1: not shutting down."""


def next_broker_state(
    current: BrokerState,
    *,
    want_fence: bool,
    want_shutdown: bool,
    caught_up: bool,
    leads_partitions: bool,
    others_caught_up: bool,
    started_controlled_shutdown: bool,
) -> BrokerState:
    """Kafka's calculateNextBrokerState (the table in the module docstring)."""
    if current is BrokerState.FENCED:
        if want_shutdown:
            return BrokerState.SHUTDOWN_NOW
        if not want_fence and caught_up and not started_controlled_shutdown:
            return BrokerState.UNFENCED
        return BrokerState.FENCED
    if current is BrokerState.UNFENCED:
        if want_fence:
            return BrokerState.SHUTDOWN_NOW if want_shutdown else BrokerState.FENCED
        if want_shutdown:
            return BrokerState.CONTROLLED_SHUTDOWN if leads_partitions else BrokerState.SHUTDOWN_NOW
        return BrokerState.UNFENCED
    if current is BrokerState.CONTROLLED_SHUTDOWN:
        if leads_partitions or not others_caught_up:
            return BrokerState.CONTROLLED_SHUTDOWN
        return BrokerState.SHUTDOWN_NOW
    return BrokerState.SHUTDOWN_NOW


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
        self._sessions: dict[int, BrokerSession] = {}
        self._outstanding: deque[MetadataRecord] = deque()

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def sessions(self) -> Mapping[int, BrokerSession]:
        return self._sessions

    def apply(self, records: Iterable[MetadataRecord]) -> None:
        """Move the image on by committed records: the last result's records, in order, then any others."""
        for record in records:
            if self._outstanding:
                expected = self._outstanding.popleft()
                assert record == expected, f"applied {record} while {expected} of the last result was due"
            self._image = self._image.apply(record)

    # -- brokers ------------------------------------------------------------------------------------------------

    def register_broker(
        self, broker_id: int, incarnation_id: str, previous_broker_epoch: int, now_ms: int
    ) -> ControllerResult[BrokerRegistrationReply]:
        """Kafka's registerBroker. The new broker epoch is the offset the result's first record will get. A new
        incarnation's old partitions are handled first: as a fencing after a clean shutdown (the broker's epoch
        on disk equals its last registration's), or with ELR enabled, after an unclean one, by removing it from
        every ISR and ELR. The broker registers fenced and is unfenced by a later heartbeat."""
        self._check_no_outstanding()
        existing = self._image.broker(broker_id)
        if broker_id < 0:
            return self._reply(BrokerRegistrationReply(ErrorCode.INVALID_REQUEST, message="negative broker id"))
        new_incarnation = existing is None or existing.incarnation_id != incarnation_id
        if existing is not None and new_incarnation and self._has_valid_session(broker_id, now_ms):
            message = "Another broker is registered with that broker id."
            return self._reply(BrokerRegistrationReply(ErrorCode.DUPLICATE_BROKER_REGISTRATION, message=message))
        work = _Decision(self._image)
        broker_epoch = self._image.next_offset
        if existing is not None and (new_incarnation or not existing.fenced):
            # A same-incarnation retry of an unfenced broker is clean; Kafka writes its fenced registration
            # without moving its leaderships, Hightide moves them first so no fenced broker ever leads.
            clean = not new_incarnation or existing.broker_epoch == previous_broker_epoch
            self._handle_restart(work, broker_id, clean)
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            incarnation_id=incarnation_id,
            previous_broker_epoch=previous_broker_epoch,
        )
        registered = events.BrokerRegistered(
            broker=broker_id, broker_epoch=broker_epoch, previous_broker_epoch=previous_broker_epoch, fenced=True
        )
        work.add(record, registered)
        self._sessions[broker_id] = BrokerSession(last_contact_ms=now_ms)
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
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """Kafka's processBrokerHeartbeat: STALE_BROKER_EPOCH unless `broker_epoch` is the broker's current one;
        otherwise the transition of the table in the module docstring, and the session is renewed."""
        self._check_no_outstanding()
        registration = self._image.broker(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            return self._reply(BrokerHeartbeatReply(ErrorCode.STALE_BROKER_EPOCH))
        session = self._session(broker_id, now_ms)
        current = _current_state(registration.fenced, registration.in_controlled_shutdown)
        caught_up = metadata_offset is None or metadata_offset >= registration.registration_offset
        next_state = next_broker_state(
            current,
            want_fence=want_fence,
            want_shutdown=want_shutdown,
            caught_up=caught_up,
            leads_partitions=bool(self._image.partitions_led_by(broker_id)),
            others_caught_up=session.controlled_shutdown_offset <= self._lowest_active_offset(),
            started_controlled_shutdown=registration.in_controlled_shutdown,
        )
        work = _Decision(self._image)
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
        stale = sorted(
            (self._session(broker_id, now_ms).last_contact_ms, broker_id)
            for broker_id, registration in self._image.brokers.items()
            if not registration.fenced and not self._has_valid_session(broker_id, now_ms)
        )
        work = _Decision(self._image)
        for _, broker_id in stale:
            self._fence(work, broker_id, reason="session_timeout")
            self._sessions[broker_id].controlled_shutdown_offset = -1
        return self._result(work, tuple(broker_id for _, broker_id in stale))

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
        self._sessions.pop(broker_id, None)
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
        error = self._check_new_topic(name, topic_id, configs)
        if error is not None:
            return self._reply(error)
        replicas_or_error = self._replicas_for_new_topic(partitions, replication_factor, assignments)
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
            return self._reply(Reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"))
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
            return self._reply(Reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"))
        both = sorted(set(set_configs) & set(delete_configs))
        if both:
            return self._reply(Reply(ErrorCode.INVALID_REQUEST, f"Duplicate config keys: {','.join(both)}"))
        for key in [*set_configs, *delete_configs]:
            if key not in TOPIC_CONFIGS:
                return self._reply(Reply(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}"))
        for key, value in set_configs.items():
            if not TOPIC_CONFIGS[key](value):
                return self._reply(Reply(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}"))
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
            return self._reply(Reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"))
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
        replicas_or_error = self._replicas_for_new_partitions(topic, additional, assignments)
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
            is_acceptable_leader=self._image.is_active,
            min_isr=effective_min_isr(topic, self.config),
            elr_enabled=self.config.eligible_leader_replicas_enable,
            election=self._election_for(topic),
            target_isr=request.new_isr,
        )
        if change is not None:
            # Without reassignment the leader is in the new ISR and active, so it stays leader.
            assert change.record.leader == NO_LEADER_CHANGE, change
            grew = not set(request.new_isr) <= set(before.isr)
            self._commit(
                work, topic, request.partition, change, _Context(reason="isr_expand" if grew else "isr_shrink")
            )
        after = work.image.partition(request.topic, request.partition)
        assert after is not None
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
        INELIGIBLE_REPLICA (a member unregistered, shutting down, fenced, or of another broker epoch)."""
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
            if registration is None or not registration.active:
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

    # -- broker transitions -------------------------------------------------------------------------------------

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

    def _has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        registration = self._image.broker(broker_id)
        if registration is None or registration.fenced:
            return False
        session = self._session(broker_id, now_ms)
        return session.last_contact_ms + self.config.broker_session_timeout_ms >= now_ms

    def _session(self, broker_id: int, now_ms: int) -> BrokerSession:
        session = self._sessions.get(broker_id)
        if session is None:
            session = self._sessions[broker_id] = BrokerSession(last_contact_ms=now_ms)
        return session

    def _lowest_active_offset(self) -> int:
        """The least metadata offset any active broker reported (Kafka's lowestActiveOffset)."""
        offsets = [
            _UNBOUNDED_OFFSET if session.metadata_offset is None else session.metadata_offset
            for broker_id, session in self._sessions.items()
            if self._image.is_active(broker_id)
        ]
        return min(offsets, default=_UNBOUNDED_OFFSET)

    # -- partition changes --------------------------------------------------------------------------------------

    def _update_partitions(self, work: _Decision, partitions: Iterable[TopicPartition], context: _Context) -> None:
        """Kafka's generateLeaderAndIsrUpdates: for each partition, the ISR without the broker being removed (or
        restarted uncleanly), and an election where that broker led, counting the one being added as active."""
        removed = {b for b in (context.broker_to_remove, context.broker_with_unclean_shutdown) if b is not None}

        def acceptable(replica: int) -> bool:
            return replica not in removed and (replica == context.broker_to_add or work.image.is_active(replica))

        unclean = context.broker_with_unclean_shutdown
        for topic_name, partition_id in partitions:
            topic = work.image.topic(topic_name)
            assert topic is not None
            partition = topic.partitions[partition_id]
            change = build_partition_change(
                partition,
                topic_id=topic.topic_id,
                partition_id=partition_id,
                is_acceptable_leader=acceptable,
                min_isr=effective_min_isr(topic, self.config),
                elr_enabled=self.config.eligible_leader_replicas_enable,
                election=self._election_for(topic),
                target_isr=[r for r in partition.isr if r not in removed],
                unclean_shutdown_replicas=frozenset() if unclean is None else frozenset({unclean}),
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
                topic_name, partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
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
            is_acceptable_leader=work.image.is_active,
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

    # -- new topics and partitions ------------------------------------------------------------------------------

    def _check_new_topic(self, name: str, topic_id: str, configs: Mapping[str, str | None]) -> CreateTopicReply | None:
        """The name and config checks of createTopics, in Kafka's order of precedence."""
        error: CreateTopicReply | None = None
        illegal = topic_name_error(name)
        if illegal is not None:
            error = CreateTopicReply(ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)
        colliding = _colliding_topic(self._image, name)
        if colliding is not None:
            message = f"Topic '{name}' collides with existing topic: {colliding}"
            error = CreateTopicReply(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
        if name in self._image.topic_ids:
            error = CreateTopicReply(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if error is not None:
            return error
        nulls = [key for key, value in configs.items() if value is None]
        if nulls:
            message = f"Null value not supported for topic configs: {','.join(nulls)}"
            return CreateTopicReply(ErrorCode.INVALID_CONFIG, message)
        for key, value in configs.items():
            validator = TOPIC_CONFIGS.get(key)
            if validator is None:
                return CreateTopicReply(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
            if value is None or not validator(value):
                return CreateTopicReply(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}")
        if not topic_id or topic_id in self._image.topics:
            return CreateTopicReply(ErrorCode.INVALID_REQUEST, f"Topic id '{topic_id}' is empty or in use.")
        return None

    def _replicas_for_new_topic(
        self, partitions: int, replication_factor: int, assignments: Sequence[Sequence[int]] | None
    ) -> list[tuple[int, ...]] | CreateTopicReply:
        if assignments:
            if replication_factor != -1:
                message = "A manual partition assignment was specified, but replication factor was not set to -1."
                return CreateTopicReply(ErrorCode.INVALID_REQUEST, message)
            if partitions != -1:
                message = "A manual partition assignment was specified, but numPartitions was not set to -1."
                return CreateTopicReply(ErrorCode.INVALID_REQUEST, message)
            expected_rf = len(assignments[0])
            for partition_id, replicas in enumerate(assignments):
                problem = self._manual_assignment_error(replicas, expected_rf if partition_id else None)
                if problem is None and not any(self._image.is_active(r) for r in replicas):
                    problem = (
                        f"All brokers specified in the manual partition assignment for partition {partition_id} "
                        "are fenced or in controlled shutdown."
                    )
                if problem is not None:
                    return CreateTopicReply(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            return [tuple(replicas) for replicas in assignments]
        if replication_factor < -1 or replication_factor == 0:
            message = "Replication factor must be larger than 0, or -1 to use the default value."
            return CreateTopicReply(ErrorCode.INVALID_REPLICATION_FACTOR, message)
        if partitions < -1 or partitions == 0:
            message = "Number of partitions was set to an invalid non-positive value."
            return CreateTopicReply(ErrorCode.INVALID_PARTITIONS, message)
        count = self.config.num_partitions if partitions == -1 else partitions
        factor = self.config.default_replication_factor if replication_factor == -1 else replication_factor
        if count > RECORDS_PER_REQUEST_MAX:
            message = f"Creating {count} partitions exceeds {RECORDS_PER_REQUEST_MAX} records."
            return CreateTopicReply(ErrorCode.INVALID_PARTITIONS, message)
        placed = self._place(count, factor, fixed_start_index=-1, start_partition_id=0)
        if isinstance(placed, Reply):
            return CreateTopicReply(placed.error, placed.message)
        return placed

    def _replicas_for_new_partitions(
        self, topic: TopicImage, additional: int, assignments: Sequence[Sequence[int]] | None
    ) -> list[tuple[int, ...]] | Reply:
        replication_factor = len(topic.partitions[0].replicas)
        current = len(topic.partitions)
        if assignments is not None:
            for offset, replicas in enumerate(assignments):
                problem = self._manual_assignment_error(replicas, replication_factor)
                if problem is None and not any(self._image.is_active(r) for r in replicas):
                    problem = (
                        f"All brokers specified in the manual partition assignment for partition "
                        f"{current + offset} are fenced or in controlled shutdown."
                    )
                if problem is not None:
                    return Reply(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            return [tuple(replicas) for replicas in assignments]
        # AdminZkClient.createPartitions: continue the leaders' rotation from partition 0's leader.
        brokers = self._image.active_brokers()
        first_leader = topic.partitions[0].preferred_leader
        start_index = next((i for i, b in enumerate(brokers) if b >= first_leader), 0)
        return self._place(additional, replication_factor, fixed_start_index=start_index, start_partition_id=current)

    def _place(
        self, count: int, replication_factor: int, *, fixed_start_index: int, start_partition_id: int
    ) -> list[tuple[int, ...]] | Reply:
        """Kafka's AdminUtils placement over the active brokers, by id."""
        brokers = self._image.active_brokers()
        prefix = f"Unable to replicate the partition {replication_factor} time(s): "
        if not brokers and self._image.brokers:
            message = prefix + "All brokers are currently fenced or in controlled shutdown."
            return Reply(ErrorCode.INVALID_REPLICATION_FACTOR, message)
        try:
            placed = assign_replicas_to_brokers(
                brokers, count, replication_factor, fixed_start_index, start_partition_id, choose=self._choose
            )
        except InvalidReplicaAssignment as error:
            return Reply(error.error_code, prefix + str(error.args[0]))
        return [tuple(placed[p]) for p in sorted(placed)]

    def _manual_assignment_error(self, replicas: Sequence[int], replication_factor: int | None) -> str | None:
        """Kafka's validateManualPartitionAssignment."""
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        previous = None
        for broker_id in sorted(replicas):
            if self._image.broker(broker_id) is None:
                return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
            if broker_id == previous:
                return f"The manual partition assignment includes the broker {broker_id} more than once."
            previous = broker_id
        if replication_factor is not None and len(replicas) != replication_factor:
            return (
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
                f"not consistent with previous partitions, which have {replication_factor} replica(s)."
            )
        return None

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


def _current_state(fenced: bool, in_controlled_shutdown: bool) -> BrokerState:
    if fenced:
        return BrokerState.FENCED
    return BrokerState.CONTROLLED_SHUTDOWN if in_controlled_shutdown else BrokerState.UNFENCED


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
