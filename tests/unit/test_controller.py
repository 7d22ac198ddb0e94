"""The controller decides as KRaft's controller does: registration, heartbeats, fencing, topics, AlterPartition,
elections (clean, ELR, unclean, preferred), controlled shutdown and the auto leader rebalance.

Method: Kafka's own vectors wherever Kafka has one, each named by the Kafka test that asserts it
(ReplicationControlManagerTest, PartitionChangeBuilderTest, BrokerHeartbeatManager's rules), run through a
`Cluster` that plays the shell: every result is appended and applied before the next request, the clock is a
number. Where Kafka has no vector (AlterPartition's check order as a whole, the KIP-966 walkthroughs of
reliability.md, the events) the test states the rule it checks. Brokers register with epochs equal to the
metadata offset of their registration, so epochs in these tests differ from Kafka's 100 + id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import pytest

from hightide.core.controller import (
    ControllerConfig,
    ControllerResult,
    Election,
    ElectionType,
    InvalidControllerConfig,
    ReplicationControl,
    build_partition_change,
    change_violations,
    elect_leader,
    image_violations,
    partition_violations,
    preferred_elections_due,
)
from hightide.core.effects import Emit
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicPartition
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
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
)
from hightide.protocol.wire import AlterPartitionRequest, AlterPartitionResponse

SESSION_MS = 9_000
R = TypeVar("R")
E = TypeVar("E", bound=events.Event)


class Cluster:
    """A controller and a clock, driven as the shell drives it: each result is committed and applied at once."""

    def __init__(self, **settings: int | bool) -> None:
        self.control = ReplicationControl(ControllerConfig(**settings))  # type: ignore[arg-type]
        self.now_ms = 0
        self.epochs: dict[int, int] = {}
        self.incarnations: dict[int, int] = {}
        self.records: list[MetadataRecord] = []
        self.events: list[events.Event] = []

    @property
    def image(self) -> MetadataImage:
        return self.control.image

    def commit(self, result: ControllerResult[R]) -> ControllerResult[R]:
        self.control.apply(result.records)
        self.records.extend(result.records)
        self.events.extend(result.events)
        assert image_violations(self.image, self.control.config) == []
        return result

    def register(self, *broker_ids: int, clean: bool = True, directory: str = "") -> None:
        for broker_id in broker_ids:
            previous = self.epochs.get(broker_id, -1) if clean else -1
            self.incarnations[broker_id] = self.incarnations.get(broker_id, 0) + 1
            incarnation = f"broker-{broker_id}-{self.incarnations[broker_id]}"
            result = self.control.register_broker(broker_id, incarnation, previous, self.now_ms, directory_id=directory)
            reply = self.commit(result).response
            assert reply.error is ErrorCode.NONE, reply
            self.epochs[broker_id] = reply.broker_epoch

    def heartbeat(self, broker_id: int, **flags: bool) -> ControllerResult[Any]:
        return self.commit(self.control.heartbeat(broker_id, self.epochs[broker_id], self.now_ms, **flags))

    def unfence(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            reply = self.commit(self.control.heartbeat(broker_id, self.epochs[broker_id], self.now_ms)).response
            assert reply.error is ErrorCode.NONE and not reply.is_fenced, reply

    def fence(self, *broker_ids: int) -> None:
        """Kafka's fenceBrokers: every other broker heartbeats (and so is unfenced), these stay silent past the
        session timeout, and then exactly these are fenced."""
        self.now_ms += SESSION_MS + 1
        for broker_id in sorted(self.image.brokers):
            if broker_id not in broker_ids:
                self.heartbeat(broker_id)
        self.commit(self.control.tick(self.now_ms))
        assert set(self.image.fenced_brokers()) == set(broker_ids), self.image.fenced_brokers()

    def shut_down(self, broker_id: int) -> ControllerResult[Any]:
        return self.commit(self.control.controlled_shutdown(broker_id, self.epochs[broker_id], self.now_ms))

    def create(self, name: str, assignments: Sequence[Sequence[int]], **configs: str) -> str:
        topic_id = f"{name}-id"
        config_map = {key.replace("_", "."): value for key, value in configs.items()}
        result = self.control.create_topic(name, topic_id=topic_id, assignments=assignments, configs=config_map)
        assert self.commit(result).response.error is ErrorCode.NONE, result.response
        return topic_id

    def partition(self, name: str, partition: int = 0) -> PartitionRegistration:
        registration = self.image.partition(name, partition)
        assert registration is not None
        return registration

    def request(
        self, name: str, partition: int, new_isr: Sequence[int], *, sender: int | None = None
    ) -> AlterPartitionRequest:
        """The AlterPartition the current leader would send (epochs of the members unknown: -1)."""
        current = self.partition(name, partition)
        broker_id = current.leader if sender is None else sender
        return AlterPartitionRequest(
            broker_id=broker_id,
            broker_epoch=self.epochs[broker_id],
            topic=name,
            partition=partition,
            leader_epoch=current.leader_epoch,
            partition_epoch=current.partition_epoch,
            new_isr=tuple(new_isr),
            new_isr_broker_epochs=tuple(-1 for _ in new_isr),
        )

    def alter(self, name: str, partition: int, new_isr: Sequence[int]) -> AlterPartitionResponse:
        return self.commit(self.control.alter_partition(self.request(name, partition, new_isr))).response

    def leader_and_isr(self, name: str, partition: int = 0) -> tuple[int, tuple[int, ...]]:
        current = self.partition(name, partition)
        return current.leader, current.isr

    def events_of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]


def registration(
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int,
    *,
    elr: Sequence[int] = (),
    last_known_elr: Sequence[int] = (),
) -> PartitionRegistration:
    """A PartitionChangeBuilderTest registration: leader epoch 100, partition epoch 200."""
    return PartitionRegistration(
        replicas=tuple(replicas),
        isr=tuple(isr),
        elr=tuple(elr),
        last_known_elr=tuple(last_known_elr),
        leader=leader,
        leader_epoch=100,
        partition_epoch=200,
    )


FOO = registration([2, 1, 3], [2, 1, 3], 1)
BAZ = registration([2, 1, 3], [1, 3], 3)
OFFLINE_WITH_ELR = registration([2, 1, 3], [], NO_LEADER, elr=[3], last_known_elr=[2])


def change(
    partition: PartitionRegistration,
    acceptable: set[int] | None = None,
    *,
    not_acceptable: set[int] = frozenset(),  # type: ignore[assignment]
    min_isr: int = 2,
    elr: bool = False,
    election: Election = Election.ONLINE,
    target_isr: Sequence[int] | None = None,
    unclean_shutdown: frozenset[int] = frozenset(),
) -> PartitionChangeRecord | None:
    def is_acceptable(replica: int) -> bool:
        return (acceptable is None or replica in acceptable) and replica not in not_acceptable

    built = build_partition_change(
        partition,
        topic_id="t",
        partition_id=0,
        is_acceptable_leader=is_acceptable,
        min_isr=min_isr,
        elr_enabled=elr,
        election=election,
        target_isr=target_isr,
        unclean_shutdown_replicas=unclean_shutdown,
    )
    return None if built is None else built.record


def elected(partition: PartitionRegistration, election: Election, *, target_isr: Sequence[int] | None = None) -> tuple:
    """FOO's builder in PartitionChangeBuilderTest accepts every broker but 3."""
    isr = partition.isr if target_isr is None else tuple(target_isr)
    return elect_leader(
        partition,
        target_isr=isr,
        target_elr=partition.elr,
        is_acceptable_leader=lambda r: r != 3,
        election=election,
        elr_enabled=False,
    )


# -- configuration ------------------------------------------------------------------------------------------------


def test_the_defaults_are_krafts() -> None:
    config = ControllerConfig()
    assert config.broker_session_timeout_ms == 9_000
    assert (config.min_insync_replicas, config.unclean_leader_election_enable) == (1, False)
    # Kafka 4.1 enables eligible leader replicas (KIP-966) on new clusters.
    assert (config.eligible_leader_replicas_enable, config.auto_leader_rebalance_enable) == (True, True)
    assert (config.leader_imbalance_per_broker_percentage, config.leader_imbalance_check_interval_seconds) == (10, 300)
    assert (config.default_replication_factor, config.num_partitions) == (1, 1)


def test_settings_read_by_kafkas_names() -> None:
    config = ControllerConfig.from_properties(
        {"broker.session.timeout.ms": "18000", "eligible.leader.replicas.enable": "FALSE", "min.insync.replicas": "2"}
    )
    assert (config.broker_session_timeout_ms, config.eligible_leader_replicas_enable) == (18_000, False)
    assert config.min_insync_replicas == 2


@pytest.mark.parametrize(
    "properties",
    [{"no.such.setting": "1"}, {"min.insync.replicas": "two"}, {"min.insync.replicas": "0"}, {"num.partitions": "-1"}],
)
def test_a_bad_setting_is_refused(properties: dict[str, str]) -> None:
    with pytest.raises(InvalidControllerConfig):
        ControllerConfig.from_properties(properties)


# -- registration and heartbeats ----------------------------------------------------------------------------------


def test_a_broker_registers_fenced_with_the_metadata_offset_as_its_epoch() -> None:
    cluster = Cluster()
    cluster.register(0, 1)
    assert cluster.epochs == {0: 0, 1: 1}
    result = cluster.control.register_broker(2, "broker-2-1", -1, 0)
    assert result.response.broker_epoch == cluster.image.next_offset == 2
    assert result.records == (
        RegisterBrokerRecord(broker_id=2, broker_epoch=2, incarnation_id="broker-2-1", previous_broker_epoch=-1),
    )
    assert result.events == (events.BrokerRegistered(broker=2, broker_epoch=2, previous_broker_epoch=-1, fenced=True),)


def test_a_result_offers_its_events_as_emit_effects() -> None:
    result = ReplicationControl().register_broker(0, "a", -1, 0)
    assert result.effects == tuple(Emit(event) for event in result.events) and len(result.effects) == 1


def test_a_caught_up_heartbeat_unfences_the_broker() -> None:
    cluster = Cluster()
    cluster.register(0)
    result = cluster.heartbeat(0)
    assert result.records == (BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=0, fenced=False),)
    assert result.events == (events.BrokerUnfenced(broker=0, broker_epoch=0),)
    assert cluster.image.is_active(0)
    assert cluster.heartbeat(0).records == ()


def test_a_broker_behind_its_own_registration_stays_fenced() -> None:
    # BrokerHeartbeatManager: unfence only once currentMetadataOffset >= the offset of its RegisterBrokerRecord.
    cluster = Cluster()
    cluster.register(0, 1)
    behind = cluster.control.heartbeat(1, cluster.epochs[1], 0, metadata_offset=0)
    assert (behind.response.is_caught_up, behind.response.is_fenced, behind.records) == (False, True, ())
    caught_up = cluster.commit(cluster.control.heartbeat(1, cluster.epochs[1], 0, metadata_offset=1))
    assert (caught_up.response.is_caught_up, caught_up.response.is_fenced) == (True, False)


def test_a_heartbeat_with_a_stale_or_unknown_epoch_is_refused() -> None:
    cluster = Cluster()
    cluster.register(0)
    assert cluster.control.heartbeat(0, 99, 0).response.error is ErrorCode.STALE_BROKER_EPOCH
    assert cluster.control.heartbeat(5, 0, 0).response.error is ErrorCode.STALE_BROKER_EPOCH


def test_another_incarnation_is_refused_while_the_first_holds_a_session() -> None:
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    duplicate = cluster.control.register_broker(0, "impostor", -1, SESSION_MS)
    assert duplicate.response.error is ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert duplicate.records == ()
    after_the_session = cluster.commit(cluster.control.register_broker(0, "second", 0, SESSION_MS + 1))
    assert after_the_session.response.error is ErrorCode.NONE


def test_the_session_lasts_exactly_the_session_timeout() -> None:
    # BrokerHeartbeatManager.hasValidSession: lastContactNs + sessionTimeoutNs >= now.
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    assert cluster.commit(cluster.control.tick(SESSION_MS)).response == ()
    result = cluster.commit(cluster.control.tick(SESSION_MS + 1))
    assert result.response == (0,)
    assert result.records == (BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=0, fenced=True),)
    assert result.events == (events.BrokerFenced(broker=0, broker_epoch=0, reason="session_timeout"),)


def test_a_fenced_broker_is_unfenced_again_by_its_next_heartbeat() -> None:
    cluster = Cluster()
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.fence(1)
    cluster.unfence(1)
    assert cluster.image.active_brokers() == (0, 1)


def test_a_broker_may_ask_to_be_fenced() -> None:
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    result = cluster.heartbeat(0, want_fence=True)
    assert result.response.is_fenced and not result.response.should_shut_down
    assert result.events[-1] == events.BrokerFenced(broker=0, broker_epoch=0, reason="requested")


def test_unregistering_takes_the_broker_out_of_every_isr() -> None:
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    result = cluster.commit(cluster.control.unregister_broker(0))
    assert result.response.error is ErrorCode.NONE
    assert cluster.image.broker(0) is None
    assert cluster.leader_and_isr("foo") == (1, (1, 2))
    assert result.events[-1] == events.BrokerFenced(broker=0, broker_epoch=0, reason="unregistered")
    unknown = cluster.control.unregister_broker(0)
    assert unknown.response.error is ErrorCode.BROKER_ID_NOT_REGISTERED


def test_a_decision_before_the_last_records_were_applied_is_a_bug() -> None:
    control = ReplicationControl()
    control.register_broker(0, "a", -1, 0)
    with pytest.raises(AssertionError):
        control.register_broker(1, "b", -1, 0)


def test_records_are_applied_in_the_order_they_were_decided() -> None:
    control = ReplicationControl()
    result = control.register_broker(0, "a", -1, 0)
    with pytest.raises(AssertionError):
        control.apply([TopicRecord(name="x", topic_id="x"), *result.records])


# -- fencing: ReplicationControlManagerTest -----------------------------------------------------------------------


def test_fence_multiple_brokers() -> None:
    # ReplicationControlManagerTest.testFenceMultipleBrokers.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(0, 1, 2, 3, 4)
    cluster.create("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    cluster.fence(2, 3)
    assert cluster.leader_and_isr("foo", 0) == (1, (1,))
    assert cluster.leader_and_isr("foo", 1) == (4, (4,))
    assert cluster.leader_and_isr("foo", 2) == (0, (0, 1))


def test_removing_leaderships_when_fenced() -> None:
    # ReplicationControlManagerTest.testRemoveLeaderships: broker 0 leads p0 and p3, then leads nothing.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2, 3)
    cluster.create("foo", [[0, 1, 2], [1, 2, 3], [2, 3, 0], [0, 2, 1]])
    assert cluster.image.partitions_led_by(0) == (TopicPartition("foo", 0), TopicPartition("foo", 3))
    cluster.fence(0)
    assert cluster.image.partitions_led_by(0) == ()
    assert cluster.image.partitions_with_isr_member(0) == ()


def test_fencing_reports_each_change() -> None:
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    cluster.events.clear()
    cluster.fence(0)
    assert cluster.events == [
        events.PartitionChanged(
            topic="foo",
            partition=0,
            replicas=(0, 1, 2),
            isr=(1, 2),
            elr=(),
            last_known_elr=(),
            leader=1,
            leader_epoch=1,
            partition_epoch=1,
            reason="broker_fenced",
        ),
        events.LeaderElected(topic="foo", partition=0, previous_leader=0, leader=1, leader_epoch=1, election="clean"),
        events.BrokerFenced(broker=0, broker_epoch=0, reason="session_timeout"),
    ]


def test_the_last_isr_member_stays_in_the_isr_and_the_partition_goes_offline() -> None:
    # PartitionChangeBuilder: without ELR the ISR is never set empty.
    cluster = Cluster(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("foo", [[0, 1]])
    cluster.fence(1)
    cluster.fence(0)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (0,))
    assert cluster.image.leaderless_partitions() == (TopicPartition("foo", 0),)
    cluster.unfence(1)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (0,))
    cluster.unfence(0)
    assert cluster.leader_and_isr("foo") == (0, (0,))
    assert cluster.events_of(events.LeaderElected)[-1].election == "clean"


def test_unclean_election_when_leaderless_partitions_have_a_live_replica() -> None:
    # ReplicationControlManagerTest.testMaybeTriggerUncleanLeaderElectionForLeaderlessPartitions (static config).
    cluster = Cluster(unclean_leader_election_enable=True, eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(0, 1, 2, 3, 4)
    cluster.create("foo", [[1, 2, 4], [1, 3, 4], [0, 2, 4]])
    for broker_id in range(5):
        cluster.fence(*range(broker_id + 1))  # 0, then 1, ... 4: one more each time
    for partition in range(3):
        assert cluster.leader_and_isr("foo", partition) == (NO_LEADER, (4,))
    cluster.unfence(2)
    assert cluster.leader_and_isr("foo", 0) == (2, (2,))
    assert cluster.leader_and_isr("foo", 1) == (NO_LEADER, (4,))
    assert cluster.leader_and_isr("foo", 2) == (2, (2,))
    unclean = [e for e in cluster.events_of(events.LeaderElected) if e.election == "unclean"]
    assert [(e.partition, e.leader) for e in unclean] == [(0, 2), (2, 2)]


def test_unclean_election_only_where_the_topic_allows_it() -> None:
    cluster = Cluster(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("strict", [[0, 1]])
    cluster.create("lenient", [[0, 1]], unclean_leader_election_enable="true")
    cluster.alter("strict", 0, [0])
    cluster.alter("lenient", 0, [0])
    cluster.fence(0)
    assert cluster.leader_and_isr("strict") == (NO_LEADER, (0,))
    assert cluster.leader_and_isr("lenient") == (1, (1,))


# -- controlled shutdown ------------------------------------------------------------------------------------------


def test_controlled_shutdown_moves_leaderships_and_leaves_the_isrs() -> None:
    # ReplicationControlManagerTest.testProcessBrokerHeartbeatInControlledShutdown.
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    topic_id = cluster.create("foo", [[0, 1, 2]])
    result = cluster.shut_down(0)
    assert result.records == (
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=0, in_controlled_shutdown=True),
        PartitionChangeRecord(topic_id=topic_id, partition=0, leader=1, isr=(1, 2)),
    )
    assert result.response.in_controlled_shutdown and not result.response.should_shut_down
    assert cluster.events_of(events.ControlledShutdownStarted) == [
        events.ControlledShutdownStarted(broker=0, broker_epoch=0)
    ]
    assert cluster.events_of(events.LeaderElected)[-1].election == "controlled_shutdown"


def test_a_shut_down_broker_is_fenced_once_it_leads_nothing() -> None:
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    cluster.shut_down(0)
    result = cluster.shut_down(0)
    assert result.response.should_shut_down
    assert result.records == (BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=0, fenced=True),)
    assert result.events == (events.BrokerFenced(broker=0, broker_epoch=0, reason="controlled_shutdown"),)


def test_a_broker_that_leads_nothing_shuts_down_at_once() -> None:
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    result = cluster.shut_down(2)
    assert result.response.should_shut_down
    assert cluster.leader_and_isr("foo") == (0, (0, 1))
    assert not cluster.image.is_active(2)


def test_the_only_isr_member_shuts_down_and_the_partition_goes_offline() -> None:
    cluster = Cluster(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("foo", [[0, 1]])
    cluster.alter("foo", 0, [0])
    cluster.shut_down(0)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (0,))
    assert cluster.shut_down(0).response.should_shut_down


def test_shutdown_waits_until_the_active_brokers_have_read_its_records() -> None:
    # BrokerHeartbeatManager: SHUTDOWN_NOW once controlledShutdownOffset <= the lowest active offset.
    cluster = Cluster()
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("foo", [[0, 1]])
    cluster.commit(cluster.control.heartbeat(1, cluster.epochs[1], 0, metadata_offset=0))
    started = cluster.shut_down(0)
    last_offset = cluster.image.next_offset - 1
    assert started.response.in_controlled_shutdown
    assert cluster.shut_down(0).response.in_controlled_shutdown
    cluster.commit(cluster.control.heartbeat(1, cluster.epochs[1], 0, metadata_offset=last_offset))
    assert cluster.shut_down(0).response.should_shut_down


def test_a_broker_that_started_a_controlled_shutdown_stays_fenced_until_it_registers_again() -> None:
    cluster = Cluster()
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("foo", [[0, 1]])
    cluster.shut_down(0)
    cluster.shut_down(0)
    assert cluster.heartbeat(0).response.is_fenced
    cluster.register(0)
    cluster.unfence(0)
    assert cluster.image.is_active(0)


# -- re-registration ------------------------------------------------------------------------------------------


def test_a_restart_after_a_clean_shutdown_is_handled_as_a_fencing() -> None:
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    cluster.now_ms += SESSION_MS + 1  # broker 0 went silent; its session ended before tick noticed
    cluster.heartbeat(1)
    cluster.heartbeat(2)
    cluster.register(0)
    assert cluster.leader_and_isr("foo") == (1, (1, 2))
    assert [e.reason for e in cluster.events_of(events.PartitionChanged)][-1] == "broker_restarted"


def test_a_retried_registration_of_a_fenced_broker_changes_nothing_else() -> None:
    cluster = Cluster()
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("foo", [[0, 1]])
    cluster.alter("foo", 0, [0])
    cluster.fence(0)
    before = cluster.partition("foo")
    result = cluster.commit(cluster.control.register_broker(0, "broker-0-1", cluster.epochs[0], cluster.now_ms))
    assert [type(r) for r in result.records] == [RegisterBrokerRecord]
    assert cluster.partition("foo") == before


# -- topics -------------------------------------------------------------------------------------------------------


def test_a_topic_is_placed_as_kafkas_admin_utils_places_it() -> None:
    # AdminRackAwareTest.testReplicaAssignment through createTopics: 5 brokers, 10 partitions, RF 3, start 0.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(0, 1, 2, 3, 4)
    result = cluster.commit(cluster.control.create_topic("foo", topic_id="f", partitions=10, replication_factor=3))
    assert result.response.error is ErrorCode.NONE
    assert (result.response.partitions, result.response.replication_factor) == (10, 3)
    replicas = [cluster.partition("foo", p).replicas for p in range(10)]
    assert replicas == [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1), (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]  # fmt: skip
    assert all(cluster.leader_and_isr("foo", p) == (r[0], r) for p, r in enumerate(replicas))


def test_a_topic_writes_its_record_then_its_configs_then_its_partitions() -> None:
    # ReplicationControlManagerTest.testCreateTopicsWithConfigs: TopicRecord, ConfigRecord, PartitionRecord.
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    result = cluster.control.create_topic(
        "foo", topic_id="f", configs={"retention.ms": "1000", "min.insync.replicas": "1"}
    )
    assert result.records == (
        TopicRecord(name="foo", topic_id="f"),
        ConfigRecord(topic="foo", name="min.insync.replicas", value="1"),
        ConfigRecord(topic="foo", name="retention.ms", value="1000"),
        PartitionRecord(topic_id="f", partition=0, replicas=(0,), isr=(0,), leader=0),
    )
    assert result.events[0] == events.TopicCreated(
        topic="foo",
        topic_id="f",
        partitions=1,
        replication_factor=1,
        configs=(("min.insync.replicas", "1"), ("retention.ms", "1000")),
    )
    assert [type(e) for e in result.events[1:]] == [events.PartitionChanged]


def test_the_isr_is_the_active_replicas_in_replica_order_and_the_leader_its_first() -> None:
    # ReplicationControlManagerTest.testBalancePartitionLeaders' topic: only 2, 3, 4 unfenced at creation.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(2, 3, 4)
    cluster.create("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    assert cluster.leader_and_isr("foo", 0) == (2, (2, 3))
    assert cluster.leader_and_isr("foo", 1) == (2, (2, 3, 4))
    assert cluster.leader_and_isr("foo", 2) == (2, (2,))
    assert cluster.image.imbalanced_partitions() == (TopicPartition("foo", 0), TopicPartition("foo", 2))


def test_a_broker_in_controlled_shutdown_is_not_in_a_new_isr() -> None:
    # ReplicationControlManagerTest.testCreatePartitionsISRInvariants: 1 shutting down, 2 fenced -> ISR [0].
    cluster = Cluster()
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 3)
    cluster.create("bar", [[1, 3]])
    cluster.shut_down(1)
    cluster.create("foo", [[0, 1, 2]])
    assert cluster.partition("foo") == PartitionRegistration(
        replicas=(0, 1, 2), isr=(0,), elr=(), last_known_elr=(), leader=0, leader_epoch=0, partition_epoch=0
    )


def test_defaults_fill_in_minus_one() -> None:
    cluster = Cluster(num_partitions=3, default_replication_factor=2)
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    result = cluster.commit(cluster.control.create_topic("foo", topic_id="f"))
    assert (result.response.partitions, result.response.replication_factor) == (3, 2)


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", ErrorCode.INVALID_TOPIC_EXCEPTION),
        (".", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("with space", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("naïve", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("foo_bar", ErrorCode.INVALID_TOPIC_EXCEPTION),  # collides with foo.bar
        ("foo.bar", ErrorCode.TOPIC_ALREADY_EXISTS),  # exists, which Kafka reports over the collision
        ("a" * 249, ErrorCode.NONE),
        ("Legal-name_1.x", ErrorCode.NONE),
    ],
)
def test_topic_names_as_kafka_validates_them(name: str, error: ErrorCode) -> None:
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    cluster.create("foo.bar", [[0]])
    assert cluster.control.create_topic(name, topic_id="new").response.error is error


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"retention.ms": None, "segment.ms": None},
            "Null value not supported for topic configs: retention.ms,segment.ms",
        ),
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"min.insync.replicas": "0"}, "Invalid value 0 for configuration min.insync.replicas"),
        (
            {"unclean.leader.election.enable": "yes"},
            "Invalid value yes for configuration unclean.leader.election.enable",
        ),
        ({"cleanup.policy": "shred"}, "Invalid value shred for configuration cleanup.policy"),
    ],
)
def test_bad_topic_configs_are_invalid_config(configs: dict[str, str | None], message: str) -> None:
    # ReplicationControlManagerTest.testCreateTopicsWithConfigs: "Null value not supported for topic configs: foo".
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    reply = cluster.control.create_topic("foo", topic_id="f", configs=configs).response
    assert (reply.error, reply.message) == (ErrorCode.INVALID_CONFIG, message)


@pytest.mark.parametrize(
    ("partitions", "replication_factor", "error"),
    [
        (0, 0, ErrorCode.INVALID_REPLICATION_FACTOR),  # the replication factor is checked first
        (1, -2, ErrorCode.INVALID_REPLICATION_FACTOR),
        (1, 4, ErrorCode.INVALID_REPLICATION_FACTOR),  # three active brokers
        (0, 1, ErrorCode.INVALID_PARTITIONS),
        (-2, 1, ErrorCode.INVALID_PARTITIONS),
        (10_001, 1, ErrorCode.INVALID_PARTITIONS),
    ],
)
def test_bad_counts_are_refused(partitions: int, replication_factor: int, error: ErrorCode) -> None:
    cluster = Cluster()
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2)
    result = cluster.control.create_topic(
        "foo", topic_id="f", partitions=partitions, replication_factor=replication_factor
    )
    assert (result.response.error, result.records) == (error, ())


def test_a_replication_factor_above_the_active_brokers_says_so() -> None:
    cluster = Cluster()
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    reply = cluster.control.create_topic("foo", topic_id="f", replication_factor=3).response
    assert (
        reply.message
        == "Unable to replicate the partition 3 time(s): Replication factor: 3 larger than available brokers: 2."
    )


def test_no_active_broker_means_no_topic() -> None:
    # ReplicationControlManagerTest: "All brokers are currently fenced or in controlled shutdown."
    cluster = Cluster()
    cluster.register(0, 1)
    reply = cluster.control.create_topic("foo", topic_id="f").response
    assert reply.error is ErrorCode.INVALID_REPLICATION_FACTOR
    assert reply.message.endswith("All brokers are currently fenced or in controlled shutdown.")


@pytest.mark.parametrize(
    ("assignments", "partitions", "replication_factor", "error", "message"),
    [
        ([[0]], -1, 1, ErrorCode.INVALID_REQUEST, "but replication factor was not set to -1."),
        ([[0]], 1, -1, ErrorCode.INVALID_REQUEST, "but numPartitions was not set to -1."),
        ([[]], -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "includes an empty replica list."),
        (
            [[0, 9]],
            -1,
            -1,
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "includes broker 9, but no such broker is registered.",
        ),
        ([[1, 2, 2]], -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "includes the broker 2 more than once."),
        ([[0, 1], [2]], -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "which have 2 replica(s)."),
        ([[3]], -1, -1, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "are fenced or in controlled shutdown."),
    ],
)
def test_manual_assignments_are_validated_as_kafka_does(
    assignments: list[list[int]], partitions: int, replication_factor: int, error: ErrorCode, message: str
) -> None:
    # ReplicationControlManagerTest.testValidateBadManualPartitionAssignments and its neighbours.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2)
    reply = cluster.control.create_topic(
        "foo", topic_id="f", partitions=partitions, replication_factor=replication_factor, assignments=assignments
    ).response
    assert reply.error is error and reply.message.endswith(message), reply


def test_deleting_a_topic() -> None:
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    cluster.create("foo", [[0]])
    result = cluster.commit(cluster.control.delete_topic("foo"))
    assert result.records == (RemoveTopicRecord(topic_id="foo-id"),)
    assert result.events == (events.TopicDeleted(topic="foo", topic_id="foo-id"),)
    assert cluster.image.topic("foo") is None
    assert cluster.control.delete_topic("foo").response.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert cluster.commit(cluster.control.create_topic("foo", topic_id="foo-2")).response.error is ErrorCode.NONE


def test_altering_topic_configs_sets_and_removes_them_with_one_record_per_change() -> None:
    # ConfigurationControlManagerTest.testIncrementalAlterConfigs: SET and DELETE, records only for changes.
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    cluster.commit(cluster.control.create_topic("foo", topic_id="f", configs={"retention.ms": "1000"}))
    result = cluster.commit(
        cluster.control.alter_topic_configs("foo", {"min.insync.replicas": "2", "retention.ms": "1000"})
    )
    assert result.response.error is ErrorCode.NONE
    assert result.records == (ConfigRecord(topic="foo", name="min.insync.replicas", value="2"),)  # retention unchanged
    assert result.events == (events.TopicConfigsAltered(topic="foo", configs=(("min.insync.replicas", "2"),)),)
    result = cluster.commit(cluster.control.alter_topic_configs("foo", {}, ("retention.ms", "segment.ms")))
    assert result.records == (ConfigRecord(topic="foo", name="retention.ms", value=None),)  # segment.ms was not set
    topic = cluster.image.topic("foo")
    assert topic is not None and dict(topic.configs) == {"min.insync.replicas": "2"}
    assert cluster.control.alter_topic_configs("foo", {"min.insync.replicas": "2"}).records == ()


@pytest.mark.parametrize(
    ("topic", "set_configs", "delete_configs", "error", "message"),
    [
        ("bar", {"retention.ms": "1"}, (), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as bar"),
        ("foo", {"retention.ms": "1"}, ("retention.ms",), ErrorCode.INVALID_REQUEST, "Duplicate config keys"),
        ("foo", {"no.such.config": "1"}, (), ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
        ("foo", {}, ("no.such.config",), ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
        ("foo", {"min.insync.replicas": "0"}, (), ErrorCode.INVALID_CONFIG, "Invalid value 0 for configuration"),
        ("foo", {"retention.ms": "soon"}, (), ErrorCode.INVALID_CONFIG, "Invalid value soon for configuration"),
    ],
)
def test_a_bad_config_alteration_is_refused_and_writes_nothing(
    topic: str, set_configs: dict[str, str], delete_configs: tuple[str, ...], error: ErrorCode, message: str
) -> None:
    cluster = Cluster()
    cluster.register(0)
    cluster.unfence(0)
    cluster.commit(cluster.control.create_topic("foo", topic_id="f"))
    result = cluster.control.alter_topic_configs(topic, set_configs, delete_configs)
    assert (result.response.error, result.records) == (error, ())
    assert result.response.message.startswith(message)
    validated = cluster.control.alter_topic_configs("foo", {"retention.ms": "5"}, validate_only=True)
    assert (validated.response.error, validated.records) == (ErrorCode.NONE, ())


def test_create_partitions_answers_as_kafka() -> None:
    # ReplicationControlManagerTest.testCreatePartitions (its error answers).
    cluster = Cluster()
    cluster.register(0, 1, 3)
    cluster.unfence(0, 1, 3)
    for name, count in (("foo", 3), ("bar", 4), ("quux", 2)):
        cluster.commit(cluster.control.create_topic(name, topic_id=name, partitions=count, replication_factor=2))
    assert cluster.commit(cluster.control.create_partitions("foo", 5)).response.error is ErrorCode.NONE
    assert len(cluster.image.topics["foo"].partitions) == 5
    assert cluster.control.create_partitions("bar", 3).response.message == (
        "The topic bar currently has 4 partition(s); 3 would not be an increase."
    )
    assert cluster.control.create_partitions("baz", 3).response.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (
        cluster.control.create_partitions("quux", 2).response == cluster.control.create_partitions("quux", 2).response
    )
    assert cluster.control.create_partitions("quux", 2).response.message == "Topic already has 2 partition(s)."
    assert cluster.control.create_partitions("bar", 5, [[1]]).response.message.endswith(
        "but this is not consistent with previous partitions, which have 2 replica(s)."
    )
    assert cluster.control.create_partitions("quux", 4, [[1, 0]]).response.message == (
        "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    )
    assert cluster.control.create_partitions("foo", 6, [[2, 0]]).response.message == (
        "The manual partition assignment includes broker 2, but no such broker is registered."
    )


def test_create_partitions_with_a_manual_assignment_needs_an_active_replica() -> None:
    # ReplicationControlManagerTest.testCreatePartitionsFailsWithManualAssignmentWithAllFenced.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4, 5)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    refused = cluster.control.create_partitions("foo", 2, [[3, 4, 5]])
    assert refused.response.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    cluster.commit(cluster.control.create_partitions("foo", 2, [[2, 4, 5]]))
    assert cluster.partition("foo", 1) == PartitionRegistration(
        replicas=(2, 4, 5), isr=(2,), elr=(), last_known_elr=(), leader=2, leader_epoch=0, partition_epoch=0
    )


def test_new_partitions_continue_the_leaders_rotation() -> None:
    # AddPartitionsTest.testReplicaPlacementAllServers: brokers 0-3, partition 0 = [2, 3, 0, 1], grown to 7.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2, 3)
    cluster.create("foo", [[2, 3, 0, 1]])
    cluster.commit(cluster.control.create_partitions("foo", 7))
    leaders = [cluster.partition("foo", p).leader for p in range(1, 7)]
    assert leaders == [3, 0, 1, 2, 3, 0]


# -- AlterPartition -------------------------------------------------------------------------------------------


def balance_partition_leaders_cluster() -> Cluster:
    """ReplicationControlManagerTest.testBalancePartitionLeaders: brokers 0-4, 2-4 unfenced, then 1 unfenced."""
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(2, 3, 4)
    cluster.create("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    cluster.unfence(1)
    return cluster


def test_alter_partition_expands_the_isr_and_bumps_only_the_partition_epoch() -> None:
    # ReplicationControlManagerTest.testBalancePartitionLeaders: AlterPartition(broker 2, p0, pe 0, le 0,
    # ISR [1, 2, 3]) -> leader 2, le 0, ISR [1, 2, 3], pe 1, NONE.
    cluster = balance_partition_leaders_cluster()
    result = cluster.commit(cluster.control.alter_partition(cluster.request("foo", 0, [1, 2, 3])))
    assert result.response == AlterPartitionResponse(
        topic="foo", partition=0, error=ErrorCode.NONE, leader=2, leader_epoch=0, isr=(1, 2, 3), partition_epoch=1
    )
    assert result.records == (PartitionChangeRecord(topic_id="foo-id", partition=0, isr=(1, 2, 3)),)
    assert [type(e) for e in result.events] == [events.PartitionChanged, events.AlterPartitionAnswered]
    assert result.events[0].reason == "isr_expand"
    assert result.events[1] == events.AlterPartitionAnswered(
        topic="foo", partition=0, leader=2, leader_epoch=0, partition_epoch=1, proposed_isr=(1, 2, 3), error="NONE"
    )


def test_shrink_and_expand_the_isr() -> None:
    # ReplicationControlManagerTest.testShrinkAndExpandIsr: each change bumps the partition epoch only.
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    shrunk = cluster.alter("foo", 0, [0, 1])
    assert (shrunk.error, shrunk.isr, shrunk.leader_epoch, shrunk.partition_epoch) == (ErrorCode.NONE, (0, 1), 0, 1)
    expanded = cluster.alter("foo", 0, [0, 1, 2])
    assert (expanded.isr, expanded.leader_epoch, expanded.partition_epoch) == ((0, 1, 2), 0, 2)
    assert [e.reason for e in cluster.events_of(events.PartitionChanged)][-2:] == ["isr_shrink", "isr_expand"]


def test_the_same_isr_again_changes_nothing() -> None:
    cluster = Cluster()
    cluster.register(0, 1)
    cluster.unfence(0, 1)
    cluster.create("foo", [[0, 1]])
    result = cluster.commit(cluster.control.alter_partition(cluster.request("foo", 0, [0, 1])))
    assert (result.response.error, result.response.partition_epoch, result.records) == (ErrorCode.NONE, 0, ())


def test_alter_partition_checks_in_kafkas_order() -> None:
    """Each row breaks one check and every later one it can, so the earliest broken check must answer."""
    cluster = Cluster()
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2, 3)
    cluster.create("foo", [[0, 1, 2]])
    cluster.fence(0)  # leader 1, leader epoch 1, partition epoch 1
    cluster.unfence(0)
    cluster.alter("foo", 0, [1, 2, 0])  # partition epoch 2
    good = cluster.request("foo", 0, [1, 2, 0])
    assert (good.leader_epoch, good.partition_epoch) == (1, 2)
    bad_isr, member_epochs = (1, 1, 7), (-1, -1, -1)

    def answer(**fields: object) -> ErrorCode:
        values = {f: getattr(good, f) for f in AlterPartitionRequest.model_fields} | fields
        request = AlterPartitionRequest(**values)  # type: ignore[arg-type]
        assert (
            cluster.control.alter_partition_error(request)
            is cluster.control.alter_partition(request).response.error_code
        )
        return cluster.control.alter_partition_error(request)

    not_leader = {"broker_id": 2, "broker_epoch": cluster.epochs[2]}
    bad = {"new_isr": bad_isr, "new_isr_broker_epochs": member_epochs}
    assert answer(broker_epoch=99, partition=5) is ErrorCode.STALE_BROKER_EPOCH
    assert answer(partition=5) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert answer(leader_epoch=2, partition_epoch=0, **not_leader, **bad) is ErrorCode.NOT_CONTROLLER
    assert answer(partition_epoch=3, **not_leader, **bad) is ErrorCode.NOT_CONTROLLER
    assert answer(leader_epoch=0, partition_epoch=0, **not_leader, **bad) is ErrorCode.FENCED_LEADER_EPOCH
    assert answer(partition_epoch=1, **not_leader) is ErrorCode.INVALID_REQUEST
    assert answer(partition_epoch=1, **bad) is ErrorCode.INVALID_UPDATE_VERSION
    assert answer(new_isr=(1, 1, 2), new_isr_broker_epochs=(-1, -1, -1)) is ErrorCode.INVALID_REQUEST
    assert answer(new_isr=(1, 3), new_isr_broker_epochs=(-1, 99)) is ErrorCode.INVALID_REQUEST  # 3 not a replica
    assert answer(new_isr=(2, 0), new_isr_broker_epochs=(99, -1)) is ErrorCode.INVALID_REQUEST  # without leader 1
    assert answer(new_isr=(1, 2), new_isr_broker_epochs=(-1,)) is ErrorCode.INVALID_REQUEST
    assert answer(new_isr=(1, 2, 0), new_isr_broker_epochs=(-1, 99, -1)) is ErrorCode.INELIGIBLE_REPLICA
    assert answer(new_isr=(1, 2, 0), new_isr_broker_epochs=(-1, cluster.epochs[2], -1)) is ErrorCode.NONE


@pytest.mark.parametrize("how", ["fenced", "shutting_down", "unregistered"])
def test_an_inactive_isr_member_is_ineligible(how: str) -> None:
    # ReplicationControlManager.ineligibleReplicasForIsr: not registered, shutting down, fenced.
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    cluster.alter("foo", 0, [0, 1])
    if how == "fenced":
        cluster.fence(2)
    elif how == "shutting_down":
        cluster.create("bar", [[2, 0]])
        cluster.shut_down(2)
    else:
        cluster.commit(cluster.control.unregister_broker(2))
    result = cluster.commit(cluster.control.alter_partition(cluster.request("foo", 0, [0, 1, 2])))
    assert (result.response.error, result.records) == (ErrorCode.INELIGIBLE_REPLICA, ())
    assert result.events == (
        events.AlterPartitionAnswered(
            topic="foo",
            partition=0,
            leader=0,
            leader_epoch=0,
            partition_epoch=1,
            proposed_isr=(0, 1, 2),
            error="INELIGIBLE_REPLICA",
        ),
    )


def test_invalid_alter_partition_requests() -> None:
    # ReplicationControlManagerTest.testInvalidAlterPartitionRequests (those Hightide's request can express).
    cluster = Cluster()
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]])
    control = cluster.control
    valid = cluster.request("foo", 0, [0, 1])
    assert control.alter_partition_error(cluster.request("foo", 0, [0, 1], sender=1)) is ErrorCode.INVALID_REQUEST
    stale_epoch = AlterPartitionRequest(**{**vars_of(valid), "broker_epoch": valid.broker_epoch - 1})
    assert control.alter_partition_error(stale_epoch) is ErrorCode.STALE_BROKER_EPOCH
    assert control.alter_partition_error(replace_request(valid, leader_epoch=500)) is ErrorCode.NOT_CONTROLLER
    assert control.alter_partition_error(replace_request(valid, partition_epoch=500)) is ErrorCode.NOT_CONTROLLER
    bad_member = replace_request(valid, new_isr=(0, 1, 3), new_isr_broker_epochs=(-1, -1, -1))
    assert control.alter_partition_error(bad_member) is ErrorCode.INVALID_REQUEST
    no_leader = replace_request(valid, new_isr=(1, 2), new_isr_broker_epochs=(-1, -1))
    assert control.alter_partition_error(no_leader) is ErrorCode.INVALID_REQUEST


def vars_of(request: AlterPartitionRequest) -> dict[str, object]:
    return {f: getattr(request, f) for f in AlterPartitionRequest.model_fields}


def replace_request(request: AlterPartitionRequest, **fields: object) -> AlterPartitionRequest:
    return AlterPartitionRequest(**{**vars_of(request), **fields})  # type: ignore[arg-type]


# -- the partition change builder: PartitionChangeBuilderTest -------------------------------------------------


def test_elect_leader() -> None:
    # PartitionChangeBuilderTest.testElectLeader (FOO: replicas [2, 1, 3], ISR all, leader 1, 3 not acceptable).
    assert elected(FOO, Election.PREFERRED) == (2, False)
    assert elected(FOO, Election.ONLINE) == (1, False)
    assert elected(FOO, Election.UNCLEAN) == (1, False)
    assert elected(FOO, Election.ONLINE, target_isr=[1, 3]) == (1, False)
    assert elected(FOO, Election.UNCLEAN, target_isr=[1, 3]) == (1, False)
    assert elected(FOO, Election.ONLINE, target_isr=[3]) == (NO_LEADER, False)
    assert elected(FOO, Election.UNCLEAN, target_isr=[3]) == (2, True)
    foo_with_4 = registration([2, 1, 3, 4], [2, 1, 3], 1)
    assert elected(foo_with_4, Election.UNCLEAN, target_isr=[4]) == (4, False)
    # BAZ: replicas [2, 1, 3], ISR [1, 3], leader 3, everyone acceptable.
    for election in Election:
        assert elect_leader(
            BAZ,
            target_isr=BAZ.isr,
            target_elr=(),
            is_acceptable_leader=lambda _: True,
            election=election,
            elr_enabled=False,
        ) == (3, False)


@pytest.mark.parametrize("elr", [False, True])
def test_no_change(elr: bool) -> None:
    # PartitionChangeBuilderTest.testNoChange.
    assert change(FOO, not_acceptable={3}, elr=elr) is None
    assert change(FOO, not_acceptable={3}, elr=elr, election=Election.UNCLEAN) is None
    assert change(BAZ, elr=elr, election=Election.PREFERRED) is None


@pytest.mark.parametrize("elr", [False, True])
def test_isr_change_doesnt_bump_leader_epoch(elr: bool) -> None:
    # PartitionChangeBuilderTest.testIsrChangeDoesntBumpLeaderEpoch: the record sets the ISR only.
    record = change(FOO, not_acceptable={3}, elr=elr, target_isr=[2, 1])
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(2, 1))


@pytest.mark.parametrize("elr", [False, True])
def test_isr_change_and_leader_change(elr: bool) -> None:
    # PartitionChangeBuilderTest.testIsrChangeAndLeaderChange.
    record = change(FOO, not_acceptable={3}, elr=elr, target_isr=[2, 3])
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(2, 3), leader=2)


@pytest.mark.parametrize("elr", [False, True])
def test_unclean_leader_election(elr: bool) -> None:
    # PartitionChangeBuilderTest.testUncleanLeaderElection (less the leader recovery state).
    record = change(FOO, not_acceptable={3}, elr=elr, election=Election.UNCLEAN, target_isr=[3])
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(2,), leader=2)


def test_unclean_election_clears_the_elr() -> None:
    # PartitionChangeBuilderTest.testUncleanLeaderElection, OFFLINE_WITH_ELR: ISR [], ELR [3], LKE [2], only 1 ok.
    expected = PartitionChangeRecord(topic_id="t", partition=0, isr=(1,), leader=1, elr=(), last_known_elr=())
    assert change(OFFLINE_WITH_ELR, {1}, elr=True, election=Election.UNCLEAN) == expected
    assert change(OFFLINE_WITH_ELR, {1}, elr=True, election=Election.UNCLEAN, target_isr=[2]) == expected


def test_elr_isr_shrink_below_min_isr() -> None:
    # PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrShrinkBelowMinISR.
    partition = registration([1, 2, 3, 4], [1, 2, 3, 4], 1)
    record = change(partition, not_acceptable={3}, min_isr=3, elr=True, election=Election.PREFERRED, target_isr=[1, 2])
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(1, 2), elr=(3, 4))


def test_elr_isr_expand_above_min_isr() -> None:
    # PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrExpandAboveMinISR.
    partition = registration([1, 2, 3, 4], [1, 2], 1, elr=[3], last_known_elr=[4])
    record = change(
        partition, not_acceptable={3}, min_isr=3, elr=True, election=Election.PREFERRED, target_isr=[1, 2, 3]
    )
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(1, 2, 3), elr=(), last_known_elr=())


def test_elr_can_be_elected() -> None:
    # PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElrCanBeElected (last known leader mode).
    partition = registration([1, 2, 3, 4], [1], 1, elr=[3])
    record = change(partition, not_acceptable={1}, min_isr=3, elr=True, election=Election.PREFERRED, target_isr=[])
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(3,), elr=(1,), leader=3)


def test_isr_can_shrink_to_zero_with_elr() -> None:
    # PartitionChangeBuilderTest.testEligibleLeaderReplicas_IsrCanShrinkToZero (last known leader mode).
    partition = registration([1, 2, 3, 4], [1, 2, 3, 4], 1)
    record = change(partition, set(), min_isr=3, elr=True, election=Election.PREFERRED, target_isr=[])
    assert record == PartitionChangeRecord(
        topic_id="t", partition=0, isr=(), leader=NO_LEADER, elr=(1, 2, 3, 4), last_known_elr=(1,)
    )
    offline = partition.merge(record)
    again = change(offline, set(), min_isr=3, elr=True, election=Election.PREFERRED, unclean_shutdown=frozenset({2}))
    assert again == PartitionChangeRecord(topic_id="t", partition=0, elr=(1, 3, 4))  # the last known ELR stays


def test_elect_last_known_leader() -> None:
    # PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElectLastKnownLeader (less RECOVERING).
    partition = registration([1, 2, 3, 4], [], NO_LEADER, last_known_elr=[1])
    record = change(partition, min_isr=3, elr=True, election=Election.PREFERRED, target_isr=[])
    assert record == PartitionChangeRecord(topic_id="t", partition=0, isr=(1,), leader=1, last_known_elr=())


def test_a_last_known_leader_election_says_so_and_an_unclean_one_does_not() -> None:
    # The audit must tell KIP-966's balanced recovery (Kafka's default) from an unclean election.
    partition = registration([1, 2, 3, 4], [], NO_LEADER, last_known_elr=[1])
    recovered = build_partition_change(
        partition, topic_id="t", partition_id=0, is_acceptable_leader=lambda r: True, min_isr=3,
        elr_enabled=True, election=Election.PREFERRED, target_isr=[],
    )  # fmt: skip
    assert recovered is not None and recovered.from_last_known_leader and recovered.unclean
    unclean = build_partition_change(
        registration([1, 2, 3], [3], 3), topic_id="t", partition_id=0, is_acceptable_leader=lambda r: r != 3,
        min_isr=1, elr_enabled=False, election=Election.UNCLEAN, target_isr=[3],
    )  # fmt: skip
    assert unclean is not None and unclean.unclean and not unclean.from_last_known_leader


def test_elect_last_known_leader_should_fail_while_an_elr_member_is_left() -> None:
    # PartitionChangeBuilderTest.testEligibleLeaderReplicas_ElectLastKnownLeaderShouldFail.
    partition = registration([1, 2, 3, 4], [], NO_LEADER, elr=[3], last_known_elr=[1])
    assert change(partition, not_acceptable={3}, min_isr=3, elr=True, election=Election.PREFERRED) is None


def test_a_fenced_last_known_leader_is_not_elected() -> None:
    # KAFKA-19522 (Kafka 4.1): Kafka 4.0 elected the last known leader even when it was not acceptable.
    partition = registration([1, 2, 3, 4], [], NO_LEADER, last_known_elr=[1])
    assert change(partition, not_acceptable={1}, min_isr=3, elr=True, election=Election.UNCLEAN) is not None
    assert change(partition, not_acceptable={1}, min_isr=3, elr=True) is None


# -- elections through the controller: ReplicationControlManagerTest ------------------------------------------


def test_elect_unclean_leaders() -> None:
    # ReplicationControlManagerTest.testElectUncleanLeaders.
    cluster = Cluster(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(0, 1, 2, 3, 4)
    cluster.create("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    cluster.fence(2, 3)
    cluster.fence(1, 2, 3)
    assert [cluster.leader_and_isr("foo", p) for p in range(3)] == [(NO_LEADER, (1,)), (4, (4,)), (0, (0,))]
    partitions = [("foo", 0), ("foo", 1), ("foo", 2)]
    first = cluster.commit(cluster.control.elect_leaders(ElectionType.UNCLEAN, partitions))
    assert first.records == ()
    assert [r.error for r in first.response] == [
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.ELECTION_NOT_NEEDED,
    ]
    cluster.unfence(2)
    cluster.alter("foo", 1, [2, 4])
    second = cluster.commit(cluster.control.elect_leaders(ElectionType.UNCLEAN, partitions))
    assert second.records == (PartitionChangeRecord(topic_id="foo-id", partition=0, leader=2, isr=(2,)),)
    assert [r.error for r in second.response] == [
        ErrorCode.NONE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.ELECTION_NOT_NEEDED,
    ]
    assert [cluster.leader_and_isr("foo", p) for p in range(3)] == [(2, (2,)), (4, (2, 4)), (0, (0,))]
    assert cluster.events_of(events.LeaderElected)[-1].election == "unclean"


def test_electing_every_partition_leaves_out_those_not_needing_it() -> None:
    # ReplicationControlManager.electLeaders with topicPartitions null.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(0, 1, 2, 3, 4)
    cluster.create("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    cluster.fence(2, 3)
    cluster.fence(1, 2, 3)
    every = cluster.commit(cluster.control.elect_leaders(ElectionType.UNCLEAN))
    assert [(r.topic, r.partition, r.error) for r in every.response] == [
        ("foo", 0, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
    ]


def test_preferred_election_does_not_trigger_unclean_election() -> None:
    # ReplicationControlManagerTest.testPreferredElectionDoesNotTriggerUncleanElection (the topic allows
    # unclean elections from its creation here).
    cluster = Cluster(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(1, 2, 3, 4)
    cluster.unfence(1, 2, 3, 4)
    cluster.create("foo", [[1, 2, 3]])
    cluster.fence(2, 3)
    cluster.fence(1, 2, 3)
    cluster.unfence(2)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (1,))
    result = cluster.commit(cluster.control.elect_leaders("preferred", [("foo", 0)]))
    assert result.records == ()
    assert result.response[0].error is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def test_elect_preferred_leaders() -> None:
    # ReplicationControlManagerTest.testElectPreferredLeaders.
    cluster = Cluster()
    cluster.register(0, 1, 2, 3, 4)
    cluster.unfence(1, 2, 3, 4)
    cluster.create("other", [[1, 2]])
    cluster.shut_down(1)  # Kafka's test leaves broker 1 in controlled shutdown; here it goes all the way
    assert cluster.shut_down(1).response.should_shut_down
    cluster.create("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    request = [("foo", 0), ("foo", 1), ("foo", 2), ("bar", 0), ("bar", 1)]
    first = cluster.commit(cluster.control.elect_leaders(ElectionType.PREFERRED, request))
    assert [(r.error, r.message) for r in first.response] == [
        (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ""),
        (ErrorCode.ELECTION_NOT_NEEDED, ""),
        (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ""),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as bar"),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as bar"),
    ]
    assert first.records == ()
    cluster.register(1)  # broker 1 must register again after its shutdown
    cluster.unfence(0, 1)
    assert cluster.alter("foo", 0, [1, 2, 3]) == AlterPartitionResponse(
        topic="foo", partition=0, error=ErrorCode.NONE, leader=2, leader_epoch=0, isr=(1, 2, 3), partition_epoch=1
    )
    assert cluster.alter("foo", 2, [0, 2, 1]).partition_epoch == 1
    second = cluster.commit(cluster.control.elect_leaders(ElectionType.PREFERRED, request))
    assert [r.error for r in second.response][:3] == [ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.NONE]
    assert second.records == (
        PartitionChangeRecord(topic_id="foo-id", partition=0, leader=1),
        PartitionChangeRecord(topic_id="foo-id", partition=2, leader=0),
    )
    assert {e.election for e in second.events if isinstance(e, events.LeaderElected)} == {"preferred"}


# -- auto leader rebalance ------------------------------------------------------------------------------------


def test_balance_partition_leaders() -> None:
    # ReplicationControlManagerTest.testBalancePartitionLeaders.
    cluster = balance_partition_leaders_cluster()
    cluster.alter("foo", 0, [1, 2, 3])
    first = cluster.commit(cluster.control.auto_leader_rebalance())
    assert first.records == (PartitionChangeRecord(topic_id="foo-id", partition=0, leader=1),)
    assert first.response.elected == (TopicPartition("foo", 0),) and not first.response.more
    assert cluster.image.imbalanced_partitions() == (TopicPartition("foo", 2),)
    cluster.unfence(0)
    assert cluster.alter("foo", 2, [0, 2, 1]).partition_epoch == 1
    second = cluster.commit(cluster.control.auto_leader_rebalance())
    assert second.records == (PartitionChangeRecord(topic_id="foo-id", partition=2, leader=0),)
    assert cluster.image.imbalanced_partitions() == ()


def imbalance_image(led_elsewhere: int) -> MetadataImage:
    """Ten partitions preferring broker 0 (ISR [0, 1]), the first `led_elsewhere` of them led by broker 1."""
    records: list[MetadataRecord] = []
    for broker_id in (0, 1):
        records.append(
            RegisterBrokerRecord(
                broker_id=broker_id, broker_epoch=broker_id, incarnation_id=str(broker_id), previous_broker_epoch=-1
            )
        )
    records += [BrokerRegistrationChangeRecord(broker_id=b, broker_epoch=b, fenced=False) for b in (0, 1)]
    records.append(TopicRecord(name="t", topic_id="t"))
    for partition in range(10):
        leader = 1 if partition < led_elsewhere else 0
        records.append(PartitionRecord(topic_id="t", partition=partition, replicas=(0, 1), isr=(0, 1), leader=leader))
    return MetadataImage().apply_all(records)


def test_the_imbalance_must_exceed_the_percentage() -> None:
    # KafkaController.checkAndTriggerAutoLeaderRebalance: 1 of 10 (10%) is not above 10%; 2 of 10 is.
    assert preferred_elections_due(imbalance_image(1), 10) == ()
    assert preferred_elections_due(imbalance_image(2), 10) == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert preferred_elections_due(imbalance_image(1), 0) == (TopicPartition("t", 0),)  # KRaft: any imbalance


def test_the_rebalance_is_capped_per_run_and_can_be_disabled() -> None:
    control = ReplicationControl(ControllerConfig(max_elections_per_imbalance=1), imbalance_image(3))
    result = control.auto_leader_rebalance()
    assert result.response.elected == (TopicPartition("t", 0),) and result.response.more
    control.apply(result.records)
    disabled = ReplicationControl(ControllerConfig(auto_leader_rebalance_enable=False), imbalance_image(3))
    assert disabled.auto_leader_rebalance().records == ()


# -- ELR (KIP-966) through the controller -----------------------------------------------------------------------


def test_elr_shrink_and_expand_isr() -> None:
    # ReplicationControlManagerTest.testEligibleLeaderReplicas_ShrinkAndExpandIsr (min ISR 2 from creation).
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]], min_insync_replicas="2")
    cluster.alter("foo", 0, [0])
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((1, 2), ())
    cluster.alter("foo", 0, [0, 1])
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((), ())


def test_elr_broker_fence() -> None:
    # ReplicationControlManagerTest.testEligibleLeaderReplicas_BrokerFence.
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2, 3)
    cluster.create("foo", [[0, 1, 2, 3]], min_insync_replicas="3")
    cluster.fence(2, 3)
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((3,), ())
    cluster.fence(1, 2, 3)
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((1, 3), ())
    cluster.unfence(1, 2, 3)
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((1, 3), ())


def test_elr_effective_min_isr_is_at_most_the_replication_factor() -> None:
    # ReplicationControlManagerTest.testEligibleLeaderReplicas_EffectiveMinIsr: min ISR 5, RF 3 -> 3.
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[0, 1, 2]], min_insync_replicas="5")
    cluster.alter("foo", 0, [0, 1])
    assert cluster.partition("foo").elr == (2,)


def test_elr_clean_election() -> None:
    # ReplicationControlManagerTest.testEligibleLeaderReplicas_CleanElection.
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2, 3)
    cluster.create("foo", [[0, 1, 2, 3]], min_insync_replicas="3")
    cluster.fence(1, 2, 3)
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((2, 3), ())
    cluster.unfence(2)
    cluster.fence(0, 1)
    partition = cluster.partition("foo")
    assert (partition.elr, partition.isr, partition.leader, partition.last_known_elr) == ((0, 3), (2,), 2, ())
    assert cluster.events_of(events.LeaderElected)[-1].election == "elr"


def test_elr_unclean_shutdown() -> None:
    # ReplicationControlManagerTest.testEligibleLeaderReplicas_UncleanShutdown, through re-registration.
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(0, 1, 2, 3)
    cluster.unfence(0, 1, 2, 3)
    cluster.create("foo", [[0, 1, 2, 3]], min_insync_replicas="3")
    cluster.fence(1, 2, 3)
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((2, 3), ())
    cluster.register(3, clean=False)  # an unclean shutdown ELR member is kicked out of the ELR
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((2,), ())
    cluster.now_ms += SESSION_MS + 1  # broker 0 restarts uncleanly before its session was noticed to end
    cluster.register(0, clean=False)  # the last ISR member becomes the last known leader
    partition = cluster.partition("foo")
    assert (partition.elr, partition.last_known_elr, partition.isr, partition.leader) == ((2,), (0,), (), NO_LEADER)
    assert cluster.events_of(events.PartitionChanged)[-1].reason == "unclean_shutdown"


def test_kip_966_clean_recovery_walkthrough() -> None:
    # reliability.md 5.3 (Vanlightly 5.2.2): RF 3, min ISR 2, L=1. r2 out, r3 out, r1 unclean shutdown.
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(1, 2, 3)
    cluster.unfence(1, 2, 3)
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="2")
    cluster.alter("foo", 0, [1, 3])
    assert (cluster.partition("foo").isr, cluster.partition("foo").elr) == ((1, 3), ())
    cluster.alter("foo", 0, [1])
    assert (cluster.partition("foo").isr, cluster.partition("foo").elr) == ((1,), (3,))
    cluster.fence(1)  # r1 dies: 3 is elected from the ELR; 1 stays eligible until it is known to have lost data
    assert cluster.leader_and_isr("foo") == (3, (3,))
    assert cluster.partition("foo").elr == (1,)
    cluster.register(1, clean=False)  # r1 re-registers after an unclean shutdown: out of the ELR
    assert (cluster.leader_and_isr("foo"), cluster.partition("foo").elr) == ((3, (3,)), ())
    cluster.unfence(1)
    cluster.alter("foo", 0, [3, 1])  # r1 catches up
    assert cluster.leader_and_isr("foo") == (3, (3, 1))


def test_kafkas_elr_system_test() -> None:
    # reliability.md 5.5 (eligible_leader_replicas_test.py): RF 3, min ISR 2; cleanly stop both followers, hard
    # kill the leader; the cleanly stopped replicas come back and one of them is elected from the ELR.
    cluster = Cluster(eligible_leader_replicas_enable=True)
    cluster.register(0, 1, 2, 3, 4, 5)
    cluster.unfence(0, 1, 2, 3, 4, 5)
    cluster.create("foo", [[0, 1, 2]], min_insync_replicas="2")
    for follower in (1, 2):
        cluster.shut_down(follower)
        assert cluster.shut_down(follower).response.should_shut_down
    # 1 left while the ISR [0, 2] still had min ISR members; 2 left it below min ISR and so stays eligible.
    assert (cluster.partition("foo").isr, cluster.partition("foo").elr) == ((0,), (2,))
    cluster.fence(0, 1, 2)  # hard kill of the last ISR member: its session ends
    partition = cluster.partition("foo")
    assert (partition.leader, partition.isr, partition.elr, partition.last_known_elr) == (NO_LEADER, (), (0, 2), (0,))
    cluster.register(1, 2)  # clean restarts: previous broker epoch = their last registration
    cluster.unfence(1, 2)
    assert cluster.leader_and_isr("foo") == (2, (2,))
    assert (cluster.partition("foo").elr, cluster.partition("foo").last_known_elr) == ((0,), ())


def test_last_replica_standing_without_elr() -> None:
    # reliability.md 5.1 (KIP-966's motivation): without ELR the last ISR member is re-elected after an unclean
    # shutdown, even though it may have lost committed records.
    cluster = Cluster(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.register(0, 1, 2)
    cluster.unfence(0, 1, 2)
    cluster.create("foo", [[2, 0, 1]], min_insync_replicas="2")
    cluster.alter("foo", 0, [2, 0])
    cluster.alter("foo", 0, [2])
    cluster.fence(2)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (2,))
    cluster.register(2, clean=False)
    cluster.unfence(2)
    assert cluster.leader_and_isr("foo") == (2, (2,))


# -- the invariant checkers can fail ----------------------------------------------------------------------------


def broken_image(partition: PartitionRecord, *, fence_broker_1: bool = False) -> MetadataImage:
    records: list[MetadataRecord] = []
    for broker_id in (0, 1, 2):
        records.append(
            RegisterBrokerRecord(
                broker_id=broker_id, broker_epoch=broker_id, incarnation_id=str(broker_id), previous_broker_epoch=-1
            )
        )
        if not (fence_broker_1 and broker_id == 1):
            records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_id, fenced=False))
    return MetadataImage().apply_all([*records, TopicRecord(name="t", topic_id="t"), partition])


@pytest.mark.parametrize(
    ("isr", "elr", "leader", "elr_enabled", "fence_broker_1", "complaint"),
    [
        ((0, 1), (), 2, False, False, "leader 2 is not in ISR"),
        ((0, 5), (), 0, False, False, "is not within replicas"),
        ((0, 0), (), 0, False, False, "repeats a broker"),
        ((), (), NO_LEADER, False, False, "the ISR is empty with ELR disabled"),
        ((0,), (0,), 0, True, False, "share [0]"),
        ((0,), (1,), 0, False, False, "with ELR disabled"),
        ((0, 1, 2), (1,), 0, True, False, "reaches min ISR"),
        ((1, 0), (), 1, False, True, "leader 1 is not an active broker"),
        ((0, 1), (), 0, False, True, "holds inactive brokers [1]"),
    ],
)
def test_the_image_checker_catches_a_violating_image(
    isr: tuple[int, ...], elr: tuple[int, ...], leader: int, elr_enabled: bool, fence_broker_1: bool, complaint: str
) -> None:
    record = PartitionRecord(topic_id="t", partition=0, replicas=(0, 1, 2), isr=isr, elr=elr, leader=leader)
    image = broken_image(record, fence_broker_1=fence_broker_1)
    config = ControllerConfig(eligible_leader_replicas_enable=elr_enabled, min_insync_replicas=2)
    violations = image_violations(image, config)
    assert any(complaint in v for v in violations), violations


def test_the_image_checker_passes_a_sound_image() -> None:
    record = PartitionRecord(topic_id="t", partition=0, replicas=(0, 1, 2), isr=(1,), leader=NO_LEADER)
    legacy = ControllerConfig(eligible_leader_replicas_enable=False)  # the fenced last ISR member is kept
    assert image_violations(broken_image(record, fence_broker_1=True), legacy) == []


def test_the_change_checker_catches_bad_epochs() -> None:
    before = registration([1, 2], [1, 2], 1)
    good = before.merge(PartitionChangeRecord(topic_id="t", partition=0, leader=2, isr=(2,)))
    assert change_violations(before, good) == []
    same_leader_new_epoch = PartitionRegistration(
        replicas=(1, 2), isr=(1,), elr=(), last_known_elr=(), leader=1, leader_epoch=101, partition_epoch=201
    )
    assert change_violations(before, same_leader_new_epoch) == ["leader 1 -> 1 moved the leader epoch 100 -> 101"]
    no_bump = PartitionRegistration(
        replicas=(1, 2), isr=(1,), elr=(), last_known_elr=(), leader=1, leader_epoch=100, partition_epoch=200
    )
    assert change_violations(before, no_bump) == ["partition epoch 200 -> 200"]
    assert partition_violations(no_bump, min_isr=1, elr_enabled=False) == []


def test_producer_ids_are_never_handed_out_twice_even_across_a_controller_failover() -> None:
    """Given a controller that handed out producer ids 0 and 1, when a new controller replays the metadata log and
    hands out one more, then it is 2, and each allocation reported its range."""
    cluster = Cluster()
    first = cluster.commit(cluster.control.allocate_producer_ids()).response
    second = cluster.commit(cluster.control.allocate_producer_ids()).response
    successor = ReplicationControl(ControllerConfig(), MetadataImage().apply_all(cluster.records))
    third = successor.allocate_producer_ids()
    assert (first, second, third.response) == (0, 1, 2)
    assert [(e.first_producer_id, e.next_producer_id) for e in cluster.events] == [(0, 1), (1, 2)]
    assert third.events == (events.ProducerIdsAllocated(first_producer_id=2, next_producer_id=3),)


# -- offline replicas (KIP-858, by partition) ---------------------------------------------------------------------
# Kafka's handleDirectoriesOffline: a broker's heartbeat names the replicas its storage refused; each leaves its ISR
# and ELR, loses its leadership, and stays ineligible until the broker registers again.


def offline(cluster: Cluster, broker_id: int, *partitions: tuple[str, int]) -> ControllerResult[Any]:
    reported = [TopicPartition(topic, partition) for topic, partition in partitions]
    result = cluster.control.heartbeat(broker_id, cluster.epochs[broker_id], cluster.now_ms, offline_replicas=reported)
    return cluster.commit(result)


def three_brokers(**settings: int | bool) -> Cluster:
    cluster = Cluster(**settings)
    cluster.register(1, 2, 3)
    cluster.unfence(1, 2, 3)
    return cluster


def test_a_leader_whose_replica_goes_offline_hands_leadership_to_the_next_isr_member() -> None:
    """Given foo-0 on [1, 2, 3] led by 1 and bar-0 also led by 1, when broker 1 reports foo-0 offline, then 2 leads
    foo-0 with ISR [2, 3], the offline replica is recorded in broker 1's registration, and bar-0 is untouched."""
    cluster = three_brokers()
    cluster.create("foo", [[1, 2, 3]])
    cluster.create("bar", [[1, 2, 3]])
    result = offline(cluster, 1, ("foo", 0))
    assert cluster.leader_and_isr("foo") == (2, (2, 3))
    assert cluster.leader_and_isr("bar") == (1, (1, 2, 3))
    assert cluster.image.offline_replicas("foo", 0) == (1,)
    assert cluster.image.offline_replicas("bar", 0) == ()
    assert result.records[0] == BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=cluster.epochs[1], offline_replicas=(("foo-id", 0),)
    )
    assert result.events == (
        events.ReplicaMarkedOffline(topic="foo", partition=0, replica=1, broker_epoch=cluster.epochs[1]),
        events.PartitionChanged(
            topic="foo", partition=0, replicas=(1, 2, 3), isr=(2, 3), elr=(), last_known_elr=(), leader=2,
            leader_epoch=1, partition_epoch=1, reason="replica_offline",
        ),
        events.LeaderElected(topic="foo", partition=0, previous_leader=1, leader=2, leader_epoch=1, election="clean"),
    )  # fmt: skip
    assert result.response.error is ErrorCode.NONE and not result.response.is_fenced  # the broker itself stays


def test_a_follower_whose_replica_goes_offline_leaves_the_isr_and_the_leader_stays() -> None:
    cluster = three_brokers()
    cluster.create("foo", [[1, 2, 3]])
    result = offline(cluster, 3, ("foo", 0))
    assert cluster.leader_and_isr("foo") == (1, (1, 2))
    assert [e.reason for e in result.events if isinstance(e, events.PartitionChanged)] == ["replica_offline"]
    assert not [e for e in result.events if isinstance(e, events.LeaderElected)]


def test_the_same_offline_set_repeated_in_every_heartbeat_changes_nothing_after_the_first() -> None:
    cluster = three_brokers()
    cluster.create("foo", [[1, 2, 3]])
    offline(cluster, 3, ("foo", 0))
    for _ in range(3):
        repeated = offline(cluster, 3, ("foo", 0))
        assert (repeated.records, repeated.events) == ((), ())
    grown = offline(cluster, 3, ("foo", 0), ("bar", 0))  # bar does not exist: ignored
    assert (grown.records, grown.events) == ((), ())


def test_a_partition_the_broker_does_not_host_is_ignored() -> None:
    cluster = three_brokers()
    cluster.create("foo", [[1, 2]])
    result = offline(cluster, 3, ("foo", 0), ("foo", 7))
    assert (result.records, result.events) == ((), ())
    assert cluster.image.broker(3) is not None and cluster.image.broker(3).offline_replicas == frozenset()


def test_an_offline_replica_is_refused_back_into_the_isr_until_its_broker_registers_again() -> None:
    """Given broker 3's replica of foo-0 offline and out of the ISR, when the leader proposes [1, 2, 3], then the
    answer is INELIGIBLE_REPLICA and nothing is written; once broker 3 registers again (its log recovered) and is
    unfenced, the same proposal is committed."""
    cluster = three_brokers()
    cluster.create("foo", [[1, 2, 3]])
    offline(cluster, 3, ("foo", 0))
    refused = cluster.commit(cluster.control.alter_partition(cluster.request("foo", 0, [1, 2, 3])))
    assert refused.response.error_code is ErrorCode.INELIGIBLE_REPLICA and refused.records == ()
    cluster.shut_down(3)  # the broker restarts: a controlled shutdown, then a new incarnation
    cluster.register(3)
    assert cluster.image.offline_replicas("foo", 0) == ()
    cluster.unfence(3)
    assert cluster.alter("foo", 0, [1, 2, 3]).error_code is ErrorCode.NONE


def test_an_offline_replica_is_never_elected_not_even_uncleanly() -> None:
    """Given foo-0 whose only ISR member is 1 (2 and 3 fenced), when 1 reports it offline, then 1 stays the last
    ISR member (KRaft never empties the ISR without ELR) but loses the leadership, and an unclean election finds no
    leader; once 2 is back, the unclean election takes 2, never 1."""
    cluster = three_brokers(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.create("foo", [[1, 2, 3]])
    cluster.fence(2, 3)
    assert cluster.leader_and_isr("foo") == (1, (1,))
    offline(cluster, 1, ("foo", 0))
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (1,))
    unclean = cluster.commit(cluster.control.elect_leaders("unclean", [("foo", 0)])).response
    assert unclean[0].error is ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    cluster.register(2)
    cluster.unfence(2)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (1,))  # 2 is not in the ISR: no clean election
    unclean = cluster.commit(cluster.control.elect_leaders("unclean", [("foo", 0)])).response
    assert unclean[0].error is ErrorCode.NONE
    assert cluster.leader_and_isr("foo") == (2, (2,))


def test_with_elr_an_isr_member_gone_offline_does_not_become_eligible_as_a_fenced_one_would() -> None:
    """KIP-966: a member leaving an ISR below min ISR joins the ELR (its log holds the committed records). An
    offline replica's log cannot be read, so it leaves both, as after an unclean shutdown."""
    cluster = three_brokers(eligible_leader_replicas_enable=True)
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="3")
    offline(cluster, 2, ("foo", 0))
    assert (cluster.partition("foo").isr, cluster.partition("foo").elr) == ((1, 3), ())
    fenced = three_brokers(eligible_leader_replicas_enable=True)
    fenced.create("foo", [[1, 2, 3]], min_insync_replicas="3")
    fenced.fence(2)
    assert (fenced.partition("foo").isr, fenced.partition("foo").elr) == ((1, 3), (2,))


def test_with_elr_a_replica_in_the_elr_that_goes_offline_leaves_it() -> None:
    cluster = three_brokers(eligible_leader_replicas_enable=True)
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="3")
    cluster.fence(3)
    assert cluster.partition("foo").elr == (3,)
    offline(cluster, 3, ("foo", 0))  # a fenced broker still heartbeats: it reports, then is unfenced
    assert (cluster.partition("foo").isr, cluster.partition("foo").elr) == ((1, 2), ())
    assert cluster.image.is_active(3) and not cluster.image.is_eligible_replica(3, "foo", 0)


def test_unfencing_in_the_same_heartbeat_never_elects_the_replica_it_reports_offline() -> None:
    """Given foo-0 leaderless with only broker 1 (fenced) in its ISR, when broker 1 heartbeats to be unfenced and
    reports foo-0 offline in the same heartbeat, then the unfencing elects nothing for foo-0."""
    cluster = three_brokers(eligible_leader_replicas_enable=False)  # the legacy mode
    cluster.create("foo", [[1, 2]])
    cluster.fence(2)
    cluster.fence(1, 2)
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (1,))
    result = offline(cluster, 1, ("foo", 0))
    assert not result.response.is_fenced
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (1,))
    assert not [e for e in result.events if isinstance(e, events.LeaderElected)]


def test_a_deleted_topics_offline_replicas_go_with_it() -> None:
    cluster = three_brokers()
    cluster.create("foo", [[1, 2, 3]])
    offline(cluster, 1, ("foo", 0))
    cluster.commit(cluster.control.delete_topic("foo"))
    assert cluster.image.broker(1) is not None and cluster.image.broker(1).offline_replicas == frozenset()
    cluster.create("foo", [[1, 2, 3]])
    assert cluster.leader_and_isr("foo") == (1, (1, 2, 3))


def test_a_standby_replaying_the_log_knows_the_offline_replicas() -> None:
    cluster = three_brokers()
    cluster.create("foo", [[1, 2, 3]])
    offline(cluster, 2, ("foo", 0))
    replayed = MetadataImage().apply_all(cluster.records)
    assert replayed == cluster.image and replayed.offline_replicas("foo", 0) == (2,)
    assert replayed.partitions_offline_on(2) == (TopicPartition("foo", 0),)


@pytest.mark.parametrize(
    ("isr", "elr", "leader", "elr_enabled", "complaint"),
    [
        ((0, 1), (), 1, False, "leader 1's replica is offline"),
        ((0, 1), (), 0, False, "ISR (0, 1) holds offline replicas [1]"),
        ((0,), (1,), 0, True, "ELR (1,) holds offline replicas [1]"),
    ],
)
def test_the_image_checker_catches_an_offline_replica_that_leads_or_stays_in_sync(
    isr: tuple[int, ...], elr: tuple[int, ...], leader: int, elr_enabled: bool, complaint: str
) -> None:
    record = PartitionRecord(topic_id="t", partition=0, replicas=(0, 1, 2), isr=isr, elr=elr, leader=leader)
    image = broken_image(record).apply(
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, offline_replicas=(("t", 0),))
    )
    config = ControllerConfig(eligible_leader_replicas_enable=elr_enabled, min_insync_replicas=3)
    violations = image_violations(image, config)
    assert any(complaint in v for v in violations), violations
