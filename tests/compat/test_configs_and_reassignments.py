"""IncrementalAlterConfigs, AlterPartitionReassignments and ListPartitionReassignments over the Kafka listener:
confluent-kafka's AdminClient SETs, DELETEs, APPENDs and SUBTRACTs topic configs (and validate_only changes
nothing), as Kafka does them; the reassignment APIs, which none of the three Python clients sends, are hand-built
kio requests over a socket, and the partition moves (`hightide topic describe` shows it).

Method: the `cluster` fixture (conftest) starts real processes; waits are polled conditions with deadlines.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from hightide.client.local_cluster import LocalCluster
from hightide.protocol import kafka
from support import kafka_wire
from support.cluster_cli import describe, wait_for

pytestmark = pytest.mark.slow

TIMEOUT_S = 30


def _alter(admin: AdminClient, topic: str, *entries: ConfigEntry, validate_only: bool = False) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    futures = admin.incremental_alter_configs([resource], validate_only=validate_only)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def _configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, ConfigSource]]:
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(futures.values())).result(timeout=TIMEOUT_S)
    return {name: (e.value, ConfigSource(e.source)) for name, e in entries.items()}


def _entry(name: str, value: str | None, op: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


def test_incremental_alter_configs_set_delete_append_subtract(cluster: LocalCluster, bootstrap: str) -> None:
    del cluster
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic("iac", 1, 3)])["iac"].result(timeout=TIMEOUT_S) is None

    _alter(admin, "iac", _entry("retention.ms", "12345", AlterConfigOpType.SET))
    wait_for(lambda: _configs(admin, "iac")["retention.ms"][0] == "12345", 30, "retention.ms set")
    assert _configs(admin, "iac")["retention.ms"][1] is ConfigSource.DYNAMIC_TOPIC_CONFIG

    # APPEND to a list config starts from its value (here Kafka's default, "delete"); SUBTRACT removes items.
    _alter(admin, "iac", _entry("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    wait_for(lambda: _configs(admin, "iac")["cleanup.policy"][0] == "delete,compact", 30, "compact appended")
    _alter(admin, "iac", _entry("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    wait_for(lambda: _configs(admin, "iac")["cleanup.policy"][0] == "compact", 30, "delete subtracted")

    _alter(admin, "iac", _entry("retention.ms", None, AlterConfigOpType.DELETE))
    wait_for(lambda: _configs(admin, "iac")["retention.ms"][1] is not ConfigSource.DYNAMIC_TOPIC_CONFIG, 30, "unset")

    # validate_only checks and changes nothing.
    _alter(admin, "iac", _entry("max.message.bytes", "999", AlterConfigOpType.SET), validate_only=True)
    assert _configs(admin, "iac")["max.message.bytes"][1] is not ConfigSource.DYNAMIC_TOPIC_CONFIG

    with pytest.raises(Exception) as not_a_list:
        _alter(admin, "iac", _entry("retention.ms", "1", AlterConfigOpType.APPEND))
    assert not_a_list.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(Exception) as bad_value:
        _alter(admin, "iac", _entry("min.insync.replicas", "zero", AlterConfigOpType.SET))
    assert bad_value.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(Exception) as unknown:
        _alter(admin, "no-such-topic", _entry("retention.ms", "1", AlterConfigOpType.SET))
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- the reassignment APIs, hand-built ------------------------------------------------------------------------------


def _reassign(bootstrap: str, topic: str, partition: int, replicas: tuple[int, ...] | None) -> Any:
    api = kafka.ALTER_PARTITION_REASSIGNMENTS
    part = kafka.make(kafka_wire.nested(api, 0, "ReassignablePartition"), partition_index=partition, replicas=replicas)
    topics = (kafka.make(kafka_wire.nested(api, 0, "ReassignableTopic"), name=topic, partitions=(part,)),)
    return kafka_wire.call(bootstrap.split(",", maxsplit=1)[0], api, 0, timeout=30_000, topics=topics)


def _ongoing(bootstrap: str) -> dict[tuple[str, int], tuple[int, ...]]:
    address = bootstrap.split(",", maxsplit=1)[0]
    listed = kafka_wire.call(address, kafka.LIST_PARTITION_REASSIGNMENTS, 0, timeout=30_000, topics=None)
    assert int(listed.error_code) == 0
    return {(t.name, p.partition_index): tuple(p.replicas) for t in listed.topics for p in t.partitions}


def test_alter_and_list_partition_reassignments(cluster: LocalCluster, bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("moved", num_partitions=1, replication_factor=-1, replica_assignment=[[1, 2]])
    assert admin.create_topics([topic])["moved"].result(timeout=TIMEOUT_S) is None
    wait_for(lambda: describe(cluster, "moved")[0]["Isr"].count(",") == 1, 30, "a full ISR")

    answer = _reassign(bootstrap, "moved", 0, (2, 3))
    assert int(answer.error_code) == 0
    results = [(t.name, p.partition_index, int(p.error_code)) for t in answer.responses for p in t.partitions]
    assert results == [("moved", 0, 0)]
    wait_for(lambda: describe(cluster, "moved")[0]["Replicas"].replace(" ", "") in ("2,3", "3,2"), 60, "moved")
    wait_for(lambda: ("moved", 0) not in _ongoing(bootstrap), 60, "the reassignment complete")

    unknown = _reassign(bootstrap, "no-such-topic", 0, (1, 2))
    errors = [int(p.error_code) for t in unknown.responses for p in t.partitions] or [int(unknown.error_code)]
    assert errors == [3]  # UNKNOWN_TOPIC_OR_PARTITION


def test_describe_configs_of_a_broker_gives_its_configs_and_where_each_comes_from(
    cluster: LocalCluster, bootstrap: str
) -> None:
    """A BROKER resource, as Kafka's tools and UIs describe one: every config the broker runs with, STATIC_BROKER_CONFIG
    where it was given (this cluster's replica.lag.time.max.ms), else DEFAULT_CONFIG with Kafka's default; all
    read-only (no dynamic broker configs). Asked of another broker's id, a broker refuses it, as Kafka's
    ConfigHelper does; the empty name (the cluster-wide dynamic defaults) is answered with none."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "2")
    configs = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    lag = configs["replica.lag.time.max.ms"]
    assert (lag.value, lag.source, lag.is_read_only) == ("1000", ConfigSource.STATIC_BROKER_CONFIG.value, True)
    size = configs["group.max.size"]
    assert (size.value, size.source, size.is_default) == ("2147483647", ConfigSource.DEFAULT_CONFIG.value, True)
    assert configs["segment.bytes"].value == "1073741824"  # a topic config's broker-wide default
    assert {"offsets.topic.num.partitions", "replica.fetch.wait.max.ms", "listeners"} <= set(configs)

    broker_1 = bootstrap.split(",", maxsplit=1)[0]  # the listeners in broker id order (conftest)
    resources = [
        kafka.make(
            kafka_wire.nested(kafka.DESCRIBE_CONFIGS, 4, "DescribeConfigsResource"),
            resource_type=kafka.BROKER_RESOURCE,
            resource_name=name,
            configuration_keys=None,
        )
        for name in ("", "x", "--5", "0_1", "2")
    ]
    answered = kafka_wire.call(broker_1, kafka.DESCRIBE_CONFIGS, 4, resources=tuple(resources))
    results = [(r.resource_name, int(r.error_code), r.error_message, len(r.configs)) for r in answered.results]
    assert results == [
        ("", 0, None, 0),
        ("x", 42, "Broker id must be an integer, but it is: x", 0),
        ("--5", 42, "Broker id must be an integer, but it is: --5", 0),
        ("0_1", 42, "Broker id must be an integer, but it is: 0_1", 0),
        ("2", 42, "Unexpected broker id, expected 1, but received 2", 0),
    ]
