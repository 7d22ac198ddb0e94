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
from typing import Any, Final

from hightide.core.compaction import CompactionSettings, is_compacted, is_deleted_by_retention, max_segment_ms
from hightide.core.topic_configs import (
    LOG_CONFIG_NAMES,
    TOPIC_CONFIGS,
    InvalidTopicConfig,
    float_default,
    int_default,
    list_default,
    parse,
)
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
    # Log compaction (hightide.core.compaction, hightide.storage.cleaner).
    cleanup_policy: tuple[str, ...] = list_default("cleanup.policy")
    min_cleanable_dirty_ratio: float = float_default("min.cleanable.dirty.ratio")
    delete_retention_ms: int = int_default("delete.retention.ms")
    min_compaction_lag_ms: int = int_default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = int_default("max.compaction.lag.ms")

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            row = TOPIC_CONFIGS[_KAFKA_NAME[field.name]]
            value = getattr(self, field.name)
            if not row.accepts(value):
                raise InvalidConfig(f"{row.name}={value!r} is out of range [{row.low}, {row.high}]")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka's dotted names, overriding `base` (Kafka's defaults if None)."""
        changes: dict[str, Any] = {}  # each value typed by its row, as the dataclass checks
        for name, raw in properties.items():
            field = _FIELD_FOR.get(name)
            if field is None:
                raise InvalidConfig(f"unknown log config {name!r}; known: {', '.join(sorted(_FIELD_FOR))}")
            try:
                value = parse(name, str(raw))
            except InvalidTopicConfig as error:
                raise InvalidConfig(error.message) from None
            assert not isinstance(value, bool), (name, value)
            changes[field] = value
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Kafka's dotted names and values, for describe output and round trips."""
        return {
            _KAFKA_NAME[f.name]: TOPIC_CONFIGS[_KAFKA_NAME[f.name]].format(getattr(self, f.name))
            for f in dataclasses.fields(self)
        }

    @property
    def offset_index_max_entries(self) -> int:
        return self.segment_index_bytes // 8

    @property
    def time_index_max_entries(self) -> int:
        return self.segment_index_bytes // 12

    @property
    def compact(self) -> bool:
        """cleanup.policy holds `compact`: the log cleaner compacts this log."""
        return is_compacted(self.cleanup_policy)

    @property
    def delete(self) -> bool:
        """cleanup.policy holds `delete`: retention.ms and retention.bytes delete old segments."""
        return is_deleted_by_retention(self.cleanup_policy)

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, or max.compaction.lag.ms if lower on a compacted log (Kafka's `LogConfig.maxSegmentMs`)."""
        return max_segment_ms(self.cleanup_policy, self.segment_ms, self.max_compaction_lag_ms)

    def compaction_settings(self) -> CompactionSettings:
        return CompactionSettings(
            min_cleanable_dirty_ratio=self.min_cleanable_dirty_ratio,
            min_compaction_lag_ms=self.min_compaction_lag_ms,
            max_compaction_lag_ms=self.max_compaction_lag_ms,
            delete_retention_ms=self.delete_retention_ms,
            segment_bytes=self.segment_bytes,
            offset_index_max_entries=self.offset_index_max_entries,
            time_index_max_entries=self.time_index_max_entries,
        )


_KAFKA_NAME: Final = {f.name: f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}
_FIELD_FOR: Final = {dotted: field for field, dotted in _KAFKA_NAME.items()}
# The table decides which topic configs the log obeys; a field here without its row (or a row without its field)
# would be a config one side accepts and the other ignores.
assert set(_FIELD_FOR) == LOG_CONFIG_NAMES, sorted(set(_FIELD_FOR) ^ LOG_CONFIG_NAMES)
