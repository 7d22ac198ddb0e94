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
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Final, NamedTuple

from hightide.storage.errors import CorruptCheckpoint

CHECKPOINT_VERSION: Final = 0
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"


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


def write_checkpoint(path: Path, lines: Iterable[str], version: int = CHECKPOINT_VERSION) -> None:
    """Write version, count and entry lines atomically: temp file, fsync, rename, fsync the directory."""
    entries = list(lines)
    text = "".join(f"{line}\n" for line in [str(version), str(len(entries)), *entries])
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


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
    """`topic partition offset` entries for a whole log dir (HW, recovery point or log start offset)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            assert offset >= 0, f"negative checkpoint offset {offset} for {tp}"
            assert tp.topic and not any(c.isspace() for c in tp.topic), tp
        lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        write_checkpoint(self.path, lines)

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
