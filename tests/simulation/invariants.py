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
| written_once                 | an idempotent producer's record is committed at one offset only: a retry is     |
|                              | never appended twice (KIP-98), unless retention had deleted the first copy*     |
| retention_honoured           | each time a replica runs retention, it deletes exactly what Kafka's rule does   |
|                              | at its wall-clock time: the oldest segments wholly below the HW that are below  |
|                              | the log start, beyond retention.bytes or older than retention.ms; no other      |
| converged (end, healed)      | one leader, ISR = all replicas, identical logs from the latest log start on     |

* not evaluated while the partition is exempt: after an unclean election, or after lossy crashes of at least
  min.insync.replicas replicas that held the committed tail (reliability.md's Exempt(p, t)).

Retention deletes committed records, so a replica's log holds only the records from its log start offset on: every
check that compares logs or looks for a record compares offsets at or above the log start of the log it reads
(a record below it was deleted below the HW, which retention_honoured judges), and is strict above it.
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


@dataclass(frozen=True)
class SegmentFacts:
    """A segment as retention reads it: offsets [base_offset, next_offset), its size, and its largest timestamp (its
    largest record timestamp, or its file's modification time when it has none)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int


@dataclass(frozen=True)
class RetentionCheck:
    """One retention run of one replica: its segments (oldest first) before and after, its log start before and
    after, its HW, its retention configs, and its wall clock when it ran."""

    broker: int
    wall_ms: int
    high_watermark: int
    log_start_offset: int
    log_start_offset_after: int
    retention_ms: int
    retention_bytes: int
    before: tuple[SegmentFacts, ...]
    after: tuple[SegmentFacts, ...]


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
    committed_at: dict[bytes, int] = field(default_factory=dict)  # each committed value's first offset (written_once)


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
    held to the leader's committed records.

    An ISR member is held to the leader's records, and the leader holds none below its log start offset: what a
    member holds there above its own HW is retention's to delete, and it does so as soon as it follows the leader's
    log start. (It may differ: a replica that left the ISR with an uncommitted tail, while the leader's retention
    deleted the offsets where the two diverge, is not told to truncate, as Kafka's leader answers an epoch older than
    its epoch cache with that cache's first start; it rejoins when its log end reaches the HW. Should it lead before
    it deletes that tail, the tail becomes committed there, and the own-HW clause names it.)"""
    reference = {} if exempt else dict(committed or {})
    if leader is not None:
        reference.update((o, v) for o, v, _ in leader.records if o < leader.high_watermark)
    leader_start = _log_start(leader) if leader is not None else 0
    for replica in replicas:
        in_sync = replica.alive and replica.broker in isr and leader is not None
        own = 0 if exempt and not in_sync else replica.high_watermark
        limit = max(own, leader.high_watermark if in_sync and leader else 0)
        for offset, value, _ in replica.records:
            if offset >= limit:
                break
            if offset >= own and offset < leader_start:
                continue  # the ISR clause: the leader holds nothing below its log start (see the docstring)
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
            check_written_once(history, value, offset, _log_start(leader))
    history.committed_end = max(history.committed_end, leader.high_watermark)


def check_written_once(history: PartitionHistory, value: bytes, offset: int, log_start_offset: int = 0) -> None:
    """Every value the simulated producers send is unique, so a value committed at a second offset is a batch
    appended twice: a retry the leader did not recognise as one (its producer id, epoch or sequence changed).

    Not when the first copy is below the leader's log start: retention deleted it, and with it the leader's memory of
    the producer (it rebuilds its producer table from its log), so a retry of that producer's first batch (sequence
    0) is appended again, as Kafka's is (producer_state.py, KIP-360); seed 29 does this (the first seed that does since
    KAFKA-9952, found by running seeds 0 up with this check watched; seed 133 did before)."""
    first = history.committed_at.setdefault(value, offset)
    if first != offset and first >= log_start_offset and not history.exempt:
        raise InvariantViolation(
            "written_once", history.name, f"{value!r} committed at offset {first} and again at offset {offset}"
        )


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
    """At the moment of an acks=all acknowledgement the record is in the leader's log below its HW (or below its log
    start: retention deleted it in the very step, which it does only below the HW)."""
    held = {o: v for o, v, _ in leader.records}
    deleted = offset < _log_start(leader) <= leader.high_watermark
    if not deleted and (held.get(offset) != value or offset >= leader.high_watermark):
        raise InvariantViolation(
            "acknowledged_is_committed",
            history.name,
            f"{value!r} acknowledged at offset {offset}, but leader {leader.broker} holds {held.get(offset)!r} "
            f"with HW {leader.high_watermark}",
        )
    history.acknowledged[value] = offset


def check_acknowledged_never_lost(
    history: PartitionHistory, final_log: Mapping[int, bytes], log_start_offset: int = 0
) -> None:
    """Every acknowledged record is in the final log, unless retention deleted it (below the log's start)."""
    if history.exempt:
        return
    for value, offset in history.acknowledged.items():
        if offset >= log_start_offset and final_log.get(offset) != value:
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
    """After healing: a leader, every replica in the ISR, and identical logs: the same log end offset, and the same
    records from the later of the two log starts on (each replica deletes by retention on its own clock)."""
    if controller.leader < 0:
        raise InvariantViolation("converged", name, "no leader after healing")
    if set(controller.isr) != set(controller.replicas):
        raise InvariantViolation("converged", name, f"ISR {controller.isr} is not all of {controller.replicas}")
    leader = next(r for r in replicas if r.broker == controller.leader)
    for replica in replicas:
        start = max(_log_start(replica), _log_start(leader))
        log = [(o, v) for o, v, _ in replica.records if o >= start]
        reference = [(o, v) for o, v, _ in leader.records if o >= start]
        if log != reference or _log_end(replica) != _log_end(leader):
            raise InvariantViolation(
                "converged",
                name,
                f"broker {replica.broker}'s log differs from leader {controller.leader}'s from offset {start} on "
                f"({len(log)} vs {len(reference)} records, log end {_log_end(replica)} vs {_log_end(leader)})",
            )


def _log_start(replica: ReplicaSnapshot) -> int:
    return replica.log_start_offset if replica.disk_log_start_offset is None else replica.disk_log_start_offset


def _log_end(replica: ReplicaSnapshot) -> int:
    return replica.log_end_offset if replica.disk_log_end_offset is None else replica.disk_log_end_offset


def check_retention_honoured(name: str, run: RetentionCheck) -> None:
    """Kafka's retention rule, stated on its own (not the core's `plan_retention`): the run deleted a prefix of the
    segments, every segment of it one the rule deletes, and the first segment it kept is one the rule keeps. The rule
    deletes the oldest segments, one after the other, while the next one is wholly below the HW (its offsets end at
    or below it), is not the empty active segment, and is wholly below the log start offset, or leaves at least
    retention.bytes behind it, or has a largest timestamp more than retention.ms before the replica's wall clock.
    When every segment goes, an empty one starts at the log end offset; the log start becomes the first kept
    segment's base offset, if that is higher."""
    before, after = run.before, run.after
    kept = before.index(after[0]) if after and after[0] in before else len(before)
    if kept < len(before):
        unchanged = after == before[kept:]
    else:
        end = before[-1].next_offset  # every segment went: an empty one starts at the log end offset
        unchanged = len(after) == 1 and (after[0].base_offset, after[0].next_offset, after[0].size_bytes) == (
            end,
            end,
            0,
        )
    if not unchanged:
        raise InvariantViolation(
            "retention_honoured",
            name,
            f"broker {run.broker}'s retention changed segments it did not delete: {before} -> {after}",
        )
    for index in range(min(kept + 1, len(before))):
        deletes, why = _retention_rule(run, index)
        if deletes != (index < kept):
            segment = before[index]
            done = "deleted" if index < kept else "kept"
            raise InvariantViolation(
                "retention_honoured",
                name,
                f"broker {run.broker} {done} segment [{segment.base_offset}, {segment.next_offset}) at wall time "
                f"{run.wall_ms}: {why}",
            )
    expected = run.log_start_offset
    if kept:
        first_kept = before[kept].base_offset if kept < len(before) else before[-1].next_offset
        expected = max(expected, first_kept)
    if run.log_start_offset_after != expected:
        raise InvariantViolation(
            "retention_honoured",
            name,
            f"broker {run.broker}'s log start went from {run.log_start_offset} to {run.log_start_offset_after}, "
            f"not {expected}",
        )


def _retention_rule(run: RetentionCheck, index: int) -> tuple[bool, str]:
    """Whether the rule deletes `run.before[index]` once the segments before it are gone, and why (or why not)."""
    segment = run.before[index]
    following = run.before[index + 1] if index + 1 < len(run.before) else None
    upper = segment.next_offset if following is None else following.base_offset
    if upper > run.high_watermark:
        return False, f"the rule keeps it: its offsets end at {upper}, above the HW {run.high_watermark}"
    if following is None and segment.size_bytes == 0:
        return False, "the rule keeps it: it is the empty active segment"
    if following is not None and following.base_offset <= run.log_start_offset:
        return True, f"the rule deletes it: it is wholly below the log start offset {run.log_start_offset}"
    behind = sum(s.size_bytes for s in run.before[index + 1 :])
    if 0 <= run.retention_bytes <= behind:
        return True, f"the rule deletes it: {behind} bytes stay without it, retention.bytes is {run.retention_bytes}"
    age = run.wall_ms - segment.largest_timestamp
    if 0 <= run.retention_ms < age:
        return True, f"the rule deletes it: its largest timestamp is {age} ms old, retention.ms is {run.retention_ms}"
    return False, (
        f"the rule keeps it: {age} ms old (retention.ms {run.retention_ms}), {behind} bytes behind it "
        f"(retention.bytes {run.retention_bytes}), not below the log start {run.log_start_offset}"
    )
