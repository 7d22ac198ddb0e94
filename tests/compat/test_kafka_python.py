"""kafka-python (from PyPI, unchanged) against a local Hightide cluster's Kafka listeners: administer topics,
produce with acks=all and idempotence, consume by assigned partitions (no group), and see the same events.

Method: the `cluster` fixture (conftest) starts real processes; the client speaks Kafka's protocol to the brokers'
listeners that cluster.json lists. Every wait is a client call with its own timeout or a polled condition.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from hightide.client.local_cluster import LocalCluster
from support.cluster_cli import describe, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=15_000)
    try:
        yield client
    finally:
        client.close()


def full_isr(cluster: LocalCluster, topic: str) -> bool:
    return all(p["Isr"].count(",") == 2 for p in describe(cluster, topic))


def test_admin_creates_describes_and_deletes_topics(cluster: LocalCluster, admin: KafkaAdminClient) -> None:
    created = admin.create_topics([NewTopic("kp-admin", 3, 3, topic_configs={"min.insync.replicas": "2"})])
    assert [(t["name"], t["error_code"]) for t in created["topics"]] == [("kp-admin", 0)]
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kp-admin", 1, 1)], raise_errors=True)
    described = admin.describe_topics(["kp-admin"])
    assert [t["name"] for t in described] == ["kp-admin"]
    partitions = described[0]["partitions"]
    assert sorted(p["partition_index"] for p in partitions) == [0, 1, 2]
    assert all(sorted(p["replica_nodes"]) == sorted(p["isr_nodes"]) == [1, 2, 3] for p in partitions)
    assert sorted(p["leader_id"] for p in partitions) == [1, 2, 3]  # Kafka's rack-unaware placement
    assert "kp-admin" in admin.list_topics()
    cluster_info = admin.describe_cluster()
    assert cluster_info["cluster_id"] == "compat"
    assert sorted(b["broker_id"] for b in cluster_info["brokers"]) == [1, 2, 3]
    deleted = admin.delete_topics(["kp-admin"])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("kp-admin", 0)]
    wait_for(lambda: "kp-admin" not in admin.list_topics(), 30, "the topic gone")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-admin"], raise_errors=True)


def test_idempotent_acks_all_produce_then_assigned_consume(
    cluster: LocalCluster, admin: KafkaAdminClient, bootstrap: str
) -> None:
    admin.create_topics([NewTopic("kp-data", 3, 3, topic_configs={"min.insync.replicas": "2"})])
    wait_for(lambda: full_isr(cluster, "kp-data"), 30, "a full ISR")
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True, linger_ms=5)
    try:
        futures = [producer.send("kp-data", key=b"k%d" % i, value=b"v%d" % i) for i in range(300)]
        producer.flush(timeout=30)
        acked = [f.get(timeout=30) for f in futures]
    finally:
        producer.close()
    by_partition: dict[int, list[int]] = {}
    for meta in acked:
        by_partition.setdefault(meta.partition, []).append(meta.offset)
    for offsets in by_partition.values():  # each partition's offsets are dense from 0: nothing lost or doubled
        assert sorted(offsets) == list(range(len(offsets)))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
        consumer_timeout_ms=5_000,
    )
    try:
        partitions = [TopicPartition("kp-data", p) for p in range(3)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        assert sum(ends.values()) == 300
        seen: list[tuple[bytes, bytes]] = []
        wait_for(lambda: seen.extend(_poll(consumer)) or len(seen) >= 300, 60, "every record consumed")
    finally:
        consumer.close()
    assert sorted(seen) == sorted((b"k%d" % i, b"v%d" % i) for i in range(300))


def _poll(consumer: KafkaConsumer) -> list[tuple[bytes, bytes]]:
    batches = consumer.poll(timeout_ms=500)
    return [(r.key, r.value) for records in batches.values() for r in records]


def test_unknown_topic_is_answered_not_dropped(admin: KafkaAdminClient, bootstrap: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None)
    try:
        assert not consumer.partitions_for_topic("no-such-topic")  # answered: no partitions
    finally:
        consumer.close()


def test_acks_1_produce_is_acknowledged_by_the_leader(
    cluster: LocalCluster, admin: KafkaAdminClient, bootstrap: str
) -> None:
    admin.create_topics([NewTopic("kp-acks1", 1, 3)])
    wait_for(lambda: full_isr(cluster, "kp-acks1"), 30, "a full ISR")
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks=1)
    try:
        offsets = [producer.send("kp-acks1", value=b"a%d" % i).get(timeout=30).offset for i in range(20)]
    finally:
        producer.close()
    assert offsets == list(range(20))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None)
    try:
        partition = TopicPartition("kp-acks1", 0)
        wait_for(lambda: consumer.end_offsets([partition])[partition] == 20, 30, "the high watermark at 20")
    finally:
        consumer.close()
