"""Every NATS subject, stream and key-value bucket name Hightide uses, in one place.

Room: libs/protocol (vocabulary). A cluster id scopes every name, so several clusters can share one NATS
deployment. JetStream stream and bucket names may not contain `.`, `*`, `>` or whitespace, and subjects use `.`
as the token separator, so a cluster id is restricted to letters, digits, `-` and `_`.

| name                                   | what                                                            |
| -------------------------------------- | --------------------------------------------------------------- |
| `ht.<cluster>.broker.<id>.<api>`       | one broker's request/reply API (produce, fetch, list_offsets, …)|
| `ht.<cluster>.brokers.metadata`        | any broker answers (queue group): cluster metadata for clients  |
| `ht.<cluster>.controller.<api>`        | the active controller's request/reply API (queue group)         |
| `ht.<cluster>.metadata`                | the metadata log's subject (KRaft's `__cluster_metadata`)       |
| stream `HT_<cluster>_METADATA`         | the metadata log                                                |
| bucket `HT_<cluster>_CONTROLLER`       | the controller lease (`leader`, per-key TTL) and `epoch`        |
| `ht.<cluster>.events.<service>.<id>`   | one emitter's event batches (msgpack arrays of envelopes)       |
| stream `HT_<cluster>_EVENTS`           | the event store: every emitter's batches, deduplicated by       |
|                                        | `Nats-Msg-Id` = `<service>.<id>.<incarnation>.<first sequence>` |
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Final

_CLUSTER_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
BROKER_QUEUE: Final = "brokers"
CONTROLLER_QUEUE: Final = "controllers"
LEASE_KEY: Final = "leader"
EPOCH_KEY: Final = "epoch"


class BrokerApi(StrEnum):
    PRODUCE = "produce"
    FETCH = "fetch"
    LIST_OFFSETS = "list_offsets"
    OFFSETS_FOR_LEADER_EPOCH = "offsets_for_leader_epoch"
    METADATA = "metadata"
    # consumer groups (issue 13): FindCoordinator goes to any broker, the rest to the group's coordinator
    FIND_COORDINATOR = "find_coordinator"
    JOIN_GROUP = "join_group"
    SYNC_GROUP = "sync_group"
    HEARTBEAT = "heartbeat"
    LEAVE_GROUP = "leave_group"
    OFFSET_COMMIT = "offset_commit"
    OFFSET_FETCH = "offset_fetch"
    LIST_GROUPS = "list_groups"
    DESCRIBE_GROUPS = "describe_groups"
    DELETE_GROUPS = "delete_groups"
    # NATS permissions (issue 14): a follower's fetch has its own subject, so only brokers may replicate
    REPLICA_FETCH = "replica_fetch"


class ControllerApi(StrEnum):
    REGISTER_BROKER = "register_broker"
    BROKER_HEARTBEAT = "broker_heartbeat"
    ALTER_PARTITION = "alter_partition"
    CREATE_TOPICS = "create_topics"
    DELETE_TOPICS = "delete_topics"
    CREATE_PARTITIONS = "create_partitions"
    ALTER_CONFIGS = "alter_configs"
    ELECT_LEADERS = "elect_leaders"
    INIT_PRODUCER_ID = "init_producer_id"
    DESCRIBE_CLUSTER = "describe_cluster"
    # partition reassignment (issue 13)
    ALTER_PARTITION_REASSIGNMENTS = "alter_partition_reassignments"
    LIST_PARTITION_REASSIGNMENTS = "list_partition_reassignments"


class InvalidClusterId(ValueError):
    pass


def check_cluster_id(cluster_id: str) -> str:
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise InvalidClusterId(f"invalid cluster id {cluster_id!r}: use 1 to 64 of letters, digits, '-' and '_'")
    return cluster_id


def broker_api(cluster_id: str, broker_id: int, api: BrokerApi) -> str:
    return f"ht.{cluster_id}.broker.{broker_id}.{api.value}"


def broker_api_wildcard(cluster_id: str, broker_id: int) -> str:
    return f"ht.{cluster_id}.broker.{broker_id}.*"


def any_broker_metadata(cluster_id: str) -> str:
    return f"ht.{cluster_id}.brokers.metadata"


def controller_api(cluster_id: str, api: ControllerApi) -> str:
    return f"ht.{cluster_id}.controller.{api.value}"


def controller_api_wildcard(cluster_id: str) -> str:
    return f"ht.{cluster_id}.controller.*"


def metadata_subject(cluster_id: str) -> str:
    return f"ht.{cluster_id}.metadata"


def metadata_stream(cluster_id: str) -> str:
    return f"HT_{cluster_id}_METADATA"


def controller_bucket(cluster_id: str) -> str:
    return f"HT_{cluster_id}_CONTROLLER"


def api_of(subject: str) -> str:
    """The last token of a request subject: the API it calls."""
    return subject.rsplit(".", 1)[-1]


def events_subject(cluster_id: str, service: str, emitter_id: int) -> str:
    return f"ht.{cluster_id}.events.{service}.{emitter_id}"


def events_subjects(cluster_id: str) -> str:
    """Every emitter's events (the `EVENTS` stream's subject filter)."""
    return f"ht.{cluster_id}.events.>"


def events_stream(cluster_id: str) -> str:
    return f"HT_{cluster_id}_EVENTS"


def events_message_id(service: str, emitter_id: int, incarnation: str, first_sequence: int) -> str:
    """The `Nats-Msg-Id` of the batch whose first event has `first_sequence`: the stream drops a second copy."""
    return f"{service}.{emitter_id}.{incarnation}.{first_sequence}"
