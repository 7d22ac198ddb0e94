"""The whole Spark audit: `run_audit(spark, lake)` reads the lake once, runs every check, and collects the findings.

Room: services/history. The twin of `hightide.audit.audit` (the specification); both return the same sorted
`Finding`s. Every file of the lake is checked to be ours before Spark reads it (`hightide.lake.count_events` opens
each footer), so a stray file is a one-line `NotOurFile`, not a Spark stack trace.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from pyspark.sql import DataFrame, SparkSession

from hightide.audit.findings import Finding
from hightide.history.checks import clients, commits, groups, high_watermark, metadata
from hightide.history.checks.registry import all_checks
from hightide.history.events import event_id_column, ordered_lake
from hightide.history.findings import FINDINGS_SCHEMA, collect_findings
from hightide.lake import LakeError, count_events


def run_audit(spark: SparkSession, lake: Path, *, cache: bool | None = None) -> list[Finding]:
    """Every finding of every check over the lake's history, sorted. Raises LakeError (or NotOurFile) when the lake
    cannot be read as ours, before Spark reads anything. `cache`: whether the checks read the lake from a cache
    (`prepare`); by default where it holds copies or is small, as `prepare` says."""
    size = check_lake(lake)
    settings = {SHUFFLE_PARTITIONS: str(partitions_for(size, spark)), HUGE_METHOD_LIMIT: str(HOTSPOT_HUGE_METHOD)}
    with session_settings(spark, settings):
        ordered = ordered_lake(spark, lake)
        if cache is None:
            cache = ordered.copies or size <= EVENTS_PER_PARTITION
        cached = prepare(ordered.frame) if cache else None
        events = with_event_ids(cached) if cached is not None else ordered.frame
        try:
            return collect_findings(audit_frame(events))
        finally:
            commits.forget(events)
            metadata.forget(events)
            groups.forget(events)
            clients.forget(events)
            high_watermark.forget(events)
            if cached is not None:
                cached.unpersist()


EVENTS_PER_PARTITION: Final = 125_000
"""How many of the lake's events an audit gives each shuffle partition (at least one partition, at most the
session's own `spark.sql.shuffle.partitions`)."""


def partitions_for(size: int, spark: SparkSession) -> int:
    """The audit's shuffle partitions for a lake of `size` events: one per `EVENTS_PER_PARTITION`, within 1 and the
    session's setting.

    A small history (a test's, a demo's: hundreds to thousands of events) gets one partition. Its cost is all per
    stage and per task, not per event, and with one partition Spark also needs fewer exchanges: a frame in one
    partition is already clustered by any key, so a window or join over another key reads it where it is (a clean
    simulated history's audit: 285 stages and 1,152 tasks -> 232 and 308). A million events keep the session's
    8 (bench: the two cores stay busy)."""
    most = int(spark.conf.get("spark.sql.shuffle.partitions") or "1")
    return max(1, min(most, math.ceil(size / EVENTS_PER_PARTITION)))


SHUFFLE_PARTITIONS: Final = "spark.sql.shuffle.partitions"
HUGE_METHOD_LIMIT: Final = "spark.sql.codegen.hugeMethodLimit"
HOTSPOT_HUGE_METHOD: Final = 8_000
"""The audit's `spark.sql.codegen.hugeMethodLimit`: HotSpot never compiles a method over 8,000 bytes of bytecode
(`-XX:+DontCompileHugeMethods`, its default) and interprets it on every call, so Spark is told to give up fusing a
stage into generated code (falling back to its operators one by one) rather than make such a method; Spark's own
documentation suggests this value on HotSpot. Reading the lake's typed payload columns instead of parsing JSON
(`from_json` cannot be fused, which kept the stages' methods small) made the replica stream's map side one such
method. On the 10M-event bench lake (2026-12-03, local[2], quiet, each after three rebuilds in its JVM): the audit
317.2 s with Spark's default (65,535) and 244.9 s with this, against 269.6 s for the code before lake format 2 on
the same history in format 1 (its JSON parsed). Compiling the huge methods instead (`-XX:-DontCompileHugeMethods`,
a JVM flag) gave the audit 225.9 s but slowed the rebuild's windows in the same JVM (its warm runs 29.7-30.7 ->
39.2-46.9 s), so it is not used."""


@contextlib.contextmanager
def session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """The SQL `settings` set for the block, the session's own values restored after (a long-lived session, like
    the tests', audits many histories and runs other jobs)."""
    held = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in held.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


NOT_CACHED: Final = ("stream_sequence", "time", "mono_ns", "version", "payload", "event_id")
"""`read_lake`'s columns the audit does not keep in its cache: no check reads the first five (a payload's fields are
read from its type's typed column), and `event_id` is made again from the emitter columns by `with_event_ids` as
each check reads its rows."""


def prepare(events: DataFrame) -> DataFrame:
    """`read_lake`'s frame as the checks read it (give it `with_event_ids` first) where the lake holds copies of
    events or is small (one shuffle partition's worth, `EVENTS_PER_PARTITION`): cached without `NOT_CACHED`, each
    partition's rows sorted by `type`. Otherwise the checks read the lake itself: each read is a scan of its files
    (the columns a check names, every row) and a broadcast join with its incarnations' bounds.

    Measured (2026-12-01, local[2], `run_audit` in a fresh JVM, then again in it): on the 10M-event bench lake
    building this cache took 21-24 s (about 12 s of it the in-memory columns, 3 s the sort), while a check's read
    of one type from it saved 0.3-0.5 s against reading the lake: the audit took 208 s with it and 179 s without.
    On the 1M lake, 50.0 / 36.6 s with it and 51.1 / 41.0 s without; the tests' histories (hundreds to thousands
    of events, many audits in one JVM) took 8% longer without it, their cost being each read's fixed part. With
    copies, each read of the lake would search it for them again (a shuffle of every row), so the cache stays.

    Every check starts by filtering a few event types. The cache keeps each column's least and greatest value per
    batch of rows, and Spark skips a batch whose `type` range cannot match the filter, so with the rows sorted by
    type a check decodes the batches of its types only, not every payload of the lake.

    Building the cache costs per column and row: on the 10M-event bench lake (2026-11-30, local[2]) reading,
    ordering and caching took 91 s with every column and 69 s without these five (the ordering alone about 40 s),
    and the cache held 1.1 GB against 0.8 GB."""
    return events.drop(*NOT_CACHED).sortWithinPartitions("type").cache()


def with_event_ids(cached: DataFrame) -> DataFrame:
    """`prepare`'s cached frame with `event_id` again (`events.event_id_column`), computed on the rows a check reads."""
    return cached.withColumn("event_id", event_id_column())


def check_lake(lake: Path) -> int:
    """How many events the lake holds; raises LakeError when there is no lake there, a file in it is not ours, or
    it holds no event (an audit of nothing would pass: a mistyped path must not look like a clean history)."""
    if not lake.is_dir():
        raise LakeError(f"no lake at {lake} (expected a directory the archiver or `hightide events export` wrote)")
    events = count_events(lake)
    if events == 0:
        raise LakeError(f"the lake at {lake} holds no events")
    return events


def audit_frame(events: DataFrame) -> DataFrame:
    """The union of every check's findings over `read_lake`'s DataFrame (each check reads it: `run_audit` caches it
    where that pays, see `prepare`)."""
    frames = [check(events).select(*FINDINGS_SCHEMA.fieldNames()) for check in all_checks().values()]
    return functools.reduce(DataFrame.unionByName, frames)
