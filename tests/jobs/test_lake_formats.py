"""Spark reads a lake of either format (`hightide.lake.schema`) as the same rows: format 1's typed payload columns
are parsed from its payloads as they are read (`events.read_files`), so every job gives the same answers on a lake
archived before format 2, after it, or partly both.

The fixture `tests/fixtures/lake_format1` is a lake written by format-1 code (commit b045ff9): the history of the
`truncate_to_local_high_watermark` mutant at seed 5 (596 events, four batches), whose audit finds violations.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from hightide.audit import audit
from hightide.history.audit import run_audit
from hightide.history.events import LAKE_SCHEMA, read_files
from hightide.lake import file_formats, read_envelopes, scan_lake
from hightide.lake.reader import read_part
from hightide.lake.schema import from_table, to_table

FORMAT1_LAKE = Path(__file__).parents[1] / "fixtures" / "lake_format1"


def _in_format_2(lake: Path, to: Path, files: slice = slice(None)) -> Path:
    """A copy of `lake` with the files of `files` (in `scan_lake`'s order) written again by today's writer: the same
    rows (stream sequences included), now with their typed payload columns."""
    shutil.copytree(lake, to)
    for part in scan_lake(to).files[files]:
        pq.write_table(to_table(from_table(read_part(part.path))), part.path, compression="zstd")
    return to


def _rows(spark: SparkSession, lake: Path) -> list[tuple[object, ...]]:
    frame = read_files(spark, [part.path for part in scan_lake(lake).files])
    assert frame.schema.simpleString() == LAKE_SCHEMA.simpleString()  # Spark reads every Parquet column as nullable
    return sorted(tuple(row) for row in frame.collect())


def test_a_format_1_lake_reads_as_its_format_2_copy_column_for_column(spark: SparkSession, tmp_path: Path) -> None:
    # given the fixture's files written again by today's writer
    again = _in_format_2(FORMAT1_LAKE, tmp_path / "again")
    assert set(file_formats(FORMAT1_LAKE).values()) == {1}
    assert set(file_formats(again).values()) == {2}

    old, new = _rows(spark, FORMAT1_LAKE), _rows(spark, again)

    assert len(old) == 596
    assert old == new  # every column, the typed payloads included


def test_a_format_1_lake_audits_as_the_specification_does(spark: SparkSession) -> None:
    history = [envelope for _, envelope in read_envelopes(FORMAT1_LAKE)]

    on_spark = run_audit(spark, FORMAT1_LAKE)

    assert on_spark == audit(history)
    assert [f for f in on_spark if f.is_violation], "the fixture's history has violations to find"


def test_a_lake_of_both_formats_audits_as_the_specification_does(spark: SparkSession, tmp_path: Path) -> None:
    # given the fixture with two of its four batches in format 2 (an archiver upgraded mid-lake)
    lake = _in_format_2(FORMAT1_LAKE, tmp_path / "mixed", slice(2, None))
    assert sorted(file_formats(lake).values()) == [1, 1, 2, 2]
    history = [envelope for _, envelope in read_envelopes(lake)]

    assert run_audit(spark, lake) == audit(history)
