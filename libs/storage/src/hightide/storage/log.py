"""The partition log: a directory `<topic>-<partition>/` of segments, behaving like Kafka's UnifiedLog.

Room: libs/storage. It owns the offsets of one replica's log on disk — log start offset (the low watermark), log
end offset, recovery point — and the high watermark as the replica layer last set it (retention and
delete-records may only remove what is below it). It never decodes records; it checks each appended batch's CRC
and structure once, assigns offsets by patching the base offset and partition leader epoch (both outside the
CRC), and hands out raw bytes of whole batches.

It is synchronous and not thread-safe: one task owns a log. Time is passed in (`now_ms`), as in the core.

| operation                     | offsets afterwards                                                            |
| ----------------------------- | ----------------------------------------------------------------------------- |
| append_as_leader/as_follower  | LEO = last appended offset + 1                                                |
| delete_old_segments           | log start = base of the first remaining segment (only segments below HW go)  |
| delete_records(o), o <= HW    | log start = max(log start, o); segments wholly below it are deleted          |
| truncate_to(o), o < LEO       | LEO <= o (whole batches go), HW = min(HW, LEO), recovery point <= LEO        |
| truncate_fully_and_start_at(o)| every segment deleted; log start = LEO = HW = recovery point = o              |
| flush(o)                      | recovery point = o: everything below o is on disk                            |

Like Kafka, a roll does not fsync on the append path: it marks the finished segment for flushing and
`flush_if_due` (called by the owner's scheduler) does it, advancing the recovery point.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecordBatch,
    decode_batch,
    validate_batches,
)
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.errors import OffsetOutOfRange, StorageError
from hightide.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentRecovery,
    WrittenBatch,
)

_PREFIX: Final = struct.Struct(">qii")  # base offset, batch length, partition leader epoch: bytes 0..16
_WRITEV_BUFFERS_MAX: Final = 512
DELETE_RECORDS_TO_HIGH_WATERMARK: Final = -1


class AppendInfo(NamedTuple):
    """What one append wrote; `epoch_starts` lists (leader epoch, first offset) wherever the epoch changes."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    size_bytes: int
    epoch_starts: tuple[tuple[int, int], ...]
    rolled_to: int | None


@dataclass(frozen=True, slots=True)
class DeletedSegment:
    base_offset: int
    next_offset: int
    size_bytes: int
    reason: str


@dataclass(slots=True)
class RecoveryReport:
    """What opening the log found and did."""

    clean_shutdown: bool
    recovered: list[SegmentRecovery] = field(default_factory=list)
    deleted_after_corruption: list[int] = field(default_factory=list)
    rebuilt_indexes: list[int] = field(default_factory=list)


class PartitionLog:
    """One replica's log of one partition."""

    def __init__(self, directory: Path, topic_partition: TopicPartition, config: LogConfig) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.config = config
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.high_watermark = 0
        self.last_flush_ms = 0
        self._flush_wanted_up_to = 0
        self.recovery_report = RecoveryReport(clean_shutdown=True)

    # -- opening -------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        now_ms: int,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
    ) -> PartitionLog:
        """Open (or create) the log in `directory`. After an unclean shutdown, every segment holding offsets at
        or above `recovery_point` is validated batch by batch from there on; the first invalid byte ends the
        log (Kafka's LogLoader: later segments are deleted, followers re-fetch what is lost)."""
        log = cls(directory, topic_partition, config)
        directory.mkdir(parents=True, exist_ok=True)
        log._remove_leftovers()
        log.recovery_report = RecoveryReport(clean_shutdown=clean_shutdown)
        log._load_segments(now_ms, recovery_point if not clean_shutdown else None)
        if not log._segments:
            log._add_segment(LogSegment(directory, log_start_offset, config, now_ms))
        log.log_start_offset = max(log_start_offset, log._segments[0].base_offset)
        if log.log_start_offset > log.log_end_offset:
            log.truncate_fully_and_start_at(log.log_start_offset, now_ms)
        if not clean_shutdown:
            # What recovery validated is in the page cache only: make it durable so a second crash need not
            # validate it again.
            log.recovery_point = min(recovery_point, log.log_end_offset)
            log.flush(log.log_end_offset)
        log.recovery_point = log.log_end_offset
        log._flush_wanted_up_to = log.log_end_offset
        log.last_flush_ms = now_ms
        return log

    def _remove_leftovers(self) -> None:
        """Finish deletions a crash interrupted, and drop index files whose log is gone."""
        for path in self.directory.iterdir():
            if path.name.endswith((DELETED_SUFFIX, ".tmp", ".cleaned", ".swap")):
                path.unlink()
        for path in self.directory.iterdir():
            if path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and not path.with_suffix(LOG_SUFFIX).exists():
                path.unlink()

    def _load_segments(self, now_ms: int, recovery_point: int | None) -> None:
        bases = sorted(int(p.stem) for p in self.directory.glob(f"*{LOG_SUFFIX}") if p.stem.isdigit())
        segments = [LogSegment(self.directory, base, self.config, now_ms) for base in bases]
        report = self.recovery_report
        for i, segment in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            unflushed = recovery_point is not None and (next_base is None or next_base > recovery_point)
            truncated = False
            if unflushed:
                recovery = segment.recover(max(recovery_point or 0, segment.base_offset), now_ms)
                report.recovered.append(recovery)
                truncated = recovery.truncated_bytes > 0
            else:
                try:
                    segment.load()
                except StorageError:
                    report.rebuilt_indexes.append(segment.base_offset)
                    recovery = segment.recover(segment.base_offset, now_ms)
                    report.recovered.append(recovery)
                    truncated = recovery.truncated_bytes > 0
            self._add_segment(segment)
            if truncated or (next_base is not None and segment.next_offset > next_base):
                for doomed in segments[i + 1 :]:
                    report.deleted_after_corruption.append(doomed.base_offset)
                    doomed.delete()
                return

    def _add_segment(self, segment: LogSegment) -> None:
        assert not self._segments or segment.base_offset >= self._segments[-1].next_offset
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    # -- offsets -------------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> Sequence[LogSegment]:
        return tuple(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW as the replica layer computed it, clamped to [log start offset, LEO] as Kafka does."""
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    # -- appending -----------------------------------------------------------------------------------------

    def validate_client_batches(self, records: bytes) -> list[BatchHeader]:
        """What `append_as_leader` checks of a producer's batches, on its own: a broker validates before its
        replication core assigns offsets, so a bad batch is refused before anything changes."""
        return self._validate(records, from_client=True)

    def append_as_leader(
        self, records: bytes, leader_epoch: int, now_ms: int, *, validated: list[BatchHeader] | None = None
    ) -> AppendInfo:
        """Validate a producer's batches (unless `validated` holds the headers `validate_client_batches` returned
        for these very bytes), assign offsets from the LEO, stamp `leader_epoch`, and append."""
        assert leader_epoch >= 0
        headers = validated if validated is not None else self._validate(records, from_client=True)
        view = memoryview(records)
        buffers: list[bytes | memoryview] = []
        batches: list[WrittenBatch] = []
        base_offset = self.log_end_offset
        position = 0
        for header in headers:
            size = header.batch_length + LOG_OVERHEAD
            last_offset = base_offset + header.last_offset_delta
            buffers.append(_PREFIX.pack(base_offset, header.batch_length, leader_epoch))
            buffers.append(view[position + _PREFIX.size : position + size])
            batches.append((base_offset, last_offset, header.max_timestamp, size))
            base_offset = last_offset + 1
            position += size
        return self._append(buffers, batches, ((leader_epoch, batches[0][0]),), now_ms)

    def append_as_follower(self, records: bytes, now_ms: int) -> AppendInfo:
        """Append a leader's batches as they are: offsets must continue from the LEO."""
        headers = self._validate(records, from_client=False)
        expected = self.log_end_offset
        batches: list[WrittenBatch] = []
        epoch_starts: list[tuple[int, int]] = []
        for header in headers:
            if header.base_offset < expected:
                raise StorageError(
                    f"{self.topic_partition}: batch at offset {header.base_offset} does not continue the log "
                    f"(next offset {expected})",
                    ErrorCode.INVALID_RECORD,
                )
            expected = header.next_offset
            batches.append((header.base_offset, header.last_offset, header.max_timestamp, header.size))
            if not epoch_starts or epoch_starts[-1][0] != header.partition_leader_epoch:
                epoch_starts.append((header.partition_leader_epoch, header.base_offset))
        return self._append([records], batches, tuple(epoch_starts), now_ms)

    def _validate(self, records: bytes, from_client: bool) -> list[BatchHeader]:
        if not records:
            raise StorageError(f"{self.topic_partition}: no record batches to append", ErrorCode.INVALID_RECORD)
        try:
            headers = validate_batches(records, max_batch_bytes=self.config.max_message_bytes)
        except InvalidRecordBatch as e:
            raise StorageError(f"{self.topic_partition}: {e.args[0]}", e.error_code) from None
        total = len(records)
        if total > self.config.segment_bytes:
            raise StorageError(
                f"{self.topic_partition}: {total} bytes exceed segment.bytes {self.config.segment_bytes}",
                ErrorCode.RECORD_LIST_TOO_LARGE,
            )
        if from_client:
            # Kafka's LogValidator.validateBatch for client appends.
            for header in headers:
                if header.record_count <= 0 or header.last_offset_delta + 1 != header.record_count:
                    raise StorageError(
                        f"{self.topic_partition}: batch has {header.record_count} records but offset delta "
                        f"{header.last_offset_delta}",
                        ErrorCode.INVALID_RECORD,
                    )
                if header.is_control:
                    raise StorageError(
                        f"{self.topic_partition}: clients may not write control batches",
                        ErrorCode.INVALID_RECORD,
                    )
            # Then every record is decoded, as Kafka's LogValidator reads each one: a batch whose CRC matches but
            # whose records do not parse would otherwise be stored, and every consumer would stop at it.
            try:
                validate_batches(records, deep=True)
            except InvalidRecordBatch as e:
                raise StorageError(f"{self.topic_partition}: {e.args[0]}", e.error_code) from None
        return headers

    def _append(
        self,
        buffers: list[bytes | memoryview],
        batches: list[WrittenBatch],
        epoch_starts: tuple[tuple[int, int], ...],
        now_ms: int,
    ) -> AppendInfo:
        if len(batches) == 1:
            (first_offset, last_offset, max_timestamp, size) = batches[0]
            offset_of_max = last_offset
        else:
            first_offset, last_offset = batches[0][0], batches[-1][1]
            size = sum(batch[3] for batch in batches)
            max_timestamp, offset_of_max = max((batch[2], batch[1]) for batch in batches)
        rolled_to = None
        segment = self._segments[-1]
        if segment.should_roll(size, max_timestamp, last_offset, now_ms):
            segment = self.roll(now_ms, first_offset)
            rolled_to = segment.base_offset
        if len(buffers) > _WRITEV_BUFFERS_MAX:
            buffers = [b"".join(buffers)]  # past IOV_MAX's reach: one copy instead of many syscalls
        segment.append(buffers, batches)
        if last_offset + 1 - self.recovery_point >= self.config.flush_messages:
            self.flush(last_offset + 1)
            self.last_flush_ms = now_ms
        return AppendInfo(first_offset, last_offset, max_timestamp, offset_of_max, size, epoch_starts, rolled_to)

    def roll(self, now_ms: int, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, LEO); the finished one is marked for flushing."""
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.size == 0 and active.base_offset == new_base:
            return active
        active.on_become_inactive()
        segment = LogSegment(self.directory, new_base, self.config, now_ms)
        assert segment.size == 0, f"{segment.log_path} already holds data"
        self._add_segment(segment)
        self._flush_wanted_up_to = max(self._flush_wanted_up_to, new_base)
        return segment

    # -- reading -------------------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Raw bytes of whole batches from the one holding `start_offset`: at most `max_bytes` (at least one
        batch if `min_one_batch`, Kafka's KIP-74), none ending at or beyond `max_offset` (the HW, for
        consumers). OFFSET_OUT_OF_RANGE below the log start offset or above the LEO."""
        end = self.log_end_offset
        if start_offset < self.log_start_offset or start_offset > end:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: offset {start_offset} is outside [{self.log_start_offset}, {end}]"
            )
        if max_bytes < 0:
            raise StorageError(f"negative max_bytes {max_bytes}", ErrorCode.INVALID_FETCH_SIZE)
        if start_offset == end or (max_offset is not None and start_offset >= max_offset):
            return b""
        index = bisect.bisect_right(self._bases, start_offset) - 1
        for segment in self._segments[max(index, 0) :]:
            data = segment.read(start_offset, max_bytes, max_offset, min_one_batch)
            if data is not None:
                return data
        return b""

    def batch_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """The header of every batch from the one holding `from_offset` (default: the log start offset) to the
        LEO as of this call, in offset order, reading headers only (what a new leader rebuilds its producer
        state from). OFFSET_OUT_OF_RANGE below the log start offset or above the LEO.

        Reads go through `os.pread` on each segment's descriptor, so appends may run between two steps of the
        iteration (what they add is not yielded); truncating or deleting segments meanwhile may not."""
        start = self.log_start_offset if from_offset is None else from_offset
        end = self.log_end_offset
        if start < self.log_start_offset or start > end:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: offset {start} is outside [{self.log_start_offset}, {end}]"
            )
        index = max(bisect.bisect_right(self._bases, start) - 1, 0)
        segments = tuple(self._segments[index:])

        def walk() -> Iterator[BatchHeader]:
            for segment in segments:
                position = 0
                if segment.base_offset < start:
                    first = segment.translate_offset(start)
                    if first is None:
                        continue  # nothing at or after `start` in this segment
                    position = first.position
                for located in segment.batches_from(position):
                    header = located.header
                    if header.base_offset >= end:
                        return
                    yield header
                    if header.next_offset >= end:
                        return  # stop before reading what appends wrote meanwhile

        return walk() if start < end else iter(())

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets by timestamp: (timestamp, offset) of the first record at or after the log start
        offset whose timestamp is >= `timestamp`, or None. Only the one batch that holds it is decoded."""
        for segment in self._segments:
            if segment.largest_timestamp() < timestamp:
                continue
            located = segment.find_offset_by_timestamp(timestamp)
            while located is not None:
                header = located.header
                if header.max_timestamp >= timestamp and header.last_offset >= self.log_start_offset:
                    found = self._first_record_at_or_after(segment, located.position, header, timestamp)
                    if found is not None:
                        return found
                following = located.position + header.size
                located = next(iter(segment.batches_from(following)), None)
        return None

    def _first_record_at_or_after(
        self, segment: LogSegment, position: int, header: BatchHeader, timestamp: int
    ) -> tuple[int, int] | None:
        try:
            _, records = decode_batch(segment.read_bytes(position, header.size))
        except InvalidRecordBatch as e:
            raise StorageError(f"{segment.log_path}: batch at position {position}: {e.args[0]}") from None
        for record in records:
            if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                return record.timestamp, record.offset
        return None

    # -- retention -----------------------------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int) -> list[DeletedSegment]:
        """Kafka's three retention passes: `retention.ms`, `retention.bytes`, and the log start offset."""
        deleted = self._delete_retention_ms_breached(now_ms)
        deleted += self._delete_retention_bytes_breached(now_ms)
        deleted += self._delete_log_start_offset_breached(now_ms)
        return deleted

    def _delete_retention_ms_breached(self, now_ms: int) -> list[DeletedSegment]:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return []
        return self._delete_segments_while(
            lambda segment, _next: now_ms - segment.largest_timestamp() > retention_ms, "retention.ms", now_ms
        )

    def _delete_retention_bytes_breached(self, now_ms: int) -> list[DeletedSegment]:
        retention_bytes = self.config.retention_bytes
        excess = self.size_bytes - retention_bytes
        if retention_bytes < 0 or excess < 0:
            return []

        def over_size(segment: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False

        return self._delete_segments_while(over_size, "retention.bytes", now_ms)

    def _delete_log_start_offset_breached(self, now_ms: int) -> list[DeletedSegment]:
        start = self.log_start_offset
        return self._delete_segments_while(
            lambda _segment, following: following is not None and following.base_offset <= start,
            "log start offset",
            now_ms,
        )

    def _delete_segments_while(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str, now_ms: int
    ) -> list[DeletedSegment]:
        """Kafka's `deletableSegments`: from the oldest, while the predicate holds and the segment lies wholly
        below the high watermark (never the empty active segment)."""
        doomed: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            following = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = following.base_offset if following is not None else self.log_end_offset
            last_and_empty = following is None and segment.size == 0
            if self.high_watermark >= upper and not last_and_empty and predicate(segment, following):
                doomed.append(segment)
            else:
                break
        if not doomed:
            return []
        if len(doomed) == len(self._segments):
            self.roll(now_ms)
        result = []
        for segment in doomed:
            result.append(DeletedSegment(segment.base_offset, segment.next_offset, segment.size, reason))
            segment.delete()
        del self._segments[: len(doomed)]
        del self._bases[: len(doomed)]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        return result

    def delete_records(self, offset: int, now_ms: int) -> int:
        """Kafka's DeleteRecords: move the log start offset to `offset` (at most the HW; -1 means the HW, as in
        Kafka's DeleteRecordsRequest) and delete segments wholly below it. Returns the new log start offset."""
        if offset == DELETE_RECORDS_TO_HIGH_WATERMARK:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: cannot delete records before {offset}: the high watermark is "
                f"{self.high_watermark}"
            )
        self.log_start_offset = max(self.log_start_offset, offset)
        self._delete_log_start_offset_breached(now_ms)
        return self.log_start_offset

    # -- truncation ----------------------------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove every batch holding an offset >= `offset` (a batch straddling it goes whole). Returns the
        number of bytes removed. Deciding that a truncation is safe is the replica layer's job."""
        if offset < 0:
            raise StorageError(f"cannot truncate to negative offset {offset}", ErrorCode.INVALID_REQUEST)
        if offset >= self.log_end_offset:
            return 0
        if offset < self._segments[0].base_offset:
            removed = self.size_bytes
            self.truncate_fully_and_start_at(offset, now_ms)
            return removed
        removed = 0
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            segment = self._segments.pop()
            self._bases.pop()
            removed += segment.size
            segment.delete()
        removed += self.active_segment.truncate_to(offset, now_ms)
        end = self.log_end_offset
        assert end <= offset
        self.log_start_offset = min(self.log_start_offset, end)
        self.high_watermark = min(self.high_watermark, end)
        self.recovery_point = min(self.recovery_point, end)
        self._flush_wanted_up_to = min(self._flush_wanted_up_to, end)
        return removed

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        """Delete every segment and start an empty log at `offset` (a follower far behind the leader's log
        start offset does this)."""
        assert offset >= 0
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(LogSegment(self.directory, offset, self.config, now_ms))
        self.log_start_offset = offset
        self.high_watermark = offset
        self.recovery_point = offset
        self._flush_wanted_up_to = offset

    # -- durability ----------------------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, up_to); the recovery point becomes up_to."""
        target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if target <= self.recovery_point:
            return
        for segment in self._segments:
            if segment.next_offset > self.recovery_point and segment.base_offset < target:
                segment.flush()
        self.recovery_point = target

    def flush_if_due(self, now_ms: int) -> bool:
        """The owner's periodic call: flush finished segments after a roll, and everything every `flush.ms`."""
        if now_ms - self.last_flush_ms >= self.config.flush_ms:
            self.flush(self.log_end_offset)
            self.last_flush_ms = now_ms
            return True
        if self._flush_wanted_up_to > self.recovery_point:
            self.flush(self._flush_wanted_up_to)
            return True
        return False

    def update_config(self, config: LogConfig) -> None:
        """A topic config changed (Kafka's LocalLog.updateConfig): later appends, rolls and retention use it, the
        active segment included; the index sizes of existing segments stay as they were made."""
        self.config = config
        self._segments[-1].config = config

    def close(self) -> None:
        """Flush everything and close the files (a clean shutdown; the owner then writes the marker)."""
        self.flush(self.log_end_offset)
        for segment in self._segments:
            segment.close()

    def abandon(self) -> None:
        """Close the files without flushing or writing anything: what a crash leaves behind (for tests)."""
        for segment in self._segments:
            segment.abandon()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic_partition}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, high_watermark={self.high_watermark}, "
            f"segments={len(self._segments)})"
        )


assert _PREFIX.size == LOG_OVERHEAD + 4, "the patched prefix covers base offset, length and leader epoch"
