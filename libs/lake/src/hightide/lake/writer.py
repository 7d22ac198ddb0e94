"""Writing stream messages into the lake, durably and exactly once per stream sequence.

Room: libs/lake. The writer turns EVENTS messages (stream sequence, raw bytes) into Parquet parts; it never talks
to NATS, so the archiver and the one-shot export share it, and the caller acknowledges a message only after
`write` returns. It must never hold a stream sequence twice, and never hold part of a batch as if it were whole.

How (see `layout` for the names):
1. `open` takes the lake's lock, scans the names, deletes temporary files and the parts of incomplete batches
   (a crash between two renames: those messages were never acknowledged and come again), and so learns exactly
   which stream sequences the lake holds. While the lock is held nobody else changes them, so the set kept in
   memory stays equal to what the names say.
2. `write` skips every message whose sequence the lake holds (a redelivery, whatever the new batch boundaries),
   quarantines the raw bytes of a message that does not decode (`quarantine/<seq>.msgpack`) so it cannot block
   the lake, and splits the rest into runs of consecutive sequences: a batch's name claims its whole range, so
   a range may only bridge sequences the lake already holds, never one that is still to come (a redelivery
   can arrive between newer messages).
3. Each run's events go to one part per hour partition of their own `wall_ms`; every part is written to a
   hidden temporary name and fsynced, then all are renamed into place, each directory fsynced after its rename.

Stream sequences identify messages only within one stream's lifetime, so a reader of NATS binds the lake to the
stream it reads (`bind_stream`) before writing; a stream deleted and created anew needs a lake of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

import pyarrow.parquet as pq

from hightide.lake.layout import (
    QUARANTINE_DIR,
    STREAM_FILE,
    WALL_MS_MAX,
    LakeError,
    SequenceRanges,
    hour_of,
    part_name,
    partition_path,
    quarantine_name,
    scan_lake,
    temp_name,
)
from hightide.lake.lock import LakeLock
from hightide.lake.schema import to_table
from hightide.protocol.envelope import Envelope, decode_envelopes
from hightide.protocol.events import InvalidEvent
from hightide.runtime.logging import Logger

# zstd: the JSON payloads shrink several times more than with snappy, and Spark 3.2+ reads it natively.
COMPRESSION: Final = "zstd"

StreamMessage = tuple[int, bytes]  # (stream sequence, the message's data)


@dataclass(frozen=True, slots=True)
class WriteResult:
    messages: int  # newly archived: their events are now in the lake (a message may hold no event)
    events: int
    files: int
    skipped: int  # already in the lake
    quarantined: int  # did not decode: their raw bytes are in quarantine/


@dataclass(frozen=True, slots=True)
class _Decoded:
    stream_sequence: int
    envelopes: list[Envelope]


class LakeWriter:
    """The lake's one writer (it holds the lock between `open` and `close`)."""

    def __init__(self, lake: Path, log: Logger) -> None:
        self.lake = lake
        self._log = log
        self._lock = LakeLock(lake)
        self._archived = SequenceRanges()

    @property
    def archived(self) -> SequenceRanges:
        """The stream sequences the lake holds (complete batches and quarantined messages)."""
        return self._archived

    def open(self) -> LakeWriter:
        self._lock.acquire()
        try:
            self._recover()
        except BaseException:
            self._lock.release()
            raise
        return self

    def close(self) -> None:
        self._lock.release()

    def __enter__(self) -> LakeWriter:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _recover(self) -> None:
        _fsync_dir(self.lake.parent)  # the lock created the lake's directory
        scan = scan_lake(self.lake)
        doomed = scan.temporary + [part.path for batch in scan.incomplete for part in batch.parts]
        for batch in scan.incomplete:
            self._log.warning(
                "lake_incomplete_batch_deleted", first=batch.first, last=batch.last, parts=[p.part for p in batch.parts]
            )
        for path in doomed:
            path.unlink()
        for directory in {path.parent for path in doomed}:
            _fsync_dir(directory)
        self._archived = scan.archived

    def bind_stream(self, stream: str, created: str) -> None:
        """Tie the lake to one stream's lifetime: stream sequences start again at 1 in a stream deleted and created
        anew, and the lake would skip its messages as ones it holds. The first binding is recorded in
        `_stream.json`; a lake bound to another stream (or another creation of it) is a LakeError."""
        assert self._lock.held, "open the writer first"
        path = self.lake / STREAM_FILE
        wanted = {"stream": stream, "created": created}
        try:
            bound = json.loads(path.read_text())
        except FileNotFoundError:
            _write_synced(path.with_name(temp_name(path.name)), lambda f: f.write(json.dumps(wanted).encode()))
            os.replace(path.with_name(temp_name(path.name)), path)
            _fsync_dir(self.lake)
            return
        except (OSError, ValueError) as error:
            raise LakeError(f"{path} is unreadable: {error}") from None
        if bound != wanted:
            raise LakeError(
                f"the lake {self.lake} archives stream {bound.get('stream')} created {bound.get('created')}, "
                f"not {stream} created {created}: give this stream a lake of its own"
            )

    # -- writing ---------------------------------------------------------------------------------------------------

    def write(self, messages: Sequence[StreamMessage]) -> WriteResult:
        """Archive `messages` (any order, duplicates allowed); when this returns they are durably in the lake and
        may be acknowledged. An OSError (disk full, ...) leaves nothing the next `open` would count as archived."""
        assert self._lock.held, "open the writer first"
        by_sequence = dict(sorted(messages))
        skipped = [seq for seq in by_sequence if seq in self._archived]
        decoded: list[_Decoded] = []
        quarantined = 0
        for seq, data in by_sequence.items():
            if seq in self._archived:
                continue
            try:
                decoded.append(_Decoded(seq, _decode(data)))
            except InvalidEvent as error:
                self._quarantine(seq, data, str(error))
                quarantined += 1
        events = files = 0
        for run in self._runs(decoded):
            events += sum(len(message.envelopes) for message in run)
            files += self._write_run(run)
        return WriteResult(len(decoded), events, files, len(skipped), quarantined)

    def _runs(self, decoded: list[_Decoded]) -> list[list[_Decoded]]:
        """Split into runs whose ranges claim no sequence the lake does not hold and the run does not bring."""
        runs: list[list[_Decoded]] = []
        for message in decoded:
            if runs and self._archived.covers(runs[-1][-1].stream_sequence + 1, message.stream_sequence - 1):
                runs[-1].append(message)
            else:
                runs.append([message])
        return runs

    def _write_run(self, run: list[_Decoded]) -> int:
        first, last = run[0].stream_sequence, run[-1].stream_sequence
        by_hour: dict[int, list[tuple[int, Envelope]]] = {}
        for message in run:
            for envelope in message.envelopes:
                by_hour.setdefault(hour_of(envelope.wall_ms), []).append((message.stream_sequence, envelope))
        if not by_hour:
            return 0  # messages with no events: nothing to hold, and redoing them later is harmless
        parts = [(self.lake / partition_path(hour), by_hour[hour]) for hour in sorted(by_hour)]
        names = [part_name(first, last, i, len(parts)) for i in range(1, len(parts) + 1)]
        placed = [
            (directory / temp_name(name), directory / name) for (directory, _), name in zip(parts, names, strict=True)
        ]
        for _, final in placed:
            assert not final.exists(), f"{final} exists: the lake would hold stream sequences {first}-{last} twice"
        try:
            for (directory, rows), (temp, _) in zip(parts, placed, strict=True):
                _ensure_dir(directory, self.lake)
                _write_synced(temp, functools.partial(pq.write_table, to_table(rows), compression=COMPRESSION))
            # The rename of the last part is the commit point: until then `open` finds the batch incomplete.
            for temp, final in placed:
                os.replace(temp, final)
                _fsync_dir(final.parent)
        except Exception:
            _remove_quietly([path for pair in placed for path in pair])  # so a retry finds the names free
            raise
        self._archived.add(first, last)
        return len(placed)

    def _quarantine(self, stream_sequence: int, data: bytes, reason: str) -> None:
        directory = self.lake / QUARANTINE_DIR
        _ensure_dir(directory, self.lake)
        final = directory / quarantine_name(stream_sequence)
        temp = directory / temp_name(final.name)
        _write_synced(temp, lambda f: f.write(data))
        os.replace(temp, final)
        _fsync_dir(directory)
        self._archived.add(stream_sequence, stream_sequence)
        self._log.error("lake_message_quarantined", stream_sequence=stream_sequence, reason=reason, path=str(final))


def _decode(data: bytes) -> list[Envelope]:
    envelopes = decode_envelopes(data)
    for envelope in envelopes:
        if envelope.wall_ms > WALL_MS_MAX:
            raise InvalidEvent(f"wall_ms {envelope.wall_ms} is after year 9999: no date partition can hold it")
    return envelopes


def _write_synced(path: Path, write: Callable[[BinaryIO], object]) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _remove_quietly(paths: list[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dir(directory: Path, root: Path) -> None:
    """Create `directory` and any missing parents up to `root`, fsyncing each parent that gained an entry."""
    if directory.is_dir():
        return
    if directory != root:
        _ensure_dir(directory.parent, root)
    try:
        directory.mkdir()
    except FileExistsError:
        if not directory.is_dir():
            raise LakeError(f"{directory} is in the lake's way: it is not a directory") from None
        return
    _fsync_dir(directory.parent)
