"""`hightide history report --lake DIR --out FILE.html [--findings DIR] [--master URL]`: the postmortem page of a
lake's history.

Room: services/history. The `hightide history` command loads this module's `add_parser`; `run_report` reads the
lake on Spark (`local[*]` unless `--master`), runs the audit for its verdict and its table of lost records (or, with
`--findings`, takes them from what `hightide history audit --out DIR` wrote, when that audit read exactly the files
the lake holds now: `outputs.read_findings`), builds the page (`hightide.history.report`) and writes it. Bad input
(no lake, a lake with no events, a file that is not ours, an --out that cannot be written, findings of another state
of the lake, a --master that is not a master URL) is one line on stderr and exit 2; Spark failing is one line and
exit 1; never a traceback (CONTRACT.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from hightide.history.audit_cli import master_url
from hightide.history.outputs import FindingsError, read_findings
from hightide.lake import LakeError, count_events, scan_lake

if TYPE_CHECKING:
    from hightide.audit.findings import Finding

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
DEFAULT_MASTER: Final = "local[*]"


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
        "--findings",
        type=Path,
        metavar="DIR",
        help="the findings `hightide history audit --out DIR` wrote for this lake, instead of auditing it again",
    )
    report.add_argument(
        "--master", type=master_url, default=DEFAULT_MASTER, metavar="URL", help="Spark master (default local[*])"
    )
    report.set_defaults(run=run_report)
    return report


def run_report(args: argparse.Namespace) -> int:
    """The command: exit 0 with the page written, 2 on a usage or input error, 1 when Spark failed (one line on
    stderr)."""
    from py4j.protocol import Py4JError  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415 (Spark only when the command runs)

    try:
        _check_paths(args.lake, args.out)
        findings = None if args.findings is None else read_findings(args.findings, args.lake)
        page = _build_page(args.lake, args.master, findings)
        args.out.write_text(page, encoding="utf-8")
    except (ReportUsageError, FindingsError, LakeError, OSError) as error:
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


def _build_page(lake: Path, master: str, findings: list[Finding] | None) -> str:
    from hightide.history import report  # noqa: PLC0415 (Spark and plotly load only when a report is made)
    from hightide.history.audit import run_audit  # noqa: PLC0415
    from hightide.history.spark import session, small_history  # noqa: PLC0415

    # As the audit, it keeps a session its process already has (and leaves it up).
    spark = session(master, short=small_history(count_events(lake)))
    try:
        data = report.report_data(spark, lake, run_audit(spark, lake) if findings is None else findings)
    except report.ReportInputError as error:
        raise ReportUsageError(str(error)) from error
    return report.render_report(data)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
