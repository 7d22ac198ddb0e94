"""The Spark rebuild is the plain-Python rebuild: at many instants of simulated runs, the state the events up to
that instant leave is the same, replica by replica and partition by partition; and the timelines end in it.

Method: simulated runs with lossy crashes, divergence truncations, controller failovers, retention (log start
offsets moving, followers starting over), offline replicas and a topic deleted and created again are archived into a
real lake; `hightide.history.rebuild.states_at` folds, in one Spark job, the events with wall_ms <= each of several
instants, and each instant's state is compared with `hightide.audit.rebuild.rebuild` of those same events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType

from hightide.audit.rebuild import ClusterState, rebuild
from hightide.history.events import LAKE_SCHEMA, read_lake
from hightide.history.rebuild import (
    EPOCH_TIMELINE_SCHEMA,
    PARTITION_TIMELINE_SCHEMA,
    REPLICA_TIMELINE_SCHEMA,
    all_timelines,
    states_at,
    timelines,
)
from hightide.lake.layout import scan_lake
from hightide.protocol import events
from hightide.protocol.envelope import Envelope
from simulation.simulator import HEALED_STEPS_MAX, Simulation
from support.lake_history import write_lake
from unit.audit import test_rebuild_rules as rules

INSTANTS = 6
ReplicaRow = tuple[int, int, int, tuple[tuple[int, int], ...]]
PartitionRow = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int, int]


def _faulty_run(seed: int) -> list[Envelope]:
    simulation = Simulation(seed)
    simulation.history = []
    simulation.total_steps = 2_000
    for _ in range(2_000):
        simulation.step()
    simulation.heal()
    for _ in range(300):
        simulation.step()
    return simulation.history


def _deleted_and_created_again(seed: int) -> list[Envelope]:
    """A converged run whose topic is deleted (one broker down) and created again under its name."""
    simulation = Simulation(seed)
    simulation.history = []
    simulation.run(1_500)
    down = simulation.brokers[2]
    down.crash(lossy=False)
    simulation.restarts.append((simulation.now_ms + 400, down.broker_id))
    simulation.delete_topic()
    for _ in range(HEALED_STEPS_MAX):
        simulation.step()
        if down.alive and down.registered and not simulation.cores(down):
            break
    simulation.create_topic()
    for _ in range(400):
        simulation.step()
    assert simulation.history is not None
    return simulation.history


def _types(schema: StructType) -> list[tuple[str, str]]:
    return [(field.name, field.dataType.simpleString()) for field in schema.fields]


def _lake_rows(spark: SparkSession, lake: Path) -> DataFrame:
    return spark.read.schema(LAKE_SCHEMA).parquet(*[str(part.path) for part in scan_lake(lake).files])


def _instants(history: Sequence[Envelope]) -> list[int]:
    walls = sorted(envelope.wall_ms for envelope in history)
    return sorted({walls[(len(walls) - 1) * i // (INSTANTS - 1)] for i in range(INSTANTS)} | {walls[0] - 1})


def _expected(
    state: ClusterState,
) -> tuple[dict[tuple[str, int, int], ReplicaRow], dict[tuple[str, int], PartitionRow]]:
    replicas = {
        key: (r.log_end_offset, r.high_watermark, r.log_start_offset, r.epoch_entries)
        for key, r in state.replicas.items()
    }
    partitions = {
        key: (p.replicas, p.isr, p.elr, p.last_known_elr, p.leader, p.leader_epoch, p.partition_epoch)
        for key, p in state.partitions.items()
    }
    return replicas, partitions


def _assert_states_agree(spark: SparkSession, history: list[Envelope], lake: Path) -> None:
    write_lake(history, lake)
    instants = _instants(history)
    replica_frame, partition_frame = states_at(_lake_rows(spark, lake), instants)
    got_replicas: dict[int, dict[tuple[str, int, int], ReplicaRow]] = {instant: {} for instant in instants}
    for row in replica_frame.collect():
        entries = tuple((int(epoch), int(start)) for epoch, start in row.epoch_entries)
        got_replicas[row.instant][(row.topic, row.partition, row.replica)] = (
            row.log_end_offset,
            row.high_watermark,
            row.log_start_offset,
            entries,
        )
    got_partitions: dict[int, dict[tuple[str, int], PartitionRow]] = {instant: {} for instant in instants}
    for row in partition_frame.collect():
        got_partitions[row.instant][(row.topic, row.partition)] = (
            tuple(row.replicas),
            tuple(row.isr),
            tuple(row.elr),
            tuple(row.last_known_elr),
            row.leader,
            row.leader_epoch,
            row.partition_epoch,
        )
    for instant in instants:
        replicas, partitions = _expected(rebuild([e for e in history if e.wall_ms <= instant]))
        assert got_replicas[instant] == replicas, f"replicas at {instant}"
        assert got_partitions[instant] == partitions, f"partitions at {instant}"
    assert got_replicas[instants[-1]], "the last instant holds every event: replicas exist"


# Since KAFKA-9952 the first two faulty runs from seed 100 with all four kinds below (103 and 107 were before, and
# no longer have a replica offline): found by running seeds 100 up. Between them they have the module docstring's
# lossy crashes (102), divergence truncations, controller failovers (105), retention and offline replicas.
@pytest.mark.parametrize("seed", [102, 105])
def test_spark_state_equals_the_python_rebuild_at_every_instant_of_a_faulty_run(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    history = _faulty_run(seed)
    kinds = {envelope.type for envelope in history}
    assert {"LogTruncated", "ControllerElected", "LogStartOffsetAdvanced", "ReplicaOffline"} <= kinds, kinds
    _assert_states_agree(spark, history, tmp_path / "lake")


def test_a_replica_whose_log_could_not_be_created_or_opened_rebuilds_as_in_python(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The plain rebuild's ReplicaOffline rule for a replica not open (its storage refused to create the log, or to
    open it as the broker restarted: no LogOpened came) holds on Spark too: at every instant nothing of it is live,
    and a LogOpened after it starts the replica from what it says."""
    refused = events.ReplicaOffline(
        topic=rules.T, partition=0, replica=1, log_end_offset=0, error="KAFKA_STORAGE_ERROR", detail="CreateLog refused"
    )
    at_restart = dataclasses.replace(refused, replica=2, log_end_offset=3, detail="OpenLog refused")
    history = [
        *rules.emitted(rules.broker(1), 1_000, refused),
        *rules.emitted(rules.broker(2), 1_000, rules.opened(b=2), rules.appended(0, 2, b=2)),
        *rules.emitted(rules.broker(2, "b"), 2_000, at_restart),
        *rules.emitted(rules.broker(1), 3_000, rules.opened(), rules.appended(0, 1), first_sequence=1),
    ]
    assert rebuild(history).anomalies == ()
    _assert_states_agree(spark, history, tmp_path / "lake")


def test_a_topic_deleted_and_created_again_rebuilds_to_its_second_life(spark: SparkSession, tmp_path: Path) -> None:
    history = _deleted_and_created_again(7)
    _assert_states_agree(spark, history, tmp_path / "lake")
    _, partitions = timelines(read_lake(spark, tmp_path / "lake"))
    lives = {row.life for row in partitions.select("life").distinct().collect()}
    assert lives == {0, 1}


def test_timelines_have_their_columns_and_end_in_the_final_state(spark: SparkSession, tmp_path: Path) -> None:
    """Given a faulty run's lake, the timelines have exactly their declared columns, one replica row per replica
    change, and each replica's last row is the state the whole history leaves."""
    history = _faulty_run(107)
    write_lake(history, tmp_path / "lake")
    replica_timeline, partition_timeline, epoch_timeline = all_timelines(read_lake(spark, tmp_path / "lake"))
    assert _types(replica_timeline.schema) == _types(REPLICA_TIMELINE_SCHEMA)
    assert _types(partition_timeline.schema) == _types(PARTITION_TIMELINE_SCHEMA)
    assert _types(epoch_timeline.schema) == _types(EPOCH_TIMELINE_SCHEMA)
    rows = replica_timeline.collect()
    changes = (
        events.LogOpened,
        events.RecordsAppended,
        events.LeaderEpochStarted,
        events.HighWatermarkAdvanced,
        events.LogTruncated,
        events.LeaderEpochsTruncated,
        events.LogStartOffsetAdvanced,
        events.LogDeleted,
        events.ReplicaOffline,
    )
    assert len(rows) == sum(isinstance(e.event, changes) for e in history)
    last: dict[tuple[str, int, int], tuple[int, Row]] = {}
    position = {
        f"{e.emitter.service}:{e.emitter.emitter_id}:{e.emitter.incarnation}:{e.sequence}": i
        for i, e in enumerate(history)
    }
    for row in rows:
        key = (row.topic, row.partition, row.replica)
        if key not in last or position[row.event_id] > last[key][0]:
            last[key] = (position[row.event_id], row)
    final = rebuild(history)
    live = {key: held for key, (_, held) in last.items() if held.online}
    assert set(live) == set(final.replicas)
    for key, held in live.items():
        state = final.replicas[key]
        assert (held.log_end_offset, held.high_watermark, held.log_start_offset) == (
            state.log_end_offset,
            state.high_watermark,
            state.log_start_offset,
        )
    held_entries: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for entry in epoch_timeline.where("until_event_id IS NULL").collect():
        held_entries.setdefault((entry.topic, entry.partition, entry.replica), []).append(
            (entry.start_offset, entry.leader_epoch)
        )
    for key, state in final.replicas.items():
        assert tuple((epoch, start) for start, epoch in sorted(held_entries.get(key, []))) == state.epoch_entries, key
    committed = [e for e in history if isinstance(e.event, events.PartitionChanged)]
    assert 0 < partition_timeline.count() <= len(committed)
