"""The `hightide` command.

Room: services/client. Parses arguments and hands over to the pieces that do the work; prints errors as one
line with the Kafka error name, never a traceback for an expected failure. Exit codes (CONTRACT.md): 0 success,
1 the operation failed, 2 usage or input error.

Subcommands arrive with the issues that build what they drive; today: `bench`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hightide.client import bench
from hightide.protocol.errors import HightideError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _common_options() -> argparse.ArgumentParser:
    """Options every subcommand accepts after its name (CONTRACT.md: finding the cluster)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--nats-url", default=None, help="NATS server URL (else HIGHTIDE_NATS_URL, cluster.json)")
    common.add_argument("--cluster-id", default=None, help="cluster id scoping subjects and streams (default local)")
    common.add_argument("--data-dir", type=Path, default=Path(".hightide"), help="local data dir (./.hightide)")
    return common


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hightide", description="Kafka's replication protocol over NATS.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common_options()

    bench_parser = commands.add_parser(
        "bench", parents=[common], help="run benchmarks and print their figures beside their goals"
    )
    bench_parser.add_argument(
        "--workload", action="append", choices=[*bench.WORKLOADS, "all"], help="repeatable; default all"
    )
    bench_parser.add_argument("--duration", type=_positive, default=3.0, help="seconds per timed loop")
    bench_parser.add_argument("--size-mib", type=int, default=512, help="bytes appended per append round")
    bench_parser.add_argument("--recovery-mib", type=int, default=1024, help="log size for the recovery figure")
    bench_parser.add_argument("--format", choices=["text", "json"], default="text")
    return parser


def _run_bench(args: argparse.Namespace) -> int:
    chosen = args.workload or ["all"]
    workloads = list(bench.WORKLOADS) if "all" in chosen else list(dict.fromkeys(chosen))
    figures = bench.run(workloads, args.data_dir, args.duration, args.size_mib, args.recovery_mib)
    bench.print_figures(figures, args.format)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "bench":
            return _run_bench(args)
    except HightideError as e:
        print(f"hightide {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
