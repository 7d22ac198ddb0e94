"""The `hightide` command.

Room: services/client. Parses arguments and hands over to the pieces that do the work; prints errors as one
line with the Kafka error name, never a traceback for an expected failure. Exit codes (CONTRACT.md): 0 success,
1 the operation failed, 2 usage or input error.

`hightide broker ...`, `hightide controller ...` and `hightide archiver ...` become the service's own process
(`python -m hightide.broker`), so the client never imports another service; the other subcommands live in
`commands`, and `events ...` in `events_cli`. Other services plug commands in through the `hightide.commands`
entry point group (`history ...`, from services/history), without the client importing them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from hightide.client import bench, canary, commands, demo, events_cli, group_commands
from hightide.client.local_cluster import ClusterError
from hightide.client.producer import COMPRESSION_TYPES
from hightide.client.reassign_cli import add_reassign_command  # partition reassignment (issue 13)
from hightide.client.scram_cli import add_scram_command  # the Kafka listener's SCRAM users (issue 15)
from hightide.protocol.errors import HightideError
from hightide.protocol.subjects import InvalidClusterId, check_cluster_id
from hightide.runtime.config import ConfigError
from hightide.runtime.logging import configure_logging
from hightide.runtime.nats import NatsUnavailable, PermissionRefused
from hightide.runtime.nats_auth import AUTH_CONF, write_deployment

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
COMMANDS_GROUP = "hightide.commands"


def _common_options() -> argparse.ArgumentParser:
    """Options every subcommand accepts after its name (CONTRACT.md: finding the cluster)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--nats-url", default=None, help="NATS server URL (else HIGHTIDE_NATS_URL, cluster.json)")
    common.add_argument("--cluster-id", default=None, help="cluster id scoping subjects and streams (default local)")
    common.add_argument("--data-dir", type=Path, default=Path(".hightide"), help="local data dir (./.hightide)")
    common.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="nats.* settings for reaching NATS (nats.credentials.file=FILE, nats.tls.ca.file=...); on topic create "
        "and alter also topic configs, on cluster up the brokers' configs",
    )
    return common


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hightide", description="Kafka's replication protocol over NATS.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common_options()

    bench_parser = subparsers.add_parser(
        "bench", parents=[common], help="run benchmarks and print their figures beside their goals"
    )
    bench_parser.add_argument(
        "--workload", action="append", choices=[*bench.WORKLOADS, "all"], help="repeatable; default all"
    )
    bench_parser.add_argument(
        "--duration", type=_positive, default=bench.DEFAULT_DURATION_S, help="seconds per timed loop (scales produce)"
    )
    bench_parser.add_argument("--size-mib", type=int, default=512, help="bytes appended per append round")
    bench_parser.add_argument("--recovery-mib", type=int, default=1024, help="log size for the recovery figure")
    bench_parser.add_argument("--format", choices=["text", "json"], default="text")
    _cluster_commands(subparsers, common)
    _topic_commands(subparsers, common)
    _client_commands(subparsers, common)
    events_cli.add_events_commands(subparsers, common)
    add_reassign_command(subparsers, common)  # partition reassignment (issue 13)
    add_scram_command(subparsers, common)  # the Kafka listener's SCRAM users (issue 15)
    _plugged_in_commands(subparsers, common)
    _nats_auth_command(subparsers, common)  # NATS permissions (issue 14)
    demo_parser = subparsers.add_parser(
        "demo", parents=[common], help="real clusters through real faults: the KIP-101 loss caught, a failover"
    )
    demo_parser.add_argument(
        "--scenario",
        action="append",
        choices=[*demo.SCENARIOS, "all"],
        help="kip101 (legacy truncation, then leader epochs) or failover; repeatable; default all",
    )
    demo_parser.set_defaults(run=_run_demo)
    return parser


def _plugged_in_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """The commands other services add (`history`, from services/history): each entry point of the
    `hightide.commands` group is a function taking these subparsers and the common options. A service that is not
    installed adds nothing."""
    for entry_point in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry_point.load()(subparsers, common)


def _cluster_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    cluster = subparsers.add_parser("cluster", help="a local cluster on this machine").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    up = cluster.add_parser("up", parents=[common], help="start nats-server, controllers and brokers")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--controllers", type=int, default=1)
    up.add_argument("--detach", action="store_true", help="return once the cluster is ready")
    up.add_argument("--timeout", type=_positive, default=60.0, help="seconds to wait for readiness")
    up.add_argument("--canary", action="store_true", help="also run `hightide canary` on it (issue 13)")
    up.add_argument(  # issue 14: clustered NATS
        "--nats-nodes", type=int, default=1, help="nats-server processes to run as one cluster (1 to 5; default 1)"
    )
    up.set_defaults(run=commands.cluster_up)
    down = cluster.add_parser("down", parents=[common], help="stop the local cluster")
    down.set_defaults(run=commands.cluster_down)
    status = cluster.add_parser("status", parents=[common], help="the controller and brokers")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=commands.cluster_status)
    start = cluster.add_parser("start-broker", parents=[common], help="(re)start one broker")
    start.add_argument("id", type=int)
    start.set_defaults(run=commands.cluster_start_broker)
    stop = cluster.add_parser("stop-broker", parents=[common], help="controlled shutdown (--hard: SIGKILL)")
    stop.add_argument("id", type=int)
    stop.add_argument("--hard", action="store_true")
    stop.set_defaults(run=commands.cluster_stop_broker)


def _topic_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    topic = subparsers.add_parser("topic", help="create, describe, list, alter, delete").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = topic.add_parser("create", parents=[common])
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.set_defaults(run=commands.topic_create)
    describe = topic.add_parser("describe", parents=[common])
    describe.add_argument("names", nargs="*")
    describe.add_argument("--under-replicated-partitions", action="store_true")
    describe.add_argument("--unavailable-partitions", action="store_true")
    describe.set_defaults(run=commands.topic_describe)
    listing = topic.add_parser("list", parents=[common])
    listing.set_defaults(run=commands.topic_list)
    alter = topic.add_parser("alter", parents=[common])
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, default=None)
    alter.set_defaults(run=commands.topic_alter)
    delete = topic.add_parser("delete", parents=[common])
    delete.add_argument("name")
    delete.set_defaults(run=commands.topic_delete)


def _client_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    broker = subparsers.add_parser("broker", help="`broker list`; `broker --id N ...` runs a broker").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    broker.add_parser("list", parents=[common]).set_defaults(run=commands.broker_list)
    election = subparsers.add_parser("leader-election", parents=[common], help="preferred or unclean elections")
    election.add_argument("--election-type", choices=["preferred", "unclean"], required=True)
    election.add_argument("--topic")
    election.add_argument("--partition", type=int)
    election.add_argument("--all-topic-partitions", action="store_true")
    election.set_defaults(run=commands.leader_election)
    produce = subparsers.add_parser("produce", parents=[common], help="records from stdin, or --count generated")
    produce.add_argument("topic")
    produce.add_argument("--acks", choices=["0", "1", "all", "-1"], default="all")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--key")
    produce.add_argument("--parse-key", action="store_true")
    produce.add_argument("--key-separator", default="\t")
    produce.add_argument("--linger-ms", type=int)
    produce.add_argument("--batch-size", type=int)
    produce.add_argument(
        "--compression", choices=list(COMPRESSION_TYPES), default=None, help="compression.type (default none)"
    )
    produce.add_argument("--count", type=int)
    produce.add_argument("--rate", type=_positive)
    produce.add_argument("--value-size", type=int)
    produce.add_argument("--print-acks", action="store_true")
    produce.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    produce.set_defaults(run=commands.produce)
    consume = subparsers.add_parser("consume", parents=[common], help="records from the leaders, below the HW")
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", type=int)
    consume.add_argument("--group")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int)
    consume.add_argument("--format", choices=["text", "json"], default="text")
    consume.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE")
    consume.set_defaults(run=commands.consume)
    # consumer groups (issue 13): kafka-consumer-groups.sh's --list, --describe, --delete
    group = subparsers.add_parser("group", help="list, describe, delete consumer groups").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    group.add_parser("list", parents=[common]).set_defaults(
        run=lambda a: group_commands.group_list(a, commands.connect)
    )
    describe_group = group.add_parser("describe", parents=[common])
    describe_group.add_argument("group")
    describe_group.set_defaults(run=lambda a: group_commands.group_describe(a, commands.connect))
    delete_group = group.add_parser("delete", parents=[common])
    delete_group.add_argument("group")
    delete_group.set_defaults(run=lambda a: group_commands.group_delete(a, commands.connect))


# -- NATS permissions (issue 14): the users of a deployment (docker-compose, Kubernetes) -------------------------


def _nats_auth_command(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "nats-auth",
        parents=[common],
        help="make a NATS user per role: <role>.creds (0600) and auth.conf for nats-server (`include auth.conf`)",
    )
    parser.add_argument("--out", type=Path, required=True, help="directory for the files (existing .creds are kept)")
    parser.add_argument(
        "--broker-ids",
        default="",
        metavar="ID,...",
        help="also a user per broker, broker-<id>.creds: it answers only its own APIs and emits only its own "
        "events (comma-separated ids; the users of earlier runs are kept)",
    )
    parser.set_defaults(run=_run_nats_auth)


def _broker_ids(text: str) -> list[int]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not all(part.isdigit() for part in ids):
        raise commands.UsageError(f"--broker-ids takes comma-separated broker ids (0 or more), not {text!r}")
    return [int(part) for part in ids]


def _run_nats_auth(args: argparse.Namespace) -> int:
    cluster_id = args.cluster_id or os.environ.get("HIGHTIDE_CLUSTER_ID") or "local"
    try:
        paths = write_deployment(args.out, check_cluster_id(cluster_id), _broker_ids(args.broker_ids))
    except (InvalidClusterId, ConfigError) as error:
        raise commands.UsageError(str(error)) from None
    except OSError as error:
        raise commands.UsageError(f"cannot write to {args.out}: {error.strerror or error}") from None
    for user, path in paths.items():
        print(f"{user}\t{path}")
    print(f"nats-server\t{args.out / AUTH_CONF}")
    return EXIT_OK


def _refused_user(args: argparse.Namespace) -> str:
    explicit = os.environ.get(commands.CREDENTIALS_ENV)
    if explicit:
        return f"as the NATS user of {explicit} ({commands.CREDENTIALS_ENV})"
    return f"as the {commands.command_role(args).value} role"


def _run_bench(args: argparse.Namespace) -> int:
    """Every workload starts its own cluster (or none), so nothing a cluster setting says would reach a figure. A
    `--config` is refused before anything runs; `--nats-url` and `--cluster-id`, which every subcommand accepts
    (CONTRACT.md), are said to be ignored. Either way no one reads a figure believing it came from their settings."""
    if args.config:
        raise commands.UsageError(
            f"--config {args.config[0]}: the benchmarks start clusters of their own and take no cluster settings"
        )
    for name, value in (("--nats-url", args.nats_url), ("--cluster-id", args.cluster_id)):
        if value:
            print(f"hightide bench: {name} ignored: the benchmarks start clusters of their own", file=sys.stderr)
    chosen = args.workload or ["all"]
    workloads = list(bench.WORKLOADS) if "all" in chosen else list(dict.fromkeys(chosen))
    figures = bench.run(workloads, args.data_dir, args.duration, args.size_mib, args.recovery_mib)
    bench.print_figures(figures, args.format)
    return EXIT_OK


def _run_demo(args: argparse.Namespace) -> int:
    """Each run's cluster lives under <data-dir>/demo/ (its own directory and nats-server port)."""
    chosen = args.scenario or ["all"]
    scenarios = list(demo.SCENARIOS) if "all" in chosen else list(dict.fromkeys(chosen))
    return demo.run_demo(scenarios, args.data_dir.resolve() / "demo", nats_url=args.nats_url)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("broker", "controller", "archiver", "canary") and argv[1:2] != ["list"]:
        if argv[0] == "canary":
            return canary.main(argv[1:])  # a client-side service: it runs in this process (client/canary.py)
        commands.exec_service(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    configure_logging(json=False, level="warning")
    name = " ".join(filter(None, [args.command, getattr(args, "action", None)]))
    try:
        commands.check_configs(args)
        if args.command == "bench":
            return _run_bench(args)
        result: int = args.run(args)
        return result
    except (commands.UsageError, ConfigError) as e:  # ConfigError: a bad nats.* setting (a credentials file)
        print(f"hightide {name}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (ClusterError, NatsUnavailable, events_cli.EventsFailed) as e:
        print(f"hightide {name}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except HightideError as e:
        print(f"hightide {name}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except PermissionRefused as e:  # NATS permissions (issue 14): the user this command connected as may not
        print(f"hightide {name}: {e}, {_refused_user(args)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
