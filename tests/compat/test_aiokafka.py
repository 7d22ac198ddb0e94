"""aiokafka (from PyPI, unchanged) against a local Hightide cluster's Kafka listeners: its admin client creates and
deletes a topic, an idempotent acks=all producer's records are acknowledged densely, and a consumer that assigns
its partitions (no group) reads them all back.

Method: the `cluster` fixture (conftest); waits are the client's own timeouts or polled conditions with deadlines.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from hightide.client.local_cluster import LocalCluster
from support.cluster_cli import describe, hightide, wait_for

pytestmark = pytest.mark.slow

RECORDS = 200


async def _produce_and_consume(bootstrap: str) -> tuple[list[tuple[int, int]], list[tuple[bytes, bytes]]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sent = [await producer.send("aio-data", key=b"k%d" % i, value=b"v%d" % i) for i in range(RECORDS)]
        acked = [(meta.partition, meta.offset) for meta in await asyncio.gather(*sent)]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition("aio-data", p) for p in range(2)])
        seen: list[tuple[bytes, bytes]] = []
        async with asyncio.timeout(60):
            while len(seen) < RECORDS:
                batches = await consumer.getmany(timeout_ms=500)
                seen += [(r.key, r.value) for records in batches.values() for r in records]
    finally:
        await consumer.stop()
    return acked, seen


async def _admin(bootstrap: str, action: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if action == "create":
            await admin.create_topics([NewTopic(topic, 2, 3, topic_configs={"min.insync.replicas": "2"})])
        else:
            await admin.delete_topics([topic])
    finally:
        await admin.close()


def test_aiokafka_admin_idempotent_produce_and_assigned_consume(cluster: LocalCluster, bootstrap: str) -> None:
    asyncio.run(_admin(bootstrap, "create", "aio-data"))
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, "aio-data")), 30, "a full ISR")
    acked, seen = asyncio.run(_produce_and_consume(bootstrap))
    assert len(acked) == RECORDS
    for partition in range(2):
        offsets = sorted(o for p, o in acked if p == partition)
        assert offsets == list(range(len(offsets)))
    assert sorted(seen) == sorted((b"k%d" % i, b"v%d" % i) for i in range(RECORDS))
    # Deleted: a topic without records (the history audit of this run would read a deleted topic's acknowledged
    # records as lost; see the report).
    asyncio.run(_admin(bootstrap, "create", "aio-admin"))
    wait_for(lambda: _exists(cluster, "aio-admin"), 30, "the topic listed")
    asyncio.run(_admin(bootstrap, "delete", "aio-admin"))
    wait_for(lambda: not _exists(cluster, "aio-admin"), 30, "the topic gone")


def _exists(cluster: LocalCluster, topic: str) -> bool:
    listed = hightide(cluster.data_dir, "topic", "list")
    assert listed.returncode == 0, listed.stderr
    return topic in listed.stdout.split()
