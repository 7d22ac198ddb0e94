"""The controller and metadata invariants (reliability.md §8 A1-A6) as Spark jobs over the lake's events.

Room: services/history. The same rules, names and findings as `hightide.audit.checks.metadata` (its docstrings are
the specification: metadata order, topic lives, how a broker's events are placed, min.insync.replicas), written
with DataFrame operations, joins and window functions only. `metadata_order` is the one shared step: the
controllers' committed decisions, each with its place in metadata order (`ORDER`), its topic's life and the
topic's min.insync.replicas at that point.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.audit.checks.metadata import (
    FROM_OWN_ISR,
    MIN_INSYNC_REPLICAS,
    NO_LEADER,
    RECORDED_UNCLEAN,
    TERM_EVENTS,
)
from hightide.audit.rebuild import NO_TERM
from hightide.history.events import payload_of, payload_schema
from hightide.history.findings import finding_columns
from hightide.protocol import events

ORDER: Final = ("term_epoch", "term_wall_ms", "service", "emitter_id", "term_incarnation", "position")
"""The columns whose ascending order is metadata order (`hightide.audit.checks.metadata.metadata_order`)."""

_STAMP: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("controller_epoch", T.IntegerType(), True),
        T.StructField("metadata_offset", T.LongType(), True),
        T.StructField("reason", T.StringType(), True),
        T.StructField("min_insync_replicas", T.IntegerType(), True),
    ]
)
_BROKER_EVENT: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("replica", T.IntegerType(), True),
        T.StructField("leader_epoch", T.IntegerType(), True),
    ]
)


# -- metadata order --------------------------------------------------------------------------------------------


def metadata_order(lake_events: DataFrame) -> DataFrame:
    """The committed metadata events of `TERM_EVENTS` with `event_id`, `type`, their typed payloads, `topic`, the
    `ORDER` columns, `life` and `min_isr` (null when the history cannot tell). Computed once per lake DataFrame and
    checkpointed (the checks of this group all start from it; it is small, the controllers' decisions only)."""
    held = _ORDERS.get(lake_events)
    if held is None:
        held = _ORDERS[lake_events] = _metadata_order(lake_events).localCheckpoint()
    return held


_ORDERS: weakref.WeakKeyDictionary[DataFrame, DataFrame] = weakref.WeakKeyDictionary()


def forget(lake_events: DataFrame) -> None:
    """Drop the metadata order computed for `lake_events` (see `commits.forget`)."""
    _ORDERS.pop(lake_events, None)


def _metadata_order(lake_events: DataFrame) -> DataFrame:
    names = [*(cls.TYPE for cls in TERM_EVENTS), events.ControllerElected.TYPE]
    rows = lake_events.where(F.col("type").isin(*names)).select(
        "event_id",
        "type",
        *names,  # the typed payloads (`typed` reads them)
        "service",
        "emitter_id",
        "incarnation",
        "wall_ms",
        "position",
        payload_of(_STAMP, names).alias("_s"),
    )
    emitter = Window.partitionBy("service", "emitter_id").orderBy("position")
    is_elected = F.col("type") == events.ControllerElected.TYPE
    elected_default = F.when(is_elected & (F.col("_s.min_insync_replicas") >= 1), F.col("_s.min_insync_replicas"))
    termed = (
        rows.withColumn("term", F.sum(is_elected.cast("int")).over(emitter))
        .withColumn(
            "term_epoch",
            F.coalesce(
                F.last(F.when(is_elected, F.col("_s.controller_epoch")), ignorenulls=True).over(emitter),
                F.lit(NO_TERM),
            ),
        )
        # The term's controller's own min.insync.replicas (null: its ControllerElected does not say).
        .withColumn(
            "term_min_isr", F.last(F.when(is_elected, F.struct(elected_default.alias("v"))), True).over(emitter)
        )
        .withColumn("term_min_isr", F.col("term_min_isr.v"))
    )
    decided = termed.where(~is_elected)
    kept = _without_abandoned(lake_events, decided)
    term = Window.partitionBy("service", "emitter_id", "term")
    ordered = kept.withColumn("term_wall_ms", F.min_by("wall_ms", "position").over(term)).withColumn(
        "term_incarnation", F.min_by("incarnation", "position").over(term)
    )
    return _with_min_isr(ordered.withColumn("topic", F.col("_s.topic")))


def _without_abandoned(lake_events: DataFrame, decided: DataFrame) -> DataFrame:
    """The decisions that committed (`rebuild.Takeovers.overtaking`): a decision of controller epoch E at metadata
    offset s never committed when a later epoch took over at an offset <= s, or E's own fenced append was refused
    at an offset <= s (the last append_fenced ControllerDeposed of E, in `History.all()` order, says where)."""
    stamp_epoch, stamp_offset = F.col("_s.controller_epoch"), F.col("_s.metadata_offset")
    stamped = stamp_epoch.isNotNull() & stamp_offset.isNotNull() & (stamp_epoch >= 0) & (stamp_offset >= 0)
    elected = lake_events.where(F.col("type") == events.ControllerElected.TYPE).select(
        F.col(events.ControllerElected.TYPE).alias("_t")
    )
    takeovers = elected.where(F.col("_t.metadata_offset") >= 0).select(
        F.col("_t.controller_epoch").alias("taken_epoch"), F.col("_t.metadata_offset").alias("takeover")
    )
    deposed = lake_events.where(F.col("type") == events.ControllerDeposed.TYPE).select(
        "service", "emitter_id", "position", F.col(events.ControllerDeposed.TYPE).alias("_t")
    )
    fenced = (
        deposed.where((F.col("_t.reason") == "append_fenced") & (F.col("_t.metadata_offset") >= 0))
        .groupBy(F.col("_t.controller_epoch").alias("fenced_epoch"))
        .agg(F.max_by(F.col("_t.metadata_offset") + 1, F.struct("service", "emitter_id", "position")).alias("fenced"))
    )
    overtaken = stamped & (F.col("taken_epoch") > stamp_epoch) & (F.col("takeover") <= stamp_offset)
    refused = stamped & (F.col("fenced_epoch") == stamp_epoch) & (F.col("fenced") <= stamp_offset)
    return decided.join(F.broadcast(takeovers), overtaken, "left_anti").join(F.broadcast(fenced), refused, "left_anti")


def _with_min_isr(ordered: DataFrame) -> DataFrame:
    """`life` (TopicCreated of the topic so far, this one included) and `min_isr` (the last value a TopicCreated
    or a TopicConfigsAltered naming min.insync.replicas set; for none or a removed one, the deciding controller's
    own, null where its ControllerElected does not say)."""
    configs = F.coalesce(F.col(events.TopicCreated.TYPE).configs, F.col(events.TopicConfigsAltered.TYPE).configs)
    named = F.filter(configs, lambda c: c[0] == F.lit(MIN_INSYNC_REPLICAS))
    created = F.col("type") == events.TopicCreated.TYPE
    altered = (F.col("type") == events.TopicConfigsAltered.TYPE) & (F.size(named) > 0)
    value = F.trim(F.element_at(named, -1)[1]).try_cast("int")  # the last one named, as a dict of them keeps
    setting = F.when(created | altered, F.struct(F.when(F.size(named) > 0, value).alias("value")))
    in_topic = Window.partitionBy("topic").orderBy(*ORDER)
    return (
        ordered.withColumn("life", F.sum(created.cast("int")).over(in_topic))
        .withColumn("_min_isr", F.last(setting, ignorenulls=True).over(in_topic))
        .withColumn("min_isr", F.coalesce(F.col("_min_isr.value"), F.col("term_min_isr")))
        .drop("_min_isr", "_s", "term_min_isr")
    )


def typed(order: DataFrame, event_class: type[events.Event]) -> DataFrame:
    """The rows of one event type of `metadata_order` with its payload's fields as columns (next to `event_id`,
    the `ORDER` columns, `life` and `min_isr`)."""
    schema = payload_schema(event_class)
    base = ["event_id", *ORDER, "life", "min_isr", "topic"]  # `topic` as metadata_order partitioned it
    fields = [name for name in schema.fieldNames() if name != "topic"]
    payload = F.col(event_class.TYPE)
    rows = order.where(F.col("type") == event_class.TYPE)
    return rows.select(*base, *[payload.getField(name).alias(name) for name in fields])


def _listed(brokers: Column) -> Column:
    """A list of brokers in a detail, as the Python side writes it: [1,2,3]."""
    return F.concat(F.lit("["), F.array_join(brokers.cast("array<string>"), ","), F.lit("]"))


def _changes(lake_events: DataFrame) -> DataFrame:
    return typed(metadata_order(lake_events), events.PartitionChanged)


# -- A1 --------------------------------------------------------------------------------------------------------


def one_leader_per_epoch(lake_events: DataFrame) -> DataFrame:
    """A1 UniqueLeaderPerEpoch (KRaft's NeverTwoLeadersInSameEpoch): the committed PartitionChanged of one (life,
    partition, leader epoch) name one leader, and every BecameLeader is backed by a committed PartitionChanged
    that made that broker leader in that epoch (`hightide.audit.checks.metadata.one_leader_per_epoch`). One
    aggregation per (topic, partition, leader epoch) of the committed leaders, in every life, serves both parts."""
    epoch_key = ["topic", "partition", "leader_epoch"]
    led = _changes(lake_events).where(F.col("leader") != NO_LEADER)
    per_epoch = led.groupBy(*epoch_key).agg(F.collect_list(F.struct("life", "leader", "event_id")).alias("claims"))
    lives = per_epoch.select(
        *epoch_key, "claims", F.explode(F.array_distinct(F.transform("claims", lambda c: c.life))).alias("life")
    )
    in_life = F.filter("claims", lambda c: c.life == F.col("life"))
    leaders = F.array_sort(F.array_distinct(F.transform(in_life, lambda c: c.leader)))
    conflicts = lives.where(F.size(leaders) > 1).select(
        *finding_columns(
            "one_leader_per_epoch",
            topic=F.col("topic"),
            partition=F.col("partition"),
            events=F.transform(in_life, lambda c: c.event_id),
            detail=F.format_string(
                "leader epoch %d led by brokers %s",
                "leader_epoch",
                F.array_join(leaders.cast("array<string>"), " and "),
            ),
        )
    )
    became = lake_events.where(F.col("type") == events.BecameLeader.TYPE).select(
        "event_id", payload_of(_BROKER_EVENT, [events.BecameLeader.TYPE]).alias("_b")
    )
    claims = (
        became.select("event_id", "_b.topic", "_b.partition", "_b.leader_epoch", "_b.replica")
        .groupBy(*epoch_key, "replica")
        .agg(F.collect_list("event_id").alias("ids"))
        .join(per_epoch, on=epoch_key, how="left")
    )
    backed = F.exists(F.coalesce("claims", F.array()), lambda c: c.leader == F.col("replica"))
    unbacked = claims.where(~backed).select(
        *finding_columns(
            "one_leader_per_epoch",
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("replica"),
            events=F.concat(
                "ids", F.coalesce(F.transform("claims", lambda c: c.event_id), F.array().cast("array<string>"))
            ),
            detail=F.format_string(
                "leader epoch %d led by broker %d, which no committed PartitionChanged made its leader",
                "leader_epoch",
                "replica",
            ),
        )
    )
    return conflicts.unionByName(unbacked)


# -- A2, A3 ----------------------------------------------------------------------------------------------------


def _with_previous(changes: DataFrame, *columns: str) -> DataFrame:
    """Each committed PartitionChanged with `prev_<column>` of the one before it in its partition's life."""
    in_partition = Window.partitionBy("topic", "life", "partition").orderBy(*ORDER)
    for column in ("event_id", *columns):
        changes = changes.withColumn(f"prev_{column}", F.lag(column).over(in_partition))
    return changes.where(F.col("prev_event_id").isNotNull())


def epochs_monotonic(lake_events: DataFrame) -> DataFrame:
    """A2 EpochMonotonicity (Vanlightly §2.3): a partition's successive committed PartitionChanged raise the
    partition epoch, never lower the leader epoch, and raise it when the leader changes. A3 ReplicaEpochMonotonic
    (Kafka's makeLeader/makeFollower): a broker's BecameLeader/BecameFollower leader epochs never go down within one
    replica log of one incarnation (`hightide.audit.checks.metadata.epochs_monotonic`)."""
    pairs = _with_previous(_changes(lake_events), "partition_epoch", "leader_epoch", "leader")
    detail = (
        F.when(
            F.col("partition_epoch") <= F.col("prev_partition_epoch"),
            F.format_string("partition epoch %d after %d", "partition_epoch", "prev_partition_epoch"),
        )
        .when(
            F.col("leader_epoch") < F.col("prev_leader_epoch"),
            F.format_string("leader epoch %d after %d", "leader_epoch", "prev_leader_epoch"),
        )
        .when(
            (F.col("leader") != F.col("prev_leader")) & (F.col("leader_epoch") == F.col("prev_leader_epoch")),
            F.format_string("leader %d -> %d kept leader epoch %d", "prev_leader", "leader", "leader_epoch"),
        )
    )
    controller = (
        pairs.withColumn("detail", detail)
        .where(F.col("detail").isNotNull())
        .select(
            *finding_columns(
                "epochs_monotonic",
                topic=F.col("topic"),
                partition=F.col("partition"),
                events=F.array("prev_event_id", "event_id"),
                detail=F.col("detail"),
            )
        )
    )
    return controller.unionByName(_replica_epochs_down(lake_events))


def _replica_epochs_down(lake_events: DataFrame) -> DataFrame:
    """A3: a broker's BecameLeader/BecameFollower leader epochs going down within one replica log of one
    incarnation (a LogDeleted starts a new one)."""
    kinds = (events.BecameLeader.TYPE, events.BecameFollower.TYPE, events.LogDeleted.TYPE)
    rows = lake_events.where((F.col("service") == "broker") & F.col("type").isin(*kinds)).select(
        "event_id", "type", "emitter_id", "incarnation", "position", payload_of(_BROKER_EVENT, kinds).alias("_b")
    )
    rows = rows.select("event_id", "type", "emitter_id", "incarnation", "position", "_b.*")
    replica_log = Window.partitionBy("emitter_id", "incarnation", "topic", "partition").orderBy("position")
    deleted = (F.col("type") == events.LogDeleted.TYPE).cast("int")
    segmented = rows.withColumn("log", F.sum(deleted).over(replica_log)).where(F.col("type") != events.LogDeleted.TYPE)
    in_log = Window.partitionBy("emitter_id", "incarnation", "topic", "partition", "log").orderBy("position")
    stepped = segmented.withColumn("prev_epoch", F.lag("leader_epoch").over(in_log)).withColumn(
        "prev_event_id", F.lag("event_id").over(in_log)
    )
    return stepped.where(F.col("leader_epoch") < F.col("prev_epoch")).select(
        *finding_columns(
            "epochs_monotonic",
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("replica"),
            events=F.array("prev_event_id", "event_id"),
            detail=F.format_string(
                "broker %d went from leader epoch %d to %d", "replica", "prev_epoch", "leader_epoch"
            ),
        )
    )


# -- A4, A5 ----------------------------------------------------------------------------------------------------


def leader_in_isr(lake_events: DataFrame) -> DataFrame:
    """A4 LeaderInIsr (hachikuji's kafka-specification): a committed PartitionChanged's leader (!= -1) is in its
    ISR (`hightide.audit.checks.metadata.leader_in_isr`)."""
    changes = _changes(lake_events)
    outside = changes.where((F.col("leader") != NO_LEADER) & ~F.array_contains("isr", F.col("leader")))
    return outside.select(
        *finding_columns(
            "leader_in_isr",
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("leader"),
            events=F.array("event_id"),
            detail=F.format_string("leader %d not in ISR %s", "leader", _listed(F.col("isr"))),
        )
    )


def isr_elr_well_formed(lake_events: DataFrame) -> DataFrame:
    """A5 IsrElrWellFormed (KIP-966, ValidControllerIsrAndElr): no repeats, ISR and ELR within the replicas and
    disjoint, and no ELR once the ISR reaches the topic's known min ISR; one finding per broken clause
    (`hightide.audit.checks.metadata.isr_elr_well_formed`)."""
    replicas, isr, elr = F.col("replicas"), F.col("isr"), F.col("elr")

    def repeats(name: str, column: Column) -> Column:
        return F.when(
            F.size(F.array_distinct(column)) != F.size(column),
            F.format_string(f"{name} %s repeat a broker", _listed(column)),
        )

    effective = F.least(F.col("min_isr"), F.size(replicas))
    clauses = F.array(
        repeats("replicas", replicas),
        repeats("ISR", isr),
        repeats("ELR", elr),
        F.when(
            F.size(F.array_except(isr, replicas)) > 0,
            F.format_string("ISR %s not within replicas %s", _listed(isr), _listed(replicas)),
        ),
        F.when(
            F.size(F.array_except(elr, replicas)) > 0,
            F.format_string("ELR %s not within replicas %s", _listed(elr), _listed(replicas)),
        ),
        F.when(
            F.arrays_overlap(isr, elr), F.format_string("ISR %s and ELR %s share a broker", _listed(isr), _listed(elr))
        ),
        F.when(
            F.col("min_isr").isNotNull() & (F.size(elr) > 0) & (F.size(isr) >= effective),
            F.format_string(
                "ELR %s kept while ISR %s reaches min.insync.replicas %d", _listed(elr), _listed(isr), effective
            ),
        ),
    )
    broken = _changes(lake_events).select(
        "event_id", "topic", "partition", F.explode(F.filter(clauses, lambda c: c.isNotNull())).alias("detail")
    )
    return broken.select(
        *finding_columns(
            "isr_elr_well_formed",
            topic=F.col("topic"),
            partition=F.col("partition"),
            events=F.array("event_id"),
            detail=F.col("detail"),
        )
    )


# -- A6 --------------------------------------------------------------------------------------------------------


def election_from_isr_or_elr(lake_events: DataFrame) -> DataFrame:
    """A6 CleanElectionSource (KIP-966's election order): a recorded election chose from the ISR before it (from
    the ELR for an elr election; from the ISR its own change left for a reassignment election) unless recorded as
    unclean or last_known_leader, and any leader change not so recorded (nor as reassignment) chose from the
    previous ISR or ELR (`hightide.audit.checks.metadata.election_from_isr_or_elr`).
    The committed PartitionChanged and LeaderElected of a partition's life are read together, in metadata order:
    each LeaderElected takes the state before from the latest PartitionChanged before it (its own decision's)."""
    key = ["topic", "life", "partition"]
    order = metadata_order(lake_events)
    both = order.where(F.col("type").isin(events.PartitionChanged.TYPE, events.LeaderElected.TYPE))
    parsed = both.withColumn("_p", payload_of(_ELECTION, [events.PartitionChanged.TYPE, events.LeaderElected.TYPE]))
    fields = [F.col("_p").getField(name).alias(name) for name in _ELECTION.fieldNames() if name != "topic"]
    rows = parsed.select("event_id", "type", "life", "topic", *ORDER, *fields)
    is_change = F.col("type") == events.PartitionChanged.TYPE
    same_kind = Window.partitionBy(*key, "type").orderBy(*ORDER)
    rows = rows.withColumns(
        {
            "prev_event_id": F.lag("event_id").over(same_kind),
            "prev_leader": F.lag("leader").over(same_kind),
            "prev_isr": F.lag("isr").over(same_kind),
            "prev_elr": F.lag("elr").over(same_kind),
        }
    )
    not_from_before = F.col("election").isin(*sorted(RECORDED_UNCLEAN | FROM_OWN_ISR))
    one_election = Window.partitionBy(*key, "leader_epoch", "leader")
    in_partition = Window.partitionBy(*key).orderBy(*ORDER)
    state = F.when(
        is_change, F.struct(F.col("prev_event_id").alias("id"), "prev_isr", "prev_elr", F.col("isr").alias("own_isr"))
    )
    rows = rows.withColumns(
        {
            "_unclean": F.max((~is_change & not_from_before).cast("int")).over(one_election),
            "_state": F.last(state, ignorenulls=True).over(in_partition),
        }
    )
    return _recorded_elections(rows.where(~is_change)).unionByName(_leader_changes(rows.where(is_change)))


_ELECTION: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("leader", T.IntegerType(), True),
        T.StructField("leader_epoch", T.IntegerType(), True),
        T.StructField("isr", T.ArrayType(T.IntegerType()), True),
        T.StructField("elr", T.ArrayType(T.IntegerType()), True),
        T.StructField("election", T.StringType(), True),
    ]
)
"""The fields of PartitionChanged and LeaderElected that the election check reads (each type lacks some)."""


def _recorded_elections(elections: DataFrame) -> DataFrame:
    """Part (1): each LeaderElected against the state before its own PartitionChanged."""
    from_elr = F.col("election") == "elr"
    from_own = F.col("election").isin(*sorted(FROM_OWN_ISR))
    allowed = (
        F.when(from_elr, F.col("_state.prev_elr"))
        .when(from_own, F.col("_state.own_isr"))
        .otherwise(F.col("_state.prev_isr"))
    )
    outside = elections.where(
        (F.col("leader") != NO_LEADER)
        & ~F.col("election").isin(*sorted(RECORDED_UNCLEAN))
        & F.col("_state.id").isNotNull()
        & ~F.array_contains(allowed, F.col("leader"))
    )
    return outside.select(
        *finding_columns(
            "election_from_isr_or_elr",
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("leader"),
            events=F.array("_state.id", "event_id"),
            detail=F.format_string(
                "%s election of broker %d from outside the %s %s %s",
                "election",
                "leader",
                F.when(from_elr, F.lit("ELR")).otherwise(F.lit("ISR")),
                _listed(allowed),
                F.when(from_own, F.lit("its change left")).otherwise(F.lit("before it")),
            ),
        )
    )


def _leader_changes(changes: DataFrame) -> DataFrame:
    """Part (2): each leader change not recorded as unclean, against the ISR and ELR before it."""
    moved = changes.where(
        F.col("prev_event_id").isNotNull()
        & (F.col("leader") != NO_LEADER)
        & (F.col("leader") != F.col("prev_leader"))
        & (F.col("_unclean") == 0)
        & ~F.array_contains("prev_isr", F.col("leader"))
        & ~F.array_contains("prev_elr", F.col("leader"))
    )
    return moved.select(
        *finding_columns(
            "election_from_isr_or_elr",
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("leader"),
            events=F.array("prev_event_id", "event_id"),
            detail=F.format_string(
                "leader %d -> %d from outside ISR %s and ELR %s",
                "prev_leader",
                "leader",
                _listed(F.col("prev_isr")),
                _listed(F.col("prev_elr")),
            ),
        )
    )


CHECKS: Final[dict[str, Callable[[DataFrame], DataFrame]]] = {
    "one_leader_per_epoch": one_leader_per_epoch,
    "epochs_monotonic": epochs_monotonic,
    "leader_in_isr": leader_in_isr,
    "isr_elr_well_formed": isr_elr_well_formed,
    "election_from_isr_or_elr": election_from_isr_or_elr,
}
