"""Reading the lake back: every archived event, or just its count, from the complete batches only.

Room: libs/lake. For tests, tools and the pure-Python audit; the PySpark jobs read the same files themselves. A
batch still being written (fewer parts than its name says) is invisible here, so a reader beside a running
archiver sees whole batches or nothing of them. Every file is checked to be ours (either format of
`schema.file_format`, marked with `hightide.schema`) before it is read; anything else raises `NotOurFile` with the
file's path. What is read here is the columns both formats share (`schema.COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hightide.lake.layout import NotOurFile, scan_lake
from hightide.lake.schema import COLUMNS, SCHEMA, InvalidLakeRow, file_format, from_table, sort_rows
from hightide.protocol.envelope import Envelope


def read_envelopes(lake: Path) -> list[tuple[int, Envelope]]:
    """Every archived event as (stream sequence, envelope), by stream sequence then emitter sequence, each one
    rebuilt through `from_plain` (checked whole). A missing lake is an empty one."""
    rows = []
    for part in scan_lake(lake).files:
        try:
            rows += from_table(read_part(part.path))
        except InvalidLakeRow as error:
            raise NotOurFile(f"{part.path}: {error}") from None
    return sort_rows(rows)


def read_table(lake: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The archived events as one Arrow table (only `columns`, if given), by stream sequence then emitter sequence:
    the cheap way to look at many events without building envelopes."""
    names = list(columns) if columns is not None else SCHEMA.names
    unknown = sorted(set(names) - set(SCHEMA.names))
    assert not unknown, f"no such lake columns: {unknown}"
    wanted = list(dict.fromkeys([*names, "stream_sequence", "sequence"]))
    tables = [read_part(part.path).select(wanted) for part in scan_lake(lake).files]
    if not tables:
        return pa.schema([SCHEMA.field(n) for n in names]).empty_table()
    table = pa.concat_tables(tables).sort_by([("stream_sequence", "ascending"), ("sequence", "ascending")])
    return table.select(names)


def count_events(lake: Path) -> int:
    """How many events the lake holds, from the Parquet footers alone."""
    return sum(_open_part(path).metadata.num_rows for path in _paths(lake))


def file_formats(lake: Path) -> dict[Path, int]:
    """Each file of the lake's complete batches and its format (`schema.file_format`), from the footers alone."""
    return {path: part_format(path) for path in _paths(lake)}


def part_format(path: Path) -> int:
    """The format of one file of the lake (`schema.file_format`), from its footer; NotOurFile if it is not ours."""
    return file_format(_open_part(path).schema_arrow)


def read_part(path: Path) -> pa.Table:
    """One Parquet file of the lake, checked to be ours: the columns both formats share."""
    table = _open_part(path).read(columns=list(COLUMNS))
    assert isinstance(table, pa.Table)
    return table.replace_schema_metadata(SCHEMA.metadata)


def _paths(lake: Path) -> list[Path]:
    return [part.path for part in scan_lake(lake).files]


def _open_part(path: Path) -> pq.ParquetFile:
    try:
        file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise NotOurFile(f"{path} is not a Parquet file: {error}") from None
    try:
        file_format(file.schema_arrow)
    except ValueError as error:
        raise NotOurFile(f"{path} is not a Hightide event file ({error})") from None
    return file
