"""Where things are in a lake directory, and what its file names say about which stream sequences it holds.

Room: libs/lake. It owns the names and reads directories; it writes nothing (the writer does). A lake is:

```
DIR/.lock                                        flock held by the one writer (an archiver or an export)
DIR/_stream.json                                 the stream (name, creation time) whose sequences the names count
DIR/date=YYYY-MM-DD/hour=HH/events-F-L.IofN.parquet   part I of N of the batch of stream sequences F..L
DIR/date=YYYY-MM-DD/hour=HH/.events-F-L.IofN.parquet.tmp   a part being written (deleted on recovery)
DIR/quarantine/S.msgpack                         the raw bytes of stream message S, which did not decode
```

A batch is one write: the messages of a contiguous run of stream sequences F..L, whose events went to one file
per hour partition they touched (N files), each event by its own `wall_ms` in UTC. Parts are renamed into place
one by one, so a crash can leave a batch with fewer than N parts: such a batch is *incomplete*, its messages
were never acknowledged, and recovery deletes its parts. The stream sequences the lake holds are therefore the
union of the complete batches' ranges and the quarantined sequences, read from names alone (`LakeScan`).

Names starting with `.` or `_` are hidden, as Spark and Hadoop treat them. A visible file in an hour directory
that is not named like ours is refused (`NotOurFile`): a lake holds only what its writer put there.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

HOUR_MS: Final = 3_600_000
# The last millisecond a `date=YYYY-MM-DD` can name (9999-12-31T23:59:59.999Z); a later wall clock is not archivable.
WALL_MS_MAX: Final = 253_402_300_799_999
LOCK_FILE: Final = ".lock"
STREAM_FILE: Final = "_stream.json"
QUARANTINE_DIR: Final = "quarantine"
_DATE_DIR: Final = re.compile(r"date=(\d{4}-\d{2}-\d{2})")
_HOUR_DIR: Final = re.compile(r"hour=(\d{2})")
_PART: Final = re.compile(r"events-(\d+)-(\d+)\.(\d+)of(\d+)\.parquet")
_TEMP: Final = re.compile(r"\.events-\d+-\d+\.\d+of\d+\.parquet\.tmp")
_QUARANTINED: Final = re.compile(r"(\d+)\.msgpack")
_QUARANTINE_TEMP: Final = re.compile(r"\.\d+\.msgpack\.tmp")


class LakeError(Exception):
    """The lake cannot be used as asked; the message is one line, fit for the CLI."""


class NotOurFile(LakeError):
    """A file in the lake that its writer did not make (wrong name, not Parquet, or another schema)."""


# -- names -------------------------------------------------------------------------------------------------------


def hour_of(wall_ms: int) -> int:
    """The hour partition of a wall-clock time: whole hours since the epoch (UTC)."""
    assert 0 <= wall_ms <= WALL_MS_MAX, wall_ms
    return wall_ms // HOUR_MS


def partition_path(hour: int) -> Path:
    """`date=YYYY-MM-DD/hour=HH` of an hour since the epoch."""
    moment = datetime.fromtimestamp(hour * 3600, tz=UTC)
    return Path(f"date={moment:%Y-%m-%d}") / f"hour={moment:%H}"


def part_name(first: int, last: int, part: int, parts: int) -> str:
    assert 0 < first <= last and 1 <= part <= parts, (first, last, part, parts)
    return f"events-{first}-{last}.{part}of{parts}.parquet"


def temp_name(final_name: str) -> str:
    return f".{final_name}.tmp"


def quarantine_name(stream_sequence: int) -> str:
    return f"{stream_sequence}.msgpack"


@dataclass(frozen=True, slots=True)
class PartFile:
    """One Parquet file of the lake: part `part` of `parts` of the batch of stream sequences first..last."""

    path: Path
    first: int
    last: int
    part: int
    parts: int

    @property
    def batch(self) -> tuple[int, int, int]:
        return (self.first, self.last, self.parts)


def parse_part(path: Path) -> PartFile | None:
    match = _PART.fullmatch(path.name)
    if match is None:
        return None
    first, last, part, parts = (int(g) for g in match.groups())
    if not (0 < first <= last and 1 <= part <= parts):
        return None
    return PartFile(path, first, last, part, parts)


# -- sets of stream sequences ------------------------------------------------------------------------------------


@dataclass(slots=True)
class SequenceRanges:
    """A set of stream sequences as sorted, disjoint, non-adjacent closed ranges (adjacent ones are merged), so a
    lake of a million contiguous batches is one range."""

    _firsts: list[int] = field(default_factory=list)
    _lasts: list[int] = field(default_factory=list)

    def add(self, first: int, last: int) -> None:
        assert first <= last, (first, last)
        # Every range that overlaps or touches [first, last] merges into it.
        lo = bisect.bisect_left(self._lasts, first - 1)
        hi = bisect.bisect_right(self._firsts, last + 1)
        if lo < hi:
            first, last = min(first, self._firsts[lo]), max(last, self._lasts[hi - 1])
        self._firsts[lo:hi] = [first]
        self._lasts[lo:hi] = [last]

    def __contains__(self, sequence: int) -> bool:
        i = bisect.bisect_right(self._firsts, sequence) - 1
        return i >= 0 and sequence <= self._lasts[i]

    def covers(self, first: int, last: int) -> bool:
        """Every sequence of first..last is in the set (true for an empty range, first > last)."""
        if first > last:
            return True
        i = bisect.bisect_right(self._firsts, first) - 1
        return i >= 0 and last <= self._lasts[i]

    def first_missing(self, start: int) -> int:
        """The smallest sequence >= start that is not in the set."""
        i = bisect.bisect_right(self._firsts, start) - 1
        return self._lasts[i] + 1 if i >= 0 and start <= self._lasts[i] else start

    def count_within(self, first: int, last: int) -> int:
        """How many sequences of first..last are in the set."""
        return sum(max(0, min(b, last) - max(a, first) + 1) for a, b in zip(self._firsts, self._lasts, strict=True))

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._firsts, self._lasts, strict=True))


# -- reading a lake's directory ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    first: int
    last: int
    parts: tuple[PartFile, ...]  # in part order; all `n` of them when complete


@dataclass(slots=True)
class LakeScan:
    """What a lake holds, from its names alone (no file is opened)."""

    complete: list[Batch] = field(default_factory=list)
    incomplete: list[Batch] = field(default_factory=list)
    temporary: list[Path] = field(default_factory=list)
    quarantined: dict[int, Path] = field(default_factory=dict)
    archived: SequenceRanges = field(default_factory=SequenceRanges)

    @property
    def files(self) -> list[PartFile]:
        """Every part of every complete batch, in stream sequence order."""
        return [part for batch in self.complete for part in batch.parts]


def scan_lake(lake: Path) -> LakeScan:
    """Read the lake's names. A missing lake is an empty one; a file that is not ours raises NotOurFile."""
    scan = LakeScan()
    if not lake.exists():
        return scan
    if not lake.is_dir():
        raise LakeError(f"the lake {lake} is not a directory")
    groups: dict[tuple[int, int, int], list[PartFile]] = {}
    for hour_dir in _hour_dirs(lake):
        for path in sorted(hour_dir.iterdir()):
            part = parse_part(path)
            if part is not None and path.is_file():
                groups.setdefault(part.batch, []).append(part)
            elif _TEMP.fullmatch(path.name):
                scan.temporary.append(path)
            elif not path.name.startswith((".", "_")):
                raise NotOurFile(f"{path} is not a Hightide event file (expected events-FIRST-LAST.IofN.parquet)")
    for (first, last, parts), found in sorted(groups.items()):
        batch = Batch(first, last, tuple(sorted(found, key=lambda p: p.part)))
        complete = sorted(p.part for p in found) == list(range(1, parts + 1))
        (scan.complete if complete else scan.incomplete).append(batch)
        if complete:
            scan.archived.add(first, last)
    _scan_quarantine(lake / QUARANTINE_DIR, scan)
    return scan


def _hour_dirs(lake: Path) -> list[Path]:
    dirs = []
    for date_dir in sorted(lake.iterdir()):
        if date_dir.is_dir() and _DATE_DIR.fullmatch(date_dir.name):
            dirs += [d for d in sorted(date_dir.iterdir()) if d.is_dir() and _HOUR_DIR.fullmatch(d.name)]
    return dirs


def _scan_quarantine(directory: Path, scan: LakeScan) -> None:
    if not directory.is_dir():
        return
    for path in sorted(directory.iterdir()):
        match = _QUARANTINED.fullmatch(path.name)
        if match is not None:
            scan.quarantined[int(match.group(1))] = path
            scan.archived.add(int(match.group(1)), int(match.group(1)))
        elif _QUARANTINE_TEMP.fullmatch(path.name):
            scan.temporary.append(path)
