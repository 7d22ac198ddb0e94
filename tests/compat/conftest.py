"""The compatibility tier's cluster: a real local cluster (its own nats-server, a controller, three brokers, each a
process with a Kafka listener on 127.0.0.1), started as `hightide cluster up` starts it, shared by a module.
When it goes down, the history audit reads every event of the run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hightide.client.local_cluster import LocalCluster
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, wait_for

CONFIG = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=1000",
    "replica.fetch.backoff.ms=200",
    "file.delete.delay.ms=1000",  # a deleted topic's files are removed this long after (Kafka's default: 60 s)
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("compat") / "cluster")
    local.up(brokers=3, controllers=1, cluster_id="compat", config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)  # what the Kafka clients did is history the audit reads like any other


@pytest.fixture(scope="module")
def bootstrap(cluster: LocalCluster) -> str:
    """Kafka's bootstrap.servers: every broker's listener, as cluster.json lists them."""
    listeners: dict[str, str] = json.loads(Path(cluster.state_file).read_text())["kafka_listeners"]
    assert sorted(listeners) == ["1", "2", "3"]
    return ",".join(listeners[b] for b in sorted(listeners))
