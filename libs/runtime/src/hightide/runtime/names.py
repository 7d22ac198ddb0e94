"""Every server config name a broker or controller accepts (Kafka's `server.properties` names, plus Hightide's).

Room: libs/runtime. One properties file may configure a whole cluster, as Kafka's combined `server.properties`
does, so both services accept every name here and each reads the ones it uses; a name outside this set is a
typo and refused. Topic-level names (segment.bytes, retention.ms, …) are also broker defaults, as in Kafka; which
ones the log obeys is the table of topic configs' to say (`hightide.core.topic_configs.LOG_CONFIG_NAMES`).
"""

from __future__ import annotations

from typing import Final

from hightide.core.topic_configs import LOG_CONFIG_NAMES, MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION_ENABLE
from hightide.runtime.nats import NATS_CONFIG_NAMES

__all__ = [
    "BROKER_CONFIG_NAMES",
    "KAFKA_LISTENER_CONFIG_NAMES",
    "KAFKA_SECURITY_CONFIG_NAMES",
    "CONTROLLER_CONFIG_NAMES",
    "EVENTS_CONFIG_NAMES",
    "GROUP_CONFIG_NAMES",
    "LOG_CONFIG_NAMES",
    "SERVER_CONFIG_NAMES",
]


CONTROLLER_CONFIG_NAMES: Final = frozenset(
    {
        "broker.session.timeout.ms",
        MIN_INSYNC_REPLICAS,
        UNCLEAN_LEADER_ELECTION_ENABLE,
        "eligible.leader.replicas.enable",
        "auto.leader.rebalance.enable",
        "leader.imbalance.per.broker.percentage",
        "leader.imbalance.check.interval.seconds",
        "default.replication.factor",
        "num.partitions",
        "max.elections.per.imbalance",
        "controller.lease.ms",
        "metadata.log.replicas",
    }
)

BROKER_CONFIG_NAMES: Final = frozenset(
    {
        MIN_INSYNC_REPLICAS,
        "replica.lag.time.max.ms",
        "legacy.truncate.to.high.watermark",
        "alter.partition.timeout.ms",
        "broker.heartbeat.interval.ms",
        "replica.fetch.wait.max.ms",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.backoff.ms",
        "replica.high.watermark.checkpoint.interval.ms",
        "log.retention.check.interval.ms",
        "controlled.shutdown.timeout.ms",
        "controller.request.timeout.ms",
        # log compaction (issue 13)
        "log.cleaner.enable",
        "log.cleaner.backoff.ms",
        # incremental fetch sessions for follower fetches (KIP-227, issue 15's fetch path)
        "max.incremental.fetch.session.cache.slots",
    }
)

# The group coordinator and the offsets topic (issue 13: consumer groups), read by the broker.
GROUP_CONFIG_NAMES: Final = frozenset(
    {
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "offsets.commit.timeout.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms",
        "group.max.size",
        "offset.metadata.max.bytes",
    }
)

# The broker's Kafka wire-protocol listener (issue 15).
KAFKA_LISTENER_CONFIG_NAMES: Final = frozenset({"listeners", "advertised.listeners", "socket.request.max.bytes"})

# The event store (every service): the EVENTS stream's replicas and retention, used when a service creates it.
EVENTS_CONFIG_NAMES: Final = frozenset({"events.stream.replicas", "events.retention.ms"})

# The Kafka listener's security (issue 15, security): Kafka's names, each also as listener.name.<listener>.<name>,
# and the PLAIN users' listener.name.<listener>.plain.sasl.jaas.config (see hightide.broker.kafka_security).
KAFKA_SECURITY_CONFIG_NAMES: Final = frozenset(
    {
        "listener.security.protocol.map",
        "sasl.enabled.mechanisms",
        "sasl.server.max.receive.size",
        "connection.failed.authentication.delay.ms",
        "sasl.scram.credentials.file",  # Hightide's: Kafka keeps SCRAM credentials in its metadata log
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
    }
)


class ServerConfigNames(frozenset[str]):
    """The known names, and Kafka's listener-scoped forms of the security ones (the listener's name is free)."""

    def __contains__(self, name: object) -> bool:
        if super().__contains__(name):
            return True
        if not isinstance(name, str) or not name.startswith("listener.name."):
            return False
        scoped = name.removeprefix("listener.name.").partition(".")[2]
        return scoped in KAFKA_SECURITY_CONFIG_NAMES or scoped == "plain.sasl.jaas.config"


SERVER_CONFIG_NAMES: Final = ServerConfigNames(
    KAFKA_SECURITY_CONFIG_NAMES  # issue 15, security
    | LOG_CONFIG_NAMES
    | CONTROLLER_CONFIG_NAMES
    | BROKER_CONFIG_NAMES
    | GROUP_CONFIG_NAMES
    | KAFKA_LISTENER_CONFIG_NAMES
    | EVENTS_CONFIG_NAMES
    | frozenset(NATS_CONFIG_NAMES)
)
