"""Per-log configuration: Kafka's topic-level names and Kafka's defaults.

Room: libs/storage. `LogConfig` is what one partition log obeys. Users set it with Kafka's dotted names
(`segment.bytes=1048576`) through `LogConfig.from_properties`; an unknown name or a value out of Kafka's range is
an `InvalidConfig` (INVALID_CONFIG) and changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from hightide.storage.errors import InvalidConfig

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic configs that govern the log on disk, with Kafka's defaults (LogConfig.java)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    # Kafka's defaults leave durability to replication: never fsync by count or by time.
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    file_delete_delay_ms: int = 60_000

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            low, high = _RANGES[field.name]
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidConfig(f"{_KAFKA_NAME[field.name]}={value!r} is out of range [{low}, {high}]")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka's dotted names, overriding `base` (Kafka's defaults if None)."""
        changes: dict[str, int] = {}
        for name, raw in properties.items():
            field = _FIELD_FOR.get(name)
            if field is None:
                raise InvalidConfig(f"unknown log config {name!r}; known: {', '.join(sorted(_FIELD_FOR))}")
            try:
                changes[field] = int(str(raw).strip())
            except ValueError:
                raise InvalidConfig(f"{name}={raw!r} is not an integer") from None
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Kafka's dotted names and values, for describe output and round trips."""
        return {_KAFKA_NAME[f.name]: str(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @property
    def offset_index_max_entries(self) -> int:
        return self.segment_index_bytes // 8

    @property
    def time_index_max_entries(self) -> int:
        return self.segment_index_bytes // 12


_KAFKA_NAME: Final = {f.name: f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}
_FIELD_FOR: Final = {dotted: field for field, dotted in _KAFKA_NAME.items()}
# Kafka's validators (LogConfig.java, before 4.0 raised the segment.bytes floor to 1 MiB; small segments keep
# the tests fast and a cluster on a laptop small).
_RANGES: Final[dict[str, tuple[int, int]]] = {
    "segment_bytes": (14, INT_MAX),
    "segment_ms": (1, LONG_MAX),
    "segment_jitter_ms": (0, LONG_MAX),
    "segment_index_bytes": (8 * 4, INT_MAX),
    "index_interval_bytes": (0, INT_MAX),
    "retention_ms": (-1, LONG_MAX),
    "retention_bytes": (-1, LONG_MAX),
    "flush_messages": (1, LONG_MAX),
    "flush_ms": (0, LONG_MAX),
    "max_message_bytes": (0, INT_MAX),
    "file_delete_delay_ms": (0, LONG_MAX),
}
