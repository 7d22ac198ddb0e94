"""Committed records, truncations, leader completeness, acknowledged writes and the attribution of every loss.

Room: libs/audit (pure). The plain-Python specification of five checks; `hightide.history.checks.commits` runs the
same rules in Spark and must give the same findings, row for row.

The model. Events carry no record values, but every batch carries its leader epoch (KIP-101) and a leader appends
each offset at most once in its epoch, so a record is named by (partition, offset, leader epoch of its batch). A
replica's log is folded from its own broker's events alone, as offsets [log start, LEO) and leader epoch entries
(epoch, start offset): the epoch of the record at offset o is that of the last entry starting at or below o, so
the entries are the log's runs and every rule below works on offset RANGES, never on one row per offset.

| event (the replica's own) | its log after it                                                              |
| ------------------------- | ----------------------------------------------------------------------------- |
| LogOpened                 | exactly the event's log start, LEO and entries (all before is replaced)      |
| LeaderEpochStarted(e, s)  | entries starting at or after s go; (e, s) is added                            |
| RecordsAppended           | LEO = log_end_offset                                                          |
| LogTruncated(to)          | LEO = to; entries starting at or after `to` go (start_over: all of them go,    |
|                           | and the log starts at `to`)                                                   |
| LeaderEpochsTruncated(o)  | entries starting at or after o go                                             |
| LogStartOffsetAdvanced    | log start = log_start_offset (offsets below it are never compared)            |
| LogDeleted, ReplicaOffline| the log is gone (empty)                                                       |

A BecameLeader makes the replica its partition's leader until a BecameFollower, LogOpened, LogDeleted or
ReplicaOffline. A HighWatermarkAdvanced on a leader commits [previous, high_watermark): its log at that moment binds
those offsets to epochs, a "commit" made in the leader's epoch E (the event's leader_epoch). Comparisons over time
use leader epochs, never clocks: "committed before epoch e" is "committed by a commit of an epoch below e".

Exemptions (reliability.md §8.2 Exempt): a LeaderElected of election unclean or last_known_leader exempts its
partition from its leader epoch on; lossy crashes (a LogOpened `recovered` with a LEO below the replica's LEO before
it, or a wiped disk: a LogOpened `created`, an empty log, where the replica's log held records and was never
deleted) of min.insync.replicas distinct replicas exempt it from the epoch the last of them knew when it crashed (as the
simulator counts them: from the topic's creation, not reset when the ISR is full again). A finding of
truncation_only_uncommitted, leader_completeness or committed_prefixes_agree at an exempt epoch is reported with the
exemption's cause and its events (an attributed loss, not a violation). min.insync.replicas is the topic's config
(TopicCreated, TopicConfigsAltered) or, if the history never sets it, the value the checks were built with.

A deleted topic's records are not lost (issue 13): an acknowledgement of acks_all_acknowledged_committed or
acknowledged_records_lost followed by a TopicDeleted of its topic (wall_ms at or after the acknowledgement's: the
topic-life rule of `hightide.audit.checks.clients`) is not judged against the final leader's log.

Compaction is not loss (issue 13; Kafka's LogCleaner): on a compacted topic each replica's cleaner rewrites its log
below its `cleaned_up_to` (LogCompacted), keeping only each key's latest record at its offset, and a replica that
copies a compacted log (a follower fetching from offset 0 of a compacted leader) receives only the kept batches, so
its epoch history starts at its first kept batch. The cleaner never touches a record at or above the cleaned point
(the first uncleanable offset: the active segment, the high watermark's segment, min.compaction.lag.ms), so the
rule is: a partition's cleaned point is the highest `cleaned_up_to` of any of its replicas' LogCompacted events in
the history; below it, offsets (and their epochs) are not compared by leader_completeness,
acks_all_acknowledged_committed or acknowledged_records_lost (a record there may have been superseded by a later
one of its key; events carry no keys, so the audit cannot tell a superseded record from a lost one there); at or
above it a missing record is lost as on any topic.

Known limits: the cleaned point is the history's last one, not the one in force when a leader was elected (an
election before any compaction is excused below the later cleaned point too); it is not reset by a topic's deletion;
committed_prefixes_agree and truncation_only_uncommitted do not apply it. Apart from acknowledgements, a topic
deleted and created again under its name is not told apart from its predecessor (its offsets are compared across
lives); the log start after an ordinary truncation is not lowered to the truncation point.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.protocol import events

Run = tuple[int, int, int]  # [start, end) offsets of one leader epoch: (start, end, epoch)
TopicPartition = tuple[str, int]
ACKS_ALL: Final = -1
ACKS_ONE: Final = 1
KAFKA_MIN_INSYNC_REPLICAS: Final = 1  # Kafka's default, where neither the history nor the caller says otherwise
MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNATTRIBUTED_TRUNCATIONS: Final = frozenset({"start_over"})  # a log emptied behind its leader's log start
ELECTION_CAUSES: Final = {"unclean": "unclean_election", "last_known_leader": "last_known_leader_election"}
NO_EPOCH: Final = -1
# A replica's log reopened shorter than it was: recovery cut its tail, or (branch i13-elr) its disk was wiped and the
# broker created the log afresh. Either is a lossy crash.
LOSSY_OPEN_REASONS: Final = ("recovered", "created")


@dataclass(slots=True)
class _Log:
    """One replica's log as its broker's events leave it (the table in the module docstring)."""

    entries: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start), starts increasing
    log_start_offset: int = 0
    log_end_offset: int = 0
    leader: bool = False
    known_epoch: int = NO_EPOCH  # the last leader epoch its BecameLeader / BecameFollower named
    advanced: int | None = None  # its follower HW advance, while it is the replica's latest event

    def runs(self, low: int, high: int) -> tuple[Run, ...]:
        """The log's runs within [max(low, log start), high): each (start, end, epoch)."""
        low = max(low, self.log_start_offset)
        found = []
        for index, (epoch, start) in enumerate(self.entries):
            end = self.entries[index + 1][1] if index + 1 < len(self.entries) else high
            first, last = max(start, low), min(end, high)
            if first < last:
                found.append((first, last, epoch))
        return tuple(found)

    def cut(self, offset: int) -> None:
        self.entries = [entry for entry in self.entries if entry[1] < offset]

    def gone(self) -> None:
        self.entries, self.log_start_offset, self.log_end_offset, self.leader = [], 0, 0, False


@dataclass(frozen=True, slots=True)
class Commit:
    tp: TopicPartition
    start: int
    end: int
    epoch: int  # the records' epoch
    commit_epoch: int  # the committing leader's epoch
    event: str


@dataclass(frozen=True, slots=True)
class Moment:
    """A replica's log at one of its events: the event, its replica and epoch, and the runs it binds."""

    tp: TopicPartition
    replica: int
    event: str
    epoch: int
    runs: tuple[Run, ...]
    envelope_event: events.Event
    log_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class Exemption:
    tp: TopicPartition
    from_epoch: int
    cause: str
    events: tuple[str, ...]


@dataclass
class Folded:
    """What the checks read, folded once from a history."""

    commits: list[Commit] = field(default_factory=list)
    follower_advances: list[Moment] = field(default_factory=list)
    truncations: list[Moment] = field(default_factory=list)
    elections: list[Moment] = field(default_factory=list)
    acks: list[Moment] = field(default_factory=list)
    lossy: list[tuple[TopicPartition, int, int, str]] = field(default_factory=list)  # tp, replica, epoch, event
    final: dict[tuple[str, int, int], tuple[Run, ...]] = field(default_factory=dict)
    final_log_start: dict[tuple[str, int, int], int] = field(default_factory=dict)
    leaders: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # tp -> (max epoch, its leader)
    sent: dict[TopicPartition, list[tuple[int, str]]] = field(default_factory=dict)  # SendCompleted ok
    min_isr: dict[str, int] = field(default_factory=dict)
    # Issue 13, deleted topics: each TopicDeleted's wall_ms by topic, and each acknowledgement's wall_ms by event id.
    deleted: dict[str, list[int]] = field(default_factory=dict)
    ack_wall_ms: dict[str, int] = field(default_factory=dict)
    # Issue 13, compaction: each partition's cleaned point, the highest `cleaned_up_to` any replica's LogCompacted gave.
    cleaned: dict[TopicPartition, int] = field(default_factory=dict)


def fold(history: History) -> Folded:
    """One pass over every broker's events (each replica in its broker's order) and the clients' and controllers'."""
    folded = Folded()
    logs: dict[tuple[str, int, int], _Log] = {}
    for envelope in history.all():
        event = envelope.event
        event_id = History.id(envelope)
        if isinstance(event, events.SendCompleted):
            if event.outcome == "ok" and event.offset >= 0:
                folded.sent.setdefault((event.topic, event.partition), []).append((event.offset, event.value))
            continue
        if isinstance(event, events.TopicCreated | events.TopicConfigsAltered):
            _note_min_isr(folded, event)
            continue
        if isinstance(event, events.TopicDeleted):
            folded.deleted.setdefault(event.topic, []).append(envelope.wall_ms)
            continue
        if isinstance(event, events.LogCompacted):
            tp = (event.topic, event.partition)
            folded.cleaned[tp] = max(folded.cleaned.get(tp, 0), event.cleaned_up_to)
            continue
        if isinstance(event, events.ProduceCompleted):
            folded.ack_wall_ms[event_id] = envelope.wall_ms
            key = (event.topic, event.partition, event.leader)
        elif isinstance(event, _REPLICA_EVENTS):
            key = (event.topic, event.partition, event.replica)
        else:
            continue
        log = logs.setdefault(key, _Log())
        _apply(folded, log, key, event, event_id)
    for key, log in logs.items():
        folded.final[key] = tuple(log.runs(0, log.log_end_offset))
        folded.final_log_start[key] = log.log_start_offset
    return folded


_REPLICA_EVENTS: Final = (
    events.LogOpened,
    events.LeaderEpochStarted,
    events.RecordsAppended,
    events.LogTruncated,
    events.LeaderEpochsTruncated,
    events.LogStartOffsetAdvanced,
    events.LogDeleted,
    events.ReplicaOffline,
    events.HighWatermarkAdvanced,
    events.BecameLeader,
    events.BecameFollower,
)


def _note_min_isr(folded: Folded, event: events.TopicCreated | events.TopicConfigsAltered) -> None:
    for name, value in event.configs:
        if name == MIN_INSYNC_REPLICAS and value is not None and value.isdigit():
            folded.min_isr[event.topic] = int(value)


def _apply(folded: Folded, log: _Log, key: tuple[str, int, int], event: events.Event, event_id: str) -> None:
    tp, replica = (key[0], key[1]), key[2]
    advanced, log.advanced = log.advanced, None
    if advanced is not None and isinstance(event, events.LogStartOffsetAdvanced):
        # One fetch answer moves a follower's HW, then its log start (Kafka's follower): what lies below the new
        # log start is deleted in the same answer, so the HW advance is held to the log from there on.
        moment = folded.follower_advances[advanced]
        runs = tuple((max(s, event.log_start_offset), e, x) for s, e, x in moment.runs if e > event.log_start_offset)
        folded.follower_advances[advanced] = dataclasses.replace(moment, runs=runs)
    match event:
        case events.LogOpened():
            if event.reason in LOSSY_OPEN_REASONS and event.log_end_offset < log.log_end_offset:
                folded.lossy.append((tp, replica, log.known_epoch, event_id))
            log.entries = sorted(((e, s) for e, s in event.leader_epochs), key=lambda entry: entry[1])
            log.log_start_offset, log.log_end_offset, log.leader = event.log_start_offset, event.log_end_offset, False
        case events.LeaderEpochStarted():
            log.cut(event.start_offset)
            log.entries.append((event.leader_epoch, event.start_offset))
        case events.RecordsAppended():
            log.log_end_offset = event.log_end_offset
        case events.LogTruncated():
            if event.reason not in UNATTRIBUTED_TRUNCATIONS and event.truncated_to < event.log_end_offset_before:
                runs = log.runs(event.truncated_to, event.log_end_offset_before)
                folded.truncations.append(Moment(tp, replica, event_id, event.leader_epoch, tuple(runs), event))
            log.cut(event.truncated_to)
            if event.reason == "start_over":
                log.entries, log.log_start_offset = [], event.truncated_to
            log.log_end_offset = event.truncated_to
        case events.LeaderEpochsTruncated():
            log.cut(event.end_offset)
        case events.LogStartOffsetAdvanced():
            log.log_start_offset = event.log_start_offset
        case events.LogDeleted() | events.ReplicaOffline():
            log.gone()
        case events.HighWatermarkAdvanced():
            _advanced(folded, log, tp, replica, event, event_id)
        case events.BecameLeader():
            log.leader, log.known_epoch = True, event.leader_epoch
            runs = tuple(log.runs(0, event.log_end_offset))
            moment = Moment(tp, replica, event_id, event.leader_epoch, runs, event, log.log_start_offset)
            folded.elections.append(moment)
            held = folded.leaders.get(tp)
            if held is None or (event.leader_epoch, replica) > held:
                folded.leaders[tp] = (event.leader_epoch, replica)
        case events.BecameFollower():
            log.leader, log.known_epoch = False, event.leader_epoch
        case events.ProduceCompleted():
            if event.error == "NONE" and event.acks in (ACKS_ALL, ACKS_ONE) and event.base_offset >= 0:
                runs = tuple(log.runs(event.base_offset, event.last_offset + 1))
                folded.acks.append(Moment(tp, replica, event_id, event.leader_epoch, runs, event))


def _advanced(
    folded: Folded, log: _Log, tp: TopicPartition, replica: int, event: events.HighWatermarkAdvanced, event_id: str
) -> None:
    """A leader's HW advance commits what its log holds there; a follower's is held to what was committed."""
    runs = tuple(log.runs(event.previous, event.high_watermark))
    if log.leader:
        folded.commits += [Commit(tp, s, e, x, event.leader_epoch, event_id) for s, e, x in runs]
    else:
        log.advanced = len(folded.follower_advances)
        folded.follower_advances.append(Moment(tp, replica, event_id, event.leader_epoch, runs, event))


# -- exemptions ---------------------------------------------------------------------------------------------


def exemptions(history: History, folded: Folded, min_insync_replicas: int) -> list[Exemption]:
    """Every exemption of every partition (reliability.md §8.2 Exempt), from the epoch it holds."""
    found = [
        Exemption((e.topic, e.partition), e.leader_epoch, ELECTION_CAUSES[e.election], (History.id(envelope),))
        for envelope, e in history.of_type(events.LeaderElected)
        if e.election in ELECTION_CAUSES
    ]
    firsts: dict[TopicPartition, dict[int, tuple[int, str]]] = {}
    for tp, replica, epoch, event_id in folded.lossy:
        held = firsts.setdefault(tp, {}).get(replica)
        if held is None or (epoch, event_id) < held:
            firsts[tp][replica] = (epoch, event_id)
    for tp, by_replica in firsts.items():
        needed = folded.min_isr.get(tp[0], min_insync_replicas)
        crashes = sorted(by_replica.values())
        if len(crashes) >= needed:
            found.append(Exemption(tp, crashes[needed - 1][0], "lossy_crashes", tuple(i for _, i in crashes[:needed])))
    return found


def _cause(
    exempt: Iterable[Exemption], tp: TopicPartition, applies: Callable[[Exemption], bool]
) -> tuple[str, tuple[str, ...]]:
    """The cause (and its events) of the earliest exemption of `tp` that `applies`, by (epoch, cause)."""
    chosen = min((e for e in exempt if e.tp == tp and applies(e)), key=lambda e: (e.from_epoch, e.cause), default=None)
    return ("", ()) if chosen is None else (chosen.cause, chosen.events)


def _exempt_at(exempt: Iterable[Exemption], tp: TopicPartition, epoch: int) -> tuple[str, tuple[str, ...]]:
    """The cause of the earliest exemption of `tp` holding at `epoch`."""
    return _cause(exempt, tp, lambda e: e.from_epoch <= epoch)


def _records(folded: Folded, tp: TopicPartition, first: int, last: int) -> list[str]:
    return [value for offset, value in folded.sent.get(tp, ()) if first <= offset <= last]


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    low, high = max(a[0], b[0]), min(a[1], b[1])
    return (low, high) if low < high else None


def _minus(start: int, end: int, held: Run | None) -> list[tuple[int, int]]:
    """[start, end) without the offsets of `held` (one run of the same epoch, or none)."""
    if held is None:
        return [(start, end)] if start < end else []
    pieces = [(start, min(end, held[0])), (max(start, held[1]), end)]
    return [(a, b) for a, b in pieces if a < b]


# -- the checks ---------------------------------------------------------------------------------------------


def committed_prefixes_agree(
    history: History, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS
) -> Iterator[Finding]:
    """B5 LogMatching and C7 CommittedOffsetStable (reliability.md §8; TLA+ `LogMatchingProperty`,
    `ConsistentReadProperty`): a committed offset is bound to one leader epoch only (the hull of each epoch's commits
    overlaps no other epoch's), and a follower's log below its own high watermark, at each advance of it, holds at
    those offsets the epochs committed in epochs up to its own."""
    folded = fold(history)
    exempt = exemptions(history, folded, min_insync_replicas)
    hulls: dict[tuple[TopicPartition, int], tuple[int, int]] = {}
    for c in folded.commits:
        held = hulls.get((c.tp, c.epoch), (c.start, c.end))
        hulls[(c.tp, c.epoch)] = (min(held[0], c.start), max(held[1], c.end))
    for (tp, x), hull_x in hulls.items():
        for (tp_y, y), hull_y in hulls.items():
            both = _overlap(hull_x, hull_y)
            if tp_y != tp or not x < y or both is None:
                continue
            involved = [
                c for c in folded.commits if c.tp == tp and c.epoch in (x, y) and _overlap((c.start, c.end), both)
            ]
            latest = max(c.commit_epoch for c in involved)
            cause, why = _exempt_at(exempt, tp, latest)
            yield finding(
                "committed_prefixes_agree",
                topic=tp[0],
                partition=tp[1],
                first_offset=both[0],
                last_offset=both[1] - 1,
                records=_records(folded, tp, both[0], both[1] - 1),
                events=[*(c.event for c in involved), *why],
                cause=cause,
                detail=f"offsets {both[0]}..{both[1] - 1} committed in leader epochs {x} and {y}",
            )
    for moment in folded.follower_advances:
        yield from _follower_mismatches(folded, exempt, moment)


def _follower_mismatches(folded: Folded, exempt: list[Exemption], moment: Moment) -> Iterator[Finding]:
    assert isinstance(moment.envelope_event, events.HighWatermarkAdvanced)
    high_watermark = moment.envelope_event.high_watermark
    for start, end, x in moment.runs:
        against: dict[int, list[tuple[tuple[int, int], str]]] = {}
        for c in folded.commits:
            both = _overlap((start, end), (c.start, c.end))
            if c.tp == moment.tp and c.epoch != x and c.commit_epoch <= moment.epoch and both is not None:
                against.setdefault(c.epoch, []).append((both, c.event))
        for y, hits in against.items():
            low, high = min(h[0][0] for h in hits), max(h[0][1] for h in hits)
            cause, why = _exempt_at(exempt, moment.tp, moment.epoch)
            yield finding(
                "committed_prefixes_agree",
                topic=moment.tp[0],
                partition=moment.tp[1],
                replica=moment.replica,
                first_offset=low,
                last_offset=high - 1,
                records=_records(folded, moment.tp, low, high - 1),
                events=[moment.event, *(h[1] for h in hits), *why],
                cause=cause,
                detail=f"broker {moment.replica} holds offsets {low}..{high - 1} in leader epoch {x} below its high "
                f"watermark {high_watermark}, committed in leader epoch {y}",
            )


def truncation_only_uncommitted(
    history: History, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS
) -> Iterator[Finding]:
    """B6 TruncateOnlyUncommitted (reliability.md §8; Kafka's rule that records below the HW are never truncated,
    KIP-101): a LogTruncated (any reason but start_over, which empties a log behind its leader's log start) removes
    no record committed in a leader epoch up to the truncating replica's own."""
    folded = fold(history)
    exempt = exemptions(history, folded, min_insync_replicas)
    for moment in folded.truncations:
        event = moment.envelope_event
        assert isinstance(event, events.LogTruncated)
        for start, end, x in moment.runs:
            hits = [
                (both, c.event)
                for c in folded.commits
                if c.tp == moment.tp and c.epoch == x and c.commit_epoch <= moment.epoch
                for both in [_overlap((start, end), (c.start, c.end))]
                if both is not None
            ]
            if not hits:
                continue
            low, high = min(h[0][0] for h in hits), max(h[0][1] for h in hits)
            cause, why = _exempt_at(exempt, moment.tp, moment.epoch)
            yield finding(
                "truncation_only_uncommitted",
                topic=moment.tp[0],
                partition=moment.tp[1],
                replica=moment.replica,
                first_offset=low,
                last_offset=high - 1,
                records=_records(folded, moment.tp, low, high - 1),
                events=[moment.event, *(h[1] for h in hits), *why],
                cause=cause,
                detail=f"broker {moment.replica} truncated to {event.truncated_to} ({event.reason}), removing "
                f"offsets {low}..{high - 1} of leader epoch {x}, committed",
            )


def leader_completeness(history: History, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> Iterator[Finding]:
    """C3 LeaderCompletenessProperty (reliability.md §8; TLA+ `LeaderCompletenessProperty`, `StrongIsr`): a broker
    that becomes leader in epoch e (BecameLeader) holds, above its log start and its partition's cleaned point
    (compaction, see the module docstring), every record committed in epochs
    below e, at the same offset and in the same epoch."""
    folded = fold(history)
    exempt = exemptions(history, folded, min_insync_replicas)
    for moment in folded.elections:
        held = {x: (s, e, x) for s, e, x in moment.runs}
        missing: list[tuple[tuple[int, int], str]] = []
        for c in folded.commits:
            if c.tp != moment.tp or c.commit_epoch >= moment.epoch:
                continue
            start = max(c.start, moment.log_start_offset, folded.cleaned.get(moment.tp, 0))
            missing += [(piece, c.event) for piece in _minus(start, c.end, held.get(c.epoch))]
        if not missing:
            continue
        low, high = min(m[0][0] for m in missing), max(m[0][1] for m in missing)
        cause, why = _exempt_at(exempt, moment.tp, moment.epoch)
        yield finding(
            "leader_completeness",
            topic=moment.tp[0],
            partition=moment.tp[1],
            replica=moment.replica,
            first_offset=low,
            last_offset=high - 1,
            records=_records(folded, moment.tp, low, high - 1),
            events=[moment.event, *(m[1] for m in missing), *why],
            cause=cause,
            detail=f"broker {moment.replica} became leader in epoch {moment.epoch} without committed offsets "
            f"{low}..{high - 1}",
        )


def acks_all_acknowledged_committed(
    history: History, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS
) -> Iterator[Finding]:
    """D1 AcksAllAckAfterCommit and D2 AcksAllDurability (reliability.md §8; TLA+ `SendAcksFor`,
    `EventuallyAcknowledgedValueFullyReplicated`): an acks=all acknowledgement (ProduceCompleted acks -1, error
    NONE) is given only below the leader's high watermark, and its records (bound to epochs by the leader's log when
    it answered) are, at the end of the history, in the final leader's log (the leader of the highest epoch) at the
    same offsets in the same epochs, unless retention deleted them (below its log start), compaction may have
    removed them (below the partition's cleaned point, see the module docstring) or their topic was deleted
    after the acknowledgement (TopicDeleted ends the obligation for that topic life's records; a topic created
    again under the name is a new life, whose acknowledgements are judged as before). A loss at an exempt epoch
    after the acknowledgement is reported with its cause (X1 LossAttribution)."""
    folded = fold(history)
    exempt = exemptions(history, folded, min_insync_replicas)
    for moment in folded.acks:
        event = moment.envelope_event
        assert isinstance(event, events.ProduceCompleted)
        if event.acks != ACKS_ALL:
            continue
        if event.high_watermark <= event.last_offset:
            yield finding(
                "acks_all_acknowledged_committed",
                topic=moment.tp[0],
                partition=moment.tp[1],
                replica=moment.replica,
                first_offset=event.base_offset,
                last_offset=event.last_offset,
                records=_records(folded, moment.tp, event.base_offset, event.last_offset),
                events=[moment.event],
                detail=f"acks=all acknowledged offsets {event.base_offset}..{event.last_offset} with the high "
                f"watermark at {event.high_watermark}",
            )
        yield from _lost(folded, exempt, moment, "acks_all_acknowledged_committed")


def acknowledged_records_lost(
    history: History, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS
) -> Iterator[Finding]:
    """X1 LossAttribution for acks=1 (reliability.md §8; Vanlightly §7.1): a record acknowledged at acks=1 and not in
    the final leader's log (as `acks_all_acknowledged_committed` judges presence) is an attributed loss when it was
    never committed and a later leader epoch exists (acks1_leader_change), or when an exemption follows the
    acknowledgement; otherwise a violation."""
    folded = fold(history)
    exempt = exemptions(history, folded, min_insync_replicas)
    for moment in folded.acks:
        event = moment.envelope_event
        assert isinstance(event, events.ProduceCompleted)
        if event.acks == ACKS_ONE:
            yield from _lost(folded, exempt, moment, "acknowledged_records_lost")


def _lost(folded: Folded, exempt: list[Exemption], moment: Moment, invariant: str) -> Iterator[Finding]:
    """The acknowledged records of `moment` missing from the final leader's log, as one finding (or none)."""
    event = moment.envelope_event
    assert isinstance(event, events.ProduceCompleted)
    if _deleted_after(folded, moment):
        return
    leader_epoch, leader = folded.leaders.get(moment.tp, (NO_EPOCH, -1))
    key = (moment.tp[0], moment.tp[1], leader)
    final = {x: run for run in folded.final.get(key, ()) for x in [run[2]]}
    log_start = max(folded.final_log_start.get(key, 0), folded.cleaned.get(moment.tp, 0))
    missing = [
        (piece, x) for start, end, x in moment.runs for piece in _minus(max(start, log_start), end, final.get(x))
    ]
    if not missing:
        return
    low, high = min(m[0][0] for m in missing), max(m[0][1] for m in missing)
    committed = any(
        c.tp == moment.tp and c.epoch == x and _overlap(piece, (c.start, c.end))
        for piece, x in missing
        for c in folded.commits
    )
    if event.acks == ACKS_ONE and not committed and leader_epoch > moment.epoch:
        cause, why = "acks1_leader_change", tuple[str, ...]()
    else:
        ack_epoch = moment.epoch
        cause, why = _cause(exempt, moment.tp, lambda e: _follows(e, ack_epoch))
    yield finding(
        invariant,
        topic=moment.tp[0],
        partition=moment.tp[1],
        replica=moment.replica,
        first_offset=low,
        last_offset=high - 1,
        records=_records(folded, moment.tp, low, high - 1),
        events=[moment.event, *why],
        cause=cause,
        detail=f"acknowledged offsets {low}..{high - 1} (acks={event.acks}, leader {moment.replica} in epoch "
        f"{moment.epoch}) are not in final leader {leader}'s log",
    )


def _deleted_after(folded: Folded, moment: Moment) -> bool:
    """Whether the acknowledgement's topic life ended: a TopicDeleted of its topic (the controller's committed
    decision; Kafka deletes every replica's log of it) with a wall_ms at or after the acknowledgement's, so the
    acknowledgement lives in a life before the last (a topic's life as `hightide.audit.checks.clients` counts it)."""
    wall_ms = folded.ack_wall_ms[moment.event]
    return any(deleted >= wall_ms for deleted in folded.deleted.get(moment.tp[0], ()))


def _follows(exemption: Exemption, ack_epoch: int) -> bool:
    """An election exempts losses of what was acknowledged in earlier epochs; lossy crashes, of what the crashed
    replicas may have held when they crashed (acknowledged in their epoch or before)."""
    if exemption.cause == "lossy_crashes":
        return exemption.from_epoch >= ack_epoch
    return exemption.from_epoch > ack_epoch


CheckFunction = Callable[[History], Iterable[Finding]]


def checks(min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> dict[str, CheckFunction]:
    """The checks, for histories whose topics do not set min.insync.replicas and ran with this broker default."""

    def bound(check: Callable[[History, int], Iterable[Finding]]) -> CheckFunction:
        @functools.wraps(check)
        def run(history: History) -> Iterable[Finding]:
            return check(history, min_insync_replicas)

        return run

    return {
        "committed_prefixes_agree": bound(committed_prefixes_agree),
        "truncation_only_uncommitted": bound(truncation_only_uncommitted),
        "leader_completeness": bound(leader_completeness),
        "acks_all_acknowledged_committed": bound(acks_all_acknowledged_committed),
        "acknowledged_records_lost": bound(acknowledged_records_lost),
    }


CHECKS: Final = checks()
