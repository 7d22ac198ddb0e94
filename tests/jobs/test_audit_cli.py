"""`hightide history audit` as a user runs it: exit codes, the files of --out, one-line errors.

Method: simulated histories archived into real lakes (a clean run; a run damaged on its way to the lake, whose
lost and clashing events the audit must find), and lakes that are not ones (missing, a stray file in an hour
directory, a Parquet-named file that is not Parquet); the command runs as a subprocess, as `hightide` and as
`python -m hightide.history`, and its exit code, stdout, stderr and files are read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from hightide.audit import audit
from hightide.audit.findings import COLUMNS, from_row
from hightide.history.cli import main
from hightide.history.outputs import read_findings
from support import simulated
from support.lake_history import write_lake

HIGHTIDE = Path(sys.executable).with_name("hightide")
# A bound, not a speed goal: a Spark audit of a small history takes 1-3 minutes, and at load ~19 (helpers beside it)
# one took over 300 s, so the bound leaves room for a loaded machine.
TIMEOUT_S = 600


def hightide(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HIGHTIDE), *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.mark.slow
def test_a_damaged_history_exits_1_and_writes_its_findings(tmp_path: Path) -> None:
    """Given a run whose lake lost events and holds a clashing one, when it is audited with --out, then the exit code
    is 1, the summary names each violation with its events, and findings.parquet and findings.json hold exactly
    the plain-Python audit's findings."""
    history = simulated.damaged(simulated.clean_history(4))
    lake = write_lake(history, tmp_path / "lake")

    result = hightide("history", "audit", "--lake", str(lake), "--out", str(tmp_path / "out"))

    assert result.returncode == 1, result.stderr
    expected = audit(history)
    assert expected and all(f.is_violation for f in expected)
    assert "result: VIOLATED" in result.stdout
    for found in expected:
        assert found.detail in result.stdout and ", ".join(found.events) in result.stdout
    assert "Traceback" not in result.stderr
    rows = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert [from_row(row) for row in rows] == expected
    table = pq.read_table(tmp_path / "out" / "findings.parquet")
    assert tuple(table.schema.names) == COLUMNS
    assert [from_row(row) for row in table.to_pylist()] == expected
    assert (tmp_path / "out" / "summary.txt").read_text() == result.stdout
    # The record of the lake it read: the report's --findings takes these findings for this lake, as it is.
    assert read_findings(tmp_path / "out", lake) == expected


def test_a_clean_history_exits_0(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (`python -m hightide.history`'s `main`), on the tests' Spark session, which it leaves up."""
    lake = write_lake(simulated.clean_history(1), tmp_path / "lake")

    code = main(["audit", "--lake", str(lake)])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 violations" in out and "result: clean" in out
    assert spark.range(1).count() == 1


def test_no_lake_there_exits_2_in_one_line(tmp_path: Path) -> None:
    result = hightide("history", "audit", "--lake", str(tmp_path / "missing"))

    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no lake at" in result.stderr


def test_an_empty_lake_exits_2_rather_than_pass(tmp_path: Path) -> None:
    """A directory with no events (a mistyped path, an archiver that never ran) is not a clean history."""
    (tmp_path / "lake").mkdir()

    result = hightide("history", "audit", "--lake", str(tmp_path / "lake"))

    assert result.returncode == 2 and "holds no events" in result.stderr


@pytest.mark.parametrize("stray", ["notes.txt", "events-1-1.1of1.parquet"])
def test_a_file_that_is_not_ours_exits_2_in_one_line(tmp_path: Path, stray: str) -> None:
    """A stray file in an hour directory, or one named like ours that is not Parquet: one line naming it."""
    lake = write_lake(simulated.clean_history(1, steps=200), tmp_path / "lake")
    hour_dir = next(lake.glob("date=*/hour=*"))
    (hour_dir / stray).write_text("not an event file\n")

    result = subprocess.run(
        [sys.executable, "-m", "hightide.history", "audit", "--lake", str(lake)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().count("\n") == 0 and stray in result.stderr, result.stderr


def test_an_out_that_is_a_file_exits_2(tmp_path: Path) -> None:
    lake = write_lake(simulated.clean_history(1, steps=200), tmp_path / "lake")
    (tmp_path / "out").write_text("")

    result = hightide("history", "audit", "--lake", str(lake), "--out", str(tmp_path / "out"))

    assert result.returncode == 2 and "is not a directory" in result.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    no_lake = hightide("history", "audit")
    bad_master = hightide("history", "audit", "--lake", str(tmp_path), "--master", "sparky://host")

    assert no_lake.returncode == 2 and "--lake" in no_lake.stderr
    assert bad_master.returncode == 2 and "not a Spark master URL" in bad_master.stderr
    assert "Traceback" not in no_lake.stderr + bad_master.stderr
