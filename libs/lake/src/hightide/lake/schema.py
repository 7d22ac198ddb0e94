"""The lake's one table: archived events, one row per event, as an explicit Arrow/Parquet schema.

Room: libs/lake. It owns the columns and the two conversions, envelopes -> Arrow table and back; it knows nothing
of files, directories or NATS. The PySpark jobs read the same columns with an explicit schema of their own, so a
change here is a change of `SCHEMA_VERSION` and of those jobs together.

| column          | Arrow type             | null | what                                                             |
| --------------- | ---------------------- | ---- | ---------------------------------------------------------------- |
| stream_sequence | int64                  | no   | JetStream sequence of the EVENTS message (outbox record) it came |
|                 |                        |      | in; one message holds many events of one emitter incarnation     |
| cluster_id      | string                 | no   | the envelope's cluster                                           |
| service         | string                 | no   | emitter: broker, controller, producer, consumer, ...             |
| emitter_id      | int32                  | no   | emitter: its id                                                  |
| incarnation     | string                 | no   | emitter: a new one per process start                             |
| sequence        | int64                  | no   | 0, 1, 2, ... per incarnation with no gaps (a gap is a lost event)|
| wall_ms         | int64                  | no   | the emitter's wall clock, ms since the epoch                     |
| time            | timestamp[ms, UTC]     | no   | `wall_ms` as a timestamp, for people and SQL                     |
| mono_ns         | int64                  | no   | the emitter's monotonic clock (orders one incarnation)           |
| type            | string                 | no   | the catalogue's event type (`RecordsAppended`, ...)              |
| version         | int32                  | no   | the version of that type's fields                                |
| topic           | string                 | yes  | the event's `topic` field, null when the type has none           |
| partition       | int32                  | yes  | the event's `partition` field, likewise                          |
| replica         | int32                  | yes  | the event's `replica` field, likewise                            |
| leader_epoch    | int32                  | yes  | the event's `leader_epoch` field, likewise                       |
| payload         | string                 | no   | every field of the event as a JSON object (tuples as arrays,     |
|                 |                        |      | None as null); `docs/EVENTS.md` lists each type's fields         |

The directory layout adds `date` (YYYY-MM-DD) and `hour` (HH) as Hive partition columns, from `wall_ms` in UTC
(see `layout`). Files carry the schema metadata `hightide.schema = events/<format>`: a reader refuses a file
without it. The common fields are pulled out only when they have the catalogue's type (str, Int32), so a
type added later with a differently typed field of the same name gets null there, never a bad cell.

After those columns, format 2 adds one struct column per event type the file holds, named as the type
(`RecordsAppended`, ...), in catalogue order: the payload's fields again, typed (`arrow_type`), set on the rows of
that type and null on every other row. A job (Spark, DuckDB, pyarrow) reads a field as a column,
`RecordsAppended.log_end_offset`, without parsing any JSON: on the 10M-event bench lake, the columns the replica
checks read took 6.4-7.5 s from such structs and 21.4-22.5 s parsed from `payload` (2026-12-02, local[2]). A file
holds only its own types' structs, so a small file does not carry 54 empty column chunks in its footer; a reader
with an explicit schema reads a type the file does not hold as nulls. The JSON `payload` stays: it is the event as
written (copies of one event are compared by it), and the plain-Python reader rebuilds envelopes from it.

Format 1 (`events/1`, written before 2026-12-03) is the sixteen columns alone. Readers accept both (`file_format`);
the Spark jobs derive a format-1 file's structs from its payloads (`hightide.history.events`).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from hightide.protocol.envelope import Envelope, from_plain
from hightide.protocol.events import CATALOGUE, INT32_MAX, INT32_MIN, Event, IntRange, field_hints

SCHEMA_VERSION: Final = 2
FORMATS: Final = (1, 2)
"""The formats readers accept. Format 1 has no typed payload columns."""
SCHEMA_KEY: Final = b"hightide.schema"
SCHEMA_VALUE: Final = f"events/{SCHEMA_VERSION}".encode()
TIMESTAMP: Final = pa.timestamp("ms", tz="UTC")

SCHEMA: Final = pa.schema(
    [
        pa.field("stream_sequence", pa.int64(), nullable=False),
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("service", pa.string(), nullable=False),
        pa.field("emitter_id", pa.int32(), nullable=False),
        pa.field("incarnation", pa.string(), nullable=False),
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("wall_ms", pa.int64(), nullable=False),
        pa.field("time", TIMESTAMP, nullable=False),
        pa.field("mono_ns", pa.int64(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("version", pa.int32(), nullable=False),
        pa.field("topic", pa.string(), nullable=True),
        pa.field("partition", pa.int32(), nullable=True),
        pa.field("replica", pa.int32(), nullable=True),
        pa.field("leader_epoch", pa.int32(), nullable=True),
        pa.field("payload", pa.string(), nullable=False),
    ],
    metadata={SCHEMA_KEY: SCHEMA_VALUE},
)
COLUMNS: Final = tuple(SCHEMA.names)
"""The columns every file of either format starts with (format 2 then adds its typed payload columns)."""
_INT32_COMMON: Final = ("partition", "replica", "leader_epoch")
_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


class InvalidLakeRow(ValueError):
    """A row whose pulled-out columns disagree with its payload, or whose envelope does not check."""


def event_fields(event: Event) -> dict[str, Any]:
    """The event's fields by name, in declaration order (the payload's JSON object)."""
    names = _FIELD_NAMES.get(type(event))
    if names is None:
        names = _FIELD_NAMES[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    return {name: getattr(event, name) for name in names}


def common_columns(fields: dict[str, Any]) -> tuple[str | None, int | None, int | None, int | None]:
    """(topic, partition, replica, leader_epoch) from an event's fields; null where absent or not of that type."""
    topic = fields.get("topic")
    partition, replica, leader_epoch = (_int32_or_none(fields.get(name)) for name in _INT32_COMMON)
    return (topic if isinstance(topic, str) else None, partition, replica, leader_epoch)


def _int32_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and INT32_MIN <= value <= INT32_MAX else None


def payload_json(fields: dict[str, Any]) -> str:
    # Compact, and not ASCII-escaped: the strings stay readable in Spark and the column is plain UTF-8.
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def to_table(rows: Sequence[tuple[int, Envelope]]) -> pa.Table:
    """One row per (stream sequence, envelope), in the order given, with the typed payload column of each type."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS if name != "time"}
    payloads: list[dict[str, Any]] = []
    for stream_sequence, envelope in rows:
        fields = event_fields(envelope.event)
        payloads.append(fields)
        topic, partition, replica, leader_epoch = common_columns(fields)
        columns["stream_sequence"].append(stream_sequence)
        columns["cluster_id"].append(envelope.cluster_id)
        columns["service"].append(envelope.emitter.service)
        columns["emitter_id"].append(envelope.emitter.emitter_id)
        columns["incarnation"].append(envelope.emitter.incarnation)
        columns["sequence"].append(envelope.sequence)
        columns["wall_ms"].append(envelope.wall_ms)
        columns["mono_ns"].append(envelope.mono_ns)
        columns["type"].append(envelope.type)
        columns["version"].append(envelope.version)
        columns["topic"].append(topic)
        columns["partition"].append(partition)
        columns["replica"].append(replica)
        columns["leader_epoch"].append(leader_epoch)
        columns["payload"].append(payload_json(fields))
    arrays = [
        pa.array(columns["wall_ms"], type=TIMESTAMP) if name == "time" else pa.array(columns[name], type=field.type)
        for name, field in zip(COLUMNS, SCHEMA, strict=True)
    ]
    return with_typed_payloads(arrays, columns["type"], payloads)


def from_table(table: pa.Table) -> list[tuple[int, Envelope]]:
    """Every row back as (stream sequence, envelope), each envelope rebuilt by `from_plain` (so checked whole)."""
    columns = {name: table.column(name).to_pylist() for name in COLUMNS if name != "time"}
    return [_row_envelope({name: values[i] for name, values in columns.items()}) for i in range(table.num_rows)]


def _row_envelope(row: dict[str, Any]) -> tuple[int, Envelope]:
    try:
        event = json.loads(row["payload"])
        envelope = from_plain(
            {
                **{k: row[k] for k in ("cluster_id", "service", "emitter_id", "incarnation", "sequence")},
                **{k: row[k] for k in ("wall_ms", "mono_ns", "type", "version")},
                "event": event,
            }
        )
    except ValueError as error:  # json.JSONDecodeError and InvalidEvent are ValueErrors
        raise InvalidLakeRow(f"stream sequence {row['stream_sequence']}: {error}") from None
    stored = (row["topic"], row["partition"], row["replica"], row["leader_epoch"])
    if common_columns(event_fields(envelope.event)) != stored:
        raise InvalidLakeRow(f"stream sequence {row['stream_sequence']}: the common columns disagree with the payload")
    return row["stream_sequence"], envelope


def sort_rows(rows: Iterable[tuple[int, Envelope]]) -> list[tuple[int, Envelope]]:
    """The lake's reading order: stream sequence, then the emitter's sequence."""
    return sorted(rows, key=lambda row: (row[0], row[1].sequence))


def with_typed_payloads(
    arrays: Sequence[pa.Array], event_types: Sequence[str], payloads: Sequence[dict[str, Any]]
) -> pa.Table:
    """A format-2 table: `arrays` (one per `COLUMNS`, in that order), then for each catalogue type among
    `event_types` (the rows' types), in catalogue order, its struct column: the row's payload (its fields by name,
    a missing one null) on that type's rows, null on the others."""
    rows_of: dict[str, list[int]] = {}
    for row, event_type in enumerate(event_types):
        rows_of.setdefault(event_type, []).append(row)
    fields, columns = list(SCHEMA), list(arrays)
    for event_type, struct in PAYLOAD_TYPES.items():
        rows = rows_of.get(event_type)
        if rows is None:
            continue
        values = pa.array([payloads[row] for row in rows] + [None], type=struct)
        # Each row's place in `values`: its own on this type's rows, the trailing null on every other row.
        places = [len(rows)] * len(event_types)
        for place, row in enumerate(rows):
            places[row] = place
        columns.append(pc.take(values, pa.array(places, type=pa.int32())))
        fields.append(pa.field(event_type, struct, nullable=True))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=SCHEMA.metadata))


def payload_type(event_class: type[Event]) -> pa.StructType:
    """The Arrow struct of an event type's payload, from the catalogue's declared field types (`arrow_type`)."""
    assert CATALOGUE.get(event_class.TYPE) is event_class, f"{event_class} is not in the catalogue"
    hints = field_hints(event_class).items()
    return pa.struct([pa.field(name, arrow_type(hint), nullable=True) for name, hint in hints])


def arrow_type(hint: object) -> pa.DataType:
    """The Arrow type of a catalogue field type: Int32 as int32, Int64 (and a plain int) as int64, str as string,
    bool as bool, tuples as lists (a fixed tuple of Int32 and Int64, like (epoch, start offset), of int64s),
    `X | None` as X."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *metadata = typing.get_args(hint)
        ranges = [meta for meta in metadata if isinstance(meta, IntRange)]
        if base is int and ranges:
            return pa.int32() if ranges[0].low >= INT32_MIN and ranges[0].high <= INT32_MAX else pa.int64()
        return arrow_type(base)
    if origin is tuple:
        items = {arrow_type(arg) for arg in typing.get_args(hint) if arg is not Ellipsis}
        if items == {pa.int32(), pa.int64()}:
            items = {pa.int64()}
        assert len(items) == 1, f"a tuple field needs one item type to be a list: {hint}"
        return pa.list_(items.pop())
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        assert len(options) == 1, f"only X | None unions have an Arrow type: {hint}"
        return arrow_type(options[0])
    simple: dict[object, pa.DataType] = {str: pa.string(), bool: pa.bool_(), int: pa.int64()}
    assert hint in simple, f"no Arrow type for {hint}"
    return simple[hint]


PAYLOAD_TYPES: Final[dict[str, pa.StructType]] = {name: payload_type(event) for name, event in CATALOGUE.items()}
"""Each catalogue type's typed payload column, in catalogue order (the order of a format-2 file's extra columns)."""


def file_format(schema: pa.Schema) -> int:
    """The lake format (1 or 2) of a file with this Arrow schema; raises ValueError, saying why, when the file is
    not one of ours. Format 1: exactly `COLUMNS`, marked `events/1`. Format 2: `COLUMNS`, then struct columns (a
    type's payload each), marked `events/2`. The structs are checked loosely, so that a file written with a newer
    catalogue (a type or a field this reader does not know) is still ours: a reader with an explicit schema reads
    what it names and gets null for what the file does not hold."""
    known = {f"events/{number}".encode(): number for number in FORMATS}
    marker = (schema.metadata or {}).get(SCHEMA_KEY)
    if marker not in known:
        what = marker.decode(errors="replace") if marker else "no hightide.schema marker"
        raise ValueError(f"{what}; expected {' or '.join(key.decode() for key in known)}")
    number = known[marker]
    if not pa.schema(list(schema)[: len(COLUMNS)]).equals(SCHEMA, check_metadata=False):
        raise ValueError(f"events/{number}, but its first columns are not the lake's {len(COLUMNS)}")
    extra = [field for field in list(schema)[len(COLUMNS) :] if number == 1 or not pa.types.is_struct(field.type)]
    if extra:
        names = ", ".join(field.name for field in extra)
        raise ValueError(f"events/{number} with columns that are not the format's: {names}")
    return number
