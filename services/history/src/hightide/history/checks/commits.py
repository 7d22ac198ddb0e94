"""Committed records, truncations, leader completeness, acknowledged writes and loss attribution, in Spark.

Room: services/history. The same five checks, rules and wording as `hightide.audit.checks.commits` (read its module
docstring for the model): each replica's log is its leader epoch entries, folded from its own broker's events by
window functions over its stream (`position` order); an entry lives from the event that adds it until the first
later event that cuts at or below its start; every comparison is a range join on offsets, never one row per offset.
No Python UDFs.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Final

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from hightide.audit.checks.commits import LOSSY_OPEN_REASONS
from hightide.history.events import of_type, of_types
from hightide.history.findings import finding_columns
from hightide.protocol import events

KEY: Final = ("topic", "partition", "replica")
_FOLDED: weakref.WeakKeyDictionary[DataFrame, dict[int, Folded]] = weakref.WeakKeyDictionary()
TP: Final = ("topic", "partition")
KAFKA_MIN_INSYNC_REPLICAS: Final = 1
ALL: Final = -1  # a cut at -1 removes every entry (starts are >= 0)
BIG: Final = 2**62


# The replica stream's columns past its key, each a fact some event gives (null where an event gives none), with
# its Spark type.
_STREAM_FACTS: Final = {
    "leo": "bigint", "lso": "bigint", "cut": "bigint", "leader": "boolean", "known": "bigint", "lo": "bigint",
    "hi": "bigint", "epoch": "bigint", "value": "bigint", "reason": "string", "acks": "int",
    "entries": "array<array<bigint>>", "hw_set": "bigint",
}  # fmt: skip


def _stream_sources() -> list[tuple[type[events.Event], str, dict[str, Column]]]:
    """Each event type of the replica stream: its `kind` and the facts it gives, as expressions over its payload."""
    c = F.col
    gone = {"leo": F.lit(0), "lso": F.lit(0), "cut": F.lit(ALL), "leader": F.lit(False), "hw_set": F.lit(0)}
    start_over = c("reason") == "start_over"
    return [
        (events.LogOpened, "opened", {"leo": c("log_end_offset"), "lso": c("log_start_offset"), "cut": F.lit(ALL),
                                      "leader": F.lit(False), "reason": c("reason"), "entries": c("leader_epochs"),
                                      "hw_set": c("high_watermark")}),
        (events.LeaderEpochStarted, "epoch", {"cut": c("start_offset"), "epoch": c("leader_epoch"),
                                              "lo": c("start_offset")}),
        (events.RecordsAppended, "appended", {"leo": c("log_end_offset")}),
        (events.LogTruncated, "truncated", {
            "leo": c("truncated_to"), "lso": F.when(start_over, c("truncated_to")),
            "cut": F.when(start_over, F.lit(ALL)).otherwise(c("truncated_to")), "lo": c("truncated_to"),
            "hi": c("log_end_offset_before"), "epoch": c("leader_epoch"), "reason": c("reason"),
            "hw_set": c("high_watermark")}),
        (events.LeaderEpochsTruncated, "epochs_truncated", {"cut": c("end_offset")}),
        (events.LogStartOffsetAdvanced, "log_start", {"lso": c("log_start_offset")}),
        (events.LogDeleted, "gone", gone),
        (events.ReplicaOffline, "gone", gone),
        (events.HighWatermarkAdvanced, "hw", {"lo": c("previous"), "hi": c("high_watermark"),
                                              "epoch": c("leader_epoch"), "hw_set": c("high_watermark")}),
        (events.BecameLeader, "leader", {"leader": F.lit(True), "known": c("leader_epoch"), "hi": c("log_end_offset"),
                                         "epoch": c("leader_epoch")}),
        (events.BecameFollower, "follower", {"leader": F.lit(False), "known": c("leader_epoch")}),
        # An acknowledgement is its leader's: `replica` is the leader (below).
        (events.ProduceCompleted, "ack", {"lo": c("base_offset"), "hi": c("last_offset") + 1,
                                          "epoch": c("leader_epoch"), "value": c("high_watermark"), "acks": c("acks")}),
    ]  # fmt: skip


def _stream_rows(lake: DataFrame) -> DataFrame:
    """The replica stream's events, one row each: KEY, position, event_id, `kind` and its facts (`_STREAM_FACTS`).

    One read of the lake, each payload parsed once against the union of the types' fields (`events.of_types`),
    rather than a read per type put together by unions: without the audit's cache (`audit.prepare`) each read is
    a scan of the lake's files."""
    c = F.col
    sources = _stream_sources()
    rows = of_types(lake, [event_class for event_class, _, _ in sources])
    acked = c("type") == events.ProduceCompleted.TYPE
    wanted = (c("error") == "NONE") & c("acks").isin(-1, 1) & (c("base_offset") >= 0)

    def by_type(values: Sequence[tuple[type[events.Event], Column]]) -> Column:
        chosen = F.when(c("type") == values[0][0].TYPE, values[0][1])
        for event_class, value in values[1:]:
            chosen = chosen.when(c("type") == event_class.TYPE, value)
        return chosen

    kind = by_type([(event_class, F.lit(name)) for event_class, name, _ in sources])
    facts = []
    for name, kind_type in _STREAM_FACTS.items():
        given = [(event_class, gives[name]) for event_class, _, gives in sources if name in gives]
        facts.append(by_type(given).cast(kind_type).alias(name))
    return rows.where(~acked | wanted).select(
        "topic", "partition", F.when(acked, c("leader")).otherwise(c("replica")).alias("replica"), "position",
        "event_id", kind.alias("kind"), *facts,
    )  # fmt: skip


_STREAMS: weakref.WeakKeyDictionary[DataFrame, DataFrame] = weakref.WeakKeyDictionary()


def stream_of(lake: DataFrame) -> DataFrame:
    """`replica_stream` of `lake`, checkpointed once per lake DataFrame for every check that reads it (the fold
    here, and `high_watermark.hw_within_log`); `forget` drops it."""
    held = _STREAMS.get(lake)
    if held is None:
        # Checkpointed (materialised, lineage cut): every check plans against it, not against the lake.
        held = _STREAMS[lake] = replica_stream(lake).localCheckpoint()
    return held


def replica_stream(lake: DataFrame) -> DataFrame:
    """Every event that changes or reads a replica's log, one row each, with its state after it: `leo_t`, `lso_t`,
    `leader_t`, `known_t` (the last leader epoch it heard), `leo_before`, the next event's kind and log start, its
    log's top entry where the stream alone tells it (`top_x`, `top_s`; see `_top_entry`), and B1's reading of its
    offsets (`hw_t`, `lso_b`, `hw_broken`; see `_offsets_in_order`). One shuffle and one sort: every window here
    has the same partitioning and order.

    Three window passes over that order, each a Window operator that buffers every replica's rows: the running
    values of the rows themselves; then those of values the first pass gave (`_top_entry`'s and
    `_offsets_in_order`'s, in one pass: neither reads the other's); then `_offsets_in_order`'s last, which reads
    the second's. With the second pass split in two (four operators), the stream's window stage at 10M events took
    42.6-43.6 s of executor CPU against 39.5-40.2 s (two pairs, alternated, fresh JVMs, local[2])."""
    stream = _stream_rows(lake)
    upto = Window.partitionBy(*KEY).orderBy("position").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = Window.partitionBy(*KEY).orderBy("position").rowsBetween(Window.unboundedPreceding, -1)
    ordered = Window.partitionBy(*KEY).orderBy("position")
    resets = F.when(F.col("kind").isin("opened", "gone"), 1).otherwise(0)
    first = (
        stream.select(
            "*",
            F.coalesce(F.last("leo", True).over(upto), F.lit(0)).alias("leo_t"),
            F.coalesce(F.last("lso", True).over(upto), F.lit(0)).alias("lso_t"),
            F.coalesce(F.last("leader", True).over(upto), F.lit(False)).alias("leader_t"),
            F.coalesce(F.last("known", True).over(upto), F.lit(-1)).alias("known_t"),
            F.coalesce(F.last("leo", True).over(before), F.lit(0)).alias("leo_before"),
            F.max(
                F.when(F.col("kind") == "opened", F.array_max(F.transform("entries", lambda e: e[1]))).otherwise(
                    F.when(F.col("kind") == "epoch", F.col("lo"))
                )
            )
            .over(before)
            .alias("max_start_before"),
            F.lead("kind").over(ordered).alias("next_kind"),
            F.lead("lso").over(ordered).alias("next_lso"),
            F.last(_added_top(), True).over(upto).alias("_top"),
            F.last(F.when(_adds(), F.col("position")), True).over(upto).alias("_added_at"),
            F.coalesce(F.last("hw_set", True).over(upto), F.lit(0)).alias("hw_t"),
            F.count("lso").over(upto).alias("_starts"),
            F.sum(resets).over(upto).alias("_life"),
        )
    )  # fmt: skip
    second = first.select("*", _cut_at().over(upto).alias("_cut_at"), _least_point().over(upto).alias("_within"))
    return _offsets_in_order(_top_entry(second), before)


def _adds() -> Column:
    """Whether a stream row adds leader epoch entries (it first cuts, then adds: see `entry_lives`)."""
    return F.col("kind").isin("opened", "epoch")


def _added_top() -> Column:
    """At a row that adds entries, the one it leaves on top (start, epoch): an epoch's own, a reopened log's
    highest-starting one (both fields null when it reopened with none); null at other rows."""
    c = F.col
    none = F.struct(F.lit(None).cast("bigint").alias("s"), F.lit(None).cast("bigint").alias("x"))
    reopened = F.array_max(F.transform("entries", lambda e: F.struct(e[1].alias("s"), e[0].alias("x"))))
    return F.when(c("kind") == "epoch", F.struct(c("lo").alias("s"), c("epoch").alias("x"))).when(
        c("kind") == "opened", F.coalesce(reopened, none)
    )


def _cut_at() -> Column:
    """Over the rows so far (`_top_entry`): the position of the last cut that reached the top entry of its time."""
    c = F.col
    reaches = ~_adds() & c("cut").isNotNull() & (c("cut") <= c("_top.s"))
    return F.last(F.when(reaches, c("position")), True)


def _top_entry(stream: DataFrame) -> DataFrame:
    """`stream` (with `_top`, `_added_at` and `_cut_at`) with `top_s` and `top_x` instead: the replica log's top
    leader epoch entry after each row, where the stream tells it without the entries' stack (`entry_depths`), null
    elsewhere.

    The entries a row adds leave one of them on top, above every live entry (an addition first cuts every entry
    at or above its start). Until the next addition that entry stays on top unless a later cut reaches its start,
    and a cut that does not reach it cuts nothing (every live entry starts at or below it). So after a row the top
    is the last addition's, unless a cut since then reached it (or the log reopened empty): then it is left null,
    and a query there reads the stack (`runs_of`)."""
    c = F.col
    known = c("_top.s").isNotNull() & (c("_cut_at").isNull() | (c("_cut_at") < c("_added_at")))
    return stream.select(
        *[name for name in stream.columns if name not in ("_top", "_added_at", "_cut_at")],
        F.when(known, c("_top.s")).alias("top_s"),
        F.when(known, c("_top.x")).alias("top_x"),
    )


# The stream's kinds that move a replica's offsets (B1's events), and their event types.
OFFSET_MOVES: Final[dict[str, type[events.Event]]] = {
    "opened": events.LogOpened, "appended": events.RecordsAppended, "hw": events.HighWatermarkAdvanced,
    "truncated": events.LogTruncated, "log_start": events.LogStartOffsetAdvanced,
}  # fmt: skip


def _least_point() -> Column:
    """Over the rows so far (`_offsets_in_order`): the greatest (stretch, -point) of a truncation, as a struct."""
    c = F.col
    point = F.when((c("kind") == "truncated") & (c("reason") != "start_over"), c("cut"))
    return F.max(F.struct(c("_starts").alias("n"), F.coalesce(-point, F.lit(-BIG)).alias("m")))


def _offsets_in_order(stream: DataFrame, before: WindowSpec) -> DataFrame:
    """`stream` (with `_starts`, `_life`, and `_within`: `_least_point` over the rows so far) with B1's reading of
    each row (see `high_watermark.hw_within_log`) instead of those three: `hw_t`, the HW after it (the
    last one set since the log opened or went, else 0), `lso_b`, its log start as B1 reads it (the last one set,
    lowered by every ordinary truncation since), and `hw_broken`, true where a row that moves the offsets leaves
    log start <= HW <= LEO broken and the log's previous such row (since it opened or went) did not.

    A log's life (`_life`) starts where it opens or goes; its log start is set by those rows too, so a running
    count of the rows setting it (`_starts`) numbers the stretches each truncation lowers it within. The least
    truncation point of the current stretch is a running maximum of (stretch, -point): the latest stretch wins,
    and within it the least point. So every window here keeps the stream's one order: a window partitioned by
    stretch or by life would sort the rows again."""
    c = F.col
    least_point = F.when(c("_within.m") > -BIG, -c("_within.m"))
    moves = c("kind").isin(*OFFSET_MOVES)
    marked = stream.withColumn("lso_b", F.least("lso_t", least_point))
    broken = marked.withColumn("_broken", moves & ~((c("lso_b") <= c("hw_t")) & (c("hw_t") <= c("leo_t"))))
    previous = F.last(F.when(moves, F.struct(c("_life").alias("life"), c("_broken").alias("broken"))), True)
    broken = broken.withColumn("_previous", previous.over(before))
    was = F.coalesce((c("_previous.life") == c("_life")) & c("_previous.broken"), F.lit(False))
    return broken.select(
        *[name for name in stream.columns if name not in ("_starts", "_life", "_within")], "lso_b",
        (c("_broken") & ~was).alias("hw_broken"),
    )  # fmt: skip


def entry_lives(stream: DataFrame) -> DataFrame:
    """Every leader epoch entry (epoch x, start s) of every replica with the position that added it and the position
    of the first later event that cut at or below its start (`killed`, null: never).

    Only a cut at or below the highest start added before it can cut anything, so the cuts are first narrowed to
    those (few: truncations, restarts, an epoch starting where the last one did) before the range join."""
    opened = (
        stream.where(F.col("kind") == "opened")
        .select(*KEY, "position", F.explode("entries").alias("entry"))
        .select(*KEY, "position", F.col("entry")[0].alias("x"), F.col("entry")[1].alias("s"))
    )
    started = stream.where(F.col("kind") == "epoch").select(*KEY, "position", F.col("epoch").alias("x"),
                                                             F.col("lo").alias("s"))  # fmt: skip
    added = opened.unionByName(started)
    cuts = stream.where(F.col("cut").isNotNull() & (F.col("cut") <= F.col("max_start_before"))).select(
        F.col("topic").alias("_t"), F.col("partition").alias("_p"), F.col("replica").alias("_r"),
        F.col("position").alias("q"), "cut",
    )  # fmt: skip
    on = (
        (F.col("topic") == F.col("_t"))
        & (F.col("partition") == F.col("_p"))
        & (F.col("replica") == F.col("_r"))
        & (F.col("q") > F.col("position"))
        & (F.col("cut") <= F.col("s"))
    )
    joined = added.join(cuts, on, "left")
    return joined.groupBy(*KEY, "position", "x", "s").agg(F.min("q").alias("killed"))


# Where a row sorts among the entry changes at its position: a query of the log before the event first, then the
# event's cuts, its additions (by start), and a query of the log after the event.
_BEFORE, _KILL, _ADD, _AFTER = -1, 0, 1, 2
# How many entries below the top a range query reads before it falls back to reading the whole log.
_NEAR_TOP: Final = 8


def entry_depths(lives: DataFrame) -> DataFrame:
    """The entries' additions and cuts as rows (KEY, pos, phase, s, x, delta, killed) with `depth`, the number of
    live entries after the row (`killed`: an addition's entry's cut position, as in `entry_lives`). The live entries
    are always a stack ordered by start (an addition first cuts every entry at or above its start; a cut removes a
    top part), so the entry at depth d at any moment is the last one added at depth d before it: that is how a query
    finds a replica's entries without a range join."""
    adds = lives.select(*KEY, F.col("position").alias("pos"), F.lit(_ADD).alias("phase"), "s", "x",
                        F.lit(1).alias("delta"), "killed")  # fmt: skip
    kills = lives.where(F.col("killed").isNotNull()).select(
        *KEY, F.col("killed").alias("pos"), F.lit(_KILL).alias("phase"), F.lit(None).cast("bigint").alias("s"),
        F.lit(None).cast("bigint").alias("x"), F.lit(-1).alias("delta"), F.lit(None).cast("bigint").alias("killed"),
    )  # fmt: skip
    upto = Window.partitionBy(*KEY).orderBy("pos", "phase", "s").rowsBetween(Window.unboundedPreceding, 0)
    return adds.unionByName(kills).withColumn("depth", F.sum("delta").over(upto))


def runs_of(queries: DataFrame, depths: DataFrame, id_columns: Sequence[str], *, before: bool = False) -> DataFrame:
    """The runs (run_start, run_end, x) of each query's replica log within [lo, hi), at the query's position `t`
    (after its event; `before`: just before it; a `phase` column, `_BEFORE` or `_AFTER`, says it per query instead).
    A query is one row per `id_columns` with KEY, t, lo and hi; `depths` is `entry_depths` of the replicas' entries.

    A query reads its replica's live entries by depth (see `entry_depths`): first the top one, which holds the
    whole range when it starts at or below `lo`; then the few below the top; only a query reaching deeper (an
    election reads its whole log) reads them all. (Most high watermark advances and acknowledgements lie within the
    top entry and are answered from the replica stream instead, `_on_top`. On the 10M-event bench lake every one of
    its 3.6M is, and this pass, which took 34 s with them, takes 8.5 s for the final logs and truncations left.)"""
    c = F.col
    phase = F.lit(_BEFORE if before else _AFTER)
    if "phase" in queries.columns:  # each query says its own (see `Folded.__init__`: every query set in one pass)
        phase = c("phase")
    marked = queries.select(*[name for name in queries.columns if name != "phase"], c("t").alias("pos"),
                            phase.alias("phase"), F.lit(0).alias("delta"))  # fmt: skip
    changes = depths.select(*KEY, "pos", "phase", "s", "delta")
    upto = Window.partitionBy(*KEY).orderBy("pos", "phase", "s").rowsBetween(Window.unboundedPreceding, 0)
    # `counted` and `top` are each read by more than one branch below: checkpointed, their windows run once.
    counted = (
        marked.unionByName(changes, allowMissingColumns=True)
        .withColumn("_depth", F.coalesce(F.sum("delta").over(upto), F.lit(0)))
        .where(c("phase").isin(_BEFORE, _AFTER))
        .drop("delta", "s")
    ).localCheckpoint()
    top = _entries_at(counted.withColumn("_d", c("_depth")), depths).localCheckpoint()
    resolved = (c("s") <= c("lo")) | (c("_depth") <= 1)
    near = counted.join(top.where(~resolved).select(*id_columns), [*id_columns], "left_semi")
    near_rows = _entries_at(
        near.withColumn("_d", F.explode(F.sequence(F.greatest(F.lit(1), c("_depth") - (_NEAR_TOP - 1)), c("_depth")))),
        depths,
    )
    deepest = Window.partitionBy(*id_columns)
    near_rows = near_rows.withColumn("_floor", F.min(F.struct("_d", "s")).over(deepest))
    near_resolved = (c("_floor.s") <= c("lo")) | (c("_floor._d") <= 1)
    far = counted.join(near_rows.where(~near_resolved).select(*id_columns).distinct(), [*id_columns], "left_semi")
    far_rows = _entries_at(far.withColumn("_d", F.explode(F.sequence(F.lit(1), c("_depth")))), depths)
    joined = (
        top.where(resolved)
        .unionByName(near_rows.where(near_resolved).drop("_floor"))
        .unionByName(far_rows)
        .drop("_d", "_depth", "pos", "phase")
    )
    window = Window.partitionBy(*id_columns).orderBy("s")
    bounded = joined.select("*", F.lead("s").over(window).alias("next_s"))
    runs = bounded.select(
        *[name for name in bounded.columns if name not in ("next_s", "s")],
        F.greatest("s", "lo").alias("run_start"),
        F.least(F.coalesce("next_s", "hi"), F.col("hi")).alias("run_end"),
    )
    return runs.where(F.col("run_start") < F.col("run_end"))


def _entries_at(wanted: DataFrame, depths: DataFrame) -> DataFrame:
    """Each row of `wanted` (KEY, pos, phase, a depth `_d`) with the (s, x) of the entry live at that depth at that
    moment: the last one added at depth `_d` before the row in (pos, phase) order. Rows at depth 0 are dropped."""
    c = F.col
    adds = depths.where(c("phase") == _ADD).select(*KEY, "pos", "phase", c("depth").alias("_d"),
                                                   F.struct("s", "x").alias("_entry"))  # fmt: skip
    key = Window.partitionBy(*KEY, "_d").orderBy("pos", "phase", "_order").rowsBetween(Window.unboundedPreceding, 0)
    ordered = (
        wanted.where(c("_d") >= 1)
        .withColumn("_order", F.lit(1))
        .unionByName(adds.withColumn("_order", F.lit(0)), allowMissingColumns=True)
    )
    found = ordered.withColumn("_found", F.last("_entry", True).over(key)).where(c("_order") == 1)
    return found.select(*[name for name in wanted.columns], c("_found.s").alias("s"), c("_found.x").alias("x")).drop(
        "_order", "_entry"
    )


def forget(lake: DataFrame) -> None:
    """Drop the fold and the replica stream of `lake` (their checkpointed frames are freed once nothing refers to
    them): an audit's last step, so a long-lived process does not keep every history it audited."""
    _FOLDED.pop(lake, None)
    _STREAMS.pop(lake, None)


def _folded(lake: DataFrame, min_insync_replicas: int) -> Folded:
    """The fold of `lake`, computed once per lake DataFrame (and min ISR) however many checks read it."""
    held = _FOLDED.setdefault(lake, {})
    if min_insync_replicas not in held:
        held[min_insync_replicas] = Folded(lake, min_insync_replicas)
    return held[min_insync_replicas]


class Folded:
    """What the checks read, computed once per lake DataFrame."""

    def __init__(self, lake: DataFrame, min_insync_replicas: int) -> None:
        c = F.col
        # Checkpointed (materialised, lineage cut): every check plans against these small frames, not the fold.
        stream = stream_of(lake)
        entries = entry_depths(entry_lives(stream)).localCheckpoint()
        hw = stream.where(c("kind") == "hw")
        clip = F.when(~c("leader_t") & (c("next_kind") == "log_start"), F.greatest("lso_t", "next_lso")).otherwise(
            c("lso_t")
        )
        hw_queries, hw_fast = _on_top(hw.select(*KEY, "event_id", c("position").alias("t"),
                                                F.greatest("lo", clip).alias("lo"), "hi", "epoch", "leader_t",
                                                "top_s", "top_x"))  # fmt: skip
        truncated = stream.where((c("kind") == "truncated") & (c("reason") != "start_over") & (c("lo") < c("hi")))
        truncation_queries = truncated.select(*KEY, "event_id", c("position").alias("t"),
                                              F.greatest("lo", "lso_t").alias("lo"), "hi", "epoch",
                                              c("lo").alias("truncated_to"), "reason")  # fmt: skip
        became = stream.where(c("kind") == "leader")
        self.elections = became.select(*KEY, "event_id", "epoch", c("lso_t").alias("log_start"))
        # Not in the shared pass below: an election reads its whole log, so only the elections that
        # `_complete_elections` cannot vouch for are run (`leader_completeness`).
        self.election_queries = became.select(*KEY, "event_id", c("position").alias("t"), c("lso_t").alias("lo"),
                                              "hi", "epoch")  # fmt: skip
        self.entries = entries
        acks = stream.where(c("kind") == "ack")
        self.acks = acks.select(*KEY, "event_id", "epoch", "acks", c("lo").alias("base"), (c("hi") - 1).alias("last"),
                                c("value").alias("high_watermark"))  # fmt: skip
        ack_queries, ack_fast = _on_top(acks.select(*KEY, "event_id", c("position").alias("t"),
                                                    F.greatest("lo", "lso_t").alias("lo"), "hi", "epoch", "acks",
                                                    "top_s", "top_x"))  # fmt: skip
        last = Window.partitionBy(*KEY).orderBy(F.col("position").desc())
        ends = stream.withColumn("_n", F.row_number().over(last)).where(c("_n") == 1)
        self.final_log_start = ends.select(*KEY, c("lso_t").alias("final_lso"))
        final_queries = ends.select(*KEY, F.lit("").alias("event_id"), (c("position") + 1).alias("t"),
                                    F.col("lso_t").alias("lo"), F.col("leo_t").alias("hi"))  # fmt: skip
        # Every query set's runs (but the elections') in one `runs_of` pass (its windows and joins run once, not four
        # times), told apart by `_q`. Checkpointed: every frame below reads it (and the stream). The HW advances and
        # acknowledgements that lie within their log's top entry (nearly all) are not queries: their one run is
        # known from the stream (`_on_top`).
        sets = {
            "hw": (hw_queries, _AFTER),
            "truncation": (truncation_queries, _BEFORE),
            "ack": (ack_queries, _AFTER),
            "final": (final_queries, _AFTER),
        }
        # A query is (KEY, `_qn`): its position and its set in one number. A replica's queries are its own broker's
        # events (a final one follows its last), and positions are one emitter's, so no two queries of a set share
        # both. Partitioned by a number, not a string of the set, event id and KEY: at 10M events (3.6M queries)
        # the pass took 17.2-17.8 s against 21.3-22.0 s.
        queries = functools.reduce(
            functools.partial(DataFrame.unionByName, allowMissingColumns=True),
            [frame.select("*", F.lit(q).alias("_q"), (c("t") * len(sets) + code).alias("_qn"),
                          F.lit(phase).alias("phase")) for code, (q, (frame, phase)) in enumerate(sets.items())],
        )  # fmt: skip
        runs = runs_of(queries, entries, [*KEY, "_qn"]).localCheckpoint()

        known = {"hw": hw_fast, "ack": ack_fast}

        def runs_for(q: str) -> DataFrame:
            """The runs of one query set, with that set's own columns."""
            frame = sets[q][0]
            found = runs.where(c("_q") == q).select(*frame.columns, "x", "run_start", "run_end")
            return found.unionByName(known[q]) if q in known else found

        hw_runs = runs_for("hw")
        self.commits = (
            hw_runs.where(c("leader_t"))
            .select(*TP, "run_start", "run_end", "x", c("epoch").alias("commit_epoch"), "event_id")
            .cache()
        )
        self.follower_runs = hw_runs.where(~c("leader_t")).select(*KEY, "event_id", "epoch", c("hi").alias("hw"),
                                                                  "run_start", "run_end", "x")  # fmt: skip
        self.truncation_runs = runs_for("truncation")
        # Issue 13, deleted topics: the acknowledgements a TopicDeleted of their topic follows (wall_ms at or after).
        # The envelope's topic column names the acknowledgement's topic: no payload is parsed, and the deletions
        # (few) go to every task.
        acked = lake.where(c("type") == events.ProduceCompleted.TYPE).select("event_id", "topic", "wall_ms")
        deleted = lake.where(c("type") == events.TopicDeleted.TYPE).select("topic", c("wall_ms").alias("_deleted_ms"))
        self.deleted_acks = (
            acked.join(F.broadcast(deleted), ["topic"]).where(c("_deleted_ms") >= c("wall_ms")).select("event_id")
            .distinct()
        )  # fmt: skip
        # Read by both loss checks (acks=all and acks=1): checkpointed, so the anti join runs once, not twice.
        self.ack_runs = runs_for("ack").join(self.deleted_acks, ["event_id"], "left_anti").localCheckpoint()
        self.final_runs = runs_for("final").select(*KEY, "run_start", "run_end", "x")
        self.bucket_widths = bucket_widths(_commits(self)).localCheckpoint()
        widths = self.bucket_widths.withColumnRenamed("topic", "ct").withColumnRenamed("partition", "cp")
        self.commit_buckets = _buckets(_commits(self).join(F.broadcast(widths), ["ct", "cp"]), "c_start", "c_end",
                                       "_cb").drop("_w").localCheckpoint()  # fmt: skip
        self.commit_islands = _islands(_commits(self)).localCheckpoint()
        self.leaders = (
            became.groupBy(*TP)
            .agg(F.max(F.struct("epoch", "replica")).alias("_m"))
            .select(*TP, c("_m.epoch").alias("leader_epoch"), c("_m.replica").alias("final_leader"))
        ).localCheckpoint(eager=False)  # read by both loss checks
        self.exemptions = _exemptions(lake, stream, min_insync_replicas).localCheckpoint()
        sent = of_type(lake, events.SendCompleted)
        # `sent` is read by every check's findings (`_finish`), `cleaned` by three: each found once (lazily, on the
        # first check that reads it), not re-parsed from the lake by every reader.
        self.sent = (
            sent.where((c("outcome") == "ok") & (c("offset") >= 0)).select(*TP, "offset", c("value"))
            .localCheckpoint(eager=False)
        )  # fmt: skip
        # Issue 13, compaction: each partition's cleaned point (the highest cleaned_up_to of any replica).
        compacted = of_type(lake, events.LogCompacted)
        self.cleaned = compacted.groupBy(*TP).agg(F.max("cleaned_up_to").alias("cleaned")).localCheckpoint(eager=False)


def _on_top(queries: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Range queries (with their replica's `top_s` and `top_x` from `replica_stream`) split in two: those whose
    range [lo, hi) the log's top entry holds whole, answered here as their one run (x, run_start, run_end) as
    `runs_of` would find it, and the others, without those columns, for `runs_of`."""
    c = F.col
    on_top = F.coalesce(c("top_s") <= c("lo"), F.lit(False))
    asked = [name for name in queries.columns if name not in ("top_s", "top_x")]
    found = queries.where(on_top & (c("lo") < c("hi"))).select(
        *asked, c("top_x").alias("x"), c("lo").alias("run_start"), c("hi").alias("run_end")
    )
    return queries.where(~on_top).select(*asked), found


def _exemptions(lake: DataFrame, stream: DataFrame, min_insync_replicas: int) -> DataFrame:
    c = F.col
    elected = of_type(lake, events.LeaderElected).where(c("election").isin("unclean", "last_known_leader"))
    elections = elected.select(
        *TP, c("leader_epoch").cast("bigint").alias("from_epoch"),
        F.when(c("election") == "unclean", "unclean_election").otherwise("last_known_leader_election").alias("cause"),
        F.array("event_id").alias("exempting"),
    )  # fmt: skip
    opened_shorter = (c("kind") == "opened") & c("reason").isin(*LOSSY_OPEN_REASONS) & (c("leo") < c("leo_before"))
    lossy = stream.where(opened_shorter)
    firsts = lossy.groupBy(*KEY).agg(F.min(F.struct(c("known_t").alias("e"), c("event_id").alias("i"))).alias("f"))
    ranked = firsts.withColumn("rank", F.row_number().over(Window.partitionBy(*TP).orderBy("f.e", "f.i")))
    configs = lake.where(c("type").isin("TopicCreated", "TopicConfigsAltered")).select(
        "topic", "service", "emitter_id", "position",
        F.explode(F.coalesce(c("TopicCreated.configs"), c("TopicConfigsAltered.configs"))).alias("kv"),
    ).where((c("kv")[0] == "min.insync.replicas") & c("kv")[1].rlike("^[0-9]+$"))  # fmt: skip
    min_isr = configs.groupBy("topic").agg(
        F.max_by(c("kv")[1].cast("int"), F.struct("service", "emitter_id", "position")).alias("min_isr")
    )
    needed = ranked.join(min_isr, "topic", "left").withColumn(
        "needed", F.coalesce("min_isr", F.lit(min_insync_replicas))
    )
    crashes = (
        needed.where(c("rank") <= c("needed"))
        .groupBy(*TP, "needed")
        .agg(
            F.count("*").alias("n"),
            F.max_by("f.e", "rank").alias("from_epoch"),
            F.collect_list("f.i").alias("exempting"),
        )
    )
    lossy_rows = crashes.where(c("n") >= c("needed")).select(
        *TP, c("from_epoch").cast("bigint"), F.lit("lossy_crashes").alias("cause"), "exempting"
    )
    return elections.unionByName(lossy_rows)


def _with_cause(candidates: DataFrame, exemptions: DataFrame, keys: Sequence[str], applies: Column) -> DataFrame:
    """Each candidate with `cause` and `exempting` of the earliest exemption of its partition that `applies`
    (a condition over the candidate's `at` and the exemption's `from_epoch` and `cause`), by (epoch, cause)."""
    x = exemptions.withColumnRenamed("topic", "_et").withColumnRenamed("partition", "_ep")
    joined = candidates.join(
        x, (F.col("topic") == F.col("_et")) & (F.col("partition") == F.col("_ep")) & applies, "left"
    )
    window = Window.partitionBy(*keys).orderBy(F.col("from_epoch").asc_nulls_last(), F.col("cause").asc_nulls_last())
    picked = joined.select("*", F.row_number().over(window).alias("_n")).where(F.col("_n") == 1)
    kept = [name for name in candidates.columns if name not in ("cause", "exempting")]
    return picked.select(
        *kept,
        F.coalesce("cause", F.lit("")).alias("cause"),
        F.coalesce("exempting", F.array().cast("array<string>")).alias("exempting"),
    )


def _at_or_before() -> Column:
    return F.col("from_epoch") <= F.col("at")


def _overlaps(a0: Column, a1: Column, b0: Column, b1: Column) -> Column:
    return F.greatest(a0, b0) < F.least(a1, b1)


def _finish(invariant: str, frame: DataFrame, folded: Folded, **columns: Column) -> DataFrame:
    """The findings rows, with the SendCompleted values at their offsets as `records`."""
    base = frame.select(
        *finding_columns(invariant, topic=F.col("topic"), partition=F.col("partition"), **columns)
    ).drop("records")
    sent = folded.sent.withColumnRenamed("topic", "_st").withColumnRenamed("partition", "_sp")
    on = (
        (F.col("topic") == F.col("_st"))
        & (F.col("partition") == F.col("_sp"))
        & F.col("offset").between(F.col("first_offset"), F.col("last_offset"))
    )
    grouped = base.join(sent, on, "left").groupBy(*base.columns).agg(F.collect_list("value").alias("records"))
    order = ["invariant", "topic", "partition", "replica", "first_offset", "last_offset", "records", "events",
             "cause", "detail"]  # fmt: skip
    return grouped.select(*order[:6], F.array_sort(F.array_distinct("records")).alias("records"), *order[7:])


def committed_prefixes_agree(lake: DataFrame, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> DataFrame:
    """B5 LogMatching and C7 CommittedOffsetStable: see `hightide.audit.checks.commits.committed_prefixes_agree`."""
    folded = _folded(lake, min_insync_replicas)
    c = F.col
    pairs = _overlapping_hulls(folded.commits.groupBy(*TP, "x").agg(F.min("run_start").alias("h0"),
                                                                     F.max("run_end").alias("h1")))  # fmt: skip
    commits = folded.commits.select(c("topic").alias("ct"), c("partition").alias("cp"), "run_start", "run_end",
                                    c("x").alias("cx"), "commit_epoch", "event_id")  # fmt: skip
    involved = pairs.join(
        commits,
        (c("topic") == c("ct")) & (c("partition") == c("cp")) & ((c("cx") == c("x")) | (c("cx") == c("y")))
        & _overlaps(c("run_start"), c("run_end"), c("lo"), c("hi")),
    ).groupBy(*TP, "x", "y", "lo", "hi").agg(
        F.max("commit_epoch").alias("at"), F.collect_list("event_id").alias("ids")
    )  # fmt: skip
    conflicts = _with_cause(involved, folded.exemptions, [*TP, "x", "y"], _at_or_before())
    first = _finish(
        "committed_prefixes_agree", conflicts, folded,
        first_offset=c("lo"), last_offset=c("hi") - 1, events=F.concat("ids", "exempting"), cause=c("cause"),
        detail=F.format_string("offsets %d..%d committed in leader epochs %d and %d", c("lo"), c("hi") - 1, c("x"),
                               c("y")),
    )  # fmt: skip
    return first.unionByName(_follower_mismatches(folded))


def _overlapping_hulls(hulls: DataFrame) -> DataFrame:
    """Every pair of a partition's epoch hulls (TP, x, h0, h1) that overlap, as (TP, x, y, lo, hi) with x < y and
    [lo, hi) their overlap, in work linear in the hulls (a late history has thousands of epochs per partition: every
    pair of them would be millions of rows).

    Of two overlapping hulls, the one later in (h0, x) order starts inside the other, so each pair is found once:
    the earlier hull is spread over the offset buckets its range touches (`_buckets`, widths as `bucket_widths`),
    the later one sits in the bucket of its start, and an equi-join on (partition, bucket) meets them."""
    c = F.col
    mean = F.avg(c("h1") - c("h0"))
    width = F.pow(F.lit(2), F.round(F.log2(F.greatest(mean, F.lit(1.0))))).cast("bigint")
    widths = hulls.groupBy(*TP).agg(width.alias("_w"))
    sized = hulls.join(F.broadcast(widths), [*TP])
    spread = _buckets(sized, "h0", "h1")
    starts = sized.select(c("topic").alias("t2"), c("partition").alias("p2"), c("x").alias("x2"), c("h0").alias("g0"),
                          c("h1").alias("g1"), F.floor(c("h0") / c("_w")).alias("_b2"))  # fmt: skip
    later = (c("g0") > c("h0")) | ((c("g0") == c("h0")) & (c("x2") > c("x")))
    met = spread.join(
        starts,
        (c("topic") == c("t2")) & (c("partition") == c("p2")) & (c("_b") == c("_b2")) & later & (c("g0") < c("h1")),
    )
    return met.select(*TP, F.least("x", "x2").alias("x"), F.greatest("x", "x2").alias("y"), c("g0").alias("lo"),
                      F.least("h1", "g1").alias("hi"))  # fmt: skip


def _commits(folded: Folded) -> DataFrame:
    c = F.col
    return folded.commits.select(
        c("topic").alias("ct"), c("partition").alias("cp"), c("run_start").alias("c_start"),
        c("run_end").alias("c_end"), c("x").alias("cx"), "commit_epoch", c("event_id").alias("cid"),
    )  # fmt: skip


def _hits(runs: DataFrame, folded: Folded, condition: Column) -> DataFrame:
    """`runs` joined with the commits of their partition that meet `condition` and overlap them (olo, ohi).

    An equi-join on (partition, offset bucket): both sides are spread over the buckets their ranges touch (see
    `bucket_widths`), and a pair is kept only in the bucket where its overlap starts, so it is kept once."""
    c = F.col
    lo, hi = F.greatest("run_start", "c_start"), F.least("run_end", "c_end")
    spread = _buckets(runs.join(F.broadcast(folded.bucket_widths), [*TP]), "run_start", "run_end")
    joined = spread.join(
        folded.commit_buckets,
        (c("topic") == c("ct")) & (c("partition") == c("cp")) & (c("_b") == c("_cb")) & condition
        & (c("_b") == F.floor(lo / c("_w"))),
    )  # fmt: skip
    return joined.where(lo < hi).drop("_b", "_cb", "_w").select("*", lo.alias("olo"), hi.alias("ohi"))


def bucket_widths(commits: DataFrame) -> DataFrame:
    """Per partition (topic, partition, _w): the width of its offset buckets, the power of two nearest the mean length
    of its commits, so a bucket holds a few commits and a typical range touches one or two buckets."""
    mean = F.avg(F.col("c_end") - F.col("c_start"))
    width = F.pow(F.lit(2), F.round(F.log2(F.greatest(mean, F.lit(1.0))))).cast("bigint")
    return commits.groupBy(F.col("ct").alias("topic"), F.col("cp").alias("partition")).agg(width.alias("_w"))


def _buckets(frame: DataFrame, start: str, end: str, name: str = "_b") -> DataFrame:
    """Each row (with its partition's bucket width `_w`) once per offset bucket its range [start, end) touches (an
    empty range touches none)."""
    first, last = F.floor(F.col(start) / F.col("_w")), F.floor((F.col(end) - 1) / F.col("_w"))
    return frame.where(F.col(start) < F.col(end)).withColumn(name, F.explode(F.sequence(first, last)))


def _follower_mismatches(folded: Folded) -> DataFrame:
    c = F.col
    hits = _hits(folded.follower_runs, folded, (c("cx") != c("x")) & (c("commit_epoch") <= c("epoch")))
    grouped = (
        hits.groupBy(*KEY, "event_id", "epoch", "hw", "x", "cx")
        .agg(F.min("olo").alias("lo"), F.max("ohi").alias("hi"), F.collect_list("cid").alias("ids"))
        .withColumn("at", c("epoch"))
    )
    caused = _with_cause(grouped, folded.exemptions, ["event_id", "x", "cx"], _at_or_before())
    return _finish(
        "committed_prefixes_agree", caused, folded,
        replica=c("replica"), first_offset=c("lo"), last_offset=c("hi") - 1,
        events=F.concat(F.array("event_id"), "ids", "exempting"), cause=c("cause"),
        detail=F.format_string(
            "broker %d holds offsets %d..%d in leader epoch %d below its high watermark %d, committed in leader epoch "
            "%d", c("replica"), c("lo"), c("hi") - 1, c("x"), c("hw"), c("cx"),
        ),
    )  # fmt: skip


def truncation_only_uncommitted(lake: DataFrame, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> DataFrame:
    """B6 TruncateOnlyUncommitted: see `hightide.audit.checks.commits.truncation_only_uncommitted`."""
    folded = _folded(lake, min_insync_replicas)
    c = F.col
    hits = _hits(folded.truncation_runs, folded, (c("cx") == c("x")) & (c("commit_epoch") <= c("epoch")))
    grouped = (
        hits.groupBy(*KEY, "event_id", "epoch", "truncated_to", "reason", "x")
        .agg(F.min("olo").alias("lo"), F.max("ohi").alias("hi"), F.collect_list("cid").alias("ids"))
        .withColumn("at", c("epoch"))
    )
    caused = _with_cause(grouped, folded.exemptions, ["event_id", "x"], _at_or_before())
    return _finish(
        "truncation_only_uncommitted", caused, folded,
        replica=c("replica"), first_offset=c("lo"), last_offset=c("hi") - 1,
        events=F.concat(F.array("event_id"), "ids", "exempting"), cause=c("cause"),
        detail=F.format_string(
            "broker %d truncated to %d (%s), removing offsets %d..%d of leader epoch %d, committed",
            c("replica"), c("truncated_to"), c("reason"), c("lo"), c("hi") - 1, c("x"),
        ),
    )  # fmt: skip


def _missing(wanted: DataFrame, held: DataFrame, keys: Sequence[str]) -> DataFrame:
    """`wanted` ranges [w0, w1) of epoch x without the offsets of `held`'s run of the same epoch (h0, h1; one per
    epoch and `keys`): rows (m0, m1), up to two per wanted range."""
    c = F.col
    joined = wanted.join(held, [*keys, "x"], "left")
    left = joined.select("*", c("w0").alias("m0"), F.when(c("h0").isNull(), c("w1")).otherwise(
        F.least("w1", "h0")).alias("m1"))  # fmt: skip
    right = joined.where(c("h0").isNotNull()).select("*", F.greatest("w0", "h1").alias("m0"), c("w1").alias("m1"))
    return left.unionByName(right).where(c("m0") < c("m1"))


def leader_completeness(lake: DataFrame, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> DataFrame:
    """C3 LeaderCompletenessProperty: see `hightide.audit.checks.commits.leader_completeness`.

    Most elections are vouched for as a whole first (`_complete_elections`, work linear in the history); only the
    others read their whole log and have what they miss found against the commits' islands (each the union of one
    leader's contiguous commits of one epoch's records), which costs their log's depth times the partition's epochs
    each; only the elections that miss something are joined with the commits themselves, to name the ones
    involved."""
    folded = _folded(lake, min_insync_replicas)
    c = F.col
    pending = folded.election_queries.join(_complete_elections(folded), ["event_id"], "left_anti").localCheckpoint()
    elections = pending.select(*KEY, "event_id", "epoch", c("lo").alias("log_start")).join(folded.cleaned, [*TP],
                                                                                          "left")  # fmt: skip
    wanted = elections.join(
        folded.commit_islands, (c("topic") == c("ct")) & (c("partition") == c("cp")) & (c("commit_epoch") < c("epoch"))
    ).select(*KEY, "event_id", "epoch", F.greatest("c_start", "log_start", F.coalesce("cleaned", F.lit(0))).alias("w0"),
             c("c_end").alias("w1"),
             c("cx").alias("x"))  # fmt: skip
    runs = runs_of(pending.drop("epoch"), folded.entries, ["event_id"])
    held = runs.select("event_id", "x", c("run_start").alias("h0"), c("run_end").alias("h1"))
    missing = _missing(wanted, held, ["event_id"]).select(*KEY, "event_id", "epoch", "x", "m0", "m1")
    named = missing.join(
        _commits(folded),
        (c("topic") == c("ct")) & (c("partition") == c("cp")) & (c("cx") == c("x")) & (c("commit_epoch") < c("epoch"))
        & _overlaps(c("m0"), c("m1"), c("c_start"), c("c_end")),
        "left",
    )  # fmt: skip
    grouped = (
        named.groupBy(*KEY, "event_id", "epoch")
        .agg(F.min("m0").alias("lo"), F.max("m1").alias("hi"), F.collect_list("cid").alias("ids"))
        .withColumn("at", c("epoch"))
    )
    caused = _with_cause(grouped, folded.exemptions, ["event_id"], _at_or_before())
    return _finish(
        "leader_completeness", caused, folded,
        replica=c("replica"), first_offset=c("lo"), last_offset=c("hi") - 1,
        events=F.concat(F.array("event_id"), "ids", "exempting"), cause=c("cause"),
        detail=F.format_string("broker %d became leader in epoch %d without committed offsets %d..%d",
                               c("replica"), c("epoch"), c("lo"), c("hi") - 1),
    )  # fmt: skip


def _complete_elections(folded: Folded) -> DataFrame:
    """The `event_id`s of elections whose log provably holds every record committed before them (no finding of
    `leader_completeness`), found without reading any log whole. The rest go through the check's own comparison.

    A record epoch x is committed somewhere (`_committed_epochs`: in X, with the hull of its commits above the
    partition's cleaned point). Below the log's top entry, each entry's run [its start, the next entry's start)
    is fixed while both entries live, so each run is judged once, when the entry above it is added ("sound": it
    holds its epoch's whole hull, epochs and starts rising up the log), and undone when that entry is cut; a
    running sum over the replica's stream then gives, at the election, the number of unsound runs and of runs
    whose epoch is in X. An election is vouched for when its log is not empty and has no unsound run, reaches
    its top entry's start, holds below its top entry exactly as many epochs of X as X has below the top's epoch
    (so every one of them, each sound), no epoch of X above the top's was committed before the election's, and
    the top run holds every island of its epoch committed before the election (checked directly: one epoch)."""
    c = F.col
    entries, committed = folded.entries, _committed_epochs(folded)
    adds = entries.where(c("phase") == _ADD).select(
        *KEY, "pos", "phase", c("s").alias("s_up"), c("x").alias("x_up"), "killed", (c("depth") - 1).alias("_d")
    )
    below = _entries_at(adds, entries).join(committed, [*TP, "x"], "left")  # (s, x): the run's entry
    unsound = ~(c("hull_lo").isNull() | ((c("s") <= c("hull_lo")) & (c("hull_hi") <= c("s_up"))))
    unsound = unsound | (c("x_up") <= c("x")) | (c("s_up") <= c("s"))
    judged = below.select(*KEY, "pos", "killed", F.coalesce(unsound, F.lit(True)).cast("int").alias("_bad"),
                          c("hull_lo").isNotNull().cast("int").alias("_in"))  # fmt: skip
    undone = judged.where(c("killed").isNotNull()).select(*KEY, c("killed").alias("pos"), F.lit(_KILL).alias("phase"),
                                                          (-c("_bad")).alias("_bad"),
                                                          (-c("_in")).alias("_in"))  # fmt: skip
    changes = (
        judged.select(*KEY, "pos", F.lit(_ADD).alias("phase"), "_bad", "_in")
        .unionByName(undone)
        .withColumn("delta", F.lit(0))
        .unionByName(entries.select(*KEY, "pos", "phase", "delta", F.lit(0).alias("_bad"), F.lit(0).alias("_in")))
    )
    asked = folded.election_queries.select(*KEY, "event_id", c("t").alias("pos"), F.lit(_AFTER).alias("phase"),
                                           "lo", "hi", "epoch")  # fmt: skip
    upto = Window.partitionBy(*KEY).orderBy("pos", "phase").rowsBetween(Window.unboundedPreceding, 0)
    counted = (
        asked.unionByName(changes, allowMissingColumns=True)
        .select("*", *[F.sum(name).over(upto).alias(f"{name}_t") for name in ("delta", "_bad", "_in")])
        .where(c("phase") == _AFTER)
        .select(*asked.columns, c("delta_t").alias("_d"), "_bad_t", "_in_t")
    )
    top = _entries_at(counted, entries)  # the top entry (s, x); an empty log's election is dropped here
    placed = _placed_among(top, committed)
    sound = (c("_bad_t") == 0) & (c("hi") >= c("s")) & (c("_in_t") == c("_below")) & (c("_above_first") >= c("epoch"))
    return placed.where(sound).join(_top_misses(placed, folded), ["event_id"], "left_anti").select("event_id")


def _committed_epochs(folded: Folded) -> DataFrame:
    """Per partition and record epoch x with a commit above the partition's cleaned point: the hull of those commits
    above it (hull_lo, hull_hi) and the lowest epoch that committed one (`first_commit`)."""
    c = F.col
    cleaned = F.coalesce("cleaned", F.lit(0))
    above = folded.commits.join(folded.cleaned, [*TP], "left").where(c("run_end") > cleaned)
    return above.groupBy(*TP, "x").agg(
        F.min(F.greatest("run_start", cleaned)).alias("hull_lo"), F.max("run_end").alias("hull_hi"),
        F.min("commit_epoch").alias("first_commit"),
    )  # fmt: skip


def _placed_among(top: DataFrame, committed: DataFrame) -> DataFrame:
    """Each election (with its top entry's epoch x) with `_below`, how many committed epochs of its partition are
    below x, and `_above_first`, the lowest `first_commit` of those above x (BIG: none): one sort per partition."""
    c = F.col
    rows = top.withColumn("_kind", F.lit(1)).unionByName(
        committed.select(*TP, "x", "first_commit", F.lit(2).alias("_kind")), allowMissingColumns=True
    )
    up = Window.partitionBy(*TP).orderBy("x", "_kind").rowsBetween(Window.unboundedPreceding, 0)
    down = Window.partitionBy(*TP).orderBy(c("x").desc(), "_kind").rowsBetween(Window.unboundedPreceding, 0)
    placed = rows.select(
        "*", F.count("first_commit").over(up).alias("_below"),
        F.coalesce(F.min("first_commit").over(down), F.lit(BIG)).alias("_above_first"),
    )  # fmt: skip
    return placed.where(c("_kind") == 1).drop("_kind", "first_commit")


def _top_misses(placed: DataFrame, folded: Folded) -> DataFrame:
    """The elections (`event_id`) whose top run [max(s, lo), hi) lacks part of an island of its epoch x committed
    before the election, above its log start and the partition's cleaned point (as `leader_completeness` reads
    it)."""
    c = F.col
    elections = placed.join(folded.cleaned, [*TP], "left").select(
        "event_id", *TP, "x", "s", "lo", "hi", "epoch", F.greatest("lo", F.coalesce("cleaned", F.lit(0))).alias("_w")
    )
    joined = elections.join(
        folded.commit_islands,
        (c("topic") == c("ct")) & (c("partition") == c("cp")) & (c("x") == c("cx")) & (c("commit_epoch") < c("epoch")),
    )
    wanted_from = F.greatest("c_start", "_w")
    lacking = (wanted_from < c("c_end")) & ((wanted_from < F.greatest("s", "lo")) | (c("c_end") > c("hi")))
    return joined.where(lacking).select("event_id")


def _islands(commits: DataFrame) -> DataFrame:
    """The commits (as `_commits` names them) merged into maximal contiguous ranges per partition, records' epoch
    and committing epoch: (ct, cp, cx, commit_epoch, c_start, c_end)."""
    c = F.col
    ordered = Window.partitionBy("ct", "cp", "cx", "commit_epoch").orderBy("c_start", "c_end")
    reach = F.max("c_end").over(ordered.rowsBetween(Window.unboundedPreceding, -1))
    starts = commits.withColumn("_new", F.when(reach.isNull() | (c("c_start") > reach), 1).otherwise(0))
    numbered = starts.withColumn("_i", F.sum("_new").over(ordered.rowsBetween(Window.unboundedPreceding, 0)))
    return (
        numbered.groupBy("ct", "cp", "cx", "commit_epoch", "_i")
        .agg(F.min("c_start").alias("c_start"), F.max("c_end").alias("c_end"))
        .drop("_i")
    )


def _lost(folded: Folded, acks: int, invariant: str) -> DataFrame:
    """Acknowledged records (at `acks`) missing from the final leader's log, one finding per acknowledgement."""
    c = F.col
    runs = folded.ack_runs.where(c("acks") == acks)  # without the acknowledgements of deleted topics
    runs = runs.join(folded.leaders, [*TP], "left").join(folded.cleaned, [*TP], "left")
    final_lso = folded.final_log_start.select(*TP, c("replica").alias("final_leader"), "final_lso")
    runs = runs.join(final_lso, [*TP, "final_leader"], "left")
    wanted = runs.select(*KEY, "event_id", "epoch", "final_leader", "leader_epoch",
                         F.greatest("run_start", F.coalesce("final_lso", F.lit(0)),
                                    F.coalesce("cleaned", F.lit(0))).alias("w0"),
                         c("run_end").alias("w1"), "x")  # fmt: skip
    held = folded.final_runs.select(*TP, c("replica").alias("final_leader"), "x", c("run_start").alias("h0"),
                                    c("run_end").alias("h1"))  # fmt: skip
    missing = _missing(wanted, held, [*TP, "final_leader"])
    committed = missing.join(
        _commits(folded),
        (c("topic") == c("ct")) & (c("partition") == c("cp")) & (c("cx") == c("x"))
        & (F.greatest("m0", "c_start") < F.least("m1", "c_end")), "left",
    )  # fmt: skip
    grouped = (
        committed.groupBy(*KEY, "event_id", "epoch", "final_leader", "leader_epoch")
        .agg(F.min("m0").alias("lo"), F.max("m1").alias("hi"), F.max(c("cid").isNotNull()).alias("committed"))
        .withColumn("at", c("epoch"))
    )
    follows = F.when(c("cause") == "lossy_crashes", c("from_epoch") >= c("at")).otherwise(c("from_epoch") > c("at"))
    caused = _with_cause(grouped, folded.exemptions, ["event_id"], follows)
    acks1 = F.lit(acks == 1) & ~c("committed") & (F.coalesce("leader_epoch", F.lit(-1)) > c("epoch"))
    cause = F.when(acks1, F.lit("acks1_leader_change")).otherwise(c("cause"))
    exempting = F.when(acks1, F.array().cast("array<string>")).otherwise(c("exempting"))
    return _finish(
        invariant, caused, folded,
        replica=c("replica"), first_offset=c("lo"), last_offset=c("hi") - 1,
        events=F.concat(F.array("event_id"), exempting), cause=cause,
        detail=F.format_string(
            "acknowledged offsets %d..%d (acks=%d, leader %d in epoch %d) are not in final leader %d's log",
            c("lo"), c("hi") - 1, F.lit(acks), c("replica"), c("epoch"), F.coalesce("final_leader", F.lit(-1)),
        ),
    )  # fmt: skip


def acks_all_acknowledged_committed(lake: DataFrame, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> DataFrame:
    """D1 and D2: see `hightide.audit.checks.commits.acks_all_acknowledged_committed`."""
    folded = _folded(lake, min_insync_replicas)
    c = F.col
    early = folded.acks.where((c("acks") == -1) & (c("high_watermark") <= c("last")))
    early_rows = _finish(
        "acks_all_acknowledged_committed", early, folded,
        replica=c("replica"), first_offset=c("base"), last_offset=c("last"), events=F.array("event_id"),
        detail=F.format_string("acks=all acknowledged offsets %d..%d with the high watermark at %d", c("base"),
                               c("last"), c("high_watermark")),
    )  # fmt: skip
    return early_rows.unionByName(_lost(folded, -1, "acks_all_acknowledged_committed"))


def acknowledged_records_lost(lake: DataFrame, min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> DataFrame:
    """X1 LossAttribution for acks=1: see `hightide.audit.checks.commits.acknowledged_records_lost`."""
    return _lost(_folded(lake, min_insync_replicas), 1, "acknowledged_records_lost")


SparkCheck = Callable[[DataFrame], DataFrame]


def checks(min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS) -> dict[str, SparkCheck]:
    """The checks, for histories whose topics do not set min.insync.replicas and ran with this broker default."""

    def bound(check: Callable[[DataFrame, int], DataFrame]) -> SparkCheck:
        @functools.wraps(check)
        def run(lake: DataFrame) -> DataFrame:
            return check(lake, min_insync_replicas)

        return run

    return {
        "committed_prefixes_agree": bound(committed_prefixes_agree),
        "truncation_only_uncommitted": bound(truncation_only_uncommitted),
        "leader_completeness": bound(leader_completeness),
        "acks_all_acknowledged_committed": bound(acks_all_acknowledged_committed),
        "acknowledged_records_lost": bound(acknowledged_records_lost),
    }


CHECKS: Final = checks()
