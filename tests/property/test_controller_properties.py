"""The controller keeps KRaft's invariants under any sequence of requests, and its records are its whole state.

Method: a hypothesis state machine plays the shell against one `ReplicationControl` (ELR on or off, unclean
election on or off, min ISR 1 to 3): brokers register (cleanly or not, sometimes as a second incarnation),
heartbeat (asking to be fenced or to shut down, sometimes with a stale epoch, sometimes reporting replicas
offline), go silent while the clock runs; topics are created (placed or assigned by hand), grown and deleted;
leaders send AlterPartition proposals (mostly sound, sometimes not); admins ask for preferred and unclean
elections and move partitions (or cancel a move); the auto rebalance runs. Every result is appended and applied
before the next request. After every step:

- the image has no violation (`image_violations`): leader in the ISR or -1, ISR within the replicas and never
  empty unless ELR is enabled, ELR and ISR disjoint, no ELR once the ISR reaches min ISR, leaders active, ISRs
  of active brokers but for the last member of a leaderless ISR without ELR;
- each PartitionChangeRecord, applied on its own, changes something, raises the partition epoch by one and the
  leader epoch by one exactly when the leader changes (`change_violations`);
- a replica reported offline is neither leader nor in an ELR, nor in an ISR but as the last member of a leaderless
  one without ELR, and an AlterPartition cannot bring it back (INELIGIBLE_REPLICA) until its broker registers;
- each partition record has its PartitionChanged event carrying the state it leaves, each leader change its
  LeaderElected, and every event fits the catalogue's sizes;
- an error reply comes with no records, and broker epochs only grow;
- applying all the records so far to an empty image gives the controller's image.

The checkers themselves are shown to fail on violating images in tests/unit/test_controller.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from hightide.core.controller import (
    ControllerConfig,
    ControllerResult,
    ElectionType,
    ReplicationControl,
    change_violations,
    image_violations,
)
from hightide.core.metadata_image import MetadataImage, TopicPartition
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.metadata import (
    NO_LEADER_CHANGE,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)
from hightide.protocol.wire import AlterPartitionRequest

BROKERS = st.integers(0, 5)  # broker 5 is never registered by the `register` rule's usual draws
TOPICS = st.sampled_from(["a", "b", "c"])
SESSION_MS = 9_000


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.control = ReplicationControl()
        self.log: list[MetadataRecord] = []
        self.now_ms = 0
        self.incarnation = 0
        self.topic_ids = 0
        self.last_epoch = -1
        # partitions whose cancelled reassignment left the first original replica as the ISR, eligible or not
        # (Kafka's PartitionReassignmentRevert), with the partition epoch the cancellation left
        self.unclean_reverts: dict[TopicPartition, int] = {}

    @initialize(
        elr=st.booleans(),
        unclean=st.booleans(),
        min_isr=st.integers(1, 3),
        brokers=st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True),
    )
    def start(self, elr: bool, unclean: bool, min_isr: int, brokers: list[int]) -> None:
        config = ControllerConfig(
            eligible_leader_replicas_enable=elr,
            unclean_leader_election_enable=unclean,
            min_insync_replicas=min_isr,
            leader_imbalance_per_broker_percentage=0,
        )
        self.control = ReplicationControl(config)
        for broker_id in brokers:
            self.register(broker_id, clean=True)
            self.heartbeat(broker_id, want_fence=False, want_shutdown=False, stale=False)
        self.create_placed_topic("a", len(brokers), 3, min_isr=min_isr)

    # -- the shell ---------------------------------------------------------------------------------------------

    # -- the shell -------------------------------------------------------------------------------------------

    def commit(self, result: ControllerResult[Any]) -> ControllerResult[Any]:
        """Append and apply, checking each record's effect and the events against the records."""
        image = self.control.image
        changed: dict[tuple[str, int], int] = {}
        leader_changes = 0
        for record in result.records:
            after = image.apply(record)
            if isinstance(record, PartitionChangeRecord):
                name = image.topics[record.topic_id].name
                before_partition = image.topics[record.topic_id].partitions[record.partition]
                after_partition = after.topics[record.topic_id].partitions[record.partition]
                assert change_violations(before_partition, after_partition) == []
                assert after_partition != _bumped_only(before_partition), f"no-op change {record}"
                leader_changes += record.leader != NO_LEADER_CHANGE and after_partition.leader != (
                    before_partition.leader
                )
                changed[(name, record.partition)] = changed.get((name, record.partition), 0) + 1
            elif isinstance(record, PartitionRecord):
                name = image.topics[record.topic_id].name
                changed[(name, record.partition)] = changed.get((name, record.partition), 0) + 1
            elif isinstance(record, RegisterBrokerRecord):
                assert record.broker_epoch > self.last_epoch
                self.last_epoch = record.broker_epoch
            image = after
        self.control.apply(result.records)
        assert self.control.image == image
        self.log.extend(result.records)
        self.check_events(result, image, changed, leader_changes)
        return result

    def check_events(
        self, result: ControllerResult[Any], image: MetadataImage, changed: dict[tuple[str, int], int], leaders: int
    ) -> None:
        for event in result.events:
            events.check_event(event)
        reported: dict[tuple[str, int], list[events.PartitionChanged]] = {}
        for event in result.events:
            if isinstance(event, events.PartitionChanged):
                reported.setdefault((event.topic, event.partition), []).append(event)
        assert {k: len(v) for k, v in reported.items()} == changed
        for (topic, partition_id), reports in reported.items():
            final = image.partition(topic, partition_id)
            if final is None:
                continue  # the topic went away in the same result (never, today)
            last = reports[-1]
            assert (last.isr, last.elr, last.leader, last.leader_epoch, last.partition_epoch) == (
                final.isr,
                final.elr,
                final.leader,
                final.leader_epoch,
                final.partition_epoch,
            )
        assert sum(isinstance(e, events.LeaderElected) for e in result.events) == leaders

    # -- brokers ---------------------------------------------------------------------------------------------

    def registered(self, data: st.DataObject) -> int:
        """A registered broker mostly, sometimes any id (unknown ones must be refused, not crash)."""
        known = sorted(self.control.image.brokers)
        if known and data.draw(st.integers(0, 4)):
            return data.draw(st.sampled_from(known))
        return data.draw(BROKERS)

    @rule(broker_id=BROKERS, clean=st.booleans())
    def register(self, broker_id: int, clean: bool) -> None:
        existing = self.control.image.broker(broker_id)
        previous = existing.broker_epoch if existing is not None and clean else -1
        self.incarnation += 1
        result = self.commit(self.control.register_broker(broker_id, f"i{self.incarnation}", previous, self.now_ms))
        assert (result.response.error is ErrorCode.NONE) == bool(result.records)

    def heartbeat(
        self,
        broker_id: int,
        want_fence: bool,
        want_shutdown: bool,
        stale: bool,
        offline: tuple[TopicPartition, ...] = (),
    ) -> ControllerResult[Any]:
        registration = self.control.image.broker(broker_id)
        epoch = -1 if registration is None or stale else registration.broker_epoch
        result = self.commit(
            self.control.heartbeat(
                broker_id,
                epoch,
                self.now_ms,
                want_fence=want_fence and not stale,
                want_shutdown=want_shutdown,
                offline_replicas=offline,
            )
        )
        if result.response.error is not ErrorCode.NONE:
            assert result.records == ()
        return result

    @rule(data=st.data(), want_fence=st.booleans(), want_shutdown=st.booleans(), stale=st.booleans())
    def heartbeat_with_flags(self, data: st.DataObject, want_fence: bool, want_shutdown: bool, stale: bool) -> None:
        self.heartbeat(self.registered(data), want_fence, want_shutdown, stale)

    @rule(data=st.data())
    def unfence(self, data: st.DataObject) -> None:
        """A plain heartbeat: the usual way back in."""
        self.heartbeat(self.registered(data), want_fence=False, want_shutdown=False, stale=False)

    @rule(data=st.data())
    def rejoin(self, data: st.DataObject) -> None:
        """A broker heartbeats and catches up: every leader adds it back to the ISR."""
        broker_id = self.registered(data)
        self.heartbeat(broker_id, want_fence=False, want_shutdown=False, stale=False)
        if not self.control.image.is_active(broker_id):
            return
        for tp, _ in list(self.control.image.all_partitions()):
            current = self.control.image.partition(*tp)
            assert current is not None
            if current.has_leader and broker_id in current.replicas and broker_id not in current.isr:
                answer = self.send(tp, (*current.isr, broker_id), with_epochs=True).response.error_code
                offline = self.control.image.replica_offline(broker_id, *tp)
                expected = ErrorCode.INELIGIBLE_REPLICA if offline else ErrorCode.NONE
                # ... or it completed a reassignment that removed the leader
                completed = current.reassigning and answer is ErrorCode.NEW_LEADER_ELECTED and not offline
                assert answer is expected or completed, (tp, answer)

    @rule(data=st.data(), repeat=st.booleans())
    def report_offline(self, data: st.DataObject, repeat: bool) -> None:
        """A broker's storage refused: its heartbeat reports some of its replicas offline (and a partition it does
        not host, now and then), and keeps reporting them. Each one leaves its ISR, ELR and leadership at once,
        unless it is the last member of a leaderless ISR without ELR; a repeated report changes nothing."""
        broker_id = self.registered(data)
        image = self.control.image
        hosted = [tp for tp, p in image.all_partitions() if broker_id in p.replicas]
        offline = tuple(data.draw(st.lists(st.sampled_from(hosted), max_size=3, unique=True))) if hosted else ()
        if data.draw(st.booleans()):
            offline += (TopicPartition(data.draw(TOPICS), data.draw(st.integers(0, 3))),)
        result = self.heartbeat(broker_id, want_fence=False, want_shutdown=False, stale=False, offline=offline)
        if result.response.error is not ErrorCode.NONE:
            return
        after = self.control.image
        for tp in offline:
            partition, hosted_before = after.partition(*tp), image.partition(*tp)
            if hosted_before is None or broker_id not in hosted_before.replicas:
                assert not after.replica_offline(broker_id, *tp)
                continue
            if partition is None or broker_id not in partition.replicas:
                continue  # leaving the ISR completed a reassignment that removed it: no longer its replica

            assert after.replica_offline(broker_id, *tp) and broker_id in after.offline_replicas(*tp)
            assert partition.leader != broker_id and broker_id not in partition.elr
            kept_last = not self.control.config.eligible_leader_replicas_enable and partition.isr == (broker_id,)
            assert broker_id not in partition.isr or kept_last, (tp, partition)
        if repeat:
            again = self.heartbeat(broker_id, want_fence=False, want_shutdown=False, stale=False, offline=offline)
            assert not any(isinstance(e, events.ReplicaMarkedOffline) for e in again.events)
            assert not any(
                isinstance(e, events.PartitionChanged) and e.reason == "replica_offline" for e in again.events
            )

    @rule(data=st.data())
    def controlled_shutdown(self, data: st.DataObject) -> None:
        broker_id = self.registered(data)
        registration = self.control.image.broker(broker_id)
        epoch = registration.broker_epoch if registration else -1
        self.commit(self.control.controlled_shutdown(broker_id, epoch, self.now_ms))

    @rule(data=st.data())
    def silence(self, data: st.DataObject) -> None:
        """One broker goes quiet past its session while the others heartbeat (Kafka's fenceBrokers)."""
        quiet = self.registered(data)
        self.now_ms += SESSION_MS + 1
        for broker_id, registration in sorted(self.control.image.brokers.items()):
            if broker_id != quiet and not registration.fenced:
                self.heartbeat(broker_id, want_fence=False, want_shutdown=False, stale=False)
        self.commit(self.control.tick(self.now_ms))

    @rule(data=st.data(), clean=st.booleans())
    def restart(self, data: st.DataObject, clean: bool) -> None:
        """A broker dies and comes back as a new incarnation before the controller noticed it was gone."""
        broker_id = self.registered(data)
        self.now_ms += SESSION_MS + 1
        for other, registration in sorted(self.control.image.brokers.items()):
            if other != broker_id and not registration.fenced:
                self.heartbeat(other, want_fence=False, want_shutdown=False, stale=False)
        self.register(broker_id, clean)

    @rule(elapsed_ms=st.sampled_from([0, 1, 3_000, SESSION_MS, SESSION_MS + 1, 20_000]))
    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        fenced = self.commit(self.control.tick(self.now_ms)).response
        assert all(self.control.image.broker(b) is not None for b in fenced)

    @rule(data=st.data())
    def unregister(self, data: st.DataObject) -> None:
        broker_id = self.registered(data)
        result = self.commit(self.control.unregister_broker(broker_id))
        assert (result.response.error is ErrorCode.NONE) == bool(result.records)
        assert self.control.image.broker(broker_id) is None

    # -- topics ----------------------------------------------------------------------------------------------

    @rule(
        name=TOPICS,
        partitions=st.integers(-1, 3),
        replication_factor=st.integers(-1, 4),
        min_isr=st.sampled_from([None, "1", "2", "3"]),
        unclean=st.sampled_from([None, "true", "false"]),
        assignments=st.none() | st.lists(st.lists(BROKERS, min_size=1, max_size=3), min_size=1, max_size=3),
    )
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        min_isr: str | None,
        unclean: str | None,
        assignments: list[list[int]] | None,
    ) -> None:
        configs = {
            k: v for k, v in (("min.insync.replicas", min_isr), ("unclean.leader.election.enable", unclean)) if v
        }
        self.topic_ids += 1
        if assignments is not None:
            partitions = replication_factor = -1
        result = self.commit(
            self.control.create_topic(
                name,
                topic_id=f"id{self.topic_ids}",
                partitions=partitions,
                replication_factor=replication_factor,
                configs=configs,
                assignments=assignments,
            )
        )
        assert (result.response.error is ErrorCode.NONE) == bool(result.records)

    @rule(name=TOPICS, data=st.data(), partitions=st.integers(1, 3), min_isr=st.integers(1, 3))
    def create_placed_topic_rule(self, name: str, data: st.DataObject, partitions: int, min_isr: int) -> None:
        active = len(self.control.image.active_brokers())
        replication_factor = data.draw(st.integers(1, active)) if active else 1
        self.create_placed_topic(name, replication_factor, partitions, min_isr=min_isr)

    def create_placed_topic(self, name: str, replication_factor: int, partitions: int, *, min_isr: int) -> None:
        """A topic Kafka accepts, unless the name is taken or no broker is active."""
        self.topic_ids += 1
        result = self.commit(
            self.control.create_topic(
                name,
                topic_id=f"id{self.topic_ids}",
                partitions=partitions,
                replication_factor=replication_factor,
                configs={"min.insync.replicas": str(min_isr)},
            )
        )
        taken = self.control.image.topic_ids.get(name) != f"id{self.topic_ids}"
        assert result.response.error is ErrorCode.NONE or taken or not self.control.image.active_brokers()

    @rule(name=TOPICS)
    def delete_topic(self, name: str) -> None:
        self.commit(self.control.delete_topic(name))
        assert self.control.image.topic(name) is None

    @rule(name=TOPICS, more=st.integers(0, 2))
    def create_partitions(self, name: str, more: int) -> None:
        topic = self.control.image.topic(name)
        count = (len(topic.partitions) if topic else 1) + more
        result = self.commit(self.control.create_partitions(name, count))
        assert (result.response.error is ErrorCode.NONE) == bool(result.records)

    # -- partitions ------------------------------------------------------------------------------------------

    def led_partition(self, data: st.DataObject) -> TopicPartition | None:
        led = [tp for tp, p in self.control.image.all_partitions() if p.has_leader]
        return data.draw(st.sampled_from(led)) if led else None

    def send(self, tp: TopicPartition, new_isr: tuple[int, ...], *, with_epochs: bool) -> ControllerResult[Any]:
        """The AlterPartition the current leader sends, with every epoch right."""
        image = self.control.image
        current = image.partition(*tp)
        assert current is not None
        leader = image.broker(current.leader)
        assert leader is not None
        epochs = tuple(image.brokers[b].broker_epoch if with_epochs else -1 for b in new_isr)
        request = AlterPartitionRequest(
            broker_id=current.leader,
            broker_epoch=leader.broker_epoch,
            topic=tp.topic,
            partition=tp.partition,
            leader_epoch=current.leader_epoch,
            partition_epoch=current.partition_epoch,
            new_isr=new_isr,
            new_isr_broker_epochs=epochs,
        )
        return self.commit(self.control.alter_partition(request))

    @rule(data=st.data(), with_epochs=st.booleans())
    def shrink_isr(self, data: st.DataObject, with_epochs: bool) -> None:
        """A leader drops followers that fell behind: always accepted."""
        tp = self.led_partition(data)
        if tp is None:
            return
        current = self.control.image.partition(*tp)
        assert current is not None
        followers = [r for r in current.isr if r != current.leader]
        kept = data.draw(st.lists(st.sampled_from(followers), unique=True)) if followers else []
        result = self.send(tp, (current.leader, *kept), with_epochs=with_epochs)
        assert result.response.error_code is ErrorCode.NONE, result.response
        after = self.control.image.partition(*tp)
        assert after is not None and after.isr == (current.leader, *kept)

    @rule(data=st.data(), with_epochs=st.booleans())
    def expand_isr(self, data: st.DataObject, with_epochs: bool) -> None:
        """A leader adds a caught-up follower: accepted exactly when the follower is active and its replica online."""
        tp = self.led_partition(data)
        if tp is None:
            return
        current = self.control.image.partition(*tp)
        assert current is not None
        outside = [r for r in current.replicas if r not in current.isr and self.control.image.broker(r)]
        if not outside:
            return
        active = [r for r in outside if self.control.image.is_eligible_replica(r, *tp)]
        joining = data.draw(st.sampled_from(active if active and data.draw(st.booleans()) else outside))
        result = self.send(tp, (*current.isr, joining), with_epochs=with_epochs)
        eligible = self.control.image.is_eligible_replica(joining, *tp)
        expected = {ErrorCode.NONE if eligible else ErrorCode.INELIGIBLE_REPLICA}
        if current.reassigning and eligible:
            expected.add(ErrorCode.NEW_LEADER_ELECTED)  # it completed the reassignment, which removed the leader
        assert result.response.error_code in expected, result.response

    @rule(data=st.data())
    def catch_up(self, data: st.DataObject) -> None:
        """Every active replica of a partition has caught up: its leader adds them all at once."""
        tp = self.led_partition(data)
        if tp is None:
            return
        current = self.control.image.partition(*tp)
        assert current is not None
        joining = tuple(
            r for r in current.replicas if r not in current.isr and self.control.image.is_eligible_replica(r, *tp)
        )
        if joining:
            answered = self.send(tp, (*current.isr, *joining), with_epochs=True).response.error_code
            assert answered is ErrorCode.NONE or (current.reassigning and answered is ErrorCode.NEW_LEADER_ELECTED)

    @rule(
        name=TOPICS,
        partition=st.integers(0, 3),
        members=st.lists(BROKERS, max_size=4),
        sender_is_leader=st.booleans(),
        epoch_skew=st.sampled_from([0, 0, 0, -1, 1]),
        with_epochs=st.booleans(),
    )
    def alter_partition_anyhow(
        self,
        name: str,
        partition: int,
        members: list[int],
        sender_is_leader: bool,
        epoch_skew: int,
        with_epochs: bool,
    ) -> None:
        """Any proposal, sound or not: refused ones change nothing; accepted ones set exactly that ISR."""
        current = self.control.image.partition(name, partition)
        if current is None:
            return
        sender = current.leader if sender_is_leader and current.leader >= 0 else (members or [0])[0]
        new_isr = tuple(dict.fromkeys([current.leader, *members])) if sender_is_leader else tuple(members)
        if min(new_isr, default=0) < 0:
            return  # a leaderless partition's "leader" -1 in an ISR: the wire refuses such a request before the core
        registration = self.control.image.broker(sender)
        epochs = tuple(
            (b_reg.broker_epoch if (b_reg := self.control.image.broker(b)) and with_epochs else -1) for b in new_isr
        )
        request = AlterPartitionRequest(
            broker_id=sender,
            broker_epoch=registration.broker_epoch if registration else -1,
            topic=name,
            partition=partition,
            leader_epoch=current.leader_epoch + epoch_skew,
            partition_epoch=current.partition_epoch,
            new_isr=new_isr,
            new_isr_broker_epochs=epochs,
        )
        result = self.commit(self.control.alter_partition(request))
        if result.response.error_code is ErrorCode.NEW_LEADER_ELECTED:
            assert current.reassigning and result.records  # committed, and completed the reassignment
        elif result.response.error_code is not ErrorCode.NONE:
            assert result.records == ()
        elif current.reassigning:
            after = self.control.image.partition(name, partition)
            assert after is not None and after.leader == current.leader
            assert after.isr == tuple(r for r in new_isr if r in after.replicas)
        else:
            after = self.control.image.partition(name, partition)
            assert after is not None and after.isr == new_isr and after.leader == current.leader
            assert result.response.partition_epoch == after.partition_epoch

    @rule(data=st.data(), election=st.sampled_from(ElectionType), every=st.booleans())
    def elect_leaders(self, data: st.DataObject, election: ElectionType, every: bool) -> None:
        known = [tp for tp, _ in self.control.image.all_partitions()] + [TopicPartition("zz", 0)]
        partitions = None if every else data.draw(st.lists(st.sampled_from(known), max_size=4))
        result = self.commit(self.control.elect_leaders(election, partitions))
        elected = sum(reply.error is ErrorCode.NONE for reply in result.response)
        assert elected == len(result.records)

    # -- partition reassignment (issue 13) ------------------------------------------------------------------

    @rule(data=st.data(), cancel=st.booleans())
    def reassign(self, data: st.DataObject, cancel: bool) -> None:
        """An admin moves a partition (to registered brokers mostly; sometimes duplicates, unknown brokers or an
        empty list) or cancels: an accepted target is the partition's target now (reached at once when the ISR
        already holds it), a cancel leaves no reassignment, and a refusal writes nothing."""
        known = [tp for tp, _ in self.control.image.all_partitions()] + [TopicPartition("zz", 0)]
        tp = data.draw(st.sampled_from(known))
        brokers = sorted(self.control.image.brokers) or [0]
        target = None if cancel else data.draw(st.lists(st.sampled_from([*brokers, 5]), max_size=4))
        before = self.control.image.partition(*tp)
        result = self.commit(self.control.alter_partition_reassignments([(tp.topic, tp.partition, target)]))
        (reply,) = result.response
        after = self.control.image.partition(*tp)
        if reply.error is not ErrorCode.NONE:
            assert result.records == ()
            assert reply.error is not ErrorCode.NO_REASSIGNMENT_IN_PROGRESS or (before and not before.reassigning)
            return
        assert before is not None and after is not None
        if target is None:
            assert not after.reassigning and set(after.replicas) == set(before.original_replicas)
            if all(r in before.adding_replicas for r in before.isr):
                self.unclean_reverts[tp] = after.partition_epoch
        else:
            assert after.target_replicas == tuple(target)

    @rule()
    def auto_leader_rebalance(self) -> None:
        result = self.commit(self.control.auto_leader_rebalance())
        for topic, partition in result.response.elected:
            after = self.control.image.partition(topic, partition)
            assert after is not None and after.has_preferred_leader

    # -- invariants ------------------------------------------------------------------------------------------

    @invariant()
    def image_is_sound(self) -> None:
        violations = image_violations(self.control.image, self.control.config, unclean_reverts=self.unclean_reverts)
        assert violations == [], violations

    @invariant()
    def records_are_the_whole_state(self) -> None:
        assert MetadataImage().apply_all(self.log) == self.control.image


def _bumped_only(partition: Any) -> Any:
    """The partition with only its partition epoch raised: what a no-op change record would leave."""
    return dataclasses.replace(partition, partition_epoch=partition.partition_epoch + 1)


ControllerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestControllerProperties = ControllerMachine.TestCase
