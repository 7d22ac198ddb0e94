"""Which segments retention deletes, and why: Kafka's `deleteOldSegments` as `hightide.core.retention`.

Method: given a log described by segment summaries (base offset, next offset, size, largest timestamp), its log
start offset and high watermark, when retention is planned at a wall-clock `now`, then the plan names the oldest
segments each of Kafka's passes deletes, whether the log must roll first, and the log start offset afterwards.
"""

from __future__ import annotations

import pytest

from hightide.core.clock import WallMs
from hightide.core.retention import (
    DeletionReason,
    RetentionPlan,
    SegmentSummary,
    plan_log_start_offset_retention,
    plan_retention,
)

NOW = WallMs(1_700_000_000_000)
HOUR = 3_600_000


def _log(*largest_timestamps: int, size: int = 100, empty_active: bool = False) -> list[SegmentSummary]:
    """Segments of 10 offsets and `size` bytes each, then (optionally) an empty active segment."""
    segments = [SegmentSummary(10 * i, 10 * i + 10, size, t) for i, t in enumerate(largest_timestamps)]
    if empty_active:
        end = segments[-1].next_offset if segments else 0
        segments.append(SegmentSummary(end, end, 0, -1))
    return segments


def _plan(
    segments: list[SegmentSummary],
    *,
    log_start_offset: int = 0,
    high_watermark: int | None = None,
    retention_ms: int = -1,
    retention_bytes: int = -1,
) -> RetentionPlan:
    return plan_retention(
        segments,
        log_start_offset=log_start_offset,
        high_watermark=segments[-1].next_offset if high_watermark is None else high_watermark,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        now=NOW,
    )


def _deleted(plan: RetentionPlan) -> list[tuple[int, str]]:
    return [(d.segment.base_offset, d.reason.value) for d in plan.deletions]


def test_retention_ms_deletes_the_oldest_segments_while_their_newest_record_is_too_old() -> None:
    segments = _log(NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR // 2, NOW - 3 * HOUR, empty_active=True)
    plan = _plan(segments, retention_ms=HOUR)
    assert _deleted(plan) == [(0, "retention_ms"), (10, "retention_ms")]  # stops at the first young segment
    assert (plan.log_start_offset, plan.roll_first) == (20, False)


def test_retention_ms_compares_strictly_and_keeps_segments_stamped_in_the_future() -> None:
    assert _deleted(_plan(_log(NOW - HOUR, empty_active=True), retention_ms=HOUR)) == []
    assert _deleted(_plan(_log(NOW - HOUR - 1, empty_active=True), retention_ms=HOUR)) == [(0, "retention_ms")]
    assert _deleted(_plan(_log(NOW + HOUR, empty_active=True), retention_ms=0)) == []


def test_retention_bytes_deletes_the_oldest_segments_while_the_log_stays_at_least_the_limit() -> None:
    segments = _log(NOW, NOW, NOW, NOW, empty_active=True)  # 400 bytes
    assert _deleted(_plan(segments, retention_bytes=250)) == [(0, "retention_bytes")]  # 300 left; 200 < 250
    assert _deleted(_plan(segments, retention_bytes=200)) == [(0, "retention_bytes"), (10, "retention_bytes")]
    assert _deleted(_plan(segments, retention_bytes=400)) == []


def test_the_log_start_offset_pass_deletes_segments_wholly_below_it() -> None:
    segments = _log(NOW, NOW, NOW, empty_active=True)
    plan = _plan(segments, log_start_offset=20)
    assert _deleted(plan) == [(0, "log_start_offset"), (10, "log_start_offset")]
    assert _deleted(_plan(segments, log_start_offset=19)) == [(0, "log_start_offset")]
    assert plan.log_start_offset == 20


def test_nothing_at_or_above_the_high_watermark_is_deleted() -> None:
    segments = _log(0, 0, 0, empty_active=True)
    assert _deleted(_plan(segments, high_watermark=19, retention_ms=0)) == [(0, "retention_ms")]
    assert _deleted(_plan(segments, high_watermark=9, retention_ms=0)) == []
    assert _deleted(_plan(segments, high_watermark=19, log_start_offset=19)) == [(0, "log_start_offset")]


def test_the_empty_active_segment_is_never_deleted() -> None:
    plan = _plan(_log(0, 0, empty_active=True), retention_ms=0, retention_bytes=0)
    assert _deleted(plan) == [(0, "retention_bytes"), (10, "retention_bytes")]
    assert (plan.roll_first, plan.log_start_offset) == (False, 20)


def test_when_every_segment_goes_the_log_rolls_first_and_starts_at_its_end() -> None:
    plan = _plan(_log(0, 0, 0), retention_ms=0)  # the active segment holds data and the HW is at the LEO
    assert [d.segment.base_offset for d in plan.deletions] == [0, 10, 20]
    assert (plan.roll_first, plan.log_start_offset) == (True, 30)


def test_the_passes_run_in_kafkas_order_each_over_what_the_last_left() -> None:
    # Segment 0 is below the log start offset and too old: the first pass claims it. Then retention.bytes
    # measures the log without it, and retention.ms goes on from where retention.bytes stopped.
    segments = _log(0, NOW, 0, NOW, empty_active=True)
    plan = _plan(segments, log_start_offset=10, retention_bytes=200, retention_ms=HOUR)
    assert _deleted(plan) == [(0, "log_start_offset"), (10, "retention_bytes"), (20, "retention_ms")]
    assert plan.log_start_offset == 30


def test_disabled_limits_delete_nothing() -> None:
    assert _deleted(_plan(_log(0, 0, 0, empty_active=True))) == []


def test_the_log_start_offset_retention_alone_is_what_moving_the_log_start_offset_deletes() -> None:
    segments = _log(0, 0, 0, empty_active=True)
    plan = plan_log_start_offset_retention(segments, log_start_offset=25, high_watermark=30)
    assert _deleted(plan) == [(0, "log_start_offset"), (10, "log_start_offset")]
    assert plan.log_start_offset == 25  # inside segment 20: consumers skip below it


@pytest.mark.parametrize("reason", list(DeletionReason))
def test_deletion_reasons_are_the_event_catalogues_spelling(reason: DeletionReason) -> None:
    assert reason.value in ("log_start_offset", "retention_bytes", "retention_ms")
