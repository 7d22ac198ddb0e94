"""The commit checks of `hightide.audit.checks.commits`, each on a hand-written history that breaks it and on one
that keeps it.

Method: given two brokers' events written out as their cores emit them (in envelopes, with sequences), when a
check runs over the history, then it names the offsets, the events and the cause the rule says. The seed
walkthrough is KIP-101's first scenario (reliability.md §9 S5): a follower with a stale HW truncates to it in the
legacy mode and is then elected, losing an acks=all record that the old leader had committed.
"""

from __future__ import annotations

from hightide.audit.checks.commits import CHECKS
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event

T = "orders"


def emitted(emitter: Emitter, *happened: Event) -> list[Envelope]:
    return [Envelope("test", emitter, i, 1_000 + i, i, event) for i, event in enumerate(happened)]


def broker(b: int) -> Emitter:
    return Emitter("broker", b, f"broker-{b}-0")


def eid(b: int, sequence: int) -> str:
    return f"broker:{b}:broker-{b}-0:{sequence}"


def opened(b: int) -> events.LogOpened:
    return events.LogOpened(
        topic=T, partition=0, replica=b, log_start_offset=0, log_end_offset=0, high_watermark=0, leader_epochs=(),
        reason="created",
    )  # fmt: skip


def epoch_started(b: int, epoch: int, start: int) -> events.LeaderEpochStarted:
    return events.LeaderEpochStarted(topic=T, partition=0, replica=b, leader_epoch=epoch, start_offset=start)


def leader(b: int, epoch: int, leo: int, hw: int = 0) -> events.BecameLeader:
    return events.BecameLeader(
        topic=T, partition=0, replica=b, leader_epoch=epoch, partition_epoch=epoch, replicas=(1, 2), isr=(1, 2),
        log_end_offset=leo, high_watermark=hw,
    )  # fmt: skip


def follower(b: int, epoch: int, of: int) -> events.BecameFollower:
    return events.BecameFollower(
        topic=T, partition=0, replica=b, leader=of, leader_epoch=epoch, partition_epoch=epoch, log_end_offset=0,
        high_watermark=0,
    )  # fmt: skip


def appended(b: int, base: int, last: int, epoch: int = 0) -> events.RecordsAppended:
    return events.RecordsAppended(
        topic=T, partition=0, replica=b, leader_epoch=epoch, base_offset=base, last_offset=last,
        record_count=last - base + 1, size_bytes=100, log_end_offset=last + 1, as_leader=b == 1,
    )  # fmt: skip


def hw(b: int, previous: int, high_watermark: int, epoch: int = 0) -> events.HighWatermarkAdvanced:
    return events.HighWatermarkAdvanced(
        topic=T, partition=0, replica=b, leader_epoch=epoch, previous=previous, high_watermark=high_watermark
    )


def acknowledged(b: int, base: int, last: int, high_watermark: int, acks: int = -1) -> events.ProduceCompleted:
    return events.ProduceCompleted(
        topic=T, partition=0, leader=b, leader_epoch=0, acks=acks, base_offset=base, last_offset=last,
        high_watermark=high_watermark, error="NONE",
    )  # fmt: skip


def old_leader(ack_hw: int = 2) -> list[Envelope]:
    """Broker 1 leads epoch 0, appends offsets 0..1, commits them (HW 2, event 4) and acknowledges them at acks=all
    (event 5)."""
    return emitted(
        broker(1), opened(1), epoch_started(1, 0, 0), leader(1, 0, 0), appended(1, 0, 1), hw(1, 0, 2),
        acknowledged(1, 0, 1, ack_hw),
    )  # fmt: skip


def stale_follower(*, legacy: bool) -> list[Envelope]:
    """Broker 2 copies offsets 0..1, learns HW 1 only (event 5), then starts epoch 1 as leader: in the legacy mode it
    first truncates to its own HW (event 6)."""
    cut = events.LogTruncated(
        topic=T, partition=0, replica=2, log_end_offset_before=2, truncated_to=1, high_watermark_before=1,
        high_watermark=1, leader_epoch=1, reason="high_watermark",
    )  # fmt: skip
    truncation = [cut] if legacy else []
    end = 1 if legacy else 2
    return emitted(
        broker(2), opened(2), follower(2, 0, 1), epoch_started(2, 0, 0), appended(2, 0, 1), hw(2, 0, 1),
        *truncation, epoch_started(2, 1, end), leader(2, 1, end, 1),
    )  # fmt: skip


def run(name: str, history: list[Envelope]) -> list[Finding]:
    return sorted(CHECKS[name](History.of(history)))


def test_given_kip101s_legacy_truncation_then_the_truncation_names_the_committed_offset_it_removed() -> None:
    (found,) = run("truncation_only_uncommitted", old_leader() + stale_follower(legacy=True))
    assert (found.replica, found.first_offset, found.last_offset, found.cause) == (2, 1, 1, "")
    assert found.events == (eid(1, 4), eid(2, 5))
    assert (
        found.detail == "broker 2 truncated to 1 (high_watermark), removing offsets 1..1 of leader epoch 0, committed"
    )


def test_given_kip101s_legacy_truncation_then_the_new_leader_lacks_the_committed_offset() -> None:
    (found,) = run("leader_completeness", old_leader() + stale_follower(legacy=True))
    assert (found.replica, found.first_offset, found.last_offset, found.cause) == (2, 1, 1, "")
    assert found.events == (eid(1, 4), eid(2, 7))
    assert found.detail == "broker 2 became leader in epoch 1 without committed offsets 1..1"


def test_given_kip101s_legacy_truncation_then_the_acks_all_record_is_lost_and_not_excused() -> None:
    (found,) = run("acks_all_acknowledged_committed", old_leader() + stale_follower(legacy=True))
    assert (found.replica, found.first_offset, found.last_offset, found.cause) == (1, 1, 1, "")
    assert found.events == (eid(1, 5),)
    assert "not in final leader 2's log" in found.detail


def test_given_the_same_schedule_with_leader_epochs_then_every_check_is_clean() -> None:
    history = old_leader() + stale_follower(legacy=False)
    assert {name: run(name, history) for name in CHECKS} == {name: [] for name in CHECKS}


def test_given_an_unclean_election_before_the_loss_then_the_loss_is_attributed_to_it() -> None:
    elected = events.LeaderElected(
        topic=T, partition=0, previous_leader=1, leader=2, leader_epoch=1, election="unclean"
    )
    history = old_leader() + stale_follower(legacy=True) + emitted(Emitter("controller", 100, "c"), elected)
    findings = [f for name in CHECKS for f in run(name, history)]
    assert {(f.invariant, f.cause) for f in findings} == {
        ("truncation_only_uncommitted", "unclean_election"),
        ("leader_completeness", "unclean_election"),
        ("acks_all_acknowledged_committed", "unclean_election"),
    }
    assert all("controller:100:c:0" in f.events for f in findings)


def test_given_an_acknowledgement_above_the_high_watermark_then_it_is_a_violation() -> None:
    findings = run("acks_all_acknowledged_committed", old_leader(ack_hw=1) + stale_follower(legacy=False))
    assert [(f.first_offset, f.last_offset, f.detail) for f in findings] == [
        (0, 1, "acks=all acknowledged offsets 0..1 with the high watermark at 1")
    ]


def test_given_a_new_leader_that_commits_other_records_at_committed_offsets_then_prefixes_disagree() -> None:
    """Broker 2 leads epoch 1 with its own records at offsets 0..1 (epoch 1 from offset 0) and commits them."""
    rival = emitted(broker(2), opened(2), epoch_started(2, 1, 0), leader(2, 1, 0), appended(2, 0, 1, 1), hw(2, 0, 2, 1))
    findings = run("committed_prefixes_agree", old_leader() + rival)
    assert [(f.first_offset, f.last_offset, f.events, f.detail) for f in findings] == [
        (0, 1, (eid(1, 4), eid(2, 4)), "offsets 0..1 committed in leader epochs 0 and 1")
    ]


def test_given_a_follower_whose_log_below_its_hw_differs_from_the_committed_then_prefixes_disagree() -> None:
    """Broker 2 holds offsets 0..1 in epoch 3 (a suffix it never truncated) and follows the HW to 2."""
    diverged = emitted(
        broker(2), opened(2), epoch_started(2, 3, 0), appended(2, 0, 1), follower(2, 4, 1), hw(2, 0, 2, 4)
    )
    (found,) = run("committed_prefixes_agree", old_leader() + diverged)
    assert (found.replica, found.first_offset, found.last_offset, found.events) == (2, 0, 1, (eid(1, 4), eid(2, 4)))
    assert found.detail == (
        "broker 2 holds offsets 0..1 in leader epoch 3 below its high watermark 2, committed in leader epoch 0"
    )


def test_given_an_acks1_record_lost_in_a_leader_change_before_commit_then_it_is_attributed() -> None:
    """Broker 1 acknowledges offset 0 at acks=1 and never commits it; broker 2 leads epoch 1 from an empty log."""
    before = emitted(
        broker(1), opened(1), epoch_started(1, 0, 0), leader(1, 0, 0), appended(1, 0, 0), acknowledged(1, 0, 0, 0, 1)
    )
    after = emitted(broker(2), opened(2), epoch_started(2, 1, 0), leader(2, 1, 0))
    (found,) = run("acknowledged_records_lost", before + after)
    assert (found.first_offset, found.last_offset, found.cause, found.events) == (
        0, 0, "acks1_leader_change", (eid(1, 4),)
    )  # fmt: skip


def recovered(b: int, leo: int, epochs: tuple[tuple[int, int], ...]) -> events.LogOpened:
    return events.LogOpened(
        topic=T, partition=0, replica=b, log_start_offset=0, log_end_offset=leo, high_watermark=0,
        leader_epochs=epochs, reason="recovered",
    )  # fmt: skip


def lossy_history(*, both: bool) -> list[Envelope]:
    """The topic sets min.insync.replicas=2. Broker 1 commits and acknowledges offsets 0..1; broker 2 (and, if
    `both`, broker 1) comes back from a crash with only offset 0 (LEO 1), and broker 2 leads epoch 1."""
    created = events.TopicCreated(
        topic=T, topic_id="t1", partitions=1, replication_factor=2, configs=(("min.insync.replicas", "2"),)
    )
    one = emitted(Emitter("broker", 1, "broker-1-1"), recovered(1, 1, ((0, 0),)), follower(1, 1, 2)) if both else []
    two = emitted(
        broker(2), opened(2), follower(2, 0, 1), epoch_started(2, 0, 0), appended(2, 0, 1), hw(2, 0, 2)
    ) + emitted(Emitter("broker", 2, "broker-2-1"), recovered(2, 1, ((0, 0),)), epoch_started(2, 1, 1), leader(2, 1, 1))
    # Each broker's second incarnation follows its first (same first wall_ms here: the incarnation names order them).
    return [*emitted(Emitter("controller", 100, "c"), created), *old_leader(), *one, *two]


def test_given_lossy_crashes_of_min_isr_replicas_then_the_lost_acknowledgement_is_attributed_to_them() -> None:
    history = lossy_history(both=True)
    (lost,) = run("acks_all_acknowledged_committed", history)
    assert (lost.first_offset, lost.last_offset, lost.cause) == (1, 1, "lossy_crashes")
    assert {"broker:1:broker-1-1:0", "broker:2:broker-2-1:0"} <= set(lost.events)
    (incomplete,) = run("leader_completeness", history)
    assert incomplete.cause == "lossy_crashes"


def test_given_only_one_lossy_crash_below_min_isr_then_the_loss_is_a_violation() -> None:
    (lost,) = run("acks_all_acknowledged_committed", lossy_history(both=False))
    assert (lost.first_offset, lost.last_offset, lost.cause) == (1, 1, "")


# -- a wiped disk is a lossy crash (branch i13-elr) ---------------------------------------------------------------


def wiped_history(*, both: bool) -> list[Envelope]:
    """As `lossy_history`, but broker 2 (and, if `both`, broker 1) comes back on a wiped disk: its broker creates the
    log afresh, empty (LogOpened `created`, LEO 0), and broker 2 leads epoch 1 with nothing."""
    created = events.TopicCreated(
        topic=T, topic_id="t1", partitions=1, replication_factor=2, configs=(("min.insync.replicas", "2"),)
    )
    one = emitted(Emitter("broker", 1, "broker-1-1"), opened(1), follower(1, 1, 2)) if both else []
    two = emitted(
        broker(2), opened(2), follower(2, 0, 1), epoch_started(2, 0, 0), appended(2, 0, 1), hw(2, 0, 2)
    ) + emitted(Emitter("broker", 2, "broker-2-1"), opened(2), epoch_started(2, 1, 0), leader(2, 1, 0))
    return [*emitted(Emitter("controller", 100, "c"), created), *old_leader(), *one, *two]


def test_given_one_wiped_replica_elected_with_data_elsewhere_then_it_is_a_violation() -> None:
    """min ISR 2 and only broker 2 wiped: broker 1 still holds offsets 0..1, so electing the empty replica loses
    committed records without cause."""
    history = wiped_history(both=False)
    (incomplete,) = run("leader_completeness", history)
    assert (incomplete.first_offset, incomplete.last_offset, incomplete.cause) == (0, 1, "")
    (lost,) = run("acks_all_acknowledged_committed", history)
    assert (lost.first_offset, lost.last_offset, lost.cause) == (0, 1, "")


def test_given_wiped_disks_of_min_isr_replicas_then_the_loss_is_attributed_to_lossy_crashes() -> None:
    history = wiped_history(both=True)
    (lost,) = run("acks_all_acknowledged_committed", history)
    assert (lost.first_offset, lost.last_offset, lost.cause) == (0, 1, "lossy_crashes")
    assert {"broker:1:broker-1-1:0", "broker:2:broker-2-1:0"} <= set(lost.events)


def test_given_a_log_deleted_and_created_again_then_no_lossy_crash() -> None:
    """A replica removed (LogDeleted) and later hosted again starts empty by design: not a crash."""
    deleted = events.LogDeleted(topic=T, partition=0, replica=2, log_end_offset=2, reason="not_a_replica")
    history = wiped_history(both=True)
    again = [e for e in history if e.emitter.incarnation != "broker-2-1"] + emitted(
        Emitter("broker", 2, "broker-2-1"), deleted, opened(2), epoch_started(2, 1, 0), leader(2, 1, 0)
    )
    (lost,) = run("acks_all_acknowledged_committed", again)
    assert lost.cause == ""


def test_given_a_follower_whose_hw_and_log_start_move_in_one_fetch_answer_then_the_deleted_suffix_is_not_compared() -> (
    None
):
    """Broker 2 holds offsets 0..1 in epoch 3, never truncated; one fetch answer moves its HW to 2 and its log start
    to 2 (the leader's retention deleted the offsets where the two logs differ): nothing committed is contradicted."""
    start = events.LogStartOffsetAdvanced(topic=T, partition=0, replica=2, log_start_offset=2, reason="leader")
    diverged = emitted(
        broker(2), opened(2), epoch_started(2, 3, 0), appended(2, 0, 1), follower(2, 4, 1), hw(2, 0, 2, 4), start
    )
    assert run("committed_prefixes_agree", old_leader() + diverged) == []


def test_given_a_follower_starting_over_behind_its_leaders_log_start_then_no_truncation_finding() -> None:
    over = events.LogTruncated(
        topic=T, partition=0, replica=2, log_end_offset_before=2, truncated_to=5, high_watermark_before=2,
        high_watermark=5, leader_epoch=1, reason="start_over",
    )  # fmt: skip
    follower_log = emitted(
        broker(2), opened(2), follower(2, 0, 1), epoch_started(2, 0, 0), appended(2, 0, 1), hw(2, 0, 2), over
    )
    assert run("truncation_only_uncommitted", old_leader() + follower_log) == []


def client_told(*offsets: int) -> list[Envelope]:
    """A producer client's SendCompleted events: each offset acknowledged as value v<offset>."""
    told = [
        events.SendCompleted(topic=T, partition=0, value=f"v{o}", outcome="ok", offset=o, error="NONE") for o in offsets
    ]
    return emitted(Emitter("producer", 7, "producer-7-0"), *told)


def test_given_the_clients_values_then_a_finding_names_the_records_at_its_offsets() -> None:
    history = old_leader() + stale_follower(legacy=True) + client_told(0, 1)
    (found,) = run("truncation_only_uncommitted", history)
    assert found.records == ("v1",)


# -- issue 13: a deleted topic's records are not lost -------------------------------------------------------


def deleted_topic(*, topic: str = T, deleted_ms: int = 1_006) -> list[Envelope]:
    """`old_leader` acknowledges offsets 0..1 at acks=all (wall_ms 1005); the controller deletes `topic` (at
    `deleted_ms`); broker 1 deletes its log, then the topic is created again and broker 1 leads its new, empty life in
    epoch 0 (so the final leader's log lacks the acknowledged offsets)."""
    controller = Emitter("controller", 100, "controller-100-0")
    deletion = Envelope("test", controller, 0, deleted_ms, 0, events.TopicDeleted(topic=topic, topic_id="t-1"))
    gone = events.LogDeleted(topic=T, partition=0, replica=1, log_end_offset=2, reason="topic_deleted")
    again = [gone, opened(1), epoch_started(1, 0, 0), leader(1, 0, 0)]
    recreated = [Envelope("test", broker(1), 6 + i, 1_010 + i, 6 + i, event) for i, event in enumerate(again)]
    return [*old_leader(), deletion, *recreated]


def test_given_a_topic_deleted_after_the_acknowledgement_then_its_records_are_not_lost() -> None:
    history = deleted_topic()
    assert {name: run(name, history) for name in CHECKS} == {name: [] for name in CHECKS}


def test_given_a_deletion_at_the_acknowledgements_instant_then_the_acknowledgement_is_of_the_deleted_life() -> None:
    assert run("acks_all_acknowledged_committed", deleted_topic(deleted_ms=1_005)) == []


def test_given_a_deletion_before_the_acknowledgement_then_a_missing_record_is_still_lost() -> None:
    (found,) = run("acks_all_acknowledged_committed", deleted_topic(deleted_ms=1_004))
    assert (found.replica, found.first_offset, found.last_offset, found.cause) == (1, 0, 1, "")
    assert found.events == (eid(1, 5),)


def test_given_another_topic_deleted_then_a_missing_record_is_still_lost() -> None:
    (found,) = run("acks_all_acknowledged_committed", deleted_topic(topic="payments"))
    assert (found.first_offset, found.last_offset) == (0, 1)
    assert "not in final leader 1's log" in found.detail


# -- issue 13: compaction is not loss -------------------------------------------------------------------------


def compacted(b: int, cleaned_up_to: int) -> events.LogCompacted:
    return events.LogCompacted(
        topic=T, partition=0, replica=b, first_dirty_offset=0, cleaned_up_to=cleaned_up_to, segments_before=2,
        segments_after=1, bytes_before=400, bytes_after=200, records_removed=2, tombstones_removed=0,
    )  # fmt: skip


def compacted_copy(*, kept_from: int, copied_to: int) -> list[Envelope]:
    """Broker 1 leads epoch 0, commits and acknowledges (acks=all) offsets 0..3, then compacts its log below 3 (events
    0..6). Broker 2 copies the compacted log: its epoch history starts at its first kept batch (`kept_from`) and it
    holds offsets up to `copied_to` (exclusive) before it leads epoch 1."""
    first = emitted(
        broker(1), opened(1), epoch_started(1, 0, 0), leader(1, 0, 0), appended(1, 0, 3), hw(1, 0, 4),
        acknowledged(1, 0, 3, 4), compacted(1, 3),
    )  # fmt: skip
    second = emitted(
        broker(2), opened(2), follower(2, 0, 1), epoch_started(2, 0, kept_from), appended(2, kept_from, copied_to - 1),
        epoch_started(2, 1, copied_to), leader(2, 1, copied_to, copied_to),
    )  # fmt: skip
    return first + second


def test_given_a_replica_that_copied_a_compacted_log_then_the_removed_offsets_are_not_lost() -> None:
    history = compacted_copy(kept_from=2, copied_to=4)
    assert {name: run(name, history) for name in CHECKS} == {name: [] for name in CHECKS}


def test_given_a_compacted_topic_then_a_record_above_the_cleaned_point_missing_is_still_lost() -> None:
    history = compacted_copy(kept_from=2, copied_to=3)
    (lost,) = run("acks_all_acknowledged_committed", history)
    assert (lost.replica, lost.first_offset, lost.last_offset, lost.cause) == (1, 3, 3, "")
    (incomplete,) = run("leader_completeness", history)
    assert (incomplete.replica, incomplete.first_offset, incomplete.last_offset) == (2, 3, 3)
