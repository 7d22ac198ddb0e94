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
(see `layout`). Files carry the schema metadata `hightide.schema = events/<SCHEMA_VERSION>`: a reader refuses a
file without it. The common fields are pulled out only when they have the catalogue's type (str, Int32), so a
type added later with a differently typed field of the same name gets null there, never a bad cell.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

import pyarrow as pa

from hightide.protocol.envelope import Envelope, from_plain
from hightide.protocol.events import INT32_MAX, INT32_MIN, Event

SCHEMA_VERSION: Final = 1
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
    """One row per (stream sequence, envelope), in the order given."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS if name != "time"}
    for stream_sequence, envelope in rows:
        fields = event_fields(envelope.event)
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
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


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
