"""The clients' view as Spark jobs: `hightide.audit.checks.clients`' rules (E1, E3, D4, D5, D8) over the lake.

Room: services/history. Same names, same findings row for row as the plain-Python specification, whose docstrings
state each rule and its source (and why wall_ms order between a client and a broker is sound, and where not). Here:
DataFrame operations and window functions only. A topic's life is how many of its TopicDeleted events came before
by wall_ms (an event at the same wall_ms as a deletion belongs to the life before it), computed once per lake frame.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from hightide.audit.checks.clients import LOSSY_ELECTIONS, PRODUCER_STATE_RETAINED_AWAY
from hightide.history.events import of_type
from hightide.history.findings import finding_columns
from hightide.protocol import events

LIFE: Final = ("topic", "partition", "life")
ROLE_EVENTS: Final = {
    events.BecameLeader.TYPE: 1,
    events.BecameFollower.TYPE: 0,
    events.LogOpened.TYPE: 0,
    events.LogDeleted.TYPE: 0,
}


def with_lives(events_frame: DataFrame) -> DataFrame:
    """The events (of `read_lake`) with `life`: how many TopicDeleted events of the event's topic have a wall_ms
    before its own (only events with a topic). Computed once per events frame; every check reads its types from it."""
    held = _LIVED.get(events_frame)
    if held is None:
        held = _LIVED[events_frame] = _with_lives(events_frame)
    return held


_LIVED: weakref.WeakKeyDictionary[DataFrame, DataFrame] = weakref.WeakKeyDictionary()


def forget(events_frame: DataFrame) -> None:
    """Drop the lives computed for `events_frame`, and what was kept of them (see `commits.forget`)."""
    lived = _LIVED.pop(events_frame, None)
    if lived is not None:
        _KEPT.pop(lived, None)


_KEPT: weakref.WeakKeyDictionary[DataFrame, dict[str, DataFrame]] = weakref.WeakKeyDictionary()


def _kept(build: Callable[[DataFrame], DataFrame]) -> Callable[[DataFrame], DataFrame]:
    """`build(lived)` computed once per lived frame and checkpointed: for the small frames that more than one check
    reads (`observations`, `shared_values`, `lossy_elections`), whose scans, joins and aggregates would otherwise
    run again for every check that reads them (a few Spark stages each, whose cost on a small history is all
    overhead)."""

    @functools.wraps(build)
    def once(lived: DataFrame) -> DataFrame:
        held = _KEPT.setdefault(lived, {})
        if build.__name__ not in held:
            held[build.__name__] = build(lived).localCheckpoint()
        return held[build.__name__]

    return once


def _with_lives(events_frame: DataFrame) -> DataFrame:
    # Deletions are few: each topic's deletion times go to every task (a broadcast), and an event counts those
    # before it, so no event is shuffled or sorted. A deletion comes after the other events of its wall_ms, so a
    # deletion counts the deletions at or before its wall_ms, itself excepted; any other event those before it.
    deleted = F.col("type") == events.TopicDeleted.TYPE
    times = events_frame.where(deleted).groupBy("topic").agg(F.collect_list("wall_ms").alias("_deleted_ms"))
    marked = events_frame.where(F.col("topic").isNotNull()).join(F.broadcast(times), "topic", "left")
    earlier = F.filter(
        F.coalesce("_deleted_ms", F.array().cast("array<bigint>")),
        lambda at: (at < F.col("wall_ms")) | (deleted & (at == F.col("wall_ms"))),
    )
    life = (F.size(earlier) - deleted.cast("int")).cast("bigint")
    return marked.select(*events_frame.columns, life.alias("life"))


def typed(lived: DataFrame, event_class: type[events.Event]) -> DataFrame:
    """`of_type` over the events with lives, keeping `life`."""
    return of_type(lived, event_class, keep=("life",))


def consumed_records(lived: DataFrame) -> DataFrame:
    """One row per consumed record: the RecordsConsumed event's columns and life, `index` in the event, `offset`,
    `value`."""
    consumed = typed(lived, events.RecordsConsumed)
    pairs = consumed.select("*", F.posexplode(F.arrays_zip("offsets", "values")).alias("index", "_pair"))
    return pairs.select("*", F.col("_pair.offsets").alias("offset"), F.col("_pair.values").alias("value")).drop(
        "_pair", "offsets", "values"
    )


def sent_ok(lived: DataFrame) -> DataFrame:
    return typed(lived, events.SendCompleted).where(F.col("outcome") == "ok")


@_kept
def observations(lived: DataFrame) -> DataFrame:
    """(topic, partition, life, offset, value, event_id, acknowledged) of every ok acknowledgement and consumed
    record."""
    columns = [*LIFE, "offset", "value", "event_id", "wall_ms"]
    acknowledged = sent_ok(lived).select(*columns, F.lit(True).alias("acknowledged"))
    read = consumed_records(lived).select(*columns, F.lit(False).alias("acknowledged"))
    return acknowledged.unionByName(read)


@_kept
def shared_values(lived: DataFrame) -> DataFrame:
    """(topic, partition, life, value) sent by more than one producer incarnation: see
    `hightide.audit.checks.clients.shared_values`."""
    invoked = typed(lived, events.SendInvoked)
    sender = F.concat_ws(":", "service", F.col("emitter_id").cast("string"), "incarnation")
    counted = invoked.groupBy(*LIFE, "value").agg(F.countDistinct(sender).alias("senders"))
    return counted.where(F.col("senders") > 1).select(*LIFE, "value")


@_kept
def lossy_elections(lived: DataFrame) -> DataFrame:
    """(topic, partition, life, unclean_at, last_known_leader_at): when each partition life first had such an
    election: see `hightide.audit.checks.clients.LossyElections`."""
    elected = typed(lived, events.LeaderElected).where(F.col("election").isin(*LOSSY_ELECTIONS))
    return elected.groupBy(*LIFE).agg(
        *[
            F.min(F.when(F.col("election") == election, F.col("wall_ms"))).alias(f"{election}_at")
            for election in LOSSY_ELECTIONS
        ]
    )


def election_cause(seen_ms: Column) -> Column:
    """The loss cause of a broken promise last seen at `seen_ms` (after a join with `lossy_elections`), or ""."""
    cause = F.lit("")
    for election, name in reversed(list(LOSSY_ELECTIONS.items())):
        cause = F.when(F.col(f"{election}_at") <= seen_ms, F.lit(name)).otherwise(cause)
    return cause


def attributed(detail: Column, cause: Column) -> Column:
    return F.when(cause == "", detail).otherwise(F.format_string("%s (cause: %s)", detail, cause))


def leader_high_watermarks(lived: DataFrame) -> DataFrame:
    """(topic, partition, life, wall_ms, high_watermark) of each HighWatermarkAdvanced emitted while its replica
    led (its latest BecameLeader / BecameFollower / LogOpened / LogDeleted in the incarnation was BecameLeader)."""
    kinds = [*ROLE_EVENTS, events.HighWatermarkAdvanced.TYPE]
    role = F.lit(None).cast("int")
    for name, value in ROLE_EVENTS.items():
        role = F.when(F.col("type") == name, F.lit(value)).otherwise(role)
    incarnation = (
        Window.partitionBy("service", "emitter_id", "incarnation", "topic", "partition")
        .orderBy("position")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    roles = lived.where(F.col("type").isin(kinds)).withColumn("_role", role)
    leading = roles.withColumn("_leading", F.last("_role", ignorenulls=True).over(incarnation))
    advanced = leading.where((F.col("type") == events.HighWatermarkAdvanced.TYPE) & (F.col("_leading") == 1))
    high_watermark = F.col(events.HighWatermarkAdvanced.TYPE).high_watermark
    return advanced.select(*LIFE, "wall_ms", high_watermark.alias("high_watermark"))


def consumers_below_high_watermark(events_frame: DataFrame) -> DataFrame:
    """E1 ReadCommittedOnly: see `hightide.audit.checks.clients.consumers_below_high_watermark`."""
    lived = with_lives(events_frame)
    marks = leader_high_watermarks(lived).select(*LIFE, "wall_ms", "high_watermark", F.lit(0).alias("_kind"))
    reads = typed(lived, events.RecordsConsumed).select(*LIFE, "wall_ms", "event_id", F.lit(1).alias("_kind"))
    # A running max per partition life; marks sort before reads of the same wall_ms ("no later than").
    running = Window.partitionBy(*LIFE).orderBy("wall_ms", "_kind")
    both = marks.unionByName(reads, allowMissingColumns=True)
    highest = both.withColumn("_hw", F.coalesce(F.max("high_watermark").over(running), F.lit(0).cast("bigint")))
    hw_at_read = highest.where(F.col("_kind") == 1).select("event_id", "_hw")
    records = consumed_records(lived).join(hw_at_read, "event_id")
    above = records.where(F.col("offset") >= F.col("_hw"))
    grouped = above.groupBy("event_id", "topic", "partition", "emitter_id", "_hw").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last"), F.collect_list("value").alias("values")
    )
    detail = F.format_string(
        "consumer %d read offsets %d..%d while the highest leader high watermark was %d",
        "emitter_id",
        "first",
        "last",
        "_hw",
    )
    return grouped.select(
        *finding_columns(
            "consumers_below_high_watermark",
            topic=F.col("topic"),
            partition=F.col("partition"),
            first_offset=F.col("first"),
            last_offset=F.col("last"),
            records=F.col("values"),
            events=F.array("event_id"),
            detail=detail,
        )
    )


def log_starts(lived: DataFrame) -> DataFrame:
    """(topic, partition, life, start, reset_at): each log start offset a replica announced, first announced when."""
    opened = typed(lived, events.LogOpened).select(*LIFE, "wall_ms", "log_start_offset")
    advanced = typed(lived, events.LogStartOffsetAdvanced).select(*LIFE, "wall_ms", "log_start_offset")
    over = typed(lived, events.LogTruncated).where(F.col("reason") == "start_over")
    started_over = over.select(*LIFE, "wall_ms", F.col("truncated_to").alias("log_start_offset"))
    starts = opened.unionByName(advanced).unionByName(started_over)
    return starts.groupBy(*LIFE, F.col("log_start_offset").alias("offset")).agg(F.min("wall_ms").alias("reset_at"))


def consumers_in_order(events_frame: DataFrame) -> DataFrame:
    """E3 PollContiguity: see `hightide.audit.checks.clients.consumers_in_order`."""
    lived = with_lives(events_frame)
    consumer = Window.partitionBy("service", "emitter_id", "incarnation", *LIFE).orderBy("position", "index")
    reads = consumed_records(lived).select(
        "*",
        F.lag("offset").over(consumer).alias("a"),
        F.lag("value").over(consumer).alias("value_a"),
        F.lag("event_id").over(consumer).alias("id_a"),
    )
    jumps = reads.where(F.col("a").isNotNull() & (F.col("offset") != F.col("a") + 1))
    explained_by = jumps.join(log_starts(lived), [*LIFE, "offset"], "left")
    skipped = F.col("offset") > F.col("a") + 1
    explained = skipped & F.col("reset_at").isNotNull() & (F.col("reset_at") <= F.col("wall_ms"))
    broken = explained_by.where(~explained).join(lossy_elections(lived), [*LIFE], "left")
    cause = election_cause(F.col("wall_ms"))
    first = F.when(skipped, F.col("a") + 1).otherwise(F.col("offset"))
    last = F.when(skipped, F.col("offset") - 1).otherwise(F.col("a"))
    plain = F.when(
        skipped,
        F.format_string(
            "consumer %d skipped offsets %d..%d: read %d then %d", "emitter_id", first, last, "a", "offset"
        ),
    ).otherwise(F.format_string("consumer %d read offset %d after offset %d", "emitter_id", "offset", "a"))
    return broken.select(
        *finding_columns(
            "consumers_in_order",
            topic=F.col("topic"),
            partition=F.col("partition"),
            first_offset=first,
            last_offset=last,
            records=F.array("value_a", "value"),
            events=F.array("id_a", "event_id"),
            cause=cause,
            detail=attributed(plain, cause),
        )
    )


def definite_failure_invisible(events_frame: DataFrame) -> DataFrame:
    """D8 NoAbortedRead (G1a): see `hightide.audit.checks.clients.definite_failure_invisible`."""
    lived = with_lives(events_frame)
    sent = typed(lived, events.SendCompleted).where(F.col("outcome") == "failed")
    failed = sent.select(*LIFE, "value", "error", F.col("event_id").alias("failed_id"))
    unshared = failed.join(shared_values(lived), [*LIFE, "value"], "left_anti")
    shown = unshared.join(observations(lived), [*LIFE, "value"])
    grouped = shown.groupBy("failed_id", "topic", "partition", "value", "error").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last"), F.collect_set("event_id").alias("ids")
    )
    detail = F.format_string(
        "value %s failed definitely (%s) but was read or acknowledged at offsets %d..%d",
        "value",
        "error",
        "first",
        "last",
    )
    return grouped.select(
        *finding_columns(
            "definite_failure_invisible",
            topic=F.col("topic"),
            partition=F.col("partition"),
            first_offset=F.col("first"),
            last_offset=F.col("last"),
            records=F.array("value"),
            events=F.concat(F.array("failed_id"), F.col("ids")),
            detail=detail,
        )
    )


def acks1_lost(lived: DataFrame) -> DataFrame:
    """The `event_id`s of ok SendCompleted events acknowledged under acks=1 before commit in a leader epoch a later
    one replaced: see `hightide.audit.checks.clients.acks1_lost`."""
    sent = sent_ok(lived).select(*LIFE, "offset", "wall_ms", "event_id")
    answered = typed(lived, events.ProduceCompleted).where(F.col("error") == "NONE")
    answers = answered.select(
        *LIFE,
        F.col("wall_ms").alias("answered_ms"),
        F.col("event_id").alias("answer_id"),
        "base_offset",
        "last_offset",
        "acks",
        "high_watermark",
        "leader_epoch",
    )
    covering = sent.join(answers, [*LIFE]).where(
        (F.col("answered_ms") <= F.col("wall_ms"))
        & (F.col("base_offset") <= F.col("offset"))
        & (F.col("offset") <= F.col("last_offset"))
    )
    latest = Window.partitionBy("event_id").orderBy(F.desc("answered_ms"), F.desc("answer_id"))
    answer = covering.withColumn("_rank", F.row_number().over(latest)).where(F.col("_rank") == 1)
    changes = typed(lived, events.PartitionChanged)
    last_epoch = changes.groupBy(*LIFE).agg(F.max("leader_epoch").alias("last_epoch"))
    judged = answer.join(last_epoch, [*LIFE], "left")
    lost = (
        (F.col("acks") == 1)
        & (F.col("high_watermark") <= F.col("offset"))
        & (F.coalesce(F.col("last_epoch"), F.col("leader_epoch")) > F.col("leader_epoch"))
    )
    return judged.where(lost).select("event_id", F.lit(True).alias("lost"))


def consistent_offsets(events_frame: DataFrame) -> DataFrame:
    """D4 NoInconsistentOffsets: see `hightide.audit.checks.clients.consistent_offsets`."""
    lived = with_lives(events_frame)
    seen = observations(lived).join(acks1_lost(lived), "event_id", "left")
    kept_value = F.when(F.col("lost").isNull(), F.col("value"))
    grouped = seen.groupBy(*LIFE, "offset").agg(
        F.collect_set("value").alias("values"),
        F.collect_set(kept_value).alias("kept"),
        F.collect_set("event_id").alias("ids"),
        F.max("wall_ms").alias("seen_ms"),
    )
    conflicting = grouped.where(F.size("values") >= 2).join(lossy_elections(lived), [*LIFE], "left")
    acks1 = F.size("kept") <= 1
    plain = F.format_string("offset %d was observed with %d different values", F.col("offset"), F.size("values"))
    suffix = "; the others were acknowledged under acks=1 and lost in a leader change"
    cause = F.when(acks1, F.lit("acks1_leader_change")).otherwise(election_cause(F.col("seen_ms")))
    return conflicting.select(
        *finding_columns(
            "consistent_offsets",
            topic=F.col("topic"),
            partition=F.col("partition"),
            first_offset=F.col("offset"),
            last_offset=F.col("offset"),
            records=F.col("values"),
            events=F.col("ids"),
            cause=cause,
            detail=F.when(acks1, F.concat(plain, F.lit(suffix))).otherwise(attributed(plain, cause)),
        )
    )


def no_duplicates(events_frame: DataFrame) -> DataFrame:
    """D5 NoDuplicates: see `hightide.audit.checks.clients.no_duplicates`."""
    lived = with_lives(events_frame)
    grouped = (
        observations(lived)
        .groupBy(*LIFE, "value")
        .agg(
            F.collect_set("offset").alias("offsets"),
            F.collect_set("event_id").alias("ids"),
            F.max("wall_ms").alias("seen_ms"),
        )
    )
    several = grouped.where(F.size("offsets") >= 2).join(shared_values(lived), [*LIFE, "value"], "left_anti")
    duplicated = several.join(lossy_elections(lived), [*LIFE], "left").join(
        retained_away(lived, several), [*LIFE, "value"], "left"
    )
    count: Column = F.size("offsets")
    plain = F.format_string("value %s was observed at %d different offsets", F.col("value"), count)
    by_election = election_cause(F.col("seen_ms"))
    cause = F.when(
        (by_election == "") & F.col("retained_away").isNotNull(), F.lit(PRODUCER_STATE_RETAINED_AWAY)
    ).otherwise(by_election)
    return duplicated.select(
        *finding_columns(
            "no_duplicates",
            topic=F.col("topic"),
            partition=F.col("partition"),
            first_offset=F.array_min("offsets"),
            last_offset=F.array_max("offsets"),
            records=F.array("value"),
            events=F.col("ids"),
            cause=cause,
            detail=attributed(plain, cause),
        )
    )


# -- issue 12 (gaps): a duplicate after retention removed the producer's batches (KIP-360) --------------------------


def retained_away(lived: DataFrame, several: DataFrame) -> DataFrame:
    """(topic, partition, life, value, retained_away) for the values of `several` (LIFE, value, offsets) appended
    again, at a later offset, by a leader whose log start had passed their first offset, no replica having truncated
    that offset away before: see
    `hightide.audit.checks.clients.RetainedAway`."""
    later = several.select(
        *LIFE, "value", F.array_min("offsets").alias("first"), F.explode("offsets").alias("offset")
    ).where(F.col("offset") != F.col("first"))
    appended = (
        typed(lived, events.RecordsAppended)
        .where(F.col("as_leader"))
        .select(*LIFE, "replica", F.col("wall_ms").alias("appended_ms"), "base_offset", "last_offset")
    )
    starts = typed(lived, events.LogStartOffsetAdvanced).select(
        *LIFE, "replica", F.col("wall_ms").alias("advanced_ms"), "log_start_offset"
    )
    covering = (F.col("base_offset") <= F.col("offset")) & (F.col("offset") <= F.col("last_offset"))
    passed = (F.col("log_start_offset") > F.col("first")) & (F.col("advanced_ms") <= F.col("appended_ms"))
    candidates = (
        later.join(appended, [*LIFE])
        .where(covering)
        .join(starts, [*LIFE, "replica"])
        .where(passed)
        .select(*LIFE, "value", "first", "appended_ms")
        .distinct()
    )
    cuts = typed(lived, events.LogTruncated).select(
        *LIFE, F.col("wall_ms").alias("cut_ms"), "truncated_to", "log_end_offset_before"
    )
    cut = (
        (F.col("truncated_to") <= F.col("first"))
        & (F.col("first") < F.col("log_end_offset_before"))
        & (F.col("cut_ms") <= F.col("appended_ms"))
    )
    spoiled = candidates.join(cuts, [*LIFE]).where(cut).select(*LIFE, "value", "first", "appended_ms").distinct()
    return (
        candidates.join(spoiled, [*LIFE, "value", "first", "appended_ms"], "left_anti")
        .select(*LIFE, "value")
        .distinct()
        .withColumn("retained_away", F.lit(True))
    )


CHECKS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "consumers_below_high_watermark": consumers_below_high_watermark,
    "consumers_in_order": consumers_in_order,
    "definite_failure_invisible": definite_failure_invisible,
    "consistent_offsets": consistent_offsets,
    "no_duplicates": no_duplicates,
}
