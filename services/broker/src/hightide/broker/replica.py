"""One hosted replica: the pure Partition core over its log on disk, and the effects carried out in order.

Room: services/broker (wiring). The core decides; this applies its effects to the storage engine in list order
(persist, then announce): appends and truncations go to the PartitionLog, the leader-epoch checkpoint is rewritten
when the cache changes, the HW goes to the log (checkpointed by the broker periodically), and fetch answers are
filled with raw whole batches read from the segment files. Sends, produce completions and events are handed
back to the broker, which owns NATS.

At start the core is rebuilt from what the disk holds, as Kafka's LogManager and Partition do after recovery:
the log's offsets, the HW checkpoint clamped into [log start, LEO], and the epoch checkpoint cut at the LEO.

What the storage engine does on its own is reported here, next to the core's events and in the same order:
a segment rolled by an append (SegmentRolled), segments removed by a truncation (SegmentDeleted, and the
SegmentRolled of the fresh one when the log was emptied), and retention (`run_retention`: SegmentDeleted for
each segment, then the core's LogStartOffsetAdvanced).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from hightide.core.clock import WallMs
from hightide.core.effects import (
    AppendAsFollower,
    AppendAsLeader,
    CompleteProduce,
    Effect,
    Emit,
    Send,
    ServeFetch,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    WriteEpochCheckpoint,
)
from hightide.core.epoch_cache import EpochEntry, LeaderEpochCache
from hightide.core.partition import Partition, PartitionConfig
from hightide.core.producer_state import ProducerStateTable
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.messages import BatchSummary, FetchResponsePartition
from hightide.protocol.records import BatchHeader, iter_batch_headers
from hightide.storage import checkpoint
from hightide.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from hightide.storage.errors import StorageError
from hightide.storage.log import DeletedSegment, PartitionLog
from hightide.storage.segment import LogSegment

# The storage engine's reasons for deleting a segment, as the catalogue spells them.
_DELETION_REASONS: Final = {
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "log start offset": "log_start_offset",
}


@dataclass
class Outputs:
    """What carrying out effects produced for the broker to deliver."""

    sends: list[Send] = field(default_factory=list)
    completions: list[CompleteProduce] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    fetch_answers: list[FetchResponsePartition] = field(default_factory=list)
    appended: bool = False
    high_watermark_moved: bool = False


class DiskReplica:
    def __init__(self, core: Partition, log: PartitionLog) -> None:
        self.core = core
        self.log = log
        self._epoch_file = LeaderEpochCheckpointFile(log.directory / LEADER_EPOCH_CHECKPOINT)
        self.producers = ProducerStateTable()

    @classmethod
    def open(
        cls, log: PartitionLog, broker_id: int, config: PartitionConfig, checkpointed_high_watermark: int
    ) -> DiskReplica:
        tp = log.topic_partition
        epoch_file = LeaderEpochCheckpointFile(log.directory / LEADER_EPOCH_CHECKPOINT)
        cache = LeaderEpochCache(EpochEntry(e.epoch, e.start_offset) for e in epoch_file.read())
        cache.truncate_from_end(log.log_end_offset)
        cache.truncate_from_start(log.log_start_offset)
        high_watermark = min(max(checkpointed_high_watermark, log.log_start_offset), log.log_end_offset)
        log.update_high_watermark(high_watermark)
        core = Partition(
            tp.topic,
            tp.partition,
            broker_id,
            config,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            high_watermark=high_watermark,
            epoch_cache=cache,
        )
        replica = cls(core, log)
        replica._write_epochs(tuple((e.epoch, e.start_offset) for e in cache.entries))
        return replica

    def validate(self, records: bytes) -> list[BatchHeader]:
        """A producer's batches checked before the core sees them (StorageError with the Kafka code if bad)."""
        return self.log.validate_client_batches(records)

    def apply(self, effects: list[Effect], now_ms: int, validated: list[BatchHeader] | None = None) -> Outputs:
        out = Outputs()
        # FIXME(issue 11, item 4): storage takes wall-clock time; the broker still passes its monotonic clock.
        wall = WallMs(now_ms)
        for effect in effects:
            match effect:
                case AppendAsLeader(records=records, base_offset=base, leader_epoch=epoch):
                    info = self.log.append_as_leader(records, epoch, wall, validated=validated)
                    assert info.first_offset == base, (info, base)
                    out.appended = True
                    out.events += [self._rolled(rolled, "append") for rolled in info.rolled_to]
                case AppendAsFollower(records=records):
                    info = self.log.append_as_follower(records, wall)
                    out.appended = True
                    out.events += [self._rolled(rolled, "append") for rolled in info.rolled_to]
                case Truncate(offset=offset):
                    before = self.log.segments
                    self.log.truncate_to(offset, wall)
                    out.events += self._segment_changes(before, "truncation")
                case TruncateFullyAndStartAt(offset=offset):
                    before = self.log.segments
                    self.log.truncate_fully_and_start_at(offset, wall)
                    out.events += self._segment_changes(before, "truncation")
                case UpdateHighWatermark(high_watermark=high_watermark):
                    self.log.update_high_watermark(high_watermark)
                    out.high_watermark_moved = True
                case WriteEpochCheckpoint(entries=entries):
                    self._write_epochs(entries)
                case ServeFetch():
                    out.fetch_answers.append(self._fill(effect))
                case Send():
                    out.sends.append(effect)
                case CompleteProduce():
                    out.completions.append(effect)
                case Emit(event=event):
                    out.events.append(event)
        assert self.log.log_end_offset == self.core.log_end_offset, (self.log.log_end_offset, self.core)
        return out

    def run_retention(self, now_ms: int) -> Outputs:
        """Kafka's retention for this log (retention.ms, retention.bytes, below the log start offset; never at or
        above the HW), then the core follows the new log start offset and cuts its epoch cache there."""
        self.log.update_high_watermark(self.core.high_watermark)
        active = self.log.active_segment
        deleted = self.log.delete_old_segments(WallMs(now_ms))  # FIXME(issue 11, item 4): monotonic
        if not deleted:
            return Outputs()
        reported: list[Event] = [self._segment_deleted(d) for d in deleted]
        if self.log.active_segment is not active:
            reported.append(self._rolled(self.log.active_segment.base_offset, "retention"))
        out = self.apply(self.core.advance_log_start_offset(self.log.log_start_offset, "retention"), now_ms)
        out.events[:0] = reported
        return out

    def _segment_changes(self, before: Sequence[LogSegment], reason: str) -> list[Event]:
        """Segments a log operation removed or started, found by identity (a new segment may reuse a base)."""
        after = self.log.segments
        gone = [s for s in before if not any(s is t for t in after)]
        new = [t for t in after if not any(t is s for s in before)]
        reported: list[Event] = [
            self._segment_deleted(DeletedSegment(s.base_offset, s.next_offset, s.size, reason)) for s in gone
        ]
        return reported + [self._rolled(t.base_offset, reason) for t in new]

    def _rolled(self, base_offset: int, reason: str) -> events.SegmentRolled:
        core = self.core
        return events.SegmentRolled(
            topic=core.topic, partition=core.partition, replica=core.local_id, base_offset=base_offset, reason=reason
        )

    def _segment_deleted(self, deleted: DeletedSegment) -> events.SegmentDeleted:
        core = self.core
        return events.SegmentDeleted(
            topic=core.topic,
            partition=core.partition,
            replica=core.local_id,
            base_offset=deleted.base_offset,
            next_offset=deleted.next_offset,
            size_bytes=deleted.size_bytes,
            reason=_DELETION_REASONS.get(deleted.reason, deleted.reason),
        )

    def _write_epochs(self, entries: tuple[tuple[int, int], ...]) -> None:
        self._epoch_file.write([checkpoint.EpochEntry(epoch, offset) for epoch, offset in entries])

    def _fill(self, serve: ServeFetch) -> FetchResponsePartition:
        response = serve.response
        if serve.max_offset < 0 or response.error is not ErrorCode.NONE or response.diverging_epoch >= 0:
            return response
        try:
            records = self.log.read(serve.fetch_offset, serve.max_bytes, max_offset=serve.max_offset)
        except StorageError as error:
            return replace(response, error=error.error_code)
        batches = tuple(
            BatchSummary(h.base_offset, h.last_offset, h.partition_leader_epoch) for _, h in iter_batch_headers(records)
        )
        return replace(response, records=records, batches=batches)
