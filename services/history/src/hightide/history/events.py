"""The lake as Spark DataFrames: every archived event with its id and its place in its emitter's order, and any
event type's payload as typed columns.

Room: services/history. The schemas here are explicit: the lake's columns mirror `hightide.lake.schema`'s (its
sixteen `COLUMNS`, then each catalogue type's typed payload column, `PAYLOAD_TYPES`), so Spark never infers a type
from data. A job reads a payload's fields from those columns (`of_type`, `of_types`, `payload_of`), never parsing
JSON: files of lake format 1, which have none, get them from their payloads as they are read (`read_files`).
The order is the one `hightide.audit.rebuild.emitter_streams` defines: one emitter incarnation's events by
`sequence`, the incarnations of one emitter (service, id) by the `wall_ms` of their first event, then by
incarnation name; `position` orders an emitter's events so (`order_events`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.history.spark import read_tasks
from hightide.lake.layout import scan_lake
from hightide.lake.reader import part_format
from hightide.lake.schema import PAYLOAD_TYPES
from hightide.protocol.events import CATALOGUE, Event

ENVELOPE_SCHEMA: Final = T.StructType(
    [
        T.StructField("stream_sequence", T.LongType(), False),
        T.StructField("cluster_id", T.StringType(), False),
        T.StructField("service", T.StringType(), False),
        T.StructField("emitter_id", T.IntegerType(), False),
        T.StructField("incarnation", T.StringType(), False),
        T.StructField("sequence", T.LongType(), False),
        T.StructField("wall_ms", T.LongType(), False),
        T.StructField("time", T.TimestampType(), False),
        T.StructField("mono_ns", T.LongType(), False),
        T.StructField("type", T.StringType(), False),
        T.StructField("version", T.IntegerType(), False),
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("replica", T.IntegerType(), True),
        T.StructField("leader_epoch", T.IntegerType(), True),
        T.StructField("payload", T.StringType(), False),
    ]
)
"""The sixteen columns every lake file starts with (`hightide.lake.schema.COLUMNS`): all a format-1 file has."""


def spark_of_arrow(arrow: pa.DataType) -> T.DataType:
    """The Spark type Spark reads a Parquet column of this Arrow type as (the lake's typed payloads use these)."""
    if pa.types.is_struct(arrow):
        fields = [arrow.field(i) for i in range(arrow.num_fields)]
        return T.StructType([T.StructField(f.name, spark_of_arrow(f.type), f.nullable) for f in fields])
    if pa.types.is_list(arrow):
        return T.ArrayType(spark_of_arrow(arrow.value_type), True)
    simple = {pa.int32(): T.IntegerType(), pa.int64(): T.LongType(), pa.string(): T.StringType()}
    if arrow == pa.bool_():
        return T.BooleanType()
    assert arrow in simple, f"no Spark type for {arrow}"
    return simple[arrow]


PAYLOAD_STRUCTS: Final[dict[str, T.StructType]] = {
    name: T.StructType(list(spark_of_arrow(struct).fields))  # type: ignore[attr-defined]
    for name, struct in PAYLOAD_TYPES.items()
}
"""Each catalogue type's typed payload column as Spark reads it, by type name, in catalogue order."""

LAKE_SCHEMA: Final = T.StructType(
    [*ENVELOPE_SCHEMA.fields, *(T.StructField(name, struct, True) for name, struct in PAYLOAD_STRUCTS.items())]
)
"""A lake row as the jobs read it, whatever the file's format: the sixteen columns, then every type's payload."""
EMITTER: Final = ("service", "emitter_id")
INCARNATION: Final = ("service", "emitter_id", "incarnation")
# What makes two rows of one emitter incarnation and sequence the same event (the envelope's fields; the other
# columns derive from them, or, like stream_sequence, say where the lake got the copy).
EVENT_CONTENT: Final = ("cluster_id", "wall_ms", "mono_ns", "type", "version", "payload")


def read_lake(spark: SparkSession, lake: Path) -> DataFrame:
    """Every event of the lake's complete batches (the files `scan_lake` lists), with `event_id`,
    `incarnation_start` (the wall_ms of the incarnation's first event) and `position` (its place in its emitter's
    order) and `clashing` (see `with_order`). An exact duplicate of an event (same emitter incarnation and
    sequence, as an at-least-once relay may store) is kept once."""
    return ordered_lake(spark, lake).frame


@dataclass(frozen=True)
class OrderedLake:
    """`read_lake`'s frame, and whether the lake holds copies (`Bounds.copies`): without, each read of the frame
    is a scan of the lake's files and a broadcast join; with, it also searches the rows for copies (a shuffle)."""

    frame: DataFrame
    copies: bool


def ordered_lake(spark: SparkSession, lake: Path) -> OrderedLake:
    """`read_lake`'s frame with what its incarnations' bounds found of copies."""
    paths = [part.path for part in scan_lake(lake).files]
    raw = read_files(spark, paths)
    if not paths:
        return OrderedLake(with_order(raw), copies=False)
    bounds = incarnation_bounds(raw)
    return OrderedLake(with_order(raw, bounds), bounds.copies)


def read_files(spark: SparkSession, paths: Sequence[Path]) -> DataFrame:
    """The rows of these lake files as `LAKE_SCHEMA`, each file checked to be ours (NotOurFile) and read by its
    format (from its footer): format 2 as it is (a type the file does not hold reads as nulls), format 1 with each
    type's payload column parsed from its payloads (`with_payload_columns`). The session's scans are then cut for
    these files (`hightide.history.spark.read_tasks`)."""
    by_format: dict[int, list[str]] = {}
    for path in paths:
        by_format.setdefault(part_format(path), []).append(str(path))
    read_tasks(spark, [path.stat().st_size for path in paths])
    frames = []
    if 2 in by_format:
        frames.append(spark.read.schema(LAKE_SCHEMA).parquet(*by_format[2]))
    if 1 in by_format:
        frames.append(with_payload_columns(spark.read.schema(ENVELOPE_SCHEMA).parquet(*by_format[1])))
    if not frames:
        # An empty frame made in the JVM: `createDataFrame` from Python data would need Python on the executors.
        nothing = [F.lit(None).cast(field.dataType).alias(field.name) for field in LAKE_SCHEMA.fields]
        return spark.range(0).select(*nothing)
    return functools.reduce(DataFrame.unionByName, frames)


def with_payload_columns(rows: DataFrame) -> DataFrame:
    """Lake rows without typed payload columns (`ENVELOPE_SCHEMA`'s: a format-1 file's) with them, each type's
    parsed from the payloads of its rows (null on the others), as a format-2 file holds them. Only the columns a
    query reads are parsed (Spark prunes the others)."""
    kind = F.col("type")
    typed = [
        F.when(kind == name, F.from_json("payload", struct)).alias(name) for name, struct in PAYLOAD_STRUCTS.items()
    ]
    return rows.select(*ENVELOPE_SCHEMA.fieldNames(), *typed)


def payload_of(schema: T.StructType, types: Iterable[str] | None = None) -> Column:
    """A struct with `schema`'s fields, each the row's payload's field of that name from its type's payload column:
    what `from_json("payload", schema)` gives, without parsing. `types`: the types the rows can be (every catalogue
    type by default); a field reads only their columns that hold it, and is null where the row's type has none."""
    names = list(PAYLOAD_STRUCTS) if types is None else list(types)
    unknown = [name for name in names if name not in PAYLOAD_STRUCTS]
    assert not unknown, f"not catalogue types: {unknown}"
    fields = []
    for field in schema.fields:
        held = [name for name in names if field.name in PAYLOAD_STRUCTS[name].fieldNames()]
        values = [F.col(name).getField(field.name) for name in held]
        kinds = {PAYLOAD_STRUCTS[name][field.name].dataType for name in held}
        value = values[0] if len(values) == 1 else F.coalesce(*values) if values else F.lit(None)
        fields.append((value if kinds == {field.dataType} else value.cast(field.dataType)).alias(field.name))
    return F.struct(*fields)


def with_order(raw: DataFrame, bounds: Bounds | None = None) -> DataFrame:
    """The lake's rows with `event_id`, `incarnation_start`, `position` and `clashing` added (see `read_lake` and
    `order_events`; `bounds` as there).

    `clashing` is true when the lake holds a different event under the row's emitter incarnation and sequence: the
    emitter gave one sequence to two events (`emitter_sequences_contiguous` reports it). Of such rows the one kept
    is the first archived (lowest stream sequence), as the plain-Python reader, which reads by stream sequence,
    keeps the first it sees."""
    return order_events(raw, clashing=True, bounds=bounds).withColumn("event_id", event_id_column())


@dataclass(frozen=True)
class Bounds:
    """What one aggregate over lake rows found of their emitter incarnations (`incarnation_bounds`)."""

    copies: bool
    """Whether two of the rows share an emitter incarnation and sequence: copies of one event (stored twice by an
    at-least-once relay) or two events given one sequence."""
    frame: DataFrame
    """Per incarnation (service, emitter_id, incarnation, _lo, _hi, _seen_start): its least and greatest sequence
    and the wall_ms of its first event, materialised (a few rows per emitter restart)."""


def incarnation_bounds(rows: DataFrame) -> Bounds:
    """One job over the rows' emitter columns, sequence and wall_ms: each incarnation's bounds, and whether any
    sequence is stored twice. An incarnation's sequences are counted twice over, all of them and the distinct ones,
    the distinct ones exactly: the sequences are grouped in words of 64 (the sequence shifted right by 6), each
    word's sequences set their bits in one long (`bit_or` of 1 << the low 6 bits), and a word holds as many
    distinct sequences as bits set. So a copy is found even where a gap in the same incarnation evens out the
    count, and both levels are hash aggregates whose partial stages leave one row per word: the rows themselves are
    neither shuffled nor sorted.

    With `copies` false, `order_events` orders the rows by these bounds without reading them again. On the
    10M-event bench lake (2026-12-01, local[2], warm) this job took 1.5-1.7 s against 5.4-5.8 s for the search it
    replaces (a shuffle of each row's hashed key and sequence) and 3.7 s for Spark's bitmaps of 32,768 sequences
    (`bitmap_construct_agg`, a sort aggregate: 10M rows sorted); ordering the rebuild's events then reads the lake
    once, not twice (14.4 -> 12.3 s with the ordered events cached)."""
    c = F.col
    bit = F.expr("shiftleft(1L, cast(sequence & 63 as int))")
    words = rows.groupBy(*INCARNATION, F.shiftright("sequence", 6).alias("_word")).agg(
        F.count(F.lit(1)).alias("_rows"),
        F.bit_or(bit).alias("_bits"),
        F.min("sequence").alias("_lo"),
        F.max("sequence").alias("_hi"),
        F.min_by("wall_ms", "sequence").alias("_first_ms"),
    )
    bounds = (
        words.groupBy(*INCARNATION)
        .agg(
            (F.sum(F.bit_count("_bits")) != F.sum("_rows")).alias("_copies"),
            F.min("_lo").alias("_lo"),
            F.max("_hi").alias("_hi"),
            F.min_by("_first_ms", "_lo").alias("_seen_start"),
        )
        .localCheckpoint()
    )
    copies = bool(bounds.where(c("_copies")).limit(1).count())
    return Bounds(copies, bounds.drop("_copies"))


def order_events(
    rows: DataFrame,
    scope: Sequence[str] = (),
    starts: DataFrame | None = None,
    *,
    clashing: bool = False,
    bounds: Bounds | None = None,
) -> DataFrame:
    """`rows` (lake rows, within each `scope`) with copies of one event dropped, `incarnation_start` and `position`
    added, and with `clashing`, a `clashing` column (see `with_order`). `starts` (service, emitter_id, incarnation,
    incarnation_start), when given, says when incarnations seen earlier started (a snapshot's). `bounds`, when given
    (`incarnation_bounds` of these `rows`, no `scope`) and without copies, orders the rows by its bounds: nothing is
    dropped, `clashing` is false everywhere, and the rows are neither aggregated again nor shuffled at all (the same
    positions). Otherwise there may be copies, and the rows are searched for them.

    The copy kept of an event (its emitter incarnation and sequence) is the first archived: the lowest stream
    sequence, then the least content. An incarnation starts at the wall_ms of its first event by sequence: with
    `clashing`, of the copy kept (the audit's rule: the plain-Python reader's); without it, of any copy (the
    rebuild's and the snapshots': copies of one event share it).

    `position` orders an emitter's events: its incarnations by start (then name), each by sequence. It is the
    incarnation's offset (the sequences the emitter's earlier incarnations span) plus the sequence less the
    incarnation's first: 0, 1, 2, ... when no sequence is missing, with a gap where one is. So it needs no window
    over a whole emitter: the incarnations' bounds and starts are a small aggregate, broadcast back to the rows, and
    copies are found by a window per event, whose groups hold one row but for the copies.

    With `copies`, one shuffle of the rows, by emitter; the per-event window sorts within it by sequence first (a
    long: the sort's prefix nearly always decides). Without, none: the rows stay where they were read.
    Measured on the 10M-event bench lake (2026-11-30, local[2], a noop write of each, warm): the audit's ordering
    32.3 -> 26.3 s and the rebuild's (`rebuild.fold_events`) 16.1 -> 13.4 s, against a row number and the
    incarnations' starts taken by windows over each whole emitter (each buffers all of the emitter's rows)."""
    c = F.col
    incarnation = [*scope, *INCARNATION]
    tie = [name for name in EVENT_CONTENT if name in rows.columns]
    copies = bounds is None or bounds.copies
    if not copies:
        assert bounds is not None and not scope, "an incarnation's bounds are of the rows, not of each scope"
        known_bounds = bounds.frame
    else:  # the first sequence's only row is the kept copy, unless `clashing` keeps the first archived of several
        spans = [F.min("sequence").alias("_lo"), F.max("sequence").alias("_hi")]
        if not clashing:
            spans.append(F.min_by("wall_ms", "sequence").alias("_seen_start"))
        known_bounds = rows.groupBy(*incarnation).agg(*spans)
    if clashing and copies:
        # The kept copy's wall_ms at the first sequence: a second, small pass over the rows there.
        firsts = rows.select(*incarnation, "sequence", "stream_sequence", *tie).join(
            F.broadcast(known_bounds), incarnation
        )
        known_bounds = (
            firsts.where(c("sequence") == c("_lo"))
            .groupBy(*incarnation, "_lo", "_hi")
            .agg(F.min_by("wall_ms", F.struct("stream_sequence", *tie)).alias("_seen_start"))
        )
    start: Column = c("_seen_start")
    if starts is not None:
        known = starts.select(*INCARNATION, c("incarnation_start").alias("_known_start"))
        known_bounds = known_bounds.join(known, list(INCARNATION), "left")
        start = F.coalesce(c("_known_start"), start)
    earlier = Window.partitionBy(*scope, *EMITTER).orderBy("incarnation_start", "incarnation")
    spanned = F.sum(c("_hi") - c("_lo") + 1).over(earlier.rowsBetween(Window.unboundedPreceding, -1))
    offsets = known_bounds.select(*incarnation, start.alias("incarnation_start"), "_lo", "_hi").select(
        *incarnation, "incarnation_start", (F.coalesce(spanned, F.lit(0)) - c("_lo")).alias("_offset")
    )
    if copies:
        event = Window.partitionBy("sequence", *incarnation)
        marked = rows.repartition(*scope, *EMITTER).withColumn(
            "_copy", F.row_number().over(event.orderBy("stream_sequence", *tie))
        )
        if clashing:
            content = F.struct(*EVENT_CONTENT)
            marked = marked.withColumn("clashing", F.min(content).over(event) != F.max(content).over(event))
        unique = marked.where(c("_copy") == 1).drop("_copy")
    else:
        unique = rows.withColumn("clashing", F.lit(False)) if clashing else rows
    ordered = unique.join(F.broadcast(offsets), incarnation)
    return ordered.withColumn("position", c("_offset") + c("sequence")).drop("_offset")


def event_id_column() -> Column:
    """`hightide.audit.findings.event_id` as a column: service:emitter_id:incarnation:sequence."""
    emitter_id, sequence = F.col("emitter_id").cast("string"), F.col("sequence").cast("string")
    return F.concat_ws(":", "service", emitter_id, "incarnation", sequence)


def of_type(events: DataFrame, event_class: type[Event], keep: Sequence[str] = ()) -> DataFrame:
    """The events of one type with their payload's fields as typed columns (named as the event's fields), next to
    `event_id`, the emitter columns, `sequence`, `wall_ms`, `position` and `keep`. A field added in a later version
    than an event's is null in that row, as `from_json` leaves a missing key: fill it with the field's default
    where it matters."""
    schema = payload_schema(event_class)
    base = ["event_id", *EMITTER, "incarnation", "incarnation_start", "sequence", "wall_ms", "position", *keep]
    common = [name for name in base if name not in schema.fieldNames()]
    payload = F.col(event_class.TYPE)
    rows = events.where(F.col("type") == event_class.TYPE)
    return rows.select(*common, *[payload.getField(name).alias(name) for name in schema.fieldNames()])


def of_types(events: DataFrame, event_classes: Sequence[type[Event]]) -> DataFrame:
    """The events of `event_classes` in one read: their emitter, order, id and `type`, and the union of their
    payloads' fields as typed columns (null where a type has no such field; the payload's `topic`, `partition`
    and `replica` where it names them). A field shared by two types has one Spark type in the catalogue (checked
    here)."""
    fields: dict[str, T.StructField] = {}
    for event_class in event_classes:
        for field in payload_schema(event_class).fields:
            held = fields.setdefault(field.name, field)
            assert held.dataType == field.dataType, f"{field.name}: {held.dataType} and {field.dataType}"
    schema = T.StructType(list(fields.values()))
    names = [event_class.TYPE for event_class in event_classes]
    parsed = events.where(F.col("type").isin(*names)).withColumn("_p", payload_of(schema, names))
    base = [
        F.col(name) for name in ("cluster_id", "service", "emitter_id", "incarnation", "position", "event_id", "type")
    ]
    return parsed.select(*base, *[F.col("_p").getField(name).alias(name) for name in fields])


def payload_schema(event_class: type[Event]) -> T.StructType:
    """The struct of an event type's payload, from the catalogue's declared field types (the lake's typed payload
    column of that type, `hightide.lake.schema.payload_type`)."""
    assert CATALOGUE.get(event_class.TYPE) is event_class, f"{event_class} is not in the catalogue"
    return PAYLOAD_STRUCTS[event_class.TYPE]
