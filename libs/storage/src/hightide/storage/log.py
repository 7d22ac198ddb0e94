"""The partition log: a directory `<topic>-<partition>/` of segments, behaving like Kafka's UnifiedLog.

Room: libs/storage. It owns the offsets of one replica's log on disk — log start offset (the low watermark), log
end offset, recovery point — the high watermark as the replica layer last set it (retention and delete-records
may only remove what is below it), and the topic id the data belongs to (`partition.metadata`). It never decodes
records: a batch's CRC and structure are checked once (by `hightide.core.validation`, here or by the caller, who
then passes the headers in), offsets are assigned by patching the base offset and partition leader epoch (both
outside the CRC), and reads hand out raw bytes of whole batches.

It is synchronous and not thread-safe: one task owns a log. Time is passed in as wall-clock milliseconds
(`WallMs`: record timestamps, retention.ms, segment.ms, flush.ms are all wall-clock). When to roll and what
retention deletes are the core's rules (`hightide.core.rolling`, `hightide.core.retention`); this carries them
out on files.

| operation                        | offsets afterwards                                                          |
| -------------------------------- | --------------------------------------------------------------------------- |
| append_as_leader/as_follower     | LEO = last appended offset + 1                                              |
| delete_old_segments              | log start = base of the first remaining segment (only segments below HW go) |
| advance_log_start_offset(o), o<=HW | log start = max(log start, o); segments wholly below it are deleted       |
| truncate_to(o), o < LEO          | LEO <= o (whole batches go), HW = min(HW, LEO), recovery point <= LEO       |
| truncate_fully_and_start_at(o)   | every segment deleted; log start = LEO = HW = recovery point = o            |
| flush(o)                         | recovery point = o: everything below o is on disk                           |

What it refuses, changing nothing: a producer's batches that `validate_produce` refuses; a follower's batches
that do not start exactly at the LEO or do not follow each other (a gap or an overlap); a single batch larger
than segment.bytes. A follower's fetched set larger than segment.bytes is not refused: it rolls between
batches as needed (Kafka refuses the whole set, so a follower with a smaller segment.bytes than its leader's
answers would stop for ever).

A disk that refuses a write (ENOSPC, EIO, a short write; `hightide.storage.disk`) surfaces as `DiskError`
(KAFKA_STORAGE_ERROR). A failed append is undone — segments it started are deleted, the one it wrote into is cut
back to its size before the call — and the log is exactly as before. When that is impossible (the cut-back
fails too), or an fsync, truncation or deletion fails (after a failed fsync the page cache's state is unknown),
the log goes offline: every later operation is refused with `LogOffline`, as Kafka takes a failed log directory
offline, and recovery at the next start cuts whatever was torn.

Like Kafka, a roll does not fsync on the append path: it marks the finished segment for flushing and
`flush_if_due` (called by the owner's scheduler) does it, advancing the recovery point.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from hightide.core.clock import WallMs
from hightide.core.retention import (
    RetentionPlan,
    SegmentSummary,
    plan_log_start_offset_retention,
    plan_retention,
)
from hightide.core.rolling import roll_reason
from hightide.core.validation import validate_produce, validate_replicated
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidRecordBatch,
    decode_batch,
    read_batch_header,
)
from hightide.storage.checkpoint import PartitionMetadataFile, TopicPartition, fsync_directory, topic_id_problem
from hightide.storage.config import LogConfig
from hightide.storage.disk import SYSTEM_DISK, DiskIO, WriteBuffer
from hightide.storage.errors import DiskError, LogOffline, OffsetOutOfRange, StorageError
from hightide.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentRecovery,
    WrittenBatch,
    segment_paths,
)

_PREFIX: Final = struct.Struct(">qii")  # base offset, batch length, partition leader epoch: bytes 0..16
_WRITEV_BUFFERS_MAX: Final = 512
DELETE_RECORDS_TO_HIGH_WATERMARK: Final = -1

# Batches written to one segment with one writev: the buffers and what the segment indexes of each batch.
_Chunk = tuple[list[WriteBuffer], list[WrittenBatch]]


@dataclass(frozen=True, slots=True)
class _AppendUndo:
    """What putting the log back after a failed append needs, as it was before the append wrote anything."""

    segments: int
    active: LogSegment
    log_end_offset: int
    created_ms: WallMs
    flush_wanted_up_to: int


class AppendInfo(NamedTuple):
    """What one append wrote; `epoch_starts` lists (leader epoch, first offset) wherever the epoch changes;
    `rolled_to` the base offsets of the segments the append started, in order (several when a follower's
    fetched set is larger than segment.bytes)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    size_bytes: int
    epoch_starts: tuple[tuple[int, int], ...]
    rolled_to: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DeletedSegment:
    """A segment a log operation removed, [base_offset, next_offset); `reason` as the event catalogue spells it
    (`hightide.core.retention.DeletionReason`, or the caller's own such as "truncation")."""

    base_offset: int
    next_offset: int
    size_bytes: int
    reason: str


@dataclass(frozen=True, slots=True)
class LogStartOffsetUpdate:
    """What moving the log start offset did: before and after, and the segments it deleted (oldest first)."""

    log_start_offset_before: int
    log_start_offset: int
    deleted: tuple[DeletedSegment, ...]

    @property
    def moved(self) -> bool:
        return self.log_start_offset != self.log_start_offset_before


@dataclass(slots=True)
class RecoveryReport:
    """What opening the log found and did."""

    clean_shutdown: bool
    recovered: list[SegmentRecovery] = field(default_factory=list)
    deleted_after_corruption: list[int] = field(default_factory=list)
    rebuilt_indexes: list[int] = field(default_factory=list)


class PartitionLog:
    """One replica's log of one partition."""

    def __init__(
        self, directory: Path, topic_partition: TopicPartition, config: LogConfig, disk: DiskIO = SYSTEM_DISK
    ) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.config = config
        self.topic_id: str | None = None
        self.offline_reason: str | None = None
        self._disk = disk
        self._metadata = PartitionMetadataFile(directory)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.high_watermark = 0
        self.last_flush_ms = WallMs(0)
        self._flush_wanted_up_to = 0
        self.recovery_report = RecoveryReport(clean_shutdown=True)
        # Log compaction: where the dirty section starts (Kafka's cleaner-offset-checkpoint entry), None until the
        # first cleaning or a checkpoint says (everything from the log start offset is dirty then).
        self.cleaner_checkpoint: int | None = None

    # -- opening -------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        now: WallMs,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        topic_id: str | None = None,
        disk: DiskIO = SYSTEM_DISK,
    ) -> PartitionLog:
        """Open (or create) the log in `directory`. After an unclean shutdown, every segment holding offsets at
        or above `recovery_point` is validated batch by batch from there on; the first invalid byte ends the
        log (Kafka's LogLoader: later segments are deleted, followers re-fetch what is lost).

        The topic id on file (`partition.metadata`) is read first: a corrupt file is a StorageError, and one that
        differs from `topic_id` is INCONSISTENT_TOPIC_ID; either way nothing is changed. A log without the file
        is given `topic_id`, when there is one, before anything else is written."""
        if topic_id is not None:
            problem = topic_id_problem(topic_id)
            if problem is not None:
                raise StorageError(f"{topic_partition}: invalid topic id: {problem}", ErrorCode.INVALID_REQUEST)
        log = cls(directory, topic_partition, config, disk)
        directory.mkdir(parents=True, exist_ok=True)
        log.topic_id = log._metadata.read()
        if topic_id is not None and log.topic_id not in (None, topic_id):
            raise log._inconsistent_topic_id(topic_id)
        try:
            log._remove_leftovers()
            if topic_id is not None and log.topic_id is None:
                log._write_topic_id(topic_id)
            log._load(now, recovery_point, log_start_offset, clean_shutdown)
        except BaseException as error:
            log.abandon()
            if isinstance(error, OSError):
                raise StorageError(f"{topic_partition}: cannot open the log in {directory}: {error}") from None
            raise
        return log

    def _load(self, now: WallMs, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        self.recovery_report = RecoveryReport(clean_shutdown=clean_shutdown)
        self._load_segments(now, recovery_point if not clean_shutdown else None)
        if not self._segments:
            self._add_segment(LogSegment(self.directory, log_start_offset, self.config, now, self._disk))
        self.log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.truncate_fully_and_start_at(self.log_start_offset, now)
        if not clean_shutdown:
            # What recovery validated is in the page cache only: make it durable so a second crash need not
            # validate it again.
            self.recovery_point = min(recovery_point, self.log_end_offset)
            self.flush(self.log_end_offset)
        self.recovery_point = self.log_end_offset
        self.high_watermark = self.log_start_offset  # Kafka's start; the replica layer sets it from its checkpoint
        self._flush_wanted_up_to = self.log_end_offset
        self.last_flush_ms = now

    def _remove_leftovers(self) -> None:
        """Finish deletions and swaps a crash interrupted, drop cleanings it interrupted, and drop index files whose
        log is gone."""
        for swap in sorted(self.directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            self._complete_swap(swap)
        for path in self.directory.iterdir():
            if path.name.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
                path.unlink()
        for path in self.directory.iterdir():
            if path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and not path.with_suffix(LOG_SUFFIX).exists():
                path.unlink()

    def _complete_swap(self, swap: Path) -> None:
        """Kafka's LogLoader on a `.swap` segment: it is whole and durable (fsynced before its rename), so the
        segments it replaces — those whose base offset lies in its offsets — go and it takes its final name. Its
        indexes are dropped and rebuilt on load."""
        base_text = swap.name[: -len(LOG_SUFFIX + SWAP_SUFFIX)]
        if not base_text.isdigit():
            return  # not a segment's: removed with the other leftovers
        base = int(base_text)
        end = base
        with swap.open("rb") as file, contextlib.suppress(InvalidRecordBatch):
            while len(prefix := file.read(BATCH_HEADER_SIZE)) == BATCH_HEADER_SIZE:
                header = read_batch_header(prefix)
                end = header.next_offset
                file.seek(header.size - BATCH_HEADER_SIZE, os.SEEK_CUR)
        for path in list(self.directory.glob(f"*{LOG_SUFFIX}")):
            if path.stem.isdigit() and base <= int(path.stem) < max(end, base + 1):
                for doomed in segment_paths(self.directory, int(path.stem)):
                    doomed.unlink(missing_ok=True)
        for index in segment_paths(self.directory, base, SWAP_SUFFIX)[1:]:
            index.unlink(missing_ok=True)
        os.replace(swap, segment_paths(self.directory, base)[0])
        fsync_directory(self.directory)

    def _load_segments(self, now: WallMs, recovery_point: int | None) -> None:
        bases = sorted(int(p.stem) for p in self.directory.glob(f"*{LOG_SUFFIX}") if p.stem.isdigit())
        segments: list[LogSegment] = []
        try:
            for base in bases:
                segments.append(LogSegment(self.directory, base, self.config, now, self._disk))
            self._recover_segments(segments, now, recovery_point)
        except BaseException:
            for segment in segments:
                segment.abandon()  # those already taken in are let go of by `open`; abandoning is idempotent
            raise

    def _recover_segments(self, segments: list[LogSegment], now: WallMs, recovery_point: int | None) -> None:
        report = self.recovery_report
        for i, segment in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            unflushed = recovery_point is not None and (next_base is None or next_base > recovery_point)
            truncated = False
            if unflushed:
                recovery = segment.recover(max(recovery_point or 0, segment.base_offset), now)
                report.recovered.append(recovery)
                truncated = recovery.truncated_bytes > 0
            else:
                try:
                    segment.load()
                except StorageError:
                    report.rebuilt_indexes.append(segment.base_offset)
                    recovery = segment.recover(segment.base_offset, now)
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

    # -- topic identity ------------------------------------------------------------------------------------

    def assign_topic_id(self, topic_id: str) -> None:
        """Record the topic id of a log that has none (Kafka's `assignTopicId`), writing `partition.metadata`
        atomically. The same id again changes nothing; a different one is INCONSISTENT_TOPIC_ID: a log is never
        moved to another incarnation of its topic (the owner deletes it instead)."""
        if self.topic_id == topic_id:
            return
        if self.topic_id is not None:
            raise self._inconsistent_topic_id(topic_id)
        self._check_online()
        self._write_topic_id(topic_id)

    def _write_topic_id(self, topic_id: str) -> None:
        self._metadata.write(topic_id)
        self.topic_id = topic_id

    def _inconsistent_topic_id(self, topic_id: str) -> StorageError:
        return StorageError(
            f"{self.topic_partition}: the log in {self.directory} belongs to topic id {self.topic_id}, not {topic_id}",
            ErrorCode.INCONSISTENT_TOPIC_ID,
        )

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

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW as the replica layer computed it, clamped to [log start offset, LEO] as Kafka does."""
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    # -- appending -----------------------------------------------------------------------------------------

    def validate_client_batches(self, records: bytes) -> list[BatchHeader]:
        """`hightide.core.validation.validate_produce` under this log's limits (max.message.bytes,
        segment.bytes), its refusal as a StorageError: what a leader checks before its core assigns offsets."""
        try:
            return validate_produce(
                records,
                max_message_bytes=self.config.max_message_bytes,
                segment_bytes=self.config.segment_bytes,
                compacted=self.config.compact,
            )
        except InvalidRecordBatch as e:
            raise StorageError(f"{self.topic_partition}: {e.args[0]}", e.error_code) from None

    def append_as_leader(
        self, records: bytes, leader_epoch: int, now: WallMs, *, validated: list[BatchHeader] | None = None
    ) -> AppendInfo:
        """Append a producer's batches: offsets from the LEO, `leader_epoch` stamped. `validated` holds the headers
        `validate_produce` (or `validate_client_batches`) returned for these very bytes; without it they are
        validated here. Nothing is parsed twice."""
        assert leader_epoch >= 0
        self._check_online()
        headers = validated if validated is not None else self.validate_client_batches(records)
        if len(records) > self.config.segment_bytes:  # validated under another config, before it changed
            raise self._too_large(len(records), "the batches")
        view = memoryview(records)
        buffers: list[WriteBuffer] = []
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
        assert position == len(records), "the headers are not these bytes'"
        return self._append([(buffers, batches)], ((leader_epoch, batches[0][0]),), now)

    def append_as_follower(
        self, records: bytes, now: WallMs, *, validated: list[BatchHeader] | None = None
    ) -> AppendInfo:
        """Append a leader's batches as they are. `validated` holds the headers `validate_replicated` returned for
        these very bytes; without it they are validated here (one CRC per batch).

        Refused, changing nothing: batches that start below the LEO or overlap each other (INVALID_RECORD), and a
        single batch larger than segment.bytes (RECORD_LIST_TOO_LARGE). A set larger than segment.bytes rolls
        between batches. Gaps are accepted, as Kafka's follower accepts them: a compacted leader's log has them where
        the cleaner removed whole batches (the replica core decides that an answer beyond the LEO is one)."""
        self._check_online()
        if validated is None:
            try:
                headers = validate_replicated(records)
            except InvalidRecordBatch as e:
                raise StorageError(f"{self.topic_partition}: {e.args[0]}", e.error_code) from None
        else:
            headers = validated
        if not headers:
            raise StorageError(f"{self.topic_partition}: no record batches to append", ErrorCode.INVALID_RECORD)
        batches, epoch_starts = self._continuing_batches(headers)
        return self._append(self._follower_chunks(records, batches), epoch_starts, now)

    def _continuing_batches(
        self, headers: Sequence[BatchHeader]
    ) -> tuple[list[WrittenBatch], tuple[tuple[int, int], ...]]:
        """What the segments index of each batch, and where leader epochs start; refused unless the batches
        continue the log in increasing offsets (gaps allowed). One pass: this runs on every follower append."""
        expected = self.log_end_offset
        batches: list[WrittenBatch] = []
        epoch_starts: list[tuple[int, int]] = []
        epoch = None
        for header in headers:
            base_offset, last_offset = header.base_offset, header.last_offset
            if base_offset < expected or last_offset < base_offset:
                raise self._discontinuous(header, expected)
            batches.append((base_offset, last_offset, header.max_timestamp, header.size))
            if header.partition_leader_epoch != epoch:
                epoch = header.partition_leader_epoch
                epoch_starts.append((epoch, base_offset))
            expected = last_offset + 1
        return batches, tuple(epoch_starts)

    def _discontinuous(self, header: BatchHeader, expected: int) -> StorageError:
        if header.base_offset >= expected:
            return StorageError(
                f"{self.topic_partition}: batch at offset {header.base_offset} ends before it starts "
                f"(last offset delta {header.last_offset_delta})",
                ErrorCode.CORRUPT_MESSAGE,
            )
        return StorageError(
            f"{self.topic_partition}: batch at offset {header.base_offset} does not continue the log at offset "
            f"{expected} (an overlap)",
            ErrorCode.INVALID_RECORD,
        )

    def _follower_chunks(self, records: bytes, batches: list[WrittenBatch]) -> list[_Chunk]:
        """The batches cut into runs of at most segment.bytes, each written to one segment (usually one run)."""
        limit = self.config.segment_bytes
        if len(batches) == 1:
            assert batches[0][3] == len(records), "the headers are not these bytes'"
        else:
            assert sum(batch[3] for batch in batches) == len(records), "the headers are not these bytes'"
        if len(records) <= limit:
            return [([records], batches)]
        view = memoryview(records)
        chunks: list[_Chunk] = []
        run: list[WrittenBatch] = []
        start = position = 0
        for batch in batches:
            size = batch[3]
            if size > limit:
                raise self._too_large(size, f"the batch at offset {batch[0]}")
            if position + size - start > limit:
                chunks.append(([view[start:position]], run))
                run, start = [], position
            run.append(batch)
            position += size
        chunks.append(([view[start:position]], run))
        return chunks

    def _too_large(self, size: int, what: str) -> StorageError:
        return StorageError(
            f"{self.topic_partition}: {what}: {size} bytes exceed segment.bytes {self.config.segment_bytes}",
            ErrorCode.RECORD_LIST_TOO_LARGE,
        )

    def _append(self, chunks: list[_Chunk], epoch_starts: tuple[tuple[int, int], ...], now: WallMs) -> AppendInfo:
        segments_before, flush_wanted_before = len(self._segments), self._flush_wanted_up_to
        end_before = self.log_end_offset
        active = self._segments[-1]
        created_before = active.created_ms
        rolled_to: list[int] = []
        try:
            for buffers, run in chunks:
                rolled = self._write(buffers, run, now)
                if rolled is not None:
                    rolled_to.append(rolled)
        except OSError as error:
            undo = _AppendUndo(segments_before, active, end_before, created_before, flush_wanted_before)
            raise self._undo_append(undo, error, now) from None
        batches = chunks[0][1] if len(chunks) == 1 else [batch for _, run in chunks for batch in run]
        if len(batches) == 1:
            (first_offset, last_offset, max_timestamp, size) = batches[0]
            offset_of_max = last_offset
        else:
            first_offset, last_offset = batches[0][0], batches[-1][1]
            size = sum(batch[3] for batch in batches)
            max_timestamp, offset_of_max = max((batch[2], batch[1]) for batch in batches)
        if last_offset + 1 - self.recovery_point >= self.config.flush_messages:
            self.flush(last_offset + 1)
            self.last_flush_ms = now
        return AppendInfo(first_offset, last_offset, max_timestamp, offset_of_max, size, epoch_starts, tuple(rolled_to))

    def _write(self, buffers: list[WriteBuffer], batches: list[WrittenBatch], now: WallMs) -> int | None:
        """Write one run of batches to the active segment, rolling first if the core's rule says so; the base
        offset of the segment started, if any."""
        first_offset, last_offset = batches[0][0], batches[-1][1]
        if len(batches) == 1:
            size, max_timestamp = batches[0][3], batches[0][2]
        else:
            size, max_timestamp = sum(batch[3] for batch in batches), max(batch[2] for batch in batches)
        segment = self._segments[-1]
        rolled = None
        config = self.config
        reason = roll_reason(
            segment,
            size,
            max_timestamp,
            last_offset,
            segment_bytes=config.segment_bytes,
            segment_ms=config.max_segment_ms,
            now=now,
        )
        if reason is not None:
            active, segment = segment, self._roll(now, first_offset)
            rolled = segment.base_offset if segment is not active else None
        if len(buffers) > _WRITEV_BUFFERS_MAX:
            buffers = [b"".join(buffers)]  # past IOV_MAX's reach: one copy instead of many syscalls
        segment.append(buffers, batches)
        return rolled

    def _undo_append(self, undo: _AppendUndo, error: OSError, now: WallMs) -> DiskError:
        """Put the log back as it was before a failed append: delete the segments it started, cut the one that
        was active back to its size. If that fails too, the log goes offline."""
        try:
            while len(self._segments) > undo.segments:
                self._bases.pop()
                self._segments.pop().delete()
            active = self.active_segment
            assert active is undo.active
            if active.next_offset > undo.log_end_offset:  # an earlier run of this append went into it
                active.truncate_to(undo.log_end_offset, now)
                active.created_ms = undo.created_ms
            active.cut_back()
        except OSError as second:
            return self._go_offline(f"append failed ({error}) and cutting it back failed too ({second})")
        self._flush_wanted_up_to = undo.flush_wanted_up_to
        return DiskError(
            f"{self.topic_partition}: append at offset {self.log_end_offset} failed: {error}; the segment was cut back "
            f"to {self.active_segment.size} bytes and the log is unchanged",
            offline=False,
        )

    def roll(self, now: WallMs, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, LEO); the finished one is marked for flushing."""
        self._check_online()
        try:
            return self._roll(now, expected_next_offset)
        except OSError as error:
            raise DiskError(f"{self.topic_partition}: cannot start a new segment: {error}", offline=False) from None

    def _roll(self, now: WallMs, expected_next_offset: int | None = None) -> LogSegment:
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.size == 0 and active.base_offset == new_base:
            return active
        # The new segment's files first: if the disk refuses them, the active segment is still active, untouched.
        segment = LogSegment(self.directory, new_base, self.config, now, self._disk)
        assert segment.size == 0, f"{segment.log_path} already holds data"
        active.on_become_inactive()
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
        self._check_online()
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
        try:
            for segment in self._segments[max(index, 0) :]:
                data = segment.read(start_offset, max_bytes, max_offset, min_one_batch)
                if data is not None:
                    return data
        except OSError as error:
            raise self._go_offline(f"read failed: {error}") from None
        return b""

    def batch_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """The header of every batch from the one holding `from_offset` (default: the log start offset) to the
        LEO as of this call, in offset order, reading headers only (what a new leader rebuilds its producer
        state from). OFFSET_OUT_OF_RANGE below the log start offset or above the LEO.

        Reads go through `os.pread` on each segment's descriptor, so appends may run between two steps of the
        iteration (what they add is not yielded); truncating or deleting segments meanwhile may not."""
        self._check_online()
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
        self._check_online()
        try:
            return self._offset_for_timestamp(timestamp)
        except OSError as error:
            raise self._go_offline(f"read failed: {error}") from None

    def _offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
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

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """Kafka's ListOffsets MAX_TIMESTAMP (KIP-734, `fetchOffsetByTimestamp`): (timestamp, offset) of the first
        record with the log's largest timestamp: in the first segment that reached it, the first batch that did,
        its first record with it (`offsetOfMaxTimestamp`). None for a log without records. Only that one batch is
        decoded."""
        self._check_online()
        try:
            return self._max_timestamp_offset()
        except OSError as error:
            raise self._go_offline(f"read failed: {error}") from None

    def _max_timestamp_offset(self) -> tuple[int, int] | None:
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp_so_far >= 0 and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        if best is None:
            return None
        timestamp = best.max_timestamp_so_far
        for located in best.batches_from(best.offset_index.lookup(best.offset_of_max_timestamp).position):
            if located.header.max_timestamp == timestamp:
                return self._first_record_at_or_after(best, located.position, located.header, timestamp)
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

    def delete_old_segments(self, now: WallMs) -> list[DeletedSegment]:
        """Kafka's retention (log start offset, retention.bytes, retention.ms; never at or above the HW), as
        `hightide.core.retention.plan_retention` decides it."""
        self._check_online()
        config = self.config
        try:
            plan = plan_retention(
                self._summaries(with_timestamps=config.retention_ms >= 0 and config.delete),
                log_start_offset=self.log_start_offset,
                high_watermark=self.high_watermark,
                # cleanup.policy=compact alone: no time or size retention, only the log start offset (Kafka).
                retention_ms=config.retention_ms if config.delete else -1,
                retention_bytes=config.retention_bytes if config.delete else -1,
                now=now,
            )
        except OSError as error:
            raise self._go_offline(f"reading a segment's modification time failed: {error}") from None
        return self._carry_out(plan, now)

    def advance_log_start_offset(self, offset: int, now: WallMs) -> LogStartOffsetUpdate:
        """Kafka's `maybeIncrementLogStartOffset`: move the log start offset up to `offset` (never down) and delete
        the segments wholly below it. What a follower does with its leader's log start offset (reason
        LeaderOffsetIncremented) and DeleteRecords on a leader. OFFSET_OUT_OF_RANGE, changing nothing, when
        `offset` is above the HW: the log start offset never passes it."""
        self._check_online()
        if offset > self.high_watermark:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: cannot move the log start offset to {offset}: the high watermark is "
                f"{self.high_watermark}"
            )
        before = self.log_start_offset
        if offset <= before:
            return LogStartOffsetUpdate(before, before, ())
        self._set_log_start_offset(offset)
        plan = plan_log_start_offset_retention(
            self._summaries(with_timestamps=False), log_start_offset=offset, high_watermark=self.high_watermark
        )
        deleted = self._carry_out(plan, now)
        return LogStartOffsetUpdate(before, self.log_start_offset, tuple(deleted))

    def delete_records(self, offset: int, now: WallMs) -> LogStartOffsetUpdate:
        """Kafka's DeleteRecords: `advance_log_start_offset(offset)`, where -1 means the HW (Kafka's
        DeleteRecordsRequest); any other negative offset is OFFSET_OUT_OF_RANGE."""
        if offset == DELETE_RECORDS_TO_HIGH_WATERMARK:
            offset = self.high_watermark
        if offset < 0:
            raise OffsetOutOfRange(f"{self.topic_partition}: cannot delete records before {offset}")
        return self.advance_log_start_offset(offset, now)

    def _summaries(self, *, with_timestamps: bool) -> list[SegmentSummary]:
        return [
            SegmentSummary(s.base_offset, s.next_offset, s.size, s.largest_timestamp() if with_timestamps else -1)
            for s in self._segments
        ]

    def _carry_out(self, plan: RetentionPlan, now: WallMs) -> list[DeletedSegment]:
        """Delete the plan's segments: roll first if every segment goes, raise the log start offset, then remove
        the segments from lookups and their files (Kafka's `deleteSegments`)."""
        count = len(plan.deletions)
        if count == 0:
            return []
        doomed = self._segments[:count]
        assert [s.base_offset for s in doomed] == [d.segment.base_offset for d in plan.deletions], plan
        deleted = [
            DeletedSegment(s.base_offset, s.next_offset, s.size, str(d.reason))
            for s, d in zip(doomed, plan.deletions, strict=True)
        ]
        try:
            if plan.roll_first:
                self._roll(now)
            self._set_log_start_offset(plan.log_start_offset)
            del self._segments[:count]
            del self._bases[:count]
            for segment in doomed:
                segment.delete()
        except OSError as error:
            raise self._go_offline(f"deleting segments failed: {error}") from None
        assert self.log_start_offset >= self._segments[0].base_offset
        return deleted

    def _set_log_start_offset(self, offset: int) -> None:
        assert offset <= self.high_watermark or offset <= self.log_start_offset, (offset, self)
        self.log_start_offset = max(self.log_start_offset, offset)
        # Below the log start offset nothing needs recovering (Kafka's updateLogStartOffset).
        self.recovery_point = max(self.recovery_point, self.log_start_offset)

    # -- compaction ----------------------------------------------------------------------------------------

    def replace_segments(self, base_offset: int, old: Sequence[LogSegment], now: WallMs) -> LogSegment:
        """Swap in the cleaned segment at `base_offset` (its `.cleaned` files, written and fsynced by the cleaner)
        for `old`, consecutive segments of this log starting at that base (Kafka's `LocalLog.replaceSegments`):
        `.cleaned` -> `.swap` (the log file last: the commit point), the old segments deleted, `.swap` -> the final
        names. A crash anywhere leaves the old segments or the new (`_complete_swap` finishes a committed swap).
        Offsets do not move: the log start and end offsets, HW and recovery point stay as they are. A failure
        takes the log offline (DiskError); its next start's recovery sorts the files out."""
        self._check_online()
        start = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        assert start is not None and old[0].base_offset == base_offset, (base_offset, old)
        assert all(a is b for a, b in zip(self._segments[start : start + len(old)], old, strict=False)), old
        assert start + len(old) < len(self._segments), "the active segment is never cleaned"
        cleaned, swap, final = (
            segment_paths(self.directory, base_offset, s) for s in (CLEANED_SUFFIX, SWAP_SUFFIX, "")
        )
        try:
            for index in (1, 2, 0):
                os.replace(cleaned[index], swap[index])
            fsync_directory(self.directory)
            del self._segments[start : start + len(old)]
            del self._bases[start : start + len(old)]
            for segment in old:
                segment.delete()
            for index in (0, 1, 2):
                os.replace(swap[index], final[index])
            fsync_directory(self.directory)
            segment = LogSegment(self.directory, base_offset, self.config, now, self._disk)
            self._segments.insert(start, segment)
            self._bases.insert(start, base_offset)
            segment.load()
        except (OSError, StorageError) as error:
            raise self._go_offline(f"swapping in the cleaned segment at offset {base_offset} failed: {error}") from None
        return segment

    # -- truncation ----------------------------------------------------------------------------------------

    def truncate_to(self, offset: int, now: WallMs) -> int:
        """Remove every batch holding an offset >= `offset` (a batch straddling it goes whole). Returns the
        number of bytes removed. Deciding that a truncation is safe is the replica layer's job."""
        if offset < 0:
            raise StorageError(f"cannot truncate to negative offset {offset}", ErrorCode.INVALID_REQUEST)
        self._check_online()
        if offset >= self.log_end_offset:
            return 0
        try:
            return self._truncate_to(offset, now)
        except OSError as error:
            raise self._go_offline(f"truncation to offset {offset} failed: {error}") from None

    def _truncate_to(self, offset: int, now: WallMs) -> int:
        if offset < self._segments[0].base_offset:
            removed = self.size_bytes
            self._truncate_fully_and_start_at(offset, now)
            return removed
        removed = 0
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            segment = self._segments.pop()
            self._bases.pop()
            removed += segment.size
            segment.delete()
        removed += self.active_segment.truncate_to(offset, now)
        end = self.log_end_offset
        assert end <= offset
        self.log_start_offset = min(self.log_start_offset, end)
        self.high_watermark = min(self.high_watermark, end)
        self.recovery_point = min(self.recovery_point, end)
        self._flush_wanted_up_to = min(self._flush_wanted_up_to, end)
        self._truncate_cleaner_checkpoint(end)
        return removed

    def truncate_fully_and_start_at(self, offset: int, now: WallMs) -> None:
        """Delete every segment and start an empty log at `offset` (a follower far behind the leader's log
        start offset does this)."""
        assert offset >= 0
        self._check_online()
        try:
            self._truncate_fully_and_start_at(offset, now)
        except OSError as error:
            raise self._go_offline(f"starting the log over at offset {offset} failed: {error}") from None

    def _truncate_fully_and_start_at(self, offset: int, now: WallMs) -> None:
        doomed = list(self._segments)
        self._segments.clear()
        self._bases.clear()
        for segment in doomed:
            segment.delete()
        self._add_segment(LogSegment(self.directory, offset, self.config, now, self._disk))
        self.log_start_offset = offset
        self.high_watermark = offset
        self.recovery_point = offset
        self._flush_wanted_up_to = offset
        self._truncate_cleaner_checkpoint(offset)

    def _truncate_cleaner_checkpoint(self, end: int) -> None:
        """Kafka's `maybeTruncateCheckpoint`: what is appended again after a truncation is dirty."""
        if self.cleaner_checkpoint is not None:
            self.cleaner_checkpoint = min(self.cleaner_checkpoint, end)

    # -- durability ----------------------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, up_to); the recovery point becomes up_to."""
        self._check_online()
        target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if target <= self.recovery_point:
            return
        try:
            for segment in self._segments:
                if segment.next_offset > self.recovery_point and segment.base_offset < target:
                    segment.flush()
        except OSError as error:
            # After a failed fsync the page cache may have dropped the data: no later fsync can vouch for it.
            raise self._go_offline(f"fsync failed: {error}") from None
        self.recovery_point = target

    def flush_if_due(self, now: WallMs) -> bool:
        """The owner's periodic call: flush finished segments after a roll, and everything every `flush.ms`."""
        if now - self.last_flush_ms >= self.config.flush_ms:
            self.flush(self.log_end_offset)
            self.last_flush_ms = now
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

    # -- failure -------------------------------------------------------------------------------------------

    def _check_online(self) -> None:
        if self.offline_reason is not None:
            raise LogOffline(f"{self.topic_partition}: the log is offline: {self.offline_reason}")

    def _go_offline(self, reason: str) -> DiskError:
        """Refuse everything from now on; the next start's recovery repairs the files."""
        self.offline_reason = reason
        return DiskError(f"{self.topic_partition}: {reason}: the log is offline", offline=True)

    # -- closing -------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything and close the files (a clean shutdown; the owner then writes the marker). An offline
        log is only let go of, as `abandon` does; a flush or close that fails takes the log offline (DiskError),
        every file closed all the same."""
        if self.offline:
            self.abandon()
            return
        try:
            self.flush(self.log_end_offset)
        except DiskError:
            self.abandon()
            raise
        failure: OSError | None = None
        for segment in self._segments:
            try:
                segment.close()
            except OSError as error:
                failure = failure or error
        if failure is not None:
            raise self._go_offline(f"closing the segments failed: {failure}")

    def abandon(self) -> None:
        """Close the files without flushing or writing anything: what a crash leaves behind (for tests, and for a
        log that is offline)."""
        for segment in self._segments:
            if not segment.closed:
                segment.abandon()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic_partition}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, high_watermark={self.high_watermark}, "
            f"segments={len(self._segments)}{', offline' if self.offline else ''})"
        )


assert _PREFIX.size == LOG_OVERHEAD + 4, "the patched prefix covers base offset, length and leader epoch"
