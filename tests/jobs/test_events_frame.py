"""The lake read by Spark is the history the plain-Python audit reads: same events, same ids, same emitter order.

Method: a simulated run's history is archived into a real lake with the archiver's writer (some of it twice, as an
at-least-once relay may store it); Spark reads it with the explicit schema, and its `position` order per emitter
and `event_id`s are compared with `hightide.audit.history.History`.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from hightide.audit.history import History
from hightide.history.events import LAKE_SCHEMA, incarnation_bounds, of_type, read_lake, with_order
from hightide.lake.layout import scan_lake
from hightide.protocol import events
from hightide.protocol.envelope import Envelope
from simulation.simulator import Simulation
from support.lake_history import write_lake


def test_spark_reads_each_emitter_in_the_audits_order(spark: SparkSession, tmp_path: Path) -> None:
    history = _simulated(1_500)
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
    """`read_lake` skips the copy search (a shuffle of every row) only when `incarnation_bounds` finds no emitter
    incarnation and sequence stored twice, and orders by the bounds it found; the rows it gives are then those of the
    full path."""
    history = _simulated(1_500)

    clean = _raw(spark, write_lake(history, tmp_path / "clean"))
    copied = _raw(spark, write_lake([*history, history[5]], tmp_path / "copied"))
    bounds = incarnation_bounds(clean)
    assert not bounds.copies
    assert incarnation_bounds(copied).copies

    columns = ["event_id", "incarnation_start", "position", "clashing", "type", "payload"]
    short = with_order(clean, bounds).select(*columns).collect()
    full = with_order(clean).select(*columns).collect()
    assert len(short) == len(history)
    assert sorted(short) == sorted(full)


def test_a_copy_is_found_where_a_gap_evens_out_the_count(spark: SparkSession, tmp_path: Path) -> None:
    """An incarnation with one event stored twice and another missing has as many rows as its sequences span: the
    copy is found all the same (the distinct sequences are counted), and the full path keeps one copy."""
    history = _simulated(1_500)
    own = [i for i, e in enumerate(history) if e.emitter == history[0].emitter]
    copied, missing = own[3], own[4]
    stored = [e for i, e in enumerate(history) if i != missing] + [history[copied]]

    rows = _raw(spark, write_lake(stored, tmp_path / "lake"))
    bounds = incarnation_bounds(rows)
    assert bounds.copies
    ordered = with_order(rows, bounds).select("event_id").collect()
    assert len(ordered) == len(history) - 1


def _simulated(steps: int) -> list[Envelope]:
    simulation = Simulation(7)
    simulation.history = []
    simulation.run(steps)
    return simulation.history


def _raw(spark: SparkSession, lake: Path) -> DataFrame:
    return spark.read.schema(LAKE_SCHEMA).parquet(*[str(part.path) for part in scan_lake(lake).files])


def test_a_payload_reads_as_typed_columns(spark: SparkSession, tmp_path: Path) -> None:
    history = _simulated(600)
    write_lake(history, tmp_path / "lake")

    frame = of_type(read_lake(spark, tmp_path / "lake"), events.PartitionChanged)
    changed = frame.orderBy("service", "emitter_id", "position").collect()

    held = [event for _, event in History.of(history).of_type(events.PartitionChanged)]
    assert [(r.topic, r.partition, tuple(r.isr), r.leader_epoch, r.partition_epoch) for r in changed] == [
        (e.topic, e.partition, e.isr, e.leader_epoch, e.partition_epoch) for e in held
    ]
