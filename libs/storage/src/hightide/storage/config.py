"""Per-log configuration: Kafka's topic-level names and Kafka's defaults.

Room: libs/storage. `LogConfig` is what one partition log obeys: the topic configs that the table of topic configs
(`hightide.core.topic_configs`) marks as the storage engine's, with that table's defaults and bounds (there is no
second copy here). Users set it with Kafka's dotted names (`segment.bytes=1048576`) through
`LogConfig.from_properties`; an unknown name or a value the table refuses is an `InvalidConfig` (INVALID_CONFIG)
and changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from hightide.core.topic_configs import LOG_CONFIG_NAMES, TOPIC_CONFIGS, InvalidTopicConfig, int_default, parse
from hightide.storage.errors import InvalidConfig


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic configs that govern the log on disk, with Kafka's defaults (the table of topic configs)."""

    segment_bytes: int = int_default("segment.bytes")
    segment_ms: int = int_default("segment.ms")
    segment_jitter_ms: int = int_default("segment.jitter.ms")
    segment_index_bytes: int = int_default("segment.index.bytes")
    index_interval_bytes: int = int_default("index.interval.bytes")
    retention_ms: int = int_default("retention.ms")
    retention_bytes: int = int_default("retention.bytes")
    flush_messages: int = int_default("flush.messages")
    flush_ms: int = int_default("flush.ms")
    max_message_bytes: int = int_default("max.message.bytes")
    file_delete_delay_ms: int = int_default("file.delete.delay.ms")

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            row = TOPIC_CONFIGS[_KAFKA_NAME[field.name]]
            value = getattr(self, field.name)
            if not row.accepts(value):
                raise InvalidConfig(f"{row.name}={value!r} is out of range [{row.low}, {row.high}]")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka's dotted names, overriding `base` (Kafka's defaults if None)."""
        changes: dict[str, int] = {}
        for name, raw in properties.items():
            field = _FIELD_FOR.get(name)
            if field is None:
                raise InvalidConfig(f"unknown log config {name!r}; known: {', '.join(sorted(_FIELD_FOR))}")
            try:
                value = parse(name, str(raw))
            except InvalidTopicConfig as error:
                raise InvalidConfig(error.message) from None
            assert isinstance(value, int) and not isinstance(value, bool), (name, value)
            changes[field] = value
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
# The table decides which topic configs the log obeys; a field here without its row (or a row without its field)
# would be a config one side accepts and the other ignores.
assert set(_FIELD_FOR) == LOG_CONFIG_NAMES, sorted(set(_FIELD_FOR) ^ LOG_CONFIG_NAMES)
