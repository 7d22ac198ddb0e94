"""Running a service process: the arguments every service takes, and the start and stop around its `run`.

Room: libs/runtime. `run_service` parses the common arguments (`--nats-url`, `--cluster-id`, `--config k=v`,
`--config-file`, `--http-port`, `--log-format`, `--log-level`), loads the layered properties, configures
structlog, connects to NATS, serves /metrics, /healthz and /readyz, and runs the service until SIGTERM or
SIGINT, when it asks the service to stop and waits for it. Expected failures (bad config, NATS unreachable)
print one line and exit 2 or 1; nothing expected prints a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nats.aio.client import Client

from hightide.protocol.subjects import InvalidClusterId, check_cluster_id
from hightide.runtime.config import ConfigError, load_properties
from hightide.runtime.http import serve_http
from hightide.runtime.logging import configure_logging, get_logger
from hightide.runtime.names import SERVER_CONFIG_NAMES
from hightide.runtime.nats import NatsUnavailable, connect, nats_settings
from hightide.runtime.shutdown import Shutdown


class Service(Protocol):
    stopping: asyncio.Event

    async def run(self) -> None: ...

    @property
    def ready(self) -> bool: ...


@dataclass(frozen=True)
class Common:
    """What every service process is told: where NATS is, which cluster, its properties, how to log."""

    args: argparse.Namespace
    cluster_id: str
    properties: dict[str, str]


def common_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--nats-url", default=None, help="NATS server URL (default: HIGHTIDE_NATS_URL or nats.url)")
    parser.add_argument("--cluster-id", default=None, help="cluster id (default: HIGHTIDE_CLUSTER_ID or 'local')")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    parser.add_argument("--config-file", type=Path, default=None, help="a properties file")
    parser.add_argument("--http-port", type=int, default=None, help="serve /metrics, /healthz, /readyz on this port")
    parser.add_argument("--http-host", default="127.0.0.1", help="address for the HTTP endpoints")
    parser.add_argument("--log-format", choices=("json", "console"), default="json")
    parser.add_argument("--log-level", default="info")
    return parser


def parse_common(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> Common:
    args = parser.parse_args(argv)
    try:
        cluster_id = check_cluster_id(args.cluster_id or os.environ.get("HIGHTIDE_CLUSTER_ID") or "local")
        properties = load_properties(known=SERVER_CONFIG_NAMES, config_file=args.config_file, overrides=args.config)
    except (ConfigError, InvalidClusterId) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    return Common(args, cluster_id, properties)


def run_service(
    common: Common,
    *,
    name: str,
    service_id: int,
    build: Callable[[Client, Any], Service],
    registry: Any,
) -> int:
    """Run the service built by `build(nats_connection, logger)` until a signal; the process exit status."""
    args = common.args
    configure_logging(json=args.log_format == "json", level=args.log_level, service=name, service_id=service_id)
    log = get_logger(f"hightide.{name}")
    url = args.nats_url or os.environ.get("HIGHTIDE_NATS_URL")
    try:
        settings = nats_settings(common.properties, url=url, name=f"hightide-{name}-{service_id}")
    except ConfigError as error:
        print(f"hightide {name}: error: {error}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(settings, build, registry, args, log))
    except NatsUnavailable as error:
        print(f"hightide {name}: {error}", file=sys.stderr)
        return 1


async def _serve(settings: Any, build: Callable[[Client, Any], Service], registry: Any, args: Any, log: Any) -> int:
    shutdown = Shutdown(log)
    shutdown.install(asyncio.get_running_loop())
    nc = await connect(settings, log=log)
    service = build(nc, log)
    http = None
    if args.http_port is not None:
        http = await serve_http(
            args.http_host, args.http_port, registry=registry, healthy=lambda: True, ready=lambda: service.ready
        )
        log.info("http_listening", host=args.http_host, port=http.port)
    try:
        await _run_until_shutdown(service, shutdown)
    finally:
        if http is not None:
            await http.close()
        with contextlib.suppress(Exception):
            await nc.drain()
    return 0


async def _run_until_shutdown(service: Service, shutdown: Shutdown) -> None:
    async def stop_on_signal() -> None:
        await shutdown.wait()
        service.stopping.set()

    watcher = asyncio.ensure_future(stop_on_signal())
    try:
        await service.run()
    finally:
        watcher.cancel()
