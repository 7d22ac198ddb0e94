"""DescribeConfigs of a BROKER resource: every config the broker reads is described, with where its value comes
from, and a password never leaves the broker."""

from __future__ import annotations

from pathlib import Path

from hightide.broker import broker_configs
from hightide.broker.__main__ import settings_from
from hightide.protocol import kafka
from hightide.runtime.names import BROKER_CONFIG_NAMES, GROUP_CONFIG_NAMES, LOG_CONFIG_NAMES

GIVEN = {
    "replica.lag.time.max.ms": "1000",
    "log.cleaner.enable": "false",
    "segment.bytes": "1048576",
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "ssl.key.password": "hunter2",
    "listener.name.sasl.plain.sasl.jaas.config": "users",
}


def test_every_config_the_broker_reads_is_described_with_its_value_and_source() -> None:
    settings = settings_from(1, "c", Path("/nonexistent"), dict(GIVEN))
    rows = {name: (value, source) for name, value, source in broker_configs.describe(settings, None)}
    # A config added to the broker without a description fails this.
    assert (
        set(broker_configs.effective(settings_from(1, "c", Path("/x"), {}))) >= BROKER_CONFIG_NAMES | GROUP_CONFIG_NAMES
    )
    assert set(rows) >= LOG_CONFIG_NAMES
    static, default = kafka.CONFIG_SOURCE_STATIC_BROKER, kafka.CONFIG_SOURCE_DEFAULT
    assert rows["replica.lag.time.max.ms"] == ("1000", static)
    assert rows["log.cleaner.enable"] == ("false", static)
    assert rows["segment.bytes"] == ("1048576", static)
    assert rows["listeners"] == ("PLAINTEXT://127.0.0.1:0", static)
    assert rows["replica.fetch.wait.max.ms"] == ("500", default)
    assert rows["group.initial.rebalance.delay.ms"] == ("3000", default)
    assert rows["retention.ms"] == ("604800000", default)
    assert rows["ssl.key.password"] == (None, static)
    assert rows["listener.name.sasl.plain.sasl.jaas.config"] == (None, static)
    assert list(rows) == sorted(rows)


def test_the_configuration_keys_asked_narrow_the_answer() -> None:
    settings = settings_from(1, "c", Path("/nonexistent"), {})
    rows = broker_configs.describe(settings, {"group.max.size", "no.such.config"})
    assert rows == [("group.max.size", "2147483647", kafka.CONFIG_SOURCE_DEFAULT)]
