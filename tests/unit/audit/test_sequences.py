"""`emitter_sequences_contiguous`, on hand-made histories.

Method: given an emitter's events as the lake may hold them (in envelopes, some stored twice, some lost, one
sequence given to two events), when the plain-Python check runs over the History, then each gap is one finding that
names the events either side and the missing sequences, and each clash one finding naming the clashing event.
"""

from __future__ import annotations

from hightide.audit.checks.sequences import emitter_sequences_contiguous
from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.protocol.envelope import Envelope
from support import sequence_histories as h


def findings(envelopes: list[Envelope]) -> list[Finding]:
    return sorted(emitter_sequences_contiguous(History.of(envelopes)))


def test_every_incarnation_numbered_from_zero_with_duplicates_stored_is_clean() -> None:
    """Given two incarnations of one broker and a controller, each numbered 0, 1, 2, ..., and two events stored twice,
    then there is no finding: an exact duplicate is the relay's at-least-once delivery, not a contradiction."""
    assert findings(h.clean()) == []


def test_a_gap_names_the_events_either_side_and_the_missing_sequences() -> None:
    """Given broker 1 (incarnation a) with events 0, 1, 2, 5, 6, then one finding names events 2 and 5 and says
    3..4 are missing."""
    assert findings(h.gap_inside()) == [
        finding(
            "emitter_sequences_contiguous",
            events=["broker:1:a:2", "broker:1:a:5"],
            detail="events 3..4 of broker 1 incarnation a are missing",
        )
    ]


def test_a_gap_at_an_incarnations_start_names_the_first_event_seen() -> None:
    """Given incarnation a complete and incarnation b seen from its event 3, then one finding names b's event 3 alone
    (nothing of b comes before it; a's events are another numbering) and says 0..2 are missing."""
    assert findings(h.gap_at_start()) == [
        finding(
            "emitter_sequences_contiguous",
            events=["broker:1:b:3"],
            detail="events 0..2 of broker 1 incarnation b are missing",
        )
    ]


def test_two_different_events_under_one_sequence_are_one_finding() -> None:
    """Given two different events numbered 1 by incarnation a (one of them stored twice), then one finding names
    event broker:1:a:1, once however many copies the lake holds; the numbering is otherwise complete."""
    assert findings(h.clash()) == [
        finding(
            "emitter_sequences_contiguous",
            events=["broker:1:a:1"],
            detail="broker 1 incarnation a stored different events under sequence 1",
        )
    ]


def test_a_gap_found_is_a_violation() -> None:
    """An event lost from the history is never an attributed loss: the audit's exit code says so."""
    (gap,) = findings(h.gap_inside())
    assert gap.is_violation
