"""A full or failing disk: every refusal is a KAFKA_STORAGE_ERROR, and a log is either exactly as before the call
or offline, saying which.

Method: a real log in a temporary directory over a `FailingDisk` (tests/support/failing_disk.py), which makes the
storage engine's writev, write, fsync or ftruncate fail as the kernel does (ENOSPC, EIO, a torn or short write),
after writing for real what a torn write would. Then the files, the offsets and what a restart recovers are
checked.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from hightide.core.clock import WallMs
from hightide.protocol.errors import ErrorCode
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.errors import DiskError, LogOffline, StorageError
from hightide.storage.log import PartitionLog
from hightide.storage.manager import LogManager
from support.failing_disk import FailingDisk
from support.logs import TP, batch, batch_of_size, values

NOW = WallMs(1_700_000_000_000)


def _log(tmp_path: Path, disk: FailingDisk, **config: int) -> PartitionLog:
    return PartitionLog.open(tmp_path / str(TP), TP, LogConfig(**config), NOW, clean_shutdown=True, disk=disk)


def _files(log: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())}


def _reopen_after_crash(tmp_path: Path, log: PartitionLog, **config: int) -> PartitionLog:
    recovery_point = log.recovery_point
    log.abandon()
    return PartitionLog.open(tmp_path / str(TP), TP, LogConfig(**config), NOW, recovery_point=recovery_point)


@pytest.mark.parametrize(
    ("error", "written", "short"),
    [
        (errno.ENOSPC, 0, False),  # full before anything was written
        (errno.ENOSPC, 37, False),  # a torn write: part of the batch reached the file
        (errno.ENOSPC, 37, True),  # writev returned a short count
        (errno.EIO, 70, False),  # the device failed midway
    ],
)
def test_a_refused_append_is_cut_back_and_the_log_is_exactly_as_before(
    tmp_path: Path, error: int, written: int, short: bool
) -> None:
    disk = FailingDisk()
    log = _log(tmp_path, disk)
    log.append_as_leader(batch(3), leader_epoch=0, now=NOW)
    before = _files(log)
    disk.fail_next_write(error, written=written, short=short)
    with pytest.raises(DiskError, match=r"the segment was cut back to \d+ bytes and the log is unchanged") as raised:
        log.append_as_leader(batch(2, tag=1), leader_epoch=0, now=NOW)
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR and not raised.value.offline
    assert (log.log_end_offset, log.active_segment.size) == (3, len(batch(3)))
    assert _files(log) == before
    # The disk has room again: the next append continues exactly where the log ended.
    info = log.append_as_leader(batch(2, tag=2), leader_epoch=0, now=NOW)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert [v for _, v in values(log.read(0, 10_000))] == [v for _, v in values(batch(3) + batch(2, tag=2))]


def test_a_refused_append_that_had_rolled_deletes_the_segment_it_started(tmp_path: Path) -> None:
    disk = FailingDisk()
    log = _log(tmp_path, disk, segment_bytes=250)
    for _ in range(2):
        log.append_as_leader(batch_of_size(100, count=5), leader_epoch=0, now=NOW)
    before = _files(log)
    disk.fail_next_write(written=50)
    with pytest.raises(DiskError) as raised:
        log.append_as_leader(batch_of_size(100, count=5), leader_epoch=0, now=NOW)
    assert not raised.value.offline
    assert [s.base_offset for s in log.segments] == [0] and log.log_end_offset == 10
    assert _files(log) == before  # 00000000000000000010.* are gone
    info = log.append_as_leader(batch_of_size(100, count=5), leader_epoch=0, now=NOW)
    assert info.rolled_to == (10,)


def test_a_follower_append_over_several_segments_is_undone_whole(tmp_path: Path) -> None:
    # A 600-byte fetch into 250-byte segments is written in three runs; the disk fills during the third.
    leader = _log(tmp_path / "leader", FailingDisk())
    for i in range(6):
        leader.append_as_leader(batch_of_size(100, count=5, timestamp=1000 + i), leader_epoch=0, now=NOW)
    fetched = leader.read(0, 10_000)
    disk = FailingDisk()
    follower = _log(tmp_path, disk, segment_bytes=250)
    before = _files(follower)
    disk.fail_next_write(written=150, after_writes=2)
    with pytest.raises(DiskError) as raised:
        follower.append_as_follower(fetched, now=NOW)
    assert not raised.value.offline and disk.next_write is None  # the third run's write failed
    assert follower.log_end_offset == 0 and [s.base_offset for s in follower.segments] == [0]
    assert _files(follower) == before
    assert follower.append_as_follower(fetched, now=NOW).rolled_to == (10, 20)


def test_when_cutting_back_fails_too_the_log_goes_offline_and_recovery_repairs_it(tmp_path: Path) -> None:
    disk = FailingDisk()
    log = _log(tmp_path, disk)
    log.append_as_leader(batch(3), leader_epoch=0, now=NOW)
    stored = log.read(0, 10_000)
    disk.fail_next_write(errno.EIO, written=40)
    disk.ftruncate_error = errno.EIO
    with pytest.raises(DiskError, match=r"cutting it back failed too \(.*\): the log is offline") as raised:
        log.append_as_leader(batch(2, tag=1), leader_epoch=0, now=NOW)
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR and raised.value.offline
    disk.heal()
    assert log.offline
    for refused in (
        lambda: log.append_as_leader(batch(1), leader_epoch=0, now=NOW),
        lambda: log.read(0, 100),
        lambda: log.truncate_to(1, NOW),
        log.flush,
        lambda: log.delete_old_segments(NOW),
    ):
        with pytest.raises(LogOffline, match="the log is offline: append failed") as offline:
            refused()
        assert offline.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR
    assert (tmp_path / str(TP) / "00000000000000000000.log").stat().st_size == len(batch(3)) + 40  # the torn tail
    recovered = _reopen_after_crash(tmp_path, log)
    assert recovered.log_end_offset == 3 and recovered.read(0, 10_000) == stored
    assert sum(r.truncated_bytes for r in recovered.recovery_report.recovered) == 40


def test_a_failed_fsync_takes_the_log_offline_and_keeps_the_recovery_point(tmp_path: Path) -> None:
    # After a failed fsync the kernel may have dropped the dirty pages: no later fsync can vouch for them.
    disk = FailingDisk()
    log = _log(tmp_path, disk)
    log.append_as_leader(batch(3), leader_epoch=0, now=NOW)
    disk.fsync_error = errno.EIO
    with pytest.raises(DiskError, match=r"fsync failed: .*: the log is offline") as raised:
        log.flush()
    assert raised.value.offline and log.offline and log.recovery_point == 0


def test_an_append_that_flushes_by_flush_messages_and_fails_to_fsync_goes_offline(tmp_path: Path) -> None:
    disk = FailingDisk()
    log = _log(tmp_path, disk, flush_messages=1)
    disk.fsync_error = errno.EIO
    with pytest.raises(DiskError) as raised:
        log.append_as_leader(batch(3), leader_epoch=0, now=NOW)
    assert raised.value.offline and log.offline and log.recovery_point == 0


def test_an_index_write_that_fails_at_flush_takes_the_log_offline(tmp_path: Path) -> None:
    disk = FailingDisk()
    log = _log(tmp_path, disk, index_interval_bytes=0)
    for tag in range(3):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=NOW)  # index entries wait in memory
    disk.fail_next_write(errno.EIO, written=3)
    with pytest.raises(DiskError) as raised:
        log.flush()
    assert raised.value.offline
    recovered = _reopen_after_crash(tmp_path, log, index_interval_bytes=0)
    assert recovered.log_end_offset == 6
    assert recovered.recovery_report.recovered, "the torn index is rebuilt by recovery"


def test_a_failed_truncation_takes_the_log_offline(tmp_path: Path) -> None:
    disk = FailingDisk()
    log = _log(tmp_path, disk)
    for tag in range(3):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=NOW)
    disk.ftruncate_error = errno.EIO
    with pytest.raises(DiskError, match="truncation to offset 2 failed") as raised:
        log.truncate_to(2, NOW)
    assert raised.value.offline and log.offline


def test_a_shutdown_with_an_offline_log_writes_no_clean_shutdown_marker(tmp_path: Path) -> None:
    disk = FailingDisk()
    manager = LogManager.open(tmp_path, LogConfig(flush_ms=1000), NOW, disk=disk)
    healthy, failing = TopicPartition("orders", 0), TopicPartition("orders", 1)
    for tp in (healthy, failing):
        manager.get_or_create_log(tp, NOW).append_as_leader(batch(2), leader_epoch=0, now=NOW)
    disk.fsync_error = errno.EIO
    with pytest.raises(DiskError):
        manager.logs[failing].flush()
    disk.heal()
    assert manager.offline_logs() == [failing]
    assert manager.flush_due_logs(WallMs(NOW + 10**12)) == [healthy]  # periodic work skips the offline log
    assert manager.run_retention(NOW) == {}
    assert manager.shutdown(broker_epoch=3) == [failing]
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    reopened = LogManager.open(tmp_path, LogConfig(), NOW)
    assert reopened.previous_clean_shutdown is None  # recovery runs
    assert {tp: log.log_end_offset for tp, log in reopened.logs.items()} == {healthy: 2, failing: 2}


def test_a_roll_the_disk_refuses_leaves_the_active_segment_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Creating a segment's files can fail too (no space for the directory entry): nothing changes.
    log = _log(tmp_path, FailingDisk(), segment_bytes=250)
    for _ in range(2):
        log.append_as_leader(batch_of_size(100, count=5), leader_epoch=0, now=NOW)
    real_open = __import__("os").open

    def refusing_open(path: object, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith("00000000000000000010.timeindex"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr("hightide.storage.index.os.open", refusing_open)
    with pytest.raises(StorageError) as raised:
        log.append_as_leader(batch_of_size(100, count=5), leader_epoch=0, now=NOW)
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR and not log.offline
    assert [s.base_offset for s in log.segments] == [0] and log.log_end_offset == 10
    monkeypatch.undo()
    assert log.append_as_leader(batch_of_size(100, count=5), leader_epoch=0, now=NOW).rolled_to == (10,)
