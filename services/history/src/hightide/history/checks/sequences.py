"""The event log's own completeness on Spark: `emitter_sequences_contiguous` over `read_lake`'s DataFrame.

Room: services/history. The twin of `hightide.audit.checks.sequences` (the specification), with the same findings
row for row: the gaps come from each emitter incarnation's sequences in order (`lag` over a window), the clashes
from `read_lake`'s `clashing` column (the lake's rows before exact duplicates were dropped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from hightide.history.findings import finding_columns

NAME: Final = "emitter_sequences_contiguous"


def emitter_sequences_contiguous(events: DataFrame) -> DataFrame:
    """Each emitter incarnation's events carry sequences 0, 1, 2, ... with no gap, and no sequence holds two
    different events (an exact duplicate is allowed: at-least-once relay).

    Source: ARCHITECTURE.md §5 ("per-emitter sequence with no gaps") and reliability.md §8.1. One finding per gap
    (the events either side; the missing sequences in `detail`), one per clashing sequence (its event id).
    """
    return _gaps(events).unionByName(_clashes(events))


def _gaps(events: DataFrame) -> DataFrame:
    """The gaps, found only in the incarnations that have one: the sequences of an incarnation (distinct, as
    `read_lake` keeps one event per sequence) are 0..n-1 exactly when the least is 0 and the greatest n-1, which an
    aggregate tells without sorting; only the other incarnations' events (few: a broadcast semi-join picks them)
    are ordered to find where their gaps are."""
    key = ["service", "emitter_id", "incarnation"]
    counted = events.groupBy(*key).agg(
        F.count("*").alias("_n"), F.min("sequence").alias("_least"), F.max("sequence").alias("_greatest")
    )
    gapped = counted.where((F.col("_least") != 0) | (F.col("_greatest") != F.col("_n") - 1)).select(*key)
    incarnation = Window.partitionBy(*key).orderBy("sequence")
    previous = events.join(F.broadcast(gapped), key, "left_semi").select(
        "service",
        "emitter_id",
        "incarnation",
        "sequence",
        "event_id",
        F.lag("sequence").over(incarnation).alias("previous_sequence"),
        F.lag("event_id").over(incarnation).alias("previous_id"),
    )
    first_missing = F.coalesce(F.col("previous_sequence") + 1, F.lit(0).cast("bigint"))
    gaps = previous.where(F.col("sequence") > first_missing).withColumn("first_missing", first_missing)
    detail = F.format_string(
        "events %d..%d of %s %d incarnation %s are missing",
        F.col("first_missing"),
        F.col("sequence") - 1,
        F.col("service"),
        F.col("emitter_id"),
        F.col("incarnation"),
    )
    either_side = F.array_compact(F.array(F.col("previous_id"), F.col("event_id")))
    return gaps.select(*finding_columns(NAME, events=either_side, detail=detail))


def _clashes(events: DataFrame) -> DataFrame:
    detail = F.format_string(
        "%s %d incarnation %s stored different events under sequence %d",
        F.col("service"),
        F.col("emitter_id"),
        F.col("incarnation"),
        F.col("sequence"),
    )
    clashing = events.where(F.col("clashing"))
    return clashing.select(*finding_columns(NAME, events=F.array(F.col("event_id")), detail=detail))


CHECKS: Final[dict[str, Callable[[DataFrame], DataFrame]]] = {NAME: emitter_sequences_contiguous}
