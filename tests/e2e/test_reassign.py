"""`hightide reassign` on a real local cluster under an acks=all producer: a partition moves from brokers 1,2,3
to two of them and broker 4, its leader among the ones leaving, and no acknowledged record is lost.

Method: as test_cluster_failover: `LocalCluster` starts the processes as `hightide cluster up` does (three brokers;
the fourth is started once the topic exists, so the topic's replicas are 1,2,3 whatever placement draws); the test
drives them with the CLI and polls each condition with a deadline. After `down`, the history of the whole run is
audited (`assert_history_clean`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.test_cluster_failover import CONFIG, consume_all, create_topic
from hightide.client.local_cluster import LocalCluster
from support.audited import assert_history_clean
from support.cluster_cli import Producer, active_brokers, describe, hightide, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=1, cluster_id="e2e", config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


RECORDS = 6000


def completed(cluster: LocalCluster, plan: Path) -> str | None:
    """`reassign --verify`'s text once it exits 0 (all completed); None while it exits 1 (still in progress)."""
    result = hightide(cluster.data_dir, "reassign", "--reassignment-json-file", str(plan), "--verify", timeout=30)
    assert result.returncode in (0, 1), result.stderr
    assert result.returncode == 0 or "is still in progress." in result.stdout, result.stdout
    return result.stdout if result.returncode == 0 else None


def test_moving_a_partition_off_its_leader_under_acks_all_loses_no_acknowledged_record(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = "moving"
    create_topic(cluster, topic)
    (before,) = describe(cluster, topic)
    assert sorted(before["Replicas"].split(",")) == ["1", "2", "3"]
    cluster.start_broker(4)
    wait_for(lambda: len(active_brokers(cluster)) == 4, 60, "broker 4 active")

    # 20 s of records at 300/s: the describe and the plan before the reassignment must land inside them (10 s ran
    # out once, a CI run sharing its two cores with Spark jobs).
    producer = Producer(cluster, topic, RECORDS, 300)
    wait_for(lambda: len(producer.acks) >= 300, 30, "records flowing")
    leader = int(describe(cluster, topic)[0]["Leader"])
    target = [b for b in (1, 2, 3) if b != leader] + [4]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}))

    assert producer.process.poll() is None, "the producer finished before the reassignment"
    executed = hightide(cluster.data_dir, "reassign", "--reassignment-json-file", str(plan), "--execute")
    assert executed.returncode == 0, executed.stderr
    rollback = json.dumps(
        {
            "version": 1,
            "partitions": [
                {
                    "topic": topic,
                    "partition": 0,
                    "replicas": [int(b) for b in before["Replicas"].split(",")],
                    "log_dirs": ["any"] * 3,
                }
            ],
        },
        separators=(",", ":"),
    )
    assert executed.stdout == (
        f"Current partition replica assignment\n\n{rollback}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
        f"Successfully started partition reassignment for {topic}-0\n"
    )
    text = wait_for(lambda: completed(cluster, plan), 90, "the reassignment to complete")
    assert text == f"Status of partition reassignment:\nReassignment of partition {topic}-0 is completed.\n"

    assert producer.finish(timeout_s=180) == 0, producer.stderr.read_text()[-3000:]
    acks = producer.acks
    assert len(acks) == RECORDS
    acknowledged = [a for a in acks if a["error"] is None]
    assert acknowledged
    records = consume_all(cluster, topic, len(acknowledged))
    by_value = {r["value"]: r["offset"] for r in records}
    assert len(by_value) == len(records), "a value was delivered twice"
    for ack in acknowledged:
        assert by_value.get(ack["value"]) == ack["offset"], f"acknowledged {ack['value']} is lost or moved"

    (after,) = describe(cluster, topic)
    assert after["Replicas"] == ",".join(map(str, target))
    assert "Adding Replicas" not in after and int(after["Leader"]) in target
    wait_for(lambda: sorted(after_isr(cluster, topic)) == sorted(target), 30, "the target as the ISR")
    removed_log = cluster.data_dir / f"broker-{leader}"
    wait_for(lambda: not list(removed_log.rglob(f"{topic}-0")), 30, f"broker {leader} deleting its replica")


def after_isr(cluster: LocalCluster, topic: str) -> list[int]:
    return [int(b) for b in describe(cluster, topic)[0]["Isr"].split(",") if b]


def test_a_reassignment_that_cannot_finish_is_reported_in_progress_and_cancelled(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """Unknown brokers and partitions are refused (exit 1, one line). Given broker 4 registered but stopped, a move
    of 1,2,3 to two of them and 4 cannot complete: --verify exits 1
    saying it is in progress, `topic describe` shows Adding Replicas: 4, a second --execute is refused without
    --additional, and --cancel puts the original brokers back (in the reassignment's order, as Kafka's revert)."""
    topic = "stuck"
    create_topic(cluster, topic)
    cluster.start_broker(4)
    wait_for(lambda: len(active_brokers(cluster)) == 4, 60, "broker 4 active")
    cluster.stop_broker(4, hard=False)
    wait_for(lambda: len(active_brokers(cluster)) == 3, 60, "broker 4 stopped")
    (before,) = describe(cluster, topic)
    leader = int(before["Leader"])
    target = [b for b in (1, 2, 3) if b != leader] + [4]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}))
    reassign = ("reassign", "--reassignment-json-file", str(plan))
    for bad_topic, bad_replicas, error in [
        (topic, [1, 9], "INVALID_REPLICA_ASSIGNMENT: Unknown broker id 9"),
        ("nope", [1, 2], "UNKNOWN_TOPIC_OR_PARTITION: Unable to find partition: nope-0"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"partitions": [{"topic": bad_topic, "partition": 0, "replicas": bad_replicas}]}))
        refused = hightide(cluster.data_dir, "reassign", "--reassignment-json-file", str(bad), "--execute")
        assert (refused.returncode, refused.stderr) == (1, f"hightide reassign: {error}\n")

    assert hightide(cluster.data_dir, *reassign, "--execute").returncode == 0
    verified = hightide(cluster.data_dir, *reassign, "--verify")
    assert (verified.returncode, verified.stdout) == (
        1,
        f"Status of partition reassignment:\nReassignment of partition {topic}-0 is still in progress.\n",
    )
    (moving,) = describe(cluster, topic)
    assert (moving["Adding Replicas"], moving["Removing Replicas"]) == ("4", str(leader))
    assert moving["Replicas"] == ",".join(map(str, [*target, leader]))
    again = hightide(cluster.data_dir, *reassign, "--execute")
    assert again.returncode == 1
    assert again.stderr.startswith("hightide reassign: REASSIGNMENT_IN_PROGRESS: Cannot execute because there is")

    cancelled = hightide(cluster.data_dir, *reassign, "--cancel")
    assert (cancelled.returncode, cancelled.stdout) == (
        0,
        f"Successfully cancelled partition reassignment for: {topic}-0\n",
    )
    (after,) = describe(cluster, topic)
    assert after["Replicas"] == ",".join(map(str, [*target[:2], leader])) and "Adding Replicas" not in after
    verified = hightide(cluster.data_dir, *reassign, "--verify")
    assert verified.returncode == 1
    assert f"There is no active reassignment of partition {topic}-0, but replica set is" in verified.stdout
