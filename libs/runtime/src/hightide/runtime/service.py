"""Running a service process: the arguments every service takes, and the start and stop around its `run`.

Room: libs/runtime. `run_service` parses the common arguments (`--nats-url`, `--cluster-id`, `--config k=v`,
`--config-file`, `--http-port`, `--log-format`, `--log-level`), loads the layered properties, configures
structlog, connects to NATS, serves /metrics, /healthz and /readyz, and runs the service until SIGTERM or
SIGINT, when it asks the service to stop and waits for it. Expected failures (bad config, NATS unreachable)
print one line and exit 2 or 1; nothing expected prints a traceback.

A service given an `events_dir` gets an event pipeline (`event_store.EventPipeline`: outbox, sink, relay) whose
sink `build` receives. It starts before the service runs and is drained after the service stops, so the service's
last events reach the stream before the process ends.
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
from hightide.runtime.config import ConfigError, get_int, load_properties
from hightide.runtime.event_store import DEFAULT_RETENTION_MS, EventPipeline, NullEventSink
from hightide.runtime.events import EventSink, LogEventSink
from hightide.runtime.http import serve_http
from hightide.runtime.logging import configure_logging, get_logger
from hightide.runtime.names import SERVER_CONFIG_NAMES
from hightide.runtime.nats import NatsUnavailable, connect, nats_settings
from hightide.runtime.outbox import OutboxError
from hightide.runtime.shutdown import Shutdown
from hightide.runtime.stream_replicas import DEFAULT_STREAM_REPLICAS, MAX_STREAM_REPLICAS

BENCH_EVENTS_ENV = "HIGHTIDE_BENCH_EVENTS"  # "off": no event emission, for the emission-cost benchmark only


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
    build: Callable[..., Service],
    registry: Any,
    events_dir: Path | None = None,
) -> int:
    """Run the service built by `build(nats_connection, logger)` (and the event sink, given `events_dir`) until a
    signal; the process exit status."""
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
        events = None
        if events_dir is not None:
            events = _EventsSpec(
                events_dir,
                common.cluster_id,
                name,
                service_id,
                replicas=get_int(
                    common.properties,
                    "events.stream.replicas",
                    DEFAULT_STREAM_REPLICAS,
                    minimum=1,
                    maximum=MAX_STREAM_REPLICAS,
                ),
                retention_ms=get_int(common.properties, "events.retention.ms", DEFAULT_RETENTION_MS, minimum=60_000),
            )
        return asyncio.run(_serve(settings, build, registry, args, log, events))
    except NatsUnavailable as error:
        print(f"hightide {name}: {error}", file=sys.stderr)
        return 1
    except (ConfigError, OutboxError) as error:
        print(f"hightide {name}: error: {error}", file=sys.stderr)
        return 2


@dataclass(frozen=True)
class _EventsSpec:
    directory: Path
    cluster_id: str
    service: str
    emitter_id: int
    replicas: int
    retention_ms: int


async def _serve(
    settings: Any, build: Callable[..., Service], registry: Any, args: Any, log: Any, events: _EventsSpec | None
) -> int:
    shutdown = Shutdown(log)
    shutdown.install(asyncio.get_running_loop())
    nc = await connect(settings, log=log)
    pipeline = None
    if events is None:
        service = build(nc, log)
    else:
        pipeline, sink = _open_events(nc, events, log)
        service = build(nc, log, sink)
    http = None
    if args.http_port is not None:
        http = await serve_http(
            args.http_host, args.http_port, registry=registry, healthy=lambda: True, ready=lambda: service.ready
        )
        log.info("http_listening", host=args.http_host, port=http.port)
    try:
        await _run_until_shutdown(service, shutdown)
    finally:
        if pipeline is not None:
            drained = await pipeline.close()
            log.info("events_closed", published=pipeline.relay.published, drained=drained)
        if http is not None:
            await http.close()
        with contextlib.suppress(Exception):
            await nc.drain()
    return 0


def _open_events(nc: Client, events: _EventsSpec, log: Any) -> tuple[EventPipeline | None, EventSink]:
    """The outbox pipeline, or (with the benchmark-only HIGHTIDE_BENCH_EVENTS=off) no emission at all."""
    if os.environ.get(BENCH_EVENTS_ENV) == "off":
        log.warning("events_off", detail=f"{BENCH_EVENTS_ENV}=off: benchmark-only, this process emits no events")
        return None, NullEventSink()
    pipeline = EventPipeline.open(
        nc,
        events.directory,
        cluster_id=events.cluster_id,
        service=events.service,
        emitter_id=events.emitter_id,
        log=log,
        also=LogEventSink(log),
        replicas=events.replicas,
        retention_ms=events.retention_ms,
    )
    pipeline.start()
    log.info("events_outbox", path=str(pipeline.writer.path), incarnation=pipeline.writer.header.incarnation)
    return pipeline, pipeline.sink


async def _run_until_shutdown(service: Service, shutdown: Shutdown) -> None:
    async def stop_on_signal() -> None:
        await shutdown.wait()
        service.stopping.set()

    watcher = asyncio.ensure_future(stop_on_signal())
    try:
        await service.run()
    finally:
        watcher.cancel()
