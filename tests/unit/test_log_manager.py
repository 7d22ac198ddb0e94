"""A log dir: checkpoints across restarts, the clean-shutdown marker, the lock, topic deletion, and the topic id
each replica keeps on disk (`partition.metadata`).

Method: open a LogManager on a temporary dir, work with it, shut it down cleanly or abandon it as a crash would,
and open it again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hightide.core.clock import WallMs
from hightide.protocol.errors import ErrorCode
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError
from hightide.storage.manager import LogManager, remove_log_dirs
from support.logs import batch

TOPIC_ID = "kY6UUBDqSwqvGcP5uXA0Bw"
RECREATED_TOPIC_ID = "3mNYGkGAQaqDu-A1t2V9zQ"  # the same name, created again: another incarnation
ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)


def _filled(log_dir: Path) -> LogManager:
    manager = LogManager.open(log_dir, LogConfig(segment_bytes=300), now=WallMs(0))
    for tp in (ORDERS_0, ORDERS_1):
        log = manager.get_or_create_log(tp, now=WallMs(0))
        for tag in range(5):
            log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
        log.update_high_watermark(6)
    return manager


def test_clean_shutdown_writes_checkpoints_and_marker_and_the_next_start_skips_recovery(
    tmp_path: Path,
) -> None:
    _filled(tmp_path).shutdown(broker_epoch=42)
    assert json.loads((tmp_path / ".kafka_cleanshutdown").read_text()) == {"version": 0, "brokerEpoch": 42}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n2\norders 0 10\norders 1 10\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\norders 0 6\norders 1 6\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n2\norders 0 0\norders 1 0\n"

    reopened = LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))
    assert reopened.previous_clean_shutdown is not None
    assert reopened.previous_clean_shutdown.broker_epoch == 42
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # a crash from here on is unclean
    assert {tp: log.log_end_offset for tp, log in reopened.logs.items()} == {ORDERS_0: 10, ORDERS_1: 10}
    assert all(not log.recovery_report.recovered for log in reopened.logs.values())
    assert reopened.read_high_watermarks() == {ORDERS_0: 6, ORDERS_1: 6}


def test_the_periodic_checkpoints_write_the_three_files_as_the_logs_stood_when_taken(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    log = manager.get_log(ORDERS_0)
    assert log is not None
    log.flush(10)
    write = manager.periodic_checkpoints()
    log.update_high_watermark(8)  # after the offsets were taken
    write()  # as the broker's thread calls it
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\norders 0 6\norders 1 6\n"
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text().startswith("0\n2\norders 0 10\n")
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n2\norders 0 0\norders 1 0\n"
    manager.shutdown()  # newer than the snapshot: the HW moved on
    assert manager.read_high_watermarks() == {ORDERS_0: 8, ORDERS_1: 6}


def test_after_a_crash_every_log_recovers_from_its_checkpointed_recovery_point(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    manager.logs[ORDERS_0].flush()
    manager.checkpoint_recovery_points()
    manager.abandon()
    reopened = LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))
    assert reopened.previous_clean_shutdown is None
    # orders-0 was flushed to its end: nothing to validate. orders-1 never was: validated from offset 0.
    assert sum(r.validated_bytes for r in reopened.logs[ORDERS_0].recovery_report.recovered) == 0
    assert sum(r.validated_bytes for r in reopened.logs[ORDERS_1].recovery_report.recovered) == 5 * len(batch(2))
    assert {tp: log.log_end_offset for tp, log in reopened.logs.items()} == {ORDERS_0: 10, ORDERS_1: 10}


def test_a_checkpointed_log_start_offset_survives_a_restart(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    manager.logs[ORDERS_0].delete_records(5, now=WallMs(0))
    manager.shutdown()
    reopened = LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))
    assert reopened.logs[ORDERS_0].log_start_offset == 5


def test_deleting_a_partition_renames_it_with_a_delete_suffix_then_removes_it_after_the_delay(tmp_path: Path) -> None:
    """Kafka's LogManager: the dir is renamed at once and its files removed file.delete.delay.ms (default 60 s)
    after the deletion, by a periodic task; until then a read holding its files can finish."""
    manager = _filled(tmp_path)
    doomed = manager.delete_log(ORDERS_1, now=WallMs(1_000))
    assert not (tmp_path / "orders-1").exists()
    assert doomed.parent == tmp_path and doomed.name.startswith("orders-1.") and doomed.name.endswith("-delete")
    assert doomed.is_dir() and manager.get_log(ORDERS_1) is None
    assert manager.deleted_logs_due(WallMs(60_999)) == []
    assert manager.deleted_logs_due(WallMs(61_000)) == [doomed]
    assert manager.deleted_logs_due(WallMs(61_000)) == []  # handed over once
    assert doomed.is_dir()  # removing is the caller's, on whatever thread it likes
    assert remove_log_dirs([doomed]) == []
    assert not doomed.exists() and (tmp_path / "orders-0").is_dir()


def test_the_delay_is_the_log_dirs_default_config_and_each_deletion_waits_its_own(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(file_delete_delay_ms=500), now=WallMs(0))
    for tp in (ORDERS_0, ORDERS_1):
        manager.get_or_create_log(tp, now=WallMs(0))
    first = manager.delete_log(ORDERS_0, now=WallMs(100))
    second = manager.delete_log(ORDERS_1, now=WallMs(400))
    assert manager.deleted_logs_due(WallMs(599)) == []
    assert manager.deleted_logs_due(WallMs(600)) == [first]
    assert manager.deleted_logs_due(WallMs(899)) == []
    assert manager.deleted_logs_due(WallMs(900)) == [second]


def test_a_dir_that_cannot_be_removed_is_reported_and_the_others_are_still_removed(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    doomed = manager.delete_log(ORDERS_1, now=WallMs(0))
    missing = tmp_path / "orders-7.0123-delete"
    failed = remove_log_dirs([missing, doomed])
    assert [path for path, _ in failed] == [missing] and "No such file" in failed[0][1]
    assert not doomed.exists()


def test_a_deletion_interrupted_by_a_crash_is_finished_at_the_next_start(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    doomed = manager.delete_log(ORDERS_1, now=WallMs(0))
    manager.abandon()
    reopened = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    assert not doomed.exists() and set(reopened.logs) == {ORDERS_0}


def test_a_log_dir_is_owned_by_one_process_at_a_time(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    with pytest.raises(StorageError, match="in use"):
        LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    manager.shutdown()
    LogManager.open(tmp_path, LogConfig(), now=WallMs(0)).shutdown()


@pytest.mark.parametrize(("topic", "partition"), [("bad/name", 0), ("", 0), ("..", 0), ("x" * 250, 0), ("ok", -1)])
def test_illegal_topic_partitions_are_refused_and_create_nothing(tmp_path: Path, topic: str, partition: int) -> None:
    manager = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    with pytest.raises(StorageError) as raised:
        manager.get_or_create_log(TopicPartition(topic, partition), now=WallMs(0))
    assert raised.value.error_code in (
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "meta.properties"]


def test_retention_and_flushing_run_over_every_log(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(segment_bytes=300, retention_bytes=300), now=WallMs(0))
    log = manager.get_or_create_log(ORDERS_0, now=WallMs(0))
    for tag in range(9):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
    log.update_high_watermark(log.log_end_offset)
    deleted = manager.run_retention(now=WallMs(0))
    assert [d.reason for d in deleted[ORDERS_0]] and log.size_bytes <= 300 + 300
    assert manager.flush_due_logs(now=WallMs(0)) == [ORDERS_0]


def test_log_configs_use_kafkas_names_and_reject_unknown_or_out_of_range_values() -> None:
    config = LogConfig.from_properties({"segment.bytes": "1048576", "retention.ms": "-1"})
    assert (config.segment_bytes, config.retention_ms) == (1048576, -1)
    assert config.to_properties()["segment.bytes"] == "1048576"
    for bad in ({"segment.byte": "1"}, {"segment.bytes": "ten"}, {"segment.bytes": "0"}, {"flush.ms": "-5"}):
        with pytest.raises(StorageError) as raised:
            LogConfig.from_properties(bad)
        assert raised.value.error_code is ErrorCode.INVALID_CONFIG


def test_a_shutdown_whose_checkpoint_fails_writes_no_marker_and_lets_go_of_the_dir(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    (tmp_path / "log-start-offset-checkpoint").mkdir()  # the disk refuses this file
    with pytest.raises(StorageError, match="log-start-offset-checkpoint: cannot write"):
        manager.shutdown(broker_epoch=3)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    (tmp_path / "log-start-offset-checkpoint").rmdir()
    reopened = LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))
    assert reopened.previous_clean_shutdown is None
    assert {tp: log.log_end_offset for tp, log in reopened.logs.items()} == {ORDERS_0: 10, ORDERS_1: 10}


# -- topic identity -------------------------------------------------------------------------------------------


def test_a_new_log_records_its_topic_id_in_partition_metadata_and_reads_it_back(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    log = manager.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=TOPIC_ID)
    assert log.topic_id == TOPIC_ID
    assert (tmp_path / "orders-0" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {TOPIC_ID}"
    log.append_as_leader(batch(2), leader_epoch=0, now=WallMs(0))
    manager.shutdown()
    reopened = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    assert reopened.logs[ORDERS_0].topic_id == TOPIC_ID
    assert reopened.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=TOPIC_ID) is reopened.logs[ORDERS_0]


def test_a_log_written_before_topic_ids_has_none_until_it_is_given_one(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    log = manager.get_or_create_log(ORDERS_0, now=WallMs(0))
    assert log.topic_id is None and not (tmp_path / "orders-0" / "partition.metadata").exists()
    manager.shutdown()
    reopened = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    assert reopened.logs[ORDERS_0].topic_id is None
    reopened.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=TOPIC_ID)
    assert reopened.logs[ORDERS_0].topic_id == TOPIC_ID
    reopened.shutdown()
    assert LogManager.open(tmp_path, LogConfig(), now=WallMs(0)).logs[ORDERS_0].topic_id == TOPIC_ID


def test_a_log_of_another_incarnation_of_its_topic_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    # The topic was deleted and created again while this broker was away: its old log must not be reused.
    manager = _filled(tmp_path)
    manager.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=TOPIC_ID)
    manager.shutdown()
    reopened = LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))
    files = {p.name: p.read_bytes() for p in (tmp_path / "orders-0").iterdir()}
    with pytest.raises(StorageError, match=f"belongs to topic id {TOPIC_ID}, not {RECREATED_TOPIC_ID}") as raised:
        reopened.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=RECREATED_TOPIC_ID)
    assert raised.value.error_code is ErrorCode.INCONSISTENT_TOPIC_ID
    log = reopened.logs[ORDERS_0]
    assert (log.topic_id, log.log_end_offset) == (TOPIC_ID, 10)
    assert {p.name: p.read_bytes() for p in (tmp_path / "orders-0").iterdir()} == files
    with pytest.raises(StorageError) as assigned:
        log.assign_topic_id(RECREATED_TOPIC_ID)
    assert assigned.value.error_code is ErrorCode.INCONSISTENT_TOPIC_ID
    # What the owner does instead: delete the old log and create the new incarnation's.
    reopened.delete_log(ORDERS_0, now=WallMs(0))
    fresh = reopened.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=RECREATED_TOPIC_ID)
    assert (fresh.topic_id, fresh.log_end_offset) == (RECREATED_TOPIC_ID, 0)


def test_a_corrupt_partition_metadata_file_is_a_clear_error_at_open_and_changes_nothing(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    manager.get_or_create_log(ORDERS_1, now=WallMs(0), topic_id=TOPIC_ID)
    manager.shutdown()
    (tmp_path / "orders-1" / "partition.metadata").write_text("version: 0\ntopic_id: not-a-topic-id")
    with pytest.raises(StorageError, match=r"orders-1/partition\.metadata: invalid topic id") as raised:
        LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR
    assert (tmp_path / ".kafka_cleanshutdown").exists()  # the failed start took nothing: still a clean shutdown
    (tmp_path / "orders-1" / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}")
    reopened = LogManager.open(tmp_path, LogConfig(segment_bytes=300), now=WallMs(0))  # the dir was unlocked
    assert reopened.logs[ORDERS_1].topic_id == TOPIC_ID and reopened.logs[ORDERS_1].log_end_offset == 10


def test_a_topic_id_write_cut_short_by_a_crash_leaves_the_old_file(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    manager.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id=TOPIC_ID)
    manager.abandon()
    (tmp_path / "orders-0" / "partition.metadata.tmp").write_text("version: 0\ntopic_")  # written, not renamed
    reopened = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    assert reopened.logs[ORDERS_0].topic_id == TOPIC_ID
    assert not (tmp_path / "orders-0" / "partition.metadata.tmp").exists()


def test_an_invalid_topic_id_creates_no_log(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path, LogConfig(), now=WallMs(0))
    with pytest.raises(StorageError) as raised:
        manager.get_or_create_log(ORDERS_0, now=WallMs(0), topic_id="orders")
    assert raised.value.error_code is ErrorCode.INVALID_REQUEST
    assert manager.get_log(ORDERS_0) is None and not (tmp_path / "orders-0").exists()
