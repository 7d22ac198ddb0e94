"""A broker's disk in memory: a log per partition, its checkpoint files, and the ways a disk fails. The simulator's
disk, and the replica manager's in its unit tests.

It is what the simulator fakes, and all it fakes: it carries out the replica manager's storage effects the way the
storage engine does (whole batches, offsets stamped by a leader append, truncation of whole batches, the log start
moving by whole batches, the high watermark checkpointed only when asked), answers the manager's reads (the
`LogReader` queries), survives a crash (a lossy one cuts each log back to somewhere between its last flush and its
end), and can refuse a write, as a full or broken disk does: the manager must then take the replica offline.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

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
from hightide.protocol.records import BatchHeader, decode_batches, iter_batch_headers
from support.memory_replica import MemoryLog, _stamp

OVERSIZED_BYTES = 150


class DiskFailure(StorageRefusal):
    """The disk refused a write (full, failing, or an append it must never make)."""


@dataclass
class DiskLog:
    """One partition's files: the log, `partition.metadata`'s topic id, and the checkpoints as last written."""

    log: MemoryLog
    topic_id: str | None
    configs: dict[str, str] = field(default_factory=dict)
    high_watermark: int = 0  # the log's in-memory HW (what the manager last set)
    checkpointed_high_watermark: int = 0  # replication-offset-checkpoint, written by CheckpointHighWatermarks
    epoch_checkpoint: tuple[tuple[int, int], ...] = ()
    flushed_end: int = 0  # everything below is on disk: a lossy crash keeps at least this much


@dataclass
class MemoryDisk:
    broker_id: int
    rng: random.Random
    logs: dict[TopicPartition, DiskLog] = field(default_factory=dict)
    retention_probability: float = 0.0  # per retention check and log: delete a committed prefix
    # A disk fault: "full" refuses what would take space (appends, new logs), "failing" every write, "oversized"
    # appends larger than OVERSIZED_BYTES (as a follower whose segment.bytes is smaller than its leader's batches).
    fault: str | None = None

    # -- the storage effects -------------------------------------------------------------------------------------

    def apply(self, effect: StorageEffect | CheckpointHighWatermarks, now_ms: WallMs) -> StorageOutcome:
        """Carry out one storage effect; DiskFailure if the disk refuses it."""
        if isinstance(effect, CheckpointHighWatermarks):
            self.checkpoint_high_watermarks()
            return StorageOutcome()
        tp = TopicPartition(effect.topic, effect.partition)
        self._check_fault(effect)
        match effect:
            case CreateLog(topic_id=topic_id, configs=configs):
                existing = self.logs.get(tp)
                if existing is None:
                    self.logs[tp] = DiskLog(MemoryLog(), topic_id, dict(configs))
                elif existing.topic_id is None:
                    existing.topic_id = topic_id
            case DeleteLog():
                self.logs.pop(tp, None)
            case UpdateLogConfig(configs=configs):
                self._log(tp).configs = dict(configs)
            case AppendAsLeader(records=records, base_offset=base, leader_epoch=epoch):
                disk = self._log(tp)
                self._check_continues(tp, disk, base)
                disk.log.append(_stamp(records, base, epoch))
            case AppendAsFollower(records=records, headers=headers):
                disk = self._log(tp)
                self._check_continues(tp, disk, headers[0].base_offset)
                disk.log.append(records)
            case Truncate(offset=offset):
                disk = self._log(tp)
                disk.log.truncate(offset)
                disk.high_watermark = min(disk.high_watermark, disk.log.end_offset)
                disk.flushed_end = min(disk.flushed_end, disk.log.end_offset)
            case TruncateFullyAndStartAt(offset=offset):
                disk = self._log(tp)
                disk.log = MemoryLog(start_offset=offset)
                disk.high_watermark = disk.flushed_end = offset
            case AdvanceLogStartOffset(offset=offset):
                self._log(tp).log.advance_start(offset)
            case UpdateHighWatermark(high_watermark=high_watermark):
                self._log(tp).high_watermark = high_watermark
            case WriteEpochCheckpoint(entries=entries):
                self._log(tp).epoch_checkpoint = entries
            case EnforceRetention():
                return StorageOutcome(log_start_offset=self._retention(tp))
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
    def _check_continues(tp: TopicPartition, disk: DiskLog, base_offset: int) -> None:
        """The storage engine refuses an append that would leave a gap or overlap the log."""
        if base_offset != disk.log.end_offset:
            raise DiskFailure(
                f"{tp.topic}-{tp.partition}: an append at {base_offset} does not continue the log at "
                f"{disk.log.end_offset}"
            )

    def _retention(self, tp: TopicPartition) -> int | None:
        """Retention as the storage engine does it: whole batches wholly below the HW go, the log start offset
        moves to the first one kept."""
        disk = self._log(tp)
        if self.retention_probability <= 0 or self.rng.random() >= self.retention_probability:
            return None
        log = disk.log
        boundaries = [b for b in _batch_ends(log) if log.start_offset < b <= disk.high_watermark]
        if not boundaries:
            return None
        start = self.rng.choice(boundaries)
        log.advance_start(start)
        return start

    def checkpoint_high_watermarks(self) -> None:
        if self.fault == "failing":
            raise DiskFailure(f"disk of broker {self.broker_id} is failing: the HW checkpoint refused")
        for disk in self.logs.values():
            disk.checkpointed_high_watermark = disk.high_watermark

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
        return [header for _, header in iter_batch_headers(b"".join(self.logs[tp].log.batches))]

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> tuple[int, int] | None:
        for _, records in decode_batches(b"".join(self.logs[tp].log.batches)):
            for record in records:
                if record.timestamp >= timestamp:
                    return record.timestamp, record.offset
        return None

    # -- crashes -------------------------------------------------------------------------------------------------

    def crash(self, lossy: bool) -> dict[TopicPartition, int]:
        """A crash: a lossy one cuts each log at a random batch boundary at or after its last flush (the page cache
        is lost). Returns how many records each log lost."""
        lost: dict[TopicPartition, int] = {}
        if not lossy:
            return lost
        for tp, disk in self.logs.items():
            end = disk.log.end_offset
            boundaries = [b for b in _batch_ends(disk.log) if b >= disk.flushed_end]
            cut = self.rng.choice(boundaries) if boundaries else end
            if cut < end:
                lost[tp] = end - cut
                disk.log.truncate(cut)
        return lost

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


def _batch_ends(log: MemoryLog) -> list[int]:
    """Every offset at which the log could end after a cut: its start and each batch's end."""
    ends = [log.start_offset]
    for batch in log.batches:
        for _, header in iter_batch_headers(batch):
            ends.append(header.next_offset)
    return ends
