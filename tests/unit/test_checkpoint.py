"""Checkpoint files: Kafka's exact bytes, atomic replacement, and clear errors for files that do not parse.

Method: write through the public classes and compare the file's bytes with Kafka's format written out by hand;
feed malformed files and expect CorruptCheckpoint (KAFKA_STORAGE_ERROR) naming the problem.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.protocol.errors import ErrorCode
from hightide.storage.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    TopicPartition,
)
from hightide.storage.errors import CorruptCheckpoint, StorageError

TOPIC_ID = "kY6UUBDqSwqvGcP5uXA0Bw"  # a topic id as Kafka prints one: a UUID in URL-safe base64


def test_leader_epoch_checkpoint_is_version_count_then_epoch_and_start_offset(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([EpochEntry(0, 0), EpochEntry(1, 2)])
    assert path.read_bytes() == b"0\n2\n0 0\n1 2\n"
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0), EpochEntry(1, 2)]


def test_offset_checkpoint_is_version_count_then_topic_partition_offset(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpointFile(path).write({TopicPartition("foo", 1): 7, TopicPartition("foo", 0): 15})
    assert path.read_bytes() == b"0\n2\nfoo 0 15\nfoo 1 7\n"
    assert OffsetCheckpointFile(path).read() == {TopicPartition("foo", 0): 15, TopicPartition("foo", 1): 7}


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("a", 0): 1})
    checkpoint.write({})
    assert path.read_bytes() == b"0\n0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recovery-point-offset-checkpoint"]


def test_missing_or_empty_file_reads_as_no_entries(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}
    (tmp_path / "empty").write_bytes(b"")
    assert LeaderEpochCheckpointFile(tmp_path / "empty").read() == []


def test_entries_separated_by_any_whitespace_parse_as_kafka_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n1\nfoo\t2   40\n")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("foo", 2): 40}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1\n0\n", "unrecognized version"),
        ("0\n", "version line and a count line"),
        ("0\nx\n", "malformed entry count"),
        ("0\n2\n0 0\n", "expected 2 entries but found 1"),
        ("0\n1\n0 0 0\n", "expected 2 fields"),
        ("0\n1\n0 zero\n", "is not a number"),
        ("0\n1\n-1 0\n", "negative"),
        ("0\n2\n3 10\n2 20\n", "out of order"),
        ("0\n2\n2 10\n3 5\n", "out of order"),
        ("\xff\xfe", "unreadable"),
    ],
)
def test_malformed_leader_epoch_checkpoint_is_a_storage_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptCheckpoint, match=problem) as raised:
        LeaderEpochCheckpointFile(path).read()
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR


def test_a_temporary_file_left_by_a_crash_mid_write_does_not_change_what_is_read(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpointFile(path).write({TopicPartition("foo", 0): 15})
    (tmp_path / "replication-offset-checkpoint.tmp").write_bytes(b"0\n3\nfoo 0 9")  # torn, never renamed
    assert OffsetCheckpointFile(path).read() == {TopicPartition("foo", 0): 15}
    OffsetCheckpointFile(path).write({TopicPartition("foo", 0): 16})
    assert OffsetCheckpointFile(path).read() == {TopicPartition("foo", 0): 16}
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()


# -- partition.metadata ---------------------------------------------------------------------------------------


def test_partition_metadata_is_kafkas_two_lines_without_a_final_newline(tmp_path: Path) -> None:
    PartitionMetadataFile(tmp_path).write(TOPIC_ID)
    assert (tmp_path / "partition.metadata").read_bytes() == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
    assert PartitionMetadataFile(tmp_path).read() == TOPIC_ID
    assert not (tmp_path / "partition.metadata.tmp").exists()


def test_partition_metadata_reads_what_kafka_accepts(tmp_path: Path) -> None:
    # Kafka splits each line at ':' and whitespace, takes any version >= 0 (downgrades), and reads two lines.
    path = tmp_path / "partition.metadata"
    assert PartitionMetadataFile(tmp_path).read() is None  # no file: a log from before topic ids
    for text in (f"version: 0\ntopic_id: {TOPIC_ID}\n", f"version:   1\ntopic_id:\t{TOPIC_ID}==\nmore: lines"):
        path.write_text(text)
        assert PartitionMetadataFile(tmp_path).read() in (TOPIC_ID, TOPIC_ID + "==")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "malformed line 1"),
        ("version: 0\n", "malformed line 2"),
        ("version:0\ntopic_id: kY6UUBDqSwqvGcP5uXA0Bw", "malformed line 1"),
        ("topic_id: kY6UUBDqSwqvGcP5uXA0Bw\nversion: 0", "malformed line 1"),
        ("version: zero\ntopic_id: kY6UUBDqSwqvGcP5uXA0Bw", "unrecognized version"),
        ("version: -1\ntopic_id: kY6UUBDqSwqvGcP5uXA0Bw", "unrecognized version"),
        ("version: 0\ntopic_id: orders", "invalid topic id"),
        ("version: 0\ntopic_id: kY6UUBDqSwqvGcP5uXA0B", "invalid topic id"),
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "all-zero"),
    ],
)
def test_a_corrupt_partition_metadata_file_is_a_corrupt_checkpoint(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "partition.metadata").write_text(text)
    with pytest.raises(CorruptCheckpoint, match=problem) as raised:
        PartitionMetadataFile(tmp_path).read()
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR
    assert "partition.metadata" in str(raised.value)


def test_an_invalid_topic_id_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    for bad in ("", "orders", "AAAAAAAAAAAAAAAAAAAAAA", TOPIC_ID + "x"):
        with pytest.raises(StorageError) as raised:
            PartitionMetadataFile(tmp_path).write(bad)
        assert raised.value.error_code is ErrorCode.INVALID_REQUEST
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_the_disk_refuses_is_a_storage_error_and_the_old_file_stands(tmp_path: Path) -> None:
    # A directory where the file should go makes the rename fail, as a broken disk's would.
    path = tmp_path / "replication-offset-checkpoint"
    path.mkdir()
    with pytest.raises(StorageError, match="replication-offset-checkpoint: cannot write") as raised:
        OffsetCheckpointFile(path).write({TopicPartition("orders", 0): 5})
    assert raised.value.error_code is ErrorCode.KAFKA_STORAGE_ERROR
    assert path.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_snapshot_writes_the_offsets_it_was_taken_with_when_it_is_called(tmp_path: Path) -> None:
    # The broker takes the offsets on its driving task and writes them on a thread, later.
    path = tmp_path / "replication-offset-checkpoint"
    offsets = {TopicPartition("orders", 0): 5}
    write = OffsetCheckpointFile(path).snapshot(offsets)
    offsets[TopicPartition("orders", 0)] = 9  # the log moved on before the thread wrote
    assert not path.exists()
    write()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("orders", 0): 5}


def test_a_snapshot_older_than_one_already_written_is_dropped(tmp_path: Path) -> None:
    # Two writes finishing out of order (a slow thread, then a shutdown's own write) never take the file back.
    path = tmp_path / "log-start-offset-checkpoint"
    file = OffsetCheckpointFile(path)
    older = file.snapshot({TopicPartition("orders", 0): 3})
    file.write({TopicPartition("orders", 0): 7})
    older()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("orders", 0): 7}
    newer = file.snapshot({TopicPartition("orders", 0): 8})
    newer()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("orders", 0): 8}


def test_a_refused_snapshot_write_is_a_storage_error_and_a_later_one_still_writes(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    file = OffsetCheckpointFile(path)
    path.mkdir()
    with pytest.raises(StorageError, match="cannot write"):
        file.snapshot({TopicPartition("orders", 0): 5})()
    path.rmdir()
    file.snapshot({TopicPartition("orders", 0): 6})()
    assert OffsetCheckpointFile(path).read() == {TopicPartition("orders", 0): 6}
