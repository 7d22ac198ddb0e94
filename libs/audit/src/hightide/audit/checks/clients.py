"""The clients' view: what producers were told (SendCompleted) and what consumers read (RecordsConsumed), held to
Kafka's end-to-end promises (reliability.md §8 D4, D5, D8, E1, E3; Jepsen's Kafka checker).

Room: libs/audit (pure). These checks own the client events only; they read broker and controller events where a
promise is about the cluster (a leader's high watermark, a log start offset, a topic's deletion). The PySpark
twins are `hightide.history.checks.clients`, with the same names and findings.

Across processes there is no common order but the wall clock. A client event and a broker event are compared by
`wall_ms`, which is sound in one direction: a broker emits an event after the state change it reports and before it
answers a request, and a client emits its event after the answer arrived; so when the clocks agree, the cause is
never later than the effect. It is not sound when the clocks are skewed by more than the gap between the two
(hosts without synchronised clocks, or a clock stepped backwards): then a finding of E1 or E3 may name a read that
was in fact explained. The simulator stamps every envelope with one true clock.

A topic's life: a topic deleted and created again under its name starts its offsets over, so every comparison is
within one life. The life of an event is the number of TopicDeleted events of its topic (any controller's, stamped
before it) with a `wall_ms` before the event's.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.protocol import events

Life = tuple[str, int, int]  # topic, partition, life


@dataclass(frozen=True, slots=True)
class Observation:
    """One client's statement that `offset` of a partition holds `value`: an ok SendCompleted or a consumed record."""

    life: Life
    offset: int
    value: str
    event_id: str
    wall_ms: int


class Lives:
    """The life of a topic at a wall-clock instant (see the module docstring)."""

    def __init__(self, history: History) -> None:
        deleted: dict[str, list[int]] = defaultdict(list)
        for envelope, event in history.of_type(events.TopicDeleted):
            deleted[event.topic].append(envelope.wall_ms)
        self._deleted = {topic: sorted(times) for topic, times in deleted.items()}

    def of(self, topic: str, partition: int, wall_ms: int) -> Life:
        return topic, partition, bisect.bisect_left(self._deleted.get(topic, []), wall_ms)


def observations(history: History, lives: Lives) -> Iterator[Observation]:
    """Every ok acknowledgement and every consumed record, in `History.all()` order."""
    for envelope in history.all():
        event = envelope.event
        if isinstance(event, events.SendCompleted) and event.outcome == "ok":
            life = lives.of(event.topic, event.partition, envelope.wall_ms)
            yield Observation(life, event.offset, event.value, History.id(envelope), envelope.wall_ms)
        elif isinstance(event, events.RecordsConsumed):
            life = lives.of(event.topic, event.partition, envelope.wall_ms)
            for offset, value in zip(event.offsets, event.values, strict=True):
                yield Observation(life, offset, value, History.id(envelope), envelope.wall_ms)


def shared_values(history: History, lives: Lives) -> set[tuple[Life, str]]:
    """The values of a partition life that more than one producer incarnation sent (SendInvoked). A value names a
    record only when one producer sent it: two verifiable producers both count 0, 1, 2, ..., and one's read or
    acknowledged `3` says nothing of the other's failed `3`. D5 and D8 leave such values out (D4 compares offsets,
    not senders, and keeps them)."""
    senders: dict[tuple[Life, str], set[object]] = defaultdict(set)
    for envelope, event in history.of_type(events.SendInvoked):
        senders[(lives.of(event.topic, event.partition, envelope.wall_ms), event.value)].add(envelope.emitter)
    return {key for key, emitters in senders.items() if len(emitters) > 1}


# LeaderElected's elections after which Kafka no longer promises the committed records (reliability.md §8 X1),
# as the loss cause each names, in the order a finding takes them.
LOSSY_ELECTIONS: Final = {"unclean": "unclean_election", "last_known_leader": "last_known_leader_election"}


class LossyElections:
    """When each partition life first had an unclean or a last-known-leader election (LeaderElected, any
    controller's). A broken promise of E3, D4 or D5 seen at or after one is attributed to it (the finding's
    `cause`): the elected replica may lack committed records, so consumers re-read offsets with other values and a
    retried batch may be appended again. A loss after lossy crashes of min ISR replicas is not attributed here."""

    def __init__(self, history: History, lives: Lives) -> None:
        self._first: dict[tuple[Life, str], int] = {}
        for envelope, elected in history.of_type(events.LeaderElected):
            cause = LOSSY_ELECTIONS.get(elected.election)
            if cause is not None:
                key = (lives.of(elected.topic, elected.partition, envelope.wall_ms), cause)
                self._first[key] = min(envelope.wall_ms, self._first.get(key, envelope.wall_ms))

    def cause(self, life: Life, wall_ms: int) -> str:
        """The cause of a broken promise last seen at `wall_ms`: the first lossy election kind by then, or ""."""
        for cause in LOSSY_ELECTIONS.values():
            first = self._first.get((life, cause))
            if first is not None and first <= wall_ms:
                return cause
        return ""


def attributed(detail: str, cause: str) -> str:
    return detail if cause == "" else f"{detail} (cause: {cause})"


def leader_high_watermarks(history: History, lives: Lives) -> dict[Life, list[tuple[int, int]]]:
    """Per partition life, (wall_ms, high watermark) of every HighWatermarkAdvanced a replica emitted while it was
    leader: its latest BecameLeader / BecameFollower in the same broker incarnation (LogOpened and LogDeleted end a
    role) was BecameLeader."""
    advanced: dict[Life, list[tuple[int, int]]] = defaultdict(list)
    for stream in history.streams.values():
        leading: set[tuple[str, str, int]] = set()  # incarnation, topic, partition
        for envelope in stream:
            event = envelope.event
            if isinstance(event, events.BecameLeader | events.BecameFollower | events.LogOpened | events.LogDeleted):
                key = (envelope.emitter.incarnation, event.topic, event.partition)
                if isinstance(event, events.BecameLeader):
                    leading.add(key)
                else:
                    leading.discard(key)
            elif isinstance(event, events.HighWatermarkAdvanced) and (
                (envelope.emitter.incarnation, event.topic, event.partition) in leading
            ):
                life = lives.of(event.topic, event.partition, envelope.wall_ms)
                advanced[life].append((envelope.wall_ms, event.high_watermark))
    return advanced


def consumers_below_high_watermark(history: History) -> Iterator[Finding]:
    """E1 ReadCommittedOnly (reliability.md §8; Kafka: "only committed messages are ever given out to the
    consumer"): every offset a consumer read was below the high watermark some leader of its partition had
    advanced to (HighWatermarkAdvanced while leader) no later, by wall_ms, than the RecordsConsumed event. The
    leader emits HighWatermarkAdvanced when it moves the HW and before it serves a fetch up to it; the consumer emits
    RecordsConsumed after the fetch answer: see the module docstring for why wall_ms order holds there, and where not.
    One finding per RecordsConsumed event, naming its offsets at or above that high watermark."""
    lives = Lives(history)
    advanced = leader_high_watermarks(history, lives)
    running_max: dict[Life, tuple[list[int], list[int]]] = {}
    for life, marks in advanced.items():
        marks.sort()
        times: list[int] = []
        highest: list[int] = []
        for wall_ms, high_watermark in marks:
            times.append(wall_ms)
            highest.append(max(high_watermark, highest[-1] if highest else 0))
        running_max[life] = (times, highest)
    for envelope, event in history.of_type(events.RecordsConsumed):
        life = lives.of(event.topic, event.partition, envelope.wall_ms)
        times, highest = running_max.get(life, ([], []))
        index = bisect.bisect_right(times, envelope.wall_ms)
        high_watermark = highest[index - 1] if index else 0
        above = [(o, v) for o, v in zip(event.offsets, event.values, strict=True) if o >= high_watermark]
        if not above:
            continue
        first, last = min(o for o, _ in above), max(o for o, _ in above)
        emitter = envelope.emitter.emitter_id
        yield finding(
            "consumers_below_high_watermark",
            topic=event.topic,
            partition=event.partition,
            first_offset=first,
            last_offset=last,
            records=[v for _, v in above],
            events=[History.id(envelope)],
            detail=f"consumer {emitter} read offsets {first}..{last} while the highest leader high watermark "
            f"was {high_watermark}",
        )


def log_starts(history: History, lives: Lives) -> set[tuple[Life, int, int]]:
    """(life, log start offset, wall_ms) of every log start a replica announced: LogOpened, LogStartOffsetAdvanced,
    and a LogTruncated that started the log over (a follower below its leader's log start)."""
    starts: set[tuple[Life, int, int]] = set()
    for envelope in history.all():
        event = envelope.event
        if isinstance(event, events.LogOpened | events.LogStartOffsetAdvanced):
            start = event.log_start_offset
        elif isinstance(event, events.LogTruncated) and event.reason == "start_over":
            start = event.truncated_to
        else:
            continue
        starts.add((lives.of(event.topic, event.partition, envelope.wall_ms), start, envelope.wall_ms))
    return starts


def consumers_in_order(history: History) -> Iterator[Finding]:
    """E3 PollContiguity (reliability.md §8; Jepsen's :poll-skip and :nonmonotonic-poll): per consumer incarnation
    and partition life, each offset read is the one after the offset read before it: never lower, never the same,
    never higher, except after an offset reset. The consumer (services/client consumer.py) answers
    OFFSET_OUT_OF_RANGE by resetting its position to the leader's log start (auto.offset.reset=earliest, the
    simulator's and the verifiable consumer's), and reads on from there; offsets are dense in a Hightide log. So a
    jump from `a` to `b > a + 1` is explained exactly when `b` is a log start offset some replica of the partition
    announced (LogOpened, LogStartOffsetAdvanced, LogTruncated start_over) no later, by wall_ms, than the read of
    `b`. (With auto.offset.reset=latest a consumer may jump to the log end: this check does not allow that.)
    One finding per pair of successive reads that breaks the rule; after an unclean or last-known-leader election
    of the partition it is that attributed loss (`LossyElections`): the new leader's log may end below the
    consumer's position, and the reset to its log start goes back."""
    lives = Lives(history)
    elections = LossyElections(history, lives)
    earliest: dict[tuple[Life, int], int] = {}
    for life, offset, wall_ms in log_starts(history, lives):
        earliest[(life, offset)] = min(wall_ms, earliest.get((life, offset), wall_ms))
    previous: dict[tuple[str, int, str, Life], tuple[int, str, str]] = {}
    for envelope, event in history.of_type(events.RecordsConsumed):
        life = lives.of(event.topic, event.partition, envelope.wall_ms)
        emitter = envelope.emitter
        key = (emitter.service, emitter.emitter_id, emitter.incarnation, life)
        this_id = History.id(envelope)
        for offset, value in zip(event.offsets, event.values, strict=True):
            before = previous.get(key)
            previous[key] = (offset, value, this_id)
            if before is None or offset == before[0] + 1:
                continue
            a, value_a, id_a = before
            reset_at = earliest.get((life, offset))
            if offset > a + 1 and reset_at is not None and reset_at <= envelope.wall_ms:
                continue
            cause = elections.cause(life, envelope.wall_ms)
            yield _out_of_order(event, emitter.emitter_id, a, offset, (value_a, value), (id_a, this_id), cause)


def _out_of_order(
    event: events.RecordsConsumed,
    consumer: int,
    a: int,
    b: int,
    values: tuple[str, str],
    ids: tuple[str, str],
    cause: str,
) -> Finding:
    if b > a + 1:
        first, last = a + 1, b - 1
        detail = f"consumer {consumer} skipped offsets {first}..{last}: read {a} then {b}"
    else:
        first, last = b, a
        detail = f"consumer {consumer} read offset {b} after offset {a}"
    return finding(
        "consumers_in_order",
        topic=event.topic,
        partition=event.partition,
        first_offset=first,
        last_offset=last,
        records=values,
        events=ids,
        cause=cause,
        detail=attributed(detail, cause),
    )


def definite_failure_invisible(history: History) -> Iterator[Finding]:
    """D8 NoAbortedRead (reliability.md §8; Jepsen's G1a, aborted read): a value whose SendCompleted outcome is
    `failed` (a definite error: the client was told it was never appended) is never read by a consumer and never
    acknowledged, in that partition's life. One finding per failed send that was seen, naming every ok
    SendCompleted and RecordsConsumed that shows its value (values more than one producer sent: `shared_values`)."""
    lives = Lives(history)
    shared = shared_values(history, lives)
    seen: dict[tuple[Life, str], list[Observation]] = defaultdict(list)
    for observation in observations(history, lives):
        seen[(observation.life, observation.value)].append(observation)
    for envelope, event in history.of_type(events.SendCompleted):
        if event.outcome != "failed":
            continue
        life = lives.of(event.topic, event.partition, envelope.wall_ms)
        shown = seen.get((life, event.value), [])
        if not shown or (life, event.value) in shared:
            continue
        first, last = min(o.offset for o in shown), max(o.offset for o in shown)
        yield finding(
            "definite_failure_invisible",
            topic=event.topic,
            partition=event.partition,
            first_offset=first,
            last_offset=last,
            records=[event.value],
            events=[History.id(envelope), *(o.event_id for o in shown)],
            detail=f"value {event.value} failed definitely ({event.error}) but was read or acknowledged at offsets "
            f"{first}..{last}",
        )


def acks1_lost(history: History, lives: Lives) -> set[str]:
    """The ids of the ok SendCompleted events whose acknowledgement came from an acks=1 answer given before the
    record was committed, in a leader epoch that a later one replaced: reliability.md §8 X1's first cause
    (acks1_leader_change), a loss Kafka allows. A SendCompleted's answer is taken to be the latest ProduceCompleted
    (error NONE) covering its offset in its partition life with a wall_ms no later than its own (then the greater
    event id): the client events do not name the request."""
    answers: dict[Life, list[tuple[int, str, events.ProduceCompleted]]] = defaultdict(list)
    for envelope, answer in history.of_type(events.ProduceCompleted):
        if answer.error == "NONE":
            life = lives.of(answer.topic, answer.partition, envelope.wall_ms)
            answers[life].append((envelope.wall_ms, History.id(envelope), answer))
    last_epoch: dict[Life, int] = {}
    for envelope, change in history.of_type(events.PartitionChanged):
        life = lives.of(change.topic, change.partition, envelope.wall_ms)
        last_epoch[life] = max(change.leader_epoch, last_epoch.get(life, change.leader_epoch))
    lost: set[str] = set()
    for envelope, sent in history.of_type(events.SendCompleted):
        if sent.outcome != "ok":
            continue
        life = lives.of(sent.topic, sent.partition, envelope.wall_ms)
        covering = [
            (wall_ms, answer_id, answer)
            for wall_ms, answer_id, answer in answers.get(life, [])
            if wall_ms <= envelope.wall_ms and answer.base_offset <= sent.offset <= answer.last_offset
        ]
        if not covering:
            continue
        _, _, answer = max(covering, key=lambda item: (item[0], item[1]))
        replaced = last_epoch.get(life, answer.leader_epoch) > answer.leader_epoch
        if answer.acks == 1 and answer.high_watermark <= sent.offset and replaced:
            lost.add(History.id(envelope))
    return lost


def consistent_offsets(history: History) -> Iterator[Finding]:
    """D4 NoInconsistentOffsets (reliability.md §8; Jepsen's :inconsistent-offsets): every observation of one
    offset of a partition life, ok SendCompleted and RecordsConsumed alike, names one value. One finding per offset
    observed with more than one value, naming all of them and every observing event. When the values left once the
    acknowledgements lost under acks=1 (`acks1_lost`) are set aside are at most one, the finding is that attributed
    loss (cause acks1_leader_change), not a violation; else, seen after an unclean or last-known-leader election,
    it is attributed to that election (`LossyElections`)."""
    lives = Lives(history)
    lost = acks1_lost(history, lives)
    elections = LossyElections(history, lives)
    by_offset: dict[tuple[Life, int], list[Observation]] = defaultdict(list)
    for observation in observations(history, lives):
        by_offset[(observation.life, observation.offset)].append(observation)
    for (life, offset), seen in sorted(by_offset.items()):
        values = {o.value for o in seen}
        if len(values) < 2:
            continue
        kept = {o.value for o in seen if o.event_id not in lost}
        detail = f"offset {offset} was observed with {len(values)} different values"
        if len(kept) <= 1:
            cause = "acks1_leader_change"
            detail += "; the others were acknowledged under acks=1 and lost in a leader change"
        else:
            cause = elections.cause(life, max(o.wall_ms for o in seen))
            detail = attributed(detail, cause)
        topic, partition, _ = life
        yield finding(
            "consistent_offsets",
            topic=topic,
            partition=partition,
            first_offset=offset,
            last_offset=offset,
            records=values,
            events=[o.event_id for o in seen],
            cause=cause,
            detail=detail,
        )


def no_duplicates(history: History) -> Iterator[Finding]:
    """D5 NoDuplicates (reliability.md §8; Jepsen's :duplicate, Kafka's idempotent producer, KIP-98): a value is
    acknowledged (ok SendCompleted) or read (RecordsConsumed) at one offset of its partition life only. One finding
    per value observed at more than one offset, naming the offsets' range and every observing event; seen after an
    unclean or last-known-leader election, it is attributed to that election (`LossyElections`). Values more than
    one producer sent are left out (`shared_values`). A value appended again by a leader whose log start had passed
    its first offset is attributed to the producer state that retention removed (`RetainedAway`)."""
    lives = Lives(history)
    elections = LossyElections(history, lives)
    retention = RetainedAway(history, lives)
    shared = shared_values(history, lives)
    by_value: dict[tuple[Life, str], list[Observation]] = defaultdict(list)
    for observation in observations(history, lives):
        by_value[(observation.life, observation.value)].append(observation)
    for (life, value), seen in sorted(by_value.items()):
        offsets = {o.offset for o in seen}
        if len(offsets) < 2 or (life, value) in shared:
            continue
        cause = elections.cause(life, max(o.wall_ms for o in seen))
        if cause == "" and retention.appended_past_start(life, min(offsets), offsets - {min(offsets)}):
            cause = PRODUCER_STATE_RETAINED_AWAY
        topic, partition, _ = life
        yield finding(
            "no_duplicates",
            topic=topic,
            partition=partition,
            first_offset=min(offsets),
            last_offset=max(offsets),
            records=[value],
            events=[o.event_id for o in seen],
            cause=cause,
            detail=attributed(f"value {value} was observed at {len(offsets)} different offsets", cause),
        )


# -- issue 12 (gaps): a duplicate after retention removed the producer's batches (KIP-360) --------------------------

PRODUCER_STATE_RETAINED_AWAY: Final = "producer_state_retention"


class RetainedAway:
    """Which leader appends happened on a log whose start had already passed an offset.

    Why D5 needs it: a leader's producer table is rebuilt from its log's batches (`hightide.core.producer_state`,
    Kafka's ProducerStateManager loading from the log), so on a log whose start has passed a producer's batches its
    state is gone, and a retry of its first batch (sequence 0) cannot be told from a new producer's: it is appended
    again (KIP-360 accepts it; Kafka's idempotence holds only while the producer's state is retained). A value first
    at offset f and again at a later offset that a leader appended after its own log start passed f (a
    LogStartOffsetAdvanced of that replica above f, at or before the RecordsAppended) is attributed to that
    (`producer_state_retention`), not reported as a violation, unless some replica truncated f away before that
    append (a LogTruncated from above f to f or below): then the first copy may have been lost by the protocol,
    not by retention (a leader elected without it), and the duplicate stays a violation."""

    def __init__(self, history: History, lives: Lives) -> None:
        self._starts: dict[tuple[Life, int], list[tuple[int, int]]] = defaultdict(list)
        self._truncations: dict[Life, list[tuple[int, int, int]]] = defaultdict(list)  # wall_ms, to, LEO before
        self._appends: dict[Life, list[tuple[int, int, int, int]]] = defaultdict(list)
        for envelope, event in history.of_type(events.LogStartOffsetAdvanced):
            life = lives.of(event.topic, event.partition, envelope.wall_ms)
            self._starts[(life, event.replica)].append((envelope.wall_ms, event.log_start_offset))
        for envelope, cut in history.of_type(events.LogTruncated):
            life = lives.of(cut.topic, cut.partition, envelope.wall_ms)
            self._truncations[life].append((envelope.wall_ms, cut.truncated_to, cut.log_end_offset_before))
        for envelope, appended in history.of_type(events.RecordsAppended):
            if appended.as_leader:
                life = lives.of(appended.topic, appended.partition, envelope.wall_ms)
                row = (envelope.wall_ms, appended.replica, appended.base_offset, appended.last_offset)
                self._appends[life].append(row)

    def appended_past_start(self, life: Life, first: int, later: set[int]) -> bool:
        """Whether some offset of `later` was appended by a leader whose log start had passed `first` by then, with
        no truncation of any replica's `first` before it."""
        for wall_ms, replica, base, last in self._appends.get(life, ()):
            if not any(base <= offset <= last for offset in later):
                continue
            passed = any(start > first and at <= wall_ms for at, start in self._starts.get((life, replica), ()))
            cut = any(to <= first < before and at <= wall_ms for at, to, before in self._truncations.get(life, ()))
            if passed and not cut:
                return True
        return False


CHECKS: dict[str, Callable[[History], Iterable[Finding]]] = {
    "consumers_below_high_watermark": consumers_below_high_watermark,
    "consumers_in_order": consumers_in_order,
    "definite_failure_invisible": definite_failure_invisible,
    "consistent_offsets": consistent_offsets,
    "no_duplicates": no_duplicates,
}
