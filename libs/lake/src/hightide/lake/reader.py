"""Reading the lake back: every archived event, or just its count, from the complete batches only.

Room: libs/lake. For tests, tools and the pure-Python audit; the PySpark jobs read the same files themselves. A
batch still being written (fewer parts than its name says) is invisible here, so a reader beside a running
archiver sees whole batches or nothing of them. Every file is checked to be ours (`schema.SCHEMA`, marked with
`hightide.schema`) before it is read; anything else raises `NotOurFile` with the file's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hightide.lake.layout import NotOurFile, scan_lake
from hightide.lake.schema import SCHEMA, SCHEMA_KEY, SCHEMA_VALUE, InvalidLakeRow, from_table, sort_rows
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
    return sum(_open_part(part.path).metadata.num_rows for part in scan_lake(lake).files)


def read_part(path: Path) -> pa.Table:
    """One Parquet file of the lake, checked to be ours."""
    table = _open_part(path).read()
    assert isinstance(table, pa.Table)
    return table


def _open_part(path: Path) -> pq.ParquetFile:
    try:
        file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise NotOurFile(f"{path} is not a Parquet file: {error}") from None
    schema = file.schema_arrow
    marker = (schema.metadata or {}).get(SCHEMA_KEY)
    if marker != SCHEMA_VALUE or not schema.equals(SCHEMA, check_metadata=False):
        what = marker.decode(errors="replace") if marker else "no hightide.schema marker"
        raise NotOurFile(f"{path} is not a Hightide event file ({what}; expected {SCHEMA_VALUE.decode()})")
    return file
