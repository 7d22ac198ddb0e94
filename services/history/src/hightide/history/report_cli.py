"""`hightide history report --lake DIR --out FILE.html [--master URL]`: the postmortem page of a lake's history.

Room: services/history. The `hightide history` command loads this module's `add_parser`; `run_report` reads the
lake on Spark (`local[*]` unless `--master`), runs the audit for its verdict and its table of lost records, builds
the page (`hightide.history.report`) and writes it. Bad input (no lake, a lake with no events, a file that is not
ours, an --out that cannot be written, a --master that is not a master URL) is one line on stderr and exit 2; Spark
failing is one line and exit 1; never a traceback (CONTRACT.md).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any, Final

from hightide.audit.findings import Finding
from hightide.lake import LakeError, scan_lake

EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
DEFAULT_MASTER: Final = "local[*]"
EXIT_FAILED: Final = 1
LOOPBACK: Final = "127.0.0.1"
# The master URLs spark-submit accepts (as `hightide history audit` checks them): Spark would fail on another
# with a Java stack trace.
MASTER_URL: Final = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s)://\S+|yarn")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `report` to the `hightide history` subcommands; it runs `run_report`."""
    report: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="one self-contained HTML page of the history, per partition, with the audit's verdict",
        description="Write a postmortem page: per partition, each replica's LEO and HW over time, ISR and ELR "
        "membership, elections and leader epochs, truncations, and the records the audit found lost.",
    )
    report.add_argument("--lake", type=Path, required=True, metavar="DIR", help="the event lake (a directory)")
    report.add_argument("--out", type=Path, required=True, metavar="FILE.html", help="where to write the page")
    report.add_argument(
        "--master", type=master_url, default=DEFAULT_MASTER, metavar="URL", help="Spark master (default local[*])"
    )
    report.set_defaults(run=run_report)
    return report


def master_url(text: str) -> str:
    if not MASTER_URL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"not a Spark master URL: {text!r} (local[N], spark://HOST:PORT, k8s://..., yarn)"
        )
    return text


def run_report(args: argparse.Namespace) -> int:
    """The command: exit 0 with the page written, 2 on a usage or input error, 1 when Spark failed (one line on
    stderr)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415 (Spark only when the command runs)

    try:
        _check_paths(args.lake, args.out)
        page = _build_page(args.lake, args.master)
        args.out.write_text(page, encoding="utf-8")
    except (ReportUsageError, LakeError, OSError) as error:
        print(f"hightide history report: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except (PySparkException, Py4JError) as error:
        print(f"hightide history report: Spark failed: {_one_line(error)[:300]}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {args.out} ({len(page.encode()) / 1e6:.1f} MB)")
    return EXIT_OK


class ReportUsageError(Exception):
    """The command cannot run as asked; the message is one line."""


def _check_paths(lake: Path, out: Path) -> None:
    if not lake.is_dir():
        raise ReportUsageError(f"--lake {lake} is not a directory")
    if not scan_lake(lake).files:
        raise ReportUsageError(f"the lake {lake} holds no event files")
    if out.is_dir():
        raise ReportUsageError(f"--out {out} is a directory; give a file name such as report.html")
    if not out.parent.is_dir():
        raise ReportUsageError(f"--out {out}: the directory {out.parent} does not exist")


def _build_page(lake: Path, master: str) -> str:
    from hightide.history import report  # noqa: PLC0415 (Spark and plotly load only when a report is made)

    spark = _spark_session(master)
    try:
        findings = _audit(spark, lake)
        data = report.report_data(spark, lake, findings)
    except report.ReportInputError as error:
        raise ReportUsageError(str(error)) from error
    finally:
        spark.stop()
    return report.render_report(data)


def _audit(spark: Any, lake: Path) -> list[Finding]:
    """The audit's findings (`hightide.history.audit.run_audit`, another part of the history service)."""
    try:
        audit = importlib.import_module("hightide.history.audit")
    except ImportError as error:
        raise ReportUsageError(f"the audit is not installed ({error}); the report needs its findings") from error
    findings: list[Finding] = audit.run_audit(spark, lake)
    return findings


def _spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession  # noqa: PLC0415 (as above)

    builder: Any = SparkSession.builder.master(master).appName("hightide-history-report")
    if master.startswith("local"):  # the executors are on this machine: the driver listens on the loopback only
        builder = builder.config("spark.driver.bindAddress", LOOPBACK).config("spark.driver.host", LOOPBACK)
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
