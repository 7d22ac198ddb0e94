"""One log segment: `NNNNNNNNNNNNNNNNNNNN.log` with its `.index` and `.timeindex`.

Room: libs/storage. A segment holds whole RecordBatch v2 batches back to back, starting at `base_offset`. It never
decodes records: it reads the 61-byte batch headers to find its way, and checks CRCs only during recovery (the
log checks them once, on append).

Index rule (Kafka's `LogSegment.append` and `recover`, identical on both paths): before a batch is written, if
more than `index.interval.bytes` were written since the batch of the last index entry, add the entry
(batch's last offset → batch's start position) and a time index entry for the maximum timestamp so far. We
measure "bytes since the last entry" as the distance from that entry's position, so an index rebuilt by recovery
is byte-identical to the one built by appends, even across restarts and truncations (Kafka resets its counter
to 0 on load, so its indexes depend on when the broker restarted).

Every change to the files goes through the log's `DiskIO` (`hightide.storage.disk`). A write the disk refuses
leaves the segment's in-memory state as it was: batches are indexed only once their bytes are written, and
`cut_back` removes whatever a failed write left past the segment's size. When to roll is the core's rule
(`hightide.core.rolling`); a segment only reports what that rule reads.
"""

from __future__ import annotations

import bisect
import errno
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hightide.core.clock import WallMs
from hightide.core.rolling import RELATIVE_OFFSET_MAX, roll_jitter_ms
from hightide.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    check_crc,
    read_batch_header,
)
from hightide.storage.config import LogConfig
from hightide.storage.disk import SYSTEM_DISK, DiskIO, WriteBuffer
from hightide.storage.errors import CorruptIndex, StorageError
from hightide.storage.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"
CLEANED_SUFFIX: Final = ".cleaned"  # a segment the cleaner is writing (Kafka's CleanedFileSuffix)
SWAP_SUFFIX: Final = ".swap"  # a cleaned segment, complete and durable, replacing older ones (Kafka's SwapFileSuffix)
SCAN_CHUNK_BYTES: Final = 64 * 1024
# The batches a segment remembers from its latest appends (`LogSegment.read`'s tail), at most twice this many.
RECENT_BATCHES: Final = 128
RECOVERY_CHUNK_BYTES: Final = 8 * 1024 * 1024


def filename_prefix(offset: int) -> str:
    """Kafka's `filenamePrefixFromOffset`: the offset in 20 digits."""
    assert offset >= 0
    return f"{offset:020d}"


def segment_paths(directory: Path, base_offset: int, file_suffix: str = "") -> tuple[Path, Path, Path]:
    """The log, offset index and time index files of the segment at `base_offset`, with `file_suffix` after each
    name (Kafka's `LogFileUtils`: `00000000000000000000.log.cleaned`)."""
    prefix = directory / filename_prefix(base_offset)
    return (
        Path(f"{prefix}{LOG_SUFFIX}{file_suffix}"),
        Path(f"{prefix}{INDEX_SUFFIX}{file_suffix}"),
        Path(f"{prefix}{TIME_INDEX_SUFFIX}{file_suffix}"),
    )


# What the append path needs of a batch: (base offset, last offset, max timestamp, size in bytes). A plain
# tuple, because building one per append is measurably cheaper than a NamedTuple.
WrittenBatch = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch starts in its segment, with its header."""

    position: int
    header: BatchHeader


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What recovering one segment found."""

    base_offset: int
    validated_bytes: int
    truncated_bytes: int
    problem: str | None


class LogSegment:
    """A segment's files and the in-memory state needed to append to, read from and roll it."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        created_ms: WallMs,
        disk: DiskIO = SYSTEM_DISK,
        *,
        file_suffix: str = "",
    ) -> None:
        """`file_suffix` (CLEANED_SUFFIX) names files the log does not load: the cleaner's segment in the making."""
        assert base_offset >= 0
        self.base_offset = base_offset
        self.config = config
        self._disk = disk
        self.log_path, index_path, time_index_path = segment_paths(directory, base_offset, file_suffix)
        self.indexes_missing = not (index_path.exists() and time_index_path.exists())
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.size = os.fstat(self._fd).st_size
            self.offset_index = OffsetIndex(index_path, base_offset, config.offset_index_max_entries, disk)
            try:
                self.time_index = TimeIndex(time_index_path, base_offset, config.time_index_max_entries, disk)
            except BaseException:
                self.offset_index.abandon()
                raise
        except BaseException:
            os.close(self._fd)  # a full disk may refuse the index files: leak no descriptor
            raise
        self.closed = False
        self.created_ms = created_ms
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_based_timestamp: int | None = None
        self.next_offset = base_offset
        self.roll_jitter_ms = roll_jitter_ms(base_offset, config.segment_jitter_ms)
        # The latest appended batches, back to back up to `size`: (base offset, last offset, position, size), and
        # their last offsets. A read from the tail (a follower's, a caught-up consumer's) finds its batches here
        # instead of scanning headers from the sparse index (about a dozen 100-B batches per read). Emptied by
        # whatever else changes the file (truncation, recovery) and when the segment stops being the active one.
        self._recent: list[WrittenBatch] = []
        self._recent_last: list[int] = []

    # -- loading -------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Load trusted indexes and find the next offset; raise CorruptIndex if the indexes fail their checks
        or the file does not end exactly at a batch boundary (the log then recovers the segment)."""
        if self.indexes_missing:
            raise CorruptIndex(f"{self.log_path}: index files missing")
        self.offset_index.load(self.size)
        self.time_index.load()
        last_time = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = last_time
        end = self.offset_index.last_entry().position
        last = None
        for located in self.batches_from(end):
            last = located.header
            end = located.position + last.size
            self._note_timestamp(last)
        if end != self.size:
            raise CorruptIndex(f"{self.log_path}: {self.size - end} bytes after the last whole batch")
        if last is not None:
            if last_time.offset > last.last_offset:
                raise CorruptIndex(f"{self.time_index.path}: entry beyond the last batch")
            self.next_offset = last.next_offset
        first = self.first_batch()
        self.rolling_based_timestamp = None if first is None else first.max_timestamp

    def first_batch(self) -> BatchHeader | None:
        for located in self.batches_from(0):
            return located.header
        return None

    # -- appending ---------------------------------------------------------------------------------------

    @property
    def offset_index_full(self) -> bool:
        return self.offset_index.is_full()

    @property
    def time_index_full(self) -> bool:
        return self.time_index.is_full()

    def append(self, buffers: Sequence[WriteBuffer], batches: Sequence[WrittenBatch]) -> None:
        """Write whole batches (validated, offsets assigned) and index them. This is the append hot path.

        Raises OSError when the disk refuses the write or writes only part of it; the segment's in-memory state
        is then unchanged, and the file may hold a torn tail past `size` until `cut_back` removes it."""
        assert batches and batches[0][0] >= self.next_offset, (batches[0], self.next_offset)
        expected = 0
        for batch in batches:
            expected += batch[3]
        written = self._disk.writev(self._fd, buffers)
        if written != expected:
            # On a regular file a short write means the disk is full or failing (the next write would say which).
            raise OSError(errno.ENOSPC, f"short write ({written} of {expected} bytes)", str(self.log_path))
        position = self.size
        for base_offset, last_offset, max_timestamp, size in batches:
            self._index_batch(position, last_offset, max_timestamp)
            self._recent.append((base_offset, last_offset, position, size))
            self._recent_last.append(last_offset)
            position += size
        if len(self._recent) > 2 * RECENT_BATCHES:
            del self._recent[:-RECENT_BATCHES]
            del self._recent_last[:-RECENT_BATCHES]
        self.size = position
        self.next_offset = batches[-1][1] + 1
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = batches[0][2]

    def cut_back(self) -> None:
        """Remove whatever a failed write left past the segment's size (the file ends at a batch boundary again)."""
        self._disk.ftruncate(self._fd, self.size)

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if position - self.offset_index.last_position > self.config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)

    # -- reading -----------------------------------------------------------------------------------------

    def batches_from(self, position: int, end: int | None = None) -> Iterator[BatchPosition]:
        """Every whole batch from `position` (a batch boundary) to `end`, by reading headers only."""
        end = self.size if end is None else end
        while position + BATCH_HEADER_SIZE <= end:
            chunk = os.pread(self._fd, min(SCAN_CHUNK_BYTES, end - position), position)
            at = 0
            while at + BATCH_HEADER_SIZE <= len(chunk):
                header = self._header(chunk, at, position + at)
                if position + at + header.size > end:
                    return
                yield BatchPosition(position + at, header)
                at += header.size
            position += at

    def _header(self, chunk: bytes, at: int, position: int) -> BatchHeader:
        try:
            return read_batch_header(chunk, at)
        except InvalidRecordBatch as e:
            raise StorageError(f"{self.log_path}: unreadable batch at position {position}: {e}") from None

    def translate_offset(self, offset: int) -> BatchPosition | None:
        """The first batch whose last offset is >= `offset`, found through the index then a short scan."""
        start = self.offset_index.lookup(offset).position
        for located in self.batches_from(start):
            if located.header.last_offset >= offset:
                return located
        return None

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> bytes | None:
        """Whole batches from the one holding `start_offset`, at most `max_bytes` (but at least one batch if
        `min_one_batch`), none ending at or beyond `max_offset`. None when the segment has nothing there."""
        if self._recent and start_offset >= self._recent[0][0]:
            return self._read_recent(start_offset, max_bytes, max_offset, min_one_batch)
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        if max_offset is not None and first.header.last_offset >= max_offset:
            return b""
        length = 0
        for located in self.batches_from(first.position):
            header = located.header
            if max_offset is not None and header.last_offset >= max_offset:
                break
            if length + header.size > max_bytes and not (min_one_batch and length == 0):
                break
            length += header.size
            if length >= max_bytes:
                break
        return os.pread(self._fd, length, first.position)

    def _read_recent(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> bytes | None:
        """`read` from the remembered tail: the same batches, found without reading a header."""
        index = bisect.bisect_left(self._recent_last, start_offset)
        if index == len(self._recent):
            return None
        start = self._recent[index][2]
        if max_offset is not None and self._recent_last[index] >= max_offset:
            return b""
        length = 0
        for _, last_offset, _, size in self._recent[index:]:
            if max_offset is not None and last_offset >= max_offset:
                break
            if length + size > max_bytes and not (min_one_batch and length == 0):
                break
            length += size
            if length >= max_bytes:
                break
        return os.pread(self._fd, length, start)

    def _forget_recent(self) -> None:
        self._recent.clear()
        self._recent_last.clear()

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def find_offset_by_timestamp(self, timestamp: int) -> BatchPosition | None:
        """The first batch whose max timestamp is >= `timestamp` (time index, then offset index, then scan)."""
        floor = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(floor.offset).position
        for located in self.batches_from(start):
            if located.header.max_timestamp >= timestamp:
                return located
        return None

    def largest_timestamp(self) -> int:
        """Kafka's `largestTimestamp`: the max timestamp so far, else the file's modification time."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log_path).st_mtime * 1000)

    # -- truncation and recovery -------------------------------------------------------------------------

    def truncate_to(self, offset: int, now: WallMs) -> int:
        """Remove the batch holding `offset` and all after it; return the bytes removed."""
        located = self.translate_offset(offset)
        if located is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        return self._truncate_at(located.position, now)

    def _note_timestamp(self, header: BatchHeader) -> None:
        """A batch past the time index's last entry may hold a later timestamp (Kafka's readLargestTimestamp scans
        the batches after that entry): without it, a truncated or reloaded segment's largest timestamp, and so its
        retention, would fall back to the file's modification time."""
        if header.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset

    def _truncate_at(self, position: int, now: WallMs) -> int:
        self._forget_recent()
        removed = self.size - position
        self._disk.ftruncate(self._fd, position)
        self.size = position
        self.max_timestamp_so_far, self.offset_of_max_timestamp = self.time_index.last_entry()
        last = None
        for located in self.batches_from(self.offset_index.last_entry().position):
            last = located.header
            self._note_timestamp(last)
        self.next_offset = self.base_offset if last is None else last.next_offset
        if position == 0:
            self.created_ms = now
            self.rolling_based_timestamp = None
        return removed

    def recover(self, from_offset: int, now: WallMs) -> SegmentRecovery:
        """Validate batches from `from_offset` (a flushed batch boundary) to the end: check CRC, structure and
        offset order, rebuild the indexes, and cut the file at the first invalid byte."""
        self._forget_recent()
        position = self._trusted_prefix(from_offset)
        start = position
        previous_next = self.next_offset
        file_size = os.fstat(self._fd).st_size
        problem = None
        read_bytes = RECOVERY_CHUNK_BYTES
        while position < file_size and problem is None:
            chunk = os.pread(self._fd, read_bytes, position)
            read_bytes = RECOVERY_CHUNK_BYTES
            at = 0
            while at < len(chunk):
                header, problem = self._validate(chunk, at, position + at, file_size, previous_next)
                if header is None:
                    break
                if at + header.size > len(chunk):
                    # Whole on disk but not in this chunk: read again from it, big enough to hold it.
                    read_bytes = max(RECOVERY_CHUNK_BYTES, header.size)
                    break
                self._index_batch(position + at, header.last_offset, header.max_timestamp)
                previous_next = header.next_offset
                at += header.size
            position += at
        truncated = file_size - position
        if truncated:
            self._disk.ftruncate(self._fd, position)
            if position == 0:
                self.created_ms = now
        self.size = position
        self.next_offset = previous_next
        first = self.first_batch()
        self.rolling_based_timestamp = None if first is None else first.max_timestamp
        self.indexes_missing = False
        return SegmentRecovery(self.base_offset, position - start, truncated, problem)

    def _trusted_prefix(self, from_offset: int) -> int:
        """Keep index entries and batches wholly below `from_offset` (flushed before the crash); return the
        position to validate from. Fall back to validating everything if that prefix cannot be walked."""
        self.next_offset = self.base_offset
        self.max_timestamp_so_far, self.offset_of_max_timestamp = -1, self.base_offset
        if from_offset <= self.base_offset or self.indexes_missing:
            self.offset_index.reset()
            self.time_index.reset()
            return 0
        try:
            self.offset_index.load(self.size)
            self.time_index.load()
        except CorruptIndex:
            self.offset_index.reset()
            self.time_index.reset()
            return 0
        self.offset_index.truncate_to(from_offset)
        self.time_index.truncate_to(from_offset)
        self.max_timestamp_so_far, self.offset_of_max_timestamp = self.time_index.last_entry()
        position = self.offset_index.last_entry().position
        try:
            for located in self.batches_from(position):
                if located.header.next_offset > from_offset:
                    break
                position = located.position + located.header.size
                self.next_offset = located.header.next_offset
                self._note_timestamp(located.header)
        except StorageError:
            self.offset_index.reset()
            self.time_index.reset()
            self.next_offset = self.base_offset
            return 0
        return position

    def _validate(
        self, chunk: bytes, at: int, position: int, file_size: int, previous_next: int
    ) -> tuple[BatchHeader | None, str | None]:
        """The header of the valid batch at `at`, or None with the reason it is not valid (None reason when
        the chunk merely ends inside a batch that continues on disk)."""
        if at + BATCH_HEADER_SIZE > len(chunk):
            if position + BATCH_HEADER_SIZE > file_size:
                return None, f"torn batch header at position {position}"
            return None, None
        try:
            header = read_batch_header(chunk, at)
        except InvalidRecordBatch as e:
            return None, f"invalid batch at position {position}: {e}"
        if position + header.size > file_size:
            return (
                None,
                f"torn batch at position {position}: {header.size} bytes claimed, {file_size - position} on disk",
            )
        if at + header.size > len(chunk):
            return header, None
        try:
            check_crc(chunk, at, header)
        except InvalidRecordBatch as e:
            return None, f"corrupt batch at position {position}: {e}"
        if header.base_offset < previous_next or header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
            return (
                None,
                f"batch at position {position} has offset {header.base_offset}, expected >= {previous_next}",
            )
        return header, None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """Record the segment's max timestamp in its time index, so retention can read it after a restart."""
        self._forget_recent()  # reads of an inactive segment are rare: a segment per partition keeps a tail
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True)

    def flush(self) -> None:
        self._disk.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        """Write the pending index entries and close the files; every descriptor is closed even when a write
        fails (the first failure is raised)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.size > 0:
                self.on_become_inactive()
            self.offset_index.close()
        finally:
            try:
                self.time_index.close()
            finally:
                os.close(self._fd)

    def abandon(self) -> None:
        """Close the files and nothing else, as a killed process would."""
        if self.closed:
            return
        self.closed = True
        self.offset_index.abandon()
        self.time_index.abandon()
        os.close(self._fd)

    def delete(self) -> None:
        """Close and remove the segment's files (renamed to `.deleted` first, so a crash midway is tidied on load).
        Pending index entries are dropped, not written: the files are going."""
        self.abandon()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            doomed = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, doomed)
            except FileNotFoundError:
                continue
            os.unlink(doomed)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"


__all__ = [
    "BatchPosition",
    "LogSegment",
    "OffsetPosition",
    "SegmentRecovery",
    "TimestampOffset",
    "WrittenBatch",
    "filename_prefix",
    "segment_paths",
]
