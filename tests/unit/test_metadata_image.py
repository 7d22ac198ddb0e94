"""The metadata image is what the records of the metadata log say, and nothing else.

Method: given a sequence of KRaft-style records, when they are applied in order, then the image answers the
controller's questions (brokers with their epoch, fencing and shutdown state; topics by name and by id;
partition registrations; partitions led by a broker; ISR-eligible brokers) as Kafka's replay would leave them.
The merge rule is Kafka's PartitionRegistrationTest.testPartitionControlInfoMergeAndDiff vector. A record that
cannot follow the ones before it (a corrupt log) crashes the image, as Kafka's replay throws.
"""

from __future__ import annotations

import pytest

from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicPartition
from hightide.protocol.metadata import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)


def register(broker_id: int, epoch: int, incarnation: str = "") -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=incarnation or f"inc-{broker_id}",
        previous_broker_epoch=-1,
    )


def unfence(broker_id: int, epoch: int) -> BrokerRegistrationChangeRecord:
    return BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=False)


def three_unfenced_brokers() -> list[MetadataRecord]:
    """Brokers 0, 1, 2 registered at offsets 0, 1, 2 (their epochs) and unfenced at offsets 3, 4, 5."""
    return [register(0, 0), register(1, 1), register(2, 2), unfence(0, 0), unfence(1, 1), unfence(2, 2)]


def topic_foo() -> list[MetadataRecord]:
    """Topic foo: p0 = [0, 1, 2] led by 0, p1 = [1, 2, 0] led by 1, p2 = [2, 0, 1] led by 0 (not preferred)."""
    return [
        TopicRecord(name="foo", topic_id="foo-id"),
        PartitionRecord(topic_id="foo-id", partition=0, replicas=(0, 1, 2), isr=(0, 1, 2), leader=0),
        PartitionRecord(topic_id="foo-id", partition=1, replicas=(1, 2, 0), isr=(1, 2, 0), leader=1),
        PartitionRecord(topic_id="foo-id", partition=2, replicas=(2, 0, 1), isr=(0, 1), leader=0),
    ]


# -- the log position and broker epochs ---------------------------------------------------------------------------


def test_an_empty_image_has_read_nothing() -> None:
    image = MetadataImage()
    assert image.next_offset == 0
    assert image.last_broker_epoch == -1
    assert image.brokers == {} and image.topics == {} and image.topic_ids == {}


def test_every_record_moves_the_next_offset_by_one() -> None:
    image = MetadataImage().apply_all(three_unfenced_brokers())
    assert image.next_offset == 6


def test_a_registered_broker_is_fenced_with_its_epoch_and_the_offset_of_its_registration() -> None:
    image = MetadataImage().apply_all([register(0, 0), register(7, 1)])
    registration = image.broker(7)
    assert registration is not None
    assert (registration.broker_epoch, registration.fenced, registration.registration_offset) == (1, True, 1)
    assert registration.incarnation_id == "inc-7"
    assert not image.is_active(7)
    assert image.last_broker_epoch == 1


def test_a_registration_may_carry_the_offset_of_an_earlier_record_of_its_batch() -> None:
    # KRaft's epoch is the offset of the batch's first record: here a topic record (offset 2) went first.
    image = MetadataImage().apply_all([register(0, 0), unfence(0, 0), TopicRecord(name="t", topic_id="t-id")])
    registration = image.apply(register(1, 2)).broker(1)
    assert registration is not None
    assert (registration.broker_epoch, registration.registration_offset) == (2, 3)


def test_a_broker_epoch_that_does_not_grow_is_a_corrupt_log() -> None:
    image = MetadataImage().apply_all([register(0, 0), register(1, 1)])
    with pytest.raises(AssertionError):
        image.apply(register(2, 1))


def test_a_broker_epoch_ahead_of_its_own_record_is_a_corrupt_log() -> None:
    with pytest.raises(AssertionError):
        MetadataImage().apply(register(0, 5))


# -- broker state ---------------------------------------------------------------------------------------------


def test_unfenced_brokers_are_active_and_isr_eligible() -> None:
    image = MetadataImage().apply_all(three_unfenced_brokers())
    assert image.active_brokers() == (0, 1, 2)
    assert image.isr_eligible_brokers() == frozenset({0, 1, 2})
    assert image.fenced_brokers() == ()


def test_a_broker_in_controlled_shutdown_is_unfenced_but_not_active() -> None:
    shutting_down = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=True)
    image = MetadataImage().apply_all([*three_unfenced_brokers(), shutting_down])
    registration = image.broker(1)
    assert registration is not None
    assert (registration.fenced, registration.in_controlled_shutdown) == (False, True)
    assert image.active_brokers() == (0, 2)
    assert 1 not in image.isr_eligible_brokers()


def test_fencing_keeps_the_controlled_shutdown_flag_as_kafka_does() -> None:
    records = [
        *three_unfenced_brokers(),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=True),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=True),
    ]
    registration = MetadataImage().apply_all(records).broker(1)
    assert registration is not None
    assert (registration.fenced, registration.in_controlled_shutdown) == (True, True)


def test_registering_again_replaces_the_registration_fenced_and_not_shutting_down() -> None:
    records = [
        *three_unfenced_brokers(),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=True),
        register(1, 7, incarnation="second"),
    ]
    image = MetadataImage().apply_all(records)
    registration = image.broker(1)
    assert registration is not None
    assert (registration.broker_epoch, registration.incarnation_id) == (7, "second")
    assert (registration.fenced, registration.in_controlled_shutdown, registration.registration_offset) == (
        True,
        False,
        7,
    )


def test_a_change_for_another_broker_epoch_is_a_corrupt_log() -> None:
    image = MetadataImage().apply_all(three_unfenced_brokers())
    with pytest.raises(AssertionError):
        image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=0, fenced=True))
    with pytest.raises(AssertionError):
        image.apply(BrokerRegistrationChangeRecord(broker_id=9, broker_epoch=0, fenced=True))


def test_unregistering_removes_the_broker() -> None:
    image = MetadataImage().apply_all([*three_unfenced_brokers(), UnregisterBrokerRecord(broker_id=2, broker_epoch=2)])
    assert image.broker(2) is None
    assert image.active_brokers() == (0, 1)
    with pytest.raises(AssertionError):
        image.apply(UnregisterBrokerRecord(broker_id=2, broker_epoch=2))


# -- topics and partitions ------------------------------------------------------------------------------------


def test_a_topic_is_found_by_name_and_by_id_with_its_partitions_and_configs() -> None:
    records = [
        *three_unfenced_brokers(),
        *topic_foo()[:1],
        ConfigRecord(topic="foo", name="min.insync.replicas", value="2"),
        ConfigRecord(topic="foo", name="retention.ms", value="1000"),
        *topic_foo()[1:],
        ConfigRecord(topic="foo", name="retention.ms", value=None),
    ]
    image = MetadataImage().apply_all(records)
    topic = image.topic("foo")
    assert topic is not None
    assert image.topics["foo-id"] is topic
    assert topic.configs == {"min.insync.replicas": "2"}
    assert len(topic.partitions) == 3
    assert image.partition("foo", 1) == PartitionRegistration(
        replicas=(1, 2, 0), isr=(1, 2, 0), elr=(), last_known_elr=(), leader=1, leader_epoch=0, partition_epoch=0
    )
    assert image.partition("foo", 3) is None
    assert image.partition("bar", 0) is None


def test_partition_queries_answer_by_topic_name_then_partition() -> None:
    records = [
        *three_unfenced_brokers(),
        *topic_foo(),
        TopicRecord(name="bar", topic_id="bar-id"),
        PartitionRecord(topic_id="bar-id", partition=0, replicas=(1, 0), isr=(1,), leader=NO_LEADER),
    ]
    image = MetadataImage().apply_all(records)
    assert image.partitions_led_by(0) == (TopicPartition("foo", 0), TopicPartition("foo", 2))
    assert image.partitions_with_isr_member(2) == (TopicPartition("foo", 0), TopicPartition("foo", 1))
    assert image.leaderless_partitions() == (TopicPartition("bar", 0),)
    assert image.imbalanced_partitions() == (TopicPartition("bar", 0), TopicPartition("foo", 2))


def test_a_change_record_merges_as_kafkas_partition_registration() -> None:
    # PartitionRegistrationTest.testPartitionControlInfoMergeAndDiff: a = replicas [1, 2, 3], ISR [1, 2], leader 1.
    a = PartitionRegistration(
        replicas=(1, 2, 3), isr=(1, 2), elr=(), last_known_elr=(), leader=1, leader_epoch=0, partition_epoch=0
    )
    b = a.merge(PartitionChangeRecord(topic_id="t", partition=0, leader=3, isr=(3,)))
    c = a.merge(PartitionChangeRecord(topic_id="t", partition=0, isr=(1,)))
    assert (b.isr, b.leader, b.leader_epoch, b.partition_epoch) == ((3,), 3, 1, 1)
    assert (c.isr, c.leader, c.leader_epoch, c.partition_epoch) == ((1,), 1, 0, 1)


def test_a_change_record_keeps_what_it_does_not_name() -> None:
    start = PartitionRegistration(
        replicas=(1, 2, 3), isr=(1,), elr=(2, 3), last_known_elr=(), leader=1, leader_epoch=4, partition_epoch=9
    )
    changed = start.merge(PartitionChangeRecord(topic_id="t", partition=0, last_known_elr=(1,)))
    assert changed == PartitionRegistration(
        replicas=(1, 2, 3), isr=(1,), elr=(2, 3), last_known_elr=(1,), leader=1, leader_epoch=4, partition_epoch=10
    )


def test_a_change_record_for_a_missing_partition_is_a_corrupt_log() -> None:
    image = MetadataImage().apply_all([*three_unfenced_brokers(), *topic_foo()])
    with pytest.raises(AssertionError):
        image.apply(PartitionChangeRecord(topic_id="foo-id", partition=3, isr=(0,)))
    with pytest.raises(AssertionError):
        image.apply(PartitionChangeRecord(topic_id="nope", partition=0, isr=(0,)))


def test_partitions_arrive_in_order_and_topics_once() -> None:
    image = MetadataImage().apply_all([*three_unfenced_brokers(), *topic_foo()])
    with pytest.raises(AssertionError):
        image.apply(PartitionRecord(topic_id="foo-id", partition=5, replicas=(0,), isr=(0,), leader=0))
    with pytest.raises(AssertionError):
        image.apply(TopicRecord(name="foo", topic_id="other-id"))
    with pytest.raises(AssertionError):
        image.apply(ConfigRecord(topic="bar", name="retention.ms", value="1"))


def test_removing_a_topic_frees_its_name() -> None:
    image = MetadataImage().apply_all([*three_unfenced_brokers(), *topic_foo(), RemoveTopicRecord(topic_id="foo-id")])
    assert image.topic("foo") is None and image.topics == {}
    assert image.partitions_led_by(0) == ()
    again = image.apply(TopicRecord(name="foo", topic_id="foo-id-2"))
    assert again.topic_ids == {"foo": "foo-id-2"}


# -- images are values ----------------------------------------------------------------------------------------


def test_applying_returns_a_new_image_and_leaves_the_old_one() -> None:
    before = MetadataImage().apply_all(three_unfenced_brokers())
    after = before.apply(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=0, fenced=True))
    assert before.is_active(0) and not after.is_active(0)
    assert before.next_offset + 1 == after.next_offset


def test_the_same_records_build_equal_images() -> None:
    records = [*three_unfenced_brokers(), *topic_foo(), PartitionChangeRecord(topic_id="foo-id", partition=0, isr=(0,))]
    assert MetadataImage().apply_all(records) == MetadataImage().apply_all(records)
    assert MetadataImage().apply_all(records) != MetadataImage().apply_all(records[:-1])


# -- offline replicas ----------------------------------------------------------------------------------------------


def offline(broker_id: int, epoch: int, *refs: tuple[str, int]) -> BrokerRegistrationChangeRecord:
    return BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, offline_replicas=tuple(refs))


def test_a_brokers_offline_replicas_are_its_last_reported_set_until_it_registers_again() -> None:
    """Given foo's partitions 0 and 2 reported offline on broker 1, then the image lists broker 1 among their offline
    replicas and not as an eligible replica of them (it stays active and eligible elsewhere); a fencing change
    keeps the set (None: no change), and the broker's next registration clears it."""
    image = MetadataImage().apply_all(
        [*three_unfenced_brokers(), *topic_foo(), offline(1, 1, ("foo-id", 0), ("foo-id", 2))]
    )
    assert (image.offline_replicas("foo", 0), image.offline_replicas("foo", 1), image.offline_replicas("foo", 2)) == (
        (1,),
        (),
        (1,),
    )
    assert image.is_active(1) and not image.is_eligible_replica(1, "foo", 0) and image.is_eligible_replica(1, "foo", 1)
    assert image.partitions_offline_on(1) == (TopicPartition("foo", 0), TopicPartition("foo", 2))
    fenced = image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=True))
    assert fenced.offline_replicas("foo", 0) == (1,)
    registered = fenced.apply(register(1, fenced.next_offset, "inc-1-again"))
    assert registered.offline_replicas("foo", 0) == () and registered.partitions_offline_on(1) == ()


def test_a_removed_topic_takes_its_offline_replicas_with_it() -> None:
    image = MetadataImage().apply_all([*three_unfenced_brokers(), *topic_foo(), offline(1, 1, ("foo-id", 0))])
    removed = image.apply(RemoveTopicRecord(topic_id="foo-id"))
    broker = removed.broker(1)
    assert broker is not None and broker.offline_replicas == frozenset()
