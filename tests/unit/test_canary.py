"""The canary's rules: each record read back is classified against what its producer was told.

Method: given/when/then on `hightide.core.canary.PartitionTracker` as the module docstring's table states it
(in order, ahead past a gap, late, duplicate, foreign), the three orders in which an acknowledgement and a gap can
meet, a restart under a new incarnation, and the bounded windows behind the availability and latency figures.
"""

from __future__ import annotations

import pytest

from hightide.core.canary import (
    AvailabilityWindow,
    CanaryValue,
    DelayWindow,
    InvalidCanaryValue,
    PartitionTracker,
    Reading,
    Verdict,
    monitor_topic_shape,
    preferred_leader_gaps,
    replicas_led_by,
)

INCARNATION = "a1b2c3"


def value(sequence: int, send_ms: int = 1_000, incarnation: str = INCARNATION, partition: int = 0) -> CanaryValue:
    return CanaryValue(incarnation, partition, sequence, send_ms)


def test_a_value_round_trips_and_stays_within_the_64_characters_the_client_events_keep() -> None:
    sent = CanaryValue("0123456789abcdef", 999, 2**31, 1_764_000_000_000)
    assert CanaryValue.decode(sent.encode()) == sent
    assert len(sent.encode()) <= 64


@pytest.mark.parametrize("text", ["", "x:1:2", "x:1:2:3:4", "x:-1:2:3", "x:a:2:3", ":1:2:3", "a-b:1:2:3"])
def test_a_value_that_is_not_a_canary_records_is_refused(text: str) -> None:
    with pytest.raises(InvalidCanaryValue):
        CanaryValue.decode(text)


def test_records_read_in_sequence_are_in_order_with_their_delay() -> None:
    tracker = PartitionTracker(INCARNATION, 0)
    for sequence in range(3):
        tracker.acknowledged(sequence)
    readings = [tracker.read(value(s, send_ms=1_000 + s), now_ms=1_050) for s in range(3)]
    assert [r.verdict for r in readings] == [Verdict.IN_ORDER] * 3
    assert [r.delay_ms for r in readings] == [50, 49, 48]
    assert (tracker.consumed, tracker.lost, tracker.duplicated, tracker.next_sequence) == (3, 0, 0, 3)


def test_an_acknowledged_record_passed_over_is_lost() -> None:
    """Given sequences 0..2 acknowledged, when the consumer reads 0 then 2, then 1 is lost."""
    tracker = PartitionTracker(INCARNATION, 0)
    for sequence in range(3):
        tracker.acknowledged(sequence)
    tracker.read(value(0), 1_000)
    reading = tracker.read(value(2), 1_000)
    assert (reading.verdict, reading.lost) == (Verdict.AHEAD, 1)
    assert tracker.lost == 1


def test_an_acknowledgement_after_the_gap_was_read_still_shows_the_loss() -> None:
    """The consumer may read past a gap before the producer hears its acknowledgement (both are asynchronous)."""
    tracker = PartitionTracker(INCARNATION, 0)
    tracker.read(value(0), 1_000)
    assert tracker.read(value(2), 1_000).lost == 0
    assert tracker.awaiting_outcome == 1
    assert tracker.acknowledged(1) == 1
    assert (tracker.lost, tracker.awaiting_outcome) == (1, 0)


@pytest.mark.parametrize("failure_first", [True, False])
def test_a_failed_send_leaves_a_gap_that_is_no_loss(failure_first: bool) -> None:
    """A record the producer failed was never promised: a gap there loses nothing, whichever is heard first."""
    tracker = PartitionTracker(INCARNATION, 0)
    if failure_first:
        tracker.failed(1)
    tracker.read(value(0), 1_000)
    reading = tracker.read(value(2), 1_000)
    if not failure_first:
        tracker.failed(1)
    assert (reading.verdict, reading.lost, tracker.lost, tracker.awaiting_outcome) == (Verdict.AHEAD, 0, 0, 0)


def test_a_failed_send_whose_record_was_appended_all_the_same_reads_in_order() -> None:
    """An `unknown` outcome may still be in the log: reading it is no duplicate and no loss."""
    tracker = PartitionTracker(INCARNATION, 0)
    tracker.failed(0)
    assert tracker.read(value(0), 1_000).verdict is Verdict.IN_ORDER
    assert (tracker.lost, tracker.duplicated) == (0, 0)


def test_a_record_read_twice_is_a_duplicate() -> None:
    tracker = PartitionTracker(INCARNATION, 0)
    tracker.acknowledged(0)
    tracker.acknowledged(1)
    tracker.read(value(0), 1_000)
    tracker.read(value(1), 1_000)
    assert tracker.read(value(0), 1_000).verdict is Verdict.DUPLICATE
    assert (tracker.duplicated, tracker.lost, tracker.next_sequence) == (1, 0, 2)


def test_a_record_that_turns_up_after_a_later_one_is_reordered_not_duplicated() -> None:
    """Given 0, 2 read with 1's outcome unknown, when 1 arrives, then it is late (reordered), and a second 1 is a
    duplicate."""
    tracker = PartitionTracker(INCARNATION, 0)
    tracker.read(value(0), 1_000)
    tracker.read(value(2), 1_000)
    assert tracker.read(value(1), 1_000).verdict is Verdict.LATE
    assert tracker.reordered == 1
    assert tracker.read(value(1), 1_000).verdict is Verdict.DUPLICATE
    assert tracker.awaiting_outcome == 0
    tracker.acknowledged(1)  # its acknowledgement comes last: it was read, so nothing is lost
    assert tracker.lost == 0


def test_a_restart_under_a_new_incarnation_ignores_the_old_one_and_starts_at_zero() -> None:
    """Given a canary that sent 0..5 and restarted as another incarnation, when the new one reads an old record
    late and then its own 0 and 1, then the old record is foreign (no duplicate, no delay) and its own are in
    order."""
    old = PartitionTracker("old1", 0)
    for sequence in range(6):
        old.acknowledged(sequence)
        old.read(value(sequence, incarnation="old1"), 1_000)
    new = PartitionTracker("new2", 0)
    stale = new.read(value(6, incarnation="old1"), 1_000)
    assert (stale.verdict, stale.delay_ms) == (Verdict.FOREIGN, -1)
    assert [new.read(value(s, incarnation="new2"), 1_000).verdict for s in (0, 1)] == [Verdict.IN_ORDER] * 2
    assert (new.consumed, new.duplicated, new.lost) == (2, 0, 0)


def test_a_record_of_another_partition_is_foreign() -> None:
    tracker = PartitionTracker(INCARNATION, 0)
    assert tracker.read(value(0, partition=1), 1_000).verdict is Verdict.FOREIGN
    assert tracker.next_sequence == 0


def test_a_consumer_far_behind_forgets_the_oldest_sequences_instead_of_growing() -> None:
    tracker = PartitionTracker(INCARNATION, 0, tracked_sequences_max=10)
    for sequence in range(25):
        tracker.acknowledged(sequence)
    assert tracker.forgotten == 15
    reading = tracker.read(value(30), 1_000)
    assert reading.lost == 10  # the ten it still held (15..24), acknowledged and passed over
    assert tracker.forgotten == 15  # 0..14, forgotten when the bound was reached
    assert tracker.awaiting_outcome == 5  # 25..29: passed over, no outcome yet
    assert tracker.read(value(31), 1_000).verdict is Verdict.IN_ORDER


def test_availability_is_the_acknowledged_fraction_of_the_window() -> None:
    window = AvailabilityWindow(window_ms=1_000)
    assert window.ratio(0) == 1.0
    for at, ok in ((0, True), (100, False), (200, True), (300, True)):
        window.record(at, ok)
    assert window.ratio(300) == 0.75
    assert window.ratio(1_150) == 1.0  # the failure at 100 has left the window
    assert window.ratio(5_000) == 1.0


def test_the_99th_percentile_is_nearest_rank_over_the_last_samples() -> None:
    window = DelayWindow(samples_max=100)
    assert window.percentile(0.99) == -1
    for delay in range(1, 201):
        window.record(delay)
    assert window.percentile(0.99) == 199  # of 101..200, the 99th of 100
    assert window.percentile(0.5) == 150


def test_every_live_broker_gets_a_partition_it_leads() -> None:
    assert monitor_topic_shape(1) == (1, 1, 1)
    assert monitor_topic_shape(5) == (5, 3, 2)
    assert preferred_leader_gaps([1, 2, 3, 4], [1, 2, 3, 1]) == [4]
    assert replicas_led_by(4, [1, 2, 3, 4], 3) == (4, 1, 2)
    assert replicas_led_by(2, [1, 2, 3], 2) == (2, 3)


def test_another_record_at_an_acknowledged_offset_shows_the_acknowledged_one_lost() -> None:
    """Given 0..2 acknowledged at offsets 10..12 and read, when the log is rewound (an unclean election) and the
    consumer, reset, finds sequence 5 at offset 11, then the record acknowledged at 11 is lost, once; sequence 0
    read again at its own offset 10 is a duplicate and nothing more."""
    tracker = PartitionTracker(INCARNATION, 0)
    for sequence in range(3):
        tracker.acknowledged(sequence, offset=10 + sequence)
        tracker.read(value(sequence), 1_000, offset=10 + sequence)
    again = tracker.read(value(0), 2_000, offset=10)
    assert (again.verdict, again.lost) == (Verdict.DUPLICATE, 0)
    taken = tracker.read(value(5), 2_000, offset=11)
    assert (taken.verdict, taken.lost) == (Verdict.AHEAD, 1)  # 3 and 4 had no outcome: only offset 11's loss
    assert tracker.read(value(5), 2_000, offset=11).lost == 0  # read again: counted once
    assert tracker.lost == 1


def test_a_record_that_is_no_canarys_at_an_acknowledged_offset_shows_it_lost_too() -> None:
    tracker = PartitionTracker(INCARNATION, 0)
    tracker.acknowledged(0, offset=7)
    assert tracker.read(value(0, incarnation="other"), 1_000, offset=7) == Reading(Verdict.FOREIGN, 1, -1)
    assert tracker.read(None, 1_000, offset=8) == Reading(Verdict.FOREIGN, 0, -1)
    assert (tracker.lost, tracker.consumed) == (1, 0)


def test_a_second_acknowledgement_of_an_offset_shows_the_first_record_lost() -> None:
    """The producer's view of a rewound log: sequence 1 was acknowledged at offset 11, and after the rewind
    sequence 7 is acknowledged at offset 11 too, before the consumer gets there."""
    tracker = PartitionTracker(INCARNATION, 0)
    tracker.acknowledged(1, offset=11)
    assert tracker.acknowledged(1, offset=11) == 0  # the same record, told twice
    assert tracker.acknowledged(7, offset=11) == 1
    assert tracker.read(value(7), 1_000, offset=11).lost == 0  # the record now there is the one acknowledged last
    assert tracker.lost == 1
