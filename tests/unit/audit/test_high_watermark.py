"""The replica-state and high-watermark invariants (`hightide.audit.checks.high_watermark`) on hand-written
histories.

Method: given the events a broker (and a controller) would emit, written out in envelopes
(`support.hw_histories`), when a check runs over the `History`, then it names exactly the replica, the offsets
and the events that break its rule, and says nothing of a history that keeps it. Each check has one violating
history and one clean one; the clean ones walk every rule that could be mistaken for a violation.
"""

from __future__ import annotations

import dataclasses

from hightide.audit.checks.high_watermark import (
    CHECKS,
    HW_ADVANCE_GUARDED,
    HW_WITHIN_LOG,
    LEADER_HW_MONOTONIC,
    cluster_min_insync_replicas,
    hw_advance_guarded,
    hw_within_log,
    leader_hw_monotonic,
    min_insync_replicas_value,
    topic_min_insync_replicas,
)
from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.protocol import events
from support import hw_histories
from support.hw_histories import controller_events, topic_created


def test_a_truncation_that_keeps_the_hw_past_the_new_leo_and_a_log_start_past_the_hw_are_found() -> None:
    """Given replica 1 of b1 with LEO 5 and HW 3, when it truncates to 2 keeping HW 3, then the finding names
    offset 2 (held as committed, no longer in the log) and the truncation; given replica 2 with HW 4, when its
    log start moves to 5 and then 6, then one finding names offset 4 and the first move only."""
    scenario = hw_histories.hw_past_leo()
    ids = scenario.ids

    found = sorted(hw_within_log(History.of(scenario.history)))

    assert found == [
        finding(
            HW_WITHIN_LOG,
            topic="b1",
            partition=0,
            replica=1,
            first_offset=2,
            last_offset=2,
            events=[ids["cut"]],
            detail="log start 0 <= HW 3 <= LEO 2 broken after LogTruncated",
        ),
        finding(
            HW_WITHIN_LOG,
            topic="b1",
            partition=0,
            replica=2,
            first_offset=4,
            last_offset=4,
            events=[ids["lso_past_hw"]],
            detail="log start 5 <= HW 4 <= LEO 6 broken after LogStartOffsetAdvanced",
        ),
    ]


def test_a_log_start_set_past_the_hw_after_a_truncation_is_found() -> None:
    """Given a replica truncated to 2 that grows again to LEO 10 and HW 8, when its log start is set to 9, then one
    finding names offset 8 and that move: the truncation bounded the log start only until it was set again."""
    scenario = hw_histories.log_start_past_hw_after_a_cut()

    found = list(hw_within_log(History.of(scenario.history)))

    assert found == [
        finding(
            HW_WITHIN_LOG,
            topic="b1cut",
            partition=0,
            replica=1,
            first_offset=8,
            last_offset=8,
            events=[scenario.ids["lso_past_hw"]],
            detail="log start 9 <= HW 8 <= LEO 10 broken after LogStartOffsetAdvanced",
        )
    ]


def test_every_replica_rule_keeps_the_offsets_in_order() -> None:
    """Given a replica that opens, appends, commits, moves its log start, truncates below it, starts over, is
    deleted and reopened, then no finding."""
    assert list(hw_within_log(History.of(hw_histories.replica_in_order().history))) == []


def test_a_leaders_hw_going_down_in_its_tenure_and_an_advance_that_does_not_chain_are_found() -> None:
    """Given leader 1 of epoch 1 at HW 3, when it advances from 3 to 2, then the finding names offsets 2..3 and
    both advances; when it then advances from 4 (while it held 2) to 5, then the finding names offsets 2..5."""
    scenario = hw_histories.leader_hw_goes_down()
    ids = scenario.ids

    found = sorted(leader_hw_monotonic(History.of(scenario.history)))

    common = {"topic": "c1", "partition": 0, "replica": 1}
    assert found == [
        finding(
            LEADER_HW_MONOTONIC,
            **common,  # type: ignore[arg-type]
            first_offset=2,
            last_offset=3,
            events=[ids["to2"], ids["to3"]],
            detail="leader 1 of epoch 1 moved its HW from 3 to 2 while it held HW 3",
        ),
        finding(
            LEADER_HW_MONOTONIC,
            **common,  # type: ignore[arg-type]
            first_offset=2,
            last_offset=5,
            events=[ids["from4"], ids["to2"]],
            detail="leader 1 of epoch 1 moved its HW from 4 to 5 while it held HW 2",
        ),
    ]


def test_followers_and_new_tenures_are_not_held_to_a_leaders_chain() -> None:
    """Given a leader whose HW chains up, then a follower whose truncation lowers its HW, then a new tenure from
    the BecameLeader's HW, then no finding."""
    assert list(leader_hw_monotonic(History.of(hw_histories.hw_monotonic_tenures().history))) == []


def test_an_advance_past_a_maximal_isr_member_unknown_or_behind_is_found() -> None:
    """Given leader 1 with ISR 1, 2 and a pending expansion to 3, when it advances its HW from 3 to 5 with 3 never
    heard from, then the finding names offsets 3..4 and the advance; when it advances from 5 to 6 with 3 known at
    LEO 4, then the finding names offsets 5..5, the advance and the follower update that said 4."""
    scenario = hw_histories.hw_past_lagging_member()
    ids = scenario.ids

    found = sorted(hw_advance_guarded(History.of(scenario.history)))

    common = {"topic": "c2", "partition": 0, "replica": 1}
    assert found == [
        finding(
            HW_ADVANCE_GUARDED,
            **common,  # type: ignore[arg-type]
            first_offset=3,
            last_offset=4,
            events=[ids["to5"]],
            detail="leader 1 of epoch 1 advanced the HW from 3 to 5 while its maximal ISR member 3 had no known LEO",
        ),
        finding(
            HW_ADVANCE_GUARDED,
            **common,  # type: ignore[arg-type]
            first_offset=5,
            last_offset=5,
            events=[ids["to6"], ids["three_at_4"]],
            detail="leader 1 of epoch 1 advanced the HW from 5 to 6 while its maximal ISR member 3 was known at LEO 4",
        ),
    ]


def test_an_advance_with_the_maximal_isr_below_min_insync_replicas_is_found() -> None:
    """Given topic c2min with min.insync.replicas 2 (later 3), when leader 1's shrink to ISR 1 completes and it
    advances its HW from 2 to 4, then the finding names offsets 2..3, the advance and the completed shrink."""
    scenario = hw_histories.hw_below_min_isr()
    ids = scenario.ids

    found = sorted(hw_advance_guarded(History.of(scenario.history)))

    assert found == [
        finding(
            HW_ADVANCE_GUARDED,
            topic="c2min",
            partition=0,
            replica=1,
            first_offset=2,
            last_offset=3,
            events=[ids["to4"], ids["completed"]],
            detail="leader 1 of epoch 1 advanced the HW from 2 to 4 with ISR [1], below min.insync.replicas 2",
        )
    ]


def test_the_controllers_default_min_insync_replicas_guards_a_topic_that_sets_none() -> None:
    """Given a controller whose own min.insync.replicas is 2 (its ControllerElected says so) and topic c2default
    created without the config, when leader 1's shrink to ISR 1 completes and it advances its HW from 2 to 4, then
    the finding names offsets 2..3 against min.insync.replicas 2, as for a topic that sets 2 itself."""
    scenario = hw_histories.hw_below_cluster_min_isr()
    ids = scenario.ids

    found = sorted(hw_advance_guarded(History.of(scenario.history)))

    assert found == [
        finding(
            HW_ADVANCE_GUARDED,
            topic="c2default",
            partition=0,
            replica=1,
            first_offset=2,
            last_offset=3,
            events=[ids["to4"], ids["completed"]],
            detail="leader 1 of epoch 1 advanced the HW from 2 to 4 with ISR [1], below min.insync.replicas 2",
        )
    ]


def test_the_least_default_of_the_clusters_controllers_counts_and_only_in_its_own_cluster() -> None:
    """Given controllers of cluster "test" naming defaults 3, then 2, then -1 (an event from before version 3),
    and one of another cluster naming 1, then "test"'s default is 2 and the other's 1; a topic of "test" created
    without the config gets 2, one altered to 3 then removed gets 2 too."""

    def elected(epoch: int, min_isr: int) -> events.ControllerElected:
        return events.ControllerElected(controller=1, controller_epoch=epoch, min_insync_replicas=min_isr)

    ours = controller_events(
        "d",
        elected(1, 3),
        elected(2, 2),
        elected(3, -1),
        topic_created("plain"),
        topic_created("removed", (("min.insync.replicas", "3"),)),
        events.TopicConfigsAltered(topic="removed", configs=(("min.insync.replicas", None),)),
    )
    theirs = [dataclasses.replace(envelope, cluster_id="other") for envelope in controller_events("o", elected(1, 1))]
    history = History.of([*ours, *theirs])

    assert cluster_min_insync_replicas(history) == {"test": 2, "other": 1}
    assert topic_min_insync_replicas(history) == {"plain": 2, "removed": 2}


def test_a_pending_expansion_does_not_make_the_isr_big_enough() -> None:
    """Given topic c2grow with min.insync.replicas 2 and leader 1 alone in its ISR, when it proposes adding 2 and
    advances its HW from 0 to 4 (2 at LEO 4) before the controller commits the change, then the finding names
    offsets 0..3, the advance and the BecameLeader that set ISR [1]."""
    scenario = hw_histories.hw_on_pending_expansion_below_min_isr()
    ids = scenario.ids

    found = sorted(hw_advance_guarded(History.of(scenario.history)))

    assert found == [
        finding(
            HW_ADVANCE_GUARDED,
            topic="c2grow",
            partition=0,
            replica=1,
            first_offset=0,
            last_offset=3,
            events=[ids["leader"], ids["to4"]],
            detail="leader 1 of epoch 1 advanced the HW from 0 to 4 with ISR [1], below min.insync.replicas 2",
        )
    ]


def test_what_a_leader_knew_of_its_followers_goes_when_it_follows() -> None:
    """Given leader 1 that knew follower 2 at LEO 5, when it follows in epoch 2, leads again in epoch 3 and
    advances its HW from 0 to 3 before 2 fetches, then the finding names offsets 0..2 and the advance only."""
    scenario = hw_histories.followers_forgotten()
    ids = scenario.ids

    found = sorted(hw_advance_guarded(History.of(scenario.history)))

    assert found == [
        finding(
            HW_ADVANCE_GUARDED,
            topic="c2forgot",
            partition=0,
            replica=1,
            first_offset=0,
            last_offset=2,
            events=[ids["to3"]],
            detail="leader 1 of epoch 3 advanced the HW from 0 to 3 while its maximal ISR member 2 had no known LEO",
        )
    ]


def test_a_shrink_the_leader_completes_without_proposing_it_does_not_count() -> None:
    """Given leader 1 with ISR 1, 2, 3 and follower 3 at LEO 2, when it completes a shrink to 1, 2 that it never
    proposed and advances its HW from 0 to 4, then the finding names offsets 2..3, the advance and the update
    that put 3 at LEO 2: the controller still holds 3 in the ISR."""
    scenario = hw_histories.isr_shrunk_unasked()
    ids = scenario.ids

    found = sorted(hw_advance_guarded(History.of(scenario.history)))

    assert found == [
        finding(
            HW_ADVANCE_GUARDED,
            topic="c2alone",
            partition=0,
            replica=1,
            first_offset=2,
            last_offset=3,
            events=[ids["to4"], ids["three_at_2"]],
            detail="leader 1 of epoch 1 advanced the HW from 0 to 4 while its maximal ISR member 3 was known at LEO 2",
        )
    ]


def test_advances_the_core_would_make_are_guarded() -> None:
    """Given every follower past the new HW before each advance, refused and still-pending proposals, a new
    epoch of the same leader and a leader alone in its ISR, then no finding."""
    assert list(hw_advance_guarded(History.of(hw_histories.hw_guarded().history))) == []


def test_min_insync_replicas_is_the_least_the_topic_ever_had_capped_by_its_replicas() -> None:
    """Given a topic created without the config, one created with 3 and altered to 2 then removed, and one with
    an unreadable value, then their values are 1, 1 and 1; one with 3 throughout is 3 (and its RF caps it when
    the check applies it: see the RF 1 leader of `hw_monotonic_tenures`)."""
    history = History.of(
        controller_events(
            "t",
            topic_created("plain"),
            topic_created("altered", (("min.insync.replicas", "3"),)),
            events.TopicConfigsAltered(topic="altered", configs=(("min.insync.replicas", "2"),)),
            events.TopicConfigsAltered(topic="altered", configs=(("min.insync.replicas", None),)),
            topic_created("odd", (("min.insync.replicas", "two"),)),
            topic_created("strict", (("min.insync.replicas", "3"), ("retention.ms", "10"))),
        )
    )

    assert topic_min_insync_replicas(history) == {"plain": 1, "altered": 1, "odd": 1, "strict": 3}
    assert [min_insync_replicas_value(text) for text in ("2", "0", "-1", " 2", "2\n", None)] == [2, 1, 1, 1, 1, 1]


def test_the_three_checks_are_registered_under_their_names() -> None:
    every = History.of(hw_histories.every_scenario())
    found: list[Finding] = [f for check in CHECKS.values() for f in check(every)]
    assert set(CHECKS) == {HW_WITHIN_LOG, LEADER_HW_MONOTONIC, HW_ADVANCE_GUARDED}
    violating = {"b1", "b1cut", "c1", "c2", "c2min", "c2default", "c2alone", "c2grow", "c2forgot"}
    assert {f.topic for f in found} == violating  # the violating scenarios, and only they
