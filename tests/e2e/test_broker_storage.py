"""A running broker and its disk: a refused append takes the replica offline (never a silent hole), and time-based
retention deletes old segments (the wall clock, not the monotonic one).

Method: a LocalCluster (nats-server, a controller, three brokers, each a process), driven with the CLI and the
Python producer as a user would. Issue 11's defects 2 and 3 were both seen only in a running broker: a follower
whose storage refused a fetched batch logged it and went on with its core ahead of its log, and retention compared
record timestamps with a monotonic clock, so it never fired. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
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
    "log.retention.check.interval.ms=500",
]
HOUR_MS = 3_600_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=1, cluster_id="storage", config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


def partition(cluster: LocalCluster, topic: str) -> dict[str, str]:
    """The one partition's line of `topic describe`."""
    (line,) = describe(cluster, topic)
    return line


def isr(cluster: LocalCluster, topic: str) -> set[int]:
    text = partition(cluster, topic)["Isr"]
    return {int(b) for b in text.split(",") if b}


def produce(cluster: LocalCluster, topic: str, count: int, size: int) -> list[dict[str, Any]]:
    result = hightide(
        cluster.data_dir, "produce", topic, "--count", str(count), "--value-size", str(size), "--print-acks",
        "--producer-property", "delivery.timeout.ms=30000",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def consume(cluster: LocalCluster, topic: str, count: int) -> list[dict[str, Any]]:
    result = hightide(
        cluster.data_dir, "consume", topic, "--from-beginning", "--max-messages", str(count),
        "--timeout-ms", "20000", "--format", "json",
    )  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines()]


def events_of(cluster: LocalCluster, kind: str) -> list[dict[str, Any]]:
    result = hightide(cluster.data_dir, "events", "tail", "--type", kind, "--format", "json", timeout=60)
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_follower_whose_disk_refuses_goes_offline_leaves_the_isr_and_rejoins_after_a_restart(
    cluster: LocalCluster,
) -> None:
    """Given a follower restarted with segment.bytes smaller than the batches its leader takes, when a large
    record is produced (acks=all, min ISR 2), then the follower's storage refuses the fetched batch: its replica
    goes offline (ReplicaOffline), the controller takes it out of the ISR, the record is acknowledged by the other
    two, and nothing is appended past a hole. Restarted with the default segment.bytes, it recovers, fetches the
    batch whole and is back in the ISR; every acknowledged record reads back."""
    created = hightide(
        cluster.data_dir, "topic", "create", "refused", "--partitions", "1", "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    wait_for(lambda: isr(cluster, "refused") == {1, 2, 3}, 30, "a full ISR")
    leader = int(partition(cluster, "refused")["Leader"])
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.stop_broker(follower, hard=False)
    cluster.start_broker(follower, config=["segment.bytes=4096"])
    wait_for(lambda: follower in active_brokers(cluster) and isr(cluster, "refused") == {1, 2, 3}, 60, "it rejoined")

    acks = produce(cluster, "refused", 1, 20_000)
    assert [a["error"] for a in acks] == [None]
    wait_for(lambda: follower not in isr(cluster, "refused"), 30, "the refusing follower out of the ISR")
    offline = wait_for(lambda: events_of(cluster, "ReplicaOffline"), 30, "a ReplicaOffline event")
    assert [(e["emitter_id"], e["event"]["topic"], e["event"]["error"]) for e in offline] == [
        (follower, "refused", "RECORD_LIST_TOO_LARGE")
    ]
    assert offline[0]["event"]["log_end_offset"] == 0, "the follower's log never took the batch"
    assert partition(cluster, "refused")["Leader"] == str(leader)
    more = produce(cluster, "refused", 5, 100)
    assert all(a["error"] is None for a in more), "the other two replicas keep acks=all going"

    cluster.stop_broker(follower, hard=False)
    cluster.start_broker(follower)  # its disk takes the batch now
    wait_for(lambda: isr(cluster, "refused") == {1, 2, 3}, 60, "the recovered replica back in the ISR")
    assert [r["offset"] for r in consume(cluster, "refused", 6)] == list(range(6))


def test_time_based_retention_deletes_old_segments_in_a_running_broker(cluster: LocalCluster) -> None:
    """Given six segments of records an hour old and retention.ms of a minute, when the brokers' retention check
    runs, then every old segment is deleted on every replica (the log start offset moves past them), and the fresh
    record stays. Before issue 11 a running broker compared record timestamps with its monotonic clock, and
    deleted nothing."""
    created = hightide(
        cluster.data_dir, "topic", "create", "aged", "--partitions", "1", "--replication-factor", "3",
        "--config", "retention.ms=60000", "--config", "segment.bytes=1024", "--config", "min.insync.replicas=2",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    wait_for(lambda: isr(cluster, "aged") == {1, 2, 3}, 30, "a full ISR")
    state = cluster.read_state()
    assert state is not None
    offsets = asyncio.run(_produce_aged(state.nats_url, state.cluster_id))
    assert offsets == list(range(7))

    def replicas_retained() -> bool:
        advanced = [e for e in events_of(cluster, "LogStartOffsetAdvanced") if e["event"]["topic"] == "aged"]
        return {e["emitter_id"] for e in advanced if e["event"]["log_start_offset"] == 6} == {1, 2, 3}

    wait_for(replicas_retained, 30, "every replica's log start offset past the old segments")
    deleted = [e["event"] for e in events_of(cluster, "SegmentDeleted") if e["event"]["topic"] == "aged"]
    # A leader's segments go by retention.ms; a follower's by its own, or by following the leader's log start.
    reasons = {e["reason"] for e in deleted}
    assert "retention_ms" in reasons and reasons <= {"retention_ms", "log_start_offset"}, reasons
    assert [(r["offset"], r["value"]) for r in consume(cluster, "aged", 1)] == [(6, "fresh")]


async def _produce_aged(nats_url: str, cluster_id: str) -> list[int]:
    """Six records an hour old, each in a segment of its own (900 bytes against segment.bytes 1024), then one now."""
    connection = await ClusterConnection.open(nats_url, cluster_id)
    offsets = []
    try:
        async with Producer(connection, ProducerConfig(linger_ms=0)) as producer:
            old = int(time.time() * 1000) - HOUR_MS
            for i in range(6):
                sent = await producer.send("aged", b"o" * 900, timestamp_ms=old + i)
                offsets.append((await sent).offset)
            fresh = await producer.send("aged", b"fresh")
            offsets.append((await fresh).offset)
    finally:
        await connection.close()
    return offsets


def test_a_parked_follower_fetch_is_answered_by_the_append_it_waits_for(tmp_path: Path) -> None:
    """Given followers whose fetches wait up to a minute at the leader (replica.fetch.wait.max.ms=60000), when a
    record is produced with acks=all, then it is acknowledged well within that minute: the append wakes the
    parked fetches and they read what it appended. (A broker that answered them before carrying out the append
    found nothing to read, parked them again, and acknowledged acks=all only at their deadline.)"""
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=1, cluster_id="parked", config=[*CONFIG, "replica.fetch.wait.max.ms=60000"])
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        created = hightide(
            local.data_dir, "topic", "create", "parked", "--partitions", "1", "--replication-factor", "3",
            "--config", "min.insync.replicas=3",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        wait_for(lambda: isr(local, "parked") == {1, 2, 3}, 30, "a full ISR")
        for _ in range(3):
            result = hightide(
                local.data_dir, "produce", "parked", "--count", "1", "--print-acks",
                "--producer-property", "delivery.timeout.ms=30000", "--producer-property", "request.timeout.ms=30000",
                timeout=50,
            )  # fmt: skip
            assert result.returncode == 0 and json.loads(result.stdout)["error"] is None, result.stdout + result.stderr
    finally:
        local.down()
