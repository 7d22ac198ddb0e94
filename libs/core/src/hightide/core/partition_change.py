"""Partition changes: KRaft's PartitionChangeBuilder and the rules every partition registration obeys.

Room: libs/core (rules, pure). `build_partition_change` turns a partition's registration and a target (a new
ISR, a broker to remove, an election to run, a replica assignment) into the one PartitionChangeRecord that makes
it, or None when nothing changes; `elect_leader` is its election. `partition_violations` and `change_violations`
are the golden rules of one registration and of one change, checked by the controller on every change it makes.

Elections (Kafka's PartitionChangeBuilder, ported rule by rule): a valid leader is in the target ISR, or in the
ELR when the target ISR is empty, and acceptable (the caller says: registered, unfenced, not shutting down, not
the broker being removed, its replica not offline). ONLINE keeps a valid current leader, else takes the first
valid replica in replica order; PREFERRED tries the first replica first. With ELR (KIP-966) enabled, an empty
ISR and ELR fall back to the last known leader if it is acceptable; UNCLEAN (the topic allows it, or an admin
asks) then takes the first acceptable replica and resets the ISR to it.

Reassignment (Kafka's PartitionReassignmentReplicas and completeReassignmentIfNeeded): while replicas are being
added or removed, every change first checks whether the target ISR now holds every target replica; if so the
reassignment completes in that same record: replicas := target, ISR := target ISR minus the removed replicas,
adding and removing emptied, and the election runs over the target (a removed leader is replaced). A change whose
replicas lose a member bumps the leader epoch even when the leader stays (triggerLeaderEpochBumpForReplica-
ReassignmentIfNeeded), so the leader's followers set is fenced by epoch. Unlike Kafka, the ELR never takes in a
replica outside the target replicas (a removed ISR member would otherwise land in the ELR of a partition it has
left).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from hightide.core.metadata_image import PartitionRegistration
from hightide.protocol.metadata import NO_LEADER, NO_LEADER_CHANGE, PartitionChangeRecord


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
    target_assignment: Assignment | None = None,
    emptied_replicas: frozenset[int] = frozenset(),
) -> PartitionChange | None:
    """Kafka's `PartitionChangeBuilder.build()` without leader recovery state; None if nothing changes.
    `target_assignment` (replicas, removing, adding) starts, changes or reverts a reassignment; None keeps the
    partition's own. The steps, in Kafka's order:

    0. complete the reassignment if the target ISR now holds every target replica (`complete_reassignment`).
    1. populate the target ELR (KIP-966): if |target ISR| >= min ISR the ELR and last known ELR are emptied;
       otherwise ELR := (ELR | ISR) - target ISR - unclean shutdown replicas (ascending, as Java's HashSet of
       small ints iterates).
    2. elect (`elect_leader`); a leader from the ELR becomes the whole ISR and leaves the ELR; an unclean one
       becomes the whole ISR and empties the ELR.
    3. set the ISR if it changed; with ELR disabled it never becomes empty (the last member stays, leaderless).
    4. the last known ELR holds the last leader, set when the ISR first becomes empty and cleared once the
       partition has a leader again (Kafka's useLastKnownLeaderInBalancedRecovery, its default). Never one of
       `emptied_replicas` (a replica whose log dir was replaced holds nothing: electing it would lose everything).
    """
    target = list(partition.isr if target_isr is None else target_isr)
    assignment = target_assignment or Assignment(
        partition.replicas, partition.removing_replicas, partition.adding_replicas
    )
    completed = complete_reassignment(assignment, target)
    if completed is not None:
        assignment, target = completed
    elr = list(partition.elr)
    if elr_enabled:
        elr = _populate_target_elr(partition, target, min_isr, unclean_shutdown_replicas, assignment.replicas)
    node, unclean = elect_leader(
        partition,
        target_isr=target,
        target_elr=elr,
        is_acceptable_leader=is_acceptable_leader,
        election=election,
        elr_enabled=elr_enabled,
        target_replicas=assignment.replicas,
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
    if leader == NO_LEADER_CHANGE and not set(partition.replicas) <= set(assignment.replicas):
        leader = partition.leader  # a replica leaves: the leader epoch goes up, the leader stays
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
        last_known_elr=_without(
            _last_known_leader(partition, isr, leader) if elr_enabled else None, partition, emptied_replicas
        ),
        replicas=_changed(assignment.replicas, partition.replicas),
        removing_replicas=_changed(assignment.removing, partition.removing_replicas),
        adding_replicas=_changed(assignment.adding, partition.adding_replicas),
    )
    if record == PartitionChangeRecord(topic_id=topic_id, partition=partition_id):
        return None
    return PartitionChange(
        record=record, unclean=unclean, from_elr=from_elr, from_last_known_leader=from_last_known_leader
    )


def _populate_target_elr(
    partition: PartitionRegistration,
    target_isr: list[int],
    min_isr: int,
    unclean_shutdown: frozenset[int],
    target_replicas: Sequence[int],
) -> list[int]:
    """Kafka's maybePopulateTargetElr, the ELR half (the last known ELR is the last leader, see build), kept
    within the target replicas."""
    if len(target_isr) >= min_isr:
        return []
    candidates = set(partition.elr) | set(partition.isr)
    return sorted(r for r in candidates if r not in target_isr and r not in unclean_shutdown and r in target_replicas)


def _without(
    last_known: tuple[int, ...] | None, partition: PartitionRegistration, emptied: frozenset[int]
) -> tuple[int, ...] | None:
    """The record's last known ELR with the emptied replicas left out (None: no change)."""
    current = partition.last_known_elr if last_known is None else last_known
    kept = tuple(r for r in current if r not in emptied)
    return last_known if kept == current else kept


def _changed(target: tuple[int, ...], current: tuple[int, ...]) -> tuple[int, ...] | None:
    return None if target == current else target


@dataclass(frozen=True, slots=True)
class Assignment:
    """A partition's replica assignment (Kafka's PartitionReassignmentReplicas): `replicas` is the target
    followed by `removing`; `adding` are the target's members not among the replicas before."""

    replicas: tuple[int, ...]
    removing: tuple[int, ...] = ()
    adding: tuple[int, ...] = ()

    @classmethod
    def towards(cls, current: Sequence[int], target: Sequence[int]) -> Assignment:
        """Kafka's PartitionReassignmentReplicas(current, target): removing = current - target, adding = target -
        current (each ascending, as Java's TreeSet), replicas = target + removing."""
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        return cls(replicas=(*target, *removing), removing=removing, adding=adding)

    @property
    def reassigning(self) -> bool:
        return bool(self.removing or self.adding)


def complete_reassignment(assignment: Assignment, target_isr: Sequence[int]) -> tuple[Assignment, list[int]] | None:
    """Kafka's maybeCompleteReassignment: None while no reassignment is in progress or the target ISR (less the
    replicas being removed, never empty) does not yet hold every target replica; else the completed assignment
    and its ISR (target ISR minus the removed replicas)."""
    if not assignment.reassigning:
        return None
    isr = [r for r in target_isr if r not in assignment.removing]
    replicas = tuple(r for r in assignment.replicas if r not in assignment.removing)
    if not isr or not replicas or not set(replicas) <= set(isr):
        return None
    return Assignment(replicas=replicas), isr


def revert_reassignment(partition: PartitionRegistration) -> tuple[Assignment, list[int], bool]:
    """Kafka's PartitionReassignmentRevert: (the original assignment, the ISR without the replicas being added,
    whether that needs an unclean election: only added replicas were in the ISR, so it restarts from the first
    original replica)."""
    assert partition.reassigning, partition
    original = partition.original_replicas
    assert original, partition
    isr = [r for r in partition.isr if r not in partition.adding_replicas]
    if not isr:
        return Assignment(replicas=original), [original[0]], True
    return Assignment(replicas=original), isr, False


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
    target_replicas: Sequence[int] | None = None,
) -> tuple[int, bool]:
    """Kafka's electLeader over the target replicas (the partition's own unless a reassignment changes them):
    (the new leader or NO_LEADER, whether the choice was unclean)."""

    def valid(replica: int) -> bool:
        in_quorum = replica in target_isr or (not target_isr and replica in target_elr)
        return in_quorum and is_acceptable_leader(replica)

    replicas = tuple(partition.replicas if target_replicas is None else target_replicas)
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


# -- invariants ------------------------------------------------------------------------------------------------


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
    violations += _reassignment_violations(partition)
    return violations


def _reassignment_violations(partition: PartitionRegistration) -> list[str]:
    """Kafka's PartitionRegistration during a reassignment: adding and removing are duplicate-free, disjoint,
    within the replicas, and leave a non-empty target."""
    adding, removing = set(partition.adding_replicas), set(partition.removing_replicas)
    if len(adding) != len(partition.adding_replicas) or len(removing) != len(partition.removing_replicas):
        return [f"adding {partition.adding_replicas} or removing {partition.removing_replicas} repeat a broker"]
    if not (adding | removing) <= set(partition.replicas) or adding & removing:
        return [
            f"adding {partition.adding_replicas} / removing {partition.removing_replicas} not disjoint within "
            f"replicas {partition.replicas}"
        ]
    if partition.replicas and not partition.target_replicas:
        return [f"removing {partition.removing_replicas} takes every replica of {partition.replicas}"]
    return []


def change_violations(before: PartitionRegistration, after: PartitionRegistration) -> list[str]:
    """What is wrong with one partition change (one PartitionChangeRecord applied): the partition epoch goes up
    by one; the leader epoch goes up by one exactly when the leader changes or a replica leaves; the replicas
    change only by a reassignment (one in progress before or after the change, or one that started and completed
    at once, which can only drop or reorder replicas)."""
    violations: list[str] = []
    if after.partition_epoch != before.partition_epoch + 1:
        violations.append(f"partition epoch {before.partition_epoch} -> {after.partition_epoch}")
    replica_left = not set(before.replicas) <= set(after.replicas)
    expected_leader_epoch = before.leader_epoch + (1 if after.leader != before.leader or replica_left else 0)
    if after.leader_epoch != expected_leader_epoch:
        violations.append(
            f"leader {before.leader} -> {after.leader} moved the leader epoch "
            f"{before.leader_epoch} -> {after.leader_epoch}"
        )
    by_reassignment = before.reassigning or after.reassigning or set(after.replicas) <= set(before.replicas)
    if after.replicas != before.replicas and not by_reassignment:
        violations.append(f"replicas {before.replicas} -> {after.replicas} without a reassignment")
    return violations
