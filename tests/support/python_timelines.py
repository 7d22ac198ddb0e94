"""The replica and partition timelines of a small history, folded in plain Python by `hightide.audit.rebuild`'s rules
and handed to Spark with the columns `hightide.history.rebuild.timelines` produces: a second producer of the same
columns, so that a consumer of the timelines (the report) is shown to rely on the columns alone.

One replica row per replica-changing event (its state after it; `online` false once a ReplicaOffline or LogDeleted
took it out, with the values it last had), one partition row per committed PartitionChanged, in the audit's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession

from hightide.audit.history import History
from hightide.audit.rebuild import _REPLICA_CHANGES, _PartitionFold, _ReplicaFold
from hightide.protocol import events
from hightide.protocol.envelope import Envelope

REPLICA_TIMELINE_SCHEMA = (
    "topic string, partition int, replica int, wall_ms bigint, event_id string, event_type string, "
    "log_start_offset bigint, log_end_offset bigint, high_watermark bigint, epoch_entries array<array<bigint>>, "
    "online boolean"
)
PARTITION_TIMELINE_SCHEMA = (
    "topic string, partition int, wall_ms bigint, event_id string, reason string, replicas array<int>, "
    "isr array<int>, elr array<int>, last_known_elr array<int>, leader int, leader_epoch int, partition_epoch int, "
    "life int"
)


def python_timelines(
    spark: SparkSession, envelopes: Sequence[Envelope]
) -> Callable[[DataFrame], tuple[DataFrame, DataFrame]]:
    """A `timelines` for `hightide.history.report.report_data` that ignores the lake's frame and folds `envelopes`."""
    history = History.of(envelopes)
    replica_rows = _replica_rows(history)
    partition_rows = _partition_rows(history)

    def timelines(frame: DataFrame) -> tuple[DataFrame, DataFrame]:
        del frame
        return (
            spark.createDataFrame(replica_rows, REPLICA_TIMELINE_SCHEMA),
            spark.createDataFrame(partition_rows, PARTITION_TIMELINE_SCHEMA),
        )

    return timelines


def _replica_rows(history: History) -> list[tuple[object, ...]]:
    fold = _ReplicaFold([])
    last: dict[tuple[str, int, int], tuple[int, int, int, list[list[int]]]] = {}
    rows: list[tuple[object, ...]] = []
    for envelope in history.all():
        event = envelope.event
        fold.apply(envelope)
        if not isinstance(event, (*_REPLICA_CHANGES, events.ReplicaOffline, events.LogDeleted)):
            continue
        key = (event.topic, event.partition, event.replica)  # type: ignore[attr-defined]
        replica = fold.open.get(key)
        if replica is not None:
            entries = [[epoch, offset] for epoch, offset in replica.epoch_entries]
            last[key] = (replica.log_start_offset, replica.log_end_offset, replica.high_watermark, entries)
        values = last.get(key, (0, 0, 0, []))
        rows.append((*key, envelope.wall_ms, History.id(envelope), event.TYPE, *values, replica is not None))
    return rows


def _partition_rows(history: History) -> list[tuple[object, ...]]:
    fold = _PartitionFold([])
    lives: dict[str, int] = {}
    rows: list[tuple[object, ...]] = []
    for envelope in history.controller:
        event = envelope.event
        if isinstance(event, events.TopicCreated):
            lives[event.topic] = lives.get(event.topic, 0) + 1
        fold.apply(envelope)
        if not isinstance(event, events.PartitionChanged):
            continue
        state = fold.partitions.get((event.topic, event.partition))
        if state is None:
            continue
        rows.append(
            (
                event.topic,
                event.partition,
                envelope.wall_ms,
                History.id(envelope),
                event.TYPE,
                list(state.replicas),
                list(state.isr),
                list(state.elr),
                list(state.last_known_elr),
                state.leader,
                state.leader_epoch,
                state.partition_epoch,
                lives.get(event.topic, 0),
            )
        )
    return rows
