"""The controller reassigns partitions as KRaft's does: start, completion on ISR expansion, a removed leader
replaced, cancellation, the errors, and the records replayed from an older log.

Method: Kafka's own vectors where Kafka has one, named by the test that asserts them (ReplicationControlManagerTest
testReassignPartitions, testCancelReassignPartitions, testReassignPartitionsHandlesNewReassignmentThatRemoves-
PreviouslyAddingReplicas; PartitionReassignmentReplicasTest), run through test_controller's `Cluster` (each result
committed and applied before the next request; `commit` also checks every image invariant). Where Kafka has no
vector (the events, the NEW_LEADER_ELECTED answer's record, replay) the test states the rule it checks.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hightide.core.controller import OngoingReassignment, PartitionReassignmentReply, image_violations
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicPartition
from hightide.core.partition_change import Assignment, change_violations, complete_reassignment, partition_violations
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.metadata import (
    MetadataBatch,
    PartitionChangeRecord,
    PartitionRecord,
    decode_metadata_batch,
    encode_metadata_batch,
)
from unit.test_controller import Cluster


def cluster(*brokers: int, **settings: int | bool) -> Cluster:
    c = Cluster(**settings)
    c.register(*brokers)
    c.unfence(*brokers)
    return c


def reassign(c: Cluster, *targets: tuple[str, int, Sequence[int] | None]) -> tuple[PartitionReassignmentReply, ...]:
    return c.commit(c.control.alter_partition_reassignments(targets)).response


def errors(replies: Sequence[PartitionReassignmentReply]) -> list[tuple[ErrorCode, str]]:
    return [(r.error, r.message) for r in replies]


# -- Assignment (PartitionReassignmentReplicasTest) ------------------------------------------------------------


def test_assignment_towards_a_target() -> None:
    # testNoneAddedOrRemoved, testAdditions, testRemovals, testAdditionsAndRemovals
    assert Assignment.towards([3, 2, 1], [3, 2, 1]) == Assignment((3, 2, 1))
    assert Assignment.towards([3, 2, 1], [3, 6, 2, 1, 5]) == Assignment((3, 6, 2, 1, 5), (), (5, 6))
    assert Assignment.towards([3, 2, 1], [1]) == Assignment((1, 2, 3), (2, 3), ())
    assert Assignment.towards([3, 2, 1], [7, 3, 4, 9]) == Assignment((7, 3, 4, 9, 1, 2), (1, 2), (4, 7, 9))


def test_complete_reassignment_needs_every_target_replica_in_the_isr() -> None:
    # testIsReassignmentInProgress / testDoesNotCompleteReassignment / testDoesCompleteReassignment*
    moving = Assignment((0, 1, 2, 3), removing=(3,), adding=(0,))
    assert complete_reassignment(moving, [1, 2, 3]) is None  # 0 not in yet
    assert complete_reassignment(moving, [0, 1, 2, 3]) == (Assignment((0, 1, 2)), [0, 1, 2])
    assert complete_reassignment(Assignment((0, 1), removing=(0, 1)), [0, 1]) is None  # nothing would remain
    assert complete_reassignment(Assignment((1, 2, 3)), [1, 2, 3]) is None  # nothing in progress


# -- start, list, cancel (ReplicationControlManagerTest) -------------------------------------------------------


def test_reassign_partitions() -> None:
    """testReassignPartitions: a reorder completes at once, a move starts (replicas = target + removing), an
    unknown partition is refused; listing shows the one in progress; cancelling reverts it with a leader epoch
    bump; an AlterPartition that completes a reassignment removing the leader answers NEW_LEADER_ELECTED."""
    c = cluster(0, 1, 2, 3)
    foo_id = c.create("foo", [[1, 2, 3], [3, 2, 1]])
    c.create("bar", [[1, 2, 3]])
    assert c.control.list_partition_reassignments() == ()
    replies = reassign(c, ("foo", 0, [3, 2, 1]), ("foo", 1, [0, 2, 1]), ("foo", 2, [0, 2, 1]))
    assert errors(replies) == [
        (ErrorCode.NONE, ""),
        (ErrorCode.NONE, ""),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition foo:2."),
    ]
    assert c.partition("foo", 0).replicas == (3, 2, 1) and not c.partition("foo", 0).reassigning
    moving = OngoingReassignment("foo", 1, replicas=(0, 2, 1, 3), adding_replicas=(0,), removing_replicas=(3,))
    assert c.control.list_partition_reassignments() == (moving,)
    assert c.control.list_partition_reassignments([("bar", 0), ("bar", 1)]) == ()
    assert c.control.list_partition_reassignments([("foo", 0), ("foo", 1), ("foo", 2)]) == (moving,)

    before = c.partition("foo", 1)
    cancel = c.control.alter_partition_reassignments([("foo", 0, None), ("foo", 1, None), ("bar", 0, None)])
    assert cancel.records == (
        PartitionChangeRecord(
            topic_id=foo_id, partition=1, leader=3, replicas=(2, 1, 3), removing_replicas=(), adding_replicas=()
        ),
    )
    assert [r.error for r in cancel.response] == [
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        ErrorCode.NONE,
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
    ]
    # Kafka's test does not replay the cancellation; neither does this one, so the AlterPartition below sees the
    # reassignment still in progress. A fresh controller over the same records plays the shell's role.
    c.control = type(c.control)(c.control.config, c.image)
    assert c.partition("foo", 1) == before

    response = c.alter("foo", 1, [3, 0, 2, 1])
    assert response.error_code is ErrorCode.NEW_LEADER_ELECTED
    after = c.partition("foo", 1)
    assert (after.replicas, after.isr, after.leader, after.leader_epoch) == ((0, 2, 1), (0, 2, 1), 0, 1)
    assert c.control.list_partition_reassignments() == ()


def test_cancel_reassign_partitions() -> None:
    """testCancelReassignPartitions: with broker 3 fenced, a target within the ISR completes at once (a replica
    left: leader epoch + 1), a reorder completes without a bump, unknown brokers and an empty list are
    INVALID_REPLICA_ASSIGNMENT, additions start; the cancellation takes the added replicas out again."""
    c = cluster(0, 1, 2, 3, 4)
    c.create("foo", [[1, 2, 3, 4], [0, 1, 2, 3], [4, 3, 1, 0], [2, 3, 4, 1]])
    bar_id = c.create("bar", [[4, 3, 2]])
    c.fence(3)
    assert c.partition("foo", 0).isr == (1, 2, 4)
    replies = reassign(
        c,
        ("foo", 0, [1, 2, 4]),
        ("foo", 1, [1, 2, 3, 0]),
        ("foo", 2, [5, 6, 7]),
        ("foo", 3, []),
        ("bar", 0, [1, 2, 3, 4, 0]),
    )
    assert errors(replies) == [
        (ErrorCode.NONE, ""),
        (ErrorCode.NONE, ""),
        (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 5, but no such broker is registered.",
        ),
        (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
        (ErrorCode.NONE, ""),
    ]
    foo0, foo1, bar0 = c.partition("foo", 0), c.partition("foo", 1), c.partition("bar", 0)
    assert (foo0.replicas, foo0.isr, foo0.leader, foo0.leader_epoch, foo0.partition_epoch) == (
        (1, 2, 4),
        (1, 2, 4),
        1,
        1,
        2,
    )
    assert (foo1.replicas, foo1.isr, foo1.leader, foo1.leader_epoch, foo1.partition_epoch) == (
        (1, 2, 3, 0),
        (0, 1, 2),
        0,
        0,
        2,
    )
    assert (bar0.replicas, bar0.isr, bar0.adding_replicas, bar0.removing_replicas, bar0.leader) == (
        (1, 2, 3, 4, 0),
        (4, 2),
        (0, 1),
        (),
        4,
    )
    cancel = c.commit(c.control.alter_partition_reassignments([("foo", 0, None), ("bar", 0, None)]))
    assert cancel.records == (
        PartitionChangeRecord(topic_id=bar_id, partition=0, leader=4, replicas=(2, 3, 4), adding_replicas=()),
    )
    assert [r.error for r in cancel.response] == [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, ErrorCode.NONE]
    assert c.events_of(events.PartitionReassignmentCancelled)[-1] == events.PartitionReassignmentCancelled(
        topic="bar", partition=0, replicas=(2, 3, 4), dropped_replicas=(0, 1), leader=4, leader_epoch=1
    )


def test_new_reassignment_replaces_one_in_progress() -> None:
    """testReassignPartitionsHandlesNewReassignmentThatRemovesPreviouslyAddingReplicas: a second target replaces
    the first (KRaft has no REASSIGNMENT_IN_PROGRESS), removing every replica not in it, the half-added ones too."""
    c = cluster(0, 1, 2, 3, 4, 5)
    c.create("topic-1", [[0, 1]])
    reassign(c, ("topic-1", 0, [2, 3]))
    assert c.control.list_partition_reassignments() == (
        OngoingReassignment("topic-1", 0, (2, 3, 0, 1), adding_replicas=(2, 3), removing_replicas=(0, 1)),
    )
    assert c.alter("topic-1", 0, [0, 1, 2]).error_code is ErrorCode.NONE
    c.commit(c.control.elect_leaders("preferred", [("topic-1", 0)]))
    assert c.partition("topic-1", 0).leader == 2
    reassign(c, ("topic-1", 0, [4, 5]))
    assert c.control.list_partition_reassignments() == (
        OngoingReassignment("topic-1", 0, (4, 5, 0, 1, 2, 3), adding_replicas=(4, 5), removing_replicas=(0, 1, 2, 3)),
    )


# -- completion ------------------------------------------------------------------------------------------------


def test_completes_when_the_last_adding_replica_joins_the_isr() -> None:
    """Given RF 3 on 1,2,3 led by 1, moved to 2,3,4: when the leader's ISR expansion brings 4 in, the same record
    completes it: replicas 2,3,4, ISR without 1, and 1, the leader, is replaced by the first target replica in
    the ISR; the leader answers NEW_LEADER_ELECTED and the events tell the story."""
    c = cluster(1, 2, 3, 4)
    c.create("t", [[1, 2, 3]])
    reassign(c, ("t", 0, [2, 3, 4]))
    started = c.partition("t")
    assert (started.replicas, started.adding_replicas, started.removing_replicas) == ((2, 3, 4, 1), (4,), (1,))
    assert (started.leader, started.leader_epoch) == (1, 0)  # nothing left yet: no bump
    assert c.events_of(events.PartitionReassignmentStarted) == [
        events.PartitionReassignmentStarted(
            topic="t",
            partition=0,
            original_replicas=(1, 2, 3),
            target_replicas=(2, 3, 4),
            adding_replicas=(4,),
            removing_replicas=(1,),
        )
    ]
    assert c.alter("t", 0, [1, 2, 3, 4]).error_code is ErrorCode.NEW_LEADER_ELECTED
    done = c.partition("t")
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((2, 3, 4), (2, 3, 4), 2, 1)
    assert not done.reassigning
    elected = c.events_of(events.LeaderElected)[-1]
    assert (elected.previous_leader, elected.leader, elected.election) == (1, 2, "reassignment")
    assert c.events_of(events.PartitionChanged)[-1].reason == "reassignment"
    assert c.events_of(events.PartitionReassignmentCompleted) == [
        events.PartitionReassignmentCompleted(
            topic="t", partition=0, replicas=(2, 3, 4), removed_replicas=(1,), leader=2, leader_epoch=1
        )
    ]


def test_completion_keeps_a_leader_that_stays_but_bumps_its_epoch() -> None:
    """Moving 1,2,3 to 1,2,4: the leader 1 stays; 3 leaves, so the leader epoch goes up (Kafka's
    triggerLeaderEpochBumpForReplicaReassignmentIfNeeded) and the AlterPartition is answered with it."""
    c = cluster(1, 2, 3, 4)
    c.create("t", [[1, 2, 3]])
    reassign(c, ("t", 0, [1, 2, 4]))
    response = c.alter("t", 0, [1, 2, 3, 4])
    assert response.error_code is ErrorCode.NONE
    assert (response.leader, response.leader_epoch, response.isr) == (1, 1, (1, 2, 4))
    assert c.partition("t").replicas == (1, 2, 4)


def test_an_isr_expansion_short_of_the_target_does_not_complete() -> None:
    c = cluster(1, 2, 3, 4, 5)
    c.create("t", [[1, 2, 3]])
    reassign(c, ("t", 0, [3, 4, 5]))
    assert c.alter("t", 0, [1, 2, 3, 4]).error_code is ErrorCode.NONE
    assert c.partition("t").reassigning and c.partition("t").isr == (1, 2, 3, 4)
    assert c.events_of(events.PartitionReassignmentCompleted) == []


def test_cancel_needing_an_unclean_election_is_refused_unless_allowed() -> None:
    """PartitionReassignmentRevert: when only added replicas are in the ISR, reverting restarts the ISR from the
    first original replica, an unclean choice: INVALID_REPLICA_ASSIGNMENT unless the topic allows unclean
    elections. The legacy mode: with ELR on, the revert's ISR would be the fenced broker 1 (left open, see the
    report of branch i13-elr)."""
    c = cluster(1, 2, 3, eligible_leader_replicas_enable=False)
    c.create("t", [[1]])
    reassign(c, ("t", 0, [2, 3]))
    c.alter("t", 0, [1, 2])  # 3 still missing: no completion
    c.fence(1)
    assert c.leader_and_isr("t") == (2, (2,))
    (reply,) = reassign(c, ("t", 0, None))
    assert (reply.error, reply.message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "Unable to revert partition assignment for t:0 because it would require an unclean leader election.",
    )
    c.commit(c.control.alter_topic_configs("t", {"unclean.leader.election.enable": "true"}))
    (reply,) = reassign(c, ("t", 0, None))
    assert reply.error is ErrorCode.NONE
    assert (c.partition("t").replicas, c.partition("t").isr) == ((1,), (1,))


def test_duplicate_brokers_are_refused() -> None:
    c = cluster(1, 2, 3)
    c.create("t", [[1, 2]])
    (reply,) = reassign(c, ("t", 0, [2, 2]))
    assert (reply.error, reply.message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes the broker 2 more than once.",
    )
    (reply,) = reassign(c, ("nope", 0, [1]))
    assert (reply.error, reply.message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")
    assert not c.partition("t").reassigning


# -- the rules and the records -----------------------------------------------------------------------------------


def test_replicas_change_only_by_a_reassignment() -> None:
    plain = PartitionRegistration((1, 2, 3), (1, 2, 3), (), (), 1, 0, 0)
    grown = PartitionRegistration((1, 2, 3, 4), (1, 2, 3), (), (), 1, 0, 1)
    assert change_violations(plain, grown) == [f"replicas {(1, 2, 3)} -> {(1, 2, 3, 4)} without a reassignment"]
    started = PartitionRegistration((1, 2, 3, 4), (1, 2, 3), (), (), 1, 0, 1, adding_replicas=(4,))
    assert change_violations(plain, started) == []
    shrunk_no_bump = PartitionRegistration((1, 2), (1, 2), (), (), 1, 0, 1)
    assert change_violations(plain, shrunk_no_bump) == ["leader 1 -> 1 moved the leader epoch 0 -> 0"]
    bad = PartitionRegistration((1, 2), (1, 2), (), (), 1, 0, 1, adding_replicas=(3,), removing_replicas=(3,))
    assert partition_violations(bad, min_isr=1, elr_enabled=False) != []


def test_records_replay_and_old_records_read_as_no_reassignment() -> None:
    """A log written before adding/removing existed (records without those fields) reads as no reassignment, and
    the new fields survive the metadata log's codec."""
    old = {"topic_id": "x", "partition": 0, "replicas": (1, 2), "isr": (1, 2), "leader": 1}
    assert PartitionRegistration.from_record(PartitionRecord(**old)).reassigning is False  # type: ignore[arg-type]
    c = cluster(1, 2, 3)
    c.create("t", [[1, 2]])
    reassign(c, ("t", 0, [2, 3]))
    batch = MetadataBatch(1, 1, tuple(c.records))
    replayed = MetadataImage().apply_all(decode_metadata_batch(encode_metadata_batch(batch)).records)
    assert replayed == c.image
    assert replayed.partition("t", 0) == c.partition("t") and c.partition("t").adding_replicas == (3,)


@pytest.mark.parametrize("elr", [False, True])
def test_completion_under_elr_keeps_the_elr_within_the_replicas(elr: bool) -> None:
    """With min ISR 2 and the ISR at 2 after completion, KIP-966 keeps the ELR empty; a removed ISR member is
    never put in the ELR of a partition it left."""
    c = cluster(1, 2, 3, 4, eligible_leader_replicas_enable=elr)
    c.create("t", [[1, 2, 3]], min_insync_replicas="3")
    reassign(c, ("t", 0, [3, 4]))
    c.alter("t", 0, [1, 2, 3, 4])
    done = c.partition("t")
    assert done.replicas == (3, 4) and set(done.elr) <= {3, 4}


def test_a_replica_count_change_of_partition_0_refreshes_the_topics_elrs() -> None:
    """Found by the controller's state machine: the topic's effective min ISR is min.insync.replicas capped at
    partition 0's replica count (Kafka's getTopicEffectiveMinIsr), so moving partition 0 from two replicas to one
    lowers it to 1 for every partition; the partitions whose ISR now reaches it lose their ELR in the same decision
    (`commit` checks every image invariant)."""
    c = cluster(1, 2, eligible_leader_replicas_enable=True, min_insync_replicas=2)
    c.create("a", [[1, 2], [2, 1], [1, 2]])
    c.shut_down(1)
    assert [c.partition("a", p).elr for p in range(3)] == [(1,), (1,), (1,)]
    reassign(c, ("a", 0, [2]))
    assert c.partition("a", 0).replicas == (2,)
    assert [c.partition("a", p).elr for p in range(3)] == [(), (), ()]
    assert {e.reason for e in c.events_of(events.PartitionChanged)[-3:]} == {"reassignment"}


def test_an_unclean_revert_makes_the_first_original_replica_the_isr_eligible_or_not() -> None:
    """PartitionReassignmentRevert: when no ISR member is an original replica (here the ISR is empty: its only
    replica, 0, shut down with ELR on), the cancellation makes the first original replica the ISR, and the builder
    writes it as it is, although broker 0 is in controlled shutdown and cannot lead. `image_violations` accepts
    that ISR until the partition's next change, and only when told of the revert; broker 0's shutdown then takes
    it out again (handleBrokerShutdown), to its ELR. (Found by the controller state machine.)"""
    c = cluster(0, 1, min_insync_replicas=1, unclean_leader_election_enable=True)
    c.create("a", [[0]])
    c.shut_down(0)
    assert (c.partition("a").isr, c.partition("a").elr, c.partition("a").leader) == ((), (0,), -1)
    assert errors(reassign(c, ("a", 0, [1]))) == [(ErrorCode.NONE, "")]
    assert (c.partition("a").replicas, c.partition("a").adding_replicas) == ((1, 0), (1,))
    cancel = c.control.alter_partition_reassignments([("a", 0, None)])
    c.control.apply(cancel.records)  # not `commit`: its check is told of no revert
    reverted = c.partition("a")
    assert errors(cancel.response) == [(ErrorCode.NONE, "")]
    assert (reverted.replicas, reverted.isr, reverted.elr, reverted.leader) == ((0,), (0,), (), -1)
    tp = TopicPartition("a", 0)
    assert image_violations(c.image, c.control.config) == ["a-0: ISR (0,) holds inactive brokers [0]"]
    assert image_violations(c.image, c.control.config, unclean_reverts={tp: reverted.partition_epoch}) == []
    c.now_ms += 1
    c.control.apply(c.control.heartbeat(1, c.epochs[1], c.now_ms).records)
    done = c.control.heartbeat(0, c.epochs[0], c.now_ms, want_shutdown=True, metadata_offset=len(c.records))
    c.control.apply(done.records)
    assert done.response.should_shut_down
    after = c.partition("a")
    assert (after.isr, after.elr, after.leader) == ((), (0,), -1)
    assert after.partition_epoch > reverted.partition_epoch
    assert image_violations(c.image, c.control.config, unclean_reverts={tp: reverted.partition_epoch}) == []
