"""The consumer group invariants: each check finds the history that breaks it, and passes the real coordinator's.

Method: hand-written group event histories, each breaking one invariant (the checker must be able to fail), and
histories made by the real GroupCoordinator driven through rebalances, commits, a static member's restart and a
coordinator failover (the checker must pass them).
"""

from __future__ import annotations

from hightide.audit.groups import check_group_history
from hightide.core.group_coordinator import GroupCoordinator
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from support.groups import GroupShell, assignment

G = "g"


def started(generation: int, *members: str) -> events.GroupGenerationStarted:
    return events.GroupGenerationStarted(
        group_id=G,
        generation_id=generation,
        protocol_type="consumer",
        protocol="range" if members else None,
        leader=members[0] if members else None,
        members=members,
    )


def synced(generation: int, *rows: tuple[str, int]) -> events.GroupAssignmentSynced:
    return events.GroupAssignmentSynced(
        group_id=G,
        generation_id=generation,
        members=tuple(m for m, _ in rows),
        topics=tuple("t" for _ in rows),
        partitions=tuple(p for _, p in rows),
    )


def committed(generation: int, member: str, offset: int = 5) -> events.OffsetsCommitted:
    return events.OffsetsCommitted(
        group_id=G, generation_id=generation, member_id=member, topics=("t",), partitions=(0,), offsets=(offset,)
    )


def invariants(history: list[events.Event]) -> list[str]:
    return [v.invariant for v in check_group_history(history)]


def test_a_well_behaved_history_has_no_violation() -> None:
    history: list[events.Event] = [
        started(1, "a", "b"),
        synced(1, ("a", 0), ("b", 1)),
        committed(1, "a"),
        started(2, "a"),
        synced(2, ("a", 0), ("a", 1)),
        committed(2, "a"),
        started(3),
        committed(-1, ""),
    ]
    assert check_group_history(history) == []


def test_the_same_generation_started_twice_is_two_generations_at_a_time() -> None:
    # Two coordinators (a deposed one that did not know) each completed a rebalance into generation 2.
    found = check_group_history([started(1, "a"), started(2, "a"), started(2, "b")])
    assert [(v.invariant, v.generation_id) for v in found] == [("one_generation_at_a_time", 2)]


def test_a_generation_going_back_is_a_violation() -> None:
    assert invariants([started(3, "a"), started(2, "a")]) == ["one_generation_at_a_time"]


def test_a_deleted_group_starts_again_from_generation_one() -> None:
    deleted = events.GroupDeleted(group_id=G, partition=0, generation_id=2)
    assert invariants([started(1, "a"), started(2), deleted, started(1, "b")]) == []


def test_a_partition_with_two_owners_in_one_generation_is_a_violation() -> None:
    found = check_group_history([started(1, "a", "b"), synced(1, ("a", 0), ("b", 0), ("b", 1))])
    assert [v.invariant for v in found] == ["one_owner_per_partition"]
    assert "t-0" in found[0].detail


def test_two_different_assignments_for_one_generation_are_a_violation() -> None:
    history: list[events.Event] = [started(1, "a", "b"), synced(1, ("a", 0), ("b", 1)), synced(1, ("a", 1))]
    assert invariants(history) == ["one_owner_per_partition"]


def test_a_commit_from_a_stale_generation_is_a_violation() -> None:
    assert invariants([started(1, "a", "b"), started(2, "a"), committed(1, "b")]) == ["no_stale_commit"]


def test_a_commit_with_no_generation_into_a_group_with_members_is_a_violation() -> None:
    assert invariants([started(1, "a"), committed(-1, "")]) == ["no_stale_commit"]


def test_a_loaded_group_is_known_from_its_load() -> None:
    loaded = events.GroupLoaded(
        group_id=G, partition=0, generation_id=4, state="Stable", members=("a",), offsets_count=0
    )
    assert invariants([loaded, committed(4, "a"), committed(3, "a")]) == ["no_stale_commit"]
    assert invariants([loaded, started(4, "a")]) == ["one_generation_at_a_time"]


def test_the_real_coordinators_history_through_rebalances_and_a_failover_has_no_violation() -> None:
    shell = GroupShell.leading_all(partitions=2)
    ids = [shell.new_member(G) for _ in range(3)]
    joins = [shell.join(G, m) for m in ids]
    shell.advance_until_answered(*joins)
    leader = shell.join_response(joins[0]).leader
    for m in ids:
        if m != leader:
            shell.sync(G, m, 1)
    shell.sync(G, leader, 1, {m: assignment(2 * i, 2 * i + 1) for i, m in enumerate(ids)})
    shell.commit(G, {0: 3, 2: 4}, member_id=ids[0], generation=1)
    shell.leave(G, (ids[2], None))  # a rebalance: generation 2 with two members
    rejoins = [shell.join(G, m) for m in ids[:2]]
    leader = shell.join_response(rejoins[0]).leader
    for m in ids[:2]:
        if m != leader:
            shell.sync(G, m, 2)
    shell.sync(G, leader, 2, {ids[0]: assignment(0, 1, 2), ids[1]: assignment(3, 4, 5)})
    stale = shell.commit(G, {4: 9}, member_id=ids[2], generation=1)  # refused, so never in the history
    shell.commit(G, {0: 7}, member_id=ids[1], generation=2)

    partition = shell.coordinator.partition_for(G)
    shell.resign(partition)
    successor = GroupShell(GroupCoordinator(2, shell.coordinator.config), shell.log, mono_ms=shell.mono_ms)
    successor.become_leader(partition, leader_epoch=1)
    successor.commit(G, {1: 8}, member_id=ids[0], generation=2)
    successor.advance(60_000)  # nobody heartbeats the new coordinator: the members expire, the group empties
    successor.commit(G, {1: 9})

    history = shell.events + successor.events
    assert shell.commit_errors(stale) == {ErrorCode.UNKNOWN_MEMBER_ID}  # it left: its generation is gone
    assert {type(e).__name__ for e in history} >= {
        "GroupGenerationStarted",
        "GroupAssignmentSynced",
        "OffsetsCommitted",
        "GroupLoaded",
        "MemberLeft",
    }
    assert check_group_history(history) == []


def test_a_generation_lost_with_its_coordinator_before_the_sync_may_start_again() -> None:
    # Kafka persists a generation at its sync: a coordinator that dies between the join phase and the sync loses
    # it, and the next coordinator starts the same number again. Nobody ever got the lost one's assignment.
    unloaded = events.GroupUnloaded(group_id=G, partition=0, generation_id=1)
    history: list[events.Event] = [started(1, "a"), synced(1, ("a", 0)), started(2, "a", "b"), unloaded]
    assert invariants([*history, started(2, "b", "a"), synced(2, ("a", 0), ("b", 1))]) == []


def test_a_generation_handed_out_never_starts_again() -> None:
    unloaded = events.GroupUnloaded(group_id=G, partition=0, generation_id=2)
    history: list[events.Event] = [started(1, "a"), synced(1, ("a", 0)), started(2, "a"), synced(2, ("a", 0))]
    assert invariants([*history, unloaded, started(2, "a")]) == ["one_generation_at_a_time"]


def test_a_coordinator_loading_less_than_was_handed_out_is_a_violation() -> None:
    loaded = events.GroupLoaded(
        group_id=G, partition=0, generation_id=1, state="Stable", members=("a",), offsets_count=0
    )
    assert invariants([started(1, "a"), synced(1, ("a", 0)), started(2, "a"), synced(2, ("a", 0)), loaded]) == [
        "one_generation_at_a_time"
    ]


def assigned(committed_offset: int, start: int, partition: int = 0) -> events.PartitionsAssigned:
    return events.PartitionsAssigned(
        group_id=G,
        member_id="b",
        generation_id=2,
        topics=("t",),
        partitions=(partition,),
        committed=(committed_offset,),
        offsets=(start,),
    )


def test_a_new_owner_resuming_at_the_last_commit_is_fine() -> None:
    history: list[events.Event] = [started(1, "a"), committed(1, "a", offset=7), started(2, "b"), assigned(7, 7)]
    assert invariants(history) == []
    assert invariants([assigned(-1, 0, partition=3)]) == []  # nothing committed: auto.offset.reset decides


def test_a_new_owner_told_a_stale_commit_would_read_again_or_skip() -> None:
    history: list[events.Event] = [started(1, "a"), committed(1, "a", offset=4), committed(1, "a", offset=9)]
    assert invariants([*history, started(2, "b"), assigned(4, 4)]) == ["resumes_at_commit"]
    assert invariants([*history, started(2, "b"), assigned(-1, 0)]) == ["resumes_at_commit"]


def test_a_new_owner_starting_elsewhere_than_the_commit_is_a_violation() -> None:
    history: list[events.Event] = [started(1, "a"), committed(1, "a", offset=9), started(2, "b")]
    assert invariants([*history, assigned(9, 12)]) == ["resumes_at_commit"]
