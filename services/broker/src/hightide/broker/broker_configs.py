"""A broker's own configs as Kafka's DescribeConfigs answers them for a BROKER resource (issue 15).

Room: services/broker. Every config the broker reads, with the value it runs with: the one it was given
(`--config`, a properties file or the environment: STATIC_BROKER_CONFIG) or its default (DEFAULT_CONFIG); the
topic-level configs it holds as broker-wide defaults (Kafka's log.* configs, named as the topic configs here); and
any other name it was given. Hightide has no dynamic broker configs, so every one is read-only, as Kafka marks a
static config it cannot update at run time. A password or key is sensitive: its value is never sent (Kafka's
PASSWORD type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from hightide.core import topic_configs
from hightide.protocol import kafka

if TYPE_CHECKING:
    from hightide.broker.service import BrokerSettings

_SENSITIVE_ENDINGS: Final = ("password", "jaas.config", "keystore.key")


def sensitive(name: str) -> bool:
    """Kafka's PASSWORD-typed configs (ssl.key.password, ssl.keystore.key, sasl.jaas.config and their
    listener-scoped forms): described without their value."""
    return name.endswith(_SENSITIVE_ENDINGS)


def effective(settings: BrokerSettings) -> dict[str, str]:
    """The value of every config the broker reads, by Kafka's name, as text (the topic-level ones excluded)."""
    p, g, c = settings.partition_config, settings.groups, settings.group_coordinator
    values: dict[str, int | bool] = {
        "min.insync.replicas": p.min_insync_replicas,
        "replica.lag.time.max.ms": p.replica_lag_time_max_ms,
        "legacy.truncate.to.high.watermark": p.legacy_truncate_to_high_watermark,
        "alter.partition.timeout.ms": p.alter_partition_timeout_ms,
        "broker.heartbeat.interval.ms": settings.broker_heartbeat_interval_ms,
        "replica.fetch.wait.max.ms": settings.replica_fetch_wait_max_ms,
        "replica.fetch.max.bytes": settings.replica_fetch_max_bytes,
        "replica.fetch.response.max.bytes": settings.replica_fetch_response_max_bytes,
        "replica.fetch.backoff.ms": settings.replica_fetch_backoff_ms,
        "replica.high.watermark.checkpoint.interval.ms": settings.replica_high_watermark_checkpoint_interval_ms,
        "log.retention.check.interval.ms": settings.log_retention_check_interval_ms,
        "controlled.shutdown.timeout.ms": settings.controlled_shutdown_timeout_ms,
        "controller.request.timeout.ms": settings.controller_request_timeout_ms,
        "log.cleaner.enable": settings.log_cleaner_enable,
        "log.cleaner.backoff.ms": settings.log_cleaner_backoff_ms,
        "max.incremental.fetch.session.cache.slots": settings.max_incremental_fetch_session_cache_slots,
        "offsets.topic.num.partitions": g.offsets_topic_num_partitions,
        "offsets.topic.replication.factor": g.offsets_topic_replication_factor,
        "offsets.commit.timeout.ms": g.offsets_commit_timeout_ms,
        "group.min.session.timeout.ms": c.group_min_session_timeout_ms,
        "group.max.session.timeout.ms": c.group_max_session_timeout_ms,
        "group.initial.rebalance.delay.ms": c.group_initial_rebalance_delay_ms,
        "group.max.size": c.group_max_size,
        "offset.metadata.max.bytes": c.offset_metadata_max_bytes,
    }
    if settings.kafka_listener is not None:
        values["socket.request.max.bytes"] = settings.kafka_listener.socket_request_max_bytes
    return {name: config_text(value) for name, value in values.items()}


def describe(settings: BrokerSettings, wanted: set[str] | None) -> list[kafka.ConfigRow]:
    """The rows of DescribeConfigs for this broker's BROKER resource, by name (`wanted` None: all)."""
    given = settings.static_configs
    values = {
        **{name: config_text(default) for name, default in topic_configs.defaults().items()
           if name in topic_configs.LOG_CONFIG_NAMES},
        **effective(settings),
        **given,
    }  # fmt: skip
    rows: list[kafka.ConfigRow] = []
    for name in sorted(values):
        if wanted is not None and name not in wanted:
            continue
        source = kafka.CONFIG_SOURCE_STATIC_BROKER if name in given else kafka.CONFIG_SOURCE_DEFAULT
        rows.append((name, None if sensitive(name) else values[name], source))
    return rows


def config_text(value: topic_configs.ConfigValue) -> str:
    """A config's value as Kafka prints it: booleans in lower case, lists comma-separated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)
