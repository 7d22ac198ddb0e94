"""The audit as a spark-submit application: `spark-submit [--master URL] .../hightide/history/jobs/audit.py --lake
DIR [--out DIR]`.

Room: services/history. The same audit, summary, files and exit codes as `hightide history audit`
(`hightide.history.audit_cli`); only the Spark session differs: spark-submit's `--master`, `--conf` and resources
hold (local[*] when it names no master). The driver's Python must have the hightide packages (set PYSPARK_PYTHON or
spark.pyspark.driver.python to the environment's interpreter); the executors run no Python.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hightide.history import audit_cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark-submit .../jobs/audit.py", description=__doc__)
    parser.add_argument("--lake", required=True, help="the lake directory")
    parser.add_argument("--out", default=None, help="write findings.parquet, findings.json, summary.txt")
    args = parser.parse_args(argv)
    args.master = None  # spark-submit's
    return audit_cli.run(audit_cli.parse_paths(args))


if __name__ == "__main__":
    sys.exit(main())
