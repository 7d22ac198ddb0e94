"""A log directory: every partition log a broker keeps in it, and the files that belong to the directory.

Room: libs/storage. Kafka's LogManager, for one log dir:

    <log dir>/
      .lock                               held (flock) while a broker owns the dir
      meta.properties                     the dir's identity: `version=1`, `directory.id=<id>` (KIP-858)
      .kafka_cleanshutdown                present only between a clean shutdown and the next start
      recovery-point-offset-checkpoint    topic partition offset: flushed up to here
      log-start-offset-checkpoint         topic partition offset: the low watermark
      replication-offset-checkpoint       topic partition offset: the high watermark (written by the replica layer)
      cleaner-offset-checkpoint           topic partition offset: a compacted log's first dirty offset
      <topic>-<partition>/                one PartitionLog each
      <topic>-<partition>.<uuid>-delete/  a deleted partition awaiting removal

The marker keeps Kafka's name and JSON body (`{"version":0,"brokerEpoch":N}`), so Kafka's tools recognise a
Hightide log dir, and the broker epoch it records lets the controller tell a clean restart from an unclean one
(KIP-966). Without the marker, every log recovers from its checkpointed recovery point.

`meta.properties` (Kafka's name and `key=value` lines) gives the dir a `directory.id`, written once when the dir is
first opened without one (`directory_created`): a wiped or replaced disk comes back with a new id, so the
controller can tell a broker on an empty new dir from one that kept its logs, whatever its shutdown marker says.
A dir that predates the file (it already holds partition logs) is given an id too, but is not reported as new.

A log that a disk failure took offline (`PartitionLog.offline`) stays in `logs` so its owner can report it, but
periodic work skips it, and a shutdown with an offline log writes no marker: its files need recovery.

A deleted partition's dir is renamed `...-delete` at once and removed `file.delete.delay.ms` later (the dir's
default config's, as Kafka's LogManager uses its broker-wide value for whole logs), so a read still holding its
files finishes first: `deleted_logs_due` hands the owner the dirs whose delay has passed, and `remove_log_dirs`
removes them, off the owner's task if it likes (Kafka's `kafka-delete-logs` scheduler task). A dir still waiting
when the process ends is removed at the next open (`remove_deleted_logs`), without waiting again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hightide.core.clock import WallMs
from hightide.protocol.errors import ErrorCode
from hightide.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    TopicPartition,
    fsync_directory,
    write_atomically,
)
from hightide.storage.config import LogConfig
from hightide.storage.disk import SYSTEM_DISK, DiskIO
from hightide.storage.errors import StorageError
from hightide.storage.log import DeletedSegment, PartitionLog

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
META_PROPERTIES: Final = "meta.properties"
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
LOCK_FILE: Final = ".lock"
DELETE_DIR_SUFFIX: Final = "-delete"
_LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_PARTITION_DIR: Final = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)")


def validate_topic_name(topic: str) -> None:
    """Kafka's rule: 1 to 249 of [a-zA-Z0-9._-], and not '.' or '..'."""
    if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise StorageError(f"illegal topic name {topic!r}", ErrorCode.INVALID_TOPIC_EXCEPTION)


def remove_log_dirs(paths: Sequence[Path]) -> list[tuple[Path, str]]:
    """Remove each dir (the deleted logs `LogManager.deleted_logs_due` hands over; no manager state is touched,
    so a thread may do it); the ones that could not be removed, each with why. Like Kafka's, a failure is reported
    and not retried: the dir is removed at the next open."""
    failed = []
    for path in paths:
        try:
            shutil.rmtree(path)
        except OSError as error:
            failed.append((path, error.strerror or str(error)))
    return failed


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    match = _PARTITION_DIR.fullmatch(name)
    if match is None:
        return None
    return TopicPartition(match["topic"], int(match["partition"]))


@dataclass(frozen=True, slots=True)
class CleanShutdown:
    broker_epoch: int


class LogManager:
    """Every partition log in one log dir. Synchronous; one task owns it."""

    def __init__(self, log_dir: Path, default_config: LogConfig, disk: DiskIO = SYSTEM_DISK) -> None:
        self.log_dir = log_dir
        self.default_config = default_config
        self._disk = disk
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.previous_clean_shutdown: CleanShutdown | None = None
        self.directory_id = ""
        self.directory_created = False  # the dir had no meta.properties and no partition logs: new or wiped
        self._lock_fd = -1
        self._recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_OFFSET_CHECKPOINT)
        self._log_start_offsets = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT)
        self._high_watermarks = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        self._cleaner_offsets = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)
        self._deleted: list[tuple[Path, WallMs]] = []  # renamed `...-delete` dirs, each with when it was deleted

    @classmethod
    def open(
        cls,
        log_dir: Path,
        default_config: LogConfig,
        now: WallMs,
        topic_configs: dict[str, LogConfig] | None = None,
        *,
        disk: DiskIO = SYSTEM_DISK,
    ) -> LogManager:
        """Lock the dir, finish interrupted deletions, and load (recovering if needed) every partition log, each
        with the topic id its `partition.metadata` holds. A log that cannot be opened (a corrupt file) is a
        StorageError naming it, and nothing stays open."""
        log_dir.mkdir(parents=True, exist_ok=True)
        manager = cls(log_dir, default_config, disk)
        manager._lock()
        try:
            manager._load(now, topic_configs or {})
        except BaseException:
            manager.abandon()
            raise
        return manager

    def _lock(self) -> None:
        fd = os.open(self.log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(f"{self.log_dir} is in use by another process") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _load(self, now: WallMs, topic_configs: dict[str, LogConfig]) -> None:
        self.remove_deleted_logs()
        self._identify()
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        self.previous_clean_shutdown = _read_clean_shutdown(marker)
        clean = self.previous_clean_shutdown is not None
        recovery_points = self._recovery_points.read()
        log_start_offsets = self._log_start_offsets.read()
        cleaner_offsets = self._cleaner_offsets.read()
        for tp, directory in self._partition_dirs():
            self.logs[tp] = PartitionLog.open(
                directory,
                tp,
                topic_configs.get(tp.topic, self.default_config),
                now,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_start_offsets.get(tp, 0),
                clean_shutdown=clean,
                disk=self._disk,
            )
            self.logs[tp].cleaner_checkpoint = cleaner_offsets.get(tp)
        # From here on a crash must be treated as unclean: the marker goes before anything is written.
        if clean:
            marker.unlink()
            fsync_directory(self.log_dir)

    def _identify(self) -> None:
        """Read the dir's `directory.id`, or give it one (uuid4, hex) and write meta.properties durably."""
        path = self.log_dir / META_PROPERTIES
        properties = _read_properties(path)
        if properties is not None and properties.get("directory.id"):
            self.directory_id = properties["directory.id"]
            return
        self.directory_created = properties is None and not any(True for _ in self._partition_dirs())
        self.directory_id = uuid.uuid4().hex
        kept = {k: v for k, v in (properties or {}).items() if k not in ("version", "directory.id")}
        lines = ["version=1", f"directory.id={self.directory_id}", *(f"{k}={v}" for k, v in sorted(kept.items()))]
        write_atomically(path, "\n".join(lines) + "\n")

    def _partition_dirs(self) -> Iterator[tuple[TopicPartition, Path]]:
        for path in sorted(self.log_dir.iterdir()):
            if path.is_dir():
                tp = parse_partition_dir(path.name)
                if tp is not None:
                    yield tp, path

    # -- partitions ----------------------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(
        self, tp: TopicPartition, now: WallMs, config: LogConfig | None = None, *, topic_id: str | None = None
    ) -> PartitionLog:
        """The log of `tp`, created empty if there is none. With `topic_id` (Kafka's LogManager.getOrCreateLog):
        a new log records it in `partition.metadata` before anything else; a loaded log without one is given it;
        a log holding another id is refused with INCONSISTENT_TOPIC_ID and left as it is, for the owner to
        delete (a topic deleted and created again under the same name while this broker was away)."""
        existing = self.logs.get(tp)
        if existing is not None:
            if topic_id is not None:
                existing.assign_topic_id(topic_id)
            return existing
        validate_topic_name(tp.topic)
        if tp.partition < 0:
            raise StorageError(f"illegal partition {tp.partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        directory = self.log_dir / partition_dir_name(tp)
        existed = directory.exists()
        try:
            log = PartitionLog.open(
                directory,
                tp,
                config or self.default_config,
                now,
                clean_shutdown=True,
                topic_id=topic_id,
                disk=self._disk,
            )
        except BaseException:
            if not existed:  # leave no half-made partition dir behind for the next start to load
                shutil.rmtree(directory, ignore_errors=True)
            raise
        fsync_directory(self.log_dir)
        self.logs[tp] = log
        return log

    def delete_log(self, tp: TopicPartition, now: WallMs) -> Path:
        """Stop serving the partition and rename its dir `<topic>-<partition>.<uuid>-delete`; its files are removed
        once `file.delete.delay.ms` has passed since `now` (`deleted_logs_due`), so readers finish first."""
        log = self.logs.pop(tp, None)
        if log is None:
            raise StorageError(f"no log for {tp}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        log.abandon()  # its data is going: nothing to flush (and an offline log could not be)
        doomed = self.log_dir / f"{partition_dir_name(tp)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.replace(log.directory, doomed)
        fsync_directory(self.log_dir)
        self._deleted.append((doomed, now))
        return doomed

    def deleted_logs_due(self, now: WallMs) -> list[Path]:
        """The dirs of deleted logs whose `file.delete.delay.ms` (the dir's default config's) has passed by `now`,
        handed over for `remove_log_dirs` and forgotten here; the others wait for a later call."""
        delay = self.default_config.file_delete_delay_ms
        due = [path for path, deleted_at in self._deleted if deleted_at + delay <= now]
        if due:
            self._deleted = [(path, deleted_at) for path, deleted_at in self._deleted if deleted_at + delay > now]
        return due

    def remove_deleted_logs(self) -> list[Path]:
        """Remove every `...-delete` dir in the log dir now (at open: a deletion the last process did not finish)."""
        removed = []
        for path in sorted(self.log_dir.iterdir()):
            if path.is_dir() and path.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path)
                removed.append(path)
        return removed

    # -- periodic work -------------------------------------------------------------------------------------

    def flush_due_logs(self, now: WallMs) -> list[TopicPartition]:
        """Every online log's `flush_if_due`; the logs flushed. A log that fails raises its DiskError (offline)."""
        return [tp for tp, log in self.logs.items() if not log.offline and log.flush_if_due(now)]

    def run_retention(self, now: WallMs) -> dict[TopicPartition, list[DeletedSegment]]:
        """Every online log's retention; the segments each deleted."""
        result = {}
        for tp, log in self.logs.items():
            if log.offline:
                continue
            deleted = log.delete_old_segments(now)
            if deleted:
                result[tp] = deleted
        return result

    def offline_logs(self) -> list[TopicPartition]:
        return [tp for tp, log in self.logs.items() if log.offline]

    def checkpoint_recovery_points(self) -> None:
        self._recovery_points.write({tp: log.recovery_point for tp, log in self.logs.items()})

    def checkpoint_log_start_offsets(self) -> None:
        self._log_start_offsets.write({tp: log.log_start_offset for tp, log in self.logs.items()})

    def checkpoint_cleaner_offsets(self) -> None:
        """Kafka's cleaner-offset-checkpoint: each compacted log's first dirty offset, so a restart does not clean
        the whole log again."""
        self._cleaner_offsets.write(
            {tp: log.cleaner_checkpoint for tp, log in self.logs.items() if log.cleaner_checkpoint is not None}
        )

    def checkpoint_high_watermarks(self) -> None:
        self._high_watermarks.write({tp: log.high_watermark for tp, log in self.logs.items()})

    def periodic_checkpoints(self) -> Callable[[], None]:
        """Kafka's periodic checkpoint tasks (replica.high.watermark.checkpoint.interval.ms for the HWs, the log
        manager's for recovery points and log start offsets): the three files as the logs stand now, written when
        the result is called, on any thread (StorageError if the disk refuses); see OffsetCheckpointFile.snapshot."""
        writes = (
            self._high_watermarks.snapshot({tp: log.high_watermark for tp, log in self.logs.items()}),
            self._recovery_points.snapshot({tp: log.recovery_point for tp, log in self.logs.items()}),
            self._log_start_offsets.snapshot({tp: log.log_start_offset for tp, log in self.logs.items()}),
        )

        def write() -> None:
            for one in writes:
                one()

        return write

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        return self._high_watermarks.read()

    # -- shutdown ------------------------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int = -1) -> list[TopicPartition]:
        """Kafka's clean shutdown: flush and close every log, write the checkpoints, then the marker. Returns the
        logs that were or went offline; when there is any, no marker is written (their files need recovery)."""
        for log in self.logs.values():
            with contextlib.suppress(StorageError):
                log.close()  # a failure takes the log offline; the others still close
        offline = self.offline_logs()
        try:
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks()
            self.checkpoint_cleaner_offsets()
            if not offline:  # last: a failure above (a StorageError) leaves no marker either
                marker = {"version": 0, "brokerEpoch": broker_epoch}
                write_atomically(self.log_dir / CLEAN_SHUTDOWN_FILE, json.dumps(marker))
        finally:
            self.logs.clear()
            self._unlock()
        return offline

    def abandon(self) -> None:
        """Let go of every file as a killed process would: no flush, no checkpoint, no marker (for tests)."""
        for log in self.logs.values():
            log.abandon()
        self.logs.clear()
        self._unlock()


def _read_properties(path: Path) -> dict[str, str] | None:
    """A Java properties file's `key=value` lines (comments and blank lines skipped); None if there is no file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    properties = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", "!")) and "=" in stripped:
            key, _, value = stripped.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def _read_clean_shutdown(marker: Path) -> CleanShutdown | None:
    """The marker's broker epoch; an unreadable marker still means a clean shutdown (Kafka's older brokers
    wrote it empty), with an unknown epoch."""
    try:
        text = marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        epoch = json.loads(text).get("brokerEpoch", -1)
        if isinstance(epoch, int):
            return CleanShutdown(epoch)
    return CleanShutdown(-1)
