"""spark-submit entry of `hightide history snapshot`: `spark-submit .../jobs/snapshot.py --lake DIR` writes the
rebuilt state at each hour boundary into the lake (`hightide.history.snapshot`), on spark-submit's master unless
`--master` names another."""

from __future__ import annotations

import sys

from pyspark import SparkConf

from hightide.history.rebuild_cli import main


def run(argv: list[str]) -> int:
    if "--master" not in argv:
        argv = [*argv, "--master", SparkConf().get("spark.master", "local[*]") or "local[*]"]
    return main(["snapshot", *argv])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
