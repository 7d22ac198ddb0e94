"""Event-sourcing snapshots of the rebuilt state at hour boundaries, and the rebuild from the latest one.

Room: services/history. A snapshot at hour N (boundary H = N hours since the epoch) holds what the fold of every
event with wall_ms < H needs to go on exactly:

```
LAKE/_snapshots/hour=N/_manifest.json     the lake files it folded (hour directories < N), its format, and the ids
                                          of the decisions `abandoned` before H and of the `probes` (below): last
LAKE/_snapshots/hour=N/replicas/          each live replica's LEO, HW, log start offset and epoch cache
LAKE/_snapshots/hour=N/controller/        the controller side's continuation: the few controller-side events the
                                          folds after H need (below), as lake rows
LAKE/_snapshots/hour=N/metadata/          every controller-side event before H (lake rows of the controller types,
                                          the stamped decision types and the controller service): read only when
                                          the continuation does not hold, and by the next snapshot's job
LAKE/_snapshots/hour=N/incarnations/      each emitter incarnation's first wall_ms and last sequence before H
LAKE/_snapshots/hour=N/segment/replicas/  the segment (below): per replica, its events since the snapshot before as
                                          the replica fold reads them, parsed and in order (`replica_arrays`)
LAKE/_snapshots/hour=N/segment/controller/   and the controller side's events since then, ordered (`fold_events`)
LAKE/_snapshots/tail/                     the segment of the events since the last snapshot, with a manifest
                                          naming the lake files it was written from (`_write_tail`)
```

The continuation (`continuation_ids`). The controller-side folds read, per key, a last value, a maximum or a first
row, so a continuation keeps the row that gives each: per topic its last TopicCreated or TopicDeleted (lives, and
the offline marks a life clears); per live partition the last PartitionChanged the fold took (its state, and the
partition epoch a later change must pass); per replica its last ReplicaMarkedOffline, per broker its last
BrokerRegistered; every ControllerElected and ControllerDeposed (takeover offsets, fences, and the controller terms
that cut metadata order); each term's first metadata event (the term's place in metadata order); every decision
abandoned before H (listed, with the bound the takeovers after H may lower); and per controller epoch its kept
decision at the highest offset (a probe). It grows with topics, partitions, brokers and controller terms, not
with the events: 20 rows at 1M generated events as at 10M, against 4.5k and 45k controller-side events.

What happens after H can undo it: a takeover after H abandons a decision kept before it (its epoch's probe is then
abandoned), a fence after H takes an abandoned one back (one listed in the manifest is then kept), or a metadata
event after H sorts before one before H in metadata order (a deposed controller's late unstamped event, in its old
term). `continuation_holds` checks all three on the query's own results (the abandoned intents it lists anyway,
and one count over metadata order); when one fails, the query folds the snapshot's `metadata` instead, so the
answer is always the full replay's.

The segment. The job orders the events between the snapshot before (hour P) and this boundary once, to fold them;
it keeps what it ordered, so that the state at an instant between P and N filters the segment to the instant
instead of reading, ordering and parsing up to an hour of events again (at the end of a full hour of 250k events,
the first query went from 26 to 8 s; the segment is about 2.3 MB an hour). It is used only where its order is the
instant's own (`segment_after`): the manifest's `segment` names the snapshot it continues by its manifest's SHA-256
(a snapshot written again invalidates it), says whether a wall clock went back across P (then it is never used,
as the snapshot at P is not), and lists the instants [from, to) at which an incarnation first seen after P would
start elsewhere (its first event by sequence stamped later than another of its events: emitter order sorts
incarnations by their first event, and an instant between the two stamps sees only the later-sequenced one).
Otherwise the filtered segment is the instant's order: dropping events leaves the others' relative order, the folds
use positions only to order (never to count), and copies of an event share its stamp (kept or dropped together,
the first one kept). An instant in the lake's last hour has no later snapshot: the job's *tail* is the segment of
the events since the last snapshot, which serves while the lake holds exactly the files it was written from there
(a lake that stopped, as a postmortem's does; at the end of a full last hour of 250k events 25.7 -> 7.3-9.7 s).
Where no segment serves (a batch landed since the job ran), the instant reads the events since its snapshot from
the lake and orders them.

Older formats (1: metadata of the controller types only; 2: no continuation; 3: no segment; 4: lake rows without
typed payloads) are not used, and the job writes them again. `_snapshots` is hidden
(`hightide.lake.layout.scan_lake` reads only `date=` directories), so the lake stays valid. The job is idempotent:
a snapshot whose manifest names exactly the lake's files before its hour, and whose segment continues the snapshot
before it, is kept; any other is written again (into a hidden temporary directory, then renamed).

The rebuild at T reads the latest valid snapshot at or before T and only the hour directories from its hour to T's
(pruned by name): the replica fold starts from the snapshot's replicas (each as if opened with that state), the
partition fold and the controller's lists run over the continuation and the new controller events, and emitter
order uses the stored incarnation starts. Limits, where a snapshot is not used (the rebuild falls back to an earlier
one, or to the whole history, and says so):
- late events: a file in an hour directory before N that the manifest does not name (an hour written after its
  snapshot) makes the snapshot stale;
- a wall clock that went back across H: an event at or after H that precedes, in its incarnation's sequence, an
  event before H (the fold before H would have had to see it);
- a replica's events from two emitters (an anomaly the plain fold reports) are folded per emitter after the
  snapshot, not stream after stream.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.history.events import LAKE_SCHEMA, Bounds, event_id_column, read_files
from hightide.history.rebuild import (
    CONTROLLER_TYPES,
    EPOCHS_TYPE,
    REPLICA_KEY,
    STAMPED_TYPES,
    abandoned_intents,
    controller_side,
    final_partitions,
    final_replica_states,
    final_replicas,
    fold_events,
    fold_replica_arrays,
    metadata_order,
    offline_replicas,
    partition_timeline,
    replica_arrays,
    replica_timeline,
    stamped_decisions,
    typed_only,
)
from hightide.lake.layout import HOUR_MS, PartFile, scan_lake
from hightide.protocol import events as ev

SNAPSHOTS_DIR: Final = "_snapshots"
# 5: its lake rows (`metadata/`, `controller/`, the segment's controller side) have the typed payload columns of lake
# format 2 (`hightide.history.events.LAKE_SCHEMA`), which the jobs read instead of parsing payloads; 4: `segment/`
# and the manifest's `segment` (the events since the snapshot before, folded once); 3: `controller/` and the
# manifest's `abandoned` and `probes` (the controller side's continuation); 2: metadata held the controller
# service's events too; 1 had no `format` key. Snapshots of formats before 5 are not used (a rebuild folds the
# lake from its start until the job has written them again, which its next run does).
SNAPSHOT_FORMAT: Final = 5
USABLE_FORMATS: Final = (5,)
SEGMENT_DIR: Final = "segment"
TAIL_DIR: Final = "tail"
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
class Segment:
    """What a snapshot keeps of the events between the snapshot before it and its own boundary (`SEGMENT_DIR`), for
    the states at instants between the two (see the module docstring)."""

    after_hour: int  # the snapshot it folded on from
    after: str  # that snapshot's fingerprint (its manifest's SHA-256)
    clock_back: bool  # a wall clock went back across that snapshot's boundary (`_clock_went_back`): never used
    moved_starts: tuple[tuple[int, int], ...]  # instants [from, to) at which an incarnation's start would differ
    schemas: dict[str, T.StructType]  # of `replicas/` and `controller/`

    def serves(self, at_ms: int) -> bool:
        return not self.clock_back and not any(low <= at_ms < high for low, high in self.moved_starts)

    def manifest(self) -> dict[str, object]:
        return {
            "after_hour": self.after_hour,
            "after": self.after,
            "clock_back": self.clock_back,
            "moved_starts": [list(interval) for interval in self.moved_starts],
            "schemas": {name: schema.jsonValue() for name, schema in self.schemas.items()},
        }

    @staticmethod
    def read(written: dict[str, object]) -> Segment:
        moved = written["moved_starts"]
        schemas = written["schemas"]
        assert isinstance(moved, list) and isinstance(schemas, dict), written
        return Segment(
            int(str(written["after_hour"])),
            str(written["after"]),
            bool(written["clock_back"]),
            tuple((int(low), int(high)) for low, high in moved),
            {name: T.StructType.fromJson(schema) for name, schema in schemas.items()},
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    hour: int
    directory: Path
    files: frozenset[str]  # the lake files folded, relative to the lake
    format: int = SNAPSHOT_FORMAT
    abandoned: frozenset[str] = frozenset()  # the ids of the decisions abandoned before the boundary
    probes: frozenset[str] = frozenset()  # per controller epoch, the id of its kept decision at the highest offset
    fingerprint: str = ""  # its manifest's SHA-256
    segment: Segment | None = None  # none in the first snapshot

    @property
    def boundary_ms(self) -> int:
        return self.hour * HOUR_MS


@dataclass(frozen=True, slots=True)
class Snapshotted:
    replicas: DataFrame
    metadata: DataFrame  # every controller-side event before the boundary
    incarnations: DataFrame
    controller: DataFrame  # the few of them a continuation folds (`continuation_ids`)


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
    return read_files(spark, [part.path for part in parts])


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
        text = manifest.read_bytes()
        written = json.loads(text)
        segment = written.get("segment")
        found.append(
            Snapshot(
                int(match.group(1)),
                directory,
                frozenset(written["files"]),
                written.get("format", 1),
                frozenset(written.get("abandoned", ())),
                frozenset(written.get("probes", ())),
                hashlib.sha256(text).hexdigest(),
                Segment.read(segment) if segment is not None else None,
            )
        )
    return sorted(found, key=lambda snapshot: snapshot.hour)


def latest_valid(lake: Path, at_ms: int, by_hour: dict[int, list[PartFile]]) -> Snapshot | None:
    """The latest snapshot whose boundary is at or before `at_ms` + 1 and whose manifest names exactly the lake's
    files before its hour (none arrived late)."""
    for snapshot in reversed(snapshots(lake)):
        if snapshot.boundary_ms > at_ms + 1:
            continue
        if _current(lake, snapshot, by_hour):
            return snapshot
    return None


def _current(lake: Path, snapshot: Snapshot, by_hour: dict[int, list[PartFile]]) -> bool:
    """Whether `snapshot` is of a usable format and folded exactly the lake's files before its hour."""
    before = [part for hour, parts in by_hour.items() if hour < snapshot.hour for part in parts]
    return snapshot.format in USABLE_FORMATS and _relative(lake, before) == snapshot.files


@dataclass(frozen=True, slots=True)
class Continued:
    """Where the events since a snapshot are kept as its job ordered them: the next snapshot's segment, or after the
    last snapshot the tail's (`TAIL_DIR`)."""

    directory: Path  # holds SEGMENT_DIR
    segment: Segment
    name: str  # the directory's name: hour=N or tail

    @staticmethod
    def of(snapshot: Snapshot) -> Continued | None:
        segment = snapshot.segment
        return Continued(snapshot.directory, segment, snapshot.directory.name) if segment is not None else None


def segment_after(lake: Path, snapshot: Snapshot, at_ms: int, by_hour: dict[int, list[PartFile]]) -> Continued | None:
    """The segment that continues `snapshot` and serves the state at `at_ms`: the next snapshot's (the instant is
    before its boundary) when that snapshot is current, or, after the last snapshot, the tail's when it covers
    exactly the lake's files since. It must have been folded on from this very snapshot (by fingerprint), and
    neither a wall clock gone back nor an incarnation's start moved by the instant may make its order differ from
    the instant's."""
    later = next((s for s in snapshots(lake) if s.hour > snapshot.hour), None)
    if later is not None:
        found = Continued.of(later) if _current(lake, later, by_hour) and at_ms < later.boundary_ms else None
    else:
        found = _tail(lake, snapshot, by_hour)
    if found is None:
        return None
    segment = found.segment
    continues = segment.after_hour == snapshot.hour and segment.after == snapshot.fingerprint
    return found if continues and segment.serves(at_ms) else None


def _tail(lake: Path, snapshot: Snapshot, by_hour: dict[int, list[PartFile]]) -> Continued | None:
    """The tail after `snapshot` (the last one), when it holds exactly the lake's files from its hour on."""
    manifest = lake / SNAPSHOTS_DIR / TAIL_DIR / MANIFEST
    if not manifest.is_file():
        return None
    written = json.loads(manifest.read_bytes())
    since = [part for hour, parts in by_hour.items() if hour >= snapshot.hour for part in parts]
    if written.get("format") != SNAPSHOT_FORMAT or frozenset(written["files"]) != _relative(lake, since):
        return None
    return Continued(manifest.parent, Segment.read(written["segment"]), TAIL_DIR)


def load(spark: SparkSession, snapshot: Snapshot) -> Snapshotted:
    directory = snapshot.directory
    return Snapshotted(
        spark.read.schema(REPLICAS_SCHEMA).parquet(str(directory / "replicas")),
        spark.read.schema(LAKE_SCHEMA).parquet(str(directory / "metadata")),
        spark.read.schema(INCARNATIONS_SCHEMA).parquet(str(directory / "incarnations")),
        spark.read.schema(LAKE_SCHEMA).parquet(str(directory / "controller")),
    )


# -- folding on from a snapshot -------------------------------------------------------------------------------------


def _continued_events(rows: DataFrame, held: Snapshotted | None, boundary_ms: int, whole: bool = False) -> DataFrame:
    """The ordered events the folds of the state at an instant read: `rows` and, after a snapshot, its controller
    events (the continuation's, or with `whole` all) and its replicas as LogOpened rows."""
    if held is None:
        return ordered_with_starts(rows, None)
    before = held.metadata if whole else held.controller
    events = ordered_with_starts(rows.unionByName(before), held.incarnations)
    return events.unionByName(_opened_rows(held.replicas, events, boundary_ms))


def ordered_with_starts(rows: DataFrame, incarnations: DataFrame | None, *, bounds: Bounds | None = None) -> DataFrame:
    """`hightide.history.rebuild.fold_events` (the events the folds read, in order), where an incarnation a snapshot
    saw starts when the snapshot says (`bounds` as `fold_events` takes it)."""
    return fold_events(rows, (), incarnations, bounds=bounds)


def _opened_rows(replicas: DataFrame, like: DataFrame, boundary_ms: int) -> DataFrame:
    """Each snapshot replica as a LogOpened with its state, ahead of every event of that replica."""
    opened = F.struct(
        "topic",
        "partition",
        "replica",
        "log_start_offset",
        "log_end_offset",
        "high_watermark",
        F.col("epoch_entries").alias("leader_epochs"),
        F.lit("snapshot").alias("reason"),
    )
    values: dict[str, Column] = {
        "service": F.lit(""),  # before every emitter of the replica's events (REPLICA_ORDER)
        "emitter_id": F.col("replica"),
        "incarnation": F.lit("snapshot"),
        "sequence": F.lit(-1).cast("long"),
        "wall_ms": F.lit(boundary_ms - 1).cast("long"),
        "type": F.lit(ev.LogOpened.TYPE),
        "payload": F.to_json(opened),
        ev.LogOpened.TYPE: opened,
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


def _clock_went_back(rows: DataFrame, held: Snapshotted) -> DataFrame:
    """The incarnations with an event read after the boundary that their events before it should have followed (a
    wall clock went back across it): none, unless the snapshot cannot be used."""
    last = held.incarnations.select("service", "emitter_id", "incarnation", "last_sequence")
    key = ["service", "emitter_id", "incarnation"]
    joined = rows.select(*key, "sequence").join(F.broadcast(last), key)
    return joined.where(F.col("sequence") < F.col("last_sequence")).select(*key).distinct()


# -- the controller side's continuation ------------------------------------------------------------------------------


def continuation_ids(events: DataFrame) -> dict[str, list[str]]:
    """The event ids a continuation of the controller side needs, by what each is kept for, from the ordered events
    before a boundary (`fold_events`): each fold reads only a last value, a maximum or a first row per key, so the row
    that gives it is enough (see the module docstring)."""
    order = metadata_order(events)
    kind = F.col("type")
    partitions = partition_timeline(events)[0]
    decided = stamped_decisions(events)
    abandoned = F.coalesce(F.col("metadata_offset") >= F.col("committed_below"), F.lit(False))
    pieces = {
        "topic_lives": _last(order.where(kind.isin(ev.TopicCreated.TYPE, ev.TopicDeleted.TYPE)), "topic"),
        "partitions": final_partitions(partitions).select("event_id"),
        "offline_marks": _last(order.where(kind == ev.ReplicaMarkedOffline.TYPE), "topic", "partition", "replica"),
        "registrations": _last(order.where(kind == ev.BrokerRegistered.TYPE), "broker"),
        "term_starts": order.groupBy("service", "emitter_id", "term").agg(
            F.min_by("event_id", "position").alias("event_id")
        ),
        "terms": controller_side(events).where(kind.isin(ev.ControllerElected.TYPE, ev.ControllerDeposed.TYPE)),
        "abandoned": decided.where(abandoned),
        "probes": decided.where(~abandoned)
        .groupBy("controller_epoch")
        .agg(F.max_by("event_id", "metadata_offset").alias("event_id")),
    }
    found: dict[str, list[str]] = {piece: [] for piece in pieces}
    frames = [frame.select(F.lit(piece).alias("piece"), "event_id") for piece, frame in pieces.items()]
    for row in functools.reduce(DataFrame.unionByName, frames).where(F.col("event_id").isNotNull()).collect():
        found[row.piece].append(row.event_id)
    return {piece: sorted(ids) for piece, ids in found.items()}


def _last(frame: DataFrame, *key: str) -> DataFrame:
    """The id of the last row in metadata order per `key` (of all, without one)."""
    return frame.groupBy(*key).agg(F.max_by("event_id", "metadata_order").alias("event_id"))


def _order_before(events: DataFrame, boundary_ms: int) -> DataFrame:
    """One row: the last place in metadata order of a metadata event before the boundary (`last`) and how many
    there are (`n`); `continuation_holds` reads it."""
    before = F.col("wall_ms") < boundary_ms
    return metadata_order(events).agg(
        F.max(F.when(before, F.col("metadata_order"))).alias("last"), F.count(F.when(before, 1)).alias("n")
    )


def continuation_holds(snapshot: Snapshot, abandoned: frozenset[str], order: Row | None) -> bool:
    """Whether the folds over the snapshot's continuation and the events since its boundary are the folds of the
    whole history: no decision before the boundary changed sides (a later takeover abandoning one kept, or a later
    fence taking one back), and every metadata event since the boundary comes after all those before it in metadata
    order. `abandoned`: the ids `abandoned_intents` of those events lists; `order`: their `_order_before` row."""
    if not snapshot.abandoned <= abandoned or snapshot.probes & abandoned:
        return False
    return order is None or order.n in (0, order.last)


# -- writing snapshots ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Written:
    """What `write_snapshots` wrote: the snapshots' hours (valid ones are kept as they are) and whether the tail."""

    hours: list[int]
    tail: bool


def write_snapshots(spark: SparkSession, lake: Path) -> Written:
    """A snapshot at each hour boundary of the lake (between its first and last hour directories), each folded on
    from the one before, and the tail after the last one."""
    by_hour = lake_files(lake)
    hours = list(by_hour)
    written: list[int] = []
    held: tuple[Snapshot, Snapshotted] | None = None
    previous = hours[0] if hours else 0
    for boundary in hours[1:]:
        before = [part for hour, parts in by_hour.items() if hour < boundary for part in parts]
        existing = next((s for s in snapshots(lake) if s.hour == boundary), None)
        if (
            existing is not None
            and existing.format == SNAPSHOT_FORMAT
            and existing.files == _relative(lake, before)
            and (held is None or (existing.segment is not None and existing.segment.after == held[0].fingerprint))
        ):
            held, previous = (existing, load(spark, existing)), boundary
            continue
        step = [part for hour, parts in by_hour.items() if previous <= hour < boundary for part in parts]
        held = _write(spark, lake, boundary, read_rows(spark, lake, step), held, _relative(lake, before))
        previous = boundary
        written.append(boundary)
    tail = _write_tail(spark, lake, held, by_hour) if held is not None else False
    return Written(written, tail)


def _write_tail(
    spark: SparkSession, lake: Path, last: tuple[Snapshot, Snapshotted], by_hour: dict[int, list[PartFile]]
) -> bool:
    """The tail: the segment of the events since the last snapshot (its hour on), which no later snapshot holds,
    kept while the lake has exactly those files there (a lake that stopped: a postmortem's last hour). Written again
    when they changed or the last snapshot did; whether it was."""
    snapshot, _ = last
    since = [part for hour, parts in by_hour.items() if hour >= snapshot.hour for part in parts]
    kept = _tail(lake, snapshot, by_hour)
    if kept is not None and kept.segment.after == snapshot.fingerprint:
        return False
    final = lake / SNAPSHOTS_DIR / TAIL_DIR
    temporary = lake / SNAPSHOTS_DIR / f".{TAIL_DIR}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    rows = read_rows(spark, lake, since)
    events = _continued_events(rows, last[1], snapshot.boundary_ms).persist(StorageLevel.MEMORY_AND_DISK)
    segment = _write_segment(events, rows, last, temporary / SEGMENT_DIR)
    events.unpersist()
    manifest = {"format": SNAPSHOT_FORMAT, "files": sorted(_relative(lake, since)), "segment": segment.manifest()}
    (temporary / MANIFEST).write_text(json.dumps(manifest))
    swap_in(temporary, final)
    return True


def swap_in(written: Path, final: Path) -> None:
    """Put the directory `written` at `final`, the one there before renamed aside (`.NAME.replaced`) and kept until
    the next swap of that name: a `rebuild --at` beside the hourly job lists `final` whole, old or new, never half
    deleted, and the files of the old one it chose are still there while it reads them."""
    replaced = final.with_name(f".{final.name}.replaced")
    shutil.rmtree(replaced, ignore_errors=True)
    if final.exists():
        os.replace(final, replaced)
    os.replace(written, final)


def _write(
    spark: SparkSession,
    lake: Path,
    hour: int,
    rows: DataFrame,
    previous: tuple[Snapshot, Snapshotted] | None,
    files: frozenset[str],
) -> tuple[Snapshot, Snapshotted]:
    held = previous[1] if previous is not None else None
    # The events since the previous snapshot, ordered once: for this snapshot's replicas (only the replica fold: the
    # partition fold's controller side would be ordered for nothing) and for its segment.
    events = _continued_events(rows, held, previous[0].boundary_ms if previous is not None else 0).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    replicas = final_replicas(*replica_timeline(events))
    # Only the controller side's own typed payload columns (a row it keeps of another type, the controller
    # service's, is folded by none of them), not every type's column of every event read to keep nulls. It did not
    # move `write_snapshots` at 1M (fresh JVMs: 57.2-60.8 s with all, 58.7-59.9 s without): that job's cost is its
    # ~180 small jobs, not this scan.
    metadata = rows.where(_controller_side()).select(*typed_only(rows.columns, (*CONTROLLER_TYPES, *STAMPED_TYPES)))
    seen = rows.groupBy("service", "emitter_id", "incarnation").agg(
        F.min_by("wall_ms", "sequence").alias("incarnation_start"), F.max("sequence").alias("last_sequence")
    )
    if held is not None:
        metadata = metadata.unionByName(held.metadata.select(*metadata.columns))
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
    segment = _write_segment(events, rows, previous, temporary / SEGMENT_DIR) if previous is not None else None
    events.unpersist()
    metadata.coalesce(1).write.parquet(str(temporary / "metadata"))
    seen.coalesce(1).write.parquet(str(temporary / "incarnations"))
    # The continuation is computed from what was just written (every controller-side event before the boundary).
    metadata = spark.read.schema(LAKE_SCHEMA).parquet(str(temporary / "metadata"))
    starts = spark.read.schema(INCARNATIONS_SCHEMA).parquet(str(temporary / "incarnations"))
    kept = continuation_ids(ordered_with_starts(metadata, starts))
    needed = sorted({event_id for ids in kept.values() for event_id in ids})
    metadata.where(event_id_column().isin(*needed)).coalesce(1).write.parquet(str(temporary / "controller"))
    manifest = {
        "hour": hour,
        "format": SNAPSHOT_FORMAT,
        "files": sorted(files),
        "abandoned": kept["abandoned"],
        "probes": kept["probes"],
    }
    if segment is not None:
        manifest["segment"] = segment.manifest()
    text = json.dumps(manifest).encode()
    (temporary / MANIFEST).write_bytes(text)
    swap_in(temporary, final)
    snapshot = Snapshot(
        hour,
        final,
        files,
        SNAPSHOT_FORMAT,
        frozenset(kept["abandoned"]),
        frozenset(kept["probes"]),
        hashlib.sha256(text).hexdigest(),
        segment,
    )
    return snapshot, load(spark, snapshot)


def _write_segment(
    events: DataFrame, rows: DataFrame, previous: tuple[Snapshot, Snapshotted], directory: Path
) -> Segment:
    """The segment of the events since `previous` (`rows`, ordered and continued from it: `events`): each replica's
    `replica_arrays` and the ordered controller-side events, and what says at which instants they serve."""
    arrays = replica_arrays(events)
    controller = events.where(F.col("type").isin(*CONTROLLER_TYPES, *STAMPED_TYPES))
    arrays.coalesce(1).write.parquet(str(directory / "replicas"))
    controller.coalesce(1).write.parquet(str(directory / "controller"))
    snapshot, held = previous
    clock_back = bool(_clock_went_back(rows, held).limit(1).collect())
    key = ["service", "emitter_id", "incarnation"]
    # An incarnation first seen here starts at its first event by sequence; a state at an instant before that event
    # but after an earlier-stamped one of the same incarnation (its clock went back) would order it otherwise.
    new = rows.join(F.broadcast(held.incarnations.select(*key)), key, "left_anti")
    starts = new.groupBy(*key).agg(F.min_by("wall_ms", "sequence").alias("first"), F.min("wall_ms").alias("least"))
    moved = starts.where(F.col("least") < F.col("first")).select("least", "first").collect()
    return Segment(
        snapshot.hour,
        snapshot.fingerprint,
        clock_back,
        tuple(sorted((int(row.least), int(row.first)) for row in moved)),
        {"replicas": arrays.schema, "controller": controller.schema},
    )


# -- the state at an instant --------------------------------------------------------------------------------------

# Settings of the SQL session while the state at an instant is computed from a snapshot (`rebuild_at` sets them
# before it builds a frame, the events being persisted as they are planned then, and restores the session's after
# its collect): the rows are few (the controller side and the events since the snapshot), so adaptive execution has
# nothing to merge, and its re-planning after each stage (a job per shuffle and per broadcast) doubled the jobs:
# 39 -> 19 on the 1M lake. Nor does generated code pay for so few rows: a fresh JVM compiled ~270 classes with Janino
# for the query (12 s of the first query's wall at 1M), where interpreted expressions and operators cost nothing to
# prepare (driver JVM CPU of the first query 24.7 -> 16.2 s at 1M, the answer the same). Two shuffle partitions, one
# per core of a local[2] driver, not 8: the query's 54 tasks became 24 (measured A/B, see `hightide.history.bench`).
FROM_SNAPSHOT_CONF: Final = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",  # as `spark.INTERPRETED`
    "spark.sql.shuffle.partitions": "2",
}

# Where no segment serves (an instant after a batch that landed since the job last ran: a live cluster's current
# hour), the query orders and folds every event since the snapshot, up to an hour of them (250,000 in the 1M bench
# lake), and there generated code pays for its compiling (`bench`'s docstring has the figures).
FOLDING_CONF: Final = {
    **FROM_SNAPSHOT_CONF,
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}


@contextmanager
def _settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
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


@dataclass(frozen=True, slots=True)
class RebuiltAt:
    """What `rebuild --at` shows, collected: each live replica's state (`final_replicas`' columns), each live
    partition's (`final_partitions`'), the offline replicas (`offline_replicas`') and the abandoned intents
    (`abandoned_intents`', in history order)."""

    replicas: list[Row]
    partitions: list[Row]
    offline: list[Row]
    abandoned: list[Row]
    snapshot_hour: int | None  # None: folded from the beginning
    note: str  # why a snapshot was not used, when one was not
    continuation: bool  # the controller side before the snapshot was its continuation (not all its events)
    segment: str | None = None  # where the events since came from, ordered (`segment_after`): hour=N or tail


def rebuild_at(
    spark: SparkSession, lake: Path, at_ms: int, use_snapshots: bool = True, topic: str | None = None
) -> RebuiltAt:
    """The state the events with wall_ms <= `at_ms` leave (of `topic` alone, when given: the abandoned intents are
    always all of them), from the latest valid snapshot when there is one: then only the hour directories from the
    snapshot's to the instant's are read (pruned by name, never filtered from the whole lake), and the controller
    side before the boundary is the snapshot's continuation (a few events per topic, partition, replica and
    controller term) unless the events since undo it (`continuation_holds`), so the cost grows with the events since
    the snapshot, not the history. Where the next snapshot's segment serves the instant (`segment_after`), the events
    since are that segment's, filtered to the instant, and no hour directory is read.

    Everything the answer needs is one collect (`_collected`): the states, the lists, and from a snapshot the two
    checks that decide whether it stands (a wall clock gone back across the boundary, the continuation undone),
    which are rare, so the query is computed again without the snapshot or its continuation only when one fails.
    In a fresh JVM each job costs its planning and its broadcasts again: five collects and a count made six jobs'
    worth of that for rows the one job computes as well."""
    by_hour = lake_files(lake)
    last_hour = at_ms // HOUR_MS
    snapshot = latest_valid(lake, at_ms, by_hour) if use_snapshots else None
    note = ""
    if snapshot is not None:
        with _settings(spark, FROM_SNAPSHOT_CONF):
            parts = [p for hour, ps in by_hour.items() if snapshot.hour <= hour <= last_hour for p in ps]

            @functools.cache
            def since() -> tuple[DataFrame, Snapshotted]:
                """The lake's rows since the snapshot and the snapshot itself: read only where no segment serves, or
                to fold again when the segment's answer does not stand (each read lists its files, in a fresh JVM
                a cost of its own)."""
                return read_rows(spark, lake, parts).where(F.col("wall_ms") <= at_ms), load(spark, snapshot)

            later = segment_after(lake, snapshot, at_ms, by_hour)
            if later is not None:
                found = _from_segment(spark, later, at_ms, topic, snapshot.boundary_ms)
            else:
                found = _folded_since(spark, *since(), snapshot.boundary_ms, topic, checked=True)
            if not found.get("clock"):
                abandoned_ids = frozenset(row.event_id for row in found["abandoned"])
                order = found["order"][0] if found["order"] else None
                if continuation_holds(snapshot, abandoned_ids, order):
                    served = later.name if later is not None else None
                    return _at(found, snapshot.hour, "", continuation=True, segment=served)
                found = _folded_since(spark, *since(), snapshot.boundary_ms, topic, whole=True)
                return _at(found, snapshot.hour, "", continuation=False)
        note = f"the snapshot at hour {snapshot.hour} is not used: a wall clock went back across it"
    parts = [p for hour, ps in by_hour.items() if hour <= last_hour for p in ps]
    rows = read_rows(spark, lake, parts).where(F.col("wall_ms") <= at_ms)
    events = _continued_events(rows, None, 0).persist(StorageLevel.MEMORY_AND_DISK)
    found = _collected(events, topic, {}, since_snapshot=False)
    events.unpersist()
    return _at(found, None, note, continuation=False)


def _folded_since(
    spark: SparkSession,
    rows: DataFrame,
    held: Snapshotted,
    boundary_ms: int,
    topic: str | None,
    *,
    whole: bool = False,
    checked: bool = False,
) -> dict[str, list[Row]]:
    """`_collected` of the events since the snapshot ordered again (no segment serves, or its answer did not
    stand), under `FOLDING_CONF`; with `checked`, the snapshot's two checks too (a wall clock gone back across the
    boundary, the continuation's order); with `whole`, every controller-side event before it, not the continuation."""
    with _settings(spark, FOLDING_CONF):
        events = _continued_events(rows, held, boundary_ms, whole).persist(StorageLevel.MEMORY_AND_DISK)
        checks = {"clock": _clock_went_back(rows, held), "order": _order_before(events, boundary_ms)} if checked else {}
        try:
            return _collected(events, topic, checks)
        finally:
            events.unpersist()


def _from_segment(
    spark: SparkSession, later: Continued, at_ms: int, topic: str | None, boundary_ms: int
) -> dict[str, list[Row]]:
    """`_collected` of the events up to `at_ms` since the snapshot before `later`, from `later`'s segment: each
    replica's arrays and the controller side's ordered events, kept up to the instant (`segment_after` says when
    that order is the instant's own), so nothing is ordered or parsed again."""
    segment = later.segment
    directory = later.directory / SEGMENT_DIR
    arrays = spark.read.schema(segment.schemas["replicas"]).parquet(str(directory / "replicas"))
    kept = arrays.select(*REPLICA_KEY, F.filter("_rows", lambda x: x.wall_ms <= at_ms).alias("_rows"))
    replicas = fold_replica_arrays(kept.where(F.size("_rows") > 0))
    events = spark.read.schema(segment.schemas["controller"]).parquet(str(directory / "controller"))
    events = events.where(F.col("wall_ms") <= at_ms)
    return _collected(events, topic, {"order": _order_before(events, boundary_ms)}, replicas=replicas)


def _collected(
    events: DataFrame,
    topic: str | None,
    checks: dict[str, DataFrame],
    *,
    since_snapshot: bool = True,
    replicas: DataFrame | None = None,
) -> dict[str, list[Row]]:
    """The state at the instant and the lists of `events` (the ordered events both folds read), and `checks`' rows,
    by piece, from one collect: each piece is a struct column of its own in a union of them all (the others null).
    The replicas' states come from one aggregate per replica `since_snapshot` (its rows since the boundary are an
    hour or so of its events), from the timeline's windows on a full replay (an array of every event of a replica's
    history would grow with the history), or are `replicas` when given (a segment's)."""
    if replicas is None:
        replicas = final_replica_states(events) if since_snapshot else final_replicas(*replica_timeline(events))
    pieces = {
        "replicas": replicas,
        "partitions": final_partitions(partition_timeline(events)[0]),
        "offline": offline_replicas(events),
        "abandoned": abandoned_intents(events),
    }
    if topic is not None:
        for piece in ("replicas", "partitions", "offline"):
            pieces[piece] = pieces[piece].where(F.col("topic") == topic)
    pieces.update(checks)
    united = functools.reduce(
        lambda left, right: left.unionByName(right, allowMissingColumns=True),
        [frame.select(F.struct(*frame.columns).alias(piece)) for piece, frame in pieces.items()],
    )
    found: dict[str, list[Row]] = {piece: [] for piece in pieces}
    for row in united.collect():
        for piece in pieces:
            if row[piece] is not None:
                found[piece].append(row[piece])
                break
    found["abandoned"].sort(key=lambda row: (row.service, row.emitter_id, row.position))
    return found


def _at(
    found: dict[str, list[Row]], hour: int | None, note: str, *, continuation: bool, segment: str | None = None
) -> RebuiltAt:
    return RebuiltAt(
        found["replicas"],
        found["partitions"],
        found["offline"],
        found["abandoned"],
        hour,
        note,
        continuation,
        segment,
    )
