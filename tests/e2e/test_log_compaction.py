"""Log compaction in running brokers: each replica's cleaner compacts its own log of a compacted topic, consumers
read each key's latest value at its offset, and a replica that lost its disk copies the compacted log, gaps and all,
then serves it as leader.

Method: a LocalCluster (nats-server, a controller, two brokers, each a process) with log.cleaner.backoff.ms=200,
driven by the Python producer (keyed records) and the CLI consumer, as a user would. The event store says when each
replica has compacted (LogCompacted). Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hightide.client.connection import ClusterConnection
from hightide.client.local_cluster import LocalCluster
from hightide.client.producer import Producer, ProducerConfig
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, describe, hightide, wait_for

pytestmark = pytest.mark.slow

CONFIG = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=2000",
    "replica.fetch.backoff.ms=200",
    "log.cleaner.backoff.ms=200",
]
TOPIC = "offsets"
KEYS = 5
RECORDS = 150


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=2, controllers=1, cluster_id="compaction", config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 2, 60, "two active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)  # issue 13: compaction, and the copy of a compacted log, are not loss


def isr(cluster: LocalCluster) -> set[int]:
    (line,) = describe(cluster, TOPIC)
    return {int(b) for b in line["Isr"].split(",") if b}


def leader(cluster: LocalCluster) -> int | None:
    """The partition's leader; None while it has none (`none` in describe, during an election)."""
    (line,) = describe(cluster, TOPIC)
    return int(line["Leader"]) if line["Leader"].isdigit() else None


def copied_by(cluster: LocalCluster, broker: int) -> set[str]:
    """The incarnations of `broker` that appended the topic's records up to its last offset."""
    result = hightide(cluster.data_dir, "events", "tail", "--type", "RecordsAppended", "--format", "json", timeout=60)
    return {
        e["incarnation"]
        for e in map(json.loads, result.stdout.splitlines())
        if e["emitter_id"] == broker and e["event"]["topic"] == TOPIC and e["event"]["log_end_offset"] >= RECORDS
    }


def compacted_by(cluster: LocalCluster) -> set[int]:
    result = hightide(cluster.data_dir, "events", "tail", "--type", "LogCompacted", "--format", "json", timeout=60)
    return {e["emitter_id"] for e in map(json.loads, result.stdout.splitlines()) if e["event"]["topic"] == TOPIC}


def consume_all(cluster: LocalCluster) -> list[dict[str, Any]]:
    result = hightide(
        cluster.data_dir, "consume", TOPIC, "--from-beginning", "--max-messages", str(RECORDS),
        "--timeout-ms", "5000", "--format", "json",
    )  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines()]


def assert_latest_per_key(records: list[dict[str, Any]], produced: dict[str, tuple[int, str]]) -> None:
    """Offsets increase; each record is one that was produced at that offset; each key's last record read is its
    latest; and the compacted part holds fewer records than were produced."""
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets)), offsets
    last = {r["key"]: (r["offset"], r["value"]) for r in records}
    assert last == produced
    assert len(records) < RECORDS


def test_each_replica_compacts_and_a_replica_that_lost_its_disk_copies_the_compacted_log(
    cluster: LocalCluster,
) -> None:
    """Given a compacted topic with two replicas and 150 records over 5 keys in small segments, when the cleaners
    run, then both replicas report LogCompacted and a consumer from the beginning reads each key's latest value
    at its own offset. When the follower loses its disk and comes back, it copies the leader's compacted log
    (offset gaps between batches) into the ISR; when the old leader then stops, the copy, as leader, serves the
    same latest values."""
    created = hightide(
        cluster.data_dir, "topic", "create", TOPIC, "--partitions", "1", "--replication-factor", "2",
        "--config", "cleanup.policy=compact", "--config", "segment.bytes=1024",
        "--config", "min.cleanable.dirty.ratio=0.01", "--config", "min.insync.replicas=1",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    wait_for(lambda: isr(cluster) == {1, 2}, 30, "a full ISR")
    state = cluster.read_state()
    assert state is not None
    produced = asyncio.run(_produce(state.nats_url, state.cluster_id))

    wait_for(lambda: compacted_by(cluster) == {1, 2}, 60, "both replicas compacted their logs")
    assert_latest_per_key(consume_all(cluster), produced)

    first_leader = leader(cluster)
    assert first_leader is not None
    follower = 3 - first_leader
    before = copied_by(cluster, follower)
    cluster.stop_broker(follower, hard=True)
    shutil.rmtree(cluster.data_dir / f"broker-{follower}" / f"{TOPIC}-0")
    cluster.start_broker(follower)
    # The ISR and the active brokers still show the killed process until the leader and the controller notice: wait
    # for the new process itself to have copied the log to its end, then for the ISR.
    wait_for(lambda: copied_by(cluster, follower) - before, 60, "the new follower process copied the whole log")
    wait_for(lambda: follower in active_brokers(cluster) and isr(cluster) == {1, 2}, 60, "the copy back in the ISR")
    cluster.stop_broker(first_leader, hard=False)
    wait_for(lambda: leader(cluster) == follower, 30, "the copy leads")
    assert_latest_per_key(consume_all(cluster), produced)


async def _produce(nats_url: str, cluster_id: str) -> dict[str, tuple[int, str]]:
    """RECORDS keyed records over KEYS keys, one at a time; each key's latest (offset, value)."""
    connection = await ClusterConnection.open(nats_url, cluster_id)
    latest: dict[str, tuple[int, str]] = {}
    try:
        async with Producer(connection, ProducerConfig(linger_ms=0)) as producer:
            for i in range(RECORDS):
                key, value = f"group-{i % KEYS}", f"commit {i} " + "x" * 40
                sent = await producer.send(TOPIC, value.encode(), key=key.encode())
                latest[key] = ((await sent).offset, value)
    finally:
        await connection.close()
    return latest
