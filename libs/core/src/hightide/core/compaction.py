"""Log compaction's decisions (Kafka's LogCleanerManager and Cleaner): which part of a compacted log may be
cleaned, whether it is dirty enough to clean now, how its segments are grouped, and which record survives.

Room: libs/core (rules as pure functions). The storage engine (`hightide.storage.cleaner`) reads and rewrites the
bytes; what it may touch and what it keeps is decided here, over segment summaries and record facts. Nothing here
reads a clock: `now` is the wall-clock time the caller passes in, the clock record timestamps are in.

The log is split, as Kafka splits it, at two offsets:

    log start .. first dirty offset      the clean section: cleaned before, every key at most once
    first dirty .. first uncleanable     the dirty section: the cleaner builds its key -> last offset map here
    first uncleanable .. log end         never touched

| the first uncleanable offset is the lowest of                                                    |
| ------------------------------------------------------------------------------------------------ |
| the active segment's base offset (the active segment is never cleaned)                           |
| the base of the segment holding the high watermark (only segments wholly below the HW; Kafka's   |
| lastStableOffset is the HW here: Hightide has no transactions)                                   |
| the base of the first dirty segment whose largest timestamp is within min.compaction.lag.ms      |

A log is cleaned when its dirty section holds bytes and either its dirty ratio (dirty bytes / (clean + dirty
bytes)) is above min.cleanable.dirty.ratio, or its oldest dirty segment's first batch is older than
max.compaction.lag.ms (Kafka's `needCompactionNow`). A cleaning rewrites every segment from the log start to the
first uncleanable offset, in groups of consecutive segments whose sizes sum to at most segment.bytes (Kafka's
`groupSegmentsBySize`), each group becoming one segment.

| a record is kept when                                                                            |
| ------------------------------------------------------------------------------------------------ |
| it has a key (a keyless record is invalid in a compacted log and goes), and                      |
| no later record with its key is in the map (its offset >= the map's offset for the key), and    |
| it has a value, or it is a tombstone whose batch's delete horizon is unset or not yet reached    |

Tombstones follow KIP-534: the first cleaning that keeps a tombstone stamps its batch's delete horizon,
now + delete.retention.ms; a later cleaning after the horizon removes it. Consumers that read the log from the
start within delete.retention.ms of the tombstone being cleaned therefore still see the delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from hightide.core.clock import WallMs
from hightide.core.rolling import RELATIVE_OFFSET_MAX

COMPACT: Final = "compact"
DELETE: Final = "delete"


def is_compacted(cleanup_policy: Sequence[str]) -> bool:
    """Whether cleanup.policy asks for compaction (`compact` or `compact,delete`)."""
    return COMPACT in cleanup_policy


def is_deleted_by_retention(cleanup_policy: Sequence[str]) -> bool:
    """Whether cleanup.policy asks for time and size retention (`delete` or `compact,delete`)."""
    return DELETE in cleanup_policy


def max_segment_ms(cleanup_policy: Sequence[str], segment_ms: int, max_compaction_lag_ms: int) -> int:
    """Kafka's `LogConfig.maxSegmentMs`: a compacted log rolls its active segment by max.compaction.lag.ms too, so
    no record waits in the (never cleaned) active segment longer than the lag allows."""
    return min(segment_ms, max_compaction_lag_ms) if is_compacted(cleanup_policy) else segment_ms


@dataclass(frozen=True, slots=True)
class CleanableSegment:
    """What the cleaner's rules read of one segment: its offsets [base_offset, next_offset), its size, its largest
    timestamp (a record's, or the file's modification time), the max timestamp of its first batch (None when it
    holds none) and how many entries its two indexes hold."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int
    first_batch_timestamp: int | None
    offset_index_entries: int = 0
    time_index_entries: int = 0

    def __post_init__(self) -> None:
        assert 0 <= self.base_offset <= self.next_offset and self.size_bytes >= 0, self


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """The topic configs compaction obeys, with Kafka's names (`min.cleanable.dirty.ratio` and so on)."""

    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    segment_bytes: int
    offset_index_max_entries: int
    time_index_max_entries: int


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """One cleaning of one log: the dirty section [first_dirty_offset, first_uncleanable_offset) the key map is
    built over, and the groups of segments (base offsets, oldest first) each rewritten into one segment. After it,
    the first dirty offset is `first_uncleanable_offset`."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    dirty_ratio: float
    forced_by_max_lag: bool
    groups: tuple[tuple[int, ...], ...]

    @property
    def segment_count(self) -> int:
        return sum(len(group) for group in self.groups)


def first_dirty_offset(checkpointed: int | None, log_start_offset: int, log_end_offset: int) -> int:
    """Kafka's `cleanableOffsets`: where the dirty section starts. A checkpoint below the log start offset (the
    log was truncated from the front) or past the LEO (truncated from the back) is ignored: all is dirty."""
    if checkpointed is None or checkpointed < log_start_offset or checkpointed > log_end_offset:
        return log_start_offset
    return checkpointed


def first_uncleanable_offset(
    segments: Sequence[CleanableSegment],
    *,
    first_dirty: int,
    high_watermark: int,
    min_compaction_lag_ms: int,
    now: WallMs,
) -> int:
    """The lowest of: the active segment's base, the base of the segment holding the HW, and the base of the first
    dirty segment whose largest timestamp is within min.compaction.lag.ms of now (table above); never below
    `first_dirty`."""
    _check_segments(segments)
    bound = segments[-1].base_offset
    for segment, following in pairwise(segments):
        if following.base_offset > high_watermark:
            bound = min(bound, segment.base_offset)
            break
    if min_compaction_lag_ms > 0:
        for segment in segments[:-1]:
            if segment.next_offset > first_dirty and segment.largest_timestamp > now - min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    return max(first_dirty, bound)


def plan_cleaning(
    segments: Sequence[CleanableSegment],
    *,
    log_start_offset: int,
    checkpointed_dirty_offset: int | None,
    high_watermark: int,
    settings: CompactionSettings,
    now: WallMs,
) -> CleaningPlan | None:
    """Whether the log should be cleaned now and how (module docstring); None when it should not."""
    _check_segments(segments)
    log_end_offset = segments[-1].next_offset
    dirty = first_dirty_offset(checkpointed_dirty_offset, log_start_offset, log_end_offset)
    uncleanable = first_uncleanable_offset(
        segments,
        first_dirty=dirty,
        high_watermark=high_watermark,
        min_compaction_lag_ms=settings.min_compaction_lag_ms,
        now=now,
    )
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < dirty)
    dirty_segments = [s for s in segments[:-1] if s.base_offset >= dirty and s.base_offset < uncleanable]
    dirty_bytes = sum(s.size_bytes for s in dirty_segments)
    if dirty_bytes == 0:
        return None
    ratio = dirty_bytes / (clean_bytes + dirty_bytes)
    forced = _max_compaction_lag_passed(segments[:-1], dirty, settings.max_compaction_lag_ms, now)
    # Kafka's grabFilthiestCompactedLog: strictly above the ratio, or the max lag forces it.
    if not forced and ratio <= settings.min_cleanable_dirty_ratio:
        return None
    cleanable = [s for s in segments[:-1] if s.base_offset < uncleanable and s.next_offset > log_start_offset]
    groups = group_segments_by_size(
        cleanable,
        max_bytes=settings.segment_bytes,
        offset_index_max_entries=settings.offset_index_max_entries,
        time_index_max_entries=settings.time_index_max_entries,
    )
    return CleaningPlan(dirty, uncleanable, ratio, forced and ratio <= settings.min_cleanable_dirty_ratio, groups)


def _max_compaction_lag_passed(
    segments: Sequence[CleanableSegment], first_dirty: int, max_compaction_lag_ms: int, now: WallMs
) -> bool:
    """Kafka's `maxCompactionDelay` > 0: a dirty (non-active) segment's first batch is older than the max lag."""
    stamps = [
        s.first_batch_timestamp
        for s in segments
        if s.next_offset > first_dirty and s.first_batch_timestamp is not None and s.first_batch_timestamp > 0
    ]
    return bool(stamps) and min(stamps) < now - max(max_compaction_lag_ms, 0)


def group_segments_by_size(
    segments: Sequence[CleanableSegment],
    *,
    max_bytes: int,
    offset_index_max_entries: int,
    time_index_max_entries: int,
) -> tuple[tuple[int, ...], ...]:
    """Kafka's `groupSegmentsBySize`: consecutive segments merged while their log sizes sum to at most `max_bytes`
    (segment.bytes), their index entries fit one index, and the group's offsets fit int32 relative offsets
    (an empty segment is always let in: it adds no offset). Returns each group's base offsets."""
    groups: list[tuple[int, ...]] = []
    index = 0
    while index < len(segments):
        first = segments[index]
        group = [first.base_offset]
        size, offsets, times = first.size_bytes, first.offset_index_entries, first.time_index_entries
        index += 1
        while index < len(segments):
            candidate = segments[index]
            fits = (
                size + candidate.size_bytes <= max_bytes
                and offsets + candidate.offset_index_entries <= offset_index_max_entries
                and times + candidate.time_index_entries < time_index_max_entries
                and (candidate.size_bytes == 0 or candidate.next_offset - 1 - first.base_offset <= RELATIVE_OFFSET_MAX)
            )
            if not fits:
                break
            group.append(candidate.base_offset)
            size += candidate.size_bytes
            offsets += candidate.offset_index_entries
            times += candidate.time_index_entries
            index += 1
        groups.append(tuple(group))
    return tuple(groups)


def retain_record(
    *,
    offset: int,
    has_key: bool,
    has_value: bool,
    latest_offset_for_key: int | None,
    delete_horizon_ms: int | None,
    now: WallMs,
) -> bool:
    """Kafka's `Cleaner.shouldRetainRecord` (table above). `latest_offset_for_key` is the map's offset for the
    record's key (None: the key is not in the dirty section); `delete_horizon_ms` its batch's, if stamped."""
    if not has_key:
        return False
    if latest_offset_for_key is not None and offset < latest_offset_for_key:
        return False
    return has_value or delete_horizon_ms is None or now < delete_horizon_ms


def new_delete_horizon(
    *, current_horizon_ms: int | None, retains_tombstone: bool, delete_retention_ms: int, now: WallMs
) -> int | None:
    """The delete horizon a rewritten batch carries: its own if stamped; now + delete.retention.ms when it keeps a
    tombstone and has none yet (KIP-534); None otherwise."""
    if current_horizon_ms is not None:
        return current_horizon_ms
    return now + delete_retention_ms if retains_tombstone else None


def _check_segments(segments: Sequence[CleanableSegment]) -> None:
    assert segments, "a log always has an active segment"
    assert all(a.next_offset <= b.base_offset for a, b in pairwise(segments)), segments


__all__ = [
    "COMPACT",
    "DELETE",
    "CleanableSegment",
    "CleaningPlan",
    "CompactionSettings",
    "first_dirty_offset",
    "first_uncleanable_offset",
    "group_segments_by_size",
    "is_compacted",
    "is_deleted_by_retention",
    "max_segment_ms",
    "new_delete_horizon",
    "plan_cleaning",
    "retain_record",
]
