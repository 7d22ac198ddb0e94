"""The sparse offset index (`.index`) and time index (`.timeindex`) of one segment, in Kafka's byte format.

Room: libs/storage. The entries live in memory (two typed arrays each, searched with bisect) and are appended
to the file as they are added; the file is the durable copy, read back when a segment is loaded.

| file         | entry (big-endian)                                  | bytes |
| ------------ | --------------------------------------------------- | ----- |
| `.index`     | relative offset int32, position in `.log` int32     | 8     |
| `.timeindex` | timestamp int64, relative offset int32              | 12    |

Unlike Kafka we do not preallocate and mmap the file to `segment.index.bytes` (so there is nothing to trim on roll and
a file's size is always its entries); the limit still applies as `max_entries`, and a full index rolls the
segment exactly as Kafka's does. An index that fails its sanity check on load raises `CorruptIndex`, and the
log rebuilds it from the segment's batches.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import Final, NamedTuple

from hightide.storage.disk import SYSTEM_DISK, DiskIO, write_fully
from hightide.storage.errors import CorruptIndex

OFFSET_ENTRY: Final = struct.Struct(">ii")
TIME_ENTRY: Final = struct.Struct(">qi")


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class _IndexFile:
    """Append-only file of fixed-size entries. New entries wait in memory until `write_out` (called on flush,
    truncation and close), so an append costs no syscall; a killed process loses them, and recovery rebuilds
    them, because the log flushes its indexes before it advances the recovery point."""

    def __init__(self, path: Path, entry_size: int, disk: DiskIO) -> None:
        self.path = path
        self._entry_size = entry_size
        self._disk = disk
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._pending = bytearray()

    def read_all(self) -> bytes:
        self.write_out()
        data = self.path.read_bytes()
        if len(data) % self._entry_size:
            raise CorruptIndex(f"{self.path}: size {len(data)} is not a multiple of {self._entry_size}")
        return data

    def append(self, entry: bytes) -> None:
        self._pending += entry

    def write_out(self) -> None:
        if self._pending:
            write_fully(self._disk, self._fd, self._pending)
            self._pending.clear()

    def truncate_entries(self, entries: int) -> None:
        self.write_out()
        self._disk.ftruncate(self._fd, entries * self._entry_size)

    def flush(self) -> None:
        self.write_out()
        self._disk.fsync(self._fd)

    def close(self) -> None:
        try:
            self.write_out()
        finally:
            os.close(self._fd)

    def abandon(self) -> None:
        """Close without writing the pending entries, as a killed process would."""
        os.close(self._fd)


class OffsetIndex:
    """Maps the last offset of an indexed batch to the position where that batch starts."""

    def __init__(self, path: Path, base_offset: int, max_entries: int, disk: DiskIO = SYSTEM_DISK) -> None:
        assert max_entries > 0
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._relative_offsets = array("i")
        self._positions = array("i")
        self._file = _IndexFile(path, OFFSET_ENTRY.size, disk)
        self.last_position = 0  # position of the last entry's batch, 0 when empty (the append path reads it)

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self, log_size: int) -> None:
        """Read the file and check it (Kafka's sanityCheck, plus monotonicity and positions within the log)."""
        data = self._file.read_all()
        del self._relative_offsets[:], self._positions[:]
        for relative, position in OFFSET_ENTRY.iter_unpack(data):
            if self._relative_offsets and (relative <= self._relative_offsets[-1] or position <= self._positions[-1]):
                raise CorruptIndex(f"{self.path}: entries not increasing at relative offset {relative}")
            if relative < 0 or position < 0 or position >= log_size:
                raise CorruptIndex(f"{self.path}: entry ({relative}, {position}) outside the segment")
            self._relative_offsets.append(relative)
            self._positions.append(position)
        self.last_position = self._positions[-1] if self._positions else 0

    @property
    def entries(self) -> int:
        return len(self._positions)

    def is_full(self) -> bool:
        return len(self._positions) >= self.max_entries  # asked before every append: no property in between

    def last_entry(self) -> OffsetPosition:
        if not self._positions:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self._relative_offsets[-1], self._positions[-1])

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        # The segment rolls before its index is full or its offsets outgrow int32; entries only grow.
        assert len(self._positions) < self.max_entries and relative <= 0x7FFFFFFF, (offset, self.path)
        assert position > self.last_position or not self._positions, (offset, position, self.last_entry())
        self._relative_offsets.append(relative)
        self._positions.append(position)
        self.last_position = position
        self._file.append(OFFSET_ENTRY.pack(relative, position))

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The greatest entry with offset <= target, or (base offset, 0) when there is none."""
        slot = bisect_right(self._relative_offsets, target_offset - self.base_offset) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self._relative_offsets[slot], self._positions[slot])

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
        self._truncate_entries(keep)

    def _truncate_entries(self, keep: int) -> None:
        if keep < self.entries:
            del self._relative_offsets[keep:]
            del self._positions[keep:]
            self._file.truncate_entries(keep)
        self.last_position = self._positions[-1] if self._positions else 0

    def reset(self) -> None:
        """Drop every entry, in memory and on disk (even when a failed load left the two out of step)."""
        del self._relative_offsets[:], self._positions[:]
        self._file.truncate_entries(0)
        self.last_position = 0

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def abandon(self) -> None:
        self._file.abandon()


class TimeIndex:
    """Maps a timestamp to the offset of the batch where the segment's maximum timestamp so far was reached."""

    def __init__(self, path: Path, base_offset: int, max_entries: int, disk: DiskIO = SYSTEM_DISK) -> None:
        assert max_entries > 1
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._timestamps = array("q")
        self._relative_offsets = array("i")
        self._file = _IndexFile(path, TIME_ENTRY.size, disk)

    @property
    def path(self) -> Path:
        return self._file.path

    def load(self) -> None:
        data = self._file.read_all()
        del self._timestamps[:], self._relative_offsets[:]
        for timestamp, relative in TIME_ENTRY.iter_unpack(data):
            if self._timestamps and (timestamp <= self._timestamps[-1] or relative < self._relative_offsets[-1]):
                raise CorruptIndex(f"{self.path}: entries not increasing at timestamp {timestamp}")
            if relative < 0:
                raise CorruptIndex(f"{self.path}: negative relative offset {relative}")
            self._timestamps.append(timestamp)
            self._relative_offsets.append(relative)

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    def is_full(self) -> bool:
        # Kafka keeps one slot free for the entry written when the segment becomes inactive.
        return len(self._timestamps) >= self.max_entries - 1

    def last_entry(self) -> TimestampOffset:
        if not self._timestamps:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(self._timestamps[-1], self.base_offset + self._relative_offsets[-1])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if the timestamp is newer than the last entry's (Kafka's rule)."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        assert skip_full_check or not self.is_full(), f"{self.path}: append to a full time index"
        relative = offset - self.base_offset
        assert 0 <= relative <= 0x7FFFFFFF, (offset, self.base_offset)
        assert not self._relative_offsets or relative >= self._relative_offsets[-1], (offset, timestamp)
        self._timestamps.append(timestamp)
        self._relative_offsets.append(relative)
        self._file.append(TIME_ENTRY.pack(timestamp, relative))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The greatest entry with timestamp <= target, or (-1, base offset) when there is none."""
        slot = bisect_right(self._timestamps, target_timestamp) - 1
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(self._timestamps[slot], self.base_offset + self._relative_offsets[slot])

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
        if keep < self.entries:
            del self._timestamps[keep:]
            del self._relative_offsets[keep:]
            self._file.truncate_entries(keep)

    def reset(self) -> None:
        """Drop every entry, in memory and on disk (even when a failed load left the two out of step)."""
        del self._timestamps[:], self._relative_offsets[:]
        self._file.truncate_entries(0)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def abandon(self) -> None:
        self._file.abandon()
