"""spark-submit entry of `hightide history snapshot`: `spark-submit .../jobs/snapshot.py --lake DIR [--master URL]`
writes the rebuilt state at each hour boundary into the lake (`hightide.history.snapshot`)."""

from __future__ import annotations

import sys

from hightide.history.rebuild_cli import main

if __name__ == "__main__":
    sys.exit(main(["snapshot", *sys.argv[1:]]))
