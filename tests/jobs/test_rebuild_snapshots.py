"""Snapshots and `hightide history rebuild`: a snapshot is a full replay up to its hour, a rebuild from it is a
rebuild from scratch, and the command prints the state at an instant (or one line and exit 2 on bad input).

Method: a faulty simulated run (crashes, truncations, controller failover, retention, an offline replica) is
stretched in wall time so it spans several hours (order-preserving: the fold is the same), archived into a real
lake, and snapshotted by the job; each snapshot's replicas and each rebuild --at are compared with
`hightide.audit.rebuild.rebuild` of the same events. The generator's histories are read back through the lake's
own reader (every envelope checked) and must fold without an anomaly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from hightide.audit.auditor import audit
from hightide.audit.rebuild import ClusterState, rebuild
from hightide.history.generate import generate_lake
from hightide.history.rebuild_cli import add_parser, main, parse_instant, short_job
from hightide.history.snapshot import (
    REPLICAS_SCHEMA,
    SNAPSHOT_FORMAT,
    SNAPSHOTS_DIR,
    lake_files,
    latest_valid,
    rebuild_at,
    snapshots,
    write_snapshots,
)
from hightide.lake.layout import HOUR_MS, PartFile, part_name, scan_lake
from hightide.lake.reader import read_envelopes
from hightide.protocol.envelope import Envelope
from simulation.simulator import Simulation
from support.lake_history import write_lake

STRETCH = 3_000  # a simulated second becomes 50 minutes


def _stretched_faulty_run(seed: int) -> list[Envelope]:
    simulation = Simulation(seed)
    simulation.history = []
    simulation.total_steps = 2_000
    for _ in range(2_000):
        simulation.step()
    simulation.heal()
    for _ in range(300):
        simulation.step()
    assert simulation.history is not None
    start = min(e.wall_ms for e in simulation.history)
    return [dataclasses.replace(e, wall_ms=start + (e.wall_ms - start) * STRETCH) for e in simulation.history]


def _replicas(state: ClusterState) -> dict[tuple[str, int, int], tuple[int, int, int, tuple[tuple[int, int], ...]]]:
    return {
        key: (r.log_end_offset, r.high_watermark, r.log_start_offset, r.epoch_entries)
        for key, r in state.replicas.items()
    }


def _rows(rows: Sequence[Any]) -> dict[tuple[str, int, int], tuple[int, int, int, tuple[tuple[int, int], ...]]]:
    return {
        (r.topic, r.partition, r.replica): (
            r.log_end_offset,
            r.high_watermark,
            r.log_start_offset,
            tuple((int(a), int(b)) for a, b in r.epoch_entries),
        )
        for r in rows
    }


@pytest.fixture(scope="module")
def stretched(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Envelope], Path]:
    history = _stretched_faulty_run(102)
    lake = write_lake(history, tmp_path_factory.mktemp("snapshots") / "lake")
    assert len(lake_files(lake)) >= 3, "the run spans several hours"
    return history, lake


def test_each_snapshot_is_the_full_replay_to_its_hour_and_the_job_is_idempotent(
    spark: SparkSession, stretched: tuple[list[Envelope], Path]
) -> None:
    history, lake = stretched
    written = write_snapshots(spark, lake)
    assert written == list(lake_files(lake))[1:]
    assert scan_lake(lake).files, "the lake still scans with its snapshots in it"
    for snapshot in snapshots(lake):
        held = spark.read.schema(REPLICAS_SCHEMA).parquet(str(snapshot.directory / "replicas")).collect()
        expected = rebuild([e for e in history if e.wall_ms < snapshot.boundary_ms])
        assert _rows(held) == _replicas(expected), f"snapshot at hour {snapshot.hour}"
    assert write_snapshots(spark, lake) == [], "an up-to-date snapshot is kept as it is"


def test_a_rebuild_from_a_snapshot_is_a_rebuild_from_scratch(
    spark: SparkSession, stretched: tuple[list[Envelope], Path]
) -> None:
    history, lake = stretched
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    at_ms = hours[-1] * HOUR_MS + 20 * 60_000  # into the last hour, after its snapshot
    from_snapshot = rebuild_at(spark, lake, at_ms)
    assert from_snapshot.snapshot_hour == hours[-1]
    expected = rebuild([e for e in history if e.wall_ms <= at_ms])
    assert _rows(from_snapshot.replicas.collect()) == _replicas(expected)
    partitions = {
        (p.topic, p.partition): (tuple(p.isr), p.leader, p.leader_epoch, p.partition_epoch)
        for p in from_snapshot.partitions.collect()
    }
    assert partitions == {
        key: (p.isr, p.leader, p.leader_epoch, p.partition_epoch) for key, p in expected.partitions.items()
    }


def _lake_with_a_manifest(tmp_path: Path) -> tuple[Path, dict[int, list[PartFile]], int, int]:
    """A generated lake of three hours and a snapshot manifest at its second hour naming the first hour's files (a
    valid snapshot as far as the file names and the manifest say): the lake, its files by hour, and the two hours."""
    lake = tmp_path / "lake"
    generate_lake(lake, 3_000, events_per_hour=1_000)
    by_hour = lake_files(lake)
    first, second = list(by_hour)[:2]
    directory = lake / SNAPSHOTS_DIR / f"hour={second}"
    directory.mkdir(parents=True)
    names = sorted(p.path.relative_to(lake).as_posix() for p in by_hour[first])
    (directory / "_manifest.json").write_text(json.dumps({"hour": second, "format": SNAPSHOT_FORMAT, "files": names}))
    return lake, by_hour, first, second


def test_a_late_file_before_a_snapshots_hour_makes_it_stale(tmp_path: Path) -> None:
    """Given a snapshot whose manifest names the lake's files, when a batch lands later in an hour before it, the
    rebuild no longer takes that snapshot (it would miss those events)."""
    lake, by_hour, first, second = _lake_with_a_manifest(tmp_path)
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is not None
    late = by_hour[first][0].path.parent / part_name(90_000, 90_001, 1, 1)
    shutil.copy(by_hour[first][0].path, late)
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is None


def test_a_snapshot_of_an_older_format_is_not_used(tmp_path: Path) -> None:
    """A manifest without this format (format 1 kept only the controller types' events, too few for the controller's
    lists) names the right files but is not taken: the rebuild would miss events it needs."""
    lake = tmp_path / "lake"
    generate_lake(lake, 3_000, events_per_hour=1_000)
    by_hour = lake_files(lake)
    first, second = list(by_hour)[:2]
    directory = lake / SNAPSHOTS_DIR / f"hour={second}"
    directory.mkdir(parents=True)
    names = sorted(p.path.relative_to(lake).as_posix() for p in by_hour[first])
    (directory / "_manifest.json").write_text(json.dumps({"hour": second, "files": names}))
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is None


def test_a_rebuild_from_a_snapshot_reads_no_hour_before_it(
    spark: SparkSession, stretched: tuple[list[Envelope], Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Given snapshots, when every lake file of the hours before the last snapshot is unreadable (names kept, so the
    snapshot is still valid), `rebuild --at` an instant after it still prints the full replay's state, offline
    replicas and abandoned intents: it read the snapshot and the hours since, not the history."""
    history, original = stretched
    lake = tmp_path / "lake"
    shutil.copytree(original, lake)
    assert main(["snapshot", "--lake", str(lake)]) == 0
    hours = list(lake_files(lake))
    for hour, parts in lake_files(lake).items():
        if hour < hours[-1]:
            for part in parts:
                part.path.write_bytes(b"not parquet: a rebuild from the snapshot never opens this file")
    capsys.readouterr()
    at_ms = hours[-1] * HOUR_MS + 20 * 60_000
    assert main(["rebuild", "--lake", str(lake), "--at", str(at_ms), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["snapshot_hour"] == hours[-1]
    expected = rebuild([e for e in history if e.wall_ms <= at_ms])
    got = {
        (p["topic"], p["partition"], r["replica"]): (
            r["log_end_offset"],
            r["high_watermark"],
            r["log_start_offset"],
            tuple(tuple(entry) for entry in r["epoch_entries"]),
        )
        for p in printed["partitions"]
        for r in p["replica_states"]
    }
    assert got == _replicas(expected)
    assert {(p["topic"], p["partition"]): p["leader"] for p in printed["partitions"] if "leader" in p} == {
        key: p.leader for key, p in expected.partitions.items()
    }
    offline = {
        (p["topic"], p["partition"]): tuple(p["offline_replicas"])
        for p in printed["partitions"]
        if "offline_replicas" in p
    }
    assert offline == dict(expected.offline_replicas)
    assert [(a["event_type"], a["metadata_offset"]) for a in printed["abandoned"]] == [
        (a.event_type, a.metadata_offset) for a in expected.abandoned
    ]
    # The query ran without adaptive execution; the process's session has its own setting back for what comes next.
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_only_a_rebuild_from_a_snapshot_is_a_short_job(tmp_path: Path) -> None:
    """`rebuild --at` starts its driver JVM for a job of seconds (the client compiler only) exactly when it will read
    a valid snapshot and write no timelines: a full replay, `--out` or `--no-snapshots` get the default JVM."""
    lake, _, _, second = _lake_with_a_manifest(tmp_path)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command", required=True))

    def short(*extra: str, at_ms: int = second * HOUR_MS + 1) -> bool:
        return short_job(parser.parse_args(["rebuild", "--lake", str(lake), "--at", str(at_ms), *extra]), at_ms)

    assert short()
    assert not short("--out", str(tmp_path / "timelines"))
    assert not short("--no-snapshots")
    assert not short(at_ms=second * HOUR_MS - 2), "before the only snapshot: a full replay"


def test_generated_histories_are_valid_and_fold_without_an_anomaly(tmp_path: Path) -> None:
    """The benchmark's histories are ones a correct cluster writes: they fold without an anomaly and the audit's
    specification finds nothing in them (else the benchmark would time the writing of findings)."""
    written = generate_lake(tmp_path / "lake", 8_000, events_per_hour=2_000)
    envelopes = [envelope for _, envelope in read_envelopes(tmp_path / "lake")]
    assert len(envelopes) == written >= 8_000
    state = rebuild(envelopes)
    assert state.anomalies == ()
    assert audit(envelopes) == []
    assert len(lake_files(tmp_path / "lake")) >= 3
    for (topic, partition), held in state.partitions.items():
        offsets = {state.replicas[(topic, partition, r)].log_end_offset for r in held.replicas}
        assert len(offsets) == 1 and held.leader_epoch > 0, "every replica caught up, leaders moved"


def test_the_rebuild_command_prints_the_state_at_an_instant(
    spark: SparkSession, stretched: tuple[list[Envelope], Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    history, lake = stretched
    at_ms = history[len(history) // 2].wall_ms
    out = tmp_path / "timelines"
    code = main(["rebuild", "--lake", str(lake), "--at", str(at_ms), "--format", "json", "--out", str(out)])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    expected = rebuild([e for e in history if e.wall_ms <= at_ms])
    got = {
        (p["topic"], p["partition"], r["replica"]): (
            r["log_end_offset"],
            r["high_watermark"],
            r["log_start_offset"],
            tuple(tuple(entry) for entry in r["epoch_entries"]),
        )
        for p in printed["partitions"]
        for r in p["replica_states"]
    }
    assert got == _replicas(expected)
    assert {(p["topic"], p["partition"]): p["leader"] for p in printed["partitions"] if "leader" in p} == {
        key: p.leader for key, p in expected.partitions.items()
    }
    replica_rows = spark.read.parquet(str(out / "replicas"))
    assert replica_rows.where(f"wall_ms > {at_ms}").count() == 0
    # The epoch timeline: the entries still held at the instant are each live replica's cache then.
    held: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for row in spark.read.parquet(str(out / "epochs")).where("until_event_id IS NULL").collect():
        held.setdefault((row.topic, row.partition, row.replica), []).append((row.leader_epoch, row.start_offset))
    for key, state in expected.replicas.items():
        assert tuple(sorted(held.get(key, []), key=lambda entry: entry[1])) == state.epoch_entries, key


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--lake", "/nonexistent/lake", "--at", "0"], "no lake at /nonexistent/lake"),
        (["--lake", ".", "--at", "yesterday"], "--at 'yesterday' is neither"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(arguments: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hightide.history.rebuild_cli", "rebuild", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {done.stderr.strip().removeprefix('error: ')}"]
    assert says in done.stderr


def test_an_instant_is_iso_8601_or_milliseconds() -> None:
    assert parse_instant("2023-11-14T22:00:00Z") == 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS
    assert parse_instant("2023-11-14T22:00:00") == parse_instant("2023-11-14T23:00:00+01:00")
    assert parse_instant("1700000000123") == 1_700_000_000_123
