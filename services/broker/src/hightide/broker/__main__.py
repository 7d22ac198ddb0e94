"""`hightide broker --id N --data-dir DIR`: run one broker process until SIGTERM (then a controlled shutdown)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from hightide.broker.groups import GroupSettings
from hightide.broker.kafka_listener import listener_config
from hightide.broker.service import BrokerService, BrokerSettings
from hightide.core.group_coordinator import GroupCoordinatorConfig
from hightide.core.partition import PartitionConfig
from hightide.core.topic_configs import int_default
from hightide.runtime.config import ConfigError, get_bool, get_int
from hightide.runtime.events import EventSink
from hightide.runtime.memory import keep_large_buffers
from hightide.runtime.metrics import BrokerMetrics
from hightide.runtime.names import LOG_CONFIG_NAMES
from hightide.runtime.service import common_parser, parse_common, run_service
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError

MIB = 1024 * 1024
OUTBOX_DIR = "events-outbox"  # not a partition directory name (those end in -<partition number>)


def settings_from(broker_id: int, cluster_id: str, data_dir: Path, props: dict[str, str]) -> BrokerSettings:
    """The broker's settings from Kafka's config names (ConfigError on a bad value)."""
    partition_config = PartitionConfig(
        min_insync_replicas=get_int(props, "min.insync.replicas", int_default("min.insync.replicas"), minimum=1),
        replica_lag_time_max_ms=get_int(props, "replica.lag.time.max.ms", 30_000, minimum=1),
        legacy_truncate_to_high_watermark=get_bool(props, "legacy.truncate.to.high.watermark", False),
        alter_partition_timeout_ms=get_int(props, "alter.partition.timeout.ms", 30_000, minimum=1),
    )
    try:
        log_config = LogConfig.from_properties({k: v for k, v in props.items() if k in LOG_CONFIG_NAMES})
    except StorageError as error:
        raise ConfigError(str(error)) from None
    return BrokerSettings(
        broker_id=broker_id,
        cluster_id=cluster_id,
        data_dir=data_dir,
        partition_config=partition_config,
        log_config=log_config,
        log_defaults={k: v for k, v in props.items() if k in LOG_CONFIG_NAMES},
        broker_heartbeat_interval_ms=get_int(props, "broker.heartbeat.interval.ms", 2_000, minimum=10),
        replica_fetch_wait_max_ms=get_int(props, "replica.fetch.wait.max.ms", 500, minimum=0, maximum=60_000),
        replica_fetch_max_bytes=get_int(props, "replica.fetch.max.bytes", MIB, minimum=1),
        replica_fetch_response_max_bytes=get_int(props, "replica.fetch.response.max.bytes", 10 * MIB, minimum=1),
        replica_fetch_backoff_ms=get_int(props, "replica.fetch.backoff.ms", 1_000, minimum=0),
        replica_high_watermark_checkpoint_interval_ms=get_int(
            props, "replica.high.watermark.checkpoint.interval.ms", 5_000, minimum=1
        ),
        log_retention_check_interval_ms=get_int(props, "log.retention.check.interval.ms", 300_000, minimum=1),
        controller_request_timeout_ms=get_int(props, "controller.request.timeout.ms", 5_000, minimum=1),
        controlled_shutdown_timeout_ms=get_int(props, "controlled.shutdown.timeout.ms", 30_000, minimum=0),
        log_cleaner_enable=get_bool(props, "log.cleaner.enable", True),
        log_cleaner_backoff_ms=get_int(props, "log.cleaner.backoff.ms", 15_000, minimum=0),
        groups=group_settings_from(props),
        group_coordinator=group_coordinator_config_from(props),
        kafka_listener=listener_config(props, get_int(props, "socket.request.max.bytes", 104_857_600, minimum=1)),
        max_incremental_fetch_session_cache_slots=get_int(
            props, "max.incremental.fetch.session.cache.slots", 1_000, minimum=0
        ),
        static_configs=dict(props),
    )


def group_settings_from(props: dict[str, str]) -> GroupSettings:
    """The offsets topic's configs (issue 13), by Kafka's names and defaults."""
    return GroupSettings(
        offsets_topic_num_partitions=get_int(props, "offsets.topic.num.partitions", 50, minimum=1, maximum=10_000),
        offsets_topic_replication_factor=get_int(props, "offsets.topic.replication.factor", 3, minimum=1),
        offsets_commit_timeout_ms=get_int(props, "offsets.commit.timeout.ms", 5_000, minimum=1),
    )


def group_coordinator_config_from(props: dict[str, str]) -> GroupCoordinatorConfig:
    """The group coordinator's configs, by Kafka's names and defaults."""
    minimum_session = get_int(props, "group.min.session.timeout.ms", 6_000, minimum=0)
    maximum_session = get_int(props, "group.max.session.timeout.ms", 1_800_000, minimum=0)
    if maximum_session < minimum_session:
        raise ConfigError("group.max.session.timeout.ms must be >= group.min.session.timeout.ms")
    return GroupCoordinatorConfig(
        offsets_topic_num_partitions=get_int(props, "offsets.topic.num.partitions", 50, minimum=1, maximum=10_000),
        group_min_session_timeout_ms=minimum_session,
        group_max_session_timeout_ms=maximum_session,
        group_initial_rebalance_delay_ms=get_int(props, "group.initial.rebalance.delay.ms", 3_000, minimum=0),
        group_max_size=get_int(props, "group.max.size", 2**31 - 1, minimum=1),
        offset_metadata_max_bytes=get_int(props, "offset.metadata.max.bytes", 4_096, minimum=0),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = common_parser("hightide broker", "Run a Hightide broker.")
    parser.add_argument("--id", type=int, required=True, help="this broker's id (node.id)")
    parser.add_argument("--data-dir", type=Path, required=True, help="the log directory (log.dirs)")
    common = parse_common(parser, argv)
    if common.args.id < 0:
        parser.exit(2, f"{parser.prog}: error: --id must be >= 0\n")
    try:
        settings = settings_from(common.args.id, common.cluster_id, common.args.data_dir, common.properties)
    except ConfigError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    metrics = BrokerMetrics()
    keep_large_buffers()  # record batches of up to a megabyte, copied several times per hop: reuse their pages

    def build(nc: Client, log: Any, events: EventSink) -> BrokerService:
        return BrokerService(settings, nc, events, log, metrics)

    return run_service(
        common,
        name="broker",
        service_id=settings.broker_id,
        build=build,
        registry=metrics.registry,
        events_dir=settings.data_dir / OUTBOX_DIR,
    )


if __name__ == "__main__":
    sys.exit(main())
