"""The metadata image: the cluster's brokers, topics and partitions, built only by applying metadata records.

Room: libs/core (rules, pure). Kafka's MetadataImage with ClusterControlManager's and ReplicationControlManager's
replay methods: the active controller, the standby controllers and every broker apply the same records of the
metadata log in the same order and so hold equal images. The image never decides anything; it answers
questions (who is registered and active, which partitions a broker leads, which are leaderless) and crashes on
a record that cannot follow the ones before it, as Kafka's replay does, because such a log is corrupt.

Images are immutable values: `apply` returns a new image and shares what did not change. So a decision can be
tried on a working copy, and two images built from the same records compare equal.

`next_offset` counts the records applied: the offset the next record of the log will get (the log starts at
offset 0 and every record goes through `apply`). A broker's epoch is the offset of the batch that registered it,
as in KRaft, so the image can hand out epochs without a counter of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple, assert_never

from hightide.protocol.metadata import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)


class TopicPartition(NamedTuple):
    """A partition by topic name (the answer to the image's partition queries)."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One registered broker, as Kafka's BrokerRegistration. `registration_offset` is the offset of its
    RegisterBrokerRecord: the broker is caught up (and may be unfenced) once it has read that far."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    fenced: bool
    in_controlled_shutdown: bool
    registration_offset: int
    offline_replicas: frozenset[tuple[str, int]] = frozenset()
    """Its replicas whose log storage refused, by (topic id, partition): KIP-858's offline log directories. They
    may not lead nor join an ISR or ELR until the broker registers again (after its log recovery)."""
    kafka_listener: str = ""
    """Its advertised Kafka listener, host:port (issue 15; "" when it has none)."""
    directory_id: str = ""
    """The `directory.id` of its log dir at its registration (KIP-858's meta.properties; "" when it sent none)."""

    @property
    def active(self) -> bool:
        """Kafka's `ClusterControlManager.isActive`: may lead and join ISRs (unfenced, not shutting down)."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's registration, as Kafka's PartitionRegistration (without directories). During a
    reassignment `replicas` is the target followed by `removing_replicas`, and `adding_replicas` are the target's
    new members (Kafka's PartitionReassignmentReplicas)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        """Kafka's isReassignmentInProgress: replicas are being added or removed."""
        return bool(self.removing_replicas or self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes (the current ones when none is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment began (Kafka's originalReplicas): what a cancellation restores."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_leader

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=tuple(record.replicas),
            isr=tuple(record.isr),
            elr=tuple(record.elr),
            last_known_elr=tuple(record.last_known_elr),
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=tuple(record.removing_replicas),
            adding_replicas=tuple(record.adding_replicas),
        )

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """Kafka's `PartitionRegistration.merge`: the partition epoch goes up on every change record, the leader
        epoch only when the record sets the leader."""
        leader_changes = record.leader != NO_LEADER_CHANGE
        return PartitionRegistration(
            replicas=self.replicas if record.replicas is None else tuple(record.replicas),
            isr=self.isr if record.isr is None else tuple(record.isr),
            elr=self.elr if record.elr is None else tuple(record.elr),
            last_known_elr=self.last_known_elr if record.last_known_elr is None else tuple(record.last_known_elr),
            leader=record.leader if leader_changes else self.leader,
            leader_epoch=self.leader_epoch + 1 if leader_changes else self.leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=_or(record.removing_replicas, self.removing_replicas),
            adding_replicas=_or(record.adding_replicas, self.adding_replicas),
        )


def _or(changed: tuple[int, ...] | None, current: tuple[int, ...]) -> tuple[int, ...]:
    """A change record's list where it sets one, else the current one."""
    return current if changed is None else tuple(changed)


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its id, its partitions by partition id, and the configs set on it."""

    name: str
    topic_id: str
    partitions: tuple[PartitionRegistration, ...] = ()
    configs: Mapping[str, str] = field(default_factory=dict)

    def partition(self, partition: int) -> PartitionRegistration | None:
        return self.partitions[partition] if 0 <= partition < len(self.partitions) else None


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster's metadata after `next_offset` records. Build it with `MetadataImage().apply_all(records)`."""

    next_offset: int = 0
    last_broker_epoch: int = -1
    next_producer_id: int = 0
    """The first producer id not yet handed out."""
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    topics: Mapping[str, TopicImage] = field(default_factory=dict)
    """Topics by topic id."""
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    """Topic ids by topic name."""

    # -- building -----------------------------------------------------------------------------------------------

    def apply(self, record: MetadataRecord) -> MetadataImage:
        """The image after one more record of the log (at offset `next_offset`)."""
        offset = self.next_offset
        match record:
            case RegisterBrokerRecord():
                image = self._register_broker(record, offset)
            case BrokerRegistrationChangeRecord():
                image = self._change_broker(record)
            case UnregisterBrokerRecord():
                image = self._unregister_broker(record)
            case TopicRecord():
                image = self._add_topic(record)
            case ConfigRecord():
                image = self._set_config(record)
            case PartitionRecord():
                image = self._add_partition(record)
            case PartitionChangeRecord():
                image = self._change_partition(record)
            case RemoveTopicRecord():
                image = self._remove_topic(record)
            case ProducerIdsRecord():
                assert record.next_producer_id > self.next_producer_id, (record, self.next_producer_id)
                image = replace(self, next_producer_id=record.next_producer_id)
            case _:
                assert_never(record)
        return replace(image, next_offset=offset + 1)

    def apply_all(self, records: Iterable[MetadataRecord]) -> MetadataImage:
        image = self
        for record in records:
            image = image.apply(record)
        return image

    def _register_broker(self, record: RegisterBrokerRecord, offset: int) -> MetadataImage:
        # Epochs are log offsets of registration batches: they grow, and none is ahead of its own record.
        assert self.last_broker_epoch < record.broker_epoch <= offset, (record, self.last_broker_epoch, offset)
        registration = BrokerRegistration(
            broker_id=record.broker_id,
            broker_epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            fenced=record.fenced,
            in_controlled_shutdown=False,
            registration_offset=offset,
            kafka_listener=record.kafka_listener,
            directory_id=record.directory_id,
        )
        brokers = {**self.brokers, record.broker_id: registration}
        return replace(self, brokers=brokers, last_broker_epoch=record.broker_epoch)

    def _change_broker(self, record: BrokerRegistrationChangeRecord) -> MetadataImage:
        current = self.brokers.get(record.broker_id)
        assert current is not None and current.broker_epoch == record.broker_epoch, (record, current)
        changed = replace(
            current,
            fenced=current.fenced if record.fenced is None else record.fenced,
            in_controlled_shutdown=(
                current.in_controlled_shutdown
                if record.in_controlled_shutdown is None
                else record.in_controlled_shutdown
            ),
            offline_replicas=(
                current.offline_replicas
                if record.offline_replicas is None
                else frozenset((topic_id, partition) for topic_id, partition in record.offline_replicas)
            ),
        )
        return replace(self, brokers={**self.brokers, record.broker_id: changed})

    def _unregister_broker(self, record: UnregisterBrokerRecord) -> MetadataImage:
        current = self.brokers.get(record.broker_id)
        assert current is not None and current.broker_epoch == record.broker_epoch, (record, current)
        return replace(self, brokers={b: r for b, r in self.brokers.items() if b != record.broker_id})

    def _add_topic(self, record: TopicRecord) -> MetadataImage:
        assert record.name not in self.topic_ids and record.topic_id not in self.topics, record
        topics = {**self.topics, record.topic_id: TopicImage(name=record.name, topic_id=record.topic_id)}
        return replace(self, topics=topics, topic_ids={**self.topic_ids, record.name: record.topic_id})

    def _set_config(self, record: ConfigRecord) -> MetadataImage:
        topic = self.topic(record.topic)
        assert topic is not None, record
        configs = {k: v for k, v in topic.configs.items() if k != record.name}
        if record.value is not None:
            configs[record.name] = record.value
        return self._with_topic(replace(topic, configs=configs))

    def _add_partition(self, record: PartitionRecord) -> MetadataImage:
        topic = self.topics.get(record.topic_id)
        assert topic is not None and record.partition == len(topic.partitions), record
        partitions = (*topic.partitions, PartitionRegistration.from_record(record))
        return self._with_topic(replace(topic, partitions=partitions))

    def _change_partition(self, record: PartitionChangeRecord) -> MetadataImage:
        topic = self.topics.get(record.topic_id)
        assert topic is not None, record
        current = topic.partition(record.partition)
        assert current is not None, record
        partitions = list(topic.partitions)
        partitions[record.partition] = current.merge(record)
        return self._with_topic(replace(topic, partitions=tuple(partitions)))

    def _remove_topic(self, record: RemoveTopicRecord) -> MetadataImage:
        topic = self.topics.get(record.topic_id)
        assert topic is not None, record
        topics = {i: t for i, t in self.topics.items() if i != record.topic_id}
        # The topic's offline replicas go with it (as Kafka's directory assignments do).
        brokers = {
            b: r
            if not any(t == record.topic_id for t, _ in r.offline_replicas)
            else replace(r, offline_replicas=frozenset(ref for ref in r.offline_replicas if ref[0] != record.topic_id))
            for b, r in self.brokers.items()
        }
        topic_ids = {n: i for n, i in self.topic_ids.items() if n != topic.name}
        return replace(self, topics=topics, topic_ids=topic_ids, brokers=brokers)

    def _with_topic(self, topic: TopicImage) -> MetadataImage:
        return replace(self, topics={**self.topics, topic.topic_id: topic})

    # -- brokers ------------------------------------------------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced and not in controlled shutdown: may lead, may join an ISR."""
        registration = self.brokers.get(broker_id)
        return registration is not None and registration.active

    def active_brokers(self) -> tuple[int, ...]:
        """The brokers that may lead and join ISRs, by id."""
        return tuple(sorted(b for b, r in self.brokers.items() if r.active))

    def isr_eligible_brokers(self) -> frozenset[int]:
        """Brokers an ISR may gain (Kafka's AlterPartition check, less the broker epoch match): the active ones."""
        return frozenset(self.active_brokers())

    def fenced_brokers(self) -> tuple[int, ...]:
        return tuple(sorted(b for b, r in self.brokers.items() if r.fenced))

    def replica_offline(self, broker_id: int, topic: str, partition: int) -> bool:
        """Whether the broker reported its replica of the partition offline (since it last registered)."""
        registration = self.brokers.get(broker_id)
        topic_id = self.topic_ids.get(topic)
        return registration is not None and (topic_id, partition) in registration.offline_replicas

    def is_eligible_replica(self, broker_id: int, topic: str, partition: int) -> bool:
        """May lead this partition and join its ISR or ELR: its broker is active and its replica is not offline
        (Kafka's LeaderAcceptor and AlterPartition's eligibility with KIP-858's log directories)."""
        return self.is_active(broker_id) and not self.replica_offline(broker_id, topic, partition)

    # -- topics and partitions ----------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        image = self.topic(topic)
        return None if image is None else image.partition(partition)

    def all_partitions(self) -> Iterator[tuple[TopicPartition, PartitionRegistration]]:
        """Every partition, by topic name and then partition id (a fixed order, so decisions repeat)."""
        for name in sorted(self.topic_ids):
            for partition_id, partition in enumerate(self.topics[self.topic_ids[name]].partitions):
                yield TopicPartition(name, partition_id), partition

    def partitions_led_by(self, broker_id: int) -> tuple[TopicPartition, ...]:
        return tuple(tp for tp, p in self.all_partitions() if p.leader == broker_id)

    def partitions_with_isr_member(self, broker_id: int) -> tuple[TopicPartition, ...]:
        return tuple(tp for tp, p in self.all_partitions() if broker_id in p.isr)

    def partitions_with_elr_member(self, broker_id: int) -> tuple[TopicPartition, ...]:
        return tuple(tp for tp, p in self.all_partitions() if broker_id in p.elr)

    def partitions_with_last_known_elr_member(self, broker_id: int) -> tuple[TopicPartition, ...]:
        return tuple(tp for tp, p in self.all_partitions() if broker_id in p.last_known_elr)

    def offline_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        """The partition's replicas whose broker reported them offline, in replica order (Kafka's
        MetadataResponse offline_replicas)."""
        registration = self.partition(topic, partition)
        if registration is None:
            return ()
        return tuple(r for r in registration.replicas if self.replica_offline(r, topic, partition))

    def partitions_offline_on(self, broker_id: int) -> tuple[TopicPartition, ...]:
        """The partitions whose replica on this broker is offline, by topic name and partition id."""
        registration = self.brokers.get(broker_id)
        if registration is None:
            return ()
        names = {topic_id: name for name, topic_id in self.topic_ids.items()}
        return tuple(sorted(TopicPartition(names[t], p) for t, p in registration.offline_replicas if t in names))

    def leaderless_partitions(self) -> tuple[TopicPartition, ...]:
        """Offline partitions: Kafka's OfflinePartitionsCount counts these."""
        return tuple(tp for tp, p in self.all_partitions() if not p.has_leader)

    def imbalanced_partitions(self) -> tuple[TopicPartition, ...]:
        """Partitions not led by their preferred (first) replica, leaderless ones included, as Kafka counts them."""
        return tuple(tp for tp, p in self.all_partitions() if not p.has_preferred_leader)
