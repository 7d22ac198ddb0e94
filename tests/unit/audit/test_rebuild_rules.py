"""Each rule of `hightide.audit.rebuild`, on a hand-written history.

Method: given a few events written out as a broker or a controller would emit them (in envelopes, with sequences
and wall-clock times), when the history is rebuilt, then each replica and partition is what the rule says, and a
history that contradicts itself is reported as an anomaly naming the event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hightide.audit.rebuild import ClusterState, PartitionState, ReplicaState, rebuild
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event

T = "orders"
KEY = (T, 0, 1)


def broker(broker_id: int = 1, incarnation: str = "a") -> Emitter:
    return Emitter("broker", broker_id, incarnation)


def controller(controller_id: int = 100, incarnation: str = "c") -> Emitter:
    return Emitter("controller", controller_id, incarnation)


def emitted(emitter: Emitter, first_wall_ms: int, *happened: Event, first_sequence: int = 0) -> list[Envelope]:
    """One incarnation's events in order, one ms apart."""
    return [
        Envelope("test", emitter, first_sequence + i, first_wall_ms + i, i, event) for i, event in enumerate(happened)
    ]


def opened(
    leo: int = 0, hw: int = 0, lso: int = 0, epochs: Sequence[tuple[int, int]] = (), reason: str = "created", b: int = 1
) -> events.LogOpened:
    return events.LogOpened(
        topic=T,
        partition=0,
        replica=b,
        log_start_offset=lso,
        log_end_offset=leo,
        high_watermark=hw,
        leader_epochs=tuple(epochs),
        reason=reason,
    )


def appended(base: int, last: int, epoch: int = 0, b: int = 1) -> events.RecordsAppended:
    return events.RecordsAppended(
        topic=T,
        partition=0,
        replica=b,
        leader_epoch=epoch,
        base_offset=base,
        last_offset=last,
        record_count=last - base + 1,
        size_bytes=100,
        log_end_offset=last + 1,
        as_leader=True,
    )


def epoch_started(epoch: int, start: int, b: int = 1) -> events.LeaderEpochStarted:
    return events.LeaderEpochStarted(topic=T, partition=0, replica=b, leader_epoch=epoch, start_offset=start)


def hw_advanced(previous: int, hw: int, b: int = 1) -> events.HighWatermarkAdvanced:
    return events.HighWatermarkAdvanced(
        topic=T, partition=0, replica=b, leader_epoch=0, previous=previous, high_watermark=hw
    )


def truncated(before: int, to: int, hw_before: int, hw: int, reason: str = "divergence") -> events.LogTruncated:
    return events.LogTruncated(
        topic=T,
        partition=0,
        replica=1,
        log_end_offset_before=before,
        truncated_to=to,
        high_watermark_before=hw_before,
        high_watermark=hw,
        leader_epoch=3,
        reason=reason,
    )


def changed(partition_epoch: int, leader: int, isr: tuple[int, ...], leader_epoch: int = 0) -> events.PartitionChanged:
    return events.PartitionChanged(
        topic=T,
        partition=0,
        replicas=(1, 2, 3),
        isr=isr,
        elr=(),
        last_known_elr=(),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        reason="election",
    )


def created(topic_id: str = "id-1") -> events.TopicCreated:
    return events.TopicCreated(topic=T, topic_id=topic_id, partitions=1, replication_factor=3, configs=())


def elected(controller_id: int, controller_epoch: int) -> events.ControllerElected:
    return events.ControllerElected(controller=controller_id, controller_epoch=controller_epoch)


def details(state: ClusterState) -> list[str]:
    return [f"{a.event_type}: {a.detail}" for a in state.anomalies]


# -- replicas ----------------------------------------------------------------------------------------------------


def test_appends_epochs_and_the_high_watermark_make_a_leaders_replica() -> None:
    history = emitted(
        broker(),
        1_000,
        opened(),
        epoch_started(0, 0),
        appended(0, 4),
        hw_advanced(0, 3),
        epoch_started(1, 5),
        appended(5, 5, epoch=1),
        hw_advanced(3, 6),
    )
    state = rebuild(history)
    assert state.replicas == {KEY: ReplicaState(6, 6, 0, ((0, 0), (1, 5)))}
    assert state.anomalies == ()


def test_an_epoch_from_the_past_cuts_the_newer_entries_as_kafkas_assign_does() -> None:
    history = emitted(broker(), 1_000, opened(6, 6, 0, ((1, 5), (2, 6))), epoch_started(1, 6))
    assert rebuild(history).replicas[KEY].epoch_entries == ((1, 6),)  # epoch 1 again: every entry from 1 on goes
    history = emitted(broker(), 1_000, opened(7, 7, 0, ((1, 5), (2, 6))), epoch_started(1, 4))
    assert rebuild(history).replicas[KEY].epoch_entries == ((1, 4),)


def test_a_divergence_truncation_cuts_the_log_the_high_watermark_and_the_epochs() -> None:
    history = emitted(
        broker(), 1_000, opened(10, 8, 2, ((0, 2), (1, 6), (3, 9))), truncated(before=10, to=6, hw_before=8, hw=6)
    )
    assert rebuild(history).replicas[KEY] == ReplicaState(6, 6, 2, ((0, 2),))


def test_a_truncation_below_the_log_start_moves_it_down() -> None:
    history = emitted(broker(), 1_000, opened(10, 8, 7, ((0, 7),)), truncated(before=10, to=5, hw_before=8, hw=5))
    assert rebuild(history).replicas[KEY] == ReplicaState(5, 5, 5, ())


def test_starting_over_behind_the_leaders_log_start_empties_the_log_there() -> None:
    history = emitted(
        broker(), 1_000, opened(10, 8, 0, ((0, 0), (1, 6))), truncated(10, 40, 8, 40, reason="start_over")
    )
    assert rebuild(history).replicas[KEY] == ReplicaState(40, 40, 40, ())


def test_an_epoch_led_without_writing_is_dropped_with_the_log_unchanged() -> None:
    dropped = events.LeaderEpochsTruncated(topic=T, partition=0, replica=1, end_offset=6)
    history = emitted(broker(), 1_000, opened(6, 6, 0, ((0, 0), (4, 6))), dropped)
    assert rebuild(history).replicas[KEY] == ReplicaState(6, 6, 0, ((0, 0),))


def test_the_log_start_offset_moves_the_epoch_it_falls_in() -> None:
    moved = events.LogStartOffsetAdvanced(topic=T, partition=0, replica=1, log_start_offset=8, reason="retention")
    history = emitted(broker(), 1_000, opened(12, 10, 0, ((0, 0), (1, 6), (2, 9))), moved)
    assert rebuild(history).replicas[KEY] == ReplicaState(12, 10, 8, ((1, 8), (2, 9)))


def test_a_restart_replaces_the_replica_with_what_recovery_announced() -> None:
    """Given a replica at LEO 20 and HW 18, when its broker restarts after kill -9 (a new incarnation, later on the
    wall clock) and recovery cut the tail to 15 with the checkpointed HW at 12, then that is the replica."""
    before = emitted(
        broker(incarnation="z-first"), 1_000, opened(), epoch_started(0, 0), appended(0, 19), hw_advanced(0, 18)
    )
    after = emitted(broker(incarnation="a-second"), 5_000, opened(15, 12, 0, ((0, 0),), reason="recovered"))
    state = rebuild(after + before)  # any input order: incarnations go by their first wall-clock time
    assert state.replicas == {KEY: ReplicaState(15, 12, 0, ((0, 0),))}
    assert state.anomalies == ()


def test_a_deleted_replica_is_gone_and_an_event_for_it_after_is_reported() -> None:
    gone = events.LogDeleted(topic=T, partition=0, replica=1, log_end_offset=5, reason="topic_deleted")
    history = emitted(broker(), 1_000, opened(), appended(0, 4), gone)
    assert rebuild(history).replicas == {}
    state = rebuild(emitted(broker(), 1_000, opened(), appended(0, 4), gone, hw_advanced(0, 5)))
    assert state.replicas == {KEY: ReplicaState(0, 5, 0, ())}
    assert details(state) == [
        f"HighWatermarkAdvanced: replica {KEY} was never opened (or was deleted)",
        "HighWatermarkAdvanced: log start <= HW <= LEO broken: "
        "ReplicaState(log_end_offset=0, high_watermark=5, log_start_offset=0, epoch_entries=())",
    ]


def test_an_offline_replica_leaves_the_live_set_until_its_broker_reopens_it() -> None:
    """Given a replica whose disk refused an append after offset 4, when ReplicaOffline says so, then it is out of
    the live replicas; a LogOpened of its broker's next incarnation brings it back with what recovery left. An
    offline replica's LEO that contradicts its appends is reported."""
    offline = events.ReplicaOffline(
        topic=T, partition=0, replica=1, log_end_offset=5, error="KAFKA_STORAGE_ERROR", detail="disk full"
    )
    before = emitted(broker(), 1_000, opened(), appended(0, 4), offline)
    assert rebuild(before).replicas == {}
    after = emitted(broker(incarnation="a-second"), 5_000, opened(5, 0, 0, ((0, 0),), reason="recovered"))
    assert rebuild(before + after).replicas == {KEY: ReplicaState(5, 0, 0, ((0, 0),))}
    wrong = events.ReplicaOffline(
        topic=T, partition=0, replica=1, log_end_offset=9, error="KAFKA_STORAGE_ERROR", detail="disk full"
    )
    assert details(rebuild(emitted(broker(), 1_000, opened(), appended(0, 4), wrong))) == [
        "ReplicaOffline: LEO is 9 in the event but 5 in the history"
    ]


def test_a_replica_whose_log_could_not_be_created_or_opened_goes_offline_without_an_anomaly() -> None:
    """Given a broker whose failing disk refuses to create a newly assigned replica's log, or to open one as the broker
    starts (both found by the simulation once its producers kept five batches in flight: a reassignment onto a broker
    whose disk had just filled up, seed 0; a restart onto a failing disk, seed 29), when it reports that replica
    offline with no LogOpened before, then nothing is open and nothing contradicts; the replica stays out of the live
    set until a LogOpened brings it back."""
    refused = events.ReplicaOffline(
        topic=T, partition=0, replica=1, log_end_offset=0, error="KAFKA_STORAGE_ERROR", detail="CreateLog refused"
    )
    state = rebuild(emitted(broker(), 1_000, refused))
    assert (state.replicas, state.anomalies) == ({}, ())
    at_restart = dataclasses.replace(refused, log_end_offset=3, detail="OpenLog refused")
    history = emitted(broker(), 1_000, opened(), appended(0, 2)) + emitted(broker(incarnation="b"), 2_000, at_restart)
    state = rebuild(history)
    assert (state.replicas, state.anomalies) == ({}, ())  # a restart closes every replica until its LogOpened


def test_another_broker_is_another_replica() -> None:
    history = emitted(broker(1), 1_000, opened(), appended(0, 2)) + emitted(broker(2), 1_000, opened(b=2))
    assert rebuild(history).replicas == {KEY: ReplicaState(3, 0, 0, ()), (T, 0, 2): ReplicaState(0, 0, 0, ())}


# -- order, and a history that contradicts itself ---------------------------------------------------------------


def test_one_incarnations_events_go_by_sequence_and_an_exact_duplicate_is_dropped() -> None:
    history = emitted(broker(), 1_000, opened(), appended(0, 1), appended(2, 4))
    state = rebuild([history[2], history[0], history[1], history[2]])
    assert state.replicas[KEY].log_end_offset == 5
    assert state.anomalies == ()


def test_a_sequence_gap_is_reported_as_lost_events() -> None:
    history = emitted(broker(), 1_000, opened(), appended(0, 1), appended(2, 4))
    state = rebuild([history[0], history[2]])
    assert details(state) == [
        "RecordsAppended: sequence 2 follows 0: events lost",
        "RecordsAppended: base offset (the LEO before) is 2 in the event but 0 in the history",
    ]
    assert state.replicas[KEY].log_end_offset == 5  # the fold goes on by the rules


def test_two_different_events_with_one_sequence_number_are_reported() -> None:
    history = emitted(broker(), 1_000, opened(), appended(0, 1))
    clash = Envelope("test", broker(), 1, 1_001, 1, appended(0, 3))
    assert details(rebuild([*history, clash])) == ["RecordsAppended: two different events with one sequence number"]


def test_an_event_that_contradicts_the_state_before_it_is_reported() -> None:
    leader = events.BecameLeader(
        topic=T,
        partition=0,
        replica=1,
        leader_epoch=1,
        partition_epoch=1,
        replicas=(1,),
        isr=(1,),
        log_end_offset=9,
        high_watermark=2,
    )
    history = emitted(broker(), 1_000, opened(), appended(0, 4), hw_advanced(1, 2), leader, truncated(7, 3, 2, 2))
    assert details(rebuild(history)) == [
        "HighWatermarkAdvanced: previous HW is 1 in the event but 0 in the history",
        "BecameLeader: LEO is 9 in the event but 5 in the history",
        "LogTruncated: LEO before is 7 in the event but 5 in the history",
    ]


def test_events_of_a_replica_never_opened_or_from_another_broker_are_reported() -> None:
    state = rebuild(emitted(broker(1), 1_000, appended(0, 0), opened(b=2)))
    assert details(state) == [
        f"RecordsAppended: replica {KEY} was never opened (or was deleted)",
        "LogOpened: replica 2's event emitted by 1",
    ]


def test_an_epoch_beyond_the_log_end_at_the_end_of_the_history_is_reported() -> None:
    state = rebuild(emitted(broker(), 1_000, opened(), epoch_started(0, 0), epoch_started(1, 3)))
    assert details(state) == [
        "LeaderEpochStarted: an epoch starts beyond the LEO: ReplicaState(log_end_offset=0, high_watermark=0, "
        "log_start_offset=0, epoch_entries=((0, 0), (1, 3)))"
    ]


# -- partitions ------------------------------------------------------------------------------------------------


def test_a_partition_is_its_latest_change_by_partition_epoch() -> None:
    history = emitted(controller(), 1_000, elected(100, 1), created(), changed(0, 1, (1, 2, 3)), changed(1, 1, (1, 2)))
    state = rebuild(history)
    assert state.partitions == {(T, 0): PartitionState((1, 2, 3), (1, 2), (), (), 1, 0, 1)}
    assert state.anomalies == ()


def test_a_new_controller_continues_by_partition_epoch_whatever_its_process_start() -> None:
    """Controller 200 started before controller 100 (its first event is earlier) but won the lease later."""
    first = emitted(controller(200, "x"), 500, elected(200, 2), changed(2, 3, (3,), leader_epoch=1))
    second = emitted(
        controller(100, "y"), 1_000, elected(100, 1), created(), changed(0, 1, (1, 2, 3)), changed(1, 1, (1,))
    )
    state = rebuild(first + second)
    assert state.partitions[(T, 0)] == PartitionState((1, 2, 3), (3,), (), (), 3, 1, 2)
    assert state.anomalies == ()


def test_controller_terms_order_a_deletion_between_two_lives_of_a_topic() -> None:
    """Terms 1 and 3 are one controller process, term 2 another: by process, the deletion would come last."""
    deleted = events.TopicDeleted(topic=T, topic_id="id-1")
    one = emitted(
        controller(100),
        1_000,
        elected(100, 1),
        created("id-1"),
        changed(0, 1, (1, 2, 3)),
        changed(1, 2, (2, 3), leader_epoch=1),
        elected(100, 3),
        created("id-2"),
        changed(0, 3, (3, 1, 2)),
    )
    two = emitted(controller(200), 2_000, elected(200, 2), deleted)
    state = rebuild(one + two)
    assert state.partitions == {(T, 0): PartitionState((1, 2, 3), (3, 1, 2), (), (), 3, 0, 0)}
    assert state.anomalies == ()


def test_a_deleted_topic_has_no_partitions_and_a_late_change_of_it_is_ignored() -> None:
    deleted = events.TopicDeleted(topic=T, topic_id="id-1")
    state = rebuild(
        emitted(controller(), 1_000, elected(100, 1), created(), changed(0, 1, (1,)), deleted, changed(1, 1, ()))
    )
    assert state.partitions == {}
    assert details(state) == [f"PartitionChanged: a change of deleted topic {T}: ignored"]


def test_a_partition_epoch_going_back_is_reported_and_not_applied() -> None:
    history = emitted(
        controller(), 1_000, elected(100, 1), created(), changed(0, 1, (1, 2)), changed(2, 2, (2,)), changed(1, 1, (1,))
    )
    state = rebuild(history)
    assert state.partitions[(T, 0)].partition_epoch == 2
    assert details(state) == ["PartitionChanged: partition epoch 1 after 2"]


def marked_offline(replica: int, broker_epoch: int = 7) -> events.ReplicaMarkedOffline:
    return events.ReplicaMarkedOffline(topic=T, partition=0, replica=replica, broker_epoch=broker_epoch)


def registered(broker_id: int, broker_epoch: int) -> events.BrokerRegistered:
    return events.BrokerRegistered(broker=broker_id, broker_epoch=broker_epoch, previous_broker_epoch=-1, fenced=True)


def test_a_replica_marked_offline_stays_offline_until_its_broker_registers_again() -> None:
    """Replicas 2 and 3 go offline; broker 3 registers again (after its log recovery): only 2 is still offline."""
    history = emitted(
        controller(),
        1_000,
        elected(100, 1),
        created(),
        changed(0, 1, (1, 2, 3)),
        marked_offline(2),
        changed(1, 1, (1, 3)),
        marked_offline(3),
        changed(2, 1, (1,)),
        registered(3, 20),
    )
    state = rebuild(history)
    assert state.offline_replicas == {(T, 0): (2,)}
    assert state.partitions[(T, 0)].isr == (1,)
    assert state.anomalies == ()


def test_offline_replicas_end_with_their_topics_life() -> None:
    history = emitted(
        controller(),
        1_000,
        elected(100, 1),
        created("id-1"),
        marked_offline(2),
        events.TopicDeleted(topic=T, topic_id="id-1"),
        created("id-2"),
    )
    assert rebuild(history).offline_replicas == {}


# -- controller decisions written ahead: intents that never committed ------------------------------------------
# A controller stores a decision's events (stamped with its epoch and the metadata offset it lands at) before it
# appends the decision; the next controller's takeover offset tells the history which intents never committed.


def takeover(controller_id: int, controller_epoch: int, offset: int) -> events.ControllerElected:
    return events.ControllerElected(controller=controller_id, controller_epoch=controller_epoch, metadata_offset=offset)


def at(event: events.Event, controller_epoch: int, offset: int) -> events.Event:
    return events.stamped(event, controller_epoch, offset)


def first_term(*then: Event) -> list[Envelope]:
    """Controller 100, epoch 1, took over at offset 1 and created the topic at offset 2."""
    return emitted(
        controller(100), 1_000, takeover(100, 1, 1), at(created(), 1, 2), at(changed(0, 1, (1, 2, 3)), 1, 2), *then
    )


def test_an_intent_overtaken_by_the_next_takeover_is_left_out_and_the_next_controllers_decision_stands() -> None:
    """Given epoch 1 killed after storing the events of a shrink to [1, 2] at offset 3 but before appending it,
    and epoch 2 taking over at offset 3 and shrinking to [1, 3], when the history is rebuilt, then the partition is
    epoch 2's, epoch 1's intent is listed as abandoned, and nothing is reported."""
    history = first_term(at(changed(1, 1, (1, 2)), 1, 3))
    history += emitted(controller(200), 5_000, takeover(200, 2, 3), at(changed(1, 1, (1, 3)), 2, 4))
    state = rebuild(history)
    assert state.partitions[(T, 0)] == PartitionState((1, 2, 3), (1, 3), (), (), 1, 0, 1)
    assert [(a.event_type, a.controller_epoch, a.metadata_offset, a.committed_below) for a in state.abandoned] == [
        ("PartitionChanged", 1, 3, 3)
    ]
    assert state.anomalies == ()


def test_without_the_rule_the_abandoned_intent_would_win() -> None:
    """The same history with its stamps removed (version 1 events): the fold keeps epoch 1's intent and reports
    epoch 2's committed change as a contradiction. The stamps are what tell them apart."""
    history = emitted(
        controller(100), 1_000, elected(100, 1), created(), changed(0, 1, (1, 2, 3)), changed(1, 1, (1, 2))
    )
    history += emitted(controller(200), 5_000, elected(200, 2), changed(1, 1, (1, 3)))
    state = rebuild(history)
    assert state.partitions[(T, 0)].isr == (1, 2)
    assert details(state) == ["PartitionChanged: partition epoch 1 after 1"]


def test_a_decision_below_the_next_takeover_committed_and_is_kept() -> None:
    history = first_term(at(changed(1, 1, (1, 2)), 1, 3))
    history += emitted(controller(200), 5_000, takeover(200, 2, 4), at(changed(2, 2, (2,), leader_epoch=1), 2, 5))
    state = rebuild(history)
    assert state.partitions[(T, 0)] == PartitionState((1, 2, 3), (2,), (), (), 2, 1, 2)
    assert (state.abandoned, state.anomalies) == ((), ())


def test_the_last_controllers_last_intent_counts_as_committed_until_a_takeover_says_otherwise() -> None:
    state = rebuild(first_term(at(changed(1, 1, (1, 2)), 1, 3)))
    assert state.partitions[(T, 0)].isr == (1, 2)
    assert state.abandoned == ()


def test_a_failed_takeover_without_its_controller_elected_does_not_hide_a_decision() -> None:
    """Epoch 2's takeover batch was fenced (epoch 1's late append landed first), so epoch 2 never announced
    itself; epoch 3 took over after that batch. Epoch 1's decision at offset 3 committed."""
    history = first_term(at(changed(1, 1, (1, 2)), 1, 3))
    history += emitted(controller(200), 5_000, takeover(200, 3, 4))
    assert rebuild(history).partitions[(T, 0)].isr == (1, 2)


def test_an_intent_whose_append_was_fenced_is_left_out_even_when_the_takeover_that_fenced_it_is_missing() -> None:
    """The double fault: epoch 2 took over at offset 3 (fencing epoch 1's append of offset 3) and was killed before
    its ControllerElected; epoch 3 took over at 4. Epoch 1's own ControllerDeposed (append_fenced, after offset 2)
    says its intent at 3 never landed."""
    fenced = events.ControllerDeposed(controller=100, controller_epoch=1, reason="append_fenced", metadata_offset=2)
    history = first_term(at(changed(1, 1, (1, 2)), 1, 3), fenced)
    history += emitted(controller(200), 5_000, takeover(200, 3, 4), at(changed(1, 1, (1, 3)), 3, 5))
    state = rebuild(history)
    assert state.partitions[(T, 0)].isr == (1, 3)
    assert [(a.metadata_offset, a.committed_below) for a in state.abandoned] == [(3, 3)]
    assert state.anomalies == ()


def test_an_append_that_failed_with_an_unknown_outcome_hides_nothing() -> None:
    """append_failed (a timeout): the batch may have landed, so only a takeover decides."""
    failed = events.ControllerDeposed(controller=100, controller_epoch=1, reason="append_failed", metadata_offset=2)
    history = first_term(at(changed(1, 1, (1, 2)), 1, 3), failed)
    history += emitted(controller(200), 5_000, takeover(200, 2, 4))
    assert rebuild(history).partitions[(T, 0)].isr == (1, 2)


def test_a_deposed_controllers_event_changes_no_partition() -> None:
    deposed = events.ControllerDeposed(controller=100, controller_epoch=1, reason="append_fenced", metadata_offset=2)
    state = rebuild(first_term(deposed))
    assert state.partitions[(T, 0)].isr == (1, 2, 3)
    assert (state.abandoned, state.anomalies) == ((), ())


def test_two_committed_decisions_of_different_epochs_at_one_offset_are_reported() -> None:
    """A batch has one writer: epoch 2 claiming offset 2, below its own takeover, contradicts epoch 1's."""
    history = first_term()
    history += emitted(controller(200), 5_000, takeover(200, 2, 3), at(changed(1, 1, (1, 3)), 2, 2))
    assert details(rebuild(history)) == [
        "PartitionChanged: decisions of controller epochs 1 and 2 at metadata offset 2"
    ]
