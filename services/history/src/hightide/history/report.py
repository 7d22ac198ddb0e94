"""The postmortem report: one self-contained HTML page of a history, per partition, that a person would rather look
at than read.

Room: services/history. Two halves with one seam between them:

- `report_data(spark, lake, findings)` runs the Spark side and collects to the driver only what the page draws:
  each replica's LEO, HW and log start offset as step lines cut to the points where a value changes (and capped,
  see the limits below), the partition's membership changes (replicas, ISR, ELR, leader), the elections
  (LeaderElected) and truncations (LogTruncated), the event counts and the time span. The timelines come from any
  producer of `hightide.history.rebuild.timelines`' columns (passed in as `timelines`); only the column names are
  relied on, never how they were made.
- `render_report(data)` is a pure function of that plain Python data: the page, with plotly.js inlined once (no
  network is needed to open it) and one plotly figure per partition (`full_html=False`), zoomable, with hover.

Limits (a real history has millions of events; the page stays a few MB):

| limit                          | what happens beyond it                                                       |
| ------------------------------ | ---------------------------------------------------------------------------- |
| POINTS_PER_TRACE_MAX per line  | a replica's change points are bucketed by time and each bucket keeps its     |
|                                | first and last point (the step line keeps its shape, loses the wiggles)      |
| MEMBERSHIP_CHANGES_MAX         | a partition's first changes are kept; the page says how many were left out   |
| MARKERS_MAX per partition      | truncations below the HW first, then unclean elections, then by time         |
| PARTITIONS_MAX                 | partitions with findings, unclean elections or truncations below the HW first |

Every cap that cut something is said on the page next to what it cut.
"""

from __future__ import annotations

import dataclasses
import html
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.window import WindowSpec

from hightide.audit.findings import Finding
from hightide.history.events import of_type, read_lake
from hightide.history.rebuild import timelines as rebuild_timelines
from hightide.protocol import events

POINTS_PER_TRACE_MAX: Final = 2_000
MEMBERSHIP_CHANGES_MAX: Final = 2_000
MARKERS_MAX: Final = 500
PARTITIONS_MAX: Final = 64
RECORDS_SHOWN_MAX: Final = 12  # a finding's records listed in its table row; the rest are counted

Timelines = Callable[[DataFrame], tuple[DataFrame, DataFrame]]
PartitionKey = tuple[str, int]

REPLICA_KEY: Final = ("topic", "partition", "replica")
PARTITION_KEY: Final = ("topic", "partition")
UNCLEAN_ELECTIONS: Final = frozenset({"unclean", "last_known_leader"})


class ReportInputError(Exception):
    """The report cannot be made from this input (no lake, no events); the message is one line, fit for the CLI."""


# -- the data the page is drawn from -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaPoint:
    """A replica's state from `wall_ms` until the next point (only points where a value changed are kept)."""

    wall_ms: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    online: bool
    event_type: str


@dataclass(frozen=True, slots=True)
class MembershipChange:
    """A partition's committed state from `wall_ms` on."""

    wall_ms: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class Election:
    """A LeaderElected; `committed` false when no committed partition state has its leader and leader epoch (the
    controller's intent never landed: it was fenced or died before appending it)."""

    wall_ms: int
    leader: int
    previous_leader: int
    leader_epoch: int
    election: str
    event_id: str
    committed: bool = True


@dataclass(frozen=True, slots=True)
class Truncation:
    wall_ms: int
    replica: int
    log_end_offset_before: int
    truncated_to: int
    high_watermark_before: int
    high_watermark: int
    leader_epoch: int
    reason: str
    event_id: str

    @property
    def removed_committed(self) -> bool:
        """Records this replica held as committed (below its HW) were removed."""
        return self.truncated_to < self.high_watermark_before

    @property
    def removed_count(self) -> int:
        return max(0, self.log_end_offset_before - self.truncated_to)


@dataclass(frozen=True, slots=True)
class PartitionData:
    topic: str
    partition: int
    replicas: dict[int, tuple[ReplicaPoint, ...]]
    membership: tuple[MembershipChange, ...]
    elections: tuple[Election, ...]
    truncations: tuple[Truncation, ...]
    findings: tuple[Finding, ...] = ()
    left_out: dict[str, int] = field(default_factory=dict)
    """What a cap cut, by what: `membership changes`, `elections`, `truncations`, `points of replica N`."""


@dataclass(frozen=True, slots=True)
class ReportData:
    cluster_ids: tuple[str, ...]
    first_wall_ms: int
    last_wall_ms: int
    event_counts: dict[str, int]
    partitions: tuple[PartitionData, ...]
    findings: tuple[Finding, ...] | None
    """Every finding of the audit; None when the audit was not run (the page says so)."""
    partitions_left_out: int = 0


# -- Spark: collect what the page needs ----------------------------------------------------------------------------


def report_data(
    spark: SparkSession,
    lake: Path,
    findings: Sequence[Finding] | None,
    timelines: Timelines | None = None,
) -> ReportData:
    """Read the lake and collect the page's data (see the module docstring for what is kept). `timelines` produces
    the replica and partition timelines from `read_lake`'s DataFrame; by default `hightide.history.rebuild`'s."""
    produce = timelines or rebuild_timelines
    frame = read_lake(spark, lake).persist()
    persisted = [frame]
    try:
        # One pass for the header: events by (type, cluster), each with its first and last wall_ms.
        overview = frame.groupBy("type", "cluster_id").agg(
            F.count(F.lit(1)).alias("n"), F.min("wall_ms").alias("t0"), F.max("wall_ms").alias("t1")
        )
        header = overview.collect()
        if not header:
            raise ReportInputError(f"the lake {lake} holds no events")
        counts = Counter[str]()
        for row in header:
            counts[row.type] += int(row.n)
        cluster_ids = tuple(sorted({row.cluster_id for row in header}))
        # Both timelines feed the choice of partitions and then their collection: computed once.
        replica_timeline, partition_timeline = (timeline.persist() for timeline in produce(frame))
        persisted.extend((replica_timeline, partition_timeline))
        elections = of_type(frame, events.LeaderElected)
        truncations = of_type(frame, events.LogTruncated)
        keys, left_out = _choose_partitions(replica_timeline, partition_timeline, elections, truncations, findings)
        chosen = F.broadcast(spark.createDataFrame(keys, "topic string, partition int"))

        def cut(timeline: DataFrame) -> DataFrame:
            return timeline.join(chosen, list(PARTITION_KEY))

        partitions = _collect_partitions(
            frame, keys, cut(replica_timeline), cut(partition_timeline), cut(elections), cut(truncations)
        )
    finally:
        for cached in persisted:
            cached.unpersist()
    by_partition: dict[PartitionKey, list[Finding]] = {}
    for item in findings or ():
        by_partition.setdefault((item.topic, item.partition), []).append(item)
    with_findings = tuple(
        dataclasses.replace(p, findings=tuple(by_partition.get((p.topic, p.partition), ()))) for p in partitions
    )
    return ReportData(
        cluster_ids=cluster_ids,
        first_wall_ms=min(int(row.t0) for row in header),
        last_wall_ms=max(int(row.t1) for row in header),
        event_counts=dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
        partitions=with_findings,
        findings=None if findings is None else tuple(findings),
        partitions_left_out=left_out,
    )


def _choose_partitions(
    replica_timeline: DataFrame,
    partition_timeline: DataFrame,
    elections: DataFrame,
    truncations: DataFrame,
    findings: Sequence[Finding] | None,
) -> tuple[list[PartitionKey], int]:
    """The partitions the page shows and how many it leaves out: the most
    eventful first (findings, unclean elections, truncations of committed records), then by name."""
    keys = replica_timeline.select(*PARTITION_KEY).union(partition_timeline.select(*PARTITION_KEY)).distinct()
    unclean = elections.where(F.col("election").isin(*UNCLEAN_ELECTIONS)).groupBy(*PARTITION_KEY).count()
    lossy = truncations.where(F.col("truncated_to") < F.col("high_watermark_before")).groupBy(*PARTITION_KEY).count()
    rows = (
        keys.join(unclean.withColumnRenamed("count", "unclean"), list(PARTITION_KEY), "left")
        .join(lossy.withColumnRenamed("count", "lossy"), list(PARTITION_KEY), "left")
        .collect()
    )
    found = Counter((item.topic, item.partition) for item in findings or ())

    def interest(row: Any) -> tuple[int, int, int, str, int]:
        key = (row.topic, row.partition)
        return (-found[key], -(row.unclean or 0), -(row.lossy or 0), row.topic, row.partition)

    ranked = sorted(rows, key=interest)
    shown = sorted((row.topic, row.partition) for row in ranked[:PARTITIONS_MAX])
    return shown, max(0, len(ranked) - PARTITIONS_MAX)


def _collect_partitions(
    frame: DataFrame,
    keys: list[PartitionKey],
    replica_timeline: DataFrame,
    partition_timeline: DataFrame,
    elections: DataFrame,
    truncations: DataFrame,
) -> list[PartitionData]:
    """The chosen partitions' data (the frames are already cut to them), in `keys` order."""
    points, cut_points = replica_step_points(replica_timeline, frame)
    changes, cut_changes = _membership(partition_timeline)
    chosen_elections, cut_elections = marked_elections(elections, partition_timeline)
    chosen_truncations, cut_truncations = _truncations(truncations)
    result = []
    for key in keys:
        left_out = {
            **{f"points of replica {replica}": n for (k, replica), n in cut_points.items() if k == key},
            "membership changes": cut_changes.get(key, 0),
            "elections": cut_elections.get(key, 0),
            "truncations": cut_truncations.get(key, 0),
        }
        result.append(
            PartitionData(
                topic=key[0],
                partition=key[1],
                replicas={r: tuple(p) for (k, r), p in sorted(points.items()) if k == key},
                membership=tuple(changes.get(key, ())),
                elections=tuple(chosen_elections.get(key, ())),
                truncations=tuple(chosen_truncations.get(key, ())),
                left_out={what: n for what, n in left_out.items() if n},
            )
        )
    return result


def replica_step_points(
    timeline: DataFrame, frame: DataFrame, points_max: int = POINTS_PER_TRACE_MAX
) -> tuple[dict[tuple[PartitionKey, int], list[ReplicaPoint]], dict[tuple[PartitionKey, int], int]]:
    """Each replica's step line: the last state of each millisecond (by `position`, joined from `frame` when the
    timeline has none), kept where a value changed; beyond `points_max`, the first and last point of each of
    `points_max / 2` time buckets. Also how many points each capped replica lost."""
    if "position" not in timeline.columns:  # an emitter's order breaks ties within a millisecond
        timeline = timeline.join(frame.select("event_id", "position"), "event_id", "left")
    per_ms = Window.partitionBy(*REPLICA_KEY, "wall_ms").orderBy(F.col("position").desc_nulls_first())
    values = ("log_start_offset", "log_end_offset", "high_watermark", "online")
    in_time = Window.partitionBy(*REPLICA_KEY).orderBy("wall_ms")
    changed = F.lit(False)
    for name in values:
        changed = changed | ~F.col(name).eqNullSafe(F.lag(name).over(in_time))
    steps = (
        timeline.withColumn("_last", F.row_number().over(per_ms))
        .where("_last = 1")
        .withColumn("_changed", changed | F.lag("wall_ms").over(in_time).isNull())
        .where("_changed")
    )
    whole = Window.partitionBy(*REPLICA_KEY)
    kept = _bucketed(steps, whole, points_max)
    rows = kept.select(*REPLICA_KEY, "wall_ms", *values, "event_type", "_n").orderBy(*REPLICA_KEY, "wall_ms")
    points: dict[tuple[PartitionKey, int], list[ReplicaPoint]] = {}
    cut: dict[tuple[PartitionKey, int], int] = {}
    for row in rows.collect():
        key = ((row.topic, row.partition), row.replica)
        points.setdefault(key, []).append(
            ReplicaPoint(
                wall_ms=row.wall_ms,
                log_start_offset=_int(row.log_start_offset),
                log_end_offset=_int(row.log_end_offset),
                high_watermark=_int(row.high_watermark),
                online=bool(row.online),
                event_type=row.event_type or "",
            )
        )
        cut[key] = row._n
    return points, {key: n - len(points[key]) for key, n in cut.items() if n > len(points[key])}


def _bucketed(steps: DataFrame, whole: WindowSpec, points_max: int) -> DataFrame:
    """Rows of each window partition as they are when there are at most `points_max`; else the first and last of
    `points_max // 2` equal time buckets. `_n` is the partition's row count before."""
    buckets = points_max // 2
    t0, t1 = F.min("wall_ms").over(whole), F.max("wall_ms").over(whole)
    framed = steps.withColumn("_n", F.count(F.lit(1)).over(whole)).withColumn(
        "_bucket", F.floor((F.col("wall_ms") - t0) * buckets / (t1 - t0 + 1))
    )
    spec = (*REPLICA_KEY, "_bucket")
    first = Window.partitionBy(*spec).orderBy("wall_ms")
    last = Window.partitionBy(*spec).orderBy(F.col("wall_ms").desc())
    edges = framed.withColumn("_a", F.row_number().over(first)).withColumn("_z", F.row_number().over(last))
    return edges.where((F.col("_n") <= points_max) | (F.col("_a") == 1) | (F.col("_z") == 1))


def _membership(timeline: DataFrame) -> tuple[dict[PartitionKey, list[MembershipChange]], dict[PartitionKey, int]]:
    """A partition's committed states where they changed, the first MEMBERSHIP_CHANGES_MAX of them."""
    values = ("replicas", "isr", "elr", "leader", "leader_epoch")
    order = Window.partitionBy(*PARTITION_KEY).orderBy("wall_ms", "life", "partition_epoch", "event_id")
    changed = F.lag("wall_ms").over(order).isNull()
    for name in values:
        changed = changed | ~F.col(name).eqNullSafe(F.lag(name).over(order))
    steps = timeline.withColumn("_changed", changed).where("_changed")
    ranked = steps.withColumn("_i", F.row_number().over(order)).withColumn(
        "_n", F.count(F.lit(1)).over(Window.partitionBy(*PARTITION_KEY))
    )
    rows = ranked.where(F.col("_i") <= MEMBERSHIP_CHANGES_MAX).orderBy(*PARTITION_KEY, "_i").collect()
    changes: dict[PartitionKey, list[MembershipChange]] = {}
    cut: dict[PartitionKey, int] = {}
    for row in rows:
        key = (row.topic, row.partition)
        changes.setdefault(key, []).append(
            MembershipChange(
                wall_ms=row.wall_ms,
                replicas=tuple(row.replicas or ()),
                isr=tuple(row.isr or ()),
                elr=tuple(row.elr or ()),
                leader=_int(row.leader),
                leader_epoch=_int(row.leader_epoch),
                partition_epoch=_int(row.partition_epoch),
                reason=row.reason or "",
            )
        )
        cut[key] = row._n - min(row._n, MEMBERSHIP_CHANGES_MAX)
    return changes, {key: n for key, n in cut.items() if n}


def marked_elections(
    frame: DataFrame, partition_timeline: DataFrame
) -> tuple[dict[PartitionKey, list[Election]], dict[PartitionKey, int]]:
    """The elections, unclean ones first under the cap, each marked committed when the partition's committed states
    have its leader in its leader epoch."""
    landed = partition_timeline.select(*PARTITION_KEY, "leader", "leader_epoch").distinct()
    marked = frame.join(landed.withColumn("committed", F.lit(True)), [*PARTITION_KEY, "leader", "leader_epoch"], "left")
    first = F.when(F.col("election").isin(*UNCLEAN_ELECTIONS), 0).otherwise(1)
    rows = _capped(marked.fillna(False, subset=["committed"]), first)
    elections: dict[PartitionKey, list[Election]] = {}
    for row in rows:
        elections.setdefault((row.topic, row.partition), []).append(
            Election(
                row.wall_ms,
                row.leader,
                row.previous_leader,
                row.leader_epoch,
                row.election,
                row.event_id,
                bool(row.committed),
            )
        )
    return elections, _cut(rows)


def _truncations(frame: DataFrame) -> tuple[dict[PartitionKey, list[Truncation]], dict[PartitionKey, int]]:
    first = F.when(F.col("truncated_to") < F.col("high_watermark_before"), 0).otherwise(1)
    rows = _capped(frame, first)
    truncations: dict[PartitionKey, list[Truncation]] = {}
    for row in rows:
        truncations.setdefault((row.topic, row.partition), []).append(
            Truncation(
                wall_ms=row.wall_ms,
                replica=row.replica,
                log_end_offset_before=row.log_end_offset_before,
                truncated_to=row.truncated_to,
                high_watermark_before=row.high_watermark_before,
                high_watermark=row.high_watermark,
                leader_epoch=row.leader_epoch,
                reason=row.reason,
                event_id=row.event_id,
            )
        )
    return truncations, _cut(rows)


def _capped(frame: DataFrame, priority: Column) -> list[Any]:
    """The first MARKERS_MAX rows of each partition by (priority, time), in time order, with `_n` (all rows)."""
    rank = Window.partitionBy(*PARTITION_KEY).orderBy(priority, "wall_ms", "event_id")
    ranked = frame.withColumn("_i", F.row_number().over(rank)).withColumn(
        "_n", F.count(F.lit(1)).over(Window.partitionBy(*PARTITION_KEY))
    )
    return ranked.where(F.col("_i") <= MARKERS_MAX).orderBy(*PARTITION_KEY, "wall_ms", "event_id").collect()


def _cut(rows: Iterable[Any]) -> dict[PartitionKey, int]:
    return {(row.topic, row.partition): row._n - MARKERS_MAX for row in rows if row._n > MARKERS_MAX}


def _int(value: Any) -> int:
    return -1 if value is None else int(value)


# -- the page --------------------------------------------------------------------------------------------------

REPLICA_COLOURS: Final = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#c026d3", "#ca8a04", "#475569")
STATE_COLOURS: Final = {
    "leader": "#166534",
    "in ISR": "#4ade80",
    "in ELR": "#fbbf24",
    "out of ISR": "#cbd5e1",
    "offline": "#dc2626",
}
ELECTION_STYLES: Final = {  # election type: (colour, marker symbol)
    "clean": ("#2563eb", "circle"),
    "preferred": ("#0891b2", "diamond"),
    "controlled_shutdown": ("#64748b", "square"),
    "elr": ("#d97706", "star"),
    "unclean": ("#dc2626", "x"),
    "last_known_leader": ("#be123c", "x-thin-open"),
}
CAUSES: Final = {
    "acks1_leader_change": "acks=1 write lost across a leader change",
    "unclean_election": "unclean election",
    "last_known_leader_election": "last-known-leader election",
    "lossy_crashes": "lossy crashes of at least min.insync.replicas replicas",
    "producer_state_retention": "retried after retention removed its producer's state (duplicate)",
}
DASH: Final = "\u2013"  # an offset range's en dash
MARKER_TEXT_MAX: Final = 30  # elections labelled on the chart when a partition has at most this many
UNCLEAN_LINES_MAX: Final = 50  # vertical lines across the offsets chart at unclean elections


@dataclass(frozen=True, slots=True)
class Span:
    """A replica's membership state from `start_ms` to `end_ms`, with the partition state that made it."""

    replica: int
    state: str
    start_ms: int
    end_ms: int
    change: MembershipChange


def render_report(data: ReportData) -> str:
    """The whole page: one inline copy of plotly.js, a header with the audit's verdict, one section per partition."""
    title = f"Hightide postmortem · {', '.join(data.cluster_ids) or 'no cluster'}"
    body = [
        _header(data),
        *(_partition_section(partition, data) for partition in data.partitions),
        _other_findings(data),
    ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{_e(title)}</title>"
        f"<style>{PAGE_CSS}</style><script>{get_plotlyjs()}</script></head>\n"
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )


def membership_spans(partition: PartitionData, end_ms: int) -> list[Span]:
    """Each replica's state over time (leader, in ISR, in ELR, out of ISR, offline), merged into spans: offline
    from its own timeline (`online` false), the rest from the partition's committed state."""
    changes = {change.wall_ms: change for change in partition.membership}  # the last change of a millisecond wins
    online_at = {
        replica: {point.wall_ms: point.online for point in points} for replica, points in partition.replicas.items()
    }
    replicas = sorted({r for c in partition.membership for r in c.replicas} | set(partition.replicas))
    times = sorted({*changes, *(t for by_time in online_at.values() for t in by_time)})
    current: MembershipChange | None = None
    online = dict.fromkeys(replicas, True)
    open_spans: dict[int, Span] = {}
    spans: list[Span] = []
    for time in times:
        current = changes.get(time, current)
        for replica in replicas:
            online[replica] = online_at.get(replica, {}).get(time, online[replica])
            state = _state(replica, current, online[replica])
            held = open_spans.get(replica)
            if held is not None and (held.state, held.change) == (state, current):
                continue
            if held is not None:
                spans.append(dataclasses.replace(held, end_ms=time))
                del open_spans[replica]
            if state is not None and current is not None:
                open_spans[replica] = Span(replica, state, time, time, current)
    spans.extend(dataclasses.replace(span, end_ms=max(end_ms, span.start_ms + 1)) for span in open_spans.values())
    return sorted(spans, key=lambda span: (span.replica, span.start_ms))


def _state(replica: int, change: MembershipChange | None, online: bool) -> str | None:
    if change is None or replica not in change.replicas:
        return None
    if not online:
        return "offline"
    if replica == change.leader:
        return "leader"
    if replica in change.isr:
        return "in ISR"
    return "in ELR" if replica in change.elr else "out of ISR"


# -- the header ------------------------------------------------------------------------------------------------


def _header(data: ReportData) -> str:
    span_s = (data.last_wall_ms - data.first_wall_ms) / 1000
    total = sum(data.event_counts.values())
    facts = [
        ("cluster", ", ".join(data.cluster_ids)),
        ("from", _time(data.first_wall_ms) + " UTC"),
        ("to", _time(data.last_wall_ms) + " UTC"),
        ("span", f"{span_s:,.3f} s"),
        ("events", f"{total:,}"),
        ("partitions", f"{len(data.partitions) + data.partitions_left_out:,}"),
    ]
    rows = "".join(f"<tr><th>{_e(name)}</th><td>{_e(value)}</td></tr>" for name, value in facts)
    nav = "".join(
        f"<a class='chip' href='#{_anchor(p)}'>{_e(p.topic)}-{p.partition}{_nav_badges(p)}</a>" for p in data.partitions
    )
    left_out = (
        f"<p class='note'>{data.partitions_left_out:,} quieter partitions are not drawn (PARTITIONS_MAX "
        f"{PARTITIONS_MAX}).</p>"
        if data.partitions_left_out
        else ""
    )
    return (
        f"<header><h1>Hightide postmortem</h1><div class='sub'>cluster {_e(', '.join(data.cluster_ids))} · "
        f"{_e(_time(data.first_wall_ms))} → {_e(_time(data.last_wall_ms))} UTC</div></header>"
        f"<section class='card overview'><div class='facts'><table class='facts'>{rows}</table>"
        f"{_verdict(data.findings)}</div><div class='counts'><h3>Events by type</h3>{_counts_figure(data)}</div>"
        f"</section><nav class='card'><h3>Partitions</h3>{nav}{left_out}<p class='hint'>On a chart: drag to zoom "
        "(the three rows share time), double-click to zoom out, hover for each state, click a legend entry to hide "
        "it.</p></nav>"
    )


def _nav_badges(partition: PartitionData) -> str:
    badges = []
    violations = sum(1 for f in partition.findings if f.is_violation)
    losses = len(partition.findings) - violations
    if violations:
        badges.append(f"<span class='badge bad'>{violations} violation{'s' * (violations != 1)}</span>")
    if losses:
        badges.append(f"<span class='badge warn'>{losses} loss{'es' * (losses != 1)}</span>")
    unclean = sum(1 for e in partition.elections if e.election in UNCLEAN_ELECTIONS and e.committed)
    if unclean:
        badges.append(f"<span class='badge warn'>{unclean} unclean</span>")
    return "".join(badges)


def _verdict(findings: tuple[Finding, ...] | None) -> str:
    if findings is None:
        return "<div class='verdict unknown'>Audit not run: no findings were given to this report.</div>"
    violations = Counter(f.invariant for f in findings if f.is_violation)
    losses = Counter(f.invariant for f in findings if not f.is_violation)
    if violations:
        n = sum(violations.values())
        head = f"<div class='verdict bad'>Audit: {n} violation{'s' * (n != 1)} of {len(violations)} invariant"
        head += f"{'s' * (len(violations) != 1)}</div>"
    else:
        head = "<div class='verdict good'>Audit clean: no invariant violated</div>"
    if not findings:
        return head
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td class='num {'bad' if violations[name] else ''}'>{violations[name]}</td>"
        f"<td class='num'>{losses[name]}</td></tr>"
        for name in sorted({*violations, *losses})
    )
    return (
        f"{head}<table class='grid verdict-table'><thead><tr><th>invariant</th><th>violations</th>"
        f"<th>attributed losses</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _counts_figure(data: ReportData) -> str:
    names = list(data.event_counts)[::-1]
    counts = [data.event_counts[name] for name in names]
    figure = go.Figure(
        go.Bar(
            x=counts,
            y=names,
            orientation="h",
            marker_color="#64748b",
            text=[f"{n:,}" for n in counts],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:,} events<extra></extra>",
            name="events",
        )
    )
    figure.update_layout(
        template="plotly_white",
        height=max(160, 18 * len(names) + 40),
        margin={"l": 10, "r": 50, "t": 4, "b": 24},
        xaxis={"type": "log", "dtick": 1, "showgrid": True},
        yaxis={"automargin": True, "tickfont": {"size": 11}},
        showlegend=False,
        font={"family": FONT},
    )
    return _figure_html(figure, "event-counts", mode_bar=False)


# -- a partition -----------------------------------------------------------------------------------------------


def _partition_section(partition: PartitionData, data: ReportData) -> str:
    last = partition.membership[-1] if partition.membership else None
    facts = []
    if last is not None:
        leader = f"leader {last.leader}" if last.leader >= 0 else "no leader"
        facts.append(f"{leader} · leader epoch {last.leader_epoch} · partition epoch {last.partition_epoch}")
        facts.append(f"ISR {_ids(last.isr)} · ELR {_ids(last.elr)} · replicas {_ids(last.replicas)}")
    facts.append(f"{len(partition.elections)} elections · {len(partition.truncations)} truncations")
    notes = "".join(
        f"<p class='note'>{n:,} {_e(what)} left out of the chart (a cap keeps the page small).</p>"
        for what, n in partition.left_out.items()
    )
    return (
        f"<section class='card partition' id='{_anchor(partition)}'>"
        f"<h2>{_e(partition.topic)} · partition {partition.partition} {_nav_badges(partition)}</h2>"
        f"<div class='sub'>{' &nbsp;|&nbsp; '.join(_e(fact) for fact in facts)}</div>"
        f"{_partition_figure(partition, data)}{notes}"
        f"{_findings_table(partition.findings, 'Lost or at-risk records')}{_truncations_table(partition)}"
        f"</section>"
    )


def _partition_figure(partition: PartitionData, data: ReportData) -> str:
    replicas = sorted({r for c in partition.membership for r in c.replicas} | set(partition.replicas))
    band_px = 34 * max(1, len(replicas)) + 30
    heights = [380, band_px, 170]
    figure = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        row_heights=[h / sum(heights) for h in heights],
        subplot_titles=(
            "Log end offset (solid) and high watermark (dotted) per replica",
            "Membership: leader, ISR, ELR, out of ISR, offline",
            "Elections and leader epochs",
        ),
    )
    traces: list[tuple[Any, int]] = [
        *((trace, 1) for trace in _offset_traces(partition, data.last_wall_ms)),
        *((trace, 1) for trace in _truncation_traces(partition)),
        *((trace, 2) for trace in _band_traces(partition, data.last_wall_ms)),
        *((trace, 3) for trace in _election_traces(partition, data.last_wall_ms)),
    ]
    for trace, row in traces:
        figure.add_trace(trace, row=row, col=1)
    unclean = [e for e in partition.elections if e.election in UNCLEAN_ELECTIONS and e.committed][:UNCLEAN_LINES_MAX]
    for election in unclean:
        colour = ELECTION_STYLES[election.election][0]
        figure.add_vline(x=election.wall_ms, line={"color": colour, "width": 1, "dash": "dash"}, row=1, col=1)
    figure.update_layout(
        template="plotly_white",
        height=sum(heights) + 120,
        margin={"l": 10, "r": 10, "t": 60, "b": 40},
        barmode="overlay",
        hovermode="closest",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.04, "x": 0, "groupclick": "togglegroup"},
        font={"family": FONT, "size": 12},
        hoverlabel={"font": {"family": FONT}},
    )
    figure.update_xaxes(type="date", tickformat="%H:%M:%S.%L", showspikes=True, spikemode="across", spikethickness=1)
    figure.update_yaxes(title_text="offset", rangemode="tozero", row=1, col=1)
    figure.update_yaxes(categoryorder="array", categoryarray=[f"replica {r}" for r in reversed(replicas)], row=2, col=1)
    epochs = [c.leader_epoch for c in partition.membership] + [e.leader_epoch for e in partition.elections]
    epoch_range = [-0.5, max(epochs, default=0) + 1.5]  # room above the top marker for its label
    figure.update_yaxes(
        title_text="leader epoch", range=epoch_range, dtick=1 if epoch_range[1] < 20 else None, row=3, col=1
    )
    return _figure_html(figure, f"figure-{_anchor(partition)}")


def _offset_traces(partition: PartitionData, end_ms: int) -> list[Any]:
    traces = []
    for index, (replica, points) in enumerate(sorted(partition.replicas.items())):
        colour = REPLICA_COLOURS[index % len(REPLICA_COLOURS)]
        extended = [*points, dataclasses.replace(points[-1], wall_ms=max(end_ms, points[-1].wall_ms))]
        x = [p.wall_ms for p in extended]
        hover = [
            f"LEO {p.log_end_offset} · HW {p.high_watermark} · log start {p.log_start_offset}<br>"
            f"{'online' if p.online else 'OFFLINE'} · after {p.event_type}"
            for p in extended
        ]
        for name, values, dash, width in (
            ("LEO", [p.log_end_offset if p.online else None for p in extended], "solid", 2.4),
            ("HW", [p.high_watermark if p.online else None for p in extended], "dot", 2),
        ):
            traces.append(
                go.Scatter(
                    x=x,
                    y=values,
                    name=f"replica {replica} {name}",
                    legendgroup=f"replica {replica}",
                    legendgrouptitle_text=f"replica {replica}",
                    mode="lines",
                    line={"shape": "hv", "color": colour, "dash": dash, "width": width},
                    text=hover,
                    hovertemplate=f"replica {replica} {name} %{{y}}<br>%{{text}}<br>%{{x}}<extra></extra>",
                    connectgaps=False,
                )
            )
    return traces


def _truncation_traces(partition: PartitionData) -> list[Any]:
    traces = []
    for committed, name, colour in ((True, "truncated below HW", "#b91c1c"), (False, "truncated", "#f97316")):
        chosen = [t for t in partition.truncations if t.removed_committed == committed]
        if not chosen:
            continue
        x: list[int | None] = []
        y: list[int | None] = []
        for truncation in chosen:
            x += [truncation.wall_ms, truncation.wall_ms, None]
            y += [truncation.log_end_offset_before, truncation.truncated_to, None]
        traces.append(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line={"color": colour, "width": 9},
                opacity=0.4,
                name=f"{name} (removed)",
                legendgroup=name,
                hoverinfo="skip",
                showlegend=False,
            )
        )
        # The marker sits on the top of the removed range, pointing down to where the log was cut, labelled with
        # how many records went.
        traces.append(
            go.Scatter(
                x=[t.wall_ms for t in chosen],
                y=[t.log_end_offset_before for t in chosen],
                mode="markers+text" if len(chosen) <= MARKER_TEXT_MAX else "markers",
                texttemplate=[f"\u2212{t.removed_count}" for t in chosen],
                textposition="top center",
                textfont={"color": colour, "size": 11},
                marker={"symbol": "triangle-down", "size": 13, "color": colour, "line": {"color": "white", "width": 1}},
                name=name,
                legendgroup=name,
                text=[_truncation_text(t) for t in chosen],
                hovertemplate="%{text}<br>%{x}<extra></extra>",
            )
        )
    return traces


def _truncation_text(truncation: Truncation) -> str:
    removed = (
        f"removed offsets {truncation.truncated_to}{DASH}{truncation.log_end_offset_before - 1} "
        f"({truncation.removed_count} records)"
        if truncation.removed_count
        else "removed nothing"
    )
    below = (
        f"<b>{truncation.high_watermark_before - truncation.truncated_to} of them below its HW "
        f"{truncation.high_watermark_before}</b>"
        if truncation.removed_committed
        else f"all above its HW {truncation.high_watermark_before}"
    )
    return (
        f"replica {truncation.replica} truncated to {truncation.truncated_to} ({truncation.reason})<br>"
        f"{removed}, {below}<br>leader epoch {truncation.leader_epoch}"
    )


def _band_traces(partition: PartitionData, end_ms: int) -> list[Any]:
    spans = membership_spans(partition, end_ms)
    traces = []
    for state, colour in STATE_COLOURS.items():
        chosen = [span for span in spans if span.state == state]
        if not chosen:
            continue
        traces.append(
            go.Bar(
                orientation="h",
                base=[span.start_ms for span in chosen],
                x=[span.end_ms - span.start_ms for span in chosen],
                y=[f"replica {span.replica}" for span in chosen],
                marker={"color": colour, "line": {"color": "white", "width": 0.5}},
                name=state,
                legendgroup="membership",
                legendgrouptitle_text="membership",
                width=0.7,
                text=[_span_text(span) for span in chosen],
                textposition="none",
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return traces


def _span_text(span: Span) -> str:
    change = span.change
    leader = f"leader {change.leader}" if change.leader >= 0 else "no leader"
    return (
        f"<b>replica {span.replica}: {span.state}</b><br>{_time(span.start_ms)} → {_time(span.end_ms)}<br>"
        f"ISR {_ids(change.isr)} · ELR {_ids(change.elr)} · {leader} (epoch {change.leader_epoch})"
    )


def _election_traces(partition: PartitionData, end_ms: int) -> list[Any]:
    traces = []
    if partition.membership:
        changes = [*partition.membership, dataclasses.replace(partition.membership[-1], wall_ms=end_ms)]
        traces.append(
            go.Scatter(
                x=[c.wall_ms for c in changes],
                y=[c.leader_epoch for c in changes],
                mode="lines",
                line={"shape": "hv", "color": "#94a3b8", "width": 1.5},
                name="leader epoch",
                text=[f"leader {c.leader} · partition epoch {c.partition_epoch}" for c in changes],
                hovertemplate="leader epoch %{y} · %{text}<extra></extra>",
            )
        )
    labelled = len(partition.elections) <= MARKER_TEXT_MAX
    committed = [e for e in partition.elections if e.committed]
    for election_type in sorted({e.election for e in committed}):
        chosen = [e for e in committed if e.election == election_type]
        colour, symbol = ELECTION_STYLES.get(election_type, ("#334155", "circle"))
        traces.append(
            go.Scatter(
                x=[e.wall_ms for e in chosen],
                y=[e.leader_epoch for e in chosen],
                mode="markers+text" if labelled else "markers",
                marker={"symbol": symbol, "size": 13, "color": colour, "line": {"color": colour, "width": 2}},
                textposition="top center",
                texttemplate=[f"→{e.leader}" if e.leader >= 0 else "none" for e in chosen],
                textfont={"color": colour, "size": 11},
                name=f"{election_type} election",
                legendgroup="elections",
                legendgrouptitle_text="elections",
                text=[_election_text(e) for e in chosen],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    intents = [e for e in partition.elections if not e.committed]
    if intents:
        traces.append(
            go.Scatter(
                x=[e.wall_ms for e in intents],
                y=[e.leader_epoch for e in intents],
                mode="markers",
                marker={"symbol": "circle-open", "size": 12, "color": "#94a3b8", "line": {"width": 2}},
                name="never committed",
                legendgroup="elections",
                legendgrouptitle_text="elections",
                text=[_election_text(e) + "<br><i>never committed (the controller lost its term)</i>" for e in intents],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return traces


def _election_text(election: Election) -> str:
    leader = f"leader {election.leader}" if election.leader >= 0 else "no leader could be chosen"
    previous = f"was {election.previous_leader}" if election.previous_leader >= 0 else "was none"
    return (
        f"<b>{election.election} election</b> · leader epoch {election.leader_epoch}<br>{leader} ({previous})<br>"
        f"{_time(election.wall_ms)}"
    )


# -- tables ----------------------------------------------------------------------------------------------------


def _findings_table(findings: Sequence[Finding], title: str) -> str:
    if not findings:
        return f"<h3>{_e(title)}</h3><p class='none'>None: the audit found nothing here.</p>"
    rows = []
    for item in sorted(findings, key=lambda f: (not f.is_violation, f.first_offset, f.invariant)):
        cause = CAUSES.get(item.cause, item.cause) if item.cause else f"violation of {item.invariant}"
        records = ", ".join(item.records[:RECORDS_SHOWN_MAX])
        if len(item.records) > RECORDS_SHOWN_MAX:
            records += f" … and {len(item.records) - RECORDS_SHOWN_MAX} more"
        rows.append(
            f"<tr class='finding {'violation' if item.is_violation else 'loss'}'>"
            f"<td class='cause'>{_e(cause)}</td><td>{_e(item.invariant)}</td>"
            f"<td>{_e(_where(item))}</td><td class='num'>{_e(_offsets(item))}</td>"
            f"<td class='records'>{_e(records) or '—'}</td><td>{_e(item.detail)}</td>"
            f"<td class='events' title='{_e(' '.join(item.events))}'>{len(item.events)}</td></tr>"
        )
    return (
        f"<h3>{_e(title)}</h3><table class='grid findings'><thead><tr><th>cause</th><th>invariant</th>"
        f"<th>replica</th><th>offsets</th><th>records</th><th>what happened</th><th>events</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _truncations_table(partition: PartitionData) -> str:
    if not partition.truncations:
        return ""
    rows = "".join(
        f"<tr class='{'bad' if t.removed_committed else ''}'><td>{_e(_time(t.wall_ms))}</td><td>{t.replica}</td>"
        f"<td>{_e(t.reason)}</td><td class='num'>"
        f"{f'{t.truncated_to}{DASH}{t.log_end_offset_before - 1}' if t.removed_count else '—'}</td>"
        f"<td class='num'>{t.removed_count}</td><td class='num'>{t.high_watermark_before}</td>"
        f"<td>{'yes: committed records removed' if t.removed_committed else 'no'}</td>"
        f"<td class='num'>{t.leader_epoch}</td></tr>"
        for t in partition.truncations
    )
    return (
        "<h3>Truncations</h3><table class='grid truncations'><thead><tr><th>time (UTC)</th><th>replica</th>"
        "<th>reason</th><th>removed offsets</th><th>records</th><th>HW before</th><th>below the HW?</th>"
        f"<th>leader epoch</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _other_findings(data: ReportData) -> str:
    shown = {(p.topic, p.partition) for p in data.partitions}
    others = [f for f in data.findings or () if (f.topic, f.partition) not in shown]
    if not others:
        return ""
    table = _findings_table(others, "Findings not drawn above (cluster-wide, or of partitions not drawn)")
    return f"<section class='card'>{table}</section>"


# -- small helpers ---------------------------------------------------------------------------------------------


def _figure_html(figure: Any, div_id: str, *, mode_bar: bool = True) -> str:
    config = {
        "displaylogo": False,
        "displayModeBar": mode_bar,
        "responsive": True,
        "scrollZoom": True,
        "toImageButtonOptions": {"scale": 2},
    }
    html_text: str = figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=config)
    return html_text


def _where(item: Finding) -> str:
    return "—" if item.replica < 0 else str(item.replica)


def _offsets(item: Finding) -> str:
    if item.first_offset < 0:
        return "—"
    return (
        str(item.first_offset)
        if item.last_offset == item.first_offset
        else f"{item.first_offset}{DASH}{item.last_offset}"
    )


def _ids(ids: Sequence[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def _anchor(partition: PartitionData) -> str:
    return "p-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in partition.topic) + f"-{partition.partition}"


def _time(wall_ms: int) -> str:
    return datetime.fromtimestamp(wall_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


FONT: Final = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
PAGE_CSS: Final = """
:root { --ink: #0f172a; --muted: #64748b; --line: #e2e8f0; --bad: #b91c1c; --warn: #b45309; --good: #15803d; }
* { box-sizing: border-box; }
body { margin: 0; background: #f1f5f9; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif; }
main { max-width: 1400px; margin: 0 auto; padding: 0 20px 40px; }
header { background: linear-gradient(90deg, #0f172a, #1e3a8a); color: white; margin: 0 -20px 18px;
  padding: 22px 28px 18px; }
header h1 { margin: 0; font-size: 24px; font-weight: 650; letter-spacing: 0.2px; }
header .sub { color: #cbd5e1; margin-top: 4px; }
.card { background: white; border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px; margin-bottom: 18px;
  box-shadow: 0 1px 2px rgba(15, 23, 42, 0.05); }
.overview { display: grid; grid-template-columns: minmax(320px, 1fr) minmax(360px, 1.3fr); gap: 24px; }
h2 { margin: 0 0 4px; font-size: 19px; } h3 { margin: 18px 0 8px; font-size: 15px; color: #334155; }
.counts h3 { margin-top: 0; }
.sub { color: var(--muted); }
table.facts th { text-align: left; color: var(--muted); font-weight: 500; padding: 2px 16px 2px 0; }
table.facts td { font-variant-numeric: tabular-nums; }
.verdict { margin: 14px 0 10px; padding: 10px 14px; border-radius: 8px; font-weight: 600; font-size: 15px; }
.verdict.good { background: #dcfce7; color: var(--good); } .verdict.bad { background: #fee2e2; color: var(--bad); }
.verdict.unknown { background: #f1f5f9; color: var(--muted); }
table.grid { border-collapse: collapse; width: 100%; font-size: 13px; }
table.grid th { text-align: left; background: #f8fafc; color: #475569; font-weight: 600;
  border-bottom: 1px solid var(--line); padding: 6px 8px; }
table.grid td { border-bottom: 1px solid var(--line); padding: 6px 8px; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.bad, tr.bad td { color: var(--bad); }
tr.violation td.cause { color: var(--bad); font-weight: 650; }
tr.loss td.cause { color: var(--warn); font-weight: 650; }
tr.violation { background: #fef2f2; }
td.records { font-family: ui-monospace, 'SFMono-Regular', Menlo, monospace; font-size: 12px; }
td.events { text-align: right; color: var(--muted); cursor: help; }
nav .chip { display: inline-block; margin: 0 8px 8px 0; padding: 5px 10px; border: 1px solid var(--line);
  border-radius: 999px; color: var(--ink); text-decoration: none; background: #f8fafc; }
nav .chip:hover { background: #e0e7ff; }
nav h3 { margin-top: 0; }
.badge { display: inline-block; margin-left: 6px; padding: 1px 7px; border-radius: 999px; font-size: 11px;
  font-weight: 600; vertical-align: middle; }
.badge.bad { background: #fee2e2; color: var(--bad); } .badge.warn { background: #fef3c7; color: var(--warn); }
.hint { color: var(--muted); font-size: 12px; margin: 6px 0 0; }
.note { color: var(--warn); font-size: 12px; margin: 4px 0; } p.none { color: var(--muted); margin: 4px 0; }
"""
