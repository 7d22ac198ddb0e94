"""The broker's Kafka listener settings, by Kafka's names: `listeners`, `advertised.listeners`,
`socket.request.max.bytes`. A bad value is a one-line ConfigError, and `hightide broker` exits 2 with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hightide.broker.__main__ import settings_from
from hightide.broker.kafka_listener import ListenerConfig, listener_config
from hightide.runtime.config import ConfigError


def test_no_listeners_means_no_kafka_listener() -> None:
    assert listener_config({}, 100) is None
    assert settings_from(1, "c", Path("/nonexistent"), {}).kafka_listener is None


def test_listeners_and_advertised_listeners() -> None:
    assert listener_config({"listeners": "PLAINTEXT://127.0.0.1:9092"}, 100) == ListenerConfig(
        "127.0.0.1", 9092, "127.0.0.1", 0, 100
    )
    config = listener_config(
        {"listeners": "PLAINTEXT://0.0.0.0:0", "advertised.listeners": "PLAINTEXT://broker-1.example:19092"}, 100
    )
    assert config == ListenerConfig("0.0.0.0", 0, "broker-1.example", 19092, 100)
    props = {"listeners": "PLAINTEXT://127.0.0.1:9092", "socket.request.max.bytes": "1024"}
    settings = settings_from(1, "c", Path("/nonexistent"), props)
    assert settings.kafka_listener is not None
    assert settings.kafka_listener.socket_request_max_bytes == 1024


@pytest.mark.parametrize(
    "props",
    [
        {"listeners": "SASL_SSL://127.0.0.1:9092"},  # no sasl.enabled.mechanisms, no keystore
        {"listeners": "127.0.0.1:9092"},
        {"listeners": "PLAINTEXT://127.0.0.1:port"},
        {"listeners": "PLAINTEXT://127.0.0.1:70000"},
        {"listeners": "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"},
        {"listeners": "PLAINTEXT://0.0.0.0:9092"},  # nothing advertised a client could reach
    ],
)
def test_bad_listeners_are_config_errors(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        listener_config(props, 100)


def test_the_broker_exits_2_with_one_line_on_a_bad_listener(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hightide.broker",
            "--id",
            "1",
            "--data-dir",
            str(tmp_path),
            "--config",
            "listeners=SSL://127.0.0.1:9093",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "listeners" in result.stderr and "Traceback" not in result.stderr
