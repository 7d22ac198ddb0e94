"""A real local cluster (its own nats-server, a controller, three brokers, each a process) under kill -9 and SIGSTOP.

Method: `LocalCluster` starts the processes exactly as `hightide cluster up` does; the test drives them with the
CLI (`hightide produce --count --print-acks`, `hightide consume --format json`, `hightide topic describe`) and
with signals. Every wait is a poll of a condition with a deadline. Session and lag timeouts are shortened so
failures are detected in seconds; the protocol is the same.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hightide.client.local_cluster import LocalCluster, pid_alive
from support.audited import assert_history_clean
from support.cluster_cli import Producer, active_brokers, describe, hightide, status, wait_for
from support.containers import local_cluster

pytestmark = pytest.mark.slow

CONFIG = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=1000",
    "controller.lease.ms=2000",
    "replica.fetch.backoff.ms=200",
]
SESSION_TIMEOUT_S = 3.0


# A paused follower must leave the ISR by its leader's AlterPartition (replica.lag.time.max.ms, checked every half of
# it) before its broker session runs out. At 3 s the margin is ~1.5 s, which a loaded machine running another
# worker's Spark job beside it can lose; that test's cluster keeps its sessions for 15 s, so the order it asserts is
# the protocol's, not the machine's.
LONG_SESSION_CONFIG = [
    *(c for c in CONFIG if not c.startswith("broker.session.timeout.ms=")),
    "broker.session.timeout.ms=15000",
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from running_cluster(tmp_path, CONFIG)


@pytest.fixture
def long_session_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from running_cluster(tmp_path, LONG_SESSION_CONFIG)


def running_cluster(tmp_path: Path, config: list[str]) -> Iterator[LocalCluster]:
    local = local_cluster(tmp_path / "cluster")  # containers under HIGHTIDE_CONTAINERS=1
    local.up(brokers=3, controllers=2, cluster_id="e2e", config=config)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


def leader_other_than(cluster: LocalCluster, topic: str, old: int) -> int:
    leader = describe(cluster, topic)[0]["Leader"]
    return 0 if leader in ("none", str(old)) else int(leader)


def controller_other_than(cluster: LocalCluster, old: int) -> dict[str, int] | None:
    active: dict[str, int] | None = status(cluster).get("active_controller")
    return active if active and active["id"] != old else None


def create_topic(cluster: LocalCluster, topic: str, partitions: int = 1) -> None:
    result = hightide(
        cluster.data_dir,
        "topic",
        "create",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    )
    assert result.returncode == 0, result.stderr
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, topic)), 30, "a full ISR")


def consume_all(cluster: LocalCluster, topic: str, expected: int) -> list[dict[str, Any]]:
    result = hightide(
        cluster.data_dir,
        "consume",
        topic,
        "--from-beginning",
        "--format",
        "json",
        "--max-messages",
        str(expected),
        "--timeout-ms",
        "60000",
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def fenced_on_session_timeout(cluster: LocalCluster, broker: int) -> list[dict[str, Any]]:
    """The controller's BrokerFenced events for `broker` with reason session_timeout, from the event store."""
    result = hightide(cluster.data_dir, "events", "tail", "--type", "BrokerFenced", "--format", "json", timeout=60)
    assert result.returncode == 0, result.stderr
    fenced = [json.loads(line) for line in result.stdout.splitlines()]
    return [e for e in fenced if e["event"]["broker"] == broker and e["event"]["reason"] == "session_timeout"]


def leader_pid(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    leader = int(describe(cluster, topic)[0]["Leader"])
    state = cluster.read_state()
    assert state is not None
    return leader, state.brokers[str(leader)]


def isr_of(cluster: LocalCluster, topic: str) -> list[int]:
    return [int(b) for b in describe(cluster, topic)[0]["Isr"].split(",") if b]


def kill_the_leader_under_a_verifiable_producer(cluster: LocalCluster, topic: str, count: int, rate: int = 500) -> None:
    """One round: RF=3, min.insync.replicas=2, acks=all; kill -9 the leader mid-write, restart it, read it all."""
    create_topic(cluster, topic)
    isr_before = wait_for(lambda: len(isr_of(cluster, topic)) == 3 and isr_of(cluster, topic), 30, "a full ISR")
    old_leader, pid = leader_pid(cluster, topic)
    fenced_before = len(fenced_on_session_timeout(cluster, old_leader))
    producer = Producer(cluster, topic, count, rate)
    wait_for(lambda: len(producer.acks) >= min(count // 4, rate), 60, "the producer under way")
    assert producer.process.poll() is None, "the producer finished before the kill"
    os.kill(pid, signal.SIGKILL)
    new_leader = wait_for(lambda: leader_other_than(cluster, topic, old_leader), SESSION_TIMEOUT_S + 30, "a leader")
    assert new_leader in isr_before, f"the new leader {new_leader} was not in the ISR {isr_before}"
    # The leader moved because the controller fenced the dead broker when its session expired (not, say, on a
    # controlled shutdown). How fast that happens is `hightide bench --workload failover`'s figure, not a test's.
    fenced = wait_for(
        lambda: fenced_on_session_timeout(cluster, old_leader)[fenced_before:], 30, "its BrokerFenced(session_timeout)"
    )
    assert len(fenced) == 1, fenced
    assert producer.finish(timeout_s=180) == 0, producer.stderr.read_text()[-3000:]
    acks = producer.acks
    acknowledged = [a for a in acks if a["error"] is None]
    assert len(acks) == count
    # The killed broker restarts, recovers its log (it died mid-write) and rejoins the ISR.
    cluster.start_broker(old_leader)
    wait_for(lambda: len(isr_of(cluster, topic)) == 3, 60, f"broker {old_leader} back in the ISR")
    records = consume_all(cluster, topic, len(acknowledged))
    values = [r["value"] for r in records]
    assert len(values) == len(set(values)), "a value was delivered twice"
    by_value = {r["value"]: r["offset"] for r in records}
    for ack in acknowledged:
        assert ack["value"] in by_value, f"acknowledged {ack['value']} is lost"
        assert by_value[ack["value"]] == ack["offset"]
    acked_offsets = [a["offset"] for a in acknowledged]
    assert acked_offsets == sorted(acked_offsets), "acknowledgements out of offset order"


def test_kill_9_of_the_leader_five_times_loses_no_acknowledged_record_and_duplicates_none(
    cluster: LocalCluster,
) -> None:
    for round_number in range(1, 6):
        kill_the_leader_under_a_verifiable_producer(cluster, f"verified-{round_number}", 2000)
    logs = cluster.data_dir / "logs"
    recoveries = sum((logs / f"broker-{b}.log").read_text().count('"event": "logs_recovered"') for b in (1, 2, 3))
    assert recoveries >= 3 + 5, "every restart recovered its logs"


def test_kill_9_of_the_leader_under_a_saturating_producer_keeps_every_acknowledged_record_once_in_order(
    cluster: LocalCluster,
) -> None:
    """The same promise with five batches in flight when the leader dies: the refused window is sent again in
    sequence order to the new leader, which keeps what it already has once (idempotence) and the rest in order."""
    kill_the_leader_under_a_verifiable_producer(cluster, "saturated", 60_000, 20_000)


def partition_changes(cluster: LocalCluster, topic: str) -> list[str]:
    """The reasons of the controllers' PartitionChanged events for `topic`, in order (isr_shrink, isr_expand,
    broker_fenced...): isr_shrink and isr_expand come only from a leader's committed AlterPartition."""
    found = []
    for path in sorted((cluster.data_dir / "logs").glob("controller-*.log")):
        for line in path.read_text().splitlines():
            entry = json.loads(line) if line.startswith("{") else {}
            if entry.get("event") == "PartitionChanged" and entry.get("topic") == topic:
                found.append((entry["timestamp"], entry["reason"]))
    return [reason for _, reason in sorted(found)]


def test_a_paused_follower_leaves_the_isr_and_rejoins_after_resuming(long_session_cluster: LocalCluster) -> None:
    """SIGSTOP one follower under a running producer: it leaves the ISR after replica.lag.time.max.ms (by the
    leader's AlterPartition, before its session runs out), producing continues; SIGCONT: it rejoins."""
    cluster = long_session_cluster
    topic = "paused"
    create_topic(cluster, topic)
    leader, _ = leader_pid(cluster, topic)
    state = cluster.read_state()
    assert state is not None
    follower = next(int(b) for b in state.brokers if int(b) != leader)
    producer = Producer(cluster, topic, 2000, 250)
    wait_for(lambda: len(producer.acks) >= 250, 30, "records flowing")
    os.kill(state.brokers[str(follower)], signal.SIGSTOP)
    try:
        wait_for(lambda: follower not in isr_of(cluster, topic), 30, "the ISR shrink")
        assert partition_changes(cluster, topic) == ["created", "isr_shrink"]  # not fenced by its session
        assert leader_pid(cluster, topic)[0] == leader
    finally:
        os.kill(state.brokers[str(follower)], signal.SIGCONT)
    wait_for(lambda: follower in isr_of(cluster, topic), 60, "the ISR expand")
    assert "isr_expand" in partition_changes(cluster, topic)
    assert producer.finish(timeout_s=120) == 0, producer.stderr.read_text()[-3000:]
    acks = producer.acks
    assert len(acks) == 2000 and all(a["error"] is None for a in acks)  # producing went on throughout
    assert len(consume_all(cluster, topic, 2000)) == 2000


def test_both_followers_paused_acks_all_fails_and_acks_1_waits_for_the_high_watermark(cluster: LocalCluster) -> None:
    topic = "starved"
    create_topic(cluster, topic)
    leader, _ = leader_pid(cluster, topic)
    state = cluster.read_state()
    assert state is not None
    followers = [pid for b, pid in state.brokers.items() if int(b) != leader]
    for pid in followers:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: describe(cluster, topic)[0]["Isr"] == str(leader), 30, "the ISR down to the leader")
        refused = hightide(
            cluster.data_dir,
            "produce",
            topic,
            "--count",
            "3",
            "--print-acks",
            "--producer-property",
            "delivery.timeout.ms=3000",
        )
        assert refused.returncode == 1
        errors = {json.loads(line)["error"] for line in refused.stdout.splitlines()}
        assert errors == {"NOT_ENOUGH_REPLICAS"}, refused.stdout
        accepted = hightide(cluster.data_dir, "produce", topic, "--count", "3", "--acks", "1", "--print-acks")
        assert accepted.returncode == 0, accepted.stderr
        invisible = hightide(
            cluster.data_dir, "consume", topic, "--from-beginning", "--format", "json", "--timeout-ms", "2000"
        )
        assert invisible.stdout == "", "a record above the high watermark was visible"
    finally:
        for pid in followers:
            os.kill(pid, signal.SIGCONT)
    assert [r["value"] for r in consume_all(cluster, topic, 3)] == ["0", "1", "2"]


def test_kill_9_of_the_active_controller_hands_over_to_the_standby_with_a_higher_epoch(cluster: LocalCluster) -> None:
    before = wait_for(lambda: status(cluster).get("active_controller"), 30, "an active controller")
    state = cluster.read_state()
    assert state is not None
    os.kill(state.controllers[str(before["id"])], signal.SIGKILL)
    after = wait_for(
        lambda: controller_other_than(cluster, before["id"]),
        30,
        "the standby to take over",
    )
    assert after["epoch"] > before["epoch"]
    wait_for(lambda: len(active_brokers(cluster)) == 3, 30, "every broker heartbeating to the new controller")
    create_topic(cluster, "after-failover")  # the new controller changes metadata


def test_a_paused_controller_cannot_change_metadata_after_resuming(cluster: LocalCluster) -> None:
    before = wait_for(lambda: status(cluster).get("active_controller"), 30, "an active controller")
    state = cluster.read_state()
    assert state is not None
    old_pid = state.controllers[str(before["id"])]
    os.kill(old_pid, signal.SIGSTOP)
    try:
        after = wait_for(
            lambda: controller_other_than(cluster, before["id"]),
            30,
            "the standby to take over",
        )
    finally:
        os.kill(old_pid, signal.SIGCONT)
    assert after["epoch"] > before["epoch"]
    wait_for(lambda: len(active_brokers(cluster)) == 3, 30, "every broker heartbeating to the new controller")
    create_topic(cluster, "after-pause")
    log = (cluster.data_dir / "logs" / f"controller-{before['id']}.log").read_text()
    wait_for(
        lambda: "controller_deposed" in (cluster.data_dir / "logs" / f"controller-{before['id']}.log").read_text(),
        15,
        "the old controller to step down",
    )
    assert pid_alive(old_pid), log
    current = wait_for(lambda: status(cluster).get("active_controller"), 30, "an active controller")
    assert current["epoch"] >= after["epoch"]
