"""`hightide archiver --lake DIR`: archive the cluster's EVENTS stream into a Parquet lake until SIGTERM.

Room: services/archiver (wiring: argv -> `hightide.lake.Archiver`). One archiver per lake: it holds the lake's
lock for its whole life. The lake is checked once before connecting, so a lake in use or unusable is a one-line
error (exit 1), not a traceback; a LakeError later (a lake bound to another stream) is one `archiver_failed` log
line and exit 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from nats.aio.client import Client

from hightide.lake import Archiver, ArchiverMetrics, LakeError, LakeLock, scan_lake
from hightide.runtime.logging import Logger
from hightide.runtime.priority import Priority, lower_cpu_priority
from hightide.runtime.service import common_parser, parse_common, run_service

SERVICE_ID = 1  # one archiver per lake; the id only names the process in logs and NATS
DEFAULT_NICENESS = 10
MAX_NICENESS = 19


class OneLineErrors:
    """The archiver, with a LakeError (the lake taken meanwhile, or bound to another stream) ending the process
    with one log line (`archiver_failed`, in the service's log format) and exit 1 instead of a traceback."""

    def __init__(self, archiver: Archiver, log: Logger) -> None:
        self.archiver = archiver
        self.stopping = archiver.stopping
        self._log = log

    @property
    def ready(self) -> bool:
        return self.archiver.ready

    async def run(self) -> None:
        try:
            await self.archiver.run()
        except LakeError as error:
            self._log.error("archiver_failed", error=str(error))
            raise SystemExit(1) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = common_parser("hightide archiver", "Archive the event store (EVENTS stream) into a Parquet lake.")
    parser.add_argument("--lake", type=Path, required=True, help="the lake's directory (created if missing)")
    parser.add_argument(
        "--nice",
        type=int,
        choices=range(MAX_NICENESS + 1),  # an increment a process may take without privilege
        metavar="N",
        default=DEFAULT_NICENESS,
        help=f"CPU niceness to add, 0-19 (default {DEFAULT_NICENESS}: behind brokers sharing the machine; 0 to keep)",
    )
    common = parse_common(parser, argv)
    priority: Priority | None = None
    if common.args.nice:
        # The archiver is behind the data path by design (it may lag, the stream keeps the events): where it shares
        # CPUs with brokers, as in a local cluster, its Parquet bursts must not add to produce latency. Its session's
        # autogroup too, where it leads one (`hightide.runtime.priority`): there a niceness alone changes nothing.
        priority = lower_cpu_priority(common.args.nice)
    lake: Path = common.args.lake
    try:
        # Fail early and plainly; `run` takes the lock again (and recovers the lake) and keeps it.
        with LakeLock(lake):
            scan_lake(lake)
    except LakeError as error:
        print(f"hightide archiver: {error}", file=sys.stderr)
        return 1
    metrics = ArchiverMetrics()

    def build(nc: Client, log: Logger) -> OneLineErrors:
        if priority is not None:
            log.info("cpu_priority_lowered", niceness=priority.niceness, autogroup=priority.autogroup)
        return OneLineErrors(Archiver(nc, common.cluster_id, lake, log, metrics=metrics), log)

    return run_service(common, name="archiver", service_id=SERVICE_ID, build=build, registry=metrics.registry)


if __name__ == "__main__":
    sys.exit(main())
