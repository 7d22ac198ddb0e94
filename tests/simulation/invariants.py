"""The replication invariants the simulator checks after every step, as pure functions over a snapshot.

Each check takes plain values (what every replica holds, what the controller committed, what clients were
told and saw) and raises `InvariantViolation` naming the invariant, the partition and the offsets. Keeping them
free of the simulator lets a test feed each one a violating history and watch it fail.

| name                         | statement                                                                       |
| ---------------------------- | ------------------------------------------------------------------------------- |
| one_leader_per_epoch         | no two brokers lead the same partition in the same leader epoch                 |
| epochs_monotonic             | a partition's leader epoch and partition epoch never go down (controller)       |
| leader_in_isr                | the controller's leader is a member of the ISR it committed                    |
| hw_within_log                | log start <= HW <= LEO on every replica                                          |
| log_continuity               | a live replica's core and its log agree on log start and LEO, and the log holds  |
|                              | every offset between them: the core never runs ahead of its log                  |
| hw_within_isr                | a leader's HW <= the known LEO of every member of its maximal ISR               |
| committed_prefixes_agree     | below its own HW a replica holds what was committed; ISR members hold the       |
|                              | leader's records below the leader's HW                                          |
| committed_never_truncated    | no truncation removes a record below the partition's committed offset*          |
| leader_completeness          | a new leader holds every record committed before it was elected*                |
| acknowledged_is_committed    | an acks=all acknowledgement's records are in the leader's log below its HW      |
| acknowledged_never_lost      | every acks=all acknowledged record stays in the committed log*                  |
| consumers_below_hw           | no consumer read an offset at or above the leader's HW at the time              |
| converged (end, healed)      | one leader, ISR = all replicas, identical logs                                  |

* not evaluated while the partition is exempt: after an unclean election, or after lossy crashes of at least
  min.insync.replicas replicas that held the committed tail (reliability.md's Exempt(p, t)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Record = tuple[int, bytes, int]  # (offset, value, leader epoch of its batch)


class InvariantViolation(AssertionError):
    """A broken replication invariant: the history that led here is a bug (or a mutant doing its job)."""

    def __init__(self, invariant: str, partition: str, detail: str) -> None:
        super().__init__(f"{invariant} [{partition}]: {detail}")
        self.invariant = invariant
        self.partition = partition


@dataclass(frozen=True)
class ReplicaSnapshot:
    broker: int
    alive: bool
    is_leader: bool
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    records: tuple[Record, ...]
    # On a leader: (broker, LEO as the leader last heard it) for every member of its maximal ISR it has heard from.
    isr_log_end_offsets: tuple[tuple[int, int], ...] = ()
    # Where the log on the replica's disk starts and ends (None: not known, the core's are taken).
    disk_log_start_offset: int | None = None
    disk_log_end_offset: int | None = None


@dataclass(frozen=True)
class ControllerView:
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class PartitionHistory:
    """What persists across steps for one partition: the highest committed offset seen, the committed
    records (the reference log), epochs seen, acknowledgements and exemptions."""

    name: str
    committed: dict[int, bytes] = field(default_factory=dict)
    committed_end: int = 0
    leaders_by_epoch: dict[int, int] = field(default_factory=dict)
    last_controller: ControllerView | None = None
    acknowledged: dict[bytes, int] = field(default_factory=dict)
    exempt: bool = False


def check_step(
    history: PartitionHistory, replicas: Sequence[ReplicaSnapshot], controller: ControllerView | None
) -> None:
    """Every per-step invariant for one partition; updates the history with what is now committed."""
    check_one_leader_per_epoch(history, replicas)
    if controller is not None:
        check_controller(history, controller)
    for replica in replicas:
        check_hw_within_log(history.name, replica)
        check_hw_within_isr(history.name, replica)
        check_log_continuity(history.name, replica)
    leader = _current_leader(replicas, controller)
    isr = controller.isr if controller is not None else ()
    check_committed_prefixes_agree(history.name, replicas, leader, isr, history.committed, exempt=history.exempt)
    if leader is not None:
        _record_committed(history, leader)
    if not history.exempt:
        check_committed_present(history, replicas, leader)


def _current_leader(replicas: Sequence[ReplicaSnapshot], controller: ControllerView | None) -> ReplicaSnapshot | None:
    if controller is None or controller.leader < 0:
        return None
    for replica in replicas:
        current = replica.is_leader and replica.leader_epoch == controller.leader_epoch
        if replica.broker == controller.leader and replica.alive and current:
            return replica
    return None


def check_one_leader_per_epoch(history: PartitionHistory, replicas: Iterable[ReplicaSnapshot]) -> None:
    for replica in replicas:
        if not replica.is_leader:
            continue
        seen = history.leaders_by_epoch.setdefault(replica.leader_epoch, replica.broker)
        if seen != replica.broker:
            raise InvariantViolation(
                "one_leader_per_epoch",
                history.name,
                f"brokers {seen} and {replica.broker} both led in epoch {replica.leader_epoch}",
            )


def check_controller(history: PartitionHistory, view: ControllerView) -> None:
    last = history.last_controller
    if last is not None and (view.leader_epoch < last.leader_epoch or view.partition_epoch < last.partition_epoch):
        raise InvariantViolation(
            "epochs_monotonic",
            history.name,
            f"epochs went from ({last.leader_epoch}, {last.partition_epoch}) to "
            f"({view.leader_epoch}, {view.partition_epoch})",
        )
    if last is not None and view.partition_epoch == last.partition_epoch and view != last:
        raise InvariantViolation(
            "epochs_monotonic", history.name, f"state changed without a new partition epoch: {last} -> {view}"
        )
    if view.leader >= 0 and view.leader not in view.isr:
        raise InvariantViolation("leader_in_isr", history.name, f"leader {view.leader} not in ISR {view.isr}")
    if not set(view.isr) <= set(view.replicas):
        raise InvariantViolation("leader_in_isr", history.name, f"ISR {view.isr} not within {view.replicas}")
    history.last_controller = view


def check_hw_within_log(name: str, replica: ReplicaSnapshot) -> None:
    if not replica.log_start_offset <= replica.high_watermark <= replica.log_end_offset:
        raise InvariantViolation(
            "hw_within_log",
            name,
            f"broker {replica.broker}: log start {replica.log_start_offset}, HW {replica.high_watermark}, "
            f"LEO {replica.log_end_offset}",
        )


def check_log_continuity(name: str, replica: ReplicaSnapshot) -> None:
    """The core never runs ahead of its log: what it counts as appended is on the disk, offset by offset (a refused
    append that the core counted anyway leaves a hole it would serve and commit)."""
    if not replica.alive:
        return
    start = replica.log_start_offset if replica.disk_log_start_offset is None else replica.disk_log_start_offset
    end = replica.log_end_offset if replica.disk_log_end_offset is None else replica.disk_log_end_offset
    if (start, end) != (replica.log_start_offset, replica.log_end_offset):
        raise InvariantViolation(
            "log_continuity",
            name,
            f"broker {replica.broker}: the core's log is [{replica.log_start_offset}, {replica.log_end_offset}), "
            f"the disk's [{start}, {end})",
        )
    offsets = [offset for offset, _, _ in replica.records]
    if offsets != list(range(start, start + len(offsets))) or start + len(offsets) != end:
        first_gap = next((o for o, e in zip(offsets, range(start, end), strict=False) if o != e), end)
        raise InvariantViolation(
            "log_continuity", name, f"broker {replica.broker}: the log [{start}, {end}) has a hole at {first_gap}"
        )


def check_hw_within_isr(name: str, replica: ReplicaSnapshot) -> None:
    """Kafka's HW rule waits for every member of the maximal ISR, so a leader never holds a HW above what an
    ISR member has: otherwise that member could be elected without committed records."""
    for member, log_end_offset in replica.isr_log_end_offsets:
        if log_end_offset < replica.high_watermark:
            raise InvariantViolation(
                "hw_within_isr",
                name,
                f"leader {replica.broker}'s HW {replica.high_watermark} is above ISR member {member}'s LEO "
                f"{log_end_offset}",
            )


def check_committed_prefixes_agree(
    name: str,
    replicas: Sequence[ReplicaSnapshot],
    leader: ReplicaSnapshot | None,
    isr: Sequence[int] = (),
    committed: Mapping[int, bytes] | None = None,
    *,
    exempt: bool = False,
) -> None:
    """Committed means the same record everywhere it counts: below its own HW every replica holds what was
    committed, and every live ISR member holds the leader's records below the leader's HW. (A replica outside
    the ISR may hold an uncommitted, divergent suffix: it truncates it when it follows again.) Once the partition
    is exempt, committed records may have been lost: a replica outside the ISR may then still hold, below its
    own HW, what was committed before the loss, until it follows the new leader and truncates; only the ISR is
    held to the leader's committed records."""
    reference = {} if exempt else dict(committed or {})
    if leader is not None:
        reference.update((o, v) for o, v, _ in leader.records if o < leader.high_watermark)
    for replica in replicas:
        in_sync = replica.alive and replica.broker in isr and leader is not None
        own = 0 if exempt and not in_sync else replica.high_watermark
        limit = max(own, leader.high_watermark if in_sync and leader else 0)
        for offset, value, _ in replica.records:
            if offset >= limit:
                break
            if offset in reference and reference[offset] != value:
                raise InvariantViolation(
                    "committed_prefixes_agree",
                    name,
                    f"offset {offset}: committed {reference[offset]!r}, broker {replica.broker} has {value!r}",
                )


def _record_committed(history: PartitionHistory, leader: ReplicaSnapshot) -> None:
    for offset, value, _ in leader.records:
        if offset < leader.high_watermark and offset not in history.committed:
            history.committed[offset] = value
    history.committed_end = max(history.committed_end, leader.high_watermark)


def check_committed_present(
    history: PartitionHistory, replicas: Sequence[ReplicaSnapshot], leader: ReplicaSnapshot | None
) -> None:
    """Committed records are never truncated and every leader has them (leader completeness)."""
    if leader is None:
        return
    held = {offset: value for offset, value, _ in leader.records}
    for offset, value in history.committed.items():
        if offset < leader.log_start_offset:
            continue
        if held.get(offset) != value:
            raise InvariantViolation(
                "leader_completeness",
                history.name,
                f"leader {leader.broker} (epoch {leader.leader_epoch}) lacks committed offset {offset} "
                f"({value!r}); it holds {held.get(offset)!r}",
            )


def check_truncation(history: PartitionHistory, replica: int, truncated_to: int, high_watermark_before: int) -> None:
    """A truncation that cuts below what the replica itself knew to be committed removes committed records."""
    if history.exempt or truncated_to >= high_watermark_before:
        return
    raise InvariantViolation(
        "committed_never_truncated",
        history.name,
        f"broker {replica} truncated to {truncated_to}, below its high watermark {high_watermark_before}",
    )


def check_acknowledged(history: PartitionHistory, value: bytes, offset: int, leader: ReplicaSnapshot) -> None:
    """At the moment of an acks=all acknowledgement the record is in the leader's log below its HW."""
    held = {o: v for o, v, _ in leader.records}
    if held.get(offset) != value or offset >= leader.high_watermark:
        raise InvariantViolation(
            "acknowledged_is_committed",
            history.name,
            f"{value!r} acknowledged at offset {offset}, but leader {leader.broker} holds {held.get(offset)!r} "
            f"with HW {leader.high_watermark}",
        )
    history.acknowledged[value] = offset


def check_acknowledged_never_lost(history: PartitionHistory, final_log: Mapping[int, bytes]) -> None:
    if history.exempt:
        return
    for value, offset in history.acknowledged.items():
        if final_log.get(offset) != value:
            raise InvariantViolation(
                "acknowledged_never_lost",
                history.name,
                f"acknowledged {value!r} at offset {offset} is gone; offset holds {final_log.get(offset)!r}",
            )


def check_consumer_read(name: str, offset: int, high_watermark: int) -> None:
    if offset >= high_watermark:
        raise InvariantViolation(
            "consumers_below_hw", name, f"a consumer read offset {offset} with the HW at {high_watermark}"
        )


def check_converged(name: str, replicas: Sequence[ReplicaSnapshot], controller: ControllerView) -> None:
    """After healing: a leader, every replica in the ISR, and identical logs."""
    if controller.leader < 0:
        raise InvariantViolation("converged", name, "no leader after healing")
    if set(controller.isr) != set(controller.replicas):
        raise InvariantViolation("converged", name, f"ISR {controller.isr} is not all of {controller.replicas}")
    logs = {r.broker: [(o, v) for o, v, _ in r.records] for r in replicas}
    reference = logs[controller.leader]
    for broker, log in logs.items():
        if log != reference:
            raise InvariantViolation(
                "converged",
                name,
                f"broker {broker}'s log differs from leader {controller.leader}'s "
                f"({len(log)} vs {len(reference)} records)",
            )
