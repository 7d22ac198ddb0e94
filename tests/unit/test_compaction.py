"""Log compaction's rules (hightide.core.compaction) as pure functions over segment summaries and record facts.

Method: small hand-made logs (segments of 100 bytes, offsets in tens) whose answers are worked out from Kafka's
LogCleanerManager.cleanableOffsets, grabFilthiestCompactedLog, Cleaner.groupSegmentsBySize and
shouldRetainRecord, one rule per test.
"""

from __future__ import annotations

import pytest

from hightide.core.clock import WallMs
from hightide.core.compaction import (
    CleanableSegment,
    CompactionSettings,
    first_dirty_offset,
    first_uncleanable_offset,
    group_segments_by_size,
    max_segment_ms,
    new_delete_horizon,
    plan_cleaning,
    retain_record,
)
from hightide.core.validation import validate_produce
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import Compression, InvalidRecordBatch, encode_batch

NOW = WallMs(1_000_000)
SETTINGS = CompactionSettings(
    min_cleanable_dirty_ratio=0.5,
    min_compaction_lag_ms=0,
    max_compaction_lag_ms=2**63 - 1,
    delete_retention_ms=86_400_000,
    segment_bytes=1_000,
    offset_index_max_entries=100,
    time_index_max_entries=100,
)


def log(count: int, *, size: int = 100, timestamp: int = 0) -> list[CleanableSegment]:
    """`count` closed segments of ten offsets each, then an empty active segment."""
    closed = [CleanableSegment(10 * i, 10 * i + 10, size, timestamp, timestamp) for i in range(count)]
    return [*closed, CleanableSegment(10 * count, 10 * count, 0, -1, None)]


def test_the_dirty_section_starts_at_the_checkpoint_unless_it_lies_outside_the_log() -> None:
    assert first_dirty_offset(None, 5, 100) == 5
    assert first_dirty_offset(40, 5, 100) == 40
    assert first_dirty_offset(2, 5, 100) == 5  # the log start moved past it
    assert first_dirty_offset(120, 5, 100) == 5  # the log was truncated below it


def test_the_active_segment_and_the_segment_holding_the_high_watermark_are_uncleanable() -> None:
    segments = log(5)
    assert first_uncleanable_offset(segments, first_dirty=0, high_watermark=50, min_compaction_lag_ms=0, now=NOW) == 50
    assert first_uncleanable_offset(segments, first_dirty=0, high_watermark=35, min_compaction_lag_ms=0, now=NOW) == 30
    assert first_uncleanable_offset(segments, first_dirty=0, high_watermark=30, min_compaction_lag_ms=0, now=NOW) == 30
    assert first_uncleanable_offset(segments, first_dirty=40, high_watermark=5, min_compaction_lag_ms=0, now=NOW) == 40


def test_min_compaction_lag_stops_at_the_first_dirty_segment_too_young() -> None:
    segments = [*log(2, timestamp=0)[:-1], *log(3, timestamp=NOW - 10)[2:]]
    bound = first_uncleanable_offset(segments, first_dirty=0, high_watermark=30, min_compaction_lag_ms=100, now=NOW)
    assert bound == 20
    assert first_uncleanable_offset(segments, first_dirty=0, high_watermark=30, min_compaction_lag_ms=5, now=NOW) == 30


def test_a_log_is_cleaned_when_its_dirty_ratio_is_above_the_minimum() -> None:
    segments = log(4)
    plan = plan_cleaning(
        segments, log_start_offset=0, checkpointed_dirty_offset=20, high_watermark=40, settings=SETTINGS, now=NOW
    )
    assert plan is None  # 200 dirty of 400 bytes: 0.5 is not above 0.5
    plan = plan_cleaning(
        segments, log_start_offset=0, checkpointed_dirty_offset=10, high_watermark=40, settings=SETTINGS, now=NOW
    )
    assert plan is not None and plan.dirty_ratio == 0.75 and not plan.forced_by_max_lag
    assert (plan.first_dirty_offset, plan.first_uncleanable_offset) == (10, 40)
    assert plan.groups == ((0, 10, 20, 30),)  # the whole log up to the uncleanable offset, merged: 400 <= 1000
    assert (
        plan_cleaning(
            segments, log_start_offset=0, checkpointed_dirty_offset=40, high_watermark=40, settings=SETTINGS, now=NOW
        )
        is None
    )  # nothing dirty


def test_max_compaction_lag_forces_a_cleaning_below_the_ratio() -> None:
    segments = log(4, timestamp=100)
    settings = CompactionSettings(
        min_cleanable_dirty_ratio=0.9,
        min_compaction_lag_ms=0,
        max_compaction_lag_ms=NOW - 200,
        delete_retention_ms=0,
        segment_bytes=1_000,
        offset_index_max_entries=100,
        time_index_max_entries=100,
    )
    plan = plan_cleaning(
        segments, log_start_offset=0, checkpointed_dirty_offset=30, high_watermark=40, settings=settings, now=NOW
    )
    assert plan is not None and plan.forced_by_max_lag  # first batch at 100 < now - lag = 200
    later_batches = log(4, timestamp=300)
    assert (
        plan_cleaning(
            later_batches,
            log_start_offset=0,
            checkpointed_dirty_offset=30,
            high_watermark=40,
            settings=settings,
            now=NOW,
        )
        is None
    )


def test_segments_are_grouped_up_to_segment_bytes_index_entries_and_int32_offsets() -> None:
    segments = [CleanableSegment(10 * i, 10 * i + 10, 400, 0, 0, offset_index_entries=3) for i in range(5)]
    assert group_segments_by_size(
        segments, max_bytes=1_000, offset_index_max_entries=100, time_index_max_entries=9
    ) == (
        (0, 10),
        (20, 30),
        (40,),
    )
    assert group_segments_by_size(segments, max_bytes=10_000, offset_index_max_entries=7, time_index_max_entries=9) == (
        (0, 10),
        (20, 30),
        (40,),
    )
    far = [CleanableSegment(0, 10, 1, 0, 0), CleanableSegment(2**31, 2**31 + 1, 1, 0, 0)]
    assert group_segments_by_size(far, max_bytes=1_000, offset_index_max_entries=9, time_index_max_entries=9) == (
        (0,),
        (2**31,),
    )


def test_a_record_survives_when_it_has_a_key_is_the_latest_and_is_not_an_expired_tombstone() -> None:
    def keep(
        offset: int, latest: int | None, *, key: bool = True, value: bool = True, horizon: int | None = None
    ) -> bool:
        return retain_record(
            offset=offset,
            has_key=key,
            has_value=value,
            latest_offset_for_key=latest,
            delete_horizon_ms=horizon,
            now=NOW,
        )

    assert keep(5, 5) and keep(5, None) and keep(7, 5)  # the latest, a key only in the clean section, or above
    assert not keep(4, 5)  # superseded
    assert not keep(5, 5, key=False)  # keyless: invalid in a compacted log
    assert keep(5, 5, value=False) and keep(5, 5, value=False, horizon=NOW + 1)  # a tombstone before its horizon
    assert not keep(5, 5, value=False, horizon=NOW)
    assert keep(5, 5, horizon=NOW)  # a value does not expire


def test_the_first_cleaning_keeping_a_tombstone_stamps_the_delete_horizon() -> None:
    assert (
        new_delete_horizon(current_horizon_ms=None, retains_tombstone=True, delete_retention_ms=10, now=NOW) == NOW + 10
    )
    assert new_delete_horizon(current_horizon_ms=None, retains_tombstone=False, delete_retention_ms=10, now=NOW) is None
    assert new_delete_horizon(current_horizon_ms=7, retains_tombstone=True, delete_retention_ms=10, now=NOW) == 7


def test_a_compacted_log_rolls_by_the_max_compaction_lag() -> None:
    assert max_segment_ms(("compact",), 1_000, 50) == 50
    assert max_segment_ms(("compact", "delete"), 40, 50) == 40
    assert max_segment_ms(("delete",), 1_000, 50) == 1_000


def test_a_leader_refuses_a_record_without_a_key_on_a_compacted_topic_only() -> None:
    keyless = encode_batch([b"1", b"2"], keys=[b"k", None], timestamps=0)
    assert validate_produce(keyless, max_message_bytes=1 << 20, segment_bytes=1 << 20)
    with pytest.raises(InvalidRecordBatch, match="Compacted topic cannot accept message without key") as refused:
        validate_produce(keyless, max_message_bytes=1 << 20, segment_bytes=1 << 20, compacted=True)
    assert refused.value.error_code is ErrorCode.INVALID_RECORD
    keyed = encode_batch([b"1", None], keys=[b"k", b"k"], timestamps=0, compression=Compression.GZIP)
    assert validate_produce(keyed, max_message_bytes=1 << 20, segment_bytes=1 << 20, compacted=True)
