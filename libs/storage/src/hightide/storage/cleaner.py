"""The log cleaner: compacts one partition log (`cleanup.policy=compact`) as Kafka's LogCleaner does.

Room: libs/storage. What may be cleaned, when, and which record survives are the core's rules
(`hightide.core.compaction`); this reads and rewrites the bytes. A cleaning runs in three steps, so that the slow
middle one may run on another thread while the log's owner goes on appending:

| step                          | runs on         | does                                                      |
| ----------------------------- | --------------- | --------------------------------------------------------- |
| `prepare_cleaning(log, now)`  | the log's owner | plans (the core's rules), opens the segments to read      |
| `CleaningJob.build()`         | any thread      | builds the key map, writes each group's `.cleaned` files  |
| `commit_cleaning(log, job)`   | the log's owner | checks nothing moved, swaps the cleaned segments in       |

`build` reads only segments below the first uncleanable offset (closed, below the HW), through descriptors of its
own, and writes only `.cleaned` files no one else touches. `commit` gives up, deleting what `build` wrote, when
any segment it read was meanwhile deleted, truncated or replaced (retention, truncation, a follower starting
over): those changes win and the next cleaning starts from what is there.

How a batch is rewritten (Kafka's `MemoryRecords.filterTo`): offsets never change. A batch whose records all
survive, with its delete horizon unchanged, is copied byte for byte; one that loses records is written again with
the survivors (`hightide.protocol.records.rebuild_batch`: base offset, last offset delta, producer id, epoch and
sequence and partition leader epoch kept, CRC computed again); a batch losing every record goes, except that an
empty batch is kept (i) for the last batch of each idempotent producer among the segments cleaned, as Kafka's
RETAIN_EMPTY keeps its last sequence for a new leader to rebuild producer state from, and (ii) for each group's
last batch, so the cleaned segment ends exactly where its group ended: the next offset of the segment never
moves, and recovery of a half-done swap knows which old segments the new one replaces (Kafka keeps the round's
last batch only).

The swap (`PartitionLog.replace_segments`, Kafka's `LocalLog.replaceSegments`) is crash-safe: the cleaned files
are fsynced, renamed `.cleaned` -> `.swap` (the log file last: its rename is the commit point), the old segments
deleted, then `.swap` renamed to the final names. Recovery on open completes a swap whose `.log.swap` exists and
discards every other `.cleaned`/`.swap` file, so a crash anywhere leaves either the old segments or the new.

The key map is a dict over the whole dirty section (Kafka bounds it by log.cleaner.dedupe.buffer.size and may
clean part of the section; here a dirty section is at most what the log's segments hold).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hightide.core.clock import WallMs
from hightide.core.compaction import CleanableSegment, CleaningPlan, new_delete_horizon, plan_cleaning, retain_record
from hightide.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    Record,
    decode_batch,
    delete_horizon_ms,
    read_batch_header,
    rebuild_batch,
)
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError
from hightide.storage.log import PartitionLog
from hightide.storage.segment import CLEANED_SUFFIX, LogSegment, WrittenBatch, segment_paths

_READ_CHUNK_BYTES = 1024 * 1024
_WRITE_CHUNK_BYTES = 1024 * 1024


class CleaningAborted(Exception):
    """The log's owner asked a cleaning in progress to stop (the broker is shutting down)."""


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """A segment a cleaning reads, as it was when the cleaning was prepared (the owner's object, its size and next
    offset, to tell at commit whether it changed) with a read-only descriptor of the cleaner's own."""

    segment: LogSegment
    size: int
    next_offset: int
    fd: int


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    """A group's cleaned segment, written, fsynced and closed under its `.cleaned` names."""

    base_offset: int
    replaces: tuple[int, ...]  # the base offsets of the group's segments
    size_bytes: int
    bytes_before: int


@dataclass(slots=True)
class CleaningStats:
    """What a cleaning did, for LogCompacted."""

    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_before: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_rewritten: int = 0


@dataclass(slots=True)
class CleaningJob:
    """One prepared cleaning of one log (module docstring)."""

    directory: Path
    plan: CleaningPlan
    config: LogConfig
    now: WallMs
    sources: list[list[SourceSegment]]  # by group
    cleaned: list[CleanedSegment] = field(default_factory=list)
    stats: CleaningStats = field(default_factory=CleaningStats)
    closed: bool = False
    aborted: bool = False  # set by the owner's thread, read by the builder's between batches
    # The last offset of each idempotent producer's last batch in the segments cleaned (found by `build`).
    producer_last_offsets: frozenset[int] = frozenset()

    def abort(self) -> None:
        """Ask `build` to stop at its next batch (CleaningAborted); the owner then discards the job."""
        self.aborted = True

    def build(self) -> list[CleanedSegment]:
        """Build the key map over the dirty section and write every group's cleaned segment (`.cleaned` files).
        Safe on any thread: it reads its own descriptors and writes files no one else opens. Raises OSError or
        StorageError when a file cannot be read or written (the job is then to be discarded)."""
        assert not self.cleaned, "a job is built once"
        self.producer_last_offsets = self._producer_last_offsets()
        latest = self._key_map()
        for group in self.sources:
            self.cleaned.append(self._clean_group(group, latest))
        self.stats.segments_after = len(self.cleaned)
        return self.cleaned

    def _producer_last_offsets(self) -> frozenset[int]:
        """Each idempotent producer's last batch among the segments cleaned (headers only). Where a producer's
        last batch is later, in the part not cleaned, the one kept here was not needed: merely conservative."""
        last: dict[int, int] = {}
        for group in self.sources:
            for source in group:
                for header in _headers(source):
                    if header.producer_id >= 0:
                        last[header.producer_id] = header.last_offset
        return frozenset(last.values())

    # -- the key map -------------------------------------------------------------------------------------------

    def _key_map(self) -> dict[bytes, int]:
        """Kafka's `buildOffsetMap`: each key's last offset in [first dirty, first uncleanable)."""
        start, end = self.plan.first_dirty_offset, self.plan.first_uncleanable_offset
        latest: dict[bytes, int] = {}
        for group in self.sources:
            for source in group:
                if source.next_offset <= start or source.segment.base_offset >= end:
                    continue
                for _, header, data in _batches(source):
                    if self.aborted:
                        raise CleaningAborted(f"cleaning of {self.directory} aborted")
                    if header.last_offset < start or header.is_control:
                        continue
                    if header.base_offset >= end:
                        break
                    for record in _records(source, header, data):
                        if record.key is not None and start <= record.offset < end:
                            latest[record.key] = record.offset
        return latest

    # -- one group -----------------------------------------------------------------------------------------

    def _clean_group(self, group: list[SourceSegment], latest: dict[bytes, int]) -> CleanedSegment:
        base = group[0].segment.base_offset
        _remove_cleaned_files(self.directory, base)  # a leftover of an abandoned cleaning
        cleaned = LogSegment(self.directory, base, self.config, self.now, file_suffix=CLEANED_SUFFIX)
        try:
            writer = _SegmentWriter(cleaned)
            last_source = group[-1]
            for source in group:
                self.stats.segments_before += 1
                self.stats.bytes_before += source.size
                for _, header, data in _batches(source):
                    if self.aborted:
                        raise CleaningAborted(f"cleaning of {self.directory} aborted")
                    is_last = source is last_source and header.next_offset == source.next_offset
                    kept = self._clean_batch(header, data, source, latest, keep_empty=is_last)
                    if kept is not None:
                        writer.add(kept)
            writer.finish()
            cleaned.on_become_inactive()
            cleaned.flush()
            size = cleaned.size
        finally:
            cleaned.close()
        # The cleaned segment is as old as its group's newest file (Kafka sets lastModified so): retention.ms on a
        # compact,delete log must not see a cleaned segment as fresh when it holds no timestamp.
        newest = max(os.fstat(source.fd).st_mtime_ns for source in group)
        os.utime(cleaned.log_path, ns=(newest, newest))
        self.stats.bytes_after += size
        return CleanedSegment(base, tuple(s.segment.base_offset for s in group), size, sum(s.size for s in group))

    def _clean_batch(
        self,
        header: BatchHeader,
        data: bytes,
        source: SourceSegment,
        latest: dict[bytes, int],
        *,
        keep_empty: bool,
    ) -> bytes | None:
        """The batch as the cleaned segment holds it, or None when it goes (module docstring)."""
        if header.is_control:
            return data  # Hightide writes no transaction markers; one from elsewhere is kept as it is
        records = _records(source, header, data)
        self.stats.records_before += len(records)
        horizon = delete_horizon_ms(header)
        kept: list[Record] = []
        tombstone_kept = False
        for record in records:
            key = record.key
            if retain_record(
                offset=record.offset,
                has_key=key is not None,
                has_value=record.value is not None,
                latest_offset_for_key=None if key is None else latest.get(key),
                delete_horizon_ms=horizon,
                now=self.now,
            ):
                kept.append(record)
                tombstone_kept = tombstone_kept or record.value is None
            elif record.value is None and key is not None and latest.get(key, -1) <= record.offset:
                self.stats.tombstones_removed += 1
        self.stats.records_removed += len(records) - len(kept)
        new_horizon = new_delete_horizon(
            current_horizon_ms=horizon,
            retains_tombstone=tombstone_kept,
            delete_retention_ms=self.config.delete_retention_ms,
            now=self.now,
        )
        if len(kept) == len(records) and new_horizon == horizon:
            return data
        if not kept and not (keep_empty or header.last_offset in self.producer_last_offsets):
            return None
        self.stats.batches_rewritten += 1
        return rebuild_batch(header, kept, delete_horizon=new_horizon if kept else None)

    # -- giving up -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the descriptors the job read through (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for group in self.sources:
            for source in group:
                with contextlib.suppress(OSError):
                    os.close(source.fd)

    def discard(self) -> None:
        """Close the descriptors and delete every `.cleaned` file the job wrote (or began)."""
        self.close()
        for group in self.sources:
            _remove_cleaned_files(self.directory, group[0].segment.base_offset)


class _SegmentWriter:
    """Appends whole batches to a cleaned segment in chunks of about a MiB (one writev each), indexing them."""

    def __init__(self, segment: LogSegment) -> None:
        self._segment = segment
        self._buffers: list[bytes] = []
        self._batches: list[WrittenBatch] = []
        self._bytes = 0

    def add(self, batch: bytes) -> None:
        header = read_batch_header(batch)
        self._buffers.append(batch)
        self._batches.append((header.base_offset, header.last_offset, header.max_timestamp, len(batch)))
        self._bytes += len(batch)
        if self._bytes >= _WRITE_CHUNK_BYTES:
            self.finish()

    def finish(self) -> None:
        if not self._batches:
            return
        segment = self._segment
        if segment.offset_index_full or segment.time_index_full:
            # groupSegmentsBySize keeps a group's index entries within one index; a rebuilt one could still differ.
            raise StorageError(f"{segment.log_path}: the cleaned segment's index is full")
        segment.append(self._buffers, self._batches)
        self._buffers, self._batches, self._bytes = [], [], 0


def prepare_cleaning(log: PartitionLog, now: WallMs) -> CleaningJob | None:
    """Plan a cleaning of `log` at `now` (the core's rules) and open what it reads; None when the log is not
    compacted, offline, or not dirty enough. Runs on the log's owner."""
    config = log.config
    if not config.compact or log.offline:
        return None
    segments = log.segments
    summaries = [_summary(s) for s in segments]
    plan = plan_cleaning(
        summaries,
        log_start_offset=log.log_start_offset,
        checkpointed_dirty_offset=log.cleaner_checkpoint,
        high_watermark=log.high_watermark,
        settings=config.compaction_settings(),
        now=now,
    )
    if plan is None or not plan.groups:
        return None
    by_base = {s.base_offset: s for s in segments}
    sources: list[list[SourceSegment]] = []
    try:
        for group in plan.groups:
            sources.append([])
            for base in group:
                segment = by_base[base]
                fd = os.open(segment.log_path, os.O_RDONLY)
                sources[-1].append(SourceSegment(segment, segment.size, segment.next_offset, fd))
    except BaseException:
        for group_sources in sources:
            for source in group_sources:
                os.close(source.fd)
        raise
    return CleaningJob(log.directory, plan, config, now, sources)


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """A cleaning swapped in: the dirty section it cleaned, the segments it wrote, and what it removed."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    dirty_ratio: float
    segments: tuple[CleanedSegment, ...]
    stats: CleaningStats


def commit_cleaning(log: PartitionLog, job: CleaningJob, now: WallMs) -> CleaningResult | None:
    """Swap a built job's segments into `log` (on the log's owner) and move the first dirty offset to where it
    cleaned up to. None, with the job's files deleted, when the log is offline or a segment the job read was
    meanwhile deleted, truncated or replaced. A failed swap takes the log offline (DiskError)."""
    job.close()
    if log.offline or not _unchanged(log, job):
        job.discard()
        return None
    assert len(job.cleaned) == len(job.sources), "commit a built job"
    for cleaned, group in zip(job.cleaned, job.sources, strict=True):
        log.replace_segments(cleaned.base_offset, [source.segment for source in group], now)
    log.cleaner_checkpoint = job.plan.first_uncleanable_offset
    plan = job.plan
    return CleaningResult(
        plan.first_dirty_offset, plan.first_uncleanable_offset, plan.dirty_ratio, tuple(job.cleaned), job.stats
    )


def clean(log: PartitionLog, now: WallMs) -> CleaningResult | None:
    """Prepare, build and commit a cleaning of `log` in one go, on the log's owner (what tests and a small log
    need; the broker builds on a thread). None when there was nothing to clean or the cleaning gave up."""
    job = prepare_cleaning(log, now)
    if job is None:
        return None
    try:
        job.build()
    except BaseException:
        job.discard()
        raise
    return commit_cleaning(log, job, now)


def _unchanged(log: PartitionLog, job: CleaningJob) -> bool:
    current = {id(segment): segment for segment in log.segments[:-1]}
    return all(
        id(source.segment) in current
        and source.segment.size == source.size
        and source.segment.next_offset == source.next_offset
        for group in job.sources
        for source in group
    )


def _summary(segment: LogSegment) -> CleanableSegment:
    return CleanableSegment(
        segment.base_offset,
        segment.next_offset,
        segment.size,
        segment.largest_timestamp(),
        segment.rolling_based_timestamp,
        segment.offset_index.entries,
        segment.time_index.entries,
    )


def _headers(source: SourceSegment) -> Iterator[BatchHeader]:
    """The header of every batch of the source, reading headers only."""
    position = 0
    while position + BATCH_HEADER_SIZE <= source.size:
        prefix = os.pread(source.fd, BATCH_HEADER_SIZE, position)
        if len(prefix) < BATCH_HEADER_SIZE:
            raise StorageError(f"{source.segment.log_path}: batch header at {position} is cut short")
        header = _header(source, prefix, 0, position)
        yield header
        position += header.size


def _batches(source: SourceSegment) -> Iterator[tuple[int, BatchHeader, bytes]]:
    """(position, header, whole batch bytes) of every batch of the source, as it was when prepared."""
    position = 0
    end = source.size
    while position + BATCH_HEADER_SIZE <= end:
        chunk = os.pread(source.fd, min(_READ_CHUNK_BYTES, end - position), position)
        at = 0
        while at + BATCH_HEADER_SIZE <= len(chunk):
            header = _header(source, chunk, at, position + at)
            if at + header.size > len(chunk):
                if at == 0:  # a batch larger than a chunk: read it whole
                    chunk = os.pread(source.fd, header.size, position)
                    if len(chunk) < header.size:
                        raise StorageError(f"{source.segment.log_path}: batch at {position} is cut short")
                    yield position, header, chunk
                    at = header.size
                break
            yield position + at, header, chunk[at : at + header.size]
            at += header.size
        if at == 0:
            raise StorageError(f"{source.segment.log_path}: no whole batch at position {position}")
        position += at


def _header(source: SourceSegment, chunk: bytes, at: int, position: int) -> BatchHeader:
    try:
        return read_batch_header(chunk, at)
    except InvalidRecordBatch as e:
        raise StorageError(f"{source.segment.log_path}: unreadable batch at position {position}: {e}") from None


def _records(source: SourceSegment, header: BatchHeader, data: bytes) -> list[Record]:
    try:
        return decode_batch(data)[1]
    except InvalidRecordBatch as e:
        raise StorageError(f"{source.segment.log_path}: batch at offset {header.base_offset}: {e}") from None


def _remove_cleaned_files(directory: Path, base_offset: int) -> None:
    for path in segment_paths(directory, base_offset, CLEANED_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


__all__ = [
    "CleanedSegment",
    "CleaningAborted",
    "CleaningJob",
    "CleaningResult",
    "CleaningStats",
    "SourceSegment",
    "clean",
    "commit_cleaning",
    "prepare_cleaning",
]
