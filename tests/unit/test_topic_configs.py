"""One table of topic configs: Kafka's names, types, bounds and defaults, and every user of them reads it.

Method: the table against Kafka's documented values written out here (LogConfig.java / TopicConfig.java, Kafka
3.x), each number config at and beyond its bounds, text Kafka's ConfigDef refuses; then each user of the table
(the controller, the storage engine's LogConfig, the server config names, `topic describe`) shown to follow it,
so a row changed in the table changes them all.
"""

from __future__ import annotations

import pytest

from hightide.client.commands import describe_lines
from hightide.core import topic_configs
from hightide.core.controller import ControllerConfig, ReplicationControl
from hightide.core.topic_configs import (
    LOG_CONFIG_NAMES,
    TOPIC_CONFIGS,
    ConfigType,
    InvalidTopicConfig,
    min_insync_replicas,
    unclean_leader_election_enable,
)
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.metadata import ConfigRecord
from hightide.runtime.names import BROKER_CONFIG_NAMES, SERVER_CONFIG_NAMES
from hightide.storage.config import LogConfig
from hightide.storage.errors import InvalidConfig

KAFKA_DEFAULTS = {
    "cleanup.policy": ("delete",),
    "delete.retention.ms": 86_400_000,
    "max.compaction.lag.ms": 2**63 - 1,
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "file.delete.delay.ms": 60_000,
    "flush.messages": 2**63 - 1,
    "flush.ms": 2**63 - 1,
    "index.interval.bytes": 4096,
    "max.message.bytes": 1_048_588,
    "min.insync.replicas": 1,
    "retention.bytes": -1,
    "retention.ms": 604_800_000,
    "segment.bytes": 1_073_741_824,
    "segment.index.bytes": 10_485_760,
    "segment.jitter.ms": 0,
    "segment.ms": 604_800_000,
    "unclean.leader.election.enable": False,
}

NUMBERS = sorted(name for name, row in TOPIC_CONFIGS.items() if row.type in (ConfigType.INT, ConfigType.LONG))


def test_the_table_holds_kafkas_topic_configs_with_kafkas_defaults() -> None:
    assert topic_configs.defaults() == KAFKA_DEFAULTS
    assert all(row.documentation.endswith(".") for row in TOPIC_CONFIGS.values())


@pytest.mark.parametrize("name", NUMBERS)
def test_a_number_is_valid_from_its_bound_to_the_top_of_its_type(name: str) -> None:
    row = TOPIC_CONFIGS[name]
    assert row.low is not None and row.high == (2**31 - 1 if row.type is ConfigType.INT else 2**63 - 1)
    assert topic_configs.parse(name, str(row.low)) == row.low
    assert topic_configs.parse(name, str(row.high)) == row.high
    for refused in (row.low - 1, row.high + 1):
        with pytest.raises(InvalidTopicConfig) as raised:
            topic_configs.parse(name, str(refused))
        assert raised.value.error_code is ErrorCode.INVALID_CONFIG
        assert raised.value.message == f"Invalid value {refused} for configuration {name}"


@pytest.mark.parametrize("text", ["", "ten", "1.5", "0x10", "1e3", "1_000", "٣", "--1", "+"])
def test_a_number_is_decimal_digits_as_javas_parse_reads_them(text: str) -> None:
    with pytest.raises(InvalidTopicConfig):
        topic_configs.parse("retention.ms", text)


def test_values_are_trimmed_booleans_take_any_case_and_lists_take_their_choices() -> None:
    assert topic_configs.parse("retention.ms", " 01000 ") == 1000
    assert topic_configs.parse("retention.ms", "+5") == 5
    assert topic_configs.parse("unclean.leader.election.enable", "TRUE") is True
    assert topic_configs.parse("cleanup.policy", "compact, delete") == ("compact", "delete")
    for name, bad in (("unclean.leader.election.enable", "yes"), ("cleanup.policy", "shred"), ("cleanup.policy", "")):
        with pytest.raises(InvalidTopicConfig):
            topic_configs.parse(name, bad)


def test_the_dirty_ratio_is_a_double_between_zero_and_one_and_the_cleanup_policy_reaches_the_log() -> None:
    assert topic_configs.parse("min.cleanable.dirty.ratio", " 0.25 ") == 0.25
    assert topic_configs.parse("min.cleanable.dirty.ratio", "1") == 1.0
    for bad in ("-0.1", "1.01", "nan", "inf", "half", ""):
        with pytest.raises(InvalidTopicConfig) as raised:
            topic_configs.parse("min.cleanable.dirty.ratio", bad)
        assert raised.value.message == f"Invalid value {bad} for configuration min.cleanable.dirty.ratio"
    config = LogConfig.from_properties({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"})
    assert (config.compact, config.delete, config.min_cleanable_dirty_ratio) == (True, False, 0.1)
    assert LogConfig.from_properties({"cleanup.policy": "compact,delete"}).to_properties()["cleanup.policy"] == (
        "compact,delete"
    )
    # A compacted log rolls by max.compaction.lag.ms when it is below segment.ms (Kafka's maxSegmentMs).
    assert LogConfig.from_properties({"cleanup.policy": "compact", "max.compaction.lag.ms": "5"}).max_segment_ms == 5
    assert LogConfig.from_properties({"max.compaction.lag.ms": "5"}).max_segment_ms == LogConfig().segment_ms


def test_an_unknown_name_is_refused_with_kafkas_message() -> None:
    with pytest.raises(InvalidTopicConfig) as raised:
        topic_configs.validate({"retention.ms": "1", "no.such.config": "1"})
    assert raised.value.message == "Unknown topic config name: no.such.config"


def test_a_topics_own_value_wins_over_the_default_and_a_value_that_does_not_parse_counts_as_unset() -> None:
    assert min_insync_replicas({"min.insync.replicas": "2"}, default=1) == 2
    assert min_insync_replicas({}, default=3) == 3
    assert min_insync_replicas({"min.insync.replicas": "0"}, default=3) == 3  # committed by a laxer controller
    assert unclean_leader_election_enable({"unclean.leader.election.enable": "True"}, default=False) is True
    assert unclean_leader_election_enable({}, default=True) is True


# -- its users ---------------------------------------------------------------------------------------------------


def test_the_controller_accepts_exactly_the_tables_names() -> None:
    control = ReplicationControl()
    for name, row in TOPIC_CONFIGS.items():
        configs = {name: row.format(row.default)}
        answer = control.create_topic(f"t-{name}", topic_id=name, partitions=1, configs=configs).response
        # No broker is registered: the config passes, and placement is what refuses.
        assert answer.error is ErrorCode.INVALID_REPLICATION_FACTOR, (name, answer)
    refused = control.create_topic("t", topic_id="t", configs={"log.retention.ms": "1"}).response
    assert (refused.error, refused.message) == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: log.retention.ms")


def test_the_controller_commits_a_log_config_it_did_not_accept_before_the_table() -> None:
    control = ReplicationControl()
    control.apply(control.register_broker(0, "a", -1, now_ms=0).records)
    control.apply(control.heartbeat(0, 0, now_ms=0).records)
    result = control.create_topic("t", topic_id="t", partitions=1, configs={"flush.ms": "1000"})
    assert result.response.error is ErrorCode.NONE
    assert ConfigRecord(topic="t", name="flush.ms", value="1000") in result.records


def test_the_controllers_cluster_defaults_are_the_tables() -> None:
    config = ControllerConfig()
    assert config.min_insync_replicas == KAFKA_DEFAULTS["min.insync.replicas"]
    assert config.unclean_leader_election_enable is KAFKA_DEFAULTS["unclean.leader.election.enable"]


def test_log_config_is_the_tables_log_rows_with_their_defaults_and_bounds() -> None:
    assert set(LogConfig().to_properties()) == LOG_CONFIG_NAMES
    assert LogConfig().to_properties() == {
        name: TOPIC_CONFIGS[name].format(KAFKA_DEFAULTS[name]) for name in LOG_CONFIG_NAMES
    }
    assert {"min.insync.replicas", "unclean.leader.election.enable"}.isdisjoint(LOG_CONFIG_NAMES)
    with pytest.raises(InvalidConfig) as raised:
        LogConfig.from_properties({"segment.bytes": "13"})
    assert raised.value.error_code is ErrorCode.INVALID_CONFIG
    with pytest.raises(InvalidConfig):
        LogConfig(segment_index_bytes=31)


def test_a_brokers_default_overrides_kafkas_for_topics_that_do_not_set_their_own() -> None:
    broker_defaults = LogConfig.from_properties({"segment.bytes": "1048576", "retention.ms": "60000"})
    topic = LogConfig.from_properties({"retention.ms": "1000"}, base=broker_defaults)
    assert (topic.segment_bytes, topic.retention_ms, topic.max_message_bytes) == (1_048_576, 1000, 1_048_588)


def test_every_server_config_name_of_the_table_is_accepted_by_the_services() -> None:
    assert LOG_CONFIG_NAMES <= SERVER_CONFIG_NAMES
    assert "min.insync.replicas" in BROKER_CONFIG_NAMES


def test_describe_shows_the_configs_set_on_the_topic_as_kafka_formats_them() -> None:
    topic = wire.TopicMetadata(
        name="t",
        topic_id="id",
        configs={
            "unclean.leader.election.enable": "TRUE",
            "retention.ms": " 01000",
            "cleanup.policy": "compact, delete",
        },
    )
    header = describe_lines(topic)[0]
    assert header.endswith(
        "\tConfigs: cleanup.policy=compact,delete,retention.ms=1000,unclean.leader.election.enable=true"
    )
    assert topic_configs.describe({}) == ""
    assert topic_configs.describe({"some.future.config": "x"}) == "some.future.config=x"  # a newer controller's


def test_append_and_subtract_of_a_list_config_start_from_the_override_else_the_default() -> None:
    """IncrementalAlterConfigs' APPEND and SUBTRACT, as Kafka's ConfigAdminManager (the Kafka listener's rule)."""
    assert topic_configs.list_after("cleanup.policy", None, "compact", append=True) == "delete,compact"
    assert topic_configs.list_after("cleanup.policy", "compact", "compact, delete", append=True) == "compact,delete"
    assert topic_configs.list_after("cleanup.policy", "delete,compact", "delete", append=False) == "compact"
    assert topic_configs.list_after("cleanup.policy", None, "delete", append=False) == ""
    with pytest.raises(topic_configs.InvalidTopicConfig, match=r"append is not allowed for config key: retention\.ms"):
        topic_configs.list_after("retention.ms", None, "1", append=True)
    with pytest.raises(topic_configs.InvalidTopicConfig, match="Unknown topic config name: nope"):
        topic_configs.list_after("nope", None, "x", append=False)
