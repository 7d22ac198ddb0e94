"""confluent-kafka (librdkafka, from PyPI, unchanged) against a local Hightide cluster's Kafka listeners: its
AdminClient creates, describes and deletes topics; an idempotent acks=all producer's records are all acknowledged
once, densely, and read back by a consumer that assigns its partitions (no group).

Method: the `cluster` fixture (conftest) starts real processes; waits are the client's own timeouts or polled
conditions with deadlines.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from hightide.client.local_cluster import LocalCluster
from support.cluster_cli import describe, hightide, wait_for

pytestmark = pytest.mark.slow

RECORDS = 500


def test_admin_client_topics(cluster: LocalCluster, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("ck-admin", num_partitions=2, replication_factor=3)])
    assert futures["ck-admin"].result(timeout=30) is None
    again = admin.create_topics([NewTopic("ck-admin", num_partitions=2, replication_factor=3)])
    with pytest.raises(Exception) as refused:
        again["ck-admin"].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # CreateTopics answers once the controller committed the topic; a broker's metadata may lag behind it, as in
    # KRaft, so the answer to Metadata is awaited, not assumed.
    def listed() -> Any:
        metadata = admin.list_topics(timeout=15)
        return metadata if "ck-admin" in metadata.topics else None

    metadata = wait_for(listed, 30, "the topic in a broker's metadata")
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert sorted(metadata.topics["ck-admin"].partitions) == [0, 1]
    assert admin.delete_topics(["ck-admin"])["ck-admin"].result(timeout=30) is None
    wait_for(lambda: "ck-admin" not in admin.list_topics(timeout=15).topics, 30, "the topic gone")

    # Each broker renamed the partitions' dirs `...-delete` and removes their files file.delete.delay.ms later (1 s
    # on this cluster), as Kafka's LogManager does: the disk space comes back without a restart.
    def on_disk() -> list[str]:
        dirs = [cluster.data_dir / f"broker-{broker}" for broker in (1, 2, 3)]
        return [path.name for log_dir in dirs for path in log_dir.iterdir() if path.name.startswith("ck-admin-")]

    wait_for(lambda: not on_disk(), 30, "the deleted topic's files gone from every broker's disk")


def test_admin_client_illegal_and_duplicate_names_are_answered_per_topic(bootstrap: str) -> None:
    """ControllerApis' and Topic.validate's answers, each topic on its own: a legal topic in the same CreateTopics
    is created; an illegal name is INVALID_TOPIC_EXCEPTION with Kafka's reason; a name given twice is INVALID_REQUEST
    and neither copy is created; a DeleteTopics or CreatePartitions of an illegal name is UNKNOWN_TOPIC_OR_PARTITION.
    Every answer comes on the connection (none is a dropped connection, librdkafka's _TRANSPORT)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def error_of(future: Any) -> Any:
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=30)
        return raised.value.args[0]

    illegal, too_long = "no spaces!", "x" * 250
    created = admin.create_topics(
        [NewTopic("ck-legal", 1, 3), NewTopic(illegal, 1, 3), NewTopic(too_long, 1, 3)]
    )  # fmt: skip
    assert created["ck-legal"].result(timeout=30) is None
    refused = error_of(created[illegal])
    assert refused.code() == KafkaError.TOPIC_EXCEPTION
    assert "contains a character other than ASCII alphanumerics" in refused.str()
    assert "can't be longer than 249 characters" in error_of(created[too_long]).str()

    # librdkafka keys its futures by name, so a duplicate goes through its low-level request: kafka-python's admin
    # client sends the list as given.
    from kafka import KafkaAdminClient  # noqa: PLC0415 (kafka-python, used by this test only)
    from kafka.admin import NewTopic as KpNewTopic  # noqa: PLC0415

    kp = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=30_000)
    try:
        response = kp.create_topics([KpNewTopic("ck-twice", 1, 3), KpNewTopic("ck-twice", 1, 3)], raise_errors=False)
        results = [(t["name"], t["error_code"], t["error_message"]) for t in response["topics"]]
        assert results == [("ck-twice", KafkaError.INVALID_REQUEST, "Duplicate topic name.")]
    finally:
        kp.close()
    assert "ck-twice" not in admin.list_topics(timeout=15).topics

    assert error_of(admin.delete_topics([illegal])[illegal]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    partitions = admin.create_partitions([NewPartitions(illegal, 3)])
    assert error_of(partitions[illegal]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    metadata = admin.list_topics(topic=illegal, timeout=15)
    assert metadata.topics[illegal].error.code() == KafkaError.TOPIC_EXCEPTION
    assert admin.delete_topics(["ck-legal"])["ck-legal"].result(timeout=30) is None


CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def test_every_compression_type_crosses_between_librdkafka_and_the_own_client(
    cluster: LocalCluster, bootstrap: str
) -> None:
    """Kafka's five compression.type values: librdkafka's batches (snappy as one raw block) are accepted and read
    back by librdkafka and by `hightide consume`; the own producer's (snappy in snappy-java's framing, as Kafka's
    Java producer writes it) are read by librdkafka."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic("ck-codecs", 1, 3)])["ck-codecs"].result(timeout=30) is None
    sent = []
    failed: list[Any] = []
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": codec})
        for i in range(20):
            value = f"{codec}-{i}-".encode() * 20
            producer.produce("ck-codecs", value, partition=0, on_delivery=lambda e, _m: failed.append(e) if e else None)
            sent.append(value.decode())
        assert producer.flush(30) == 0 and failed == [], (codec, failed)
    for codec in CODECS:
        result = hightide(cluster.data_dir, "produce", "ck-codecs", "--partition", "0", "--compression", codec,
                          stdin="".join(f"own-{codec}-{i}\n" for i in range(20)))  # fmt: skip
        assert result.returncode == 0, result.stderr
        sent += [f"own-{codec}-{i}" for i in range(20)]

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-codecs", "enable.auto.commit": False})
    consumer.assign([TopicPartition("ck-codecs", 0, 0)])
    read: list[str] = []
    deadline = time.monotonic() + 60
    while len(read) < len(sent) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None:
            assert message.error() is None, message.error()
            read.append((message.value() or b"").decode())
    consumer.close()
    assert read == sent
    own = hightide(cluster.data_dir, "consume", "ck-codecs", "--from-beginning", "--max-messages", str(len(sent)),
                   "--timeout-ms", "30000", "--format", "json")  # fmt: skip
    assert own.returncode == 0, own.stderr
    assert [json.loads(line)["value"] for line in own.stdout.splitlines()] == sent


def test_list_offsets_finds_the_record_with_the_largest_timestamp(bootstrap: str) -> None:
    """KIP-734 (ListOffsets v7, OffsetSpec.max_timestamp): the first record that has the partition's largest
    timestamp, with its timestamp; earliest and latest beside it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic("ck-maxts", 1, 3)])["ck-maxts"].result(timeout=30) is None
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for timestamp in (1_000, 3_000, 2_000, 3_000):
        producer.produce("ck-maxts", b"v", partition=0, timestamp=timestamp)
    assert producer.flush(30) == 0
    partition = TopicPartition("ck-maxts", 0)
    found = {}
    for name, spec in (("max", OffsetSpec.max_timestamp()), ("earliest", OffsetSpec.earliest()),
                       ("latest", OffsetSpec.latest())):  # fmt: skip
        answer = admin.list_offsets({partition: spec})[partition].result(timeout=30)
        found[name] = (answer.offset, answer.timestamp)
    assert found["max"] == (1, 3_000)
    assert found["earliest"][0] == 0 and found["latest"][0] == 4


def test_authorized_operations_are_every_operation_kafka_supports_on_the_resource(bootstrap: str) -> None:
    """With no authorizer (every authenticated user may do everything), Kafka answers include_authorized_operations
    with AclEntry.supportedOperations: for a topic, a cluster and a group."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic("ck-ops", 1, 3)])["ck-ops"].result(timeout=30) is None
    wait_for(lambda: "ck-ops" in admin.list_topics(timeout=15).topics, 30, "the topic in the metadata")
    topic = admin.describe_topics(TopicCollection(["ck-ops"]), include_authorized_operations=True)["ck-ops"]
    cluster = admin.describe_cluster(include_authorized_operations=True)
    group = admin.describe_consumer_groups(["ck-ops-group"], include_authorized_operations=True)["ck-ops-group"]
    names = {
        "topic": topic.result(timeout=30).authorized_operations,
        "cluster": cluster.result(timeout=30).authorized_operations,
        "group": group.result(timeout=30).authorized_operations,
    }
    assert {kind: sorted(op.name for op in ops) for kind, ops in names.items()} == {
        "topic": ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE"],
        "cluster": ["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
                    "IDEMPOTENT_WRITE"],
        "group": ["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"],
    }  # fmt: skip
    assert admin.describe_topics(TopicCollection(["ck-ops"]))["ck-ops"].result(timeout=30).authorized_operations is None


def test_idempotent_acks_all_then_assigned_consume(cluster: LocalCluster, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("ck-data", num_partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    assert admin.create_topics([topic])["ck-data"].result(timeout=30) is None
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, "ck-data")), 30, "a full ISR")

    acked: list[tuple[int, int]] = []
    failed: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: object) -> None:
        if error is not None:
            failed.append(error)
        else:
            acked.append((message.partition(), message.offset()))  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce("ck-data", key=b"k%d" % i, value=b"v%d" % i, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failed == []
    assert len(acked) == RECORDS
    for partition in range(3):
        offsets = sorted(o for p, o in acked if p == partition)
        assert offsets == list(range(len(offsets)))  # dense from 0: nothing lost, nothing written twice

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition("ck-data", p, 0) for p in range(3)])
        seen: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            seen.append((message.key(), message.value()))
    finally:
        consumer.close()
    assert sorted(seen) == sorted((b"k%d" % i, b"v%d" % i) for i in range(RECORDS))


def test_admin_client_partitions_configs_and_elections(cluster: LocalCluster, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("ck-more", num_partitions=1, replication_factor=3, config={"retention.ms": "3600000"})
    assert admin.create_topics([topic])["ck-more"].result(timeout=30) is None

    assert admin.create_partitions([NewPartitions("ck-more", 3)])["ck-more"].result(timeout=30) is None
    wait_for(lambda: len(admin.list_topics("ck-more", timeout=15).topics["ck-more"].partitions) == 3, 30, "3 parts")
    shrink = admin.create_partitions([NewPartitions("ck-more", 2)])["ck-more"]
    with pytest.raises(KafkaException) as refused:
        shrink.result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    resource = ConfigResource(ResourceType.TOPIC, "ck-more")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, "ck-more")), 30, "a full ISR")
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("ck-more", 0)]).result(timeout=30)
    # Its preferred replica already leads: Kafka's ELECTION_NOT_NEEDED for that partition.
    assert [(tp.topic, tp.partition) for tp in elected] == [("ck-more", 0)]
    assert [e.code() for e in elected.values()] == [KafkaError.ELECTION_NOT_NEEDED]
