"""`hightide demo --scenario kip101`: the seeds' KIP-101 scenario on real processes, in both truncation modes.

Method: the demo's own schedule (`run_kip101`) runs once per mode against local clusters of its own (nats-server,
a controller, two brokers, each a process), with kill -9 and SIGSTOP as the faults. Ground truth is what a
consumer reads back at the end compared with what `produce --print-acks` acknowledged, and what the restarted
follower's log lines say it truncated. Then the demo's audit step: it must have run `hightide history audit` and
`hightide history report` on the lake it exported, and their verdicts must be the scenario's: the legacy run's
audit exits 1 naming the lost records and the truncation that removed them; the epoch run's exits 0.

Both runs are made once for the module (about 40 s each); every wait in them is a poll with a deadline. The
demo's one-shot `hightide ...` runs (`demo.cli`: the status and describe polls, the consume, the topic create, the
export) are forked from the tests' CLI fork server (`support/cli_process.py`), as every other e2e test's are: each is
still a process of its own with the demo's argv, output and exit code, without an interpreter start and the CLI's
imports per poll (the polls run every 0.1 s, and each import took CPU from the cluster they wait for). The producer
and the history audit and report stay real subprocesses: they are what the demo hands to the user.
"""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hightide.client import demo
from hightide.client.local_cluster import LocalCluster
from support.cli_process import run_cli
from support.cluster_cli import hightide

pytestmark = pytest.mark.slow

TAIL = [f"m{i}" for i in range(demo.HEAD_RECORDS + 1, demo.HEAD_RECORDS + demo.TAIL_RECORDS + 1)]


def forked_cli(cluster: LocalCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`demo.cli`: `hightide <args> --data-dir <cluster>`, forked from the fork server (DemoError on its timeout)."""
    try:
        return run_cli([*args, "--data-dir", str(cluster.data_dir)], timeout=demo.CLI_TIMEOUT_S, stdin=stdin)
    except subprocess.TimeoutExpired:
        raise demo.DemoError(f"`hightide {' '.join(args)}` did not finish within {demo.CLI_TIMEOUT_S:.0f} s") from None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, demo.RunResult]]:
    base = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    progress = demo.Progress(out)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(demo, "cli", forked_cli)
        legacy = demo.run_kip101(base, legacy=True, progress=progress)
        epochs = demo.run_kip101(base, legacy=False, progress=progress)
    print(out.getvalue())  # the demo's progress lines, shown when a test fails
    yield {"legacy": legacy, "epochs": epochs}


def test_legacy_truncation_to_the_high_watermark_loses_acknowledged_records(runs: dict[str, demo.RunResult]) -> None:
    """Given m1..m10 acknowledged (acks=all) and B's HW checkpoint at 5, when B restarts in the legacy mode it
    truncates its log 10 -> 5 to its own HW, is elected once A dies, and m6..m10 are gone: a consumer reading the
    partition from the beginning sees m1..m5 only."""
    legacy = runs["legacy"]
    assert legacy.read_back
    assert len(legacy.acknowledged) == demo.HEAD_RECORDS + demo.TAIL_RECORDS
    assert legacy.lost, f"no acknowledged record lost in {legacy.attempts} attempts"
    assert set(legacy.lost) <= set(TAIL), legacy.lost
    assert {(t["reason"], t["log_end_offset_before"]) for t in legacy.truncations} == {("high_watermark", 10)}
    cut = min(t["truncated_to"] for t in legacy.truncations)
    assert cut < 10
    assert min(legacy.lost.values()) >= cut, "only records at or above the truncation point are lost"
    assert all(legacy.consumed.get(v) == o for v, o in legacy.acknowledged.items() if o < cut)


def test_leader_epochs_on_the_same_schedule_lose_nothing(runs: dict[str, demo.RunResult]) -> None:
    """The same schedule with leader epochs: B keeps its log on restart (no truncation), is elected, and every
    acknowledged record is read back at its acknowledged offset."""
    epochs = runs["epochs"]
    assert epochs.read_back
    assert len(epochs.acknowledged) == demo.HEAD_RECORDS + demo.TAIL_RECORDS
    assert epochs.lost == {}
    assert epochs.truncations == []


def test_each_run_is_archived_and_handed_to_the_audit_and_the_report(runs: dict[str, demo.RunResult]) -> None:
    for run in runs.values():
        assert run.lake is not None and run.audit is not None and run.report is not None
        assert list(run.lake.rglob("*.parquet")), f"no events exported to {run.lake}"
        assert run.audit.command[-6:] == ["history", "audit", "--lake", str(run.lake), "--out", str(run.audit_out)]
        report = ["history", "report", "--lake", str(run.lake), "--out", str(run.report_path)]
        if run.audit.exit_code in (0, 1):  # the audit wrote its findings: the report draws them, not a second audit
            report += ["--findings", str(run.audit_out)]
        assert run.report.command[-len(report) :] == report


# -- the audit's verdicts: these need `hightide history audit|report` (issue 12's other parts) -------------------------


def findings(out: Path) -> list[dict[str, Any]]:
    """Every finding row the audit wrote as JSON under `out` (a JSON list, {"findings": [...]}, or JSON lines)."""
    rows: list[dict[str, Any]] = []
    for path in sorted(out.rglob("*.json*")):
        text = path.read_text()
        try:
            body = json.loads(text)
        except ValueError:
            rows += [json.loads(line) for line in text.splitlines() if line.strip()]
            continue
        rows += body if isinstance(body, list) else body.get("findings", [body])
    return rows


def test_the_legacy_runs_audit_names_the_lost_records_and_the_truncation_that_removed_them(
    runs: dict[str, demo.RunResult],
) -> None:
    legacy = runs["legacy"]
    assert legacy.audit is not None and legacy.audit_out is not None
    assert legacy.audit.exit_code == 1, legacy.audit.output
    rows = findings(legacy.audit_out)
    violations = [r for r in rows if r["cause"] == ""]
    named = {value for r in violations for value in r["records"]}
    assert set(legacy.lost) <= named, f"lost {sorted(legacy.lost)}; the audit's violations name {sorted(named)}"
    cut = min(t["truncated_to"] for t in legacy.truncations)
    truncation = [
        r
        for r in violations
        if "truncat" in (r["invariant"] + " " + r["detail"]).lower()
        and r["replica"] == legacy.follower
        and r["first_offset"] == cut
    ]
    assert truncation, f"no finding names broker {legacy.follower}'s truncation to {cut}: {violations}"


def test_the_epoch_runs_audit_is_clean_and_both_reports_are_written(runs: dict[str, demo.RunResult]) -> None:
    epochs = runs["epochs"]
    assert epochs.audit is not None
    assert epochs.audit.exit_code == 0, epochs.audit.output
    for run in runs.values():
        assert run.report is not None and run.report_path is not None
        assert run.report.exit_code == 0, run.report.output
        assert "<html" in run.report_path.read_text().lower()


def test_an_unknown_scenario_is_a_usage_error(tmp_path: Path) -> None:
    result = hightide(tmp_path, "demo", "--scenario", "split-brain", timeout=60)
    assert result.returncode == 2
    assert "invalid choice: 'split-brain'" in result.stderr
    assert "Traceback" not in result.stderr
