"""The lake read by Spark is the history the plain-Python audit reads: same events, same ids, same emitter order.

Method: a simulated run's history is archived into a real lake with the archiver's writer (some of it twice, as an
at-least-once relay may store it); Spark reads it with the explicit schema, and its `position` order per emitter
and `event_id`s are compared with `hightide.audit.history.History`.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from hightide.audit.history import History
from hightide.history.events import of_type, read_lake
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
