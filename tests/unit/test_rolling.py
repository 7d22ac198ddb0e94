"""When the active segment rolls: Kafka's `LogSegment.shouldRoll` as `hightide.core.rolling.roll_reason`.

Method: given an active segment described by plain values (what the storage engine's `LogSegment` and the
simulator's disk both expose), when a run of batches is about to be appended at a wall-clock `now`, then the
rule names the first reason of Kafka's that holds, or None; each reason has a case just below and just at its
threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from hightide.core.clock import WallMs
from hightide.core.rolling import RELATIVE_OFFSET_MAX, RollReason, roll_jitter_ms, roll_reason

SEGMENT_BYTES = 1000
SEGMENT_MS = 60_000
NOW = WallMs(1_700_000_000_000)
CREATED = WallMs(NOW - 1_000)


@dataclass(frozen=True)
class Segment:
    base_offset: int = 100
    size: int = 500
    created_ms: WallMs = CREATED
    rolling_based_timestamp: int | None = NOW - 1_000
    roll_jitter_ms: int = 0
    offset_index_full: bool = False
    time_index_full: bool = False


def _reason(
    segment: Segment, incoming: int = 100, max_timestamp: int = NOW, last_offset: int = 200
) -> RollReason | None:
    return roll_reason(
        segment, incoming, max_timestamp, last_offset, segment_bytes=SEGMENT_BYTES, segment_ms=SEGMENT_MS, now=NOW
    )


def test_a_segment_with_room_and_time_left_takes_the_batches() -> None:
    assert _reason(Segment()) is None


def test_a_segment_rolls_when_the_batches_would_pass_segment_bytes() -> None:
    assert _reason(Segment(size=900), incoming=100) is None  # exactly full is still allowed
    assert _reason(Segment(size=901), incoming=100) is RollReason.SEGMENT_BYTES


def test_a_segment_rolls_when_its_first_batch_is_older_than_segment_ms_by_record_timestamps() -> None:
    first = NOW - SEGMENT_MS
    assert _reason(Segment(rolling_based_timestamp=first), max_timestamp=first + SEGMENT_MS) is None
    assert (
        _reason(Segment(rolling_based_timestamp=first), max_timestamp=first + SEGMENT_MS + 1) is RollReason.SEGMENT_MS
    )


def test_record_timestamps_not_now_decide_age_when_the_segment_has_them() -> None:
    # Kafka compares the incoming batches' max timestamp with the first batch's: a producer's clock, not ours.
    old = Segment(created_ms=WallMs(NOW - 10 * SEGMENT_MS), rolling_based_timestamp=NOW - 10)
    assert _reason(old, max_timestamp=NOW) is None


def test_without_record_timestamps_the_segment_ages_from_its_creation_on_the_wall_clock() -> None:
    created = WallMs(NOW - SEGMENT_MS - 1)
    assert _reason(Segment(created_ms=created, rolling_based_timestamp=-1)) is RollReason.SEGMENT_MS
    assert _reason(Segment(created_ms=WallMs(NOW - SEGMENT_MS), rolling_based_timestamp=None)) is None


def test_an_empty_segment_never_rolls_for_age() -> None:
    empty = Segment(size=0, created_ms=WallMs(0), rolling_based_timestamp=None)
    assert _reason(empty) is None


def test_jitter_makes_a_segment_roll_earlier() -> None:
    first = NOW - SEGMENT_MS
    jittered = Segment(rolling_based_timestamp=first, roll_jitter_ms=500)
    assert _reason(jittered, max_timestamp=first + SEGMENT_MS - 500) is None
    assert _reason(jittered, max_timestamp=first + SEGMENT_MS - 499) is RollReason.SEGMENT_MS


@pytest.mark.parametrize(
    ("segment", "reason"),
    [
        (Segment(offset_index_full=True), RollReason.OFFSET_INDEX_FULL),
        (Segment(time_index_full=True), RollReason.TIME_INDEX_FULL),
    ],
)
def test_a_segment_rolls_when_an_index_is_full(segment: Segment, reason: RollReason) -> None:
    assert _reason(segment) is reason


def test_a_segment_rolls_when_the_last_offset_no_longer_fits_a_relative_offset() -> None:
    assert _reason(Segment(), last_offset=100 + RELATIVE_OFFSET_MAX) is None
    assert _reason(Segment(), last_offset=101 + RELATIVE_OFFSET_MAX) is RollReason.OFFSET_OVERFLOW


def test_the_first_reason_in_kafkas_order_is_named() -> None:
    everything = replace(Segment(size=950, offset_index_full=True, time_index_full=True), rolling_based_timestamp=0)
    assert _reason(everything) is RollReason.SEGMENT_BYTES
    assert _reason(replace(everything, size=500)) is RollReason.SEGMENT_MS


def test_jitter_is_deterministic_and_within_segment_jitter_ms() -> None:
    spread = {roll_jitter_ms(base, 1_000) for base in range(0, 100_000, 997)}
    assert all(0 <= j < 1_000 for j in spread) and len(spread) > 50
    assert roll_jitter_ms(12345, 1_000) == roll_jitter_ms(12345, 1_000)
    assert roll_jitter_ms(12345, 0) == 0
