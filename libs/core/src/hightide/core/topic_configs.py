"""The table of topic configs: Kafka's name, type, bounds, default and documentation line of each one.

Room: libs/core (rules, pure). The one place that says which topic configs exist and what a valid value is. Every
user of a topic config reads it here: the controller's validation of createTopics and incrementalAlterConfigs, the
storage engine's `LogConfig` (its fields, defaults and bounds), the server config names a broker accepts
(hightide.runtime.names), a replica's min.insync.replicas, and `topic describe`. A broker started with
`--config segment.bytes=...` overrides the default below for every topic that does not set its own value.

| name                           | type    | valid                     | default (Kafka's)         | obeyed by        |
| ------------------------------ | ------- | ------------------------- | ------------------------- | ---------------- |
| cleanup.policy                 | list    | delete, compact           | delete                    | storage, cleaner |
| delete.retention.ms            | long    | >= 0                      | 86400000                  | cleaner          |
| file.delete.delay.ms           | long    | >= 0                      | 60000                     | storage          |
| flush.messages                 | long    | >= 1                      | 9223372036854775807       | storage          |
| flush.ms                       | long    | >= 0                      | 9223372036854775807       | storage          |
| index.interval.bytes           | int     | >= 0                      | 4096                      | storage          |
| max.compaction.lag.ms          | long    | >= 1                      | 9223372036854775807       | cleaner, rolling |
| max.message.bytes              | int     | >= 0                      | 1048588                   | storage          |
| min.cleanable.dirty.ratio      | double  | [0, 1]                    | 0.5                       | cleaner          |
| min.compaction.lag.ms          | long    | >= 0                      | 0                         | cleaner          |
| min.insync.replicas            | int     | >= 1                      | 1                         | replicas, elr    |
| retention.bytes                | long    | >= -1                     | -1                        | storage          |
| retention.ms                   | long    | >= -1                     | 604800000                 | storage          |
| segment.bytes                  | int     | >= 14                     | 1073741824                | storage          |
| segment.index.bytes            | int     | >= 32                     | 10485760                  | storage          |
| segment.jitter.ms              | long    | >= 0                      | 0                         | storage          |
| segment.ms                     | long    | >= 1                      | 604800000                 | storage          |
| unclean.leader.election.enable | boolean | true, false (any case)    | false                     | the controller   |

Values are text, as Kafka's ConfigDef parses them: an int or long in decimal within the type's range (and the
bound), a double as a decimal number within its bounds, a boolean "true" or "false" in any case, a list
comma-separated with each item among the choices.
A value the table refuses is refused everywhere with Kafka's message, `Invalid value V for configuration K`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from hightide.protocol.errors import ErrorCode, HightideError

INT_MAX: Final = 2**31 - 1
LONG_MAX: Final = 2**63 - 1
_LIMITS: Final = {"int": (-(2**31), INT_MAX), "long": (-(2**63), LONG_MAX)}

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"

ConfigValue = int | bool | float | tuple[str, ...]


def parse_bool(text: str) -> bool | None:
    """Kafka's ConfigDef BOOLEAN: "true" or "false", any case, around spaces; None for anything else."""
    lowered = text.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


def parse_int(text: str) -> int | None:
    """Kafka's ConfigDef INT/LONG text: a decimal integer, around spaces; None for anything else."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in ("-", "+") else stripped
    return int(stripped) if digits.isascii() and digits.isdigit() else None


class InvalidTopicConfig(HightideError):
    """A topic config name Kafka does not know, or a value it would refuse."""

    error_code = ErrorCode.INVALID_CONFIG

    @property
    def message(self) -> str:
        """Kafka's message, without the error code `str` puts in front of it."""
        return str(self.args[0])


class ConfigType(StrEnum):
    """Kafka's ConfigDef types that topic configs use."""

    INT = "int"
    LONG = "long"
    BOOLEAN = "boolean"
    LIST = "list"
    DOUBLE = "double"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One row of the table. `low` is Kafka's `atLeast` bound of a number (the type's own range bounds the rest);
    `choices` the items a list may hold; `log` whether the storage engine's LogConfig obeys it."""

    name: str
    type: ConfigType
    default: ConfigValue
    documentation: str
    low: int | None = None
    choices: tuple[str, ...] = ()
    log: bool = False
    upper: float | None = None  # a double's `between` upper bound (its lower bound is `low`)

    def __post_init__(self) -> None:
        assert self.parse(self.format(self.default)) == self.default, self  # the default is itself valid

    @property
    def high(self) -> int | None:
        """The largest valid value of a number: its type's."""
        if self.type is ConfigType.DOUBLE:
            return None
        limits = _LIMITS.get(self.type)
        return None if limits is None else limits[1]

    def parse(self, text: str) -> ConfigValue:
        """The value `text` stands for; InvalidTopicConfig (Kafka's message) if it is not a valid one."""
        parsed = self._parse(text)
        if parsed is None:
            raise InvalidTopicConfig(f"Invalid value {text} for configuration {self.name}")
        return parsed

    def _parse(self, text: str) -> ConfigValue | None:
        if self.type is ConfigType.BOOLEAN:
            return parse_bool(text)
        if self.type is ConfigType.LIST:
            items = tuple(item.strip() for item in text.split(","))
            return items if items and all(item in self.choices for item in items) else None
        if self.type is ConfigType.DOUBLE:
            return self._parse_double(text)
        value = parse_int(text)
        low, high = _LIMITS[self.type]
        least = low if self.low is None else max(low, self.low)
        return value if value is not None and least <= value <= high else None

    def _parse_double(self, text: str) -> float | None:
        """Kafka's ConfigDef DOUBLE with a `between` bound: a finite decimal number within [low, upper]."""
        try:
            value = float(text.strip())
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        if (self.low is not None and value < self.low) or (self.upper is not None and value > self.upper):
            return None
        return value

    def accepts(self, value: ConfigValue) -> bool:
        """Whether `value` (already typed, as a dataclass field holds it) is a valid value of this config."""
        return type(value) is type(self.default) and self._parse(self.format(value)) == value

    def format(self, value: ConfigValue) -> str:
        """Kafka's ConfigDef.convertToString: how describe shows a value (a boolean in lower case, a list
        comma-separated without spaces)."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)


_DAY_MS: Final = 24 * 60 * 60 * 1000
_INT, _LONG, _BOOLEAN, _LIST = ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN, ConfigType.LIST
_DOUBLE = ConfigType.DOUBLE

# fmt: off
TOPIC_CONFIGS: Final[Mapping[str, TopicConfig]] = {
    row.name: row
    for row in (
        TopicConfig(
            "cleanup.policy", _LIST, ("delete",), "The retention policy of old segments: delete, compact, or both.",
            choices=("compact", "delete"), log=True,
        ),
        # Log compaction (hightide.core.compaction), with Kafka's defaults.
        TopicConfig(
            "delete.retention.ms", _LONG, _DAY_MS,
            "How long a compacted log keeps a tombstone after the cleaning that first kept it (ms).",
            low=0, log=True,
        ),
        TopicConfig(
            "file.delete.delay.ms", _LONG, 60_000, "The time to wait before deleting a file from the filesystem.",
            low=0, log=True,
        ),
        # Kafka's defaults leave durability to replication: never fsync by count or by time.
        TopicConfig(
            "flush.messages", _LONG, LONG_MAX, "Force an fsync of the log after this many messages.",
            low=1, log=True,
        ),
        TopicConfig(
            "flush.ms", _LONG, LONG_MAX, "Force an fsync of the log once a message is this old (ms).",
            low=0, log=True,
        ),
        TopicConfig(
            "index.interval.bytes", _INT, 4096, "How many bytes of log between two entries of the offset index.",
            low=0, log=True,
        ),
        TopicConfig(
            "max.compaction.lag.ms", _LONG, LONG_MAX,
            "The longest a record may stay uncompacted in a compacted log (ms).",
            low=1, log=True,
        ),
        TopicConfig(
            "max.message.bytes", _INT, 1024 * 1024 + 12, "The largest record batch size allowed (after compression).",
            low=0, log=True,
        ),
        TopicConfig(
            "min.cleanable.dirty.ratio", _DOUBLE, 0.5,
            "The dirty share of a compacted log's bytes above which the cleaner cleans it.",
            low=0, upper=1.0, log=True,
        ),
        TopicConfig(
            "min.compaction.lag.ms", _LONG, 0,
            "The shortest a record stays uncompacted in a compacted log (ms).",
            low=0, log=True,
        ),
        TopicConfig(
            MIN_INSYNC_REPLICAS, _INT, 1,
            "With acks=all, the fewest in-sync replicas that must hold a write for it to succeed.",
            low=1,
        ),
        # Kafka takes any LONG and reads a negative one as "unlimited"; the storage engine takes -1 for that, and
        # a committed config a broker cannot apply would stop every broker hosting the topic.
        TopicConfig(
            "retention.bytes", _LONG, -1, "The most bytes a partition's log may hold before old segments are deleted.",
            low=-1, log=True,
        ),
        TopicConfig(
            "retention.ms", _LONG, 7 * _DAY_MS, "How long a log is kept before old segments are deleted; -1: forever.",
            low=-1, log=True,
        ),
        # Kafka's bound before 4.0 raised it to 1 MiB: small segments keep the tests fast and a laptop cluster small.
        TopicConfig(
            "segment.bytes", _INT, 1024 * 1024 * 1024, "The size of a log segment file.",
            low=14, log=True,
        ),
        # Kafka's bound is 4; Hightide's index holds at least four offset entries (8 bytes each).
        TopicConfig(
            "segment.index.bytes", _INT, 10 * 1024 * 1024, "The size of a segment's offset index.",
            low=8 * 4, log=True,
        ),
        TopicConfig(
            "segment.jitter.ms", _LONG, 0, "The most random jitter subtracted from a segment's scheduled roll time.",
            low=0, log=True,
        ),
        TopicConfig(
            "segment.ms", _LONG, 7 * _DAY_MS, "The time after which the log rolls a new segment even if not full.",
            low=1, log=True,
        ),
        TopicConfig(
            UNCLEAN_LEADER_ELECTION_ENABLE, _BOOLEAN, False,
            "Whether a replica outside the ISR may be elected leader as a last resort, though data may be lost.",
        ),
    )
}
# fmt: on
"""Every topic config Hightide accepts, by Kafka's name (the table in the module docstring)."""

LOG_CONFIG_NAMES: Final = frozenset(name for name, row in TOPIC_CONFIGS.items() if row.log)
"""The topic configs the storage engine's LogConfig obeys (also broker-wide defaults, as in Kafka)."""


def topic_config(name: str) -> TopicConfig:
    """The row of `name`; InvalidTopicConfig (Kafka's message) if there is none."""
    row = TOPIC_CONFIGS.get(name)
    if row is None:
        raise InvalidTopicConfig(f"Unknown topic config name: {name}")
    return row


def parse(name: str, text: str) -> ConfigValue:
    """The value of config `name` given as `text`; InvalidTopicConfig for an unknown name or a bad value."""
    return topic_config(name).parse(text)


def validate(configs: Mapping[str, str]) -> None:
    """Check every name=value (in the given order, the first problem wins); InvalidTopicConfig if one is bad."""
    for name, text in configs.items():
        parse(name, text)


def defaults() -> dict[str, ConfigValue]:
    """Kafka's default of every topic config."""
    return {name: row.default for name, row in TOPIC_CONFIGS.items()}


def int_default(name: str) -> int:
    """Kafka's default of an int or long config."""
    default = topic_config(name).default
    assert isinstance(default, int) and not isinstance(default, bool), name
    return default


def float_default(name: str) -> float:
    """Kafka's default of a double config."""
    default = topic_config(name).default
    assert isinstance(default, float), name
    return default


def list_default(name: str) -> tuple[str, ...]:
    """Kafka's default of a list config."""
    default = topic_config(name).default
    assert isinstance(default, tuple), name
    return default


def bool_default(name: str) -> bool:
    """Kafka's default of a boolean config."""
    default = topic_config(name).default
    assert isinstance(default, bool), name
    return default


def configured(configs: Mapping[str, str], name: str) -> ConfigValue | None:
    """The value a topic sets for `name`, or None where it sets none. A value that does not parse (committed by an
    older, laxer controller) counts as unset rather than stopping whoever reads it."""
    text = configs.get(name)
    if text is None:
        return None
    try:
        return topic_config(name).parse(text)
    except InvalidTopicConfig:
        return None


def min_insync_replicas(configs: Mapping[str, str], default: int) -> int:
    """A topic's min.insync.replicas: its own, else `default` (the broker's or the cluster's)."""
    value = configured(configs, MIN_INSYNC_REPLICAS)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def unclean_leader_election_enable(configs: Mapping[str, str], default: bool) -> bool:
    """A topic's unclean.leader.election.enable: its own, else `default` (the cluster's)."""
    value = configured(configs, UNCLEAN_LEADER_ELECTION_ENABLE)
    return value if isinstance(value, bool) else default


def list_after(name: str, current: str | None, given: str, *, append: bool) -> str:
    """A list config after IncrementalAlterConfigs' APPEND (`append`) or SUBTRACT of the comma-separated `given`, as
    Kafka's ConfigAdminManager: from the topic's override `current`, else the default; APPEND adds the items not yet
    there, SUBTRACT removes them. InvalidTopicConfig (Kafka's message) for an unknown or non-list config."""
    row = TOPIC_CONFIGS.get(name)
    if row is None:
        raise InvalidTopicConfig(f"Unknown topic config name: {name}")
    if row.type is not ConfigType.LIST:
        verb = "append" if append else "subtract"
        raise InvalidTopicConfig(f"Config value {verb} is not allowed for config key: {name}")
    text = current if current is not None else row.format(row.default)
    items = [item.strip() for item in text.split(",") if item.strip()]
    wanted = [item.strip() for item in given.split(",") if item.strip()]
    if append:
        return ",".join([*items, *(item for item in wanted if item not in items)])
    return ",".join(item for item in items if item not in wanted)


def describe(configs: Mapping[str, str]) -> str:
    """The `Configs:` field of kafka-topics.sh --describe for the configs set on a topic: `name=value` joined by
    commas, by name, each value as Kafka's describeConfigs shows it (parsed, then ConfigDef.convertToString).
    A name this table does not know is shown as it was set."""
    shown = []
    for name in sorted(configs):
        row, value = TOPIC_CONFIGS.get(name), configured(configs, name)
        shown.append(f"{name}={configs[name] if row is None or value is None else row.format(value)}")
    return ",".join(shown)
