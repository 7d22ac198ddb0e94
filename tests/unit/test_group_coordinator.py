"""The group coordinator's rules, one story each: Kafka's classic group protocol, offsets and failover.

Method: the real GroupCoordinator in a hand-driven shell (tests/support/groups.py) whose `__consumer_offsets` is a
list per partition; time moves only when a test advances it. Each test reads as given / when / then, with Kafka's
error names. Appends commit at once unless the test holds them.
"""

from __future__ import annotations

import pytest

from hightide.core.group_coordinator import GroupCoordinator, GroupCoordinatorConfig, GroupState
from hightide.protocol import events, group_records, wire
from hightide.protocol.errors import ErrorCode
from support.groups import REBALANCE_MS, SESSION_MS, TOPIC, GroupShell, assignment, subscription

G = "payments"
INITIAL_DELAY_MS = 3_000


def stable_group(shell: GroupShell, members: int, group: str = G, **join: object) -> list[str]:
    """Given a Stable group of `members` dynamic members (joined together), each with one partition."""
    ids = [shell.new_member(group, **join) for _ in range(members)]
    joins = [shell.join(group, member_id, **join) for member_id in ids]  # type: ignore[arg-type]
    shell.advance_until_answered(*joins)
    responses = [shell.join_response(r) for r in joins]
    generation = responses[0].generation_id
    leader = responses[0].leader
    syncs = [shell.sync(group, m, generation) for m in ids if m != leader]
    shell.sync(group, leader, generation, {m: assignment(i) for i, m in enumerate(ids)})
    assert all(shell.sync_response(s).error_code is ErrorCode.NONE for s in syncs)
    assert shell.coordinator.group_state(group) is GroupState.STABLE
    return ids


# -- where groups live -------------------------------------------------------------------------------------------


def test_a_broker_not_leading_the_groups_partition_answers_not_coordinator() -> None:
    shell = GroupShell.leading_all(partitions=3)
    partition = shell.coordinator.partition_for(G)
    shell.resign(partition)
    answer = shell.join_response(shell.join(G))
    assert answer.error_code is ErrorCode.NOT_COORDINATOR
    assert shell.fetch_offsets(G).error_code is ErrorCode.NOT_COORDINATOR


def test_while_the_partition_loads_requests_get_coordinator_load_in_progress() -> None:
    coordinator = GroupCoordinator(1, GroupCoordinatorConfig(offsets_topic_num_partitions=3))
    shell = GroupShell(coordinator, {p: [] for p in range(3)})
    partition = coordinator.partition_for(G)
    effects = coordinator.on_become_leader(partition, 0, shell.now)  # the shell has not read the log back yet
    assert len(effects) == 1
    assert shell.join_response(shell.join(G)).error_code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.on_list_groups(wire.ListGroupsRequest()).error_code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    shell.carry_out(effects)
    assert shell.join_response(shell.join(G)).error_code is ErrorCode.MEMBER_ID_REQUIRED


def test_an_empty_group_id_is_invalid() -> None:
    shell = GroupShell.leading_all()
    assert shell.join_response(shell.join("")).error_code is ErrorCode.INVALID_GROUP_ID
    assert shell.heartbeat("", "m", 1) is ErrorCode.INVALID_GROUP_ID


# -- JoinGroup ----------------------------------------------------------------------------------------------------


def test_a_new_dynamic_member_gets_member_id_required_then_joins_with_it() -> None:
    shell = GroupShell.leading_all()
    first = shell.join_response(shell.join(G, client_id="app"))
    assert first.error_code is ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("app-")
    assert shell.coordinator.member_ids(G) == ()  # only pending until it rejoins
    request = shell.join(G, first.member_id)
    assert request not in shell.answers  # the initial rebalance delay runs
    shell.advance(INITIAL_DELAY_MS)
    answer = shell.join_response(request)
    assert (answer.error_code, answer.generation_id, answer.leader) == (ErrorCode.NONE, 1, first.member_id)
    assert answer.protocol_name == "range"
    assert [m.member_id for m in answer.members] == [first.member_id]  # the leader gets the member list


def test_a_pending_member_that_never_rejoins_is_forgotten_after_its_session_timeout() -> None:
    shell = GroupShell.leading_all()
    ids = stable_group(shell, 1)
    ghost = shell.new_member(G)
    shell.advance(SESSION_MS - 1)
    shell.heartbeat(G, ids[0], 1)
    shell.advance(1)
    assert shell.join_response(shell.join(G, ghost)).error_code is ErrorCode.UNKNOWN_MEMBER_ID
    assert shell.coordinator.group_state(G) is GroupState.STABLE


def test_session_timeout_outside_the_brokers_bounds_is_invalid() -> None:
    shell = GroupShell.leading_all()
    assert shell.join_response(shell.join(G, session_ms=5_999)).error_code is ErrorCode.INVALID_SESSION_TIMEOUT
    assert shell.join_response(shell.join(G, session_ms=1_800_001)).error_code is ErrorCode.INVALID_SESSION_TIMEOUT


def test_joining_an_unknown_group_with_a_member_id_is_unknown_member_id() -> None:
    shell = GroupShell.leading_all()
    assert shell.join_response(shell.join(G, "made-up")).error_code is ErrorCode.UNKNOWN_MEMBER_ID


def test_the_initial_delay_waits_for_more_members_so_the_group_starts_in_one_generation() -> None:
    shell = GroupShell.leading_all()
    a = shell.new_member(G)
    join_a = shell.join(G, a)
    shell.advance(INITIAL_DELAY_MS - 1)
    b = shell.new_member(G)
    join_b = shell.join(G, b)  # arrives within the delay: the delay is extended
    shell.advance(1)
    assert join_a not in shell.answers
    shell.advance(INITIAL_DELAY_MS)
    answers = [shell.join_response(join_a), shell.join_response(join_b)]
    assert [x.generation_id for x in answers] == [1, 1]
    assert len(shell.events_of(events.GroupGenerationStarted)) == 1


def test_the_initial_delay_never_exceeds_the_rebalance_timeout() -> None:
    shell = GroupShell.leading_all()
    first = shell.join(G, shell.new_member(G, rebalance_ms=5_000), rebalance_ms=5_000)
    for _ in range(4):  # a member every 2.5 s would extend the delay forever; the rebalance timeout caps it
        shell.advance(2_500)
        shell.join(G, shell.new_member(G, rebalance_ms=5_000), rebalance_ms=5_000)
    assert shell.join_response(first).generation_id == 1


def test_protocol_selection_takes_the_most_preferred_protocol_every_member_supports() -> None:
    shell = GroupShell.leading_all()
    a = shell.new_member(G)
    b = shell.new_member(G)
    ja = shell.join(G, a, protocols=(("sticky", b"a"), ("range", b"a")))
    jb = shell.join(G, b, protocols=(("range", b"b"), ("sticky", b"b")))
    shell.advance_until_answered(ja, jb)
    assert shell.join_response(ja).protocol_name == shell.join_response(jb).protocol_name
    # A member with no protocol in common with every member is refused.
    assert shell.join_response(shell.join(G, protocols=(("roundrobin", b""),))).error_code is (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )


def test_the_leader_gets_each_members_metadata_for_the_chosen_protocol() -> None:
    shell = GroupShell.leading_all()
    a, b = shell.new_member(G), shell.new_member(G)
    ja = shell.join(G, a, protocols=(("range", subscription("x")),))
    shell.join(G, b, protocols=(("range", subscription("y")),))
    shell.advance_until_answered(ja)
    members = {m.member_id: m.metadata for m in shell.join_response(ja).members}
    assert members == {a: subscription("x"), b: subscription("y")}


def test_a_different_protocol_type_is_inconsistent() -> None:
    shell = GroupShell.leading_all()
    stable_group(shell, 1)
    assert shell.join_response(shell.join(G, protocol_type="connect")).error_code is (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )


def test_a_new_member_makes_a_stable_group_rebalance_and_heartbeats_say_so() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    b = shell.new_member(G)
    join_b = shell.join(G, b)
    assert shell.coordinator.group_state(G) is GroupState.PREPARING_REBALANCE
    assert shell.heartbeat(G, a, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    join_a = shell.join(G, a)  # every known member rejoined: the join phase ends at once
    assert shell.join_response(join_a).generation_id == 2
    assert shell.join_response(join_b).generation_id == 2
    assert shell.coordinator.group_state(G) is GroupState.COMPLETING_REBALANCE


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() -> None:
    shell = GroupShell.leading_all()
    a, b = stable_group(shell, 2)
    join_a = shell.join(G, a)  # the leader rejoins: a rebalance
    for _ in range(REBALANCE_MS // 5_000 - 1):  # b keeps its session with heartbeats, but never rejoins
        shell.advance(5_000)
        assert shell.heartbeat(G, b, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    shell.advance(4_999)
    assert join_a not in shell.answers
    shell.advance(1)
    answer = shell.join_response(join_a)
    assert (answer.generation_id, [m.member_id for m in answer.members]) == (2, [a])
    left = shell.events_of(events.MemberLeft)
    assert [(e.member_id, e.reason) for e in left] == [(b, "rebalance_timeout")]
    assert shell.heartbeat(G, b, 2) is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_follower_rejoining_a_stable_group_with_the_same_protocols_gets_the_current_generation() -> None:
    shell = GroupShell.leading_all()
    ids = stable_group(shell, 2)
    follower = ids[1] if shell.coordinator.leader_of(G) == ids[0] else ids[0]
    answer = shell.join_response(shell.join(G, follower))
    assert (answer.error_code, answer.generation_id) == (ErrorCode.NONE, 1)
    assert shell.coordinator.group_state(G) is GroupState.STABLE


def test_a_member_changing_its_protocols_makes_the_group_rebalance() -> None:
    shell = GroupShell.leading_all()
    ids = stable_group(shell, 2)
    follower = ids[1] if shell.coordinator.leader_of(G) == ids[0] else ids[0]
    shell.join(G, follower, protocols=(("range", subscription("other")),))
    assert shell.coordinator.group_state(G) is GroupState.PREPARING_REBALANCE


def test_the_group_max_size_refuses_one_more_member() -> None:
    shell = GroupShell.leading_all(group_max_size=1)
    stable_group(shell, 1)
    assert shell.join_response(shell.join(G)).error_code is ErrorCode.GROUP_MAX_SIZE_REACHED


# -- SyncGroup ----------------------------------------------------------------------------------------------------


def test_followers_wait_for_the_leaders_assignment_which_is_persisted_before_anyone_gets_it() -> None:
    shell = GroupShell.leading_all()
    a, b = shell.new_member(G), shell.new_member(G)
    ja, jb = shell.join(G, a), shell.join(G, b)
    shell.advance_until_answered(ja, jb)
    leader = shell.join_response(ja).leader
    follower = b if leader == a else a
    sync_follower = shell.sync(G, follower, 1)
    assert sync_follower not in shell.answers
    shell.hold_appends = True
    sync_leader = shell.sync(G, leader, 1, {leader: assignment(0, 1), follower: assignment(2)})
    assert sync_leader not in shell.answers and sync_follower not in shell.answers
    assert len(shell.held) == 1
    shell.release()
    assert shell.sync_response(sync_leader).assignment == assignment(0, 1)
    assert shell.sync_response(sync_follower).assignment == assignment(2)
    assert shell.coordinator.group_state(G) is GroupState.STABLE
    [synced] = shell.events_of(events.GroupAssignmentSynced)
    assert sorted(zip(synced.members, synced.partitions, strict=True)) == sorted(
        [(leader, 0), (leader, 1), (follower, 2)]
    )
    assert jb in shell.answers


def test_a_failed_assignment_append_fails_every_sync_and_the_group_rebalances() -> None:
    shell = GroupShell.leading_all()
    a = shell.new_member(G)
    shell.join(G, a)
    shell.advance(INITIAL_DELAY_MS)
    shell.hold_appends = True
    sync = shell.sync(G, a, 1, {a: assignment(0)})
    shell.release(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert shell.sync_response(sync).error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert shell.coordinator.group_state(G) is GroupState.PREPARING_REBALANCE


def test_a_member_the_leader_left_out_gets_an_empty_assignment() -> None:
    shell = GroupShell.leading_all()
    a, b = shell.new_member(G), shell.new_member(G)
    ja, _ = shell.join(G, a), shell.join(G, b)
    shell.advance_until_answered(ja)
    leader = shell.join_response(ja).leader
    follower = b if leader == a else a
    sf = shell.sync(G, follower, 1)
    shell.sync(G, leader, 1, {leader: assignment(0), "nobody": assignment(1)})
    assert shell.sync_response(sf).assignment == b""


def test_sync_from_another_generation_is_illegal_generation() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    assert shell.sync_response(shell.sync(G, a, 0)).error_code is ErrorCode.ILLEGAL_GENERATION


def test_sync_while_preparing_a_rebalance_is_rebalance_in_progress() -> None:
    shell = GroupShell.leading_all()
    a, b = stable_group(shell, 2)
    shell.join(G, shell.coordinator.leader_of(G) or a)
    assert shell.sync_response(shell.sync(G, b if shell.coordinator.leader_of(G) == a else a, 1)).error_code is (
        ErrorCode.REBALANCE_IN_PROGRESS
    )


def test_sync_in_a_stable_group_returns_the_members_assignment() -> None:
    shell = GroupShell.leading_all()
    ids = stable_group(shell, 2)
    assert shell.sync_response(shell.sync(G, ids[1], 1)).assignment == assignment(1)


def test_waiting_syncs_are_answered_rebalance_in_progress_when_a_member_leaves_first() -> None:
    shell = GroupShell.leading_all()
    a, b = shell.new_member(G), shell.new_member(G)
    ja, _ = shell.join(G, a), shell.join(G, b)
    shell.advance_until_answered(ja)
    leader = shell.join_response(ja).leader
    follower = b if leader == a else a
    waiting = shell.sync(G, follower, 1)
    shell.leave(G, (leader, None))
    assert shell.sync_response(waiting).error_code is ErrorCode.REBALANCE_IN_PROGRESS


def test_a_wrong_protocol_name_at_sync_is_inconsistent() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    answer = shell.sync_response(shell.sync(G, a, 1, protocol_name="roundrobin"))
    assert answer.error_code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


# -- Heartbeat, sessions, LeaveGroup ------------------------------------------------------------------------------


def test_heartbeats_keep_a_member_and_silence_expires_it_after_the_session_timeout() -> None:
    shell = GroupShell.leading_all()
    a, b = stable_group(shell, 2)
    shell.advance(SESSION_MS // 2)
    assert (shell.heartbeat(G, a, 1), shell.heartbeat(G, b, 1)) == (ErrorCode.NONE, ErrorCode.NONE)
    shell.advance(SESSION_MS // 2)
    assert shell.heartbeat(G, a, 1) is ErrorCode.NONE  # b is silent from here on
    shell.advance(SESSION_MS // 2 - 1)
    assert shell.coordinator.member_ids(G) == (a, b)
    shell.advance(1)
    assert shell.coordinator.member_ids(G) == (a,)
    left = shell.events_of(events.MemberLeft)
    assert [(e.member_id, e.reason) for e in left] == [(b, "session_timeout")]
    assert shell.heartbeat(G, a, 1) is ErrorCode.REBALANCE_IN_PROGRESS


def test_heartbeat_errors() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    assert shell.heartbeat(G, a, 0) is ErrorCode.ILLEGAL_GENERATION
    assert shell.heartbeat(G, "stranger", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert shell.heartbeat("no-such-group", a, 1) is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_heartbeat_while_completing_the_rebalance_is_fine() -> None:
    shell = GroupShell.leading_all()
    a = shell.new_member(G)
    shell.join(G, a)
    shell.advance(INITIAL_DELAY_MS)
    assert shell.coordinator.group_state(G) is GroupState.COMPLETING_REBALANCE
    assert shell.heartbeat(G, a, 1) is ErrorCode.NONE


def test_the_last_member_leaving_empties_the_group_in_a_new_generation_that_is_persisted() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    answer = shell.leave(G, (a, None))
    assert [wire.error_code_of(m.error) for m in answer.members] == [ErrorCode.NONE]
    assert shell.coordinator.group_state(G) is GroupState.EMPTY
    assert shell.coordinator.generation(G) == 2
    last = group_records.decode_group_metadata_value(shell.log[shell.coordinator.partition_for(G)][-1].value or b"")
    assert (last.generation, last.members, last.protocol) == (2, (), None)


def test_leaving_with_an_unknown_member_id_is_unknown_member_id_per_member() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    answer = shell.leave(G, ("stranger", None), (a, None))
    assert [wire.error_code_of(m.error) for m in answer.members] == [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.NONE]


# -- static membership ---------------------------------------------------------------------------------------------


def static_stable_group(shell: GroupShell, instances: list[str]) -> dict[str, str]:
    joins = {i: shell.join(G, instance_id=i) for i in instances}  # static members need no MEMBER_ID_REQUIRED
    shell.advance_until_answered(*joins.values())
    ids = {i: shell.join_response(r).member_id for i, r in joins.items()}
    leader = shell.join_response(joins[instances[0]]).leader
    for m in ids.values():
        if m != leader:
            shell.sync(G, m, 1)
    shell.sync(G, leader, 1, {m: assignment(n) for n, m in enumerate(ids.values())})
    assert shell.coordinator.group_state(G) is GroupState.STABLE
    return ids


def test_a_static_member_restarting_takes_its_place_back_without_a_rebalance() -> None:
    shell = GroupShell.leading_all()
    ids = static_stable_group(shell, ["c1", "c2"])
    answer = shell.join_response(shell.join(G, instance_id="c2"))  # restarted: it lost its member id
    assert answer.error_code is ErrorCode.NONE
    assert answer.member_id != ids["c2"]
    assert answer.generation_id == 1
    assert shell.coordinator.group_state(G) is GroupState.STABLE
    assert not shell.events_of(events.GroupRebalanceStarted)[1:]  # only the first generation's
    sync = shell.sync_response(shell.sync(G, answer.member_id, 1))
    assert sync.assignment == assignment(1)  # the assignment it had
    assert shell.heartbeat(G, ids["c2"], 1, instance_id="c2") is ErrorCode.FENCED_INSTANCE_ID


def test_a_static_member_restarting_with_a_new_subscription_keeps_its_place_if_the_protocol_stays() -> None:
    # A restarted consumer's subscription no longer lists what it owned: its metadata differs, its protocol not.
    shell = GroupShell.leading_all()
    ids = static_stable_group(shell, ["c1", "c2"])
    answer = shell.join_response(shell.join(G, instance_id="c2", protocols=(("range", subscription("orders")),)))
    assert (answer.error_code, answer.generation_id) == (ErrorCode.NONE, 1)
    assert shell.coordinator.group_state(G) is GroupState.STABLE
    assert answer.member_id != ids["c2"]


def test_a_static_member_rejoining_so_that_the_chosen_protocol_changes_causes_a_rebalance() -> None:
    shell = GroupShell.leading_all()
    first = shell.join(G, instance_id="c1", protocols=(("range", b""), ("roundrobin", b"")))
    shell.advance_until_answered(first)
    member = shell.join_response(first).member_id
    shell.sync(G, member, 1, {member: assignment(0)})
    assert shell.coordinator.group_state(G) is GroupState.STABLE
    rejoin = shell.join_response(shell.join(G, instance_id="c1", protocols=(("roundrobin", b""), ("range", b""))))
    # It was the only member, so the rebalance it caused ends at once, in a new generation.
    assert (rejoin.generation_id, rejoin.protocol_name) == (2, "roundrobin")
    assert shell.coordinator.group_state(G) is GroupState.COMPLETING_REBALANCE


def test_a_static_members_session_expiring_removes_it_like_any_member() -> None:
    shell = GroupShell.leading_all()
    ids = static_stable_group(shell, ["c1", "c2"])
    for _ in range(3):
        shell.advance(SESSION_MS // 2)
        shell.heartbeat(G, ids["c1"], 1, instance_id="c1")
    assert shell.coordinator.member_ids(G) == (ids["c1"],)


def test_a_static_member_not_rejoining_stays_a_member_through_the_rebalance() -> None:
    shell = GroupShell.leading_all()
    ids = static_stable_group(shell, ["c1", "c2"])
    leader = shell.coordinator.leader_of(G)
    assert leader == ids["c1"]
    join = shell.join(G, ids["c1"], instance_id="c1")  # the leader rejoins; c2 heartbeats but does not rejoin
    for _ in range(REBALANCE_MS // 5_000):
        shell.advance(5_000)
        shell.heartbeat(G, ids["c2"], 1, instance_id="c2")
    answer = shell.join_response(join)
    assert answer.generation_id == 2
    assert {m.member_id for m in answer.members} == {ids["c1"], ids["c2"]}


def test_a_leaving_static_member_may_name_only_its_instance_id() -> None:
    shell = GroupShell.leading_all()
    static_stable_group(shell, ["c1", "c2"])
    answer = shell.leave(G, ("", "c2"))
    assert [wire.error_code_of(m.error) for m in answer.members] == [ErrorCode.NONE]
    assert shell.coordinator.group_state(G) is GroupState.PREPARING_REBALANCE


def test_a_replaced_static_member_is_fenced_from_every_request() -> None:
    shell = GroupShell.leading_all()
    ids = static_stable_group(shell, ["c1"])
    shell.join(G, instance_id="c1")
    old = ids["c1"]
    assert shell.join_response(shell.join(G, old, instance_id="c1")).error_code is ErrorCode.FENCED_INSTANCE_ID
    assert shell.sync_response(shell.sync(G, old, 1, group_instance_id="c1")).error_code is (
        ErrorCode.FENCED_INSTANCE_ID
    )
    commit = shell.commit(G, {0: 5}, member_id=old, generation=1, instance_id="c1")
    assert shell.commit_errors(commit) == {ErrorCode.FENCED_INSTANCE_ID}
    assert [wire.error_code_of(m.error) for m in shell.leave(G, (old, "c1")).members] == [ErrorCode.FENCED_INSTANCE_ID]


def test_a_failed_static_replacement_is_reverted() -> None:
    shell = GroupShell.leading_all()
    ids = static_stable_group(shell, ["c1"])
    shell.hold_appends = True
    join = shell.join(G, instance_id="c1")
    shell.release(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert shell.join_response(join).error_code is ErrorCode.NOT_COORDINATOR
    assert shell.coordinator.member_ids(G) == (ids["c1"],)
    assert shell.heartbeat(G, ids["c1"], 1, instance_id="c1") is ErrorCode.NONE


# -- offsets -------------------------------------------------------------------------------------------------------


def test_a_member_of_the_current_generation_commits_and_the_answer_waits_for_the_append() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    shell.hold_appends = True
    commit = shell.commit(G, {0: 10, 1: 20}, member_id=a, generation=1)
    assert commit not in shell.answers
    assert shell.fetch_offsets(G, (0,)).partitions[0].committed_offset == -1  # not committed yet
    shell.release()
    assert shell.commit_errors(commit) == {ErrorCode.NONE}
    fetched = {p.partition: p.committed_offset for p in shell.fetch_offsets(G).partitions}
    assert fetched == {0: 10, 1: 20}
    [event] = shell.events_of(events.OffsetsCommitted)
    assert (event.generation_id, event.member_id, event.offsets) == (1, a, (10, 20))


def test_a_commit_from_a_stale_generation_is_illegal_generation() -> None:
    shell = GroupShell.leading_all()
    a, b = stable_group(shell, 2)
    shell.leave(G, (b, None))
    shell.join(G, a)
    assert shell.coordinator.generation(G) == 2
    commit = shell.commit(G, {0: 10}, member_id=a, generation=1)
    assert shell.commit_errors(commit) == {ErrorCode.ILLEGAL_GENERATION}
    assert shell.fetch_offsets(G).partitions == ()


def test_a_commit_from_a_member_the_group_does_not_know_is_unknown_member_id() -> None:
    shell = GroupShell.leading_all()
    stable_group(shell, 1)
    assert shell.commit_errors(shell.commit(G, {0: 1}, member_id="stranger", generation=1)) == {
        ErrorCode.UNKNOWN_MEMBER_ID
    }


def test_a_commit_while_the_assignment_is_being_decided_is_rebalance_in_progress() -> None:
    shell = GroupShell.leading_all()
    a = shell.new_member(G)
    shell.join(G, a)
    shell.advance(INITIAL_DELAY_MS)
    assert shell.commit_errors(shell.commit(G, {0: 1}, member_id=a, generation=1)) == {ErrorCode.REBALANCE_IN_PROGRESS}


def test_a_member_may_commit_while_a_rebalance_is_being_prepared() -> None:
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    shell.join(G, shell.new_member(G))
    assert shell.coordinator.group_state(G) is GroupState.PREPARING_REBALANCE
    assert shell.commit_errors(shell.commit(G, {0: 7}, member_id=a, generation=1)) == {ErrorCode.NONE}


def test_a_simple_consumer_commits_with_no_generation_into_an_empty_group() -> None:
    shell = GroupShell.leading_all()
    commit = shell.commit("simple", {3: 99})
    assert shell.commit_errors(commit) == {ErrorCode.NONE}
    assert shell.coordinator.group_state("simple") is GroupState.EMPTY
    assert shell.fetch_offsets("simple", (3,)).partitions[0].committed_offset == 99


def test_a_commit_with_no_generation_into_a_managed_group_is_refused() -> None:
    shell = GroupShell.leading_all()
    stable_group(shell, 1)
    assert shell.commit_errors(shell.commit(G, {0: 1})) == {ErrorCode.UNKNOWN_MEMBER_ID}


def test_a_commit_with_a_generation_into_an_unknown_group_is_illegal_generation() -> None:
    shell = GroupShell.leading_all()
    assert shell.commit_errors(shell.commit("nobody", {0: 1}, member_id="m", generation=3)) == {
        ErrorCode.ILLEGAL_GENERATION
    }


def test_a_partition_the_metadata_does_not_have_is_unknown_topic_or_partition_and_not_committed() -> None:
    """KafkaApis' check before the coordinator: the partitions the broker's metadata has are committed, the others
    answered UNKNOWN_TOPIC_OR_PARTITION; a commit of unknown partitions only is answered at once, without the
    group's own checks (a stale generation is not even looked at)."""
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    commit = shell.commit(G, {0: 10, 7: 70}, member_id=a, generation=1, known=lambda _topic, partition: partition < 2)
    answer = shell.answers[commit]
    assert isinstance(answer, wire.OffsetCommitResponse)
    assert {p.partition: wire.error_code_of(p.error) for p in answer.partitions} == {
        0: ErrorCode.NONE,
        7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert {p.partition: p.committed_offset for p in shell.fetch_offsets(G).partitions} == {0: 10}
    stale = shell.commit(G, {7: 1}, member_id=a, generation=99, known=lambda _topic, _partition: False)
    assert shell.commit_errors(stale) == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    refused = shell.commit(G, {0: 1, 7: 1}, member_id=a, generation=99, known=lambda _topic, partition: partition < 2)
    assert shell.commit_errors(refused) == {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert {p.partition: p.committed_offset for p in shell.fetch_offsets(G).partitions} == {0: 10}


def test_offset_metadata_over_the_limit_is_refused_for_that_partition() -> None:
    shell = GroupShell.leading_all(offset_metadata_max_bytes=4)
    commit = shell.commit("simple", {0: 1}, metadata="12345")
    assert shell.commit_errors(commit) == {ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert not shell.held and all(not records for records in shell.log.values())


def test_a_failed_offsets_append_is_answered_with_the_coordinators_error_and_commits_nothing() -> None:
    shell = GroupShell.leading_all()
    shell.hold_appends = True
    commit = shell.commit("simple", {0: 1})
    shell.release(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert shell.commit_errors(commit) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert shell.fetch_offsets("simple", (0,)).partitions[0].committed_offset == -1
    assert not shell.events_of(events.OffsetsCommitted)


def test_offset_fetch_of_an_unknown_group_is_empty() -> None:
    shell = GroupShell.leading_all()
    answer = shell.fetch_offsets("nobody", (0, 1))
    assert answer.error_code is ErrorCode.NONE
    assert [p.committed_offset for p in answer.partitions] == [-1, -1]


# -- failover: a new coordinator rebuilds from the log --------------------------------------------------------------


def test_a_new_coordinator_rebuilds_groups_and_offsets_from_the_offsets_partition() -> None:
    old = GroupShell.leading_all(partitions=3)
    a, b = stable_group(old, 2)
    old.commit(G, {0: 10, 1: 20}, member_id=a, generation=1)
    old.commit(G, {0: 15}, member_id=b, generation=1)  # the later commit of a partition wins
    old.commit("simple", {2: 5})
    old.delete("simple")  # tombstones: gone after the replay too
    partition = old.coordinator.partition_for(G)
    old.resign(partition)
    assert [e.group_id for e in old.events_of(events.GroupUnloaded)] == [G]

    new = GroupShell(GroupCoordinator(2, old.coordinator.config), old.log, mono_ms=old.mono_ms)
    new.become_leader(partition, leader_epoch=1)
    new.become_leader(old.coordinator.partition_for("simple"), leader_epoch=1)
    assert {p.partition: p.committed_offset for p in new.fetch_offsets(G).partitions} == {0: 15, 1: 20}
    assert new.coordinator.group_state(G) is GroupState.STABLE
    assert new.coordinator.generation(G) == 1
    assert set(new.coordinator.member_ids(G)) == {a, b}
    assert new.coordinator.group_state("simple") is None
    assert new.heartbeat(G, a, 1) is ErrorCode.NONE
    assert new.sync_response(new.sync(G, b, 1)).assignment == assignment(1)
    [loaded] = new.events_of(events.GroupLoaded)
    assert (loaded.group_id, loaded.state, loaded.offsets_count) == (G, "Stable", 2)


def test_loaded_members_that_never_heartbeat_expire_a_session_after_the_load() -> None:
    old = GroupShell.leading_all(partitions=1)
    stable_group(old, 2)
    new = GroupShell(GroupCoordinator(2, old.coordinator.config), old.log, mono_ms=old.mono_ms + 60_000)
    new.become_leader(0, leader_epoch=1)
    new.advance(SESSION_MS - 1)
    assert len(new.coordinator.member_ids(G)) == 2
    new.advance(1)
    assert new.coordinator.member_ids(G) == ()
    assert new.coordinator.group_state(G) is GroupState.EMPTY


def test_resigning_answers_parked_joins_not_coordinator() -> None:
    shell = GroupShell.leading_all()
    a = shell.new_member(G)
    join = shell.join(G, a)
    shell.resign(shell.coordinator.partition_for(G))
    assert shell.join_response(join).error_code is ErrorCode.NOT_COORDINATOR
    assert shell.coordinator.group_state(G) is None


def test_an_append_that_completes_after_resigning_is_not_coordinator() -> None:
    shell = GroupShell.leading_all()
    shell.hold_appends = True
    commit = shell.commit("simple", {0: 1})
    shell.resign(shell.coordinator.partition_for("simple"))
    shell.release()
    assert shell.commit_errors(commit) == {ErrorCode.NOT_COORDINATOR}


def test_a_load_for_an_epoch_no_longer_led_is_dropped() -> None:
    coordinator = GroupCoordinator(1, GroupCoordinatorConfig(offsets_topic_num_partitions=1))
    shell = GroupShell(coordinator, {0: []})
    stale = coordinator.on_become_leader(0, 4, shell.now)
    shell.become_leader(0, 5)
    assert coordinator.on_partition_loaded(0, 4, [], shell.now) == []
    assert len(stale) == 1
    assert coordinator.loaded_partitions() == (0,)


# -- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------------------------------------


def test_list_groups_with_states_and_a_filter() -> None:
    shell = GroupShell.leading_all()
    stable_group(shell, 1)
    shell.commit("simple", {0: 1})
    listed = shell.coordinator.on_list_groups(wire.ListGroupsRequest())
    assert [(g.group_id, g.group_state, g.protocol_type) for g in listed.groups] == [
        (G, "Stable", "consumer"),
        ("simple", "Empty", ""),
    ]
    only_empty = shell.coordinator.on_list_groups(wire.ListGroupsRequest(states_filter=("empty",)))
    assert [g.group_id for g in only_empty.groups] == ["simple"]


def test_describe_a_stable_group_shows_members_and_assignments() -> None:
    shell = GroupShell.leading_all()
    ids = stable_group(shell, 2)
    [described, unknown] = shell.coordinator.on_describe_groups(wire.DescribeGroupsRequest(groups=(G, "nobody"))).groups
    assert (described.group_state, described.protocol_data, described.generation_id) == ("Stable", "range", 1)
    assert {m.member_id: m.member_assignment for m in described.members} == {
        ids[0]: assignment(0),
        ids[1]: assignment(1),
    }
    assert (unknown.error, unknown.group_state) == (0, "Dead")


def test_delete_groups_refuses_a_group_with_members_and_tombstones_an_empty_one() -> None:
    shell = GroupShell.leading_all()
    stable_group(shell, 1)
    shell.commit("simple", {0: 1, 1: 2})
    request = shell.delete(G, "simple", "nobody")
    answer = shell.answers[request]
    assert isinstance(answer, wire.DeleteGroupsResponse)
    assert {r.group_id: wire.error_code_of(r.error) for r in answer.results} == {
        G: ErrorCode.NON_EMPTY_GROUP,
        "simple": ErrorCode.NONE,
        "nobody": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert shell.coordinator.group_state("simple") is None
    tail = shell.log[shell.coordinator.partition_for("simple")][-3:]
    assert all(record.value is None for record in tail)
    assert {group_records.decode_key(r.key) for r in tail} == {
        group_records.GroupMetadataKey("simple"),
        group_records.OffsetCommitKey("simple", TOPIC, 0),
        group_records.OffsetCommitKey("simple", TOPIC, 1),
    }


@pytest.mark.parametrize("error", [ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT])
def test_delete_groups_answers_after_the_tombstones_are_committed(error: ErrorCode) -> None:
    shell = GroupShell.leading_all()
    shell.commit("simple", {0: 1})
    shell.hold_appends = True
    request = shell.delete("simple")
    assert request not in shell.answers
    shell.release(error)
    answer = shell.answers[request]
    assert isinstance(answer, wire.DeleteGroupsResponse)
    expected = ErrorCode.NONE if error is ErrorCode.NONE else ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert [wire.error_code_of(r.error) for r in answer.results] == [expected]


# -- the effects' time --------------------------------------------------------------------------------------------


def test_next_deadline_is_the_earliest_session_or_join_phase_end() -> None:
    shell = GroupShell.leading_all()
    assert shell.coordinator.next_deadline_ms() is None
    a = shell.new_member(G)
    shell.join(G, a)
    assert shell.coordinator.next_deadline_ms() == shell.mono_ms + INITIAL_DELAY_MS
    shell.advance(INITIAL_DELAY_MS)
    assert shell.coordinator.next_deadline_ms() == shell.mono_ms + SESSION_MS


def test_a_new_generation_waits_for_a_commit_accepted_in_the_current_one() -> None:
    """Kafka appends a commit's records before the next generation's, under the group lock; here the append is
    asynchronous, so the join phase waits for it: the commit never lands in a generation it was not checked in."""
    shell = GroupShell.leading_all()
    [a] = stable_group(shell, 1)
    b = shell.new_member(G)
    join_b = shell.join(G, b)
    shell.hold_appends = True
    commit = shell.commit(G, {0: 5}, member_id=a, generation=1)  # allowed while preparing the rebalance
    join_a = shell.join(G, a)  # every member rejoined, but the commit is in flight
    assert join_a not in shell.answers and join_b not in shell.answers
    shell.release()
    assert shell.commit_errors(commit) == {ErrorCode.NONE}
    assert shell.join_response(join_a).generation_id == 2
    kinds = [type(e) for e in shell.events]
    assert kinds.index(events.OffsetsCommitted) < len(kinds) - 1 - kinds[::-1].index(events.GroupGenerationStarted)
