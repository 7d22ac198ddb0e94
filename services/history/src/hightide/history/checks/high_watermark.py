"""The replica-state and high-watermark invariants as Spark jobs: `hw_within_log` (B1), `leader_hw_monotonic` (C1)
and `hw_advance_guarded` (C2), the same rules and findings as `hightide.audit.checks.high_watermark` (read its
module docstring for the rules; this one says only how they are computed).

Room: services/history. Window functions over the ordered events of `read_lake`, no Python UDF:

- a replica's state after each event is the last value each event set, per column, within a segment of its
  events that a LogOpened, LogDeleted or ReplicaOffline starts (so the state resets there); the log start is the
  least of the last value set and every later ordinary truncation point (a running minimum). B1 reads it off the
  commit checks' replica stream (`commits.stream_of`), which folds each replica's events once for both;
- a leadership tenure is a segment of one broker incarnation's events for one replica, started by each
  BecameLeader, BecameFollower, LogOpened, LogDeleted or ReplicaOffline; it leads when its first event is a
  BecameLeader. The HW it held before an advance is the last HW it stated on an earlier row;
- the committed ISR and the pending proposal are the last ones set in the tenure; each follower's known LEO is
  the last FollowerStateUpdated of that follower, found by one more window over the advances (one row per
  maximal-ISR member) and those updates together.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Final, NamedTuple

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from hightide.audit.checks.high_watermark import (
    DEFAULT_MIN_INSYNC_REPLICAS,
    ENDS_PROPOSAL_ERRORS,
    HW_ADVANCE_GUARDED,
    HW_WITHIN_LOG,
    LEADER_HW_MONOTONIC,
    MIN_INSYNC_REPLICAS,
    MIN_INSYNC_REPLICAS_DIGITS_MAX,
    NO_LEO,
)
from hightide.history.checks import commits
from hightide.history.events import of_types
from hightide.history.findings import finding_columns
from hightide.protocol import events

# A leader's view: one broker incarnation's events for one replica (`replica` is the leader's id).
LEADER_KEY: Final = ("service", "emitter_id", "incarnation", "topic", "partition", "replica")
_UNTIL_NOW: Final = (Window.unboundedPreceding, Window.currentRow)
_BEFORE_NOW: Final = (Window.unboundedPreceding, -1)


def _null(kind: str) -> Column:
    return F.lit(None).cast(kind)


def _is(*event_classes: type[events.Event]) -> Column:
    return F.col("type").isin(*[event_class.TYPE for event_class in event_classes])


# -- B1 ----------------------------------------------------------------------------------------------------------


def hw_within_log(frame: DataFrame) -> DataFrame:
    """B1 HwLeLeo (reliability.md §8): log start <= HW <= LEO after every offset-changing event of a replica,
    reported where it breaks (see `hightide.audit.checks.high_watermark.hw_within_log`). Read off the replica
    stream of the commit checks (`commits.stream_of`), whose windows fold each replica's offsets once for both:
    `leo_t`, `hw_t` and `lso_b` after each event, `hw_broken` where the rule breaks (`commits._offsets_in_order`)."""
    c = F.col
    found = commits.stream_of(frame).where(c("hw_broken"))
    types = F.create_map(*[F.lit(name) for kind, moved in commits.OFFSET_MOVES.items() for name in (kind, moved.TYPE)])
    event_type = types[c("kind")]
    hw, leo, lso = c("hw_t"), c("leo_t"), c("lso_b")
    past_end = hw > leo
    return found.select(
        *finding_columns(
            HW_WITHIN_LOG,
            topic=c("topic"),
            partition=c("partition"),
            replica=c("replica"),
            first_offset=F.when(past_end, leo).otherwise(hw),
            last_offset=F.when(past_end, hw - 1).otherwise(lso - 1),
            events=F.array("event_id"),
            detail=F.format_string("log start %d <= HW %d <= LEO %d broken after %s", lso, hw, leo, event_type),
        )
    )


# -- leadership tenures (C1, C2) -----------------------------------------------------------------------------------


def leader_advances(frame: DataFrame) -> DataFrame:
    """Every HighWatermarkAdvanced a replica emitted while it led, with its tenure as it stood just before:
    `leader_epoch`, `replicas`, `hw_before` and `hw_before_event`, `isr` and `isr_event`, `pending` and
    `pending_event`, `maximal_isr` (sorted), and `follower_segment` (where its followers' known LEOs start)."""
    return _tenures(frame).advances


class _Tenures(NamedTuple):
    """What C1 and C2 read of the leaders' views, materialised once per lake frame: the leading advances
    (`leader_advances`) and the FollowerStateUpdated rows of the views (with `follower_segment`)."""

    advances: DataFrame
    updates: DataFrame


_TENURES: weakref.WeakKeyDictionary[DataFrame, _Tenures] = weakref.WeakKeyDictionary()


def _tenures(frame: DataFrame) -> _Tenures:
    """The leaders' views of `frame`, folded once however many checks read them (both checks and, within C2, both
    halves): checkpointed, so the windows over the leaders' views run once per audit, not four times."""
    held = _TENURES.get(frame)
    if held is None:
        # One checkpoint of the rows both frames read: the view (its payloads parsed, its windows run) once, not
        # once per frame.
        view = _leader_view(frame)
        updated = F.col("type") == events.FollowerStateUpdated.TYPE
        rows = view.where(_leading_advance() | updated).localCheckpoint()
        held = _TENURES[frame] = _Tenures(_advances(rows), rows.where(updated))
    return held


def forget(frame: DataFrame) -> None:
    """Drop the leaders' views computed for `frame` (see `commits.forget`)."""
    _TENURES.pop(frame, None)


def _leading_advance() -> Column:
    return (F.col("type") == events.HighWatermarkAdvanced.TYPE) & F.col("leading")


def _advances(view: DataFrame) -> DataFrame:
    return view.where(_leading_advance()).withColumn("maximal_isr", F.array_sort(F.array_union("isr", "pending")))


def _leader_view(frame: DataFrame) -> DataFrame:
    """Each event of a leader's view with its tenure's state as it stands after it (see the module docstring)."""
    view = Window.partitionBy(*LEADER_KEY).orderBy("position")
    tenure = Window.partitionBy(*LEADER_KEY, "tenure").orderBy("position")
    until_now, before_now = tenure.rowsBetween(*_UNTIL_NOW), tenure.rowsBetween(*_BEFORE_NOW)
    stated = F.last("stated_hw", True).over(before_now)
    isr = F.last("isr_set", True).over(until_now)
    pending = F.last("pending_set", True).over(until_now)
    # An IsrChangeCompleted sets the committed ISR only while a proposal is in flight (the module docstring).
    in_flight = F.size(F.last("pending_set", True).over(before_now).getField("isr")) > 0
    answers = (F.col("type") != events.IsrChangeCompleted.TYPE) | F.coalesce(in_flight, F.lit(False))
    return (
        _leader_view_rows(frame)
        .withColumn("tenure", F.sum("ends_tenure").over(view.rowsBetween(*_UNTIL_NOW)))
        .withColumn("isr_set", F.when(answers, F.col("isr_set")))
        .withColumn("follower_segment", F.sum("forgets_followers").over(view.rowsBetween(*_UNTIL_NOW)))
        .withColumn("leading", F.first("type").over(until_now) == events.BecameLeader.TYPE)
        .withColumn("leader_epoch", F.first("epoch_set", True).over(until_now))
        .withColumn("replicas", F.first("replicas_set", True).over(until_now))
        .withColumn("hw_before", stated.getField("hw"))
        .withColumn("hw_before_event", stated.getField("event_id"))
        .withColumn("isr", isr.getField("isr"))
        .withColumn("isr_event", isr.getField("event_id"))
        .withColumn("pending", pending.getField("isr"))
        .withColumn("pending_event", pending.getField("event_id"))
    )


def _leader_view_rows(frame: DataFrame) -> DataFrame:
    """The events of a leader's view, keyed by LEADER_KEY (`replica` is the leader), as columns of what each sets."""
    rows = of_types(frame, (events.BecameLeader, events.HighWatermarkAdvanced, *_FORGETS_FOLLOWERS, *_BY_LEADER))
    ids = "array<int>"

    def isr_of(members: Column, event_id: Column) -> Column:
        return F.struct(members.cast(ids).alias("isr"), event_id.alias("event_id"))

    became_leader, advanced = _is(events.BecameLeader), _is(events.HighWatermarkAdvanced)
    completed, forgets = _is(events.IsrChangeCompleted), _is(*_FORGETS_FOLLOWERS)
    updated = _is(events.FollowerStateUpdated)
    no_pending = isr_of(F.array(), F.lit(""))
    ends_proposal = completed & F.col("error").isin(*ENDS_PROPOSAL_ERRORS)
    return rows.select(
        "cluster_id",
        "service",
        "emitter_id",
        "incarnation",
        "position",
        "event_id",
        "type",
        "topic",
        "partition",
        F.when(_is(*_BY_LEADER), F.col("leader")).otherwise(F.col("replica")).alias("replica"),
        F.when(became_leader | forgets, 1).otherwise(0).alias("ends_tenure"),
        F.when(forgets, 1).otherwise(0).alias("forgets_followers"),
        F.when(became_leader, F.col("leader_epoch")).alias("epoch_set"),
        F.when(became_leader, F.col("replicas").cast(ids)).alias("replicas_set"),
        F.when(
            became_leader | advanced,
            F.struct(F.col("high_watermark").alias("hw"), F.col("event_id").alias("event_id")),
        ).alias("stated_hw"),
        F.when(became_leader | completed, isr_of(F.col("isr"), F.col("event_id"))).alias("isr_set"),
        F.when(became_leader | ends_proposal, no_pending)
        .when(_is(events.IsrChangeProposed), isr_of(F.col("proposed_isr"), F.col("event_id")))
        .alias("pending_set"),
        F.when(advanced, F.col("previous")).alias("previous"),
        F.when(advanced, F.col("high_watermark")).alias("high_watermark"),
        F.when(updated, F.col("replica")).alias("follower"),
        F.when(updated, F.col("log_end_offset")).alias("follower_leo"),
    )


_FORGETS_FOLLOWERS: Final = (events.BecameFollower, events.LogOpened, events.LogDeleted, events.ReplicaOffline)
_BY_LEADER: Final = (events.IsrChangeProposed, events.IsrChangeCompleted, events.FollowerStateUpdated)


# -- C1 ----------------------------------------------------------------------------------------------------------


def leader_hw_monotonic(frame: DataFrame) -> DataFrame:
    """C1 LeaderHwMonotonicInTenure (Vanlightly §6.4): in a leader's tenure each HighWatermarkAdvanced goes
    strictly up and chains (see `hightide.audit.checks.high_watermark.leader_hw_monotonic`)."""
    advances = leader_advances(frame)
    previous, hw, before = F.col("previous"), F.col("high_watermark"), F.col("hw_before")
    broken = advances.where(~((hw > previous) & (previous == before)))
    return broken.select(
        *finding_columns(
            LEADER_HW_MONOTONIC,
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("replica"),
            first_offset=F.least(before, previous, hw),
            last_offset=F.greatest(before, previous, hw),
            events=F.array("event_id", "hw_before_event"),
            detail=F.format_string(
                "leader %d of epoch %d moved its HW from %d to %d while it held HW %d",
                "replica",
                "leader_epoch",
                "previous",
                "high_watermark",
                "hw_before",
            ),
        )
    )


# -- C2 ----------------------------------------------------------------------------------------------------------


def hw_advance_guarded(frame: DataFrame) -> DataFrame:
    """C2 HwAdvanceGuard (SafeToAdvanceHwm, Kip320 rule 3): a leader's HW advances to h only with |ISR| >=
    min(min.insync.replicas, |replicas|) and every other maximal-ISR member known at LEO >= h (see
    `hightide.audit.checks.high_watermark.hw_advance_guarded`)."""
    tenures = _tenures(frame)
    return _too_small_isr(frame, tenures.advances).unionByName(_members_behind(tenures.updates, tenures.advances))


def _said() -> Column:
    return F.format_string(
        "leader %d of epoch %d advanced the HW from %d to %d", "replica", "leader_epoch", "previous", "high_watermark"
    )


def _too_small_isr(frame: DataFrame, advances: DataFrame) -> DataFrame:
    least = topic_min_insync_replicas(frame)
    defaults = cluster_min_insync_replicas(frame)
    with_min = (
        advances.join(F.broadcast(least), "topic", "left")
        .join(F.broadcast(defaults), "cluster_id", "left")
        .withColumn(
            "effective_min_isr",
            F.least(
                F.coalesce("min_insync_replicas", "cluster_min_insync_replicas", F.lit(DEFAULT_MIN_INSYNC_REPLICAS)),
                F.size("replicas"),
            ),
        )
    )
    small = with_min.where(F.size("isr") < F.col("effective_min_isr"))
    members = F.array_join(F.array_sort("isr").cast("array<string>"), ", ")
    return small.select(
        *finding_columns(
            HW_ADVANCE_GUARDED,
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("replica"),
            first_offset=F.col("previous"),
            last_offset=F.col("high_watermark") - 1,
            events=F.array(F.col("event_id"), F.col("isr_event")),
            detail=F.format_string(
                "%s with ISR [%s], below min.insync.replicas %d", _said(), members, F.col("effective_min_isr")
            ),
        )
    )


def _members_behind(updated: DataFrame, advances: DataFrame) -> DataFrame:
    """One row per (advance, maximal-ISR member but the leader), each with the member's last known LEO: the last
    FollowerStateUpdated of it in the same stretch of the leader's view, by one window over both kinds of row."""
    members = advances.select(
        *LEADER_KEY,
        "position",
        "follower_segment",
        "event_id",
        "leader_epoch",
        "previous",
        "high_watermark",
        F.explode(F.array_except("maximal_isr", F.array(F.col("replica")))).alias("follower"),
        _null("bigint").alias("follower_leo"),
        F.lit(True).alias("is_advance"),
    )
    updates = updated.select(
        *LEADER_KEY,
        "position",
        "follower_segment",
        "event_id",
        _null("int").alias("leader_epoch"),
        _null("bigint").alias("previous"),
        _null("bigint").alias("high_watermark"),
        "follower",
        "follower_leo",
        F.lit(False).alias("is_advance"),
    )
    known: WindowSpec = Window.partitionBy(*LEADER_KEY, "follower_segment", "follower").orderBy("position")
    last_update = F.last(
        F.when(~F.col("is_advance"), F.struct(F.col("follower_leo").alias("leo"), F.col("event_id").alias("id"))),
        True,
    ).over(known.rowsBetween(*_UNTIL_NOW))
    together = members.unionByName(updates).withColumn("known", last_update).where(F.col("is_advance"))
    known_leo = F.coalesce(F.col("known").getField("leo"), F.lit(NO_LEO))
    behind = together.where(known_leo < F.col("high_watermark"))
    what = F.when(F.col("known").isNull(), F.lit("had no known LEO")).otherwise(
        F.format_string("was known at LEO %d", known_leo)
    )
    return behind.select(
        *finding_columns(
            HW_ADVANCE_GUARDED,
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("replica"),
            first_offset=F.greatest(F.col("previous"), known_leo),
            last_offset=F.col("high_watermark") - 1,
            events=F.array_compact(F.array(F.col("event_id"), F.col("known").getField("id"))),
            detail=F.format_string("%s while its maximal ISR member %d %s", _said(), F.col("follower"), what),
        )
    )


def topic_min_insync_replicas(frame: DataFrame) -> DataFrame:
    """Each topic name's least min.insync.replicas in the history: (`topic`, `min_insync_replicas`); where a topic
    event does not set it, its cluster's default (`cluster_min_insync_replicas`) counts."""
    defaults = cluster_min_insync_replicas(frame)
    default = F.coalesce(F.col("cluster_min_insync_replicas"), F.lit(DEFAULT_MIN_INSYNC_REPLICAS))

    def value(pair: Column) -> Column:
        text = F.get(pair, 1)
        readable = text.rlike(f"^[0-9]{{1,{MIN_INSYNC_REPLICAS_DIGITS_MAX}}}\\z")
        number = F.when(readable, text.cast("int"))
        return F.when(number >= 1, number).otherwise(default)

    rows = of_types(frame, (events.TopicCreated, events.TopicConfigsAltered))
    rows = rows.join(F.broadcast(defaults), "cluster_id", "left")
    named = F.filter(F.col("configs"), lambda pair: F.get(pair, 0) == MIN_INSYNC_REPLICAS)
    unset = _is(events.TopicCreated) & (F.size(named) == 0)
    values = F.when(unset, F.array(default)).otherwise(F.transform(named, value))
    every = rows.select("topic", F.explode(values).alias("value"))
    return every.groupBy("topic").agg(F.min("value").alias("min_insync_replicas"))


def cluster_min_insync_replicas(frame: DataFrame) -> DataFrame:
    """Each cluster id's min.insync.replicas for topics that do not set it: the least that its ControllerElected
    events name, (`cluster_id`, `cluster_min_insync_replicas`); a cluster none names has no row (Kafka's default)."""
    elected = of_types(frame, (events.ControllerElected,)).where(F.col("min_insync_replicas") >= 1)
    return elected.groupBy("cluster_id").agg(F.min("min_insync_replicas").alias("cluster_min_insync_replicas"))


CHECKS: Final[dict[str, Callable[[DataFrame], DataFrame]]] = {
    HW_WITHIN_LOG: hw_within_log,
    LEADER_HW_MONOTONIC: leader_hw_monotonic,
    HW_ADVANCE_GUARDED: hw_advance_guarded,
}
