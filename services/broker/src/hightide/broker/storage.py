"""The broker's disk: the replica manager's storage effects carried out on the log directory, and its reads.

Room: services/broker (wiring). The replica manager decides; this applies each storage effect to the storage
engine (`hightide.storage`) in the order given, and answers the manager's `LogReader` queries. A refusal by the
storage engine is raised as StorageError for the broker to hand back to the manager, never swallowed.

What the storage engine does on its own is reported as events next to the manager's, in the same order: a
segment rolled by an append (SegmentRolled), segments removed by a truncation or by retention (SegmentDeleted,
and the SegmentRolled of a fresh one when the log was emptied).

Log compaction is the storage engine's own periodic work, outside the manager (each replica cleans its own log, as
in Kafka): `prepare_cleanings` and `commit_cleanings` run on the broker's driving task, `build_cleanings` between
them on a thread (`hightide.storage.cleaner`), and each cleaning swapped in is reported as LogCompacted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

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
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.records import BatchHeader
from hightide.runtime.names import LOG_CONFIG_NAMES
from hightide.storage import checkpoint
from hightide.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from hightide.storage.checkpoint import TopicPartition as LogPartition
from hightide.storage.cleaner import CleaningJob, commit_cleaning, prepare_cleaning
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError
from hightide.storage.log import DeletedSegment, PartitionLog
from hightide.storage.manager import LogManager
from hightide.storage.segment import LogSegment


class DiskStorage:
    """One broker's log directory under the replica manager."""

    def __init__(self, broker_id: int, data_dir: Path, defaults: LogConfig) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.defaults = defaults
        self.logs: LogManager | None = None

    # -- opening and closing -------------------------------------------------------------------------------------

    def open(self, now_ms: WallMs) -> tuple[str, list[LogState]]:
        """Recover the log directory; how it was left (recovered or clean_shutdown) and every log's state."""
        self.logs = LogManager.open(self.data_dir, self.defaults, now_ms)
        reason = "recovered" if self.logs.previous_clean_shutdown is None else "clean_shutdown"
        high_watermarks = self.logs.read_high_watermarks()
        states = []
        for tp, log in sorted(self.logs.logs.items()):
            epochs = LeaderEpochCheckpointFile(log.directory / LEADER_EPOCH_CHECKPOINT).read()
            states.append(
                LogState(
                    TopicPartition(tp.topic, tp.partition),
                    log.topic_id,
                    log.log_start_offset,
                    log.log_end_offset,
                    high_watermarks.get(tp, 0),
                    tuple((e.epoch, e.start_offset) for e in epochs),
                )
            )
        return reason, states

    @property
    def directory_id(self) -> str:
        """The log dir's `directory.id` (meta.properties, KIP-858): new when the dir was new or wiped."""
        return self._manager().directory_id

    @property
    def previous_broker_epoch(self) -> int:
        shutdown = self._manager().previous_clean_shutdown
        return -1 if shutdown is None else shutdown.broker_epoch

    def close(self, broker_epoch: int, *, clean: bool) -> None:
        if self.logs is None:
            return
        if clean:
            self.logs.checkpoint_high_watermarks()
            self.logs.shutdown(broker_epoch)
        self.logs = None

    def _manager(self) -> LogManager:
        assert self.logs is not None, "the log directory is not open"
        return self.logs

    def _log(self, tp: TopicPartition) -> PartitionLog:
        log = self._manager().get_log(checkpoint.TopicPartition(tp.topic, tp.partition))
        if log is None:
            raise StorageError(f"{tp.topic}-{tp.partition}: no log here", ErrorCode.KAFKA_STORAGE_ERROR)
        return log

    # -- the storage effects -------------------------------------------------------------------------------------

    def apply(self, effect: StorageEffect | CheckpointHighWatermarks, now: WallMs) -> StorageOutcome:
        """Carry out one storage effect (StorageRefusal if the engine refuses it): the events of what the engine did
        on its own, and for EnforceRetention the log start offset afterwards if it moved."""
        try:
            if isinstance(effect, CheckpointHighWatermarks):
                self.checkpoint()
                return StorageOutcome()
            return self._apply(effect, now)
        except StorageError as error:
            raise StorageRefusal(str(error), error.error_code) from None

    def _apply(self, effect: StorageEffect, now_ms: WallMs) -> StorageOutcome:
        tp = TopicPartition(effect.topic, effect.partition)
        match effect:
            case CreateLog(topic_id=topic_id, configs=configs):
                key = checkpoint.TopicPartition(tp.topic, tp.partition)
                # A new log records its topic id first; one written before topic ids were stored is given it.
                self._manager().get_or_create_log(key, now_ms, self.log_config(configs), topic_id=topic_id)
            case DeleteLog():
                self._manager().delete_log(checkpoint.TopicPartition(tp.topic, tp.partition), now_ms)
            case UpdateLogConfig(configs=configs):
                self._log(tp).update_config(self.log_config(configs))
            case AppendAsLeader(records=records, base_offset=base, leader_epoch=epoch, headers=headers):
                info = self._log(tp).append_as_leader(records, epoch, now_ms, validated=list(headers))
                assert info.first_offset == base, (info, base)
                return StorageOutcome(self._rolled(tp, info.rolled_to))
            case AppendAsFollower(records=records, headers=headers):
                info = self._log(tp).append_as_follower(records, now_ms, validated=list(headers))
                return StorageOutcome(self._rolled(tp, info.rolled_to))
            case Truncate(offset=offset):
                log = self._log(tp)
                before = log.segments
                log.truncate_to(offset, now_ms)
                return StorageOutcome(self._segment_changes(tp, log, before, "truncation"))
            case TruncateFullyAndStartAt(offset=offset):
                log = self._log(tp)
                before = log.segments
                log.truncate_fully_and_start_at(offset, now_ms)
                return StorageOutcome(self._segment_changes(tp, log, before, "truncation"))
            case AdvanceLogStartOffset(offset=offset):
                update = self._log(tp).advance_log_start_offset(offset, now_ms)
                self._manager().checkpoint_log_start_offsets()
                return StorageOutcome(tuple(self._segment_deleted(tp, d) for d in update.deleted))
            case UpdateHighWatermark(high_watermark=high_watermark):
                self._log(tp).update_high_watermark(high_watermark)
            case WriteEpochCheckpoint(entries=entries):
                epoch_file = LeaderEpochCheckpointFile(self._log(tp).directory / LEADER_EPOCH_CHECKPOINT)
                epoch_file.write([checkpoint.EpochEntry(epoch, offset) for epoch, offset in entries])
            case EnforceRetention(now_ms=wall_now):
                return self._retention(tp, wall_now)
        return StorageOutcome()

    def log_config(self, configs: Mapping[str, str]) -> LogConfig:
        """A topic's log config: the broker's defaults overridden by the topic's own (Kafka's names)."""
        return LogConfig.from_properties(
            {k: v for k, v in configs.items() if k in LOG_CONFIG_NAMES}, base=self.defaults
        )

    def _retention(self, tp: TopicPartition, now_ms: WallMs) -> StorageOutcome:
        """Kafka's retention for one log (the rules of hightide.core.retention at this wall-clock time)."""
        log = self._log(tp)
        start, active = log.log_start_offset, log.active_segment
        deleted = log.delete_old_segments(now_ms)
        if not deleted:
            return StorageOutcome()
        reported: list[Event] = [self._segment_deleted(tp, d) for d in deleted]
        if log.active_segment is not active:
            reported.append(self._segment_rolled(tp, log.active_segment.base_offset, "retention"))
        self._manager().checkpoint_log_start_offsets()
        moved = log.log_start_offset if log.log_start_offset > start else None
        return StorageOutcome(tuple(reported), moved)

    def checkpoint(self) -> None:
        """Kafka's checkpoint thread: every log's HW, recovery point and log start offset."""
        manager = self._manager()
        manager.checkpoint_high_watermarks()
        manager.checkpoint_recovery_points()
        manager.checkpoint_log_start_offsets()

    def periodic_checkpoints(self) -> Callable[[], None]:
        """The checkpoint of every log's HW, recovery point and log start offset as they stand now, to be written
        by calling the result on another thread (StorageError if the disk refuses): Kafka's checkpoint tasks run
        on its scheduler, so their fsyncs never hold up a request."""
        return self._manager().periodic_checkpoints()

    def flush_due(self, now_ms: WallMs) -> None:
        self._manager().flush_due_logs(now_ms)

    def deleted_logs_due(self, now_ms: WallMs) -> list[Path]:
        """The dirs of deleted partitions now due for removal (`LogManager.deleted_logs_due`)."""
        return self._manager().deleted_logs_due(now_ms)

    # -- log compaction (issue 13) ------------------------------------------------------------------------------

    def prepare_cleanings(self, now_ms: WallMs) -> list[tuple[LogPartition, CleaningJob]]:
        """A cleaning job for every online compacted log dirty enough to clean (on the driving task)."""
        jobs = []
        for tp, log in sorted(self._manager().logs.items()):
            try:
                job = prepare_cleaning(log, now_ms)
            except (OSError, StorageError) as error:
                raise StorageError(f"{tp}: preparing a cleaning failed: {error}") from None
            if job is not None:
                jobs.append((tp, job))
        return jobs

    def commit_cleanings(
        self, jobs: Sequence[tuple[LogPartition, CleaningJob]], now_ms: WallMs
    ) -> list[events.LogCompacted]:
        """Swap the built jobs into their logs (on the driving task; a log deleted or changed meanwhile keeps what
        it has, and its job's files go), then checkpoint the cleaner offsets. A failed swap takes its log offline
        and raises StorageError after the other jobs are settled."""
        manager = self._manager()
        reported: list[events.LogCompacted] = []
        failure: StorageError | None = None
        for tp, job in jobs:
            log = manager.get_log(tp)
            if log is None:
                job.discard()
                continue
            try:
                result = commit_cleaning(log, job, now_ms)
            except StorageError as error:
                failure = failure or error
                continue
            if result is not None:
                stats = result.stats
                reported.append(
                    events.LogCompacted(
                        topic=tp.topic,
                        partition=tp.partition,
                        replica=self.broker_id,
                        first_dirty_offset=result.first_dirty_offset,
                        cleaned_up_to=result.first_uncleanable_offset,
                        segments_before=stats.segments_before,
                        segments_after=stats.segments_after,
                        bytes_before=stats.bytes_before,
                        bytes_after=stats.bytes_after,
                        records_removed=stats.records_removed,
                        tombstones_removed=stats.tombstones_removed,
                    )
                )
        if reported:
            manager.checkpoint_cleaner_offsets()
        if failure is not None:
            raise failure
        return reported

    # -- the replica manager's reads -----------------------------------------------------------------------------

    def read(
        self, tp: TopicPartition, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes:
        try:
            return self._log(tp).read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        except StorageError as error:
            raise LogReadError(str(error), error.error_code) from None

    def batch_start(self, tp: TopicPartition, offset: int) -> int:
        log = self._log(tp)
        if offset >= log.log_end_offset or offset <= log.log_start_offset:
            return offset
        try:
            first = next(iter(log.batch_headers(offset)), None)
        except StorageError as error:
            raise LogReadError(str(error), error.error_code) from None
        return offset if first is None else min(first.base_offset, offset)

    def batch_headers(self, tp: TopicPartition) -> Iterable[BatchHeader]:
        try:
            return list(self._log(tp).batch_headers())
        except StorageError as error:
            raise LogReadError(str(error), error.error_code) from None

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> tuple[int, int] | None:
        try:
            return self._log(tp).offset_for_timestamp(timestamp)
        except StorageError as error:
            raise LogReadError(str(error), error.error_code) from None

    def max_timestamp_offset(self, tp: TopicPartition) -> tuple[int, int] | None:
        try:
            return self._log(tp).max_timestamp_offset()
        except StorageError as error:
            raise LogReadError(str(error), error.error_code) from None

    # -- what the engine reports -----------------------------------------------------------------------------------

    def _segment_changes(
        self, tp: TopicPartition, log: PartitionLog, before: Sequence[LogSegment], reason: str
    ) -> tuple[Event, ...]:
        """Segments a log operation removed or started, found by identity (a new segment may reuse a base)."""
        after = log.segments
        gone = [s for s in before if not any(s is t for t in after)]
        new = [t for t in after if not any(t is s for s in before)]
        reported: list[Event] = [
            self._segment_deleted(tp, DeletedSegment(s.base_offset, s.next_offset, s.size, reason)) for s in gone
        ]
        return tuple(reported + [self._segment_rolled(tp, t.base_offset, reason) for t in new])

    def _rolled(self, tp: TopicPartition, rolled_to: tuple[int, ...]) -> tuple[Event, ...]:
        return tuple(self._segment_rolled(tp, base_offset, "append") for base_offset in rolled_to)

    def _segment_rolled(self, tp: TopicPartition, base_offset: int, reason: str) -> events.SegmentRolled:
        return events.SegmentRolled(
            topic=tp.topic, partition=tp.partition, replica=self.broker_id, base_offset=base_offset, reason=reason
        )

    def _segment_deleted(self, tp: TopicPartition, deleted: DeletedSegment) -> events.SegmentDeleted:
        return events.SegmentDeleted(
            topic=tp.topic,
            partition=tp.partition,
            replica=self.broker_id,
            base_offset=deleted.base_offset,
            next_offset=deleted.next_offset,
            size_bytes=deleted.size_bytes,
            reason=deleted.reason,
        )
