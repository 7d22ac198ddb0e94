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
    RetentionCheck,
    SegmentFacts,
    check_acknowledged,
    check_acknowledged_never_lost,
    check_consumer_read,
    check_converged,
    check_retention_honoured,
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


# -- retention ------------------------------------------------------------------------------------------------------


def test_records_deleted_by_retention_are_not_lost_but_everything_above_the_log_start_is_checked() -> None:
    """Given acknowledged records at offsets 0..2 and a final log that starts at 2 (retention deleted 0 and 1), then
    nothing is lost; a final log that starts at 2 without the record at 2 has lost it."""
    history = PartitionHistory("t-0", acknowledged={b"a": 0, b"b": 1, b"c": 2})
    check_acknowledged_never_lost(history, {2: b"c"}, log_start_offset=2)
    assert (
        violation(lambda: check_acknowledged_never_lost(history, {}, log_start_offset=2)) == "acknowledged_never_lost"
    )
    assert violation(lambda: check_acknowledged_never_lost(history, {2: b"c"})) == "acknowledged_never_lost"


def test_an_acknowledgement_of_a_record_retention_deleted_in_the_same_step() -> None:
    """The leader answered, then ran retention in the same input: the record is below its log start (so it was below
    its HW); a record above the log start must still be there."""
    history = PartitionHistory("t-0")
    leader = replica(1, [b"c", b"d"], 4, leader=True, start=2)
    check_acknowledged(history, b"a", 0, leader)
    check_acknowledged(history, b"c", 2, leader)
    assert violation(lambda: check_acknowledged(history, b"x", 3, leader)) == "acknowledged_is_committed"


def test_converged_logs_are_compared_from_the_latest_log_start() -> None:
    """Each replica deletes by retention on its own clock: logs that agree from the latest log start on and end
    together have converged; a different record above it, or a different end, has not."""
    leader = replica(1, [b"c", b"d"], 4, leader=True, start=2)
    kept_more = replica(2, [b"a", b"b", b"c", b"d"], 4)
    deleted_all = replica(3, [], 4, start=4)
    check_converged("t-0", [leader, kept_more, deleted_all], VIEW)
    differing = replica(2, [b"a", b"b", b"X", b"d"], 4)
    assert violation(lambda: check_converged("t-0", [leader, differing, deleted_all], VIEW)) == "converged"
    behind = replica(3, [], 3, start=3)
    assert violation(lambda: check_converged("t-0", [leader, kept_more, behind], VIEW)) == "converged"


def test_an_isr_member_is_held_to_the_leaders_records_from_the_leaders_log_start() -> None:
    """Below the leader's log start the leader holds nothing: an ISR member's records there above its own HW are
    retention's to delete; at or above it, and below its own HW, they must be the committed ones."""
    history = PartitionHistory("t-0")
    check_step(history, [replica(1, [b"a", b"b", b"c", b"d"], 4, leader=True)], VIEW)
    leader = replica(1, [b"c", b"d"], 4, leader=True, start=2)
    stale_tail = replica(2, [b"a", b"X", b"c", b"d"], 1)  # offset 1 differs, above its own HW 1
    check_step(history, [leader, stale_tail], VIEW)
    below_own_hw = replica(2, [b"a", b"X", b"c", b"d"], 2)
    assert violation(lambda: check_step(history, [leader, below_own_hw], VIEW)) == "committed_prefixes_agree"
    above_leader_start = replica(2, [b"a", b"b", b"X", b"d"], 1)
    assert violation(lambda: check_step(history, [leader, above_leader_start], VIEW)) == "committed_prefixes_agree"


WALL_MS = 1_000_000
SEGMENTS = (  # three segments of 100 bytes: two of them a minute old, the active one new
    SegmentFacts(0, 10, 100, WALL_MS - 60_000),
    SegmentFacts(10, 20, 100, WALL_MS - 60_000),
    SegmentFacts(20, 25, 100, WALL_MS - 10),
)


def retention_run(
    after: tuple[SegmentFacts, ...],
    *,
    high_watermark: int = 25,
    log_start_after: int | None = None,
    retention_ms: int = 1_000,
    retention_bytes: int = -1,
    log_start_offset: int = 0,
    before: tuple[SegmentFacts, ...] = SEGMENTS,
) -> RetentionCheck:
    start_after = after[0].base_offset if log_start_after is None else log_start_after
    return RetentionCheck(
        3, WALL_MS, high_watermark, log_start_offset, start_after, retention_ms, retention_bytes, before, after
    )


def test_retention_that_deletes_what_the_rule_deletes_passes() -> None:
    check_retention_honoured("t-0", retention_run(SEGMENTS[2:]))  # the two expired segments go
    check_retention_honoured("t-0", retention_run(SEGMENTS[1:], high_watermark=15))  # the HW holds the second back
    check_retention_honoured("t-0", retention_run(SEGMENTS, retention_ms=-1))  # no limit
    check_retention_honoured("t-0", retention_run(SEGMENTS[1:], retention_ms=-1, retention_bytes=200))
    check_retention_honoured(
        "t-0", retention_run(SEGMENTS[1:], retention_ms=-1, log_start_offset=12, log_start_after=12)
    )
    everything = retention_run((SegmentFacts(25, 25, 0, WALL_MS),), retention_ms=0)
    check_retention_honoured("t-0", everything)  # every segment goes: an empty one starts at the end


def test_retention_that_keeps_an_expired_segment_fails() -> None:
    """The defect-3 way: the oldest segment is a minute old with retention.ms 1 s, below the HW, and it stays."""
    assert violation(lambda: check_retention_honoured("t-0", retention_run(SEGMENTS))) == "retention_honoured"
    stops_early = retention_run(SEGMENTS[1:])
    assert violation(lambda: check_retention_honoured("t-0", stops_early)) == "retention_honoured"
    over_bytes = retention_run(SEGMENTS, retention_ms=-1, retention_bytes=200)
    assert violation(lambda: check_retention_honoured("t-0", over_bytes)) == "retention_honoured"
    below_start = retention_run(SEGMENTS, retention_ms=-1, log_start_offset=12, log_start_after=12)
    assert violation(lambda: check_retention_honoured("t-0", below_start)) == "retention_honoured"


def test_retention_that_deletes_what_the_rule_keeps_fails() -> None:
    """A segment reaching the HW, one not expired, and the empty active one are kept; so is the log start."""
    at_hw = retention_run(SEGMENTS[2:], high_watermark=15)
    assert violation(lambda: check_retention_honoured("t-0", at_hw)) == "retention_honoured"
    fresh = retention_run(SEGMENTS[2:], retention_ms=120_000)
    assert violation(lambda: check_retention_honoured("t-0", fresh)) == "retention_honoured"
    under_bytes = retention_run(SEGMENTS[2:], retention_ms=-1, retention_bytes=200)
    assert violation(lambda: check_retention_honoured("t-0", under_bytes)) == "retention_honoured"
    empty_active = (*SEGMENTS[:2], SegmentFacts(20, 20, 0, WALL_MS - 60_000))
    emptied = retention_run((SegmentFacts(20, 20, 0, WALL_MS),), before=empty_active, high_watermark=20)
    assert violation(lambda: check_retention_honoured("t-0", emptied)) == "retention_honoured"
    wrong_start = retention_run(SEGMENTS[2:], log_start_after=19)
    assert violation(lambda: check_retention_honoured("t-0", wrong_start)) == "retention_honoured"
    changed = retention_run((SegmentFacts(20, 24, 80, WALL_MS - 10),))
    assert violation(lambda: check_retention_honoured("t-0", changed)) == "retention_honoured"
