"""The event outbox: a service's events on its own disk before anything is published.

Room: libs/runtime. Each process incarnation appends to its own file, `<dir>/<incarnation>.outbox`, and holds an
exclusive `flock` on it for its whole life; a file nobody holds belongs to an incarnation that ended (cleanly,
or by kill -9) and may be adopted by the next process that uses the directory. Beside it, `<incarnation>.published`
holds how far the relay has had the event store acknowledge it.

File layout (big-endian):

    header:  b"HTOUTBOX" | u32 length | JSON {cluster_id, service, emitter_id, incarnation}
    record:  u32 data length | u32 crc32c | u64 first sequence | u32 event count | data

`data` is one msgpack array of envelopes (`protocol.envelope.encode_envelopes`), and becomes one JetStream
message. The CRC covers first sequence, count and data. Records are written with one `write` each, so a process
killed with -9 leaves every record it finished (the page cache outlives the process); what a crash of the machine
itself can tear is found on reading: the reader stops at the first record that is short or fails its CRC, and
reports where (`valid_end`). Nothing after that point was acted upon: a service acts only after `append` returns.

The published cursor is a small text file, one space-padded number of fixed width overwritten in place (a write
of 21 bytes at offset 0: the old number or the new one, never a mixture). It can lag behind the truth by the last
batch (a crash between the ack and the write): those batches are published again, and the stream drops them by
their `Nats-Msg-Id`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c

MAGIC: Final = b"HTOUTBOX"
_LENGTH: Final = struct.Struct(">I")
_RECORD: Final = struct.Struct(">IIQI")  # data length, crc32c, first sequence, event count
_CRC_FIELDS: Final = struct.Struct(">QI")
MAX_RECORD_BYTES: Final = 64 * 1024 * 1024
SUFFIX: Final = ".outbox"
CURSOR_SUFFIX: Final = ".published"
_CURSOR_WIDTH: Final = 20  # digits of the largest u64, space-padded: every write covers the one before it
_READ_CHUNK: Final = 1024 * 1024


class OutboxError(Exception):
    """An outbox file that is not one, or cannot be written."""


@dataclass(frozen=True, slots=True)
class OutboxHeader:
    cluster_id: str
    service: str
    emitter_id: int
    incarnation: str

    def encode(self) -> bytes:
        body = json.dumps(
            {
                "cluster_id": self.cluster_id,
                "service": self.service,
                "emitter_id": self.emitter_id,
                "incarnation": self.incarnation,
            },
            sort_keys=True,
        ).encode()
        return MAGIC + _LENGTH.pack(len(body)) + body


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    position: int  # where the record starts in its file
    end: int  # where the next one starts
    first_sequence: int
    count: int
    data: bytes


def outbox_path(directory: Path, incarnation: str) -> Path:
    return directory / f"{incarnation}{SUFFIX}"


def cursor_path(outbox: Path) -> Path:
    return outbox.with_suffix(CURSOR_SUFFIX)


class OutboxWriter:
    """The live incarnation's outbox: append-only, locked while the process lives."""

    def __init__(self, path: Path, fd: int, header: OutboxHeader, end: int) -> None:
        self.path = path
        self.header = header
        self._fd = fd
        self.end = end
        self.next_sequence = 0

    @classmethod
    def create(cls, directory: Path, header: OutboxHeader) -> OutboxWriter:
        directory.mkdir(parents=True, exist_ok=True)
        path = outbox_path(directory, header.incarnation)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as error:
            raise OutboxError(f"cannot create the event outbox {path}: {error.strerror}") from None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else can hold it
        encoded = header.encode()
        os.write(fd, encoded)
        return cls(path, fd, header, len(encoded))

    def append(self, first_sequence: int, count: int, data: bytes) -> int:
        """Write one record (one `write`); the file position after it."""
        if first_sequence != self.next_sequence:
            raise OutboxError(f"outbox {self.path}: sequence {first_sequence} follows {self.next_sequence - 1}")
        crc = crc32c.crc32c(data, crc32c.crc32c(_CRC_FIELDS.pack(first_sequence, count)))
        record = _RECORD.pack(len(data), crc, first_sequence, count) + data
        written = os.write(self._fd, record)
        if written != len(record):  # a regular file only writes short when the disk is full
            raise OutboxError(f"outbox {self.path}: short write ({written} of {len(record)} bytes)")
        self.end += len(record)
        self.next_sequence = first_sequence + count
        return self.end

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        os.close(self._fd)  # closing releases the flock
        self._fd = -1


class OutboxReader:
    """Reads an outbox file's records from a position, stopping at the end or at the first damaged record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self.header, self.records_start = self._read_header()
        except BaseException:
            os.close(self._fd)
            raise
        self.valid_end = self.records_start  # advanced as records are read
        self.damaged_at: int | None = None

    def _read_header(self) -> tuple[OutboxHeader, int]:
        start = os.pread(self._fd, len(MAGIC) + _LENGTH.size, 0)
        if len(start) < len(MAGIC) + _LENGTH.size or not start.startswith(MAGIC):
            raise OutboxError(f"{self.path} is not an event outbox")
        (length,) = _LENGTH.unpack_from(start, len(MAGIC))
        body = os.pread(self._fd, length, len(start))
        try:
            plain = json.loads(body)
            header = OutboxHeader(
                cluster_id=str(plain["cluster_id"]),
                service=str(plain["service"]),
                emitter_id=int(plain["emitter_id"]),
                incarnation=str(plain["incarnation"]),
            )
        except (ValueError, KeyError, TypeError):
            raise OutboxError(f"{self.path} has a damaged outbox header") from None
        return header, len(start) + length

    def records(self, start: int, end: int | None = None) -> Iterator[OutboxRecord]:
        """Every whole record from `start` (a record boundary) up to `end` or the end of the file."""
        position = max(start, self.records_start)
        buffer = b""
        buffer_at = position
        limit = end if end is not None else os.fstat(self._fd).st_size
        while position < limit:
            offset = position - buffer_at
            if len(buffer) - offset < _RECORD.size:
                buffer, buffer_at, offset = self._fill(buffer, buffer_at, position, _RECORD.size, limit)
                if len(buffer) - offset < _RECORD.size:
                    self.damaged_at = position
                    return
            length, crc, first_sequence, count = _RECORD.unpack_from(buffer, offset)
            size = _RECORD.size + length
            if length > MAX_RECORD_BYTES or position + size > limit:
                self.damaged_at = position
                return
            if len(buffer) - offset < size:
                buffer, buffer_at, offset = self._fill(buffer, buffer_at, position, size, limit)
            data = buffer[offset + _RECORD.size : offset + size]
            if crc32c.crc32c(data, crc32c.crc32c(_CRC_FIELDS.pack(first_sequence, count))) != crc:
                self.damaged_at = position
                return
            position += size
            self.valid_end = position
            yield OutboxRecord(position - size, position, first_sequence, count, data)

    def _fill(self, buffer: bytes, buffer_at: int, position: int, need: int, limit: int) -> tuple[bytes, int, int]:
        """Keep the unread part of the buffer and read on, at least `need` bytes past `position` if there."""
        rest = buffer[position - buffer_at :]
        want = max(need - len(rest), _READ_CHUNK)
        more = os.pread(self._fd, min(want, max(limit - position - len(rest), 0)), position + len(rest))
        return rest + more, position, 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_cursor(outbox: Path) -> int:
    """How far the event store has acknowledged this outbox (0: nothing yet; the reader starts at the records)."""
    try:
        return int(cursor_path(outbox).read_text().strip() or 0)
    except FileNotFoundError:
        return 0
    except ValueError:
        return 0  # a damaged cursor: publish everything again, the stream drops what it has by message id


def write_cursor(outbox: Path, position: int) -> None:
    """The cursor overwritten in place: one fixed-width write at offset 0, within one disk sector, so the file holds
    the old number or the new one. Not a temporary file renamed over it: on ext4 that rename (and a truncation to
    zero) starts the new file's write-back at once (auto_da_alloc), and under a busy disk it held the relay's
    event loop, the service's own, 0.6 ms at the median and 4-46 ms at the tail, five times a second (issue 15)."""
    fd = os.open(cursor_path(outbox), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, f"{position:>{_CURSOR_WIDTH}}\n".encode(), 0)
    finally:
        os.close(fd)


def try_lock(path: Path) -> int | None:
    """An fd holding the exclusive lock on an outbox no live process holds, or None if one does."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove(outbox: Path) -> None:
    """Delete an outbox whose every record the event store has, its cursor and its relay's plan."""
    for path in (outbox, cursor_path(outbox), outbox.with_suffix(".groups")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# -- the relay's plan: which records go together in one message ---------------------------------------------------
#
# The relay publishes several outbox records as one message (one msgpack array), and names the message by its
# first event's sequence. A message published again after a crash must hold exactly the same records, or the
# stream would drop a copy that holds more than the first (same message id) and lose the difference. So each
# message's extent ("start end" positions) is appended to `<incarnation>.groups` before it is published, and a
# relay that starts again re-forms the messages beyond its cursor exactly as planned before forming new ones.

GROUPS_SUFFIX: Final = ".groups"


def groups_path(outbox: Path) -> Path:
    return outbox.with_suffix(GROUPS_SUFFIX)


def read_groups(outbox: Path, cursor: int) -> list[tuple[int, int]]:
    """The planned messages that start at `cursor` and follow each other without a gap (a torn last line, or
    anything not in that chain, is not a plan anyone published by)."""
    try:
        lines = groups_path(outbox).read_text().splitlines()
    except FileNotFoundError:
        return []
    extents: dict[int, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            extents[int(parts[0])] = int(parts[1])
    plan: list[tuple[int, int]] = []
    start = cursor
    while start in extents and extents[start] > start:
        plan.append((start, extents[start]))
        start = extents[start]
    return plan


class GroupsFile:
    """Appends planned message extents; emptied once the cursor has passed every one of them."""

    def __init__(self, outbox: Path) -> None:
        self._fd = os.open(groups_path(outbox), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size

    def append(self, extents: list[tuple[int, int]]) -> None:
        data = "".join(f"{start} {end}\n" for start, end in extents).encode()
        os.write(self._fd, data)
        self.size += len(data)

    def clear(self) -> None:
        if self.size:
            os.ftruncate(self._fd, 0)
            self.size = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def merge_arrays(records: list[OutboxRecord]) -> bytes:
    """One msgpack array of every record's envelopes, in order (each record's data is a msgpack array)."""
    if len(records) == 1:
        return records[0].data
    total = sum(record.count for record in records)
    return _array_header(total) + b"".join(record.data[_array_header_size(record.data) :] for record in records)


def _array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 2**16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def _array_header_size(data: bytes) -> int:
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    raise OutboxError(f"an outbox record that is not a msgpack array (first byte {first:#x})")
