"""`hightide archiver --lake DIR`: archive the cluster's EVENTS stream into a Parquet lake until SIGTERM.

Room: services/archiver (wiring: argv -> `hightide.lake.Archiver`). One archiver per lake: it holds the lake's
lock for its whole life. The lake is opened once before connecting, so a lake in use or unusable is a one-line
error (exit 1), not a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from nats.aio.client import Client

from hightide.lake import Archiver, ArchiverMetrics, LakeError, LakeLock, scan_lake
from hightide.runtime.logging import Logger
from hightide.runtime.service import common_parser, parse_common, run_service

SERVICE_ID = 1  # one archiver per lake; the id only names the process in logs and NATS


def main(argv: Sequence[str] | None = None) -> int:
    parser = common_parser("hightide archiver", "Archive the event store (EVENTS stream) into a Parquet lake.")
    parser.add_argument("--lake", type=Path, required=True, help="the lake's directory (created if missing)")
    common = parse_common(parser, argv)
    lake: Path = common.args.lake
    try:
        # Fail early and plainly; `run` takes the lock again (and recovers the lake) and keeps it.
        with LakeLock(lake):
            scan_lake(lake)
    except LakeError as error:
        print(f"hightide archiver: {error}", file=sys.stderr)
        return 1
    metrics = ArchiverMetrics()

    def build(nc: Client, log: Logger) -> Archiver:
        return Archiver(nc, common.cluster_id, lake, log, metrics=metrics)

    return run_service(common, name="archiver", service_id=SERVICE_ID, build=build, registry=metrics.registry)


if __name__ == "__main__":
    sys.exit(main())
