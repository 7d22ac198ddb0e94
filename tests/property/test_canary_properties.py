"""The canary's tracker never cries wolf, and never misses a lost acknowledged record, whatever the order in which
the producer's outcomes and the consumer's reads reach it.

Method: hypothesis draws a partition's history: each send's fate (acknowledged, failed before the log, or failed
with an unknown outcome that did or did not reach the log), the log the consumer reads (the sends that reached
it, in send order, at consecutive offsets), and an interleaving of the producer's outcomes (in send order, as an
idempotent producer resolves one partition's batches) with the consumer's reads. For a faithful log the tracker
reports nothing lost, duplicated or reordered. With acknowledged records missing from the log (their offsets
empty), it reports lost exactly those the consumer has read past; a missing record after the last one read cannot
be told from one not yet replicated, and is not. (A rewind, where later records take the lost ones' offsets, is
the unit tests'.)
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.core.canary import CanaryValue, PartitionTracker, Verdict

INCARNATION = "p1"
FATES = ("ok", "failed", "unknown_in_log", "unknown_not_in_log")


@dataclass(frozen=True)
class History:
    fates: list[str]
    order: list[bool]  # True: the next producer outcome, False: the next read (while any of either remains)
    dropped: frozenset[int]  # acknowledged sequences missing from the consumer's log


@st.composite
def histories(draw: st.DrawFn, drop: bool) -> History:
    fates = draw(st.lists(st.sampled_from(FATES), min_size=1, max_size=40))
    order = draw(st.lists(st.booleans(), min_size=2 * len(fates), max_size=2 * len(fates)))
    acknowledged = [s for s, fate in enumerate(fates) if fate == "ok"]
    dropped: frozenset[int] = frozenset()
    if drop and acknowledged:
        dropped = frozenset(draw(st.sets(st.sampled_from(acknowledged), min_size=1)))
    return History(fates, order, dropped)


def run(history: History) -> tuple[PartitionTracker, list[Verdict]]:
    in_log = [s for s, fate in enumerate(history.fates) if fate in ("ok", "unknown_in_log")]
    # Where the producer was told each acknowledged record is: its offset in the log as written.
    told_offset = {s: offset for offset, s in enumerate(in_log)}
    log = [(told_offset[s], s) for s in in_log if s not in history.dropped]  # the log the consumer reads
    tracker = PartitionTracker(INCARNATION, 0)
    outcomes, reads, verdicts = iter(enumerate(history.fates)), iter(log), []
    pending_outcomes, pending_reads = len(history.fates), len(log)
    for outcome_next in [*history.order, *[True] * len(history.fates), *[False] * len(log)]:
        if outcome_next and pending_outcomes:
            sequence, fate = next(outcomes)
            pending_outcomes -= 1
            if fate == "ok":
                tracker.acknowledged(sequence, told_offset[sequence])
            else:
                tracker.failed(sequence)
        elif not outcome_next and pending_reads:
            offset, sequence = next(reads)
            pending_reads -= 1
            verdicts.append(tracker.read(CanaryValue(INCARNATION, 0, sequence, 0), 0, offset).verdict)  # type: ignore[arg-type]
    return tracker, verdicts


@settings(max_examples=300, deadline=None)
@given(histories(drop=False))
def test_a_faithful_log_shows_nothing_lost_duplicated_or_reordered(history: History) -> None:
    tracker, verdicts = run(history)
    assert (tracker.lost, tracker.duplicated, tracker.reordered) == (0, 0, 0)
    assert set(verdicts) <= {Verdict.IN_ORDER, Verdict.AHEAD}


@settings(max_examples=300, deadline=None)
@given(histories(drop=True))
def test_acknowledged_records_missing_from_the_log_are_each_lost_once(history: History) -> None:
    tracker, _ = run(history)
    read_past = [d for d in history.dropped if d < tracker.next_sequence]
    assert tracker.lost == len(read_past)
    assert (tracker.duplicated, tracker.reordered) == (0, 0)
