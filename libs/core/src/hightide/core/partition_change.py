"""Partition changes: KRaft's PartitionChangeBuilder and the rules every partition registration obeys.

Room: libs/core (rules, pure). `build_partition_change` turns a partition's registration and a target (a new
ISR, a broker to remove, an election to run) into the one PartitionChangeRecord that makes it, or None when
nothing changes; `elect_leader` is its election. `partition_violations` and `change_violations` are the golden
rules of one registration and of one change, checked by the controller on every change it makes.

Elections (Kafka's PartitionChangeBuilder, ported rule by rule): a valid leader is in the target ISR, or in the
ELR when the target ISR is empty, and acceptable (the caller says: registered, unfenced, not shutting down, not
the broker being removed, its replica not offline). ONLINE keeps a valid current leader, else takes the first
valid replica in replica order; PREFERRED tries the first replica first. With ELR (KIP-966) enabled, an empty
ISR and ELR fall back to the last known leader if it is acceptable; UNCLEAN (the topic allows it, or an admin
asks) then takes the first acceptable replica and resets the ISR to it.
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
