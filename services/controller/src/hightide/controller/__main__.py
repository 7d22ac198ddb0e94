"""`hightide controller --id N`: run one controller process (active or standby) until SIGTERM."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from hightide.controller.service import ControllerService, ControllerSettings
from hightide.core.controller import ControllerConfig, InvalidControllerConfig
from hightide.runtime.config import ConfigError, get_int
from hightide.runtime.events import EventSink
from hightide.runtime.metrics import ControllerMetrics
from hightide.runtime.names import CONTROLLER_CONFIG_NAMES
from hightide.runtime.service import common_parser, parse_common, run_service
from hightide.runtime.stream_replicas import DEFAULT_STREAM_REPLICAS, MAX_STREAM_REPLICAS

_HIGHTIDE_ONLY = ("controller.lease.ms", "metadata.log.replicas")


def main(argv: Sequence[str] | None = None) -> int:
    parser = common_parser("hightide controller", "Run a Hightide controller (active or standby).")
    parser.add_argument("--id", type=int, required=True, help="this controller's id")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="where the event outbox lives (default: ./.hightide/controller-ID)"
    )
    common = parse_common(parser, argv)
    props = common.properties
    try:
        core_props = {k: v for k, v in props.items() if k in CONTROLLER_CONFIG_NAMES and k not in _HIGHTIDE_ONLY}
        settings = ControllerSettings(
            controller_id=common.args.id,
            cluster_id=common.cluster_id,
            config=ControllerConfig.from_properties(core_props),
            lease_ms=get_int(props, "controller.lease.ms", 3_000, minimum=1_000),
            metadata_log_replicas=get_int(
                props, "metadata.log.replicas", DEFAULT_STREAM_REPLICAS, minimum=1, maximum=MAX_STREAM_REPLICAS
            ),
        )
    except (ConfigError, InvalidControllerConfig) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    metrics = ControllerMetrics()

    def build(nc: Client, log: Any, events: EventSink) -> ControllerService:
        return ControllerService(settings, nc, events, log, metrics)

    data_dir = common.args.data_dir or Path(".hightide") / f"controller-{settings.controller_id}"
    return run_service(
        common,
        name="controller",
        service_id=settings.controller_id,
        build=build,
        registry=metrics.registry,
        events_dir=data_dir / "events-outbox",
    )


if __name__ == "__main__":
    sys.exit(main())
