"""`hightide bench` runs as a user runs it, prints its figures, and cleans up after itself.

Method: run the installed `hightide` command in a subprocess with tiny sizes (this checks the command works;
the numbers themselves are never asserted — speed goals live in `make bench`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _hightide(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "hightide"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_bench_prints_every_figure_as_json_and_leaves_no_files(tmp_path: Path) -> None:
    result = _hightide(
        "bench", "--format", "json", "--duration", "0.05", "--size-mib", "2", "--recovery-mib", "4",
        "--data-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    names = {(f["workload"], f["unit"]) for f in figures}
    assert {("append", "MB/s"), ("append", "%"), ("read", "MB/s"), ("encode", "records/s"), ("recovery", "s")} <= names
    ratio = next(f for f in figures if f["unit"] == "%")
    assert ratio["goal"] == ">= 70%" and isinstance(ratio["met"], bool)
    assert list(tmp_path.iterdir()) == []


def test_bench_usage_errors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    for args in (["bench", "--workload", "nope"], ["bench", "--duration", "-1"], ["no-such-command"]):
        result = _hightide(*args, "--data-dir", str(tmp_path))
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr
