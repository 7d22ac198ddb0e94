"""Lake format 2: each type's payload again as a typed struct column, beside the JSON payload; and format 1 (the
sixteen columns alone, as the lake was written before 2026-12-03) still read.

The fixture `tests/fixtures/lake_format1` is a lake written by format-1 code (commit b045ff9): the history of the
`truncate_to_local_high_watermark` mutant at seed 5 (596 events in four batches), archived through `LakeWriter`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.lake import NotOurFile, file_formats, read_envelopes, scan_lake
from hightide.lake.schema import COLUMNS, PAYLOAD_TYPES, SCHEMA, file_format, payload_json, to_table
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import CATALOGUE, Event
from support.event_strategies import events_of

FORMAT1_LAKE = Path(__file__).parents[2] / "fixtures" / "lake_format1"


def as_json(value: object) -> object:
    """A value as JSON gives it back: tuples as lists."""
    return json.loads(json.dumps(value))


@st.composite
def envelopes(draw: st.DrawFn) -> list[Envelope]:
    classes: list[type[Event]] = draw(st.lists(st.sampled_from(list(CATALOGUE.values())), min_size=1, max_size=12))
    emitter = Emitter("broker", 1, "inc-1")
    return [Envelope("c", emitter, i, 1_000 + i, i, draw(events_of(c))) for i, c in enumerate(classes)]


@settings(max_examples=60, deadline=None)
@given(envelopes())
def test_each_row_holds_its_payload_typed_in_its_own_types_column_and_null_in_the_others(
    rows: list[Envelope],
) -> None:
    table = to_table([(1, envelope) for envelope in rows])

    present = [name for name in CATALOGUE if name in {envelope.type for envelope in rows}]
    assert table.schema.names == [*COLUMNS, *present]  # only the file's own types, in catalogue order
    for name in present:
        assert table.schema.field(name).type == PAYLOAD_TYPES[name]
    for i, row in enumerate(table.to_pylist()):
        own = row["type"]
        assert row[own] == as_json(json.loads(row["payload"])) == as_json(json.loads(payload_json(row[own])))
        assert all(row[name] is None for name in present if name != own), i


def test_every_catalogue_type_has_a_typed_column_with_every_field_typed_as_declared() -> None:
    for name, event_class in CATALOGUE.items():
        struct = PAYLOAD_TYPES[name]
        assert [field.name for field in struct] == [field.name for field in dataclasses.fields(event_class)]
    opened = {field.name: field.type for field in PAYLOAD_TYPES["LogOpened"]}
    assert (opened["partition"], opened["log_end_offset"], opened["reason"]) == (pa.int32(), pa.int64(), pa.string())
    assert opened["leader_epochs"] == pa.list_(pa.list_(pa.int64()))  # (Int32 epoch, Int64 offset) pairs


def test_a_format_1_lake_reads_back_whole_and_says_its_format() -> None:
    formats = file_formats(FORMAT1_LAKE)

    assert sorted(formats.values()) == [1, 1, 1, 1]
    history = read_envelopes(FORMAT1_LAKE)
    assert len(history) == 596
    assert len({envelope.type for _, envelope in history}) == 24


def test_a_lake_of_both_formats_reads_as_one(tmp_path: Path) -> None:
    # given the format-1 lake with one batch of it written again in format 2 (an archiver upgraded mid-lake)
    lake = tmp_path / "lake"
    shutil.copytree(FORMAT1_LAKE, lake)
    before = read_envelopes(lake)
    first = scan_lake(lake).files[0]
    batch = [(sequence, envelope) for sequence, envelope in before if first.first <= sequence <= first.last]
    assert len(batch) == pq.read_metadata(first.path).num_rows
    pq.write_table(to_table(batch), first.path, compression="zstd")

    assert sorted(file_formats(lake).values()) == [1, 1, 1, 2]
    assert read_envelopes(lake) == before


def write_with_schema(path: Path, schema: pa.Schema) -> None:
    pq.write_table(pa.Table.from_pylist([], schema=schema), path)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (
            pa.schema(list(SCHEMA), metadata={b"hightide.schema": b"events/3"}),
            "events/3; expected events/1 or events/2",
        ),
        (pa.schema(list(SCHEMA)), "no hightide.schema marker"),
        (
            pa.schema(
                [*SCHEMA, pa.field("RecordsAppended", PAYLOAD_TYPES["RecordsAppended"])],
                metadata={b"hightide.schema": b"events/1"},
            ),
            "events/1 with columns that are not the format's: RecordsAppended",
        ),
        (
            pa.schema([*SCHEMA, pa.field("extra", pa.int64())], metadata=SCHEMA.metadata),
            "events/2 with columns that are not the format's: extra",
        ),
        (
            pa.schema(list(SCHEMA)[1:], metadata=SCHEMA.metadata),
            "events/2, but its first columns are not the lake's 16",
        ),
    ],
)
def test_a_file_of_neither_format_is_not_ours_and_says_why(schema: pa.Schema, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        file_format(schema)
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        shutil.copytree(FORMAT1_LAKE, lake)
        path = scan_lake(lake).files[0].path
        write_with_schema(path, schema)
        with pytest.raises(NotOurFile, match=f"{path.name} is not a Hightide event file"):
            read_envelopes(lake)


def test_a_type_or_field_this_reader_does_not_know_is_still_ours() -> None:
    # a file from a newer catalogue: a type unknown here, and a known type with one more field
    newer = pa.struct([*PAYLOAD_TYPES["RecordsAppended"], pa.field("added_later", pa.int64())])
    schema = pa.schema(
        [*SCHEMA, pa.field("RecordsAppended", newer), pa.field("SomethingNew", pa.struct([pa.field("x", pa.int32())]))],
        metadata=SCHEMA.metadata,
    )
    assert file_format(schema) == 2
