"""A consumer's group membership (hightide.core.group_member): the transitions Kafka's ConsumerCoordinator makes.

Method: a `GroupMembership` is fed hand-built coordinator answers and a monotonic `now_ms`, as the client service
and the group simulation feed it; each test reads back the requests it builds (decoding their ConsumerProtocol
bytes), its state, and the `Reply` that tells the shell what to do next.
"""

from __future__ import annotations

from hightide.core.clock import MonoMs
from hightide.core.group_member import GroupMembership, MemberConfig, MemberState, Then
from hightide.protocol import group_records, wire
from hightide.protocol.errors import ErrorCode

T = "orders"
GROUP = "billing"
HEARTBEAT_MS = 1_000
SESSION_MS = 10_000
MAX_POLL_MS = 30_000


def member(strategy: str = "range", instance: str | None = None) -> GroupMembership:
    config = MemberConfig(
        group_id=GROUP,
        topics=(T,),
        strategies=(strategy,),
        group_instance_id=instance,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=MAX_POLL_MS,
    )
    return GroupMembership(config, MonoMs(0))


def subscription(request: wire.JoinGroupRequest) -> group_records.ConsumerSubscription:
    return group_records.decode_subscription(request.protocols[0].metadata)


def assignment(*partitions: int) -> bytes:
    return group_records.encode_assignment(group_records.ConsumerAssignment(((T, partitions),)))


def joined(
    m: GroupMembership, generation: int, leader: str = "other", protocol: str = "range", member_id: str = "m-1"
) -> None:
    """JoinGroup sent and answered NONE (as a follower unless `leader` is the member)."""
    m.join_request()
    answer = wire.JoinGroupResponse(
        generation_id=generation, protocol_type="consumer", protocol_name=protocol, leader=leader, member_id=member_id
    )
    assert m.on_join_response(answer).then is Then.DONE


def synced(m: GroupMembership, generation: int, *partitions: int, protocol: str = "range", now_ms: int = 0) -> None:
    """A whole rebalance as a follower, ending with `partitions` assigned."""
    joined(m, generation, protocol=protocol)
    m.sync_request({})
    reply = m.on_sync_response(wire.SyncGroupResponse(assignment=assignment(*partitions)), MonoMs(now_ms))
    assert reply.then is Then.DONE


def test_a_new_member_joins_with_the_id_the_coordinator_requires_then_leads_the_assignment() -> None:
    """KIP-394: the first JoinGroup has no member id; MEMBER_ID_REQUIRED hands one out and the member joins again
    at once with it. As leader it assigns every member's subscription with the chosen assignor."""
    m = member()
    first = m.join_request()
    assert (first.member_id, m.state) == ("", MemberState.PREPARING_REBALANCE)
    assert [p.name for p in first.protocols] == ["range"]
    assert subscription(first).topics == (T,) and subscription(first).generation_id == -1

    reply = m.on_join_response(wire.JoinGroupResponse(error=ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1"))
    assert (reply.then, m.state) == (Then.RETRY, MemberState.UNJOINED)
    second = m.join_request()
    assert second.member_id == "m-1"

    metadata = second.protocols[0].metadata
    members = (
        wire.JoinGroupMember(member_id="m-1", metadata=metadata),
        wire.JoinGroupMember(member_id="m-2", metadata=metadata),
    )
    answer = wire.JoinGroupResponse(
        generation_id=1, protocol_type="consumer", protocol_name="range", leader="m-1", member_id="m-1", members=members
    )
    assert m.on_join_response(answer).then is Then.DONE
    assert m.state is MemberState.COMPLETING_REBALANCE
    assert m.leader_topics() == (T,)
    sync = m.sync_request({T: 4})
    handed = {a.member_id: group_records.decode_assignment(a.assignment).partitions for a in sync.assignments}
    assert handed == {"m-1": ((T, (0, 1)),), "m-2": ((T, (2, 3)),)}  # Kafka's range assignor

    reply = m.on_sync_response(wire.SyncGroupResponse(assignment=assignment(0, 1)), MonoMs(500))
    assert reply.change is not None and reply.change.assigned == ((T, 0), (T, 1))
    assert (m.state, m.generation, m.needs_join, m.heartbeat_due_ms) == (MemberState.STABLE, 1, False, 1_500)


def test_a_follower_sends_no_assignment_and_keeps_the_assignments_order_in_its_next_subscription() -> None:
    """The sticky assignors read a member's owned partitions in the order it was given them (the seeds' C1/C2/C3
    example depends on it): the next JoinGroup reports [3, 0, 5], not [0, 3, 5]."""
    m = member("sticky")
    joined(m, 4, protocol="sticky")
    assert m.leader_topics() == ()
    assert m.sync_request({T: 6}).assignments == ()
    m.on_sync_response(wire.SyncGroupResponse(assignment=assignment(3, 0, 5)), MonoMs(0))
    assert m.assigned == ((T, 3), (T, 0), (T, 5))

    m.prepare_join()
    again = subscription(m.join_request())
    assert again.owned_partitions == ((T, (3, 0, 5)),) and again.generation_id == 4


def test_eager_rebalance_gives_up_everything_before_joining() -> None:
    m = member("range")
    synced(m, 1, 0, 1)
    assert m.prepare_join() == ((T, 0), (T, 1))
    assert m.assigned == ()
    joined(m, 2)
    m.sync_request({})
    reply = m.on_sync_response(wire.SyncGroupResponse(assignment=assignment(1, 2)), MonoMs(0))
    # Eager: everything in the new assignment is added (from the committed offsets), nothing is left to revoke.
    assert reply.change is not None
    assert (reply.change.added, reply.change.revoked) == (((T, 1), (T, 2)), ())
    assert not m.needs_join


def test_cooperative_rebalance_revokes_only_what_moves_and_rejoins_for_the_second_round() -> None:
    """KIP-429: the member keeps its partitions through the join; the assignment revokes 2 (to be committed
    first), the member rejoins reporting [0, 1] owned, and the second round settles."""
    m = member("cooperative-sticky")
    synced(m, 1, 0, 1, 2, protocol="cooperative-sticky")
    assert m.prepare_join() == ()  # cooperative: nothing given up before joining
    assert m.assigned == ((T, 0), (T, 1), (T, 2))

    joined(m, 2, protocol="cooperative-sticky")
    m.sync_request({})
    reply = m.on_sync_response(wire.SyncGroupResponse(assignment=assignment(0, 1)), MonoMs(0))
    assert reply.change is not None
    assert (reply.change.revoked, reply.change.added) == (((T, 2),), ())
    assert m.needs_join and m.state is MemberState.STABLE
    assert subscription(m.join_request()).owned_partitions == ((T, (0, 1)),)

    # The second round: the same partitions, nothing moves.
    joined(m, 3, protocol="cooperative-sticky")
    m.sync_request({})
    reply = m.on_sync_response(wire.SyncGroupResponse(assignment=assignment(0, 1)), MonoMs(0))
    assert reply.change is not None and (reply.change.revoked, reply.change.added) == ((), ())
    assert not m.needs_join


def test_a_cooperative_member_whose_generation_is_gone_loses_all_its_partitions() -> None:
    """ILLEGAL_GENERATION resets the generation: the partitions are lost (Kafka's onPartitionsLost), given up
    before rejoining even under the cooperative protocol."""
    m = member("cooperative-sticky")
    synced(m, 3, 0, 1, protocol="cooperative-sticky")
    request = m.heartbeat_request(MonoMs(HEARTBEAT_MS))
    assert request is not None
    reply = m.on_heartbeat_response(
        wire.HeartbeatResponse(error=ErrorCode.ILLEGAL_GENERATION), (3, "m-1"), MonoMs(HEARTBEAT_MS)
    )
    assert (reply.then, m.generation, m.member_id, m.state) == (Then.REJOIN, -1, "m-1", MemberState.UNJOINED)
    assert not m.cooperative()
    assert m.prepare_join() == ((T, 0), (T, 1))


def test_heartbeats_are_due_every_interval_and_only_in_a_stable_generation() -> None:
    m = member()
    assert m.heartbeat_request(MonoMs(5_000)) is None  # not joined
    synced(m, 1, 0, now_ms=10_000)
    assert m.heartbeat_request(MonoMs(10_999)) is None
    first = m.heartbeat_request(MonoMs(11_000))
    assert first is not None and (first.generation_id, first.member_id) == (1, "m-1")
    assert m.heartbeat_request(MonoMs(11_500)) is None
    assert m.heartbeat_request(MonoMs(12_000)) is not None


def test_rebalance_in_progress_keeps_the_generation_unknown_member_id_forgets_the_member() -> None:
    m = member()
    synced(m, 5, 0)
    reply = m.on_heartbeat_response(
        wire.HeartbeatResponse(error=ErrorCode.REBALANCE_IN_PROGRESS), (5, "m-1"), MonoMs(0)
    )
    assert (reply.then, m.generation, m.member_id, m.needs_join) == (Then.REJOIN, 5, "m-1", True)
    assert m.heartbeat_request(MonoMs(60_000)) is None  # rejoining: no heartbeats
    assert subscription(m.join_request()).generation_id == 5

    m = member()
    synced(m, 5, 0)
    m.on_heartbeat_response(wire.HeartbeatResponse(error=ErrorCode.UNKNOWN_MEMBER_ID), (5, "m-1"), MonoMs(0))
    assert (m.generation, m.member_id, m.needs_join) == (-1, "", True)
    assert m.join_request().member_id == ""


def test_a_stale_heartbeat_answer_is_ignored() -> None:
    """An answer to a heartbeat of a generation the member has since left must not make it rejoin again."""
    m = member()
    synced(m, 2, 0)
    reply = m.on_heartbeat_response(wire.HeartbeatResponse(error=ErrorCode.ILLEGAL_GENERATION), (1, "m-1"), MonoMs(0))
    assert (reply.then, m.generation, m.needs_join) == (Then.DONE, 2, False)


def test_a_fenced_static_member_fails_for_good() -> None:
    m = member(instance="c1")
    synced(m, 2, 0)
    reply = m.on_heartbeat_response(wire.HeartbeatResponse(error=ErrorCode.FENCED_INSTANCE_ID), (2, "m-1"), MonoMs(0))
    assert (reply.then, reply.error) == (Then.FAIL, ErrorCode.FENCED_INSTANCE_ID)
    assert "c1" in reply.reason
    joined_again = member(instance="c1")
    joined_again.join_request()
    fenced = joined_again.on_join_response(wire.JoinGroupResponse(error=ErrorCode.FENCED_INSTANCE_ID))
    assert fenced.then is Then.FAIL


def test_a_lost_coordinator_is_found_again_and_a_join_in_flight_starts_over() -> None:
    m = member()
    m.join_request()
    reply = m.on_join_response(wire.JoinGroupResponse(error=ErrorCode.NOT_COORDINATOR))
    assert (reply.then, reply.find_coordinator, m.state) == (Then.BACKOFF, True, MemberState.UNJOINED)
    joined(m, 1)
    m.coordinator_lost()
    assert m.state is MemberState.UNJOINED and m.needs_join
    loading = member()
    loading.join_request()
    retry = loading.on_join_response(wire.JoinGroupResponse(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    assert (retry.then, retry.find_coordinator) == (Then.BACKOFF, False)


def test_a_sync_refused_for_a_rebalance_backs_off_and_joins_again() -> None:
    m = member()
    joined(m, 1)
    m.sync_request({})
    reply = m.on_sync_response(wire.SyncGroupResponse(error=ErrorCode.REBALANCE_IN_PROGRESS), MonoMs(0))
    assert (reply.then, m.state, m.needs_join) == (Then.BACKOFF, MemberState.UNJOINED, True)
    joined(m, 1)
    m.sync_request({})
    bad = m.on_sync_response(wire.SyncGroupResponse(error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL), MonoMs(0))
    assert bad.then is Then.FAIL and bad.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_max_poll_interval_passed_without_a_poll_makes_the_member_leave() -> None:
    """A dynamic member sends LeaveGroup; a static one sends nothing (KIP-345); both forget the member id and
    generation and rejoin at the next poll."""
    for instance, sends in ((None, True), ("c1", False)):
        m = member(instance=instance)
        synced(m, 3, 0, now_ms=1_000)
        assert not m.poll_timed_out(MonoMs(1_000 + MAX_POLL_MS))
        m.polled(MonoMs(20_000))
        assert not m.poll_timed_out(MonoMs(1_000 + MAX_POLL_MS + 1))
        assert m.poll_timed_out(MonoMs(20_000 + MAX_POLL_MS + 1))
        leave = m.leave("consumer poll timeout has expired.")
        assert (leave is not None) is sends
        if leave is not None:
            assert [i.member_id for i in leave.members] == ["m-1"]
        assert (m.member_id, m.generation, m.needs_join, m.state) == ("", -1, True, MemberState.UNJOINED)
        assert not m.poll_timed_out(MonoMs(10**9))


def test_no_heartbeat_answer_within_the_session_timeout_marks_the_coordinator_unknown_once() -> None:
    m = member()
    synced(m, 1, 0, now_ms=0)
    assert not m.session_expired(MonoMs(SESSION_MS))
    assert m.session_expired(MonoMs(SESSION_MS + 1))
    assert not m.session_expired(MonoMs(SESSION_MS + 2))  # once per session timeout
    m.on_heartbeat_response(wire.HeartbeatResponse(), (1, "m-1"), MonoMs(3 * SESSION_MS))
    assert not m.session_expired(MonoMs(4 * SESSION_MS))  # an answer restarts the session timer


def test_commit_answers() -> None:
    m = member()
    synced(m, 7, 0, 1)
    request = m.commit_request({(T, 0): 12})
    assert (request.generation_id, request.member_id) == (7, "m-1")
    assert [(p.topic, p.partition, p.committed_offset) for p in request.partitions] == [(T, 0, 12)]
    ok = wire.OffsetCommitResponse(partitions=(wire.OffsetCommitPartitionResponse(topic=T, partition=0, error=0),))
    assert m.on_commit_response(ok).then is Then.DONE
    stale = wire.OffsetCommitResponse(
        partitions=(wire.OffsetCommitPartitionResponse(topic=T, partition=0, error=ErrorCode.ILLEGAL_GENERATION),)
    )
    refused = m.on_commit_response(stale)
    assert (refused.then, m.generation, m.needs_join) == (Then.REJOIN, -1, True)
    assert "rebalanced" in refused.reason
    moved = m.on_commit_response(wire.OffsetCommitResponse(error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
    assert (moved.then, moved.find_coordinator) == (Then.BACKOFF, True)
