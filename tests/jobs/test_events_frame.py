"""The lake read by Spark is the history the plain-Python audit reads: same events, same ids, same emitter order.

Method: a simulated run's history is archived into a real lake with the archiver's writer (some of it twice, as an
at-least-once relay may store it); Spark reads it with the explicit schema, and its `position` order per emitter
and `event_id`s are compared with `hightide.audit.history.History`.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from hightide.audit.history import History
from hightide.history.events import LAKE_SCHEMA, holds_copies, of_type, read_lake, with_order
from hightide.lake.layout import scan_lake
from hightide.protocol import events
from simulation.simulator import Simulation
from support.lake_history import write_lake


def test_spark_reads_each_emitter_in_the_audits_order(spark: SparkSession, tmp_path: Path) -> None:
    simulation = Simulation(7)
    simulation.history = []
    simulation.run(1_500)
    history = simulation.history
    write_lake([*history, *history[:40]], tmp_path / "lake")  # the first 40 stored twice

    frame = read_lake(spark, tmp_path / "lake")
    rows = frame.select("service", "emitter_id", "position", "event_id").collect()

    expected = History.of(history)
    by_emitter: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for row in rows:
        by_emitter.setdefault((row.service, row.emitter_id), []).append((row.position, row.event_id))
    spark_order = {key: [event_id for _, event_id in sorted(pairs)] for key, pairs in by_emitter.items()}
    assert spark_order == {key: [History.id(e) for e in stream] for key, stream in expected.streams.items()}


def test_a_lake_without_copies_is_ordered_without_looking_for_them_and_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    """`read_lake` skips the copy search (a shuffle of every row) only when `holds_copies` says no row repeats an
    emitter incarnation and sequence; the rows it gives are then those of the full path."""
    simulation = Simulation(7)
    simulation.history = []
    simulation.run(1_500)
    history = simulation.history

    def raw(lake: Path) -> DataFrame:
        return spark.read.schema(LAKE_SCHEMA).parquet(*[str(part.path) for part in scan_lake(lake).files])

    clean = raw(write_lake(history, tmp_path / "clean"))
    copied = raw(write_lake([*history, history[5]], tmp_path / "copied"))
    assert not holds_copies(clean)
    assert holds_copies(copied)

    columns = ["event_id", "incarnation_start", "position", "clashing", "type", "payload"]
    short = with_order(clean, copies=False).select(*columns).collect()
    full = with_order(clean, copies=True).select(*columns).collect()
    assert len(short) == len(history)
    assert sorted(short) == sorted(full)


def test_a_payload_reads_as_typed_columns(spark: SparkSession, tmp_path: Path) -> None:
    simulation = Simulation(7)
    simulation.history = []
    simulation.run(600)
    write_lake(simulation.history, tmp_path / "lake")

    frame = of_type(read_lake(spark, tmp_path / "lake"), events.PartitionChanged)
    changed = frame.orderBy("service", "emitter_id", "position").collect()

    held = [event for _, event in History.of(simulation.history).of_type(events.PartitionChanged)]
    assert [(r.topic, r.partition, tuple(r.isr), r.leader_epoch, r.partition_epoch) for r in changed] == [
        (e.topic, e.partition, e.isr, e.leader_epoch, e.partition_epoch) for e in held
    ]
