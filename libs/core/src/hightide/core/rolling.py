"""When a log starts a new segment: Kafka's `LogSegment.shouldRoll`, as a pure rule over what the active segment
holds and what is about to be appended.

Room: libs/core (rules as pure functions). The storage engine asks before every write; the simulator's disk asks
the very same function, so the rule is tested once and runs everywhere. It reads the segment, never changes it,
and it reads no clock: `now` is the wall-clock time the caller passes in, the clock record timestamps are in.

| reason              | the active segment rolls when                                                       |
| ------------------- | ----------------------------------------------------------------------------------- |
| `segment_bytes`     | size > segment.bytes - incoming bytes (the append would pass segment.bytes)         |
| `segment_ms`        | size > 0 and time waited > segment.ms - jitter (below)                              |
| `offset_index_full` | the offset index has no free entry                                                  |
| `time_index_full`   | the time index has no free entry (one is kept for the entry written at the roll)    |
| `offset_overflow`   | incoming last offset - base offset > 2^31 - 1 (index entries hold int32 offsets)    |

Time waited (Kafka's `timeWaitedForRoll`) is the incoming batches' max timestamp minus the max timestamp of the
segment's first batch, or, when the segment has no timestamp (an empty segment, or records without one),
`now` minus the segment's creation time. Both are wall-clock times: a monotonic `now` here would compare two
different clocks, which is why `now` is a `WallMs`.

Kafka draws each segment's jitter at random in [0, segment.jitter.ms); here it is a hash of the base offset, so
a simulation and a test repeat exactly.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Protocol

from hightide.core.clock import WallMs

RELATIVE_OFFSET_MAX: Final = 2**31 - 1
_JITTER_MULTIPLIER: Final = 2654435761  # Knuth's multiplicative hash: spreads consecutive base offsets


class RollReason(StrEnum):
    """Why the active segment must roll before an append (the first rule of the table that holds)."""

    SEGMENT_BYTES = "segment_bytes"
    SEGMENT_MS = "segment_ms"
    OFFSET_INDEX_FULL = "offset_index_full"
    TIME_INDEX_FULL = "time_index_full"
    OFFSET_OVERFLOW = "offset_overflow"


class ActiveSegment(Protocol):
    """What the roll rule reads of the active segment (the storage engine's `LogSegment` is one)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int:
        """Bytes held by the segment's log file."""
        ...

    @property
    def created_ms(self) -> WallMs:
        """When the segment was created (or emptied by a truncation), on the wall clock."""
        ...

    @property
    def rolling_based_timestamp(self) -> int | None:
        """The max timestamp of the segment's first batch; None when the segment is empty."""
        ...

    @property
    def roll_jitter_ms(self) -> int: ...

    @property
    def offset_index_full(self) -> bool: ...

    @property
    def time_index_full(self) -> bool: ...


def roll_reason(
    segment: ActiveSegment,
    incoming_bytes: int,
    max_timestamp: int,
    last_offset: int,
    *,
    segment_bytes: int,
    segment_ms: int,
    now: WallMs,
) -> RollReason | None:
    """Whether appending `incoming_bytes` of batches (max timestamp `max_timestamp`, last offset `last_offset`)
    must start a new segment first, and why; None when the batches go into `segment`."""
    assert incoming_bytes > 0 and last_offset >= segment.base_offset, (incoming_bytes, last_offset, segment)
    size = segment.size
    if size > segment_bytes - incoming_bytes:
        return RollReason.SEGMENT_BYTES
    if size > 0:
        # time_waited_for_roll, inlined: this runs before every append.
        first = segment.rolling_based_timestamp
        waited = max_timestamp - first if first is not None and first >= 0 else now - segment.created_ms
        if waited > segment_ms - segment.roll_jitter_ms:
            return RollReason.SEGMENT_MS
    if segment.offset_index_full:
        return RollReason.OFFSET_INDEX_FULL
    if segment.time_index_full:
        return RollReason.TIME_INDEX_FULL
    if last_offset - segment.base_offset > RELATIVE_OFFSET_MAX:
        return RollReason.OFFSET_OVERFLOW
    return None


def time_waited_for_roll(segment: ActiveSegment, max_timestamp: int, now: WallMs) -> int:
    """Kafka's `timeWaitedForRoll`: by record timestamps when the segment has one, else since its creation."""
    first = segment.rolling_based_timestamp
    if first is not None and first >= 0:
        return max_timestamp - first
    return now - segment.created_ms


def roll_jitter_ms(base_offset: int, segment_jitter_ms: int) -> int:
    """The segment's jitter in [0, segment.jitter.ms): a deterministic spread, so partitions do not all roll at
    the same instant."""
    assert base_offset >= 0 and segment_jitter_ms >= 0
    return (base_offset * _JITTER_MULTIPLIER) % segment_jitter_ms if segment_jitter_ms > 0 else 0


__all__ = [
    "RELATIVE_OFFSET_MAX",
    "ActiveSegment",
    "RollReason",
    "roll_jitter_ms",
    "roll_reason",
    "time_waited_for_roll",
]
