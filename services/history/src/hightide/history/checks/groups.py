"""The consumer groups' invariants as Spark jobs: `hightide.audit.checks.groups`' rules over the lake.

Room: services/history. Same names, same findings row for row as the plain-Python specification (the fold of
`hightide.audit.groups`, whose docstrings state each rule, its source, and the order of a group's events across
processes). Only the group event types are read, with one payload schema for all of them. The fold's state is
restated with window functions over each group's events in that order:

- `life`: how many GroupDeleted events of the group came before (a deleted group starts over, its commits too);
- `known`: a GroupGenerationStarted or GroupLoaded came earlier in the life (the fold knows the group);
- `segment`: how many GroupLoaded and GroupUnloaded events came so far in the life (each starts a coordinator's
  office over: the generations it started are forgotten);
- `durable`: the greatest generation handed out (synced while known) or loaded earlier in the life, and
  `durable_from`, the event that first reached it;
- `current`: the generation the coordinator in office holds: the segment's start (the loaded generation, or the
  durable one at an unload) and every generation started in the segment since, whichever is greatest;
- the group's members: those of the last GroupLoaded, or GroupGenerationStarted that became current, before.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.audit.checks.groups import GROUP_EVENTS
from hightide.history.events import EMITTER, payload_of, payload_schema
from hightide.history.findings import finding_columns
from hightide.protocol import events

FIELDS: Final = ("group_id", "generation_id", "member_id", "members", "topics", "partitions", "offsets", "committed")
ORDER: Final = ("clock", "service", "emitter_id", "position")
NO_GENERATION: Final = -1
UNBOUNDED: Final = Window.unboundedPreceding


def group_schema() -> T.StructType:
    """One payload struct for every group event type: the `FIELDS` any of them has, each with its one type."""
    types: dict[str, T.DataType] = {}
    for event_class in GROUP_EVENTS:
        for field in payload_schema(event_class).fields:
            if field.name in FIELDS:
                assert types.setdefault(field.name, field.dataType) == field.dataType, field.name
    return T.StructType([T.StructField(name, types[name], True) for name in FIELDS])


def is_type(event_class: type[events.Event]) -> Column:
    return F.col("type") == event_class.TYPE


def group_events(events_frame: DataFrame) -> DataFrame:
    """The group events of `read_lake`'s frame (only those types are read) with their payload's `FIELDS` and `clock`:
    the greatest wall_ms of the emitter incarnation's group events up to each, in its order."""
    types = [event_class.TYPE for event_class in GROUP_EVENTS]
    parsed = events_frame.where(F.col("type").isin(types)).select(
        "event_id",
        *EMITTER,
        "incarnation",
        "position",
        "wall_ms",
        "type",
        payload_of(group_schema(), types).alias("_p"),
    )
    process = Window.partitionBy(*EMITTER, "incarnation").orderBy("position")
    emitter = process.rowsBetween(UNBOUNDED, Window.currentRow)
    return parsed.select(
        "event_id",
        *EMITTER,
        "position",
        "type",
        F.max("wall_ms").over(emitter).alias("clock"),
        *[F.col("_p").getField(name).alias(name) for name in FIELDS],
    )


def with_state(events_frame: DataFrame) -> DataFrame:
    """`group_events` with `life`, `known`, `segment`, `durable`, `current`, `repeated` (a GroupGenerationStarted of
    a generation already started in the segment), `members_now` and `members_from` (the event that set them).
    Computed once per lake DataFrame and checkpointed (every check of this group starts from it; it is small, the
    group events only)."""
    held = _STATES.get(events_frame)
    if held is None:
        held = _STATES[events_frame] = _with_state(events_frame).localCheckpoint()
    return held


_STATES: weakref.WeakKeyDictionary[DataFrame, DataFrame] = weakref.WeakKeyDictionary()


def forget(events_frame: DataFrame) -> None:
    """Drop the group state computed for `events_frame` (see `commits.forget`)."""
    _STATES.pop(events_frame, None)


def _with_state(events_frame: DataFrame) -> DataFrame:
    rows = group_events(events_frame)
    generation = F.col("generation_id")
    started, loaded, unloaded = (
        is_type(events.GroupGenerationStarted),
        is_type(events.GroupLoaded),
        is_type(events.GroupUnloaded),
    )
    by_group = Window.partitionBy("group_id").orderBy(*ORDER).rowsBetween(UNBOUNDED, Window.currentRow)
    rows = rows.withColumn("life", F.sum(is_type(events.GroupDeleted).cast("int")).over(by_group))
    life = Window.partitionBy("group_id", "life").orderBy(*ORDER)
    up_to, before = life.rowsBetween(UNBOUNDED, Window.currentRow), life.rowsBetween(UNBOUNDED, -1)
    rows = rows.withColumn(
        "known", F.coalesce(F.sum((started | loaded).cast("int")).over(before), F.lit(0)) > 0
    ).withColumn("segment", F.sum((loaded | unloaded).cast("int")).over(up_to))
    handed_out = F.when((is_type(events.GroupAssignmentSynced) & F.col("known")) | loaded, generation)
    rows = rows.withColumn("durable", F.coalesce(F.max(handed_out).over(before), F.lit(NO_GENERATION)))
    # The event that first handed out or loaded the durable generation: the last one before that raised it.
    raised = F.when(handed_out > F.col("durable"), F.col("event_id"))
    rows = rows.withColumn("durable_from", F.last(raised, ignorenulls=True).over(before))
    segment = Window.partitionBy("group_id", "life", "segment")
    start = F.when(loaded, generation).when(unloaded, F.col("durable"))
    started_before = F.max(F.when(started, generation)).over(segment.orderBy(*ORDER).rowsBetween(UNBOUNDED, -1))
    same_generation = Window.partitionBy("group_id", "life", "segment", "type", "generation_id").orderBy(*ORDER)
    rows = (
        rows.withColumn(
            "current",
            F.greatest(
                F.coalesce(F.max(start).over(segment), F.lit(NO_GENERATION)),
                F.coalesce(started_before, F.lit(NO_GENERATION)),
            ),
        )
        .withColumn("repeated", started & (F.row_number().over(same_generation) > 1))
        .withColumn("first_start", F.first("event_id").over(same_generation))
    )
    sets_members = loaded | (started & (~F.col("known") | (generation >= F.col("current"))))
    return rows.withColumn(
        "members_now", F.last(F.when(sets_members, F.col("members")), ignorenulls=True).over(before)
    ).withColumn("members_from", F.last(F.when(sets_members, F.col("event_id")), ignorenulls=True).over(before))


def one_generation_at_a_time(events_frame: DataFrame) -> DataFrame:
    """A group has one generation at a time: a coordinator starts a group's generations in increasing order, each
    once, none at or below one handed out or loaded, and a new coordinator never loads less than was handed out
    (the specification's docstring gives the rule and its source)."""
    rows = with_state(events_frame).where(F.col("known"))
    generation, group = F.col("generation_id"), F.col("group_id")
    loaded_below = rows.where(is_type(events.GroupLoaded) & (generation < F.col("durable"))).select(
        *finding_columns(
            "one_generation_at_a_time",
            events=F.array_compact(F.array("event_id", "durable_from")),
            detail=F.format_string(
                "group %s was loaded at generation %d, below generation %d already handed out",
                group,
                generation,
                F.col("durable"),
            ),
        )
    )
    started = rows.where(is_type(events.GroupGenerationStarted))
    twice = F.col("repeated") | (generation <= F.col("durable"))
    earlier = F.when(F.col("repeated"), F.col("first_start"))
    handed_out = F.when(generation <= F.col("durable"), F.col("durable_from"))
    again = started.where(twice).select(
        *finding_columns(
            "one_generation_at_a_time",
            events=F.array_compact(F.array("event_id", earlier, handed_out)),
            detail=F.format_string("generation %d of group %s started a second time", generation, group),
        )
    )
    going_back = started.where(~twice & (generation < F.col("current"))).select(
        *finding_columns(
            "one_generation_at_a_time",
            events=F.array("event_id"),
            detail=F.format_string(
                "generation %d of group %s started after generation %d", generation, group, F.col("current")
            ),
        )
    )
    return loaded_below.unionByName(again).unionByName(going_back)


def one_owner_per_partition(events_frame: DataFrame) -> DataFrame:
    """No partition has two owners in one generation, and a generation's assignment is decided once (the
    specification's docstring gives the rule and its source)."""
    synced = with_state(events_frame).where(is_type(events.GroupAssignmentSynced))
    rows = synced.select(
        "event_id",
        "group_id",
        "generation_id",
        F.posexplode(F.arrays_zip("members", "topics", "partitions")).alias("index", "_row"),
    ).select(
        "event_id",
        "group_id",
        "generation_id",
        "index",
        F.col("_row.members").alias("member"),
        F.col("_row.topics").alias("topic"),
        F.col("_row.partitions").alias("partition"),
    )
    in_event = Window.partitionBy("event_id", "topic", "partition").orderBy("index")
    owners = rows.withColumn("other", F.first("member").over(in_event))
    two_owners = owners.where(F.col("member") != F.col("other")).select(
        *finding_columns(
            "one_owner_per_partition",
            topic=F.col("topic"),
            partition=F.col("partition"),
            events=F.array("event_id"),
            detail=F.format_string(
                "%s-%d is assigned to both %s and %s in generation %d of group %s",
                F.col("topic"),
                F.col("partition"),
                F.col("other"),
                F.col("member"),
                F.col("generation_id"),
                F.col("group_id"),
            ),
        )
    )
    decided = synced.where(F.col("known")).withColumn(
        "assignment", F.array_sort(F.arrays_zip("members", "topics", "partitions"))
    )
    generation = Window.partitionBy("group_id", "life", "generation_id").orderBy(*ORDER)
    first = decided.withColumn("first_assignment", F.first("assignment").over(generation)).withColumn(
        "first_id", F.first("event_id").over(generation)
    )
    two_assignments = first.where(F.col("assignment") != F.col("first_assignment")).select(
        *finding_columns(
            "one_owner_per_partition",
            events=F.array("first_id", "event_id"),
            detail=F.format_string(
                "generation %d of group %s was given two different assignments",
                F.col("generation_id"),
                F.col("group_id"),
            ),
        )
    )
    return two_owners.unionByName(two_assignments)


def no_stale_commit(events_frame: DataFrame) -> DataFrame:
    """A commit is accepted only in the group's current generation, and one with no generation only while the group
    has no members (the specification's docstring gives the rule and its source)."""
    commits = with_state(events_frame).where(is_type(events.OffsetsCommitted) & F.col("known"))
    generation, group, current = F.col("generation_id"), F.col("group_id"), F.col("current")
    members = F.coalesce(F.size("members_now"), F.lit(0))
    involved = F.array_compact(F.array("event_id", "members_from"))
    outside = commits.where((generation == NO_GENERATION) & (members > 0)).select(
        *finding_columns(
            "no_stale_commit",
            events=involved,
            detail=F.format_string(
                "a commit with no generation was accepted while group %s had %d members in generation %d",
                group,
                members,
                current,
            ),
        )
    )
    stale = commits.where((generation != NO_GENERATION) & (generation != current)).select(
        *finding_columns(
            "no_stale_commit",
            events=involved,
            detail=F.format_string(
                "member %s committed in generation %d of group %s while generation %d was current",
                F.col("member_id"),
                generation,
                group,
                current,
            ),
        )
    )
    return outside.unionByName(stale)


def resumes_at_commit(events_frame: DataFrame) -> DataFrame:
    """A consumer given a partition resumes at the group's last commit of it (the specification's docstring gives
    the rule and its source)."""
    rows = with_state(events_frame)
    kept = ["event_id", "group_id", "life", *ORDER]
    commits = rows.where(is_type(events.OffsetsCommitted)).select(
        *kept, F.posexplode(F.arrays_zip("topics", "partitions", "offsets")).alias("index", "_row")
    )
    commits = commits.select(
        *kept,
        "index",
        F.col("_row.topics").alias("topic"),
        F.col("_row.partitions").alias("partition"),
        F.col("_row.offsets").alias("commit_offset"),
        F.col("event_id").alias("commit_id"),
    )
    assigned = rows.where(is_type(events.PartitionsAssigned)).select(
        *kept,
        "member_id",
        "generation_id",
        F.posexplode(F.arrays_zip("topics", "partitions", "committed", "offsets")).alias("index", "_row"),
    )
    assigned = assigned.select(
        *kept,
        "index",
        "member_id",
        "generation_id",
        F.col("_row.topics").alias("topic"),
        F.col("_row.partitions").alias("partition"),
        F.col("_row.committed").alias("fetched"),
        F.col("_row.offsets").alias("start"),
    )
    both = commits.unionByName(assigned, allowMissingColumns=True)
    partition = Window.partitionBy("group_id", "life", "topic", "partition").orderBy(*ORDER, "index")
    before = partition.rowsBetween(UNBOUNDED, -1)
    resumed = (
        both.withColumn("last", F.last("commit_offset", ignorenulls=True).over(before))
        .withColumn("last_id", F.last("commit_id", ignorenulls=True).over(before))
        .where(F.col("fetched").isNotNull())
    )
    fetched, start, last = F.col("fetched"), F.col("start"), F.col("last")
    told_wrong = last.isNotNull() & (fetched != last)
    elsewhere = ~told_wrong & (fetched >= 0) & (start != fetched)
    what = F.when(
        told_wrong,
        F.format_string(
            "was told the commit of %s-%d is %d, but the last commit is %d", "topic", "partition", fetched, last
        ),
    ).otherwise(
        F.format_string("starts %s-%d at %d, not at its committed offset %d", "topic", "partition", start, fetched)
    )
    resume = F.when(told_wrong, last).otherwise(fetched)
    first, end = F.least(start, resume), F.greatest(start, resume) - 1
    return resumed.where(told_wrong | elsewhere).select(
        *finding_columns(
            "resumes_at_commit",
            topic=F.col("topic"),
            partition=F.col("partition"),
            first_offset=F.when(first <= end, first),
            last_offset=F.when(first <= end, end),
            events=F.array_compact(F.array("event_id", "last_id")),
            detail=F.format_string(
                "member %s of group %s in generation %d %s", "member_id", "group_id", "generation_id", what
            ),
        )
    )


CHECKS: Final[dict[str, Callable[[DataFrame], DataFrame]]] = {
    "one_generation_at_a_time": one_generation_at_a_time,
    "one_owner_per_partition": one_owner_per_partition,
    "no_stale_commit": no_stale_commit,
    "resumes_at_commit": resumes_at_commit,
}
