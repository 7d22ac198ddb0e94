"""Checkpoint files in Kafka's format, written atomically.

Room: libs/storage. Kafka's `CheckpointFile`: UTF-8 text, a version line, an entry-count line, then one entry per
line with fields separated by whitespace. Writes go to `<file>.tmp`, are fsynced, renamed over the file, and the
directory is fsynced, so a crash leaves either the old file or the new one, never a mixture.

| file                               | where          | entry line                      |
| ---------------------------------- | -------------- | ------------------------------- |
| `leader-epoch-checkpoint`          | partition dir  | `<epoch> <start offset>`        |
| `replication-offset-checkpoint`    | log dir        | `<topic> <partition> <offset>`  |
| `recovery-point-offset-checkpoint` | log dir        | `<topic> <partition> <offset>`  |
| `log-start-offset-checkpoint`      | log dir        | `<topic> <partition> <offset>`  |

A missing or empty file reads as no entries (Kafka creates these files empty). Anything else that does not
parse is a `CorruptCheckpoint` (KAFKA_STORAGE_ERROR) naming the file and line.

Beside them, in each partition dir, Kafka's `partition.metadata` (`PartitionMetadataFile`), which is not a
checkpoint file but two `key: value` lines without a final newline, written the same atomic way:

    version: 0
    topic_id: <the topic id: a UUID in URL-safe base64, 22 characters>

It ties the replica's data to one incarnation of its topic: a topic deleted and created again under the same
name has a new id, and a log still holding the old one must not be reused.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Final, NamedTuple

from hightide.protocol.errors import ErrorCode
from hightide.storage.errors import CorruptCheckpoint, StorageError

CHECKPOINT_VERSION: Final = 0
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
PARTITION_METADATA: Final = "partition.metadata"
PARTITION_METADATA_VERSION: Final = 0
_TOPIC_ID: Final = re.compile(r"[A-Za-z0-9_-]{22}(==)?")
_KEY_VALUE: Final = re.compile(r":\s+")
_VERSION: Final = re.compile(r"[+-]?[0-9]+")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class EpochEntry(NamedTuple):
    """One leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def fsync_directory(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` by `text` so that a crash leaves the old file or the new one: temp file, fsync, rename,
    fsync the directory. A disk that refuses is a StorageError (KAFKA_STORAGE_ERROR); the old file stands."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_directory(path.parent)
    except OSError as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StorageError(f"{path}: cannot write: {error}") from None


def write_checkpoint(path: Path, lines: Iterable[str], version: int = CHECKPOINT_VERSION) -> None:
    """Write version, count and entry lines atomically."""
    entries = list(lines)
    write_atomically(path, "".join(f"{line}\n" for line in [str(version), str(len(entries)), *entries]))


def read_checkpoint(path: Path, fields: int, version: int = CHECKPOINT_VERSION) -> list[list[str]]:
    """Read a checkpoint's entry lines, each split into exactly `fields` whitespace-separated fields."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise CorruptCheckpoint(f"{path}: unreadable: {e}") from None
    lines = text.splitlines()
    if not lines:
        return []
    if len(lines) < 2:
        raise CorruptCheckpoint(f"{path}: expected a version line and a count line")
    if lines[0].strip() != str(version):
        raise CorruptCheckpoint(f"{path}: unrecognized version {lines[0]!r}, expected {version}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpoint(f"{path}: malformed entry count {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:]]
    if count != len(entries):
        raise CorruptCheckpoint(f"{path}: expected {count} entries but found {len(entries)}")
    for number, entry in enumerate(entries, start=3):
        if len(entry) != fields:
            raise CorruptCheckpoint(f"{path}: line {number}: expected {fields} fields, got {entry!r}")
    return entries


def _parse_int(path: Path, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise CorruptCheckpoint(f"{path}: {value!r} is not a number") from None
    if number < 0:
        raise CorruptCheckpoint(f"{path}: negative offset or epoch {number}")
    return number


class OffsetCheckpointFile:
    """`topic partition offset` entries for a whole log dir (HW, recovery point or log start offset).

    A write may be taken now and carried out later on another thread (`snapshot`: Kafka writes these files from
    its scheduler's threads, not a request thread, and each costs two fsyncs). Writes of one file never overlap
    (they share `<file>.tmp`), and a snapshot taken before one already written is dropped, so the file never goes
    back to older offsets whatever order the threads finish in."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._taken = 0  # snapshots taken (on the owner's thread)
        self._written = 0  # the newest snapshot written

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.snapshot(offsets)()

    def snapshot(self, offsets: Mapping[TopicPartition, int]) -> Callable[[], None]:
        """The file's content as `offsets` say now; calling the result writes it (on any thread), unless a newer
        snapshot of this file was written first."""
        for tp, offset in offsets.items():
            assert offset >= 0, f"negative checkpoint offset {offset} for {tp}"
            assert tp.topic and not any(c.isspace() for c in tp.topic), tp
        lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        self._taken += 1
        generation = self._taken

        def write() -> None:
            with self._lock:
                if generation < self._written:
                    return
                write_checkpoint(self.path, lines)
                self._written = generation

        return write

    def read(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for topic, partition, offset in read_checkpoint(self.path, fields=3):
            result[TopicPartition(topic, _parse_int(self.path, partition))] = _parse_int(self.path, offset)
        return result


class LeaderEpochCheckpointFile:
    """`epoch start_offset` entries for one partition, oldest epoch first."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Iterable[EpochEntry]) -> None:
        items = list(entries)
        for earlier, later in pairwise(items):
            assert later.epoch > earlier.epoch and later.start_offset >= earlier.start_offset, items
        write_checkpoint(self.path, [f"{e.epoch} {e.start_offset}" for e in items])

    def read(self) -> list[EpochEntry]:
        entries = [
            EpochEntry(_parse_int(self.path, epoch), _parse_int(self.path, offset))
            for epoch, offset in read_checkpoint(self.path, fields=2)
        ]
        for earlier, later in pairwise(entries):
            if later.epoch <= earlier.epoch or later.start_offset < earlier.start_offset:
                raise CorruptCheckpoint(f"{self.path}: entries out of order: {earlier} then {later}")
        return entries


def topic_id_problem(topic_id: str) -> str | None:
    """Why `topic_id` is not a topic id as Kafka's `Uuid.fromString` reads one (URL-safe base64 of 16 bytes), or
    None. The all-zero id is Kafka's "no id" and is refused too."""
    if not _TOPIC_ID.fullmatch(topic_id):
        return f"{topic_id!r} is not a base64 topic id of 22 characters"
    if not any(base64.urlsafe_b64decode(topic_id[:22] + "==")):
        return "the all-zero topic id means no id"
    return None


class PartitionMetadataFile:
    """Kafka's `partition.metadata` of one partition dir: the topic id the replica's data belongs to."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / PARTITION_METADATA

    def read(self) -> str | None:
        """The topic id on file, or None when there is no file (a log written before topic ids). A file that is
        not Kafka's format is a CorruptCheckpoint naming what is wrong (Kafka's PartitionMetadataReadBuffer)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise CorruptCheckpoint(f"{self.path}: unreadable: {e}") from None
        lines = text.splitlines()
        version = self._value(lines, 0, "version")
        if not _VERSION.fullmatch(version) or int(version) < PARTITION_METADATA_VERSION:
            raise CorruptCheckpoint(f"{self.path}: unrecognized version {version!r}")
        topic_id = self._value(lines, 1, "topic_id")
        problem = topic_id_problem(topic_id)
        if problem is not None:
            raise CorruptCheckpoint(f"{self.path}: invalid topic id: {problem}")
        return topic_id

    def write(self, topic_id: str) -> None:
        """Write the file atomically (Kafka's bytes: no newline after the last line)."""
        problem = topic_id_problem(topic_id)
        if problem is not None:
            raise StorageError(f"{self.path}: invalid topic id: {problem}", ErrorCode.INVALID_REQUEST)
        write_atomically(self.path, f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}")

    def _value(self, lines: list[str], number: int, key: str) -> str:
        line = lines[number] if number < len(lines) else None
        parts = _KEY_VALUE.split(line, maxsplit=1) if line is not None else []
        if len(parts) != 2 or parts[0] != key:
            raise CorruptCheckpoint(f"{self.path}: malformed line {number + 1}, expected '{key}: ...': {line!r}")
        return parts[1]
