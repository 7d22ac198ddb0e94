"""Which old segments a log deletes, and why: Kafka's retention passes (`UnifiedLog.deleteOldSegments`) as pure
functions over segment summaries.

Room: libs/core (rules as pure functions). The storage engine carries out the plan these return; the simulator's
disk carries out the same plans, so the rules are tested once and run everywhere. Nothing here reads a clock:
`now` is the wall-clock time the caller passes in, the clock record timestamps are in.

Each pass deletes segments from the oldest while its condition holds, and only segments Kafka's
`deletableSegments` allows: wholly below the high watermark (the next segment's base offset, or the log end
offset for the last segment, is <= HW), so the log start offset never passes the HW, and never the last segment
when it is empty. The passes run in Kafka's order, each over what the previous left:

| pass                         | a segment goes while                                                          |
| ---------------------------- | ----------------------------------------------------------------------------- |
| `log_start_offset`           | the next segment starts at or below the log start offset (wholly below it)    |
| `retention_bytes` (if >= 0)  | the log stays at least retention.bytes without it                             |
| `retention_ms` (if >= 0)     | now - its largest timestamp > retention.ms                                    |

A segment's largest timestamp is its largest record timestamp, or its file's modification time when it has none
(Kafka's `LogSegment.largestTimestamp`); a segment whose records are stamped in the future is kept. When every
segment goes, the log first starts an empty segment at its log end offset (a log always has an active segment);
the log start offset becomes the first remaining segment's base offset, if that is higher.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise

from hightide.core.clock import WallMs


class DeletionReason(StrEnum):
    """Why a segment was deleted; the values are the event catalogue's `SegmentDeleted.reason`."""

    LOG_START_OFFSET = "log_start_offset"
    RETENTION_BYTES = "retention_bytes"
    RETENTION_MS = "retention_ms"


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What retention reads of one segment: its offsets [base_offset, next_offset), its size, and its largest
    timestamp (a record timestamp, or the file's modification time when it holds none)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int

    def __post_init__(self) -> None:
        assert 0 <= self.base_offset <= self.next_offset and self.size_bytes >= 0, self


@dataclass(frozen=True, slots=True)
class SegmentDeletion:
    segment: SegmentSummary
    reason: DeletionReason


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """The oldest segments to delete, in order, each with its pass; `roll_first` when every segment goes (start an
    empty active segment at the log end offset before deleting); the log start offset afterwards."""

    deletions: tuple[SegmentDeletion, ...]
    roll_first: bool
    log_start_offset: int


def plan_retention(
    segments: Sequence[SegmentSummary],
    *,
    log_start_offset: int,
    high_watermark: int,
    retention_ms: int,
    retention_bytes: int,
    now: WallMs,
) -> RetentionPlan:
    """Kafka's three retention passes over `segments` (oldest first, the last one active)."""
    _check_log(segments, log_start_offset, high_watermark)
    end = _log_start_offset_breached(segments, 0, log_start_offset, high_watermark)
    deletions = [SegmentDeletion(s, DeletionReason.LOG_START_OFFSET) for s in segments[:end]]
    if retention_bytes >= 0:
        start, end = end, _retention_bytes_breached(segments, end, retention_bytes, high_watermark)
        deletions += [SegmentDeletion(s, DeletionReason.RETENTION_BYTES) for s in segments[start:end]]
    if retention_ms >= 0:
        start, end = end, _retention_ms_breached(segments, end, retention_ms, high_watermark, now)
        deletions += [SegmentDeletion(s, DeletionReason.RETENTION_MS) for s in segments[start:end]]
    return _plan(segments, deletions, log_start_offset)


def plan_log_start_offset_retention(
    segments: Sequence[SegmentSummary], *, log_start_offset: int, high_watermark: int
) -> RetentionPlan:
    """The first pass alone: what a log deletes right after its log start offset moved (DeleteRecords, or a
    follower following its leader's log start offset)."""
    _check_log(segments, log_start_offset, high_watermark)
    end = _log_start_offset_breached(segments, 0, log_start_offset, high_watermark)
    deletions = [SegmentDeletion(s, DeletionReason.LOG_START_OFFSET) for s in segments[:end]]
    return _plan(segments, deletions, log_start_offset)


def _check_log(segments: Sequence[SegmentSummary], log_start_offset: int, high_watermark: int) -> None:
    assert segments, "a log always has an active segment"
    assert all(a.next_offset <= b.base_offset for a, b in pairwise(segments)), segments
    assert high_watermark <= segments[-1].next_offset, (high_watermark, segments[-1])
    assert log_start_offset >= 0


def _plan(segments: Sequence[SegmentSummary], deletions: list[SegmentDeletion], log_start_offset: int) -> RetentionPlan:
    roll_first = len(deletions) == len(segments)
    first_remaining = segments[-1].next_offset if roll_first else segments[len(deletions)].base_offset
    after = max(log_start_offset, first_remaining) if deletions else log_start_offset
    return RetentionPlan(tuple(deletions), roll_first, after)


def _deletable_while(
    segments: Sequence[SegmentSummary],
    start: int,
    high_watermark: int,
    condition: Callable[[SegmentSummary, SegmentSummary | None], bool],
) -> int:
    """Kafka's `deletableSegments` from `start`: the index after the last segment of the deletable run."""
    index = start
    while index < len(segments):
        segment = segments[index]
        following = segments[index + 1] if index + 1 < len(segments) else None
        upper = following.base_offset if following is not None else segment.next_offset
        last_and_empty = following is None and segment.size_bytes == 0
        if high_watermark >= upper and condition(segment, following) and not last_and_empty:
            index += 1
        else:
            break
    return index


def _log_start_offset_breached(
    segments: Sequence[SegmentSummary], start: int, log_start_offset: int, high_watermark: int
) -> int:
    return _deletable_while(
        segments,
        start,
        high_watermark,
        lambda _segment, following: following is not None and following.base_offset <= log_start_offset,
    )


def _retention_bytes_breached(
    segments: Sequence[SegmentSummary], start: int, retention_bytes: int, high_watermark: int
) -> int:
    excess = sum(s.size_bytes for s in segments[start:]) - retention_bytes
    if excess < 0:
        return start

    def over_size(segment: SegmentSummary, _following: SegmentSummary | None) -> bool:
        nonlocal excess
        if excess - segment.size_bytes >= 0:
            excess -= segment.size_bytes
            return True
        return False

    return _deletable_while(segments, start, high_watermark, over_size)


def _retention_ms_breached(
    segments: Sequence[SegmentSummary], start: int, retention_ms: int, high_watermark: int, now: WallMs
) -> int:
    return _deletable_while(
        segments,
        start,
        high_watermark,
        lambda segment, _following: now - segment.largest_timestamp > retention_ms,
    )


__all__ = [
    "DeletionReason",
    "RetentionPlan",
    "SegmentDeletion",
    "SegmentSummary",
    "plan_log_start_offset_retention",
    "plan_retention",
]
