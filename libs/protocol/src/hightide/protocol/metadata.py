"""The metadata records: KRaft's `__cluster_metadata` record types, reduced to what Hightide's controller uses.

Room: libs/protocol (vocabulary). The active controller decides by producing these records; the shell appends
them to the metadata log (a JetStream stream); every controller and broker builds the same `MetadataImage`
(libs/core) by applying them in log order and by no other means. They are frozen values with no behaviour.

Kafka's names and meanings (`metadata/src/main/resources/common/metadata/*.json`), with these reductions:

| record                          | Kafka's fields left out                                                  |
| ------------------------------- | ------------------------------------------------------------------------ |
| RegisterBrokerRecord            | rack, features; log dirs are one `directory_id` (the log dir's          |
|                                 | meta.properties `directory.id`, "" when unknown); endpoints are one     |
|                                 | `kafka_listener` (host:port, issue 15). `previous_broker_epoch` is kept |
|                                 | so the log itself says whether the broker registered after a clean stop |
| BrokerRegistrationChangeRecord  | log dirs, replaced by `offline_replicas` (the broker's replicas whose    |
|                                 | log is unusable); `None` stands for Kafka's "no change" of each field   |
| PartitionRecord                 | directories, leader recovery state                                       |
| PartitionChangeRecord           | directories, leader recovery state                                       |
| ConfigRecord                    | resource type (always a topic here); `value` None deletes the key       |

A PartitionChangeRecord carries only what changes: `None` leaves a list as it is, and `leader` is
NO_LEADER_CHANGE (-2) unless the leader changes. Applying one always bumps the partition epoch, and bumps the
leader epoch exactly when `leader` is set (PartitionRegistration.merge).

Reassignment (KIP-455 as KRaft records it): `removing_replicas` / `adding_replicas` are non-empty while a
partition's replicas are being moved; `replicas` then holds the target followed by the ones being removed. They
default to empty (and `None`, no change, in a PartitionChangeRecord), so a log written before they existed reads
as one with no reassignment.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

import msgpack

from hightide.protocol.events import BrokerIds, Int32, Int64

ReplicaRefs = tuple[tuple[str, Int32], ...]
"""Replicas of one broker by (topic id, partition)."""

NO_LEADER: Final = -1
"""The `leader` of a partition that has none."""
NO_LEADER_CHANGE: Final = -2
"""The `leader` of a PartitionChangeRecord that does not change the leader (and so not the leader epoch)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """A broker registered: a new incarnation, or the same one again. `broker_epoch` is the metadata log offset
    the registration was written at (KRaft's choice), so epochs only grow. A broker registers fenced."""

    broker_id: Int32
    broker_epoch: Int64
    incarnation_id: str
    previous_broker_epoch: Int64
    fenced: bool = True
    kafka_listener: str = ""  # issue 15: the advertised Kafka listener, host:port ("" when none)
    directory_id: str = ""  # i13-elr: the log dir's directory.id (KIP-858), "" when the broker sent none


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """A registered broker was fenced or unfenced, entered controlled shutdown, or reported replicas offline.
    `None`: no change. `offline_replicas` is the broker's whole set of offline replicas after the change, as
    (topic id, partition), sorted (KIP-858 writes the broker's remaining online log dirs the same way); the set is
    emptied by the broker's next registration, after its log recovery."""

    broker_id: Int32
    broker_epoch: Int64
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    offline_replicas: ReplicaRefs | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    """A broker's registration was removed."""

    broker_id: Int32
    broker_epoch: Int64


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """A topic came into being. Its configs (ConfigRecord) and partitions (PartitionRecord) follow it."""

    name: str
    topic_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """A topic config was set (`value`) or removed (`value` None)."""

    topic: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """A partition's whole registration: written when it is created. The first replica is its preferred leader."""

    topic_id: str
    partition: Int32
    replicas: BrokerIds
    isr: BrokerIds
    elr: BrokerIds = ()
    last_known_elr: BrokerIds = ()
    leader: Int32
    leader_epoch: Int32 = 0
    partition_epoch: Int32 = 0
    removing_replicas: BrokerIds = ()
    adding_replicas: BrokerIds = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """A change of one partition: only the fields that change (`None`, or `leader` NO_LEADER_CHANGE, keep them)."""

    topic_id: str
    partition: Int32
    leader: Int32 = NO_LEADER_CHANGE
    isr: BrokerIds | None = None
    elr: BrokerIds | None = None
    last_known_elr: BrokerIds | None = None
    replicas: BrokerIds | None = None
    removing_replicas: BrokerIds | None = None
    adding_replicas: BrokerIds | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    """A topic, its partitions and its configs were removed."""

    topic_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord:
    """A block of producer ids was handed out: the next block starts at `next_producer_id` (KRaft's record).
    `broker_id` -1: allocated for a client directly (Hightide's InitProducerId goes to the controller)."""

    broker_id: Int32
    broker_epoch: Int64
    next_producer_id: Int64


MetadataRecord = (
    RegisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | ConfigRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ProducerIdsRecord
)
"""Every record type of the metadata log."""


# -- the metadata log's messages -------------------------------------------------------------------------------

METADATA_RECORD_TYPES: dict[str, type[MetadataRecord]] = {
    cls.__name__: cls
    for cls in (
        RegisterBrokerRecord,
        BrokerRegistrationChangeRecord,
        UnregisterBrokerRecord,
        TopicRecord,
        ConfigRecord,
        PartitionRecord,
        PartitionChangeRecord,
        RemoveTopicRecord,
        ProducerIdsRecord,
    )
}


class InvalidMetadataRecord(ValueError):
    """A metadata log message that is not what a controller writes: the log is corrupt or not Hightide's."""


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    """One message of the metadata log: the records of one controller decision, written atomically together.
    `controller_epoch` says which controller tenure wrote it."""

    controller_id: int
    controller_epoch: int
    records: tuple[MetadataRecord, ...]


def encode_metadata_batch(batch: MetadataBatch) -> bytes:
    records = [[type(r).__name__, {f.name: getattr(r, f.name) for f in fields(r)}] for r in batch.records]
    body = {"controller_id": batch.controller_id, "controller_epoch": batch.controller_epoch, "records": records}
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return data


def decode_metadata_batch(data: bytes) -> MetadataBatch:
    try:
        body = msgpack.unpackb(data, raw=False, use_list=False)
        records = tuple(_record(name, values) for name, values in body["records"])
        return MetadataBatch(int(body["controller_id"]), int(body["controller_epoch"]), records)
    except InvalidMetadataRecord:
        raise
    except Exception as error:  # msgpack and a wrong shape raise many types; all mean the same here
        raise InvalidMetadataRecord(f"unreadable metadata log message: {type(error).__name__}: {error}") from None


def _record(name: str, values: dict[str, object]) -> MetadataRecord:
    cls = METADATA_RECORD_TYPES.get(name)
    if cls is None:
        raise InvalidMetadataRecord(f"unknown metadata record type {name!r}")
    return cls(**values)  # type: ignore[arg-type]
