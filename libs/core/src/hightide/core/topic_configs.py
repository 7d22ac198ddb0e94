"""Topic configs: the names a topic may be created or altered with, and whether a value is valid.

Room: libs/core (rules, pure).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"


def parse_bool(text: str) -> bool | None:
    """Kafka's ConfigDef BOOLEAN: "true" or "false", any case."""
    lowered = text.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


def parse_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1


def _valid_int(low: int, high: int) -> Callable[[str], bool]:
    """Kafka's INT or LONG config with its lower bound: a value outside the type is refused as Kafka refuses it."""

    def check(text: str) -> bool:
        value = parse_int(text)
        return value is not None and low <= value <= high

    return check


def _valid_cleanup_policy(text: str) -> bool:
    policies = [p.strip() for p in text.split(",")]
    return bool(policies) and all(p in ("delete", "compact") for p in policies)


TOPIC_CONFIGS: Final[Mapping[str, Callable[[str], bool]]] = {
    MIN_INSYNC_REPLICAS: _valid_int(1, _INT_MAX),
    UNCLEAN_LEADER_ELECTION_ENABLE: lambda text: parse_bool(text) is not None,
    "retention.ms": _valid_int(-1, _LONG_MAX),
    # Kafka takes any LONG and reads a negative one as "unlimited"; the brokers' log config (hightide.storage)
    # takes -1 for that, and a committed config a broker cannot apply would stop every broker hosting the topic.
    "retention.bytes": _valid_int(-1, _LONG_MAX),
    "segment.bytes": _valid_int(14, _INT_MAX),
    "segment.ms": _valid_int(1, _LONG_MAX),
    "max.message.bytes": _valid_int(0, _INT_MAX),
    "cleanup.policy": _valid_cleanup_policy,
}
"""The topic configs a topic may be created with, and whether a value is valid (Kafka's LogConfig checks, with
the bounds of each config's type: the brokers build their log config from these values and must accept them)."""
