"""Event-sourcing snapshots of the rebuilt state at hour boundaries, and the rebuild from the latest one.

Room: services/history. A snapshot at hour N (boundary H = N hours since the epoch) holds what the fold of every
event with wall_ms < H needs to go on exactly:

```
LAKE/_snapshots/hour=N/_manifest.json     the lake files it folded (hour directories < N), written last
LAKE/_snapshots/hour=N/replicas/          each live replica's LEO, HW, log start offset and epoch cache
LAKE/_snapshots/hour=N/metadata/          the controller-side events themselves (lake rows: every event of
                                          the controller types and of the stamped decision types, and every
                                          event a controller emitted): few,
                                          and the partition fold and the controller's lists (offline replicas,
                                          abandoned intents) must see them all (a later takeover abandons an
                                          earlier controller's intents after the fact)
LAKE/_snapshots/hour=N/incarnations/      each emitter incarnation's first wall_ms and last sequence before H
```

The manifest says the snapshot's `format`: one of an older format (metadata of the controller types only) is not
used, and the job writes it again.

`_snapshots` is hidden (`hightide.lake.layout.scan_lake` reads only `date=` directories), so the lake stays valid.
The job is idempotent: a snapshot whose manifest names exactly the lake's files before its hour is kept; any other
is written again (into a hidden temporary directory, then renamed).

The rebuild at T reads the latest valid snapshot at or before T and only the hour directories from its hour to T's
(pruned by name): the replica fold starts from the snapshot's replicas (each as if opened with that state), the
partition fold runs over the stored controller events and the new ones, and emitter order uses the stored
incarnation starts. Limits, where a snapshot is not used (the rebuild falls back to an earlier one, or to the whole
history, and says so):
- late events: a file in an hour directory before N that the manifest does not name (an hour written after its
  snapshot) makes the snapshot stale;
- a wall clock that went back across H: an event at or after H that precedes, in its incarnation's sequence, an
  event before H (the fold before H would have had to see it);
- a replica's events from two emitters (an anomaly the plain fold reports) are folded per emitter after the
  snapshot, not stream after stream.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.history.events import LAKE_SCHEMA
from hightide.history.rebuild import (
    CONTROLLER_TYPES,
    EPOCHS_TYPE,
    STAMPED_TYPES,
    Rebuilt,
    final_replicas,
    final_states,
    fold_events,
    rebuild_frames,
    replica_timeline,
)
from hightide.lake.layout import HOUR_MS, PartFile, scan_lake
from hightide.protocol import events as ev

SNAPSHOTS_DIR: Final = "_snapshots"
SNAPSHOT_FORMAT: Final = 2  # 2: metadata holds the controller service's events too (1 had no `format` key)
CONTROLLER_SERVICE: Final = "controller"
MANIFEST: Final = "_manifest.json"
_HOUR_DIR: Final = re.compile(r"hour=(\d+)")
_LAKE_HOUR: Final = re.compile(r"date=(\d{4})-(\d{2})-(\d{2})/hour=(\d{2})")
REPLICAS_SCHEMA: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("replica", T.IntegerType(), True),
        T.StructField("log_start_offset", T.LongType(), True),
        T.StructField("log_end_offset", T.LongType(), True),
        T.StructField("high_watermark", T.LongType(), True),
        T.StructField("epoch_entries", EPOCHS_TYPE, True),
    ]
)
INCARNATIONS_SCHEMA: Final = T.StructType(
    [
        T.StructField("service", T.StringType(), False),
        T.StructField("emitter_id", T.IntegerType(), False),
        T.StructField("incarnation", T.StringType(), False),
        T.StructField("incarnation_start", T.LongType(), True),
        T.StructField("last_sequence", T.LongType(), True),
    ]
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    hour: int
    directory: Path
    files: frozenset[str]  # the lake files folded, relative to the lake
    format: int = SNAPSHOT_FORMAT

    @property
    def boundary_ms(self) -> int:
        return self.hour * HOUR_MS


@dataclass(frozen=True, slots=True)
class Snapshotted:
    replicas: DataFrame
    metadata: DataFrame
    incarnations: DataFrame


# -- the lake's files by hour -------------------------------------------------------------------------------------


def lake_files(lake: Path) -> dict[int, list[PartFile]]:
    """The complete batches' files by hour since the epoch (from their directory names)."""
    by_hour: dict[int, list[PartFile]] = {}
    for part in scan_lake(lake).files:
        relative = part.path.parent.relative_to(lake).as_posix()
        match = _LAKE_HOUR.fullmatch(relative)
        assert match is not None, relative
        year, month, day, hour = (int(g) for g in match.groups())
        days = (_days_from_civil(year, month, day) * 24) + hour
        by_hour.setdefault(days, []).append(part)
    return dict(sorted(by_hour.items()))


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def read_rows(spark: SparkSession, lake: Path, parts: Sequence[PartFile]) -> DataFrame:
    if not parts:
        return spark.createDataFrame([], LAKE_SCHEMA)
    return spark.read.schema(LAKE_SCHEMA).parquet(*[str(part.path) for part in parts])


def _relative(lake: Path, parts: Sequence[PartFile]) -> frozenset[str]:
    return frozenset(part.path.relative_to(lake).as_posix() for part in parts)


# -- reading and checking snapshots ---------------------------------------------------------------------------------


def snapshots(lake: Path) -> list[Snapshot]:
    """Every snapshot with a manifest, oldest first."""
    found = []
    root = lake / SNAPSHOTS_DIR
    if not root.is_dir():
        return []
    for directory in root.iterdir():
        match = _HOUR_DIR.fullmatch(directory.name)
        manifest = directory / MANIFEST
        if match is None or not manifest.is_file():
            continue
        written = json.loads(manifest.read_text())
        found.append(Snapshot(int(match.group(1)), directory, frozenset(written["files"]), written.get("format", 1)))
    return sorted(found, key=lambda snapshot: snapshot.hour)


def latest_valid(lake: Path, at_ms: int, by_hour: dict[int, list[PartFile]]) -> Snapshot | None:
    """The latest snapshot whose boundary is at or before `at_ms` + 1 and whose manifest names exactly the lake's
    files before its hour (none arrived late)."""
    for snapshot in reversed(snapshots(lake)):
        if snapshot.boundary_ms > at_ms + 1:
            continue
        before = [part for hour, parts in by_hour.items() if hour < snapshot.hour for part in parts]
        if snapshot.format == SNAPSHOT_FORMAT and _relative(lake, before) == snapshot.files:
            return snapshot
    return None


def load(spark: SparkSession, snapshot: Snapshot) -> Snapshotted:
    directory = snapshot.directory
    return Snapshotted(
        spark.read.schema(REPLICAS_SCHEMA).parquet(str(directory / "replicas")),
        spark.read.schema(LAKE_SCHEMA).parquet(str(directory / "metadata")),
        spark.read.schema(INCARNATIONS_SCHEMA).parquet(str(directory / "incarnations")),
    )


# -- folding on from a snapshot -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Continued:
    frames: Rebuilt
    events: DataFrame  # the ordered events the folds read


def continued(rows: DataFrame, held: Snapshotted | None, boundary_ms: int, persist: bool = False) -> Continued:
    """The timelines of the snapshot's state followed by `rows` (lake rows at or after its boundary); `persist`
    keeps the ordered events for both folds (the state at an instant computes both)."""
    events = _continued_events(rows, held, boundary_ms)
    if persist:
        events = events.persist(StorageLevel.MEMORY_AND_DISK)
    return Continued(rebuild_frames(events), events)


def _continued_events(rows: DataFrame, held: Snapshotted | None, boundary_ms: int) -> DataFrame:
    """The ordered events of `continued`'s folds: `rows` and, after a snapshot, its controller events and its
    replicas as LogOpened rows."""
    if held is None:
        return ordered_with_starts(rows, None)
    events = ordered_with_starts(rows.unionByName(held.metadata), held.incarnations)
    return events.unionByName(_opened_rows(held.replicas, events, boundary_ms))


def ordered_with_starts(rows: DataFrame, incarnations: DataFrame | None) -> DataFrame:
    """`hightide.history.rebuild.fold_events` (the events the folds read, in order), where an incarnation a snapshot
    saw starts when the snapshot says."""
    return fold_events(rows, (), incarnations)


def _opened_rows(replicas: DataFrame, like: DataFrame, boundary_ms: int) -> DataFrame:
    """Each snapshot replica as a LogOpened with its state, ahead of every event of that replica."""
    payload = F.to_json(
        F.struct(
            "topic",
            "partition",
            "replica",
            "log_start_offset",
            "log_end_offset",
            "high_watermark",
            F.col("epoch_entries").alias("leader_epochs"),
            F.lit("snapshot").alias("reason"),
        )
    )
    values: dict[str, Column] = {
        "service": F.lit(""),  # before every emitter of the replica's events (REPLICA_ORDER)
        "emitter_id": F.col("replica"),
        "incarnation": F.lit("snapshot"),
        "sequence": F.lit(-1).cast("long"),
        "wall_ms": F.lit(boundary_ms - 1).cast("long"),
        "type": F.lit(ev.LogOpened.TYPE),
        "payload": payload,
        "position": F.lit(-1),
        "event_id": F.lit(f"snapshot:{boundary_ms // HOUR_MS}"),
    }
    columns = [
        (values[name] if name in values else F.col(name) if name in REPLICAS_SCHEMA.fieldNames() else F.lit(None))
        .cast(like.schema[name].dataType)
        .alias(name)
        for name in like.columns
    ]
    return replicas.select(*columns)


def _controller_side() -> Column:
    """The lake rows a snapshot keeps whole: the controller types' (the partition fold's), the stamped decisions'
    (the abandoned intents') and every event of the controller service (it emits the decisions: a snapshot of
    format 2 written before the stamped types were named here holds them through it)."""
    return F.col("type").isin(*CONTROLLER_TYPES, *STAMPED_TYPES) | (F.col("service") == CONTROLLER_SERVICE)


def clock_went_back(rows: DataFrame, held: Snapshotted) -> bool:
    """An event read after the boundary that its incarnation's events before it should have followed."""
    last = held.incarnations.select("service", "emitter_id", "incarnation", "last_sequence")
    joined = rows.join(F.broadcast(last), ["service", "emitter_id", "incarnation"])
    return bool(joined.where(F.col("sequence") < F.col("last_sequence")).limit(1).count())


# -- writing snapshots ----------------------------------------------------------------------------------------------


def write_snapshots(spark: SparkSession, lake: Path) -> list[int]:
    """A snapshot at each hour boundary of the lake (between its first and last hour directories), each folded on
    from the one before; returns the hours written (valid ones are kept as they are)."""
    by_hour = lake_files(lake)
    hours = list(by_hour)
    written: list[int] = []
    held: Snapshotted | None = None
    previous = hours[0] if hours else 0
    for boundary in hours[1:]:
        before = [part for hour, parts in by_hour.items() if hour < boundary for part in parts]
        existing = next((s for s in snapshots(lake) if s.hour == boundary), None)
        if existing is not None and existing.format == SNAPSHOT_FORMAT and existing.files == _relative(lake, before):
            held, previous = load(spark, existing), boundary
            continue
        step = [part for hour, parts in by_hour.items() if previous <= hour < boundary for part in parts]
        held = _write(spark, lake, boundary, read_rows(spark, lake, step), held, _relative(lake, before))
        previous = boundary
        written.append(boundary)
    return written


def _write(
    spark: SparkSession, lake: Path, hour: int, rows: DataFrame, held: Snapshotted | None, files: frozenset[str]
) -> Snapshotted:
    # Only the replica fold: the partition fold's controller side would be ordered for nothing.
    replicas = final_replicas(*replica_timeline(_continued_events(rows, held, hour * HOUR_MS)))
    metadata = rows.where(_controller_side())
    seen = rows.groupBy("service", "emitter_id", "incarnation").agg(
        F.min_by("wall_ms", "sequence").alias("incarnation_start"), F.max("sequence").alias("last_sequence")
    )
    if held is not None:
        metadata = metadata.unionByName(held.metadata)
        # An incarnation the earlier snapshot saw keeps the start it saw (its first event by sequence).
        earlier = held.incarnations.withColumn("_rank", F.lit(0))
        seen = (
            earlier.unionByName(seen.withColumn("_rank", F.lit(1)))
            .groupBy("service", "emitter_id", "incarnation")
            .agg(
                F.min_by("incarnation_start", "_rank").alias("incarnation_start"),
                F.max("last_sequence").alias("last_sequence"),
            )
        )
    final = lake / SNAPSHOTS_DIR / f"hour={hour}"
    temporary = lake / SNAPSHOTS_DIR / f".hour={hour}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    replicas.select(*REPLICAS_SCHEMA.fieldNames()).coalesce(1).write.parquet(str(temporary / "replicas"))
    metadata.coalesce(1).write.parquet(str(temporary / "metadata"))
    seen.coalesce(1).write.parquet(str(temporary / "incarnations"))
    (temporary / MANIFEST).write_text(json.dumps({"hour": hour, "format": SNAPSHOT_FORMAT, "files": sorted(files)}))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(temporary, final)
    return load(spark, Snapshot(hour, final, files))


# -- the state at an instant --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RebuiltAt:
    replicas: DataFrame
    partitions: DataFrame
    snapshot_hour: int | None  # None: folded from the beginning
    note: str  # why a snapshot was not used, when one was not
    events: DataFrame  # the ordered events both folds read, persisted: `release` frees them

    def release(self) -> None:
        self.events.unpersist()


def rebuild_at(spark: SparkSession, lake: Path, at_ms: int, use_snapshots: bool = True) -> RebuiltAt:
    """The state the events with wall_ms <= `at_ms` leave, from the latest valid snapshot when there is one: then
    only the hour directories from the snapshot's to the instant's are read (pruned by name, never filtered from the
    whole lake), so the cost grows with the events since the snapshot (and the controller's few), not the history."""
    by_hour = lake_files(lake)
    last_hour = at_ms // HOUR_MS
    snapshot = latest_valid(lake, at_ms, by_hour) if use_snapshots else None
    note = ""
    if snapshot is not None:
        parts = [p for hour, ps in by_hour.items() if snapshot.hour <= hour <= last_hour for p in ps]
        rows = read_rows(spark, lake, parts).where(F.col("wall_ms") <= at_ms)
        held = load(spark, snapshot)
        if not clock_went_back(rows, held):
            rebuilt = continued(rows, held, snapshot.boundary_ms, persist=True)
            replicas, partitions = final_states(rebuilt.frames)
            return RebuiltAt(replicas, partitions, snapshot.hour, "", rebuilt.events)
        note = f"the snapshot at hour {snapshot.hour} is not used: a wall clock went back across it"
    parts = [p for hour, ps in by_hour.items() if hour <= last_hour for p in ps]
    rows = read_rows(spark, lake, parts).where(F.col("wall_ms") <= at_ms)
    rebuilt = continued(rows, None, 0, persist=True)
    replicas, partitions = final_states(rebuilt.frames)
    return RebuiltAt(replicas, partitions, None, note, rebuilt.events)
