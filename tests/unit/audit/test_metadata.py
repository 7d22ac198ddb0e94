"""The metadata invariants of `hightide.audit.checks.metadata` (A1-A6), each on a hand-written history.

Method: given a controller's committed decisions and brokers' leadership events written out as they would be
emitted (tests/support/metadata_histories.py: envelopes with controller epochs and metadata offsets), when a check
runs over the history, then a clean history gives no finding and a history that breaks the rule gives exactly the
finding that names the partition, the brokers and the events involved (`cid(n)`: the controller's event at
sequence n; `bid(b, n)`: broker b's).
"""

from __future__ import annotations

from hightide.audit.checks.metadata import CHECKS
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.protocol.envelope import Envelope
from support.metadata_histories import (
    T,
    bid,
    broker_epoch_going_down,
    cid,
    clean_lives,
    election_outside_isr,
    elr_election,
    elr_kept_at_the_controllers_min_isr,
    epochs_going_back,
    leader_outside_isr,
    malformed_isr_and_elr,
    min_isr_altered_later,
    reassignment_election,
    two_leaders_in_one_epoch,
    unbacked_leader,
)


def run(name: str, history: list[Envelope]) -> list[Finding]:
    return sorted(CHECKS[name](History.of(history)))


def test_a_clean_history_with_a_failover_an_abandoned_intent_and_a_new_life_gives_no_finding() -> None:
    """Given a topic created with min.insync.replicas=2, an ISR shrink, a fenced leader replaced from the ISR, an
    intent of a deposed controller that never committed (it names broker 3 leader of epoch 2, as broker 2 stays in
    the committed history), the topic deleted and created again with broker 2 leading epoch 0 this time, and the
    brokers following along, when every metadata check runs, then none finds anything."""
    history = History.of(clean_lives())
    assert [f for check in CHECKS.values() for f in check(history)] == []


# -- A1 -----------------------------------------------------------------------------------------------------------


def test_two_committed_leaders_in_one_epoch_are_one_finding() -> None:
    """Given leader epoch 1 given to broker 2 and then to broker 3, when one_leader_per_epoch runs, then one finding
    names both PartitionChanged and brokers 2 and 3."""
    assert run("one_leader_per_epoch", two_leaders_in_one_epoch()) == [
        Finding(
            "one_leader_per_epoch",
            topic=T,
            partition=0,
            events=(cid(2), cid(3)),
            detail="leader epoch 1 led by brokers 2 and 3",
        )
    ]


def test_a_broker_leading_an_epoch_the_controller_gave_another_is_a_finding() -> None:
    """Given the controller made broker 1 leader of epoch 0, when broker 2 also says it became leader in epoch 0,
    then the finding names broker 2's BecameLeader and the PartitionChanged of that epoch; and broker 3 leading
    epoch 7, which no PartitionChanged reached, is found with its BecameLeader alone."""
    assert run("one_leader_per_epoch", unbacked_leader()) == [
        Finding(
            "one_leader_per_epoch",
            topic=T,
            partition=0,
            replica=2,
            events=(bid(2, 1), cid(1)),
            detail="leader epoch 0 led by broker 2, which no committed PartitionChanged made its leader",
        ),
        Finding(
            "one_leader_per_epoch",
            topic=T,
            partition=0,
            replica=3,
            events=(bid(3, 0),),
            detail="leader epoch 7 led by broker 3, which no committed PartitionChanged made its leader",
        ),
    ]


# -- A2, A3 ------------------------------------------------------------------------------------------------------


def test_a_leader_change_without_a_new_leader_epoch_and_a_partition_epoch_going_back_are_found() -> None:
    """Given broker 1 leading epoch 0, when the leader moves to broker 2 still in epoch 0, and a later change
    carries partition epoch 1 again, then two findings name those pairs of events."""
    assert run("epochs_monotonic", epochs_going_back()) == [
        Finding("epochs_monotonic", T, 0, events=(cid(1), cid(2)), detail="leader 1 -> 2 kept leader epoch 0"),
        Finding("epochs_monotonic", T, 0, events=(cid(2), cid(3)), detail="partition epoch 1 after 1"),
    ]


def test_a_brokers_leader_epoch_going_down_within_an_incarnation_is_found_but_not_across_restarts() -> None:
    """Given broker 3 following in epoch 4 and then in epoch 4 again (a partition-epoch-only change: fine), when it
    then follows in epoch 3 in the same incarnation, then the finding names its events 1 and 2; after a restart
    (a new incarnation) epoch 2 is not compared with what came before."""
    assert run("epochs_monotonic", broker_epoch_going_down()) == [
        Finding(
            "epochs_monotonic",
            T,
            0,
            replica=3,
            events=(bid(3, 1), bid(3, 2)),
            detail="broker 3 went from leader epoch 4 to 3",
        )
    ]


# -- A4, A5 -------------------------------------------------------------------------------------------------------


def test_a_leader_outside_its_isr_is_found() -> None:
    assert run("leader_in_isr", leader_outside_isr()) == [
        Finding("leader_in_isr", T, 0, replica=3, events=(cid(1),), detail="leader 3 not in ISR [1,2]")
    ]


def test_isr_and_elr_that_break_kip_966s_shape_give_one_finding_per_clause() -> None:
    """Given a topic with min.insync.replicas=2, when a change has ISR [1,2,2] (a repeat), ELR [2,4] (4 is no
    replica, 2 is also in the ISR) and an ELR kept while the ISR has 2 members, then four findings say so; the same
    change in a topic that does not set min.insync.replicas leaves the last clause out."""
    found = run("isr_elr_well_formed", malformed_isr_and_elr("2"))
    assert sorted(f.detail for f in found) == sorted(
        [
            "ISR [1,2,2] repeat a broker",
            "ELR [2,4] not within replicas [1,2,3]",
            "ISR [1,2,2] and ELR [2,4] share a broker",
            "ELR [2,4] kept while ISR [1,2,2] reaches min.insync.replicas 2",
        ]
    )
    assert {f.events for f in found} == {(cid(1),)}
    assert len(run("isr_elr_well_formed", malformed_isr_and_elr(None))) == 3


def test_a_min_isr_altered_later_applies_from_its_place_in_metadata_order() -> None:
    """Given a topic without min.insync.replicas and ISR [1,2] with ELR [3], when the config is set to 2 and then
    a change keeps that ELR, then only the change after the alteration is found: not the one before it, nor the
    one after the config was removed again (no ControllerElected names the cluster's default here)."""
    assert run("isr_elr_well_formed", min_isr_altered_later()) == [
        Finding(
            "isr_elr_well_formed",
            T,
            0,
            events=(cid(3),),
            detail="ELR [3] kept while ISR [1,2] reaches min.insync.replicas 2",
        )
    ]


def test_a_topic_without_min_isr_is_held_to_its_controllers_own() -> None:
    """Given a controller whose ControllerElected names min.insync.replicas 2 and a topic created without the
    config, when a change keeps ELR [3] while ISR [1,2] has 2 members, then it is found as for a topic that sets 2."""
    assert run("isr_elr_well_formed", elr_kept_at_the_controllers_min_isr()) == [
        Finding(
            "isr_elr_well_formed",
            T,
            0,
            events=(cid(2, 101),),
            detail="ELR [3] kept while ISR [1,2] reaches min.insync.replicas 2",
        )
    ]


# -- A6 -----------------------------------------------------------------------------------------------------------


def test_a_clean_election_from_outside_the_isr_is_found_twice_and_a_recorded_unclean_one_is_not() -> None:
    """Given ISR [1,2] led by 1, when the controller records a clean election of broker 3, then the recorded
    election is found (against the ISR before it) and so is the leader change itself; when the same change is
    recorded as unclean, nothing is found here (the loss attribution reports it)."""
    assert run("election_from_isr_or_elr", election_outside_isr("clean")) == [
        Finding(
            "election_from_isr_or_elr",
            T,
            0,
            replica=3,
            events=(cid(1), cid(2)),
            detail="leader 1 -> 3 from outside ISR [1,2] and ELR []",
        ),
        Finding(
            "election_from_isr_or_elr",
            T,
            0,
            replica=3,
            events=(cid(1), cid(3)),
            detail="clean election of broker 3 from outside the ISR [1,2] before it",
        ),
    ]
    assert run("election_from_isr_or_elr", election_outside_isr("unclean")) == []


def test_an_elr_election_must_choose_from_the_elr() -> None:
    """Given an empty ISR with ELR [2], when an elr election chooses broker 3, then it is found; choosing 2 is not."""
    found = run("election_from_isr_or_elr", elr_election(3))
    assert [f.detail for f in found] == [
        "leader -1 -> 3 from outside ISR [] and ELR [2]",
        "elr election of broker 3 from outside the ELR [2] before it",
    ]
    assert run("election_from_isr_or_elr", elr_election(2)) == []


# -- partition reassignment (issue 13) -------------------------------------------------------------------------


def test_a_reassignment_election_chooses_from_the_isr_its_change_left() -> None:
    """Given a reassignment to 6,4,5 completed by the AlterPartition that brings 6 into the ISR, when the removed
    leader 1 is replaced by 6 (Kafka's first target replica in the target ISR, though it was not in the ISR
    before), then nothing is found; a reassignment election of broker 3, which left with the change, is found."""
    clean = History.of(reassignment_election(6))
    assert [f for check in CHECKS.values() for f in check(clean)] == []
    assert [f.detail for f in run("election_from_isr_or_elr", reassignment_election(3))] == [
        "reassignment election of broker 3 from outside the ISR [4,5,6] its change left"
    ]
