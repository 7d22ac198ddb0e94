"""A broker's disk in memory: a segmented log per partition, its checkpoint files, and the ways a disk fails. The
simulator's disk, and the replica manager's in its unit tests.

It is what the simulator fakes, and all it fakes: it carries out the replica manager's storage effects the way the
storage engine (libs/storage) does, with the engine's own rules from libs/core, and answers the manager's reads (the
`LogReader` queries).

- A log is segments of whole batches (base offset, batches, size, creation time, the first batch's timestamp the
  roll rule reads, the largest timestamp retention reads). An append rolls when `hightide.core.rolling.roll_reason`
  says so at the broker's wall time of the append; a follower's fetched set larger than segment.bytes rolls between
  batches, and a single batch larger than segment.bytes is refused, as the engine does.
- Retention (`EnforceRetention`) deletes whole segments as `hightide.core.retention.plan_retention` plans them at
  the effect's wall time (only wholly below the HW), and reports the new log start offset; `AdvanceLogStartOffset`
  deletes the segments wholly below the new start. What the engine does on its own is reported as the broker's
  storage shell reports it (services/broker/.../storage.py): SegmentRolled and SegmentDeleted events in the
  `StorageOutcome`, so a history rebuilt from the simulator sees the same kinds of events as from a broker.
- Truncation removes whole batches (and the segments above the point); a log emptied below its first segment
  starts over. Offsets are stamped by a leader append; the HW is checkpointed only when asked.
- Topic configs (Kafka's names: segment.bytes, segment.ms, segment.jitter.ms, retention.ms, retention.bytes) come
  with CreateLog and UpdateLogConfig, over this disk's broker defaults (Kafka's when none). A crash forgets them, as
  the engine opens logs with the broker's defaults until the manager gives the topic's again.
- A crash (a lossy one cuts each log back to somewhere between its last flush and its end) keeps the rest; a disk
  can refuse a write, as a full or broken disk does: the manager must then take the replica offline.

Every retention run is kept (`retention_runs`: the segments before and after, the log start, the HW and the broker's
wall clock when it ran), for the simulator's `retention_honoured` invariant to judge; whoever reads them drains them.
"""

from __future__ import annotations

import dataclasses
import random
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Final

from hightide.core.clock import WallMs
from hightide.core.effects import (
    AdvanceLogStartOffset,
    AppendAsFollower,
    AppendAsLeader,
    CheckpointHighWatermarks,
    CreateLog,
    DeleteLog,
    EnforceRetention,
    StorageEffect,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    UpdateLogConfig,
    WriteEpochCheckpoint,
)
from hightide.core.metadata_image import TopicPartition
from hightide.core.replica_manager import LogReadError, LogState, StorageOutcome, StorageRefusal
from hightide.core.retention import (
    RetentionPlan,
    SegmentSummary,
    plan_log_start_offset_retention,
    plan_retention,
)
from hightide.core.rolling import roll_jitter_ms, roll_reason
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.records import BatchHeader, decode_batch, iter_batch_headers
from support.memory_replica import _stamp

OVERSIZED_BYTES = 150
Record = tuple[int, bytes, int]  # (offset, value, leader epoch of its batch)
Batch = tuple[bytes, BatchHeader]
_DAY_MS: Final = 24 * 60 * 60 * 1000


class DiskFailure(StorageRefusal):
    """The disk refused a write (full, failing, or an append it must never make)."""


@dataclass(frozen=True, slots=True)
class MemoryLogConfig:
    """The topic configs the log obeys, with Kafka's defaults (LogConfig.java)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * _DAY_MS
    segment_jitter_ms: int = 0
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1

    @classmethod
    def from_configs(cls, defaults: Mapping[str, str], topic_configs: Mapping[str, str]) -> MemoryLogConfig:
        """The broker's defaults overridden by the topic's own configs (Kafka's dotted names; the topic configs
        that are not the log's, such as min.insync.replicas, are not read here)."""
        merged = {**defaults, **topic_configs}
        dotted = {f.name: f.name.replace("_", ".") for f in dataclasses.fields(cls)}
        return cls(**{name: int(merged[key]) for name, key in dotted.items() if key in merged})


@dataclass(slots=True)
class MemorySegment:
    """One segment: whole batches from `base_offset`, and what the roll rule (`hightide.core.rolling.ActiveSegment`)
    and retention read of it. There is no index in memory, so neither index is ever full."""

    base_offset: int
    created_ms: WallMs  # when created, or emptied by a truncation
    roll_jitter_ms: int
    modified_ms: WallMs  # the file's modification time: Kafka's largest timestamp of a segment without timestamps
    batches: list[Batch] = field(default_factory=list)
    size: int = 0
    rolling_based_timestamp: int | None = None  # the first batch's max timestamp
    max_timestamp: int = -1
    offset_index_full: bool = False
    time_index_full: bool = False

    @property
    def next_offset(self) -> int:
        return self.batches[-1][1].next_offset if self.batches else self.base_offset

    def append(self, batches: Sequence[Batch], now: WallMs) -> None:
        assert batches and batches[0][1].base_offset >= self.next_offset, (batches[0][1], self.next_offset)
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = batches[0][1].max_timestamp
        for batch, header in batches:
            self.batches.append((batch, header))
            self.size += len(batch)
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        self.modified_ms = now

    def remove_from(self, offset: int) -> None:
        """Remove the batch holding `offset` and every batch after it."""
        while self.batches and self.batches[-1][1].last_offset >= offset:
            batch, _ = self.batches.pop()
            self.size -= len(batch)
        self.max_timestamp = max((header.max_timestamp for _, header in self.batches), default=-1)
        if not self.batches:
            self.rolling_based_timestamp = None

    def largest_timestamp(self) -> int:
        """Kafka's `LogSegment.largestTimestamp`: the largest record timestamp, else the modification time."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.modified_ms

    def summary(self) -> SegmentSummary:
        return SegmentSummary(self.base_offset, self.next_offset, self.size, self.largest_timestamp())

    def image(self) -> SegmentImage:
        return SegmentImage(self.base_offset, tuple(header for _, header in self.batches), self.modified_ms)


@dataclass(frozen=True, slots=True)
class SegmentImage:
    """What a segment held at one instant: its base offset, its batches' headers and its modification time."""

    base_offset: int
    headers: tuple[BatchHeader, ...]
    modified_ms: int


@dataclass(frozen=True, slots=True)
class RetentionRun:
    """One EnforceRetention as this disk carried it out. `wall_ms` is the broker's wall clock when it ran (the time
    a correct replica manager puts in the effect); `retention_ms` and `retention_bytes` are the log's configs."""

    tp: TopicPartition
    wall_ms: WallMs
    high_watermark: int
    log_start_offset_before: int
    log_start_offset_after: int
    retention_ms: int
    retention_bytes: int
    before: tuple[SegmentImage, ...]
    after: tuple[SegmentImage, ...]


class SegmentedLog:
    """One partition's log as the storage engine keeps it: segments oldest first (the last one active, never none),
    the log start offset, the HW as the manager last set it, and every record at or above the log start, decoded
    once as it arrives (what the simulator compares)."""

    def __init__(self, config: MemoryLogConfig, now: WallMs, start_offset: int = 0) -> None:
        self.config = config
        self.segments = [self._new_segment(start_offset, now)]
        self.start_offset = start_offset
        self.high_watermark = start_offset
        self.entries: list[Record] = []

    def _new_segment(self, base_offset: int, now: WallMs) -> MemorySegment:
        return MemorySegment(base_offset, now, roll_jitter_ms(base_offset, self.config.segment_jitter_ms), now)

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset

    def batches(self) -> Iterator[Batch]:
        """Every batch holding an offset at or above the log start offset, in offset order."""
        for segment in self.segments:
            if segment.next_offset <= self.start_offset:
                continue
            for batch in segment.batches:
                if batch[1].last_offset >= self.start_offset:
                    yield batch

    # -- appends -------------------------------------------------------------------------------------------------

    def append(self, runs: Sequence[Sequence[Batch]], now: WallMs) -> list[int]:
        """Append runs of batches, each into one segment, rolling first when the roll rule says so; the base offsets
        of the segments started."""
        rolled: list[int] = []
        for run in runs:
            first, last = run[0][1], run[-1][1]
            assert first.base_offset == self.end_offset, (first.base_offset, self.end_offset)
            size = sum(len(batch) for batch, _ in run)
            max_timestamp = max(header.max_timestamp for _, header in run)
            reason = roll_reason(
                self.segments[-1],
                size,
                max_timestamp,
                last.last_offset,
                segment_bytes=self.config.segment_bytes,
                segment_ms=self.config.segment_ms,
                now=now,
            )
            if reason is not None and self._roll(now) is not None:
                rolled.append(self.segments[-1].base_offset)
            self.segments[-1].append(run, now)
            for batch, header in run:
                _, records = decode_batch(batch)
                epoch = header.partition_leader_epoch
                self.entries.extend((r.offset, r.value or b"", epoch) for r in records)
        return rolled

    def follower_runs(self, batches: Sequence[Batch]) -> list[list[Batch]]:
        """A follower's fetched set cut into runs of at most segment.bytes (usually one run); DiskFailure for a batch
        larger than segment.bytes (RECORD_LIST_TOO_LARGE), as the engine refuses it."""
        limit = self.config.segment_bytes
        runs: list[list[Batch]] = [[]]
        size = 0
        for batch, header in batches:
            if len(batch) > limit:
                raise DiskFailure(
                    f"the batch at offset {header.base_offset}: {len(batch)} bytes exceed segment.bytes {limit}",
                    ErrorCode.RECORD_LIST_TOO_LARGE,
                )
            if runs[-1] and size + len(batch) > limit:
                runs.append([])
                size = 0
            runs[-1].append((batch, header))
            size += len(batch)
        return runs

    def _roll(self, now: WallMs) -> MemorySegment | None:
        """Start a new active segment at the LEO (not when the active one is empty there already)."""
        active = self.segments[-1]
        if active.size == 0 and active.base_offset == self.end_offset:
            return None
        segment = self._new_segment(self.end_offset, now)
        self.segments.append(segment)
        return segment

    # -- truncation ----------------------------------------------------------------------------------------------

    def truncate_to(self, offset: int, now: WallMs) -> tuple[list[MemorySegment], MemorySegment | None]:
        """Remove every batch holding an offset >= `offset`: the segments deleted, and the one started when the
        point is below the first segment (the log starts over there)."""
        if offset >= self.end_offset:
            return [], None
        if offset < self.segments[0].base_offset:
            return self.truncate_fully_and_start_at(offset, now)
        deleted = self.cut_back(offset)
        active = self.segments[-1]
        active.modified_ms = now
        if active.size == 0:
            active.created_ms = now
        return deleted, None

    def cut_back(self, offset: int) -> list[MemorySegment]:
        """Remove the batches from the one holding `offset` on, and the segments above it; the segments deleted."""
        deleted: list[MemorySegment] = []
        while len(self.segments) > 1 and self.segments[-1].base_offset > offset:
            deleted.insert(0, self.segments.pop())
        self.segments[-1].remove_from(offset)
        end = self.end_offset
        self.start_offset = min(self.start_offset, end)
        self.high_watermark = min(self.high_watermark, end)
        while self.entries and self.entries[-1][0] >= end:
            self.entries.pop()
        return deleted

    def truncate_fully_and_start_at(self, offset: int, now: WallMs) -> tuple[list[MemorySegment], MemorySegment]:
        deleted = self.segments
        self.segments = [self._new_segment(offset, now)]
        self.start_offset = self.high_watermark = offset
        self.entries = []
        return deleted, self.segments[0]

    # -- the log start offset and retention ----------------------------------------------------------------------

    def advance_start(self, offset: int) -> list[tuple[MemorySegment, str]]:
        """The log start offset moves up to `offset` (never past the HW) and the segments wholly below it go."""
        assert offset <= self.high_watermark, (offset, self.high_watermark)
        if offset <= self.start_offset:
            return []
        self._set_start(offset)
        plan = plan_log_start_offset_retention(
            self._summaries(), log_start_offset=offset, high_watermark=self.high_watermark
        )
        assert not plan.roll_first, plan  # the active segment is never wholly below the log start
        deleted, _ = self._carry_out(plan, None)
        return deleted

    def delete_old_segments(self, now: WallMs) -> tuple[list[tuple[MemorySegment, str]], MemorySegment | None]:
        """Kafka's retention at wall time `now`, as the core's rule plans it: the segments deleted (with the pass
        that deleted each), and the empty segment started first when every segment went."""
        plan = plan_retention(
            self._summaries(),
            log_start_offset=self.start_offset,
            high_watermark=self.high_watermark,
            retention_ms=self.config.retention_ms,
            retention_bytes=self.config.retention_bytes,
            now=now,
        )
        return self._carry_out(plan, now)

    def _summaries(self) -> list[SegmentSummary]:
        return [segment.summary() for segment in self.segments]

    def _carry_out(
        self, plan: RetentionPlan, now: WallMs | None
    ) -> tuple[list[tuple[MemorySegment, str]], MemorySegment | None]:
        count = len(plan.deletions)
        if count == 0:
            return [], None
        doomed = self.segments[:count]
        assert [s.base_offset for s in doomed] == [d.segment.base_offset for d in plan.deletions], plan
        rolled = None
        if plan.roll_first:
            assert now is not None
            rolled = self._roll(now)
        self._set_start(plan.log_start_offset)
        del self.segments[:count]
        return [(s, str(d.reason)) for s, d in zip(doomed, plan.deletions, strict=True)], rolled

    def _set_start(self, offset: int) -> None:
        self.start_offset = max(self.start_offset, offset)
        del self.entries[: bisect_left(self.entries, self.start_offset, key=itemgetter(0))]

    # -- reads ---------------------------------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_offset: int, max_bytes: int, min_one_batch: bool) -> bytes:
        """Whole batches from the one holding `fetch_offset`, from that one segment only (as Kafka's read): at most
        `max_bytes` (at least one batch when `min_one_batch`, KIP-74), none reaching `max_offset`."""
        if not self.start_offset <= fetch_offset <= self.end_offset:
            raise LogReadError(f"offset {fetch_offset} is outside [{self.start_offset}, {self.end_offset}]")
        if fetch_offset == self.end_offset or fetch_offset >= max_offset:
            return b""
        for segment in self.segments:
            if segment.next_offset <= fetch_offset:
                continue
            chosen: list[bytes] = []
            length = 0
            for batch, header in segment.batches:
                if header.last_offset < fetch_offset:
                    continue
                if header.last_offset >= max_offset:
                    break
                if length + len(batch) > max_bytes and not (min_one_batch and length == 0):
                    break
                chosen.append(batch)
                length += len(batch)
                if length >= max_bytes:
                    break
            return b"".join(chosen)
        return b""

    def batch_start(self, offset: int) -> int:
        """The base offset of the batch holding `offset` (the offset itself at or past the ends)."""
        if offset >= self.end_offset or offset <= self.start_offset:
            return offset
        for _, header in self.batches():
            if header.base_offset <= offset <= header.last_offset:
                return min(header.base_offset, offset)
        return offset


@dataclass
class DiskLog:
    """One partition's files: the segmented log, `partition.metadata`'s topic id, the topic's configs as the manager
    gave them, and the checkpoints as last written."""

    log: SegmentedLog
    topic_id: str | None
    configs: dict[str, str] = field(default_factory=dict)
    checkpointed_high_watermark: int = 0  # replication-offset-checkpoint, written by CheckpointHighWatermarks
    epoch_checkpoint: tuple[tuple[int, int], ...] = ()
    flushed_end: int = 0  # everything below is on disk: a lossy crash keeps at least this much


@dataclass
class MemoryDisk:
    broker_id: int
    rng: random.Random
    logs: dict[TopicPartition, DiskLog] = field(default_factory=dict)
    defaults: Mapping[str, str] = field(default_factory=dict)  # the broker's log configs (Kafka's names)
    # A disk fault: "full" refuses what would take space (appends, new logs), "failing" every write, "oversized"
    # appends larger than OVERSIZED_BYTES (as a follower whose segment.bytes is smaller than its leader's batches).
    fault: str | None = None
    retention_runs: list[RetentionRun] = field(default_factory=list)
    # The log dir's `directory.id` (meta.properties, KIP-858); a wiped disk comes back with another (branch i13-elr).
    directory_id: str = ""
    wipes: int = 0

    # -- the storage effects -------------------------------------------------------------------------------------

    def apply(self, effect: StorageEffect | CheckpointHighWatermarks, now_ms: WallMs) -> StorageOutcome:
        """Carry out one storage effect at the broker's wall time `now_ms`; DiskFailure if the disk refuses it."""
        if isinstance(effect, CheckpointHighWatermarks):
            self.checkpoint_high_watermarks()
            return StorageOutcome()
        tp = TopicPartition(effect.topic, effect.partition)
        self._check_fault(effect)
        match effect:
            case CreateLog(topic_id=topic_id, configs=configs):
                existing = self.logs.get(tp)
                if existing is None:
                    log = SegmentedLog(MemoryLogConfig.from_configs(self.defaults, configs), now_ms)
                    self.logs[tp] = DiskLog(log, topic_id, dict(configs))
                elif existing.topic_id is None:
                    existing.topic_id = topic_id
            case DeleteLog():
                self.logs.pop(tp, None)
            case UpdateLogConfig(configs=configs):
                disk = self._log(tp)
                disk.configs = dict(configs)
                disk.log.config = MemoryLogConfig.from_configs(self.defaults, configs)
            case AppendAsLeader(records=records, base_offset=base, leader_epoch=epoch):
                log = self._log(tp).log
                self._check_continues(tp, log, base)
                if len(records) > log.config.segment_bytes:  # validated under another config, before it changed
                    raise DiskFailure(
                        f"{tp.topic}-{tp.partition}: the batches: {len(records)} bytes exceed segment.bytes "
                        f"{log.config.segment_bytes}",
                        ErrorCode.RECORD_LIST_TOO_LARGE,
                    )
                rolled = log.append([_batches(_stamp(records, base, epoch))], now_ms)
                return StorageOutcome(self._rolled(tp, rolled, "append"))
            case AppendAsFollower(records=records, headers=headers):
                log = self._log(tp).log
                self._check_continues(tp, log, headers[0].base_offset)
                rolled = log.append(log.follower_runs(_batches(records)), now_ms)
                return StorageOutcome(self._rolled(tp, rolled, "append"))
            case Truncate(offset=offset):
                disk = self._log(tp)
                deleted, started = disk.log.truncate_to(offset, now_ms)
                disk.flushed_end = min(disk.flushed_end, disk.log.end_offset)
                return StorageOutcome(self._truncated(tp, deleted, started))
            case TruncateFullyAndStartAt(offset=offset):
                disk = self._log(tp)
                deleted, started = disk.log.truncate_fully_and_start_at(offset, now_ms)
                disk.flushed_end = offset
                return StorageOutcome(self._truncated(tp, deleted, started))
            case AdvanceLogStartOffset(offset=offset):
                log = self._log(tp).log
                if offset > log.high_watermark:  # the engine's OFFSET_OUT_OF_RANGE: the start never passes the HW
                    raise DiskFailure(
                        f"{tp.topic}-{tp.partition}: log start {offset} above the HW {log.high_watermark}",
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                    )
                return StorageOutcome(tuple(self._deleted(tp, s, reason) for s, reason in log.advance_start(offset)))
            case UpdateHighWatermark(high_watermark=high_watermark):
                log = self._log(tp).log
                # Clamped to [log start, LEO] as the engine (and Kafka) do.
                log.high_watermark = min(max(high_watermark, log.start_offset), log.end_offset)
            case WriteEpochCheckpoint(entries=entries):
                self._log(tp).epoch_checkpoint = entries
            case EnforceRetention(now_ms=retention_now):
                return self._retention(tp, retention_now, now_ms)
        return StorageOutcome()

    def _check_fault(self, effect: StorageEffect) -> None:
        if self.fault is None or isinstance(effect, UpdateHighWatermark):  # the HW lives in memory until checkpointed
            return
        takes_space = isinstance(effect, AppendAsLeader | AppendAsFollower | CreateLog)
        too_large = isinstance(effect, AppendAsLeader | AppendAsFollower) and len(effect.records) > OVERSIZED_BYTES
        if (
            self.fault == "failing"
            or (self.fault == "full" and takes_space)
            or (self.fault == "oversized" and too_large)
        ):
            raise DiskFailure(f"disk of broker {self.broker_id} is {self.fault}: {type(effect).__name__} refused")

    def _log(self, tp: TopicPartition) -> DiskLog:
        disk = self.logs.get(tp)
        if disk is None:
            raise DiskFailure(f"{tp.topic}-{tp.partition}: no such log")
        return disk

    @staticmethod
    def _check_continues(tp: TopicPartition, log: SegmentedLog, base_offset: int) -> None:
        """The storage engine refuses an append that would leave a gap or overlap the log."""
        if base_offset != log.end_offset:
            raise DiskFailure(
                f"{tp.topic}-{tp.partition}: an append at {base_offset} does not continue the log at {log.end_offset}",
                ErrorCode.INVALID_RECORD,
            )

    def _retention(self, tp: TopicPartition, retention_now: WallMs, wall_ms: WallMs) -> StorageOutcome:
        """Kafka's retention at the effect's wall time, as the broker's storage shell runs it: the segments deleted
        (SegmentDeleted), the empty one started when all went (SegmentRolled), the log start if it moved."""
        log = self._log(tp).log
        start, before = log.start_offset, tuple(segment.image() for segment in log.segments)
        deleted, rolled = log.delete_old_segments(retention_now)
        self.retention_runs.append(
            RetentionRun(
                tp,
                wall_ms,
                log.high_watermark,
                start,
                log.start_offset,
                log.config.retention_ms,
                log.config.retention_bytes,
                before,
                tuple(segment.image() for segment in log.segments),
            )
        )
        reported: list[Event] = [self._deleted(tp, segment, reason) for segment, reason in deleted]
        if rolled is not None:
            reported.append(self._segment_rolled(tp, rolled.base_offset, "retention"))
        return StorageOutcome(tuple(reported), log.start_offset if log.start_offset > start else None)

    # -- what the engine reports ---------------------------------------------------------------------------------

    def _rolled(self, tp: TopicPartition, base_offsets: Iterable[int], reason: str) -> tuple[Event, ...]:
        return tuple(self._segment_rolled(tp, base_offset, reason) for base_offset in base_offsets)

    def _truncated(
        self, tp: TopicPartition, deleted: Iterable[MemorySegment], started: MemorySegment | None
    ) -> tuple[Event, ...]:
        reported: list[Event] = [self._deleted(tp, segment, "truncation") for segment in deleted]
        if started is not None:
            reported.append(self._segment_rolled(tp, started.base_offset, "truncation"))
        return tuple(reported)

    def _segment_rolled(self, tp: TopicPartition, base_offset: int, reason: str) -> events.SegmentRolled:
        return events.SegmentRolled(
            topic=tp.topic, partition=tp.partition, replica=self.broker_id, base_offset=base_offset, reason=reason
        )

    def _deleted(self, tp: TopicPartition, segment: MemorySegment, reason: str) -> events.SegmentDeleted:
        return events.SegmentDeleted(
            topic=tp.topic,
            partition=tp.partition,
            replica=self.broker_id,
            base_offset=segment.base_offset,
            next_offset=segment.next_offset,
            size_bytes=segment.size,
            reason=reason,
        )

    # -- checkpoints and flushes ---------------------------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> None:
        if self.fault == "failing":
            raise DiskFailure(f"disk of broker {self.broker_id} is failing: the HW checkpoint refused")
        for disk in self.logs.values():
            disk.checkpointed_high_watermark = disk.log.high_watermark

    def flush(self) -> None:
        for disk in self.logs.values():
            disk.flushed_end = disk.log.end_offset

    # -- the reads (the manager's LogReader) -----------------------------------------------------------------------

    def read(
        self, tp: TopicPartition, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes:
        disk = self.logs.get(tp)
        if disk is None:
            raise LogReadError(f"{tp.topic}-{tp.partition}: no such log")
        return disk.log.read(fetch_offset, max_offset, max_bytes, min_one_batch)

    def batch_start(self, tp: TopicPartition, offset: int) -> int:
        return self.logs[tp].log.batch_start(offset)

    def batch_headers(self, tp: TopicPartition) -> Iterable[BatchHeader]:
        return [header for _, header in self.logs[tp].log.batches()]

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> tuple[int, int] | None:
        log = self.logs[tp].log
        for batch, header in log.batches():
            if header.max_timestamp < timestamp:
                continue
            for record in decode_batch(batch)[1]:
                if record.timestamp >= timestamp and record.offset >= log.start_offset:
                    return record.timestamp, record.offset
        return None

    def max_timestamp_offset(self, tp: TopicPartition) -> tuple[int, int] | None:
        log = self.logs[tp].log
        best: tuple[int, bytes] | None = None  # the first batch that reached the largest max timestamp
        for batch, header in log.batches():
            if header.max_timestamp >= 0 and (best is None or header.max_timestamp > best[0]):
                best = (header.max_timestamp, batch)
        if best is None:
            return None
        for record in decode_batch(best[1])[1]:
            if record.timestamp >= best[0] and record.offset >= log.start_offset:
                return record.timestamp, record.offset
        return None

    # -- crashes -------------------------------------------------------------------------------------------------

    def crash(self, lossy: bool) -> dict[TopicPartition, int]:
        """The process ends: the logs' configs are forgotten (the next process opens them with the broker's
        defaults), and a lossy crash cuts each log at a random batch boundary at or after its last flush (the page
        cache is lost). Returns how many records each log lost."""
        for disk in self.logs.values():
            disk.log.config = MemoryLogConfig.from_configs(self.defaults, {})
        lost: dict[TopicPartition, int] = {}
        if not lossy:
            return lost
        for tp, disk in self.logs.items():
            log = disk.log
            end = log.end_offset
            boundaries = [log.start_offset] + [h.next_offset for _, h in log.batches()]
            cut = self.rng.choice([b for b in boundaries if b >= disk.flushed_end] or [end])
            if cut < end:
                lost[tp] = end - cut
                log.cut_back(cut)  # what recovery finds: the files cut, no truncation of the replica layer's
        return lost

    def wipe(self) -> None:
        """The disk is wiped or replaced while its broker is down: no log is left, and the log dir is a new one
        (a new directory id, as a fresh meta.properties gives)."""
        self.logs.clear()
        self.wipes += 1
        self.directory_id = f"broker-{self.broker_id}-dir-{self.wipes}"

    def log_states(self) -> list[LogState]:
        """What a restarted broker finds: each log, its topic id and its checkpoints."""
        return [
            LogState(
                tp,
                disk.topic_id,
                disk.log.start_offset,
                disk.log.end_offset,
                disk.checkpointed_high_watermark,
                disk.epoch_checkpoint,
            )
            for tp, disk in sorted(self.logs.items())
        ]


def _batches(records: bytes) -> list[Batch]:
    return [(records[position : position + header.size], header) for position, header in iter_batch_headers(records)]
