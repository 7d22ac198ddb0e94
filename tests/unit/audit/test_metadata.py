"""The metadata invariants of `hightide.audit.checks.metadata` (A1-A6), each on a hand-written history.

Method: given a controller's committed decisions and brokers' leadership events written out as they would be
emitted (in envelopes, with controller epochs and metadata offsets), when a check runs over the history, then a
clean history gives no finding and a history that breaks the rule gives exactly the finding that names the
partition, the brokers and the events involved.
"""

from __future__ import annotations

from collections.abc import Sequence

from hightide.audit.checks.metadata import CHECKS
from hightide.audit.findings import Finding, event_id
from hightide.audit.history import History
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event

T = "orders"
CONTROLLER = Emitter("controller", 100, "c")


def broker(broker_id: int, incarnation: str = "a") -> Emitter:
    return Emitter("broker", broker_id, incarnation)


def emitted(emitter: Emitter, first_wall_ms: int, *happened: Event) -> list[Envelope]:
    """One incarnation's events in order, one ms apart."""
    return [Envelope("test", emitter, i, first_wall_ms + i, i, event) for i, event in enumerate(happened)]


def cid(sequence: int) -> str:
    """The id of the controller's event at `sequence` (its place in `decisions`)."""
    return event_id("controller", 100, "c", sequence)


def bid(broker_id: int, sequence: int, incarnation: str = "a") -> str:
    return event_id("broker", broker_id, incarnation, sequence)


def elected(epoch: int = 1, offset: int = 0) -> events.ControllerElected:
    return events.ControllerElected(controller=100, controller_epoch=epoch, metadata_offset=offset)


def created(offset: int, configs: Sequence[tuple[str, str]] = (), topic_id: str = "id-1") -> events.TopicCreated:
    return events.TopicCreated(
        topic=T,
        topic_id=topic_id,
        partitions=1,
        replication_factor=3,
        configs=tuple(configs),
        controller_epoch=1,
        metadata_offset=offset,
    )


def changed(
    offset: int,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: Sequence[int] = (1, 2, 3),
    elr: Sequence[int] = (),
    replicas: Sequence[int] = (1, 2, 3),
    reason: str = "election",
    controller_epoch: int = 1,
) -> events.PartitionChanged:
    return events.PartitionChanged(
        topic=T,
        partition=0,
        replicas=tuple(replicas),
        isr=tuple(isr),
        elr=tuple(elr),
        last_known_elr=(),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        reason=reason,
        controller_epoch=controller_epoch,
        metadata_offset=offset,
    )


def leader_elected(offset: int, previous: int, leader: int, leader_epoch: int, election: str = "clean") -> Event:
    return events.LeaderElected(
        topic=T,
        partition=0,
        previous_leader=previous,
        leader=leader,
        leader_epoch=leader_epoch,
        election=election,
        controller_epoch=1,
        metadata_offset=offset,
    )


def became_leader(b: int, leader_epoch: int, partition_epoch: int) -> events.BecameLeader:
    return events.BecameLeader(
        topic=T,
        partition=0,
        replica=b,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        log_end_offset=0,
        high_watermark=0,
    )


def became_follower(b: int, leader: int, leader_epoch: int, partition_epoch: int) -> events.BecameFollower:
    return events.BecameFollower(
        topic=T,
        partition=0,
        replica=b,
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        log_end_offset=0,
        high_watermark=0,
    )


def log_deleted(b: int, reason: str = "topic_deleted") -> events.LogDeleted:
    return events.LogDeleted(topic=T, partition=0, replica=b, log_end_offset=0, reason=reason)


def run(name: str, history: list[Envelope]) -> list[Finding]:
    return sorted(CHECKS[name](History.of(history)))


def all_findings(history: list[Envelope]) -> list[Finding]:
    return sorted(f for check in CHECKS.values() for f in check(History.of(history)))


# -- a clean history ----------------------------------------------------------------------------------------------


def test_a_clean_history_with_a_failover_an_abandoned_intent_and_a_new_life_gives_no_finding() -> None:
    """Given a topic created with min.insync.replicas=2, an ISR shrink, a fenced leader replaced from the ISR, an
    intent of a deposed controller that never committed (it names another leader for the same epoch), the topic
    deleted and created again with broker 2 leading epoch 0 this time, and the brokers following along (broker 2
    deleting its log between the lives), when every metadata check runs, then none finds anything."""
    decisions = [
        *emitted(
            CONTROLLER,
            1_000,
            elected(1, 0),
            created(1, [("min.insync.replicas", "2")]),
            changed(1, 1, 0, 0, reason="created"),
            changed(2, 1, 0, 1, isr=(1, 2), reason="isr_shrink"),
            changed(3, 2, 1, 2, isr=(2,), elr=(1,), reason="broker_fenced"),
            leader_elected(3, 1, 2, 1),
            changed(4, 3, 2, 3, isr=(3,), reason="broker_fenced"),  # abandoned: epoch 2 took over at offset 4
            elected(2, 4),
        ),
    ]
    controller2 = Emitter("controller", 101, "d")
    later = [
        stamp(changed(5, 2, 1, 3, isr=(2, 3), reason="isr_expand"), 2, 5),
        stamp(events.TopicDeleted(topic=T, topic_id="id-1"), 2, 6),
        stamp(created(7, topic_id="id-2"), 2, 7),
        stamp(changed(7, 2, 0, 0, isr=(2, 3, 1), replicas=(2, 3, 1), reason="created"), 2, 7),
    ]
    history = [
        *decisions,
        *emitted(controller2, 2_000, elected(2, 4), *later),
        *emitted(
            broker(2),
            1_000,
            became_follower(2, 1, 0, 0),
            became_follower(2, 1, 0, 1),
            became_leader(2, 1, 2),
            became_leader(2, 1, 3),
            log_deleted(2),
            became_leader(2, 0, 0),
        ),
        *emitted(broker(1), 1_000, became_leader(1, 0, 0), became_leader(1, 0, 1)),
        *emitted(broker(1, "b"), 3_000, became_follower(1, 2, 0, 0)),
    ]
    assert all_findings(history) == []


def stamp(event: Event, controller_epoch: int, offset: int) -> Event:
    return events.stamped(event, controller_epoch, offset)


# -- A1 -----------------------------------------------------------------------------------------------------------


def test_two_committed_leaders_in_one_epoch_are_one_finding() -> None:
    """Given leader epoch 1 given to broker 2 (offset 2) and then to broker 3 (offset 3, same epoch), when
    one_leader_per_epoch runs, then one finding names both PartitionChanged and brokers 2 and 3."""
    history = emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, reason="created"),
        changed(2, 2, 1, 1),
        changed(3, 3, 1, 2),
    )
    assert run("one_leader_per_epoch", history) == [
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
    then the finding names broker 2's BecameLeader and the PartitionChanged of that epoch."""
    history = [
        *emitted(CONTROLLER, 1_000, created(0), changed(1, 1, 0, 0, reason="created")),
        *emitted(broker(1), 1_000, became_leader(1, 0, 0)),
        *emitted(broker(2), 1_000, became_follower(2, 1, 0, 0), became_leader(2, 0, 0)),
    ]
    assert run("one_leader_per_epoch", history) == [
        Finding(
            "one_leader_per_epoch",
            topic=T,
            partition=0,
            replica=2,
            events=(bid(2, 1), cid(1)),
            detail="leader epoch 0 led by broker 2, which no committed PartitionChanged made its leader",
        )
    ]


# -- A2, A3 ------------------------------------------------------------------------------------------------------


def test_a_leader_change_without_a_new_leader_epoch_and_a_partition_epoch_going_back_are_found() -> None:
    """Given broker 1 leading epoch 0, when the leader moves to broker 2 still in epoch 0 (offset 2), and a later
    change carries partition epoch 1 again (offset 3), then two findings name those pairs of events."""
    history = emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, reason="created"),
        changed(2, 2, 0, 1),
        changed(3, 2, 0, 1, isr=(2, 3)),
    )
    assert run("epochs_monotonic", history) == [
        Finding("epochs_monotonic", T, 0, events=(cid(1), cid(2)), detail="leader 1 -> 2 kept leader epoch 0"),
        Finding("epochs_monotonic", T, 0, events=(cid(2), cid(3)), detail="partition epoch 1 after 1"),
    ]


def test_a_brokers_leader_epoch_going_down_within_an_incarnation_is_found_but_not_across_restarts() -> None:
    """Given broker 3 following in epoch 4 and then in epoch 4 again (a partition-epoch-only change: fine), when it
    then follows in epoch 3 in the same incarnation, then the finding names its events 1 and 2; after a restart
    (a new incarnation) epoch 2 is not compared with what came before."""
    history = [
        *emitted(
            CONTROLLER,
            1_000,
            created(0),
            changed(1, 1, 0, 0, reason="created"),
            changed(2, 1, 2, 1),
            changed(3, 1, 3, 2),
            changed(4, 1, 4, 3),
            changed(5, 1, 4, 4, isr=(1, 3)),
        ),
        *emitted(
            broker(3),
            1_000,
            became_follower(3, 1, 4, 3),
            became_follower(3, 1, 4, 4),
            became_follower(3, 1, 3, 2),
        ),
        *emitted(broker(3, "b"), 5_000, became_follower(3, 1, 2, 1)),
    ]
    assert run("epochs_monotonic", history) == [
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
    history = emitted(CONTROLLER, 1_000, created(0), changed(1, 3, 0, 0, isr=(1, 2), reason="created"))
    assert run("leader_in_isr", history) == [
        Finding("leader_in_isr", T, 0, replica=3, events=(cid(1),), detail="leader 3 not in ISR [1,2]")
    ]


def test_isr_and_elr_that_break_kip_966s_shape_give_one_finding_per_clause() -> None:
    """Given a topic with min.insync.replicas=2, when a change has ISR [1,2,2] (a repeat), ELR [2,4] (4 is no
    replica, 2 is also in the ISR) and an ELR kept while the ISR has 2 members, then four findings say so; the same
    change in a topic that does not set min.insync.replicas leaves the last clause out."""
    bad = changed(1, 1, 0, 0, isr=(1, 2, 2), elr=(2, 4), reason="created")
    history = emitted(CONTROLLER, 1_000, created(0, [("min.insync.replicas", "2")]), bad)
    details = [f.detail for f in run("isr_elr_well_formed", history)]
    assert sorted(details) == sorted(
        [
            "ISR [1,2,2] repeat a broker",
            "ELR [2,4] not within replicas [1,2,3]",
            "ISR [1,2,2] and ELR [2,4] share a broker",
            "ELR [2,4] kept while ISR [1,2,2] reaches min.insync.replicas 2",
        ]
    )
    assert {f.events for f in run("isr_elr_well_formed", history)} == {(cid(1),)}
    unset = emitted(CONTROLLER, 1_000, created(0), bad)
    assert len(run("isr_elr_well_formed", unset)) == 3


def test_a_min_isr_altered_later_applies_from_its_place_in_metadata_order() -> None:
    """Given a topic without min.insync.replicas and ISR [1,2] with ELR [3], when the config is set to 2 and then
    a change keeps that ELR, then only the change after the alteration is found."""
    altered = events.TopicConfigsAltered(
        topic=T, configs=(("min.insync.replicas", "2"),), controller_epoch=1, metadata_offset=2
    )
    history = emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, isr=(1, 2), elr=(3,), reason="created"),
        altered,
        changed(3, 1, 0, 1, isr=(1, 2), elr=(3,), reason="isr_shrink"),
    )
    assert run("isr_elr_well_formed", history) == [
        Finding(
            "isr_elr_well_formed",
            T,
            0,
            events=(cid(3),),
            detail="ELR [3] kept while ISR [1,2] reaches min.insync.replicas 2",
        )
    ]


# -- A6 -----------------------------------------------------------------------------------------------------------


def test_a_clean_election_from_outside_the_isr_is_found_twice_and_a_recorded_unclean_one_is_not() -> None:
    """Given ISR [1,2] led by 1, when the controller records a clean election of broker 3, then the recorded
    election is found (against the ISR before it) and so is the leader change itself; when the same change is
    recorded as unclean, nothing is found here (the loss attribution reports it)."""

    def history(election: str) -> list[Envelope]:
        return emitted(
            CONTROLLER,
            1_000,
            created(0),
            changed(1, 1, 0, 0, isr=(1, 2), reason="created"),
            changed(2, 3, 1, 1, isr=(3,)),
            leader_elected(2, 1, 3, 1, election),
        )

    assert run("election_from_isr_or_elr", history("clean")) == [
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
    assert run("election_from_isr_or_elr", history("unclean")) == []


def test_an_elr_election_must_choose_from_the_elr() -> None:
    """Given an empty ISR with ELR [2], when an elr election chooses broker 3, then it is found; choosing 2 is not."""

    def history(chosen: int) -> list[Envelope]:
        return emitted(
            CONTROLLER,
            1_000,
            created(0),
            changed(1, -1, 1, 1, isr=(), elr=(2,), reason="broker_fenced"),
            changed(2, chosen, 2, 2, isr=(chosen,)),
            leader_elected(2, -1, chosen, 2, "elr"),
        )

    found = run("election_from_isr_or_elr", history(3))
    assert [f.detail for f in found] == [
        "leader -1 -> 3 from outside ISR [] and ELR [2]",
        "elr election of broker 3 from outside the ELR [2] before it",
    ]
    assert run("election_from_isr_or_elr", history(2)) == []
