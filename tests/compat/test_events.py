"""Requests over the Kafka listener emit the broker events NATS requests emit (they reach the same replica
manager): a kafka-python acks=all produce is a ProduceCompleted (acks -1, NONE) covering its offsets, and its
consumer's fetches are FetchServed with replica -1. The history audit of the whole run (conftest teardown) then
reads these events like any others.

Method: `hightide events tail --type ... --format json` over the cluster's event store, polled with a deadline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from hightide.client.local_cluster import LocalCluster
from support.cluster_cli import describe, hightide, wait_for

pytestmark = pytest.mark.slow


def events_of(cluster: LocalCluster, kind: str, topic: str) -> list[dict[str, Any]]:
    result = hightide(cluster.data_dir, "events", "tail", "--type", kind, "--format", "json")
    assert result.returncode == 0, result.stderr
    found = [json.loads(line)["event"] for line in result.stdout.splitlines() if line.strip()]
    return [e for e in found if e.get("topic") == topic]


def test_kafka_produce_and_fetch_emit_the_broker_events(cluster: LocalCluster, bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        admin.create_topics([NewTopic("kp-events", 1, 3, topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, "kp-events")), 30, "a full ISR")
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True)
    try:
        offsets = [producer.send("kp-events", value=b"e%d" % i).get(timeout=30).offset for i in range(10)]
    finally:
        producer.close()
    assert offsets == list(range(10))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition("kp-events", 0)])
        seen: list[bytes] = []
        wait_for(
            lambda: seen.extend(r.value for rs in consumer.poll(500).values() for r in rs) or len(seen) >= 10,
            30,
            "the records consumed",
        )
    finally:
        consumer.close()

    def produced() -> list[dict[str, Any]]:
        return [e for e in events_of(cluster, "ProduceCompleted", "kp-events") if e["error"] == "NONE"]

    completed = wait_for(lambda: len(produced()) >= 1 and produced(), 30, "ProduceCompleted events")
    assert {e["acks"] for e in completed} == {-1}
    covered = sorted(o for e in completed for o in range(e["base_offset"], e["last_offset"] + 1))
    assert covered == list(range(10))
    served = wait_for(
        lambda: [e for e in events_of(cluster, "FetchServed", "kp-events") if e["replica"] == -1],
        30,
        "a consumer's FetchServed",
    )
    assert all(e["error"] == "NONE" for e in served)
