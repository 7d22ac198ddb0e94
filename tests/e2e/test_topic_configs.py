"""`hightide topic alter --config` on a live cluster: the controller commits the change, `topic describe` shows
it, and the brokers apply it to the topic's open replicas at once.

Method: a LocalCluster (nats-server, one controller, three brokers, each a process) driven by the CLI, as a user
drives it. max.message.bytes is the config checked because its effect is visible in one produce.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hightide.client.local_cluster import LocalCluster
from support.cli_process import run_cli

pytestmark = pytest.mark.slow


def hightide(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli([*args, "--data-dir", str(data_dir)], timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("configs") / "cluster")
    local.up(brokers=3, controllers=1, cluster_id="configs", config=[])
    try:
        deadline = time.monotonic() + 60
        while True:
            status = hightide(local.data_dir, "cluster", "status", "--json")
            states = json.loads(status.stdout).get("broker_states", {}) if status.returncode == 0 else {}
            if len([s for s in states.values() if not s["fenced"]]) == 3:
                break
            assert time.monotonic() < deadline, "three active brokers"
            time.sleep(0.1)  # polling a condition with a deadline
        yield local
    finally:
        local.down()


def header_configs(cluster: LocalCluster, topic: str) -> str:
    described = hightide(cluster.data_dir, "topic", "describe", topic)
    header = described.stdout.splitlines()[0]
    return header.split("Configs: ", 1)[1]


def produce_one(cluster: LocalCluster, topic: str, size: int) -> dict[str, object]:
    result = hightide(
        cluster.data_dir, "produce", topic, "--count", "1", "--value-size", str(size), "--print-acks",
        "--producer-property", "delivery.timeout.ms=10000",
    )  # fmt: skip
    ack: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return ack


def test_an_altered_config_is_shown_and_applied_by_the_brokers_and_removing_it_restores_the_default(
    cluster: LocalCluster,
) -> None:
    created = hightide(cluster.data_dir, "topic", "create", "cfg", "--partitions", "1", "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    assert produce_one(cluster, "cfg", 3000)["error"] is None

    altered = hightide(cluster.data_dir, "topic", "alter", "cfg", "--config", "max.message.bytes=2000")
    assert altered.returncode == 0, altered.stderr
    assert altered.stdout == "Completed updating config for topic cfg.\n"
    assert header_configs(cluster, "cfg") == "max.message.bytes=2000"
    assert produce_one(cluster, "cfg", 3000)["error"] == "MESSAGE_TOO_LARGE"  # the leader applied it live
    assert produce_one(cluster, "cfg", 1000)["error"] is None

    removed = hightide(cluster.data_dir, "topic", "alter", "cfg", "--config", "max.message.bytes=")
    assert removed.returncode == 0, removed.stderr
    assert header_configs(cluster, "cfg") == ""
    assert produce_one(cluster, "cfg", 3000)["error"] is None


def test_a_bad_alteration_exits_1_with_kafkas_error_and_changes_nothing(cluster: LocalCluster) -> None:
    created = hightide(
        cluster.data_dir, "topic", "create", "kept", "--partitions", "1", "--replication-factor", "3",
        "--config", "retention.ms=60000",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    for args, error in (
        (("kept", "--config", "no.such.config=1"), "INVALID_CONFIG: Unknown topic config name: no.such.config"),
        (("kept", "--config", "retention.ms=soon"), "INVALID_CONFIG: Invalid value soon for configuration"),
        (("missing", "--config", "retention.ms=1"), "UNKNOWN_TOPIC_OR_PARTITION"),
    ):
        result = hightide(cluster.data_dir, "topic", "alter", *args)
        assert (result.returncode, error in result.stderr) == (1, True), result.stderr
        assert "Traceback" not in result.stderr
    assert header_configs(cluster, "kept") == "retention.ms=60000"
    usage = hightide(cluster.data_dir, "topic", "alter", "kept")
    assert usage.returncode == 2 and "nothing to alter" in usage.stderr
