"""kill -9 of a partition's leader under a confluent-kafka acks=all idempotent producer loses nothing and writes
nothing twice: every record the producer was told is acknowledged is read back exactly once, and none is
reported failed (librdkafka retries through the failover against the new leader, by Kafka's protocol alone).

Method: the `cluster` fixture (conftest: three brokers, RF=3 topics with min.insync.replicas=2); the producer runs
in this process, the kill is a real SIGKILL of the leader's process after a first part is acknowledged; the killed
broker is restarted before the end so the run's history is whole for the audit at teardown.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from hightide.client.local_cluster import LocalCluster
from support.cluster_cli import active_brokers, describe, wait_for

pytestmark = pytest.mark.slow

TOPIC = "ck-failover"
RECORDS = 3000


def test_kill_9_of_the_leader_loses_and_duplicates_nothing(cluster: LocalCluster, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(TOPIC, num_partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    assert admin.create_topics([topic])[TOPIC].result(timeout=30) is None
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, TOPIC)), 30, "a full ISR")
    leader = int(describe(cluster, TOPIC)[0]["Leader"])

    acked: list[tuple[bytes, int]] = []
    failed: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: object) -> None:
        if error is not None:
            failed.append(error)
        else:
            acked.append((message.value(), message.offset()))  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
        }
    )
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"r%05d" % i, on_delivery=on_delivery)
        producer.poll(0)
        if i == RECORDS // 3:
            assert producer.flush(60) == 0  # a first part acknowledged by the first leader
            cluster.stop_broker(leader, hard=True)
    assert producer.flush(120) == 0
    assert failed == []
    assert len(acked) == RECORDS
    offsets = sorted(offset for _, offset in acked)
    assert offsets == list(range(RECORDS))  # one offset each: no duplicate, no gap
    new_leader = int(describe(cluster, TOPIC)[0]["Leader"])
    assert new_leader != leader

    cluster.start_broker(leader)
    wait_for(lambda: sorted(active_brokers(cluster)) == [1, 2, 3], 60, "the killed broker back")

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    assert seen == [b"r%05d" % i for i in range(RECORDS)]  # exactly once, in order
