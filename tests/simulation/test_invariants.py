"""Every invariant the simulator checks can fail: each test feeds one a history that violates it.

Method: build snapshots by hand (replicas' logs, the controller's view, client observations) that break exactly
one invariant, and expect InvariantViolation naming it; a healthy snapshot passes.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulation.invariants import (
    ControllerView,
    InvariantViolation,
    PartitionHistory,
    ReplicaSnapshot,
    check_acknowledged,
    check_acknowledged_never_lost,
    check_consumer_read,
    check_converged,
    check_step,
    check_truncation,
)


def replica(
    broker: int,
    values: list[bytes],
    hw: int,
    *,
    leader: bool = False,
    epoch: int = 1,
    alive: bool = True,
    start: int = 0,
) -> ReplicaSnapshot:
    records = tuple((start + i, v, epoch) for i, v in enumerate(values))
    return ReplicaSnapshot(broker, alive, leader, epoch, start, start + len(values), hw, records)


VIEW = ControllerView(leader=1, leader_epoch=1, partition_epoch=3, replicas=(1, 2, 3), isr=(1, 2, 3))


def violation(run: object) -> str:
    assert callable(run)
    with pytest.raises(InvariantViolation) as raised:
        run()
    return raised.value.invariant


def test_a_healthy_step_passes() -> None:
    history = PartitionHistory("t-0")
    check_step(history, [replica(1, [b"a", b"b"], 1, leader=True), replica(2, [b"a"], 1)], VIEW)
    assert history.committed == {0: b"a"}


def test_two_leaders_in_one_epoch() -> None:
    history = PartitionHistory("t-0")
    snapshot = [replica(1, [b"a"], 0, leader=True), replica(2, [b"a"], 0, leader=True)]
    assert violation(lambda: check_step(history, snapshot, VIEW)) == "one_leader_per_epoch"


def test_epochs_going_backwards() -> None:
    history = PartitionHistory("t-0")
    check_step(history, [], VIEW)
    older = ControllerView(1, 0, 4, (1, 2, 3), (1, 2, 3))
    assert violation(lambda: check_step(history, [], older)) == "epochs_monotonic"


def test_a_change_without_a_new_partition_epoch() -> None:
    history = PartitionHistory("t-0")
    check_step(history, [], VIEW)
    same_epoch = ControllerView(1, 1, 3, (1, 2, 3), (1, 2))
    assert violation(lambda: check_step(history, [], same_epoch)) == "epochs_monotonic"


def test_a_leader_outside_the_isr() -> None:
    view = ControllerView(1, 1, 3, (1, 2, 3), (2, 3))
    assert violation(lambda: check_step(PartitionHistory("t-0"), [], view)) == "leader_in_isr"


def test_a_high_watermark_above_the_log_end() -> None:
    snapshot = [replica(1, [b"a"], 2, leader=True)]
    assert violation(lambda: check_step(PartitionHistory("t-0"), snapshot, VIEW)) == "hw_within_log"


def test_an_isr_member_disagreeing_with_the_leader_below_its_high_watermark() -> None:
    snapshot = [replica(1, [b"a", b"b"], 2, leader=True), replica(2, [b"a", b"X"], 1)]
    assert violation(lambda: check_step(PartitionHistory("t-0"), snapshot, VIEW)) == "committed_prefixes_agree"


def test_a_replica_disagreeing_below_its_own_high_watermark_even_outside_the_isr() -> None:
    history = PartitionHistory("t-0")
    check_step(history, [replica(1, [b"a", b"b"], 2, leader=True)], VIEW)
    outside = ControllerView(1, 1, 4, (1, 2, 3), (1,))
    snapshot = [replica(1, [b"a", b"b"], 2, leader=True), replica(2, [b"a", b"X"], 2)]
    assert violation(lambda: check_step(history, snapshot, outside)) == "committed_prefixes_agree"


def test_an_uncommitted_divergent_suffix_outside_the_isr_is_allowed() -> None:
    outside = ControllerView(1, 1, 3, (1, 2, 3), (1, 3))
    snapshot = [replica(1, [b"a", b"b"], 2, leader=True), replica(2, [b"a", b"X"], 1)]
    check_step(PartitionHistory("t-0"), snapshot, outside)


def test_a_new_leader_without_a_committed_record() -> None:
    history = PartitionHistory("t-0")
    check_step(history, [replica(1, [b"a", b"b"], 2, leader=True), replica(2, [b"a"], 1)], VIEW)
    new_view = ControllerView(2, 2, 4, (1, 2, 3), (2, 3))
    snapshot = [replica(1, [b"a", b"b"], 2, alive=False), replica(2, [b"a"], 1, leader=True, epoch=2)]
    assert violation(lambda: check_step(history, snapshot, new_view)) == "leader_completeness"


def test_an_exempt_partition_is_not_held_to_completeness() -> None:
    history = PartitionHistory("t-0")
    check_step(history, [replica(1, [b"a", b"b"], 2, leader=True)], VIEW)
    history.exempt = True
    new_view = ControllerView(2, 2, 4, (1, 2, 3), (2,))
    check_step(history, [replica(2, [b"a"], 1, leader=True, epoch=2)], new_view)


def test_truncating_below_the_own_high_watermark() -> None:
    history = PartitionHistory("t-0")
    check_truncation(history, replica=2, truncated_to=5, high_watermark_before=5)
    assert violation(lambda: check_truncation(history, 2, 4, 5)) == "committed_never_truncated"


def test_an_acknowledgement_of_an_uncommitted_record() -> None:
    history = PartitionHistory("t-0")
    leader = replica(1, [b"a", b"b"], 1, leader=True)
    check_acknowledged(history, b"a", 0, leader)
    assert violation(lambda: check_acknowledged(history, b"b", 1, leader)) == "acknowledged_is_committed"
    assert violation(lambda: check_acknowledged(history, b"z", 0, leader)) == "acknowledged_is_committed"


def test_an_acknowledged_record_missing_from_the_final_log() -> None:
    history = PartitionHistory("t-0", acknowledged={b"a": 0, b"b": 1})
    check_acknowledged_never_lost(history, {0: b"a", 1: b"b"})
    assert violation(lambda: check_acknowledged_never_lost(history, {0: b"a", 1: b"c"})) == "acknowledged_never_lost"


def test_a_consumer_reading_at_the_high_watermark() -> None:
    check_consumer_read("t-0", 4, 5)
    assert violation(lambda: check_consumer_read("t-0", 5, 5)) == "consumers_below_hw"


def test_not_converged_after_healing() -> None:
    logs = [replica(1, [b"a"], 1, leader=True), replica(2, [b"a"], 1), replica(3, [b"a"], 1)]
    check_converged("t-0", logs, VIEW)
    assert violation(lambda: check_converged("t-0", logs, ControllerView(-1, 1, 3, (1, 2, 3), (1,)))) == "converged"
    shrunk = ControllerView(1, 1, 3, (1, 2, 3), (1, 2))
    assert violation(lambda: check_converged("t-0", logs, shrunk)) == "converged"
    differing = [*logs[:2], replica(3, [b"b"], 1)]
    assert violation(lambda: check_converged("t-0", differing, VIEW)) == "converged"


def test_a_leader_high_watermark_above_an_isr_members_log_end() -> None:
    leader = replica(1, [b"a", b"b", b"c"], 2, leader=True)
    check_step(PartitionHistory("t-0"), [dataclasses.replace(leader, isr_log_end_offsets=((2, 2), (3, 5)))], VIEW)
    lagging = dataclasses.replace(leader, isr_log_end_offsets=((2, 1),))
    assert violation(lambda: check_step(PartitionHistory("t-0"), [lagging], VIEW)) == "hw_within_isr"


def test_a_core_ahead_of_its_log() -> None:
    """The core counts an append its disk refused: its LEO is past the log's end."""
    healthy = replica(1, [b"a", b"b"], 1, leader=True)
    check_step(
        PartitionHistory("t-0"), [dataclasses.replace(healthy, disk_log_start_offset=0, disk_log_end_offset=2)], VIEW
    )
    ahead = dataclasses.replace(healthy, log_end_offset=4, disk_log_start_offset=0, disk_log_end_offset=2)
    assert violation(lambda: check_step(PartitionHistory("t-0"), [ahead], VIEW)) == "log_continuity"


def test_a_log_with_a_hole() -> None:
    """The disk took an append past a gap: offsets 0 and 2 without 1."""
    holed = ReplicaSnapshot(1, True, True, 1, 0, 3, 0, ((0, b"a", 1), (2, b"c", 1)), (), 0, 3)
    assert violation(lambda: check_step(PartitionHistory("t-0"), [holed], VIEW)) == "log_continuity"
    dead = dataclasses.replace(holed, alive=False)
    check_step(PartitionHistory("t-0"), [dead], VIEW)  # a crashed broker's log is judged when it is back
