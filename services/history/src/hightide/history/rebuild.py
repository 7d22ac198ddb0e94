"""The rebuild on Spark: every replica's and every partition's state after each event that changed it (timelines),
and the state the events up to any instant leave (`state_at`).

Room: services/history. The rules are `hightide.audit.rebuild`'s (its module docstring is the specification) and the
epoch cache's `hightide.audit.epochs` (Kafka's LeaderEpochFileCache); this module writes them as window functions
and higher-order array functions (`aggregate`, `filter`, `transform`), never as Python UDFs. It must agree with the
plain-Python rebuild on every history, which the jobs tests check at many instants of simulated runs.

How the replica fold becomes windows, per replica (topic, partition, broker) in its emitter's order:
- LEO and HW are each the last value some event set (LogOpened, RecordsAppended / HighWatermarkAdvanced,
  LogTruncated): `last(..., ignorenulls)` over the running frame;
- the log start offset is the last value set (LogOpened, a start-over truncation, LogStartOffsetAdvanced) lowered
  by every other truncation since: the least truncation within the group the last setter opens, as the running
  greatest (group, -truncated_to), so that it needs no window of its own (every window is over the replica's rows
  in one order: one shuffle and one sort);
- the epoch cache is a fold of assign / truncate_from_end / truncate_from_start from the last reset (LogOpened,
  a start-over truncation): one `aggregate` over each reset group's operations gives every entry the cache held
  with the rows it was held from and until (the epoch timeline); a row's cache is the entries held at it, which
  only a state at an instant assembles (a cache per row would grow with the history, and so the cost with its
  square);
- LogDeleted and ReplicaOffline take the replica out of the live set: their row carries the state the disk was
  left in (`online` false), and an event after them that is not a LogOpened starts from an empty replica, as the
  plain fold does (it notes an anomaly). A ReplicaOffline of a replica not open (its storage refused to create or
  open the log: no LogOpened came) is such a row too, so nothing of the replica is live, as the plain fold keeps
  nothing of it (without an anomaly); the jobs tests hold the two to the same states.

The partition fold: metadata events in `controller_order` (terms cut at ControllerElected and ordered by
(controller epoch, first wall_ms, emitter), abandoned controller intents left out, by `Takeovers`' rule), then per
topic its lives (a TopicCreated begins one, a TopicDeleted ends it), and per partition within a life a
PartitionChanged counts only when its partition epoch is above every one before it.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.history.events import PAYLOAD_STRUCTS, Bounds, event_id_column, order_events, payload_of
from hightide.protocol import events as ev

REPLICA_KEY: Final = ("topic", "partition", "replica")
PARTITION_KEY: Final = ("topic", "partition")
NO_TERM: Final = -1  # hightide.audit.rebuild.NO_TERM
EPOCHS_TYPE: Final = T.ArrayType(T.ArrayType(T.LongType(), True), True)
INTS_TYPE: Final = T.ArrayType(T.IntegerType(), True)
Scope = Sequence[str]
Hold = Callable[[DataFrame], DataFrame]

REPLICA_TIMELINE_SCHEMA: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("replica", T.IntegerType(), True),
        T.StructField("wall_ms", T.LongType(), True),
        T.StructField("event_id", T.StringType(), True),
        T.StructField("event_type", T.StringType(), True),
        T.StructField("log_start_offset", T.LongType(), True),
        T.StructField("log_end_offset", T.LongType(), True),
        T.StructField("high_watermark", T.LongType(), True),
        T.StructField("online", T.BooleanType(), True),
    ]
)
EPOCH_TIMELINE_SCHEMA: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("replica", T.IntegerType(), True),
        T.StructField("leader_epoch", T.LongType(), True),
        T.StructField("start_offset", T.LongType(), True),
        T.StructField("from_event_id", T.StringType(), True),
        T.StructField("from_wall_ms", T.LongType(), True),
        T.StructField("until_event_id", T.StringType(), True),
        T.StructField("until_wall_ms", T.LongType(), True),
    ]
)
_HELD_TYPE: Final = T.StructType(
    [T.StructField("start_offset", T.LongType(), True), T.StructField("leader_epoch", T.LongType(), True)]
)
_INTERVALS_TYPE: Final = T.ArrayType(
    T.StructType([T.StructField(name, T.LongType(), True) for name in ("e", "s", "f", "t")]), True
)
PARTITION_TIMELINE_SCHEMA: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("wall_ms", T.LongType(), True),
        T.StructField("event_id", T.StringType(), True),
        T.StructField("reason", T.StringType(), True),
        T.StructField("replicas", INTS_TYPE, True),
        T.StructField("isr", INTS_TYPE, True),
        T.StructField("elr", INTS_TYPE, True),
        T.StructField("last_known_elr", INTS_TYPE, True),
        T.StructField("leader", T.IntegerType(), True),
        T.StructField("leader_epoch", T.IntegerType(), True),
        T.StructField("partition_epoch", T.IntegerType(), True),
        T.StructField("life", T.IntegerType(), True),
    ]
)

# The order of one replica's events: its emitter's (streams are folded one after another, in emitter key order).
REPLICA_ORDER: Final = ("service", "emitter_id", "position")

_REPLICA_TYPES: Final = tuple(
    t.TYPE
    for t in (
        ev.LogOpened,
        ev.RecordsAppended,
        ev.LeaderEpochStarted,
        ev.HighWatermarkAdvanced,
        ev.LogTruncated,
        ev.LeaderEpochsTruncated,
        ev.LogStartOffsetAdvanced,
        ev.LogDeleted,
        ev.ReplicaOffline,
    )
)
_GONE_TYPES: Final = (ev.LogDeleted.TYPE, ev.ReplicaOffline.TYPE)
_REPLICA_FIELDS: Final = T.StructType(
    [
        T.StructField(name, spark_type, True)
        for name, spark_type in (
            ("log_end_offset", T.LongType()),
            ("high_watermark", T.LongType()),
            ("log_start_offset", T.LongType()),
            ("truncated_to", T.LongType()),
            ("reason", T.StringType()),
            ("leader_epoch", T.LongType()),
            ("start_offset", T.LongType()),
            ("end_offset", T.LongType()),
            ("leader_epochs", EPOCHS_TYPE),
        )
    ]
)
METADATA_TYPES: Final = tuple(
    t.TYPE
    for t in (ev.TopicCreated, ev.TopicDeleted, ev.PartitionChanged, ev.ReplicaMarkedOffline, ev.BrokerRegistered)
)
CONTROLLER_TYPES: Final = (*METADATA_TYPES, ev.ControllerElected.TYPE, ev.ControllerDeposed.TYPE)
_METADATA_FIELDS: Final = T.StructType(
    [
        T.StructField(name, spark_type, True)
        for name, spark_type in (
            ("controller_epoch", T.IntegerType()),
            ("metadata_offset", T.LongType()),
            ("reason", T.StringType()),
            ("replicas", INTS_TYPE),
            ("isr", INTS_TYPE),
            ("elr", INTS_TYPE),
            ("last_known_elr", INTS_TYPE),
            ("leader", T.IntegerType()),
            ("leader_epoch", T.IntegerType()),
            ("partition_epoch", T.IntegerType()),
        )
    ]
)

# Epoch cache operations, folded by `_epoch_step`.
_ASSIGN: Final = 0
_TRUNCATE_FROM_END: Final = 1
_TRUNCATE_FROM_START: Final = 2


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """The internal frames: each timeline row with its order columns (`REPLICA_ORDER`; `metadata_order` and
    `topic_life` / `topic_deleted` for partitions), which `timelines` drops and `state_at` uses."""

    replicas: DataFrame
    partitions: DataFrame
    topics: DataFrame  # per topic, after all its events: life (-1 if never created) and deleted
    epochs: (
        DataFrame  # every epoch cache entry (REPLICA_KEY, leader_epoch, start_offset) held from row _from until _until
    )


def timelines(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(replica timeline, partition timeline) of `read_lake`'s DataFrame, with exactly the columns of
    REPLICA_TIMELINE_SCHEMA and PARTITION_TIMELINE_SCHEMA (see the module docstring for the rules)."""
    replicas, partitions, _ = all_timelines(events)
    return replicas, partitions


def all_timelines(events: DataFrame, hold: Hold | None = None) -> tuple[DataFrame, DataFrame, DataFrame]:
    """`timelines` and the epoch timeline (EPOCH_TIMELINE_SCHEMA: each leader epoch cache entry with the events
    from and until which its replica held it). `hold` as `replica_timeline` takes it."""
    rebuilt = rebuild_frames(events, hold=hold)
    return (
        _typed(rebuilt.replicas, REPLICA_TIMELINE_SCHEMA),
        _typed(rebuilt.partitions, PARTITION_TIMELINE_SCHEMA),
        epoch_timeline(rebuilt),
    )


def _typed(frame: DataFrame, schema: T.StructType) -> DataFrame:
    return frame.select(*[F.col(field.name).cast(field.dataType).alias(field.name) for field in schema.fields])


def rebuild_frames(events: DataFrame, scope: Scope = (), hold: Hold | None = None) -> Rebuilt:
    """The timelines with their order columns; `scope` names columns that split the events into histories folded
    apart (an instant, for the state at many instants in one job). `hold` as `replica_timeline` takes it."""
    partitions, topics = partition_timeline(events, scope)
    replicas, epochs = replica_timeline(events, scope, hold)
    return Rebuilt(replicas, partitions, topics, epochs)


# -- replicas ----------------------------------------------------------------------------------------------------


def replica_timeline(events: DataFrame, scope: Scope = (), hold: Hold | None = None) -> tuple[DataFrame, DataFrame]:
    """(one row per replica-changing event with the replica's state after it, the REPLICA_ORDER columns and `_i`,
    its index among its replica's rows; the epoch timeline by those indexes: see `_with_epochs`). `hold`, when
    given, is applied to the folded rows both timelines read (persisting them, say, when both are written: the
    events are then parsed, sorted and folded once).

    The payload is parsed once, into the few values the fold reads, before the rows are shuffled: what is sorted
    and carried through the windows is narrow. Every window is over one replica's rows in one order, so the rows
    are shuffled and sorted once (a window over a finer partition, such as the log start's group, would sort them
    again: see how the log start is computed below)."""
    rows = _replica_rows(events, scope)
    by_replica = Window.partitionBy(*scope, *REPLICA_KEY).orderBy(*REPLICA_ORDER)
    running = by_replica.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = by_replica.rowsBetween(Window.unboundedPreceding, -1)
    gone = F.col("gone")
    # A replica starts afresh at its first event and at the event after it went: unset values are 0 there.
    fresh = F.coalesce(F.lag(gone.cast("int")).over(by_replica), F.lit(1)) == 1
    gone_before = F.coalesce(F.sum(gone.cast("int")).over(before), F.lit(0))
    staged = rows.select(
        "*",
        fresh.alias("fresh"),
        F.row_number().over(by_replica).cast("long").alias("_i"),
        F.lead(F.lit(True)).over(by_replica).isNull().alias("_last"),  # the replica's last row: its final state
        (F.sum(F.col("_ls_sets").cast("int")).over(running) + gone_before).alias("ls_group"),
        (F.sum(F.col("_ep_resets").cast("int")).over(running) + gone_before).alias("ep_group"),
    )
    # The log start is the value its group's first row set (0 if that row set none), lowered by every truncation
    # since: a group begins at a setter or a fresh row, so the first is the last such row's value; and the least
    # truncation of the row's own group is the greatest (group, -truncated_to) so far (groups only grow).
    opened_group = F.when(F.col("_ls_sets") | F.col("fresh"), F.struct(F.col("_ls_set").alias("v")))
    lowest = F.max(F.struct("ls_group", (-F.col("_ls_lowered")).alias("v"))).over(running)
    with_offsets = staged.select(
        "*",
        F.last(_or_zero_when_fresh(F.col("_leo_set")), ignorenulls=True).over(running).alias("log_end_offset"),
        F.last(_or_zero_when_fresh(F.col("_hw_set")), ignorenulls=True).over(running).alias("high_watermark"),
        F.least(
            F.coalesce(F.last(opened_group, ignorenulls=True).over(running).v, F.lit(0).cast("long")),
            F.when(lowest.ls_group == F.col("ls_group"), -lowest.v),
        ).alias("log_start_offset"),
    )
    return _with_epochs(hold(with_offsets) if hold is not None else with_offsets, scope)


def _replica_rows(events: DataFrame, scope: Scope) -> DataFrame:
    """The replica events, each parsed into the values the replica fold reads: what it sets (`_leo_set`, `_hw_set`,
    `_ls_set` where `_ls_sets`), lowers (`_ls_lowered`) or resets (`_ep_resets`), its epoch cache operation (`_op`),
    and whether it opens (`_open`), truncates (`_truncated`) or takes the replica away (`gone`)."""
    kind, p = F.col("type"), F.col("p")
    is_open, is_gone = kind == ev.LogOpened.TYPE, kind.isin(*_GONE_TYPES)
    truncated = kind == ev.LogTruncated.TYPE
    start_over = truncated & (p.reason == "start_over")
    order = [*scope, *REPLICA_KEY, *REPLICA_ORDER, "wall_ms", "event_id"]
    parsed = events.where(kind.isin(*_REPLICA_TYPES)).select(
        *order, "type", payload_of(_REPLICA_FIELDS, _REPLICA_TYPES).alias("p")
    )
    rows = parsed.select(
        *order,
        kind.alias("event_type"),
        is_open.alias("_open"),
        is_gone.alias("gone"),
        truncated.alias("_truncated"),
        F.when(is_open | (kind == ev.RecordsAppended.TYPE), p.log_end_offset)
        .when(truncated, p.truncated_to)
        .alias("_leo_set"),
        F.when(is_open | kind.isin(ev.HighWatermarkAdvanced.TYPE, ev.LogTruncated.TYPE), p.high_watermark).alias(
            "_hw_set"
        ),
        # The log start: set (LogOpened, a start-over truncation, LogStartOffsetAdvanced), or lowered (any other
        # truncation) below what was set.
        (is_open | start_over | (kind == ev.LogStartOffsetAdvanced.TYPE)).alias("_ls_sets"),
        F.when(kind.isin(ev.LogOpened.TYPE, ev.LogStartOffsetAdvanced.TYPE), p.log_start_offset)
        .when(start_over, p.truncated_to)
        .alias("_ls_set"),
        F.when(truncated & (p.reason != "start_over"), p.truncated_to).alias("_ls_lowered"),
        (is_open | start_over).alias("_ep_resets"),
        _epoch_operation(kind, p).alias("_op"),
        F.when(is_open, p.leader_epochs).alias("_opened_epochs"),
    )
    return rows


def _or_zero_when_fresh(value: Column) -> Column:
    return F.when(value.isNotNull(), value).when(F.col("fresh"), F.lit(0).cast("long"))


def _epoch_operation(kind: Column, p: Column) -> Column:
    """The epoch cache operation of a replica event (assign, truncate from the end or from the start), or null."""
    return (
        F.when(kind == ev.LeaderEpochStarted.TYPE, _op(_ASSIGN, p.leader_epoch, p.start_offset))
        .when((kind == ev.LogTruncated.TYPE) & (p.reason != "start_over"), _op(_TRUNCATE_FROM_END, p.truncated_to))
        .when(kind == ev.LeaderEpochsTruncated.TYPE, _op(_TRUNCATE_FROM_END, p.end_offset))
        .when(kind == ev.LogStartOffsetAdvanced.TYPE, _op(_TRUNCATE_FROM_START, p.log_start_offset))
    )


def _with_epochs(marked: DataFrame, scope: Scope) -> tuple[DataFrame, DataFrame]:
    """(the replica rows, each with its index `_i` among its replica's rows; the epoch timeline: every entry the
    replica's cache held, with the rows from which and until which it held it).

    Each cache group (from a reset to the next) is one fold over only its operations, in its replica's order: the
    accumulator holds the live entries, each with the index of the row that added it, and the entries each
    operation removes leave it with that operation's index. A row's cache is then the entries whose interval covers
    it, so no row carries the whole cache (whose size grows with the history) and no operation is folded twice."""
    touching = marked.where(F.col("_op").isNotNull() | F.col("_open") | F.col("fresh") | F.col("_truncated"))
    group_key = [*scope, *REPLICA_KEY, "ep_group"]
    groups = touching.groupBy(*group_key).agg(
        F.min("_i").alias("_first"),
        F.min_by("_opened_epochs", "_i").alias("_initial"),
        F.sort_array(F.collect_list(F.when(F.col("_op").isNotNull(), F.struct("_i", "_op")))).alias("_ops"),
    )
    next_group = Window.partitionBy(*scope, *REPLICA_KEY).orderBy("_first")
    initial = F.transform(
        F.coalesce(F.col("_initial"), F.array().cast(EPOCHS_TYPE)),
        lambda x: F.struct(x[0].alias("e"), x[1].alias("s"), F.col("_first").alias("f")),
    )
    accumulator = F.struct(initial.alias("live"), F.array().cast(_INTERVALS_TYPE).alias("dead"))
    folded = groups.select(
        *group_key,
        F.lead("_first").over(next_group).alias("_end"),
        F.aggregate("_ops", accumulator, _epoch_step).alias("_cache"),
    )
    closed = F.transform(
        F.col("_cache.live"),
        lambda x: F.struct(x.e.alias("e"), x.s.alias("s"), x.f.alias("f"), F.col("_end").alias("t")),
    )
    intervals = folded.select(*scope, *REPLICA_KEY, F.explode(F.concat("_cache.dead", closed)).alias("_x")).select(
        *scope,
        *REPLICA_KEY,
        F.col("_x.e").alias("leader_epoch"),
        F.col("_x.s").alias("start_offset"),
        F.col("_x.f").alias("_from"),
        F.col("_x.t").alias("_until"),
    )
    replicas = marked.withColumn("online", ~F.col("gone")).drop("_op", "_opened_epochs")
    return replicas, intervals.where(F.col("_until").isNull() | (F.col("_from") < F.col("_until")))


def epoch_entries_at(replicas: DataFrame, epochs: DataFrame, scope: Scope = ()) -> DataFrame:
    """`replicas` (rows with `_i`) with `epoch_entries`: the cache after each row, from the epoch timeline. Only for
    a few rows per replica (a state at an instant): every row's would be the whole cache again and again."""
    keys = [*scope, *REPLICA_KEY]
    held = (
        replicas.select(*keys, "_i")
        .join(epochs, keys)
        .where((F.col("_from") <= F.col("_i")) & (F.col("_until").isNull() | (F.col("_i") < F.col("_until"))))
        .groupBy(*keys, "_i")
        .agg(F.sort_array(F.collect_list(F.struct("start_offset", "leader_epoch"))).alias("_held"))
    )
    entries = F.transform(
        F.coalesce(F.col("_held"), F.array().cast(T.ArrayType(_HELD_TYPE))),
        lambda x: F.array(x.leader_epoch, x.start_offset),
    )
    return replicas.join(held, [*keys, "_i"], "left").withColumn("epoch_entries", entries).drop("_held")


def epoch_timeline(rebuilt: Rebuilt) -> DataFrame:
    """The epoch timeline with EPOCH_TIMELINE_SCHEMA's columns: each entry with the events it was held from and
    until (none: still held at the end)."""
    keys = list(REPLICA_KEY)
    at = rebuilt.replicas.select(*keys, "_i", "event_id", "wall_ms")
    since = at.withColumnsRenamed({"_i": "_from", "event_id": "from_event_id", "wall_ms": "from_wall_ms"})
    until = at.withColumnsRenamed({"_i": "_until", "event_id": "until_event_id", "wall_ms": "until_wall_ms"})
    joined = rebuilt.epochs.join(since, [*keys, "_from"]).join(until, [*keys, "_until"], "left")
    return _typed(joined, EPOCH_TIMELINE_SCHEMA)


def _op(kind: int, a: Column, b: Column | None = None) -> Column:
    return F.struct(
        F.lit(kind).alias("kind"), a.cast("long").alias("a"), (b if b is not None else F.lit(0)).cast("long").alias("b")
    )


def _epoch_step(cache: Column, step: Column) -> Column:
    """One of LeaderEpochFileCache's mutators (`hightide.audit.epochs`) on the live entries (e, s, f: the row that
    added it); the entries it removes join `dead` with t, the operation's row."""
    at = step._i

    def removing(kept: Column, removed: Column) -> Column:
        ended = F.transform(removed, lambda x: F.struct(x.e.alias("e"), x.s.alias("s"), x.f.alias("f"), at.alias("t")))
        return F.struct(kept.alias("live"), F.concat(cache.dead, ended).alias("dead"))

    return _epoch_change(cache.live, step._op, at, removing, cache)


def _live_step(live: Column, step: Column) -> Column:
    """`_epoch_step` on the live entries alone (what the cache holds after the operation)."""
    return _epoch_change(live, step._op, step._i, lambda kept, _: kept, live)


def _epoch_change(
    live: Column, op: Column, at: Column, removing: Callable[[Column, Column], Column], unchanged: Column
) -> Column:
    """The cache after `op` on the `live` entries, as `removing(kept entries, removed entries)` makes it (or
    `unchanged`); an entry it adds has f = `at`."""
    # assign: unchanged for a negative entry (Kafka refuses it) or a later batch of the latest epoch; else the entries
    # from the end that would break the order go (maybeTruncateNonMonotonicEntries) and (epoch, start) is appended.
    epoch, start = op.a, op.b
    latest = F.try_element_at(live, F.lit(-1))
    same = (epoch < 0) | (start < 0) | (latest.isNotNull() & (latest.e == epoch) & (start >= latest.s))
    # Entries are dropped from the end while epoch >= e or start >= s: the kept prefix ends at the last that passes.
    kept = F.coalesce(
        F.array_max(F.transform(live, lambda x, i: F.when((x.e < epoch) & (x.s < start), i + 1).otherwise(0))),
        F.lit(0),
    )
    added = F.array(F.struct(epoch.alias("e"), start.alias("s"), at.alias("f")))
    assigned = removing(F.concat(F.slice(live, 1, kept), added), F.slice(live, kept + 1, F.size(live) - kept))
    # truncate_from_end: the entries at or above the end offset go.
    end = op.a
    from_end = removing(F.filter(live, lambda x: x.s < end), F.filter(live, lambda x: x.s >= end))
    # truncate_from_start: the entries at or below the new start go, the last of them staying with its start moved.
    removed = F.filter(live, lambda x: x.s <= op.a)
    moved = F.array(F.struct(F.try_element_at(removed, F.lit(-1)).e.alias("e"), op.a.alias("s"), at.alias("f")))
    from_start = removing(F.concat(moved, F.filter(live, lambda x: x.s > op.a)), removed)
    return (
        F.when((op.kind == _ASSIGN) & ~same, assigned)
        .when((op.kind == _TRUNCATE_FROM_END) & (end >= 0), from_end)
        .when((op.kind == _TRUNCATE_FROM_START) & (op.a >= 0) & (F.size(removed) > 0), from_start)
        .otherwise(unchanged)
    )


def final_replica_states(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """`final_replicas(*replica_timeline(events, scope))` without the timeline: each live replica's state after all
    its events, from one aggregate per replica (its rows in `REPLICA_ORDER`, folded with array functions), for a
    state at an instant, which needs no state but the last. The rules are the timeline's: the values set since the
    replica last went (0 where none was), the log start its last setter left lowered by every truncation since, and
    the epoch cache the operations since its last reset leave (`_live_step`). Its plan is one shuffle and one
    aggregate where the timeline's is a window over every row, the epoch timeline's aggregate and window, and two
    joins: in a fresh JVM planning that cost more than folding the rows."""
    return fold_replica_arrays(replica_arrays(events, scope), scope)


def replica_arrays(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """Per replica (`scope`, REPLICA_KEY) its events as the replica fold reads them, one array `_rows` sorted in
    REPLICA_ORDER (each element's `wall_ms` too): the input of `fold_replica_arrays`. A snapshot stores these arrays for
    the events up to the next one, so a state at an instant between them filters them instead of ordering events."""
    fields = [*REPLICA_ORDER, "wall_ms", "event_id", "gone", *_FINAL_FIELDS]
    return (
        _replica_rows(events, scope)
        .groupBy(*scope, *REPLICA_KEY)
        .agg(F.sort_array(F.collect_list(F.struct(*fields))).alias("_rows"))
    )


def fold_replica_arrays(folded: DataFrame, scope: Scope = ()) -> DataFrame:
    """Each live replica's state from its `replica_arrays` (a replica whose array is empty did not exist).

    Computed in steps, each a projection of its own whose columns the next names: an array a later expression reads
    twice is then computed once. Written as one expression, every mention of a slice (the rows since the replica last
    went, those since the cache last reset) computed it and what it is sliced from again, and array functions are
    evaluated one element at a time: a replica's epoch cache cost about twenty passes over its rows."""
    key = [*scope, *REPLICA_KEY]
    rows = F.col("_rows")
    last = F.try_element_at(rows, F.lit(-1))
    # The rows since the replica last went (all of them if it never did); the first of them starts afresh.
    went = F.coalesce(F.array_max(F.transform(rows, lambda x, i: F.when(x.gone, i + 1).otherwise(0))), F.lit(0))
    live = folded.where(~last.gone).select(
        *key,
        F.slice(rows, went + 1, F.size(rows)).alias("_since"),
        last.wall_ms.alias("wall_ms"),
        last.event_id.alias("event_id"),
    )
    since = F.col("_since")

    def last_set(field: str) -> Column:
        value = F.try_element_at(F.filter(since, lambda x: x[field].isNotNull()), F.lit(-1))[field]
        return F.coalesce(value, F.lit(0).cast("long"))

    def since_last(flag: str) -> Column:
        """The rows from the last one with `flag` set (or from the fresh first row) on."""
        return F.slice(
            since, F.array_max(F.transform(since, lambda x, i: F.when(x[flag], i + 1).otherwise(1))), F.size(since)
        )

    carried = ["wall_ms", "event_id", "log_end_offset", "high_watermark"]
    sliced = live.select(
        *key,
        *carried[:2],
        last_set("_leo_set").alias("log_end_offset"),
        last_set("_hw_set").alias("high_watermark"),
        since_last("_ls_sets").alias("_group"),
        since_last("_ep_resets").alias("_cache"),
    )
    group, cache = F.col("_group"), F.col("_cache")
    lowered = F.array_min(F.transform(F.filter(group, lambda x: x._ls_lowered.isNotNull()), lambda x: x._ls_lowered))
    log_start = F.least(F.coalesce(F.try_element_at(group, F.lit(1))._ls_set, F.lit(0).cast("long")), lowered)
    initial = F.transform(
        F.coalesce(F.try_element_at(cache, F.lit(1))._opened_epochs, F.array().cast(EPOCHS_TYPE)),
        lambda x: F.struct(x[0].alias("e"), x[1].alias("s"), F.lit(0).cast("long").alias("f")),
    )
    cached = sliced.select(
        *key,
        *carried,
        log_start.alias("log_start_offset"),
        initial.alias("_initial"),
        F.transform(F.filter(cache, lambda x: x._op.isNotNull()), lambda x: x._op).alias("_ops"),
    )
    initial, ops = F.col("_initial"), F.col("_ops")
    counted = cached.select(
        *key, *carried, "log_start_offset", initial, ops, _untouched_entries(initial, ops).alias("_untouched")
    )
    untouched = F.col("_untouched")
    operations = F.transform(ops, lambda x: F.struct(F.lit(0).cast("long").alias("_i"), x.alias("_op")))
    held = F.sort_array(
        F.transform(
            F.concat(
                F.slice(initial, 1, untouched),
                F.aggregate(operations, F.slice(initial, untouched + 1, F.size(initial)), _live_step),
            ),
            lambda x: F.struct(x.s.alias("start_offset"), x.e.alias("leader_epoch")),
        )
    )
    return counted.select(
        *key,
        "log_start_offset",
        "log_end_offset",
        "high_watermark",
        F.transform(held, lambda x: F.array(x.leader_epoch, x.start_offset)).alias("epoch_entries"),
        "wall_ms",
        "event_id",
    )


def _untouched_entries(initial: Column, ops: Column) -> Column:
    """How many of the epoch cache's first entries (`initial`) no operation in `ops` can remove or change: those
    below every assign's epoch and start and every truncate-from-end's offset (an assign drops entries from the end
    while epoch >= its epoch or start >= its start, a truncation those at or above its offset), none of them when
    the log start moves (truncate-from-start changes the head). The fold then steps only the entries after them: a
    cache grows with every leader epoch of the partition's history (1,814 entries per replica in the 40-hour 10M
    lake), and each step copies the whole array it is given, so stepping all of them made a state at an instant
    cost more as the history grew, for the same events since its snapshot.

    The bounds ride in the count's accumulator: a lambda that named them would evaluate them once per entry."""

    def lowest(kinds: tuple[int, ...], field: str) -> Column:
        values = F.transform(F.filter(ops, lambda x: x.kind.isin(*kinds)), lambda x: x[field])
        return F.coalesce(F.array_min(values), F.lit(2**63 - 1).cast("long"))

    bounds = F.struct(
        lowest((_ASSIGN,), "a").alias("e"),
        F.least(lowest((_ASSIGN,), "b"), lowest((_TRUNCATE_FROM_END,), "a")).alias("s"),
        F.lit(0).alias("n"),
        F.lit(False).alias("stop"),
    )

    def count(acc: Column, x: Column) -> Column:
        stop = acc.stop | (x.e >= acc.e) | (x.s >= acc.s)
        return F.struct(acc.e, acc.s, F.when(stop, acc.n).otherwise(acc.n + 1).alias("n"), stop.alias("stop"))

    moves_start = F.exists(ops, lambda x: x.kind == _TRUNCATE_FROM_START)
    return F.when(moves_start, F.lit(0)).otherwise(F.aggregate(initial, bounds, count, lambda acc: acc.n))


_FINAL_FIELDS: Final = (
    "_leo_set",
    "_hw_set",
    "_ls_sets",
    "_ls_set",
    "_ls_lowered",
    "_ep_resets",
    "_op",
    "_opened_epochs",
)


# -- partitions --------------------------------------------------------------------------------------------------


def controller_side(events: DataFrame) -> DataFrame:
    """The rows the partition fold and the controller's lists read (the controller types' and every stamped
    decision's: a few thousand per million events), gathered into one partition. Every window, aggregate and join
    over them then runs where they are, without a shuffle: each shuffle of so few rows into the default partitions
    cost a stage, and the partition fold had about twenty of them, most of a rebuild --at's time.

    Computed once per `events` (a local checkpoint, which keeps the single partition and cuts the lineage): the
    fold's branches (takeovers, fences, decisions, terms) then read it instead of scanning `events` each. What
    combines its rows is a window function over that one partition (`decided_events`, `offline_replicas`,
    `partition_timeline`), not a join: a sort-merge join would shuffle both sides into the default partitions
    again, and a broadcast join runs a job of its own for each broadcast. The checkpoint is eager: computed as it is
    made, once (lazily, the first jobs to read it computed it, and the ordered events under it, each on its own).
    It keeps the typed payload columns of its own types only, and no JSON payload: the checkpoint would otherwise
    read every other type's column (and the payloads) of every event of the lake to keep nulls (at 10M events the
    stage that makes it took 10.4-12.2 s of executor CPU with them, against 2.9 s when it kept `payload` alone)."""
    held = _CONTROLLER_SIDE.get(events)
    if held is None:
        own = (*CONTROLLER_TYPES, *STAMPED_TYPES)
        columns = [name for name in typed_only(events.columns, own) if name != "payload"]
        rows = events.where(F.col("type").isin(*own)).select(*columns).repartition(1)
        held = _CONTROLLER_SIDE[events] = rows.localCheckpoint(eager=True)
    return held


_CONTROLLER_SIDE: Final[weakref.WeakKeyDictionary[DataFrame, DataFrame]] = weakref.WeakKeyDictionary()


def typed_only(columns: Sequence[str], types: Iterable[str]) -> list[str]:
    """`columns` without the typed payload columns of every type but `types`: what rows of those types need kept
    (the others' columns are null on them, and a Parquet file read with `LAKE_SCHEMA` gives null for a column it
    lacks). Keeping the rest would read every type's column of every row scanned, only to keep nulls."""
    wanted = set(types)
    return [name for name in columns if name not in PAYLOAD_STRUCTS or name in wanted]


_CONTROLLER_COLUMNS: Final = (
    "service",
    "emitter_id",
    "incarnation",
    "position",
    "wall_ms",
    "event_id",
    "type",
    "topic",
    "partition",
    "replica",
)


def controller_events(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """The controller-side events (metadata and controller terms) with their payload fields as columns; stamps of
    version 1 events (no stamp) read as -1."""
    fields = [*_CONTROLLER_COLUMNS, "broker", *_METADATA_FIELDS.fieldNames()]
    return decided_events(events, scope).where(F.col("type").isin(*CONTROLLER_TYPES)).select(*scope, *fields)


def decided_events(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """Every row of `controller_side` with its payload's fields as columns (`controller_events`' and `sequence`)
    and, for a stamped decision (controller epoch and metadata offset both set), `committed_below`: the offset from
    which its controller epoch wrote nothing (the least takeover offset of a later epoch, or the offset its own
    fenced append was refused at), or null while the history knows none.

    Window functions over the few rows, in their one partition (`controller_side`), not joins: a join with the
    takeovers and the fences broadcast them, and every broadcast is a job of its own. Computed once per (`events`,
    `scope`), a lazy local checkpoint: the stamped decisions and metadata order both read it."""
    by_scope = _DECIDED.setdefault(events, {})
    held = by_scope.get(tuple(scope))
    if held is None:
        held = by_scope[tuple(scope)] = _decided_events(events, scope).localCheckpoint(eager=False)
    return held


_DECIDED: Final[weakref.WeakKeyDictionary[DataFrame, dict[tuple[str, ...], DataFrame]]] = weakref.WeakKeyDictionary()


def _decided_events(events: DataFrame, scope: Scope) -> DataFrame:
    p, kind = F.col("p"), F.col("type")
    parsed = controller_side(events).select(
        *scope,
        *_CONTROLLER_COLUMNS,
        "sequence",
        F.col(ev.BrokerRegistered.TYPE).broker.alias("_broker"),
        payload_of(_METADATA_FIELDS, (*CONTROLLER_TYPES, *STAMPED_TYPES)).alias("p"),
    )
    columns = parsed.select(
        *scope,
        *_CONTROLLER_COLUMNS,
        "sequence",
        F.when(kind == ev.BrokerRegistered.TYPE, F.col("_broker")).alias("broker"),
        F.coalesce(p.controller_epoch, F.lit(-1)).alias("controller_epoch"),
        F.coalesce(p.metadata_offset, F.lit(-1).cast("long")).alias("metadata_offset"),
        *[p.getField(name).alias(name) for name in _METADATA_FIELDS.fieldNames()[2:]],
    )
    offset = F.col("metadata_offset")
    # A takeover's offset counts for every decision of an earlier epoch: the epochs from the decision's own + 1 up.
    # Ordered downwards so that this frame grows from the partition's start (one pass, each row added once): the
    # same frame ordered upwards, from epoch + 1 to the end, shrinks, and Spark aggregates it again whenever its
    # start moves, once per controller epoch over all the rows after it.
    later = (
        Window.partitionBy(*scope).orderBy(F.col("controller_epoch").desc()).rangeBetween(Window.unboundedPreceding, -1)
    )
    takeover = F.min(F.when((kind == ev.ControllerElected.TYPE) & (offset >= 0), offset)).over(later)
    # A fenced append counts for its own epoch: the last one's offset + 1 in history order (rows of other kinds have
    # no order, which max_by passes over).
    fenced = (kind == ev.ControllerDeposed.TYPE) & (F.col("reason") == "append_fenced") & (offset >= 0)
    own = Window.partitionBy(*scope, "controller_epoch")
    refused = F.max_by(F.when(fenced, offset + 1), F.when(fenced, F.struct(*REPLICA_ORDER))).over(own)
    decision = kind.isin(*STAMPED_TYPES) & (F.col("controller_epoch") >= 0) & (offset >= 0)
    return columns.select("*", F.when(decision, F.least(takeover, refused)).alias("committed_below"))


def metadata_order(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """The committed metadata events in `hightide.audit.rebuild.controller_order`, numbered by `metadata_order`.

    Computed once per (`events`, `scope`), as `controller_side` is (a lazy local checkpoint of its few rows): the
    partition fold and the offline replicas both read it, and a state at an instant computes both in a fresh JVM,
    where each plan's planning and code generation cost more than its rows."""
    by_scope = _METADATA_ORDER.setdefault(events, {})
    held = by_scope.get(tuple(scope))
    if held is None:
        held = by_scope[tuple(scope)] = _metadata_order(events, scope).localCheckpoint(eager=False)
    return held


_METADATA_ORDER: Final[weakref.WeakKeyDictionary[DataFrame, dict[tuple[str, ...], DataFrame]]] = (
    weakref.WeakKeyDictionary()
)


def _metadata_order(events: DataFrame, scope: Scope) -> DataFrame:
    kind = F.col("type")
    controller = decided_events(events, scope).where(kind.isin(*CONTROLLER_TYPES))
    # The metadata types are stamped decisions: the abandoned ones are at or past their `committed_below`.
    at_or_past = F.col("metadata_offset") >= F.col("committed_below")
    abandoned = F.coalesce(kind.isin(*METADATA_TYPES) & at_or_past, F.lit(False))
    emitter = Window.partitionBy(*scope, "service", "emitter_id").orderBy("position")
    elected = kind == ev.ControllerElected.TYPE
    termed = controller.select(
        "*",
        abandoned.alias("abandoned"),
        F.sum(elected.cast("int")).over(emitter).alias("term"),
        F.coalesce(
            F.last(F.when(elected, F.col("controller_epoch")), ignorenulls=True).over(emitter), F.lit(NO_TERM)
        ).alias("term_epoch"),
    )
    kept = termed.where(kind.isin(*METADATA_TYPES) & ~F.col("abandoned"))
    term = Window.partitionBy(*scope, "service", "emitter_id", "term")
    first_by = F.struct("position")
    ordered = kept.select(
        "*",
        F.min_by("wall_ms", first_by).over(term).alias("term_wall_ms"),
        F.min_by("incarnation", first_by).over(term).alias("term_incarnation"),
    )
    order = Window.partitionBy(*scope).orderBy(
        "term_epoch", "term_wall_ms", "service", "emitter_id", "term_incarnation", "position"
    )
    # `term` (the emitter's count of ControllerElected so far) stays: a snapshot keeps each term's first event.
    ordered_rows = ordered.withColumn("metadata_order", F.row_number().over(order))
    return ordered_rows.drop("abandoned", "sequence", "committed_below")


def partition_timeline(events: DataFrame, scope: Scope = ()) -> tuple[DataFrame, DataFrame]:
    """(one row per PartitionChanged the fold takes, in metadata order, with its topic's last life and end
    (`_topic_life`, `_topic_deleted`); per topic its last life and whether it ended deleted)."""
    ordered = metadata_order(events, scope).where(
        F.col("type").isin(ev.TopicCreated.TYPE, ev.TopicDeleted.TYPE, ev.PartitionChanged.TYPE)
    )
    kind = F.col("type")
    by_topic = Window.partitionBy(*scope, "topic").orderBy("metadata_order").rowsBetween(Window.unboundedPreceding, 0)
    topic_event = F.when(kind == ev.TopicCreated.TYPE, F.lit(False)).when(kind == ev.TopicDeleted.TYPE, F.lit(True))
    lived = ordered.select(
        "*",
        (F.sum((kind == ev.TopicCreated.TYPE).cast("int")).over(by_topic) - 1).alias("life"),
        F.coalesce(F.last(topic_event, ignorenulls=True).over(by_topic), F.lit(False)).alias("topic_deleted"),
    )
    # Each row also carries its topic's last life and whether the topic ended deleted (`final_partitions` keeps the
    # changes of live topics' last lives): a window in the same order, not a join with `topics` (a broadcast, a job).
    whole_topic = by_topic.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ended = lived.select(
        "*",
        F.last("life").over(whole_topic).alias("_topic_life"),
        F.last("topic_deleted").over(whole_topic).alias("_topic_deleted"),
    )
    topics = lived.groupBy(*scope, "topic").agg(
        F.max_by("life", "metadata_order").alias("life"), F.max_by("topic_deleted", "metadata_order").alias("deleted")
    )
    changes = ended.where((kind == ev.PartitionChanged.TYPE) & ~F.col("topic_deleted"))
    in_life = (
        Window.partitionBy(*scope, *PARTITION_KEY, "life")
        .orderBy("metadata_order")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    taken = changes.withColumn("_held", F.max("partition_epoch").over(in_life)).where(
        F.col("_held").isNull() | (F.col("partition_epoch") > F.col("_held"))
    )
    return taken.drop("_held"), topics


# -- the state at an instant --------------------------------------------------------------------------------------


def final_states(rebuilt: Rebuilt, scope: Scope = ()) -> tuple[DataFrame, DataFrame]:
    """(each live replica's state after all the events, each live partition's): the last timeline rows."""
    replicas = final_replicas(rebuilt.replicas, rebuilt.epochs, scope)
    return replicas, final_partitions(rebuilt.partitions, scope)


def final_partitions(partitions: DataFrame, scope: Scope = ()) -> DataFrame:
    """Each live partition's state after all the events, from `partition_timeline`'s rows: the last change it took
    in its topic's last life (with its `event_id`), where the topic did not end deleted."""
    last_change = Window.partitionBy(*scope, *PARTITION_KEY).orderBy(F.col("metadata_order").desc())
    return (
        partitions.where((F.col("life") == F.col("_topic_life")) & ~F.col("_topic_deleted"))
        .withColumn("_n", F.row_number().over(last_change))
        .where(F.col("_n") == 1)
        .select(
            *scope,
            *PARTITION_KEY,
            "replicas",
            "isr",
            "elr",
            "last_known_elr",
            "leader",
            "leader_epoch",
            "partition_epoch",
            "wall_ms",
            "event_id",
        )
    )


def final_replicas(replicas: DataFrame, epochs: DataFrame, scope: Scope = ()) -> DataFrame:
    """Each live replica's state after all the events, from `replica_timeline`'s frames alone (a snapshot needs no
    partition fold: building one would order the controller side for nothing)."""
    # `_last` marks each replica's last row in the fold's own window: no second sort of every row to find them.
    last_rows = replicas.where(F.col("_last") & F.col("online"))
    return epoch_entries_at(last_rows, epochs, scope).select(
        *scope,
        *REPLICA_KEY,
        "log_start_offset",
        "log_end_offset",
        "high_watermark",
        "epoch_entries",
        "wall_ms",
        "event_id",
    )


def ordered(
    lake_rows: DataFrame,
    scope: Scope = (),
    starts: DataFrame | None = None,
    types: Sequence[str] | None = None,
    *,
    bounds: Bounds | None = None,
) -> DataFrame:
    """`hightide.history.events.order_events` within each scope, with `event_id`: duplicates dropped (the first
    archived copy, lowest stream sequence, is kept), `incarnation_start` and `position` added. `starts` (service,
    emitter_id, incarnation, incarnation_start), when given, says when incarnations seen earlier started (a
    snapshot's). `types`, when given, keeps only the events of those types and only the columns the folds read
    (`FOLD_COLUMNS`): every event is still ordered (positions and the copies dropped are the same), but the rows are
    shuffled and sorted without the payloads of the other types (of the typed payload columns, only those types'
    are kept), and what is kept is about half the lake (see `fold_events`). The other types' rows are shuffled too
    (without their payloads): one of them may be the first archived copy of an event whose later copy is of a kept
    type (two events given one sequence), which must then be dropped. `bounds`: `events.incarnation_bounds` of
    `lake_rows`; without copies, no row is shuffled here."""
    kept = F.col("type").isin(*types) if types is not None else None
    if kept is not None and types is not None:
        typed = [F.col(name) for name in types]  # null on every other type's rows
        lake_rows = lake_rows.select(*scope, *FOLD_COLUMNS, F.when(kept, F.col("payload")).alias("payload"), *typed)
    positioned = order_events(lake_rows, scope, starts, bounds=bounds)
    if kept is not None:
        positioned = positioned.where(kept).drop("stream_sequence")
    return positioned.withColumn("event_id", event_id_column())


def fold_events(
    lake_rows: DataFrame, scope: Scope = (), starts: DataFrame | None = None, *, bounds: Bounds | None = None
) -> DataFrame:
    """`ordered` narrowed to what the replica and partition folds read (`FOLD_TYPES`, `FOLD_COLUMNS`): the input of
    `timelines`, `rebuild_frames` and the state at an instant, which give the same rows from it as from every event
    (the positions are the same). At 1M generated events the folds read 54% of the events; ordering and caching
    only those, without the other columns, halves the ordering's cost. `bounds` as `ordered` takes it."""
    return ordered(lake_rows, scope, starts, FOLD_TYPES, bounds=bounds)


def state_at(lake_rows: DataFrame, at_ms: int) -> tuple[DataFrame, DataFrame]:
    """The state the events with wall_ms <= `at_ms` leave, as `hightide.audit.rebuild.rebuild` folds exactly those
    events (their emitter order is computed again among them): (replicas, partitions) as `final_states` gives."""
    return final_states(rebuild_frames(fold_events(lake_rows.where(F.col("wall_ms") <= at_ms))))


def states_at(lake_rows: DataFrame, instants: Sequence[int]) -> tuple[DataFrame, DataFrame]:
    """`state_at` for every instant at once, in one job: each row has an `instant` column (its events are folded
    apart from the others'). The lake rows are copied once per instant they precede: for tests and small lakes."""
    spark = lake_rows.sparkSession
    moments = spark.createDataFrame(
        [(instant,) for instant in instants], T.StructType([T.StructField("instant", T.LongType(), False)])
    )
    copies = lake_rows.join(F.broadcast(moments), F.col("wall_ms") <= F.col("instant"))
    scope = ("instant",)
    return final_states(rebuild_frames(fold_events(copies, scope), scope), scope)


# -- issue 12 (gaps): the offline replicas and the abandoned intents, as the plain rebuild lists them ---------------

# The events a controller decides (`hightide.protocol.events.decision_stamp`: a controller epoch and a metadata
# offset, other than a term's own ControllerElected and ControllerDeposed).
STAMPED_TYPES: Final = tuple(
    name
    for name, event_class in ev.CATALOGUE.items()
    if {"controller_epoch", "metadata_offset"} <= {f.name for f in dataclasses.fields(event_class)}
    and event_class not in (ev.ControllerElected, ev.ControllerDeposed)
)
# What the replica and partition folds read of the ordered events (`fold_events`): the events of these types, and
# these lake columns besides the payload (`ordered` adds incarnation_start, position and event_id).
FOLD_TYPES: Final = (*_REPLICA_TYPES, *CONTROLLER_TYPES, *(t for t in STAMPED_TYPES if t not in CONTROLLER_TYPES))
FOLD_COLUMNS: Final = (
    "service",
    "emitter_id",
    "incarnation",
    "sequence",
    "stream_sequence",
    "wall_ms",
    "type",
    "topic",
    "partition",
    "replica",
)
ABANDONED_SCHEMA: Final = T.StructType(
    [
        T.StructField("service", T.StringType(), True),
        T.StructField("emitter_id", T.IntegerType(), True),
        T.StructField("incarnation", T.StringType(), True),
        T.StructField("sequence", T.LongType(), True),
        T.StructField("event_type", T.StringType(), True),
        T.StructField("controller_epoch", T.IntegerType(), True),
        T.StructField("metadata_offset", T.LongType(), True),
        T.StructField("committed_below", T.LongType(), True),
    ]
)


def abandoned_intents(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """`hightide.audit.rebuild.abandoned_intents`: every stamped decision at or past the offset from which its
    controller epoch wrote nothing (the least takeover offset of a later epoch, or the offset its own fenced append
    was refused at). Columns: `scope`, ABANDONED_SCHEMA's, `event_id` and the REPLICA_ORDER columns (history order)."""
    decided = stamped_decisions(events, scope)
    return decided.where(F.col("metadata_offset") >= F.col("committed_below")).select(
        *scope,
        *[F.col(f.name if f.name != "event_type" else "type").cast(f.dataType).alias(f.name) for f in ABANDONED_SCHEMA],
        "event_id",
        "position",
    )


def stamped_decisions(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """Every stamped decision (controller epoch and metadata offset both set) with `committed_below`: the offset from
    which its controller epoch wrote nothing, or null while the history knows none (`abandoned_intents` keeps those
    at or past it). See `decided_events`."""
    decided = decided_events(events, scope)
    return decided.where(
        F.col("type").isin(*STAMPED_TYPES) & (F.col("controller_epoch") >= 0) & (F.col("metadata_offset") >= 0)
    )


def offline_replicas(events: DataFrame, scope: Scope = ()) -> DataFrame:
    """`hightide.audit.rebuild.ClusterState.offline_replicas`: per partition, the replicas (sorted) whose last
    ReplicaMarkedOffline in metadata order comes after every BrokerRegistered of their broker and after the start or
    end of their topic's last life (which clear it). Columns: `scope`, topic, partition, replicas."""
    kind, order = F.col("type"), F.col("metadata_order")
    marks = kind == ev.ReplicaMarkedOffline.TYPE
    registrations, lives = kind == ev.BrokerRegistered.TYPE, kind.isin(ev.TopicCreated.TYPE, ev.TopicDeleted.TYPE)
    # The last registration of each mark's broker and the last start or end of its topic's life, by windows over
    # the few rows in their one partition (joins would broadcast them: a job each).
    node = F.when(registrations, F.col("broker")).when(marks, F.col("replica"))
    listed = (
        metadata_order(events, scope)
        .where(marks | registrations | lives)
        .select(*scope, "type", "topic", "partition", "replica", "metadata_order", node.alias("_node"))
        .select(
            "*",
            F.max(F.when(registrations, order)).over(Window.partitionBy(*scope, "_node")).alias("registered_at"),
            F.max(F.when(lives, order)).over(Window.partitionBy(*scope, "topic")).alias("life_at"),
        )
    )
    marked = (
        listed.where(marks)
        .groupBy(*scope, "topic", "partition", "replica")
        .agg(
            F.max("metadata_order").alias("marked_at"),
            F.max("registered_at").alias("registered_at"),
            F.max("life_at").alias("life_at"),
        )
    )
    still = marked.where(
        (F.col("registered_at").isNull() | (F.col("registered_at") < F.col("marked_at")))
        & (F.col("life_at").isNull() | (F.col("life_at") < F.col("marked_at")))
    )
    return still.groupBy(*scope, "topic", "partition").agg(F.sort_array(F.collect_list("replica")).alias("replicas"))


def listed_at(lake_rows: DataFrame, instants: Sequence[int]) -> tuple[DataFrame, DataFrame]:
    """(`offline_replicas`, `abandoned_intents`) at every instant at once, as `states_at` folds states: each row
    has an `instant` column. For tests and small lakes."""
    spark = lake_rows.sparkSession
    moments = spark.createDataFrame(
        [(instant,) for instant in instants], T.StructType([T.StructField("instant", T.LongType(), False)])
    )
    copies = ordered(lake_rows.join(F.broadcast(moments), F.col("wall_ms") <= F.col("instant")), ("instant",))
    return offline_replicas(copies, ("instant",)), abandoned_intents(copies, ("instant",))
