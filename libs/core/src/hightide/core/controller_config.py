"""The controller's settings: Kafka's controller config names, KRaft's defaults, and their parsing.

Room: libs/core (rules, pure). `ControllerConfig` is what one `ReplicationControl` obeys; the controller service
builds it from a properties file, `--config` or the environment with `from_properties`, which refuses an unknown
name or a bad value with `InvalidControllerConfig` (INVALID_CONFIG) and builds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from hightide.core.topic_configs import (
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIGS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    bool_default,
    int_default,
    parse_bool,
    parse_int,
)
from hightide.protocol.errors import ErrorCode, HightideError


class InvalidControllerConfig(HightideError):
    """A controller setting Kafka would refuse."""

    error_code = ErrorCode.INVALID_CONFIG


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's settings, Kafka's names (dots for underscores) and KRaft's defaults.

    `leader_imbalance_per_broker_percentage` is the ZooKeeper controller's rule, which KRaft dropped (it elects
    every imbalanced partition); set it to 0 for KRaft's behaviour. `max_elections_per_imbalance` is KRaft's
    constant MAX_ELECTIONS_PER_IMBALANCE, a setting here only so tests can lower it.

    `eligible_leader_replicas_enable` is Kafka's feature `eligible.leader.replicas.version` (KIP-966) as a boolean:
    on by default, as Kafka 4.1 enables it on new clusters; `eligible.leader.replicas.enable=false` is the legacy
    mode (no ELR, the last ISR member is kept), in which a replica that lost its log can be elected.
    """

    broker_session_timeout_ms: int = 9_000
    # The cluster-wide defaults of these two topic configs: Kafka's, from the table of topic configs.
    min_insync_replicas: int = int_default(MIN_INSYNC_REPLICAS)
    unclean_leader_election_enable: bool = bool_default(UNCLEAN_LEADER_ELECTION_ENABLE)
    eligible_leader_replicas_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    default_replication_factor: int = 1
    num_partitions: int = 1
    max_elections_per_imbalance: int = 1_000

    def __post_init__(self) -> None:
        checks = {
            "broker.session.timeout.ms": self.broker_session_timeout_ms >= 1,
            MIN_INSYNC_REPLICAS: TOPIC_CONFIGS[MIN_INSYNC_REPLICAS].accepts(self.min_insync_replicas),
            "leader.imbalance.per.broker.percentage": 0 <= self.leader_imbalance_per_broker_percentage <= 100,
            "leader.imbalance.check.interval.seconds": self.leader_imbalance_check_interval_seconds >= 1,
            "default.replication.factor": self.default_replication_factor >= 1,
            "num.partitions": self.num_partitions >= 1,
            "max.elections.per.imbalance": self.max_elections_per_imbalance >= 1,
        }
        for name, valid in checks.items():
            if not valid:
                raise InvalidControllerConfig(f"Invalid value for {name}.")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ControllerConfig:
        """Settings by Kafka's dotted names, values as in a server.properties file."""
        values: dict[str, int | bool] = {}
        for name, text in properties.items():
            attribute = name.replace(".", "_")
            kind = _CONFIG_TYPES.get(attribute)
            if kind is None:
                raise InvalidControllerConfig(f"Unknown controller config name: {name}")
            parsed = parse_bool(text) if kind is bool else parse_int(text)
            if parsed is None:
                raise InvalidControllerConfig(f"Invalid value {text} for configuration {name}")
            values[attribute] = parsed
        return cls(**values)  # type: ignore[arg-type]


_CONFIG_TYPES: Final[dict[str, type]] = {
    name: (bool if isinstance(getattr(ControllerConfig(), name), bool) else int)
    for name in ControllerConfig.__dataclass_fields__
}
