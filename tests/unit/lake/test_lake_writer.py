"""The lake's writer and reader on a real directory: what goes in comes out equal, where the names say it is.

Method: envelopes of every catalogue type (hypothesis draws their fields from the types they declare, sized ints at
their bounds included) are encoded as the EVENTS stream's messages are, written with `LakeWriter`, and read back
with `read_envelopes`; the directory is then inspected by name (`scan_lake`) and by Parquet schema. No NATS here:
the archiver's own tests drive the same writer from a real nats-server.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.lake import (
    SCHEMA,
    LakeWriter,
    count_events,
    read_envelopes,
    read_table,
    scan_lake,
)
from hightide.lake.layout import WALL_MS_MAX
from hightide.lake.schema import PAYLOAD_TYPES
from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.protocol.events import CATALOGUE, Event, RecordsAppended, TopicCreated
from hightide.runtime.logging import get_logger
from support.event_strategies import events_of

LOG = get_logger("test.lake")
HOUR_MS = 3_600_000
# 2026-03-01T00:00:00Z
MARCH_1_MS = 1_772_323_200_000


@st.composite
def one_of_every_type(draw: st.DrawFn) -> list[Envelope]:
    emitter = Emitter(draw(st.sampled_from(["broker", "controller", "producer"])), draw(st.integers(-1, 9)), "inc-1")
    wall_ms = draw(st.integers(0, WALL_MS_MAX - 10 * len(CATALOGUE)))
    return [
        Envelope(
            "lake-test", emitter, i, wall_ms + i * draw(st.integers(0, 10)), draw(st.integers(0, 2**63 - 1)), event
        )
        for i, event in enumerate(draw(events_of(c)) for c in CATALOGUE.values())
    ]


def appended(partition: int = 0) -> RecordsAppended:
    return RecordsAppended(
        topic="orders",
        partition=partition,
        replica=1,
        leader_epoch=3,
        base_offset=0,
        last_offset=9,
        record_count=10,
        size_bytes=500,
        log_end_offset=10,
        as_leader=True,
    )


def envelope(sequence: int, wall_ms: int, event: Event | None = None, emitter_id: int = 1) -> Envelope:
    return Envelope(
        "lake-test", Emitter("broker", emitter_id, "inc-1"), sequence, wall_ms, sequence, event or appended()
    )


@settings(max_examples=25, deadline=None)
@given(st.lists(one_of_every_type(), min_size=1, max_size=3))
def test_every_event_type_round_trips_through_parquet(messages: list[list[Envelope]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        with LakeWriter(lake, LOG) as writer:
            result = writer.write([(seq, encode_envelopes(batch)) for seq, batch in enumerate(messages, start=1)])
        expected = [(seq, e) for seq, batch in enumerate(messages, start=1) for e in batch]
        assert {e.type for _, e in expected} == set(CATALOGUE)
        assert read_envelopes(lake) == sorted(expected, key=lambda row: (row[0], row[1].sequence))
        assert result.events == len(expected) == count_events(lake)
        assert (result.messages, result.skipped, result.quarantined) == (len(messages), 0, 0)


def test_events_are_partitioned_by_the_date_and_hour_of_their_own_wall_clock(tmp_path: Path) -> None:
    # given one message whose events straddle midnight UTC and one more in the first hour of the next day
    lake = tmp_path / "lake"
    late = MARCH_1_MS - 1  # 2026-02-28T23:59:59.999Z
    batch = [envelope(0, late), envelope(1, MARCH_1_MS), envelope(2, MARCH_1_MS + HOUR_MS - 1)]
    # when it is archived as stream sequence 7
    with LakeWriter(lake, LOG) as writer:
        result = writer.write([(7, encode_envelopes(batch))])
    # then two hour partitions hold it, each file named for the batch's range and its part of two
    names = sorted(str(p.relative_to(lake)) for p in lake.rglob("*.parquet"))
    assert names == [
        "date=2026-02-28/hour=23/events-7-7.1of2.parquet",
        "date=2026-03-01/hour=00/events-7-7.2of2.parquet",
    ]
    assert result.files == 2
    hour_00 = pq.ParquetFile(lake / names[1]).read()
    assert hour_00.column("sequence").to_pylist() == [1, 2]


def test_a_batch_file_name_carries_the_stream_sequence_range_it_came_from(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        writer.write([(seq, encode_envelopes([envelope(seq, MARCH_1_MS)])) for seq in (12, 10, 11)])
        writer.write([(seq, encode_envelopes([envelope(seq, MARCH_1_MS)])) for seq in (13, 14)])
    scan = scan_lake(lake)
    assert [(b.first, b.last, len(b.parts)) for b in scan.complete] == [(10, 12, 1), (13, 14, 1)]
    assert scan.archived.ranges == [(10, 14)]


def test_the_files_have_the_explicit_schema_and_the_common_fields_pulled_out(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    created = TopicCreated(topic="t", topic_id="id", partitions=1, replication_factor=1, configs=(("a", "b"),))
    with LakeWriter(lake, LOG) as writer:
        writer.write([(1, encode_envelopes([envelope(0, MARCH_1_MS), envelope(1, MARCH_1_MS, created)]))])
    (part,) = scan_lake(lake).files
    written = pq.read_schema(part.path)
    typed = [pa.field(name, PAYLOAD_TYPES[name]) for name in ("RecordsAppended", "TopicCreated")]
    expected = pa.schema([*SCHEMA, *typed], metadata=SCHEMA.metadata)

    # Parquet names a list's items `element` where Arrow says `item`; the types are otherwise the same.
    def fields(schema: pa.Schema) -> list[tuple[str, str, bool]]:
        return [(field.name, str(field.type).replace("element", "item"), field.nullable) for field in schema]

    assert fields(written) == fields(expected)
    assert written.metadata == expected.metadata == {b"hightide.schema": b"events/2"}
    table = read_table(lake, ["type", "topic", "partition", "replica", "leader_epoch", "payload", "time"])
    rows = table.to_pylist()
    assert [(r["type"], r["topic"], r["partition"], r["replica"], r["leader_epoch"]) for r in rows] == [
        ("RecordsAppended", "orders", 0, 1, 3),
        ("TopicCreated", "t", None, None, None),
    ]
    assert json.loads(rows[1]["payload"])["configs"] == [["a", "b"]]
    assert rows[0]["time"].timestamp() * 1000 == MARCH_1_MS


def test_a_message_with_no_events_writes_nothing_and_is_not_claimed(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        result = writer.write([(1, encode_envelopes([]))])
    assert (result.messages, result.events, result.files) == (1, 0, 0)
    assert scan_lake(lake).archived.ranges == []


def test_a_missing_lake_reads_as_empty(tmp_path: Path) -> None:
    assert read_envelopes(tmp_path / "nowhere") == []
    assert count_events(tmp_path / "nowhere") == 0
    assert read_table(tmp_path / "nowhere", ["type"]).num_rows == 0
