"""A group consumer's configuration: Kafka's names and defaults, bad values refused with Kafka's message.

Method: `ConsumerConfig.from_properties` on what a user passes with `--consumer-property`; the `hightide consume`
usage check for --group with --partition, run in-process through the CLI's main (exit 2, one line, no traceback).
"""

from __future__ import annotations

import pytest

from hightide.client.cli import main
from hightide.client.consumer import ConsumerConfig


def test_the_group_defaults_are_kafkas() -> None:
    config = ConsumerConfig()
    assert config.group_id is None and config.group_instance_id is None
    assert (config.session_timeout_ms, config.heartbeat_interval_ms, config.max_poll_interval_ms) == (
        45_000,
        3_000,
        300_000,
    )
    assert (config.enable_auto_commit, config.auto_commit_interval_ms) == (True, 5_000)
    assert config.strategies == ("range", "cooperative-sticky")


def test_group_properties_are_parsed() -> None:
    config = ConsumerConfig.from_properties(
        {
            "group.id": "billing",
            "group.instance.id": "c1",
            "enable.auto.commit": "false",
            "session.timeout.ms": "6000",
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.StickyAssignor, roundrobin",
        }
    )
    assert (config.group_id, config.group_instance_id, config.enable_auto_commit) == ("billing", "c1", False)
    assert config.session_timeout_ms == 6_000
    assert config.strategies == ("sticky", "roundrobin")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("partition.assignment.strategy", "fair"),
        ("partition.assignment.strategy", ""),
        ("enable.auto.commit", "yes"),
        ("group.id", ""),
        ("session.timeout.ms", "soon"),
    ],
)
def test_bad_values_are_refused_with_kafkas_message(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"Invalid value {value} for configuration {name}"):
        ConsumerConfig.from_properties({name: value})


def test_consume_with_a_group_and_a_partition_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["consume", "orders", "--group", "g", "--partition", "0"]) == 2
    err = capsys.readouterr().err
    assert "--group" in err and "Traceback" not in err
