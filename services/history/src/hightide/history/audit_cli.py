"""`hightide history audit --lake DIR [--out DIR] [--master URL]`: the audit as a command.

Room: services/history. Exit codes (CONTRACT.md): 0 when no finding is a violation (attributed losses are
reported but allowed), 1 when any is (or Spark failed), 2 on a usage or input error (no lake there, a file in it
that is not ours, an --out that cannot be written), always as one line on stderr, never a traceback. Spark is
imported only when the command runs, so `hightide --help` stays quick.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Final

EXIT_CLEAN: Final = 0
EXIT_VIOLATED: Final = 1
EXIT_USAGE: Final = 2
PROG: Final = "hightide history audit"
MASTER_URL: Final = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s)://\S+|yarn")


def add_parser(subparsers: Any) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="check the history's invariants (exit 1 when any is violated)",
        description="Audit the lake's event history: every invariant, on Spark.",
    )
    audit.add_argument("--lake", type=Path, required=True, help="the lake directory (the archiver's, or an export)")
    audit.add_argument("--out", type=Path, default=None, help="write findings.parquet, findings.json, summary.txt")
    audit.add_argument("--master", type=master_url, default=None, help="Spark master URL (default local[*])")
    audit.set_defaults(run=run)


def master_url(text: str) -> str:
    """A Spark master URL as spark-submit accepts one (checked here: Spark would fail with a Java stack trace)."""
    if not MASTER_URL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"not a Spark master URL: {text!r} (local[N], spark://HOST:PORT, k8s://..., yarn)"
        )
    return text


def parse_paths(args: argparse.Namespace) -> argparse.Namespace:
    """`--lake` and `--out` as Paths (argparse gives them as such here; a spark-submit job may give strings)."""
    args.lake = Path(args.lake)
    args.out = None if args.out is None else Path(args.out)
    return args


def run(args: argparse.Namespace) -> int:
    from py4j.protocol import Py4JError  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415  (Spark only when the command runs)

    from hightide.lake import LakeError  # noqa: PLC0415

    try:
        return audit(args.lake, args.out, args.master)
    except LakeError as error:
        return _fail(str(error), EXIT_USAGE)
    except OSError as error:  # --out: not a directory, not writable
        return _fail(f"cannot write the findings: {error}", EXIT_USAGE)
    except (PySparkException, Py4JError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _fail(f"Spark failed: {first_line}", EXIT_VIOLATED)


def audit(lake: Path, out: Path | None, master: str | None) -> int:
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from hightide.history.audit import check_lake, run_audit  # noqa: PLC0415
    from hightide.history.checks.registry import all_checks  # noqa: PLC0415
    from hightide.history.outputs import audited_lake, lake_files, summary_text, write_outputs  # noqa: PLC0415
    from hightide.history.spark import session, small_history  # noqa: PLC0415

    events = check_lake(lake)
    if out is not None and out.exists() and not out.is_dir():
        return _fail(f"--out {out} is not a directory", EXIT_USAGE)
    # A process that already has a session (a test, a notebook) keeps it, and it stays up for its owner.
    ours = SparkSession.getActiveSession() is None
    spark = session(master, short=small_history(events)) if ours else SparkSession.builder.getOrCreate()
    before = lake_files(lake)
    try:
        findings = run_audit(spark, lake)
    finally:
        if ours:
            spark.stop()
    summary = summary_text(findings, all_checks(), lake, events)
    if out is not None:
        write_outputs(findings, summary, out, audited_lake(lake, events, before, lake_files(lake)))
    print(summary, end="")
    return EXIT_VIOLATED if any(f.is_violation for f in findings) else EXIT_CLEAN


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
