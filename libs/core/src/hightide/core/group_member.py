"""A consumer's membership of a group, sans-io: Kafka's AbstractCoordinator and ConsumerCoordinator rules. Pure.

Room: libs/core. Owns what one member of a classic-protocol group knows and decides: its state, member id,
generation, protocol and `group.instance.id`; the JoinGroup it sends (with Kafka's ConsumerProtocol subscription:
its topics, the partitions it owned, its generation); the leader's assignment (`hightide.core.assignors`); the
assignment SyncGroup hands it (in the order received: the sticky assignors read that order back from the
subscription); which partitions a rebalance adds, revokes or loses (eager, or cooperative KIP-429 with its second
round); heartbeat, session and poll due times (`heartbeat.interval.ms`, `session.timeout.ms`,
`max.poll.interval.ms`); and the error codes that reset it. It never does I/O, reads a clock or draws randomness:
the shell (the client service, the group simulation) sends the requests it builds, feeds it the answers and `now_ms`
(monotonic), and carries out the returned `Reply`.

Member states (Kafka's `AbstractCoordinator.MemberState`):

| from                  | to                    | when                                                          |
| --------------------- | --------------------- | ------------------------------------------------------------- |
| UNJOINED              | PREPARING_REBALANCE   | `join_request`: a JoinGroup goes out                          |
| STABLE                | PREPARING_REBALANCE   | `join_request` when `rejoin_needed`                           |
| PREPARING_REBALANCE   | COMPLETING_REBALANCE  | JoinGroup answered NONE: a SyncGroup goes out                 |
| PREPARING_REBALANCE   | UNJOINED              | JoinGroup failed (retried, or fatal)                          |
| COMPLETING_REBALANCE  | STABLE                | SyncGroup answered NONE: the new assignment is taken          |
| COMPLETING_REBALANCE  | UNJOINED              | SyncGroup failed                                              |
| STABLE                | UNJOINED              | `leave` (max.poll.interval.ms passed); the generation is lost |
| PREPARING_REBALANCE,  | UNJOINED              | `coordinator_lost`: the join or sync out gets no answer       |
| COMPLETING_REBALANCE  |                       |                                                               |

A `join_request` in any state starts a join over (a shell that gave up on a join in flight, say after its own
deadline, simply joins again).

A STABLE member may still need to rejoin (`rejoin_needed`): the coordinator said REBALANCE_IN_PROGRESS, or a
cooperative rebalance revoked partitions (the second round). ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID reset the
generation (and the member id for the latter): the member's partitions are lost (Kafka's onPartitionsLost), even
under the cooperative protocol. FENCED_INSTANCE_ID, and a JoinGroup or SyncGroup error no retry can cure, are fatal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from hightide.core import assignors
from hightide.core.clock import MonoMs
from hightide.protocol import group_records, wire
from hightide.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
NO_GENERATION: Final = -1
COOPERATIVE: Final = "cooperative-sticky"
COORDINATOR_LOST: Final = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT}
)
"""Answers that mean: find the coordinator again (a request that got no answer comes back as REQUEST_TIMED_OUT)."""
REJOIN: Final = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
RETRIABLE: Final = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.BROKER_NOT_AVAILABLE})


class MemberState(StrEnum):
    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


class Then(StrEnum):
    """What the shell does next with the request that was answered."""

    DONE = "done"  # the answer was taken
    RETRY = "retry"  # send the next request at once (a new member id, or the member id reset)
    BACKOFF = "backoff"  # wait `retry.backoff.ms`, then send again
    REJOIN = "rejoin"  # the group moved on: the member (re)joins
    FAIL = "fail"  # for good: the shell raises `error` with `reason`


@dataclass(frozen=True, slots=True)
class AssignmentChange:
    """A SyncGroup's assignment, against what the member held: `assigned` in the order the leader gave it."""

    assigned: tuple[TopicPartition, ...]
    added: tuple[TopicPartition, ...]
    revoked: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Reply:
    then: Then
    error: ErrorCode = ErrorCode.NONE
    reason: str = ""
    find_coordinator: bool = False  # forget the coordinator; FindCoordinator before the next request
    change: AssignmentChange | None = None  # a SyncGroup taken


DONE: Final = Reply(Then.DONE)


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """The consumer configs membership reads, with Kafka's names and defaults."""

    group_id: str
    topics: tuple[str, ...]
    strategies: tuple[str, ...] = ("range", COOPERATIVE)
    group_instance_id: str | None = None
    client_id: str = "hightide-consumer"
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000

    def __post_init__(self) -> None:
        assert self.group_id, "a group member needs group.id"
        assert self.strategies, "partition.assignment.strategy lists at least one assignor"
        assert self.heartbeat_interval_ms > 0, "heartbeat.interval.ms is positive"


class GroupMembership:
    """One consumer's membership of `config.group_id`, fed answers and `now_ms`, returning what to send."""

    def __init__(self, config: MemberConfig, now_ms: MonoMs) -> None:
        self.config = config
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol: str | None = None
        self.assigned: tuple[TopicPartition, ...] = ()  # what it reads now, in the assignment's order
        self.owned: tuple[TopicPartition, ...] = ()  # its assignment in `generation`, reported when it joins
        self.rejoin_needed = True
        self.heartbeat_due_ms = now_ms
        self.session_deadline_ms = now_ms + config.session_timeout_ms
        self.poll_deadline_ms = now_ms + config.max_poll_interval_ms
        self._joined: wire.JoinGroupResponse | None = None

    # -- the member's own clock ---------------------------------------------------------------------------------

    @property
    def needs_join(self) -> bool:
        return self.rejoin_needed or self.state is not MemberState.STABLE

    def polled(self, now_ms: MonoMs) -> None:
        """The application polled: Kafka's poll timer restarts (`max.poll.interval.ms`)."""
        self.poll_deadline_ms = MonoMs(now_ms + self.config.max_poll_interval_ms)

    def in_generation(self) -> bool:
        """Stable in a generation, not about to rejoin: what heartbeats and the poll timer watch over."""
        return not self.needs_join and self.generation >= 0 and bool(self.member_id)

    def poll_timed_out(self, now_ms: MonoMs) -> bool:
        """The application has not polled within `max.poll.interval.ms`: the member must leave the group."""
        return self.in_generation() and now_ms > self.poll_deadline_ms

    def heartbeat_request(self, now_ms: MonoMs) -> wire.HeartbeatRequest | None:
        """The heartbeat due at `now_ms` (only in a stable generation, not while joining), or None."""
        if not self.in_generation() or now_ms < self.heartbeat_due_ms:
            return None
        self.heartbeat_due_ms = MonoMs(now_ms + self.config.heartbeat_interval_ms)
        return wire.HeartbeatRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
        )

    def session_expired(self, now_ms: MonoMs) -> bool:
        """No heartbeat answered within `session.timeout.ms`: Kafka's heartbeat thread then marks the coordinator
        unknown (the coordinator has most likely expired the member: the next heartbeat, to the coordinator found
        again, says so). True once per session timeout without an answer."""
        if not self.in_generation() or now_ms <= self.session_deadline_ms:
            return False
        self.session_deadline_ms = MonoMs(now_ms + self.config.session_timeout_ms)
        return True

    # -- joining --------------------------------------------------------------------------------------------------

    def cooperative(self) -> bool:
        """Kafka's cooperative onJoinPrepare keeps the partitions, unless the member's generation is gone (lost)."""
        return self.protocol == COOPERATIVE and self.generation >= 0 and bool(self.member_id)

    def prepare_join(self) -> tuple[TopicPartition, ...]:
        """Before a JoinGroup (Kafka's onJoinPrepare): the partitions to give up now — all of them when eager or
        when the generation is lost; none when cooperative (it revokes only what the new assignment takes)."""
        if self.cooperative():
            return ()
        given_up, self.assigned = self.assigned, ()
        return given_up

    def join_request(self) -> wire.JoinGroupRequest:
        """The JoinGroup: one protocol per strategy, each with the ConsumerProtocol subscription. The owned
        partitions keep the assignment's order (grouped by topic, as the encoding groups them)."""
        self.state = MemberState.PREPARING_REBALANCE
        owned: dict[str, list[int]] = {}
        for topic, partition in self.owned:
            owned.setdefault(topic, []).append(partition)
        subscription = group_records.ConsumerSubscription(
            topics=self.config.topics,
            owned_partitions=tuple((t, tuple(ps)) for t, ps in owned.items()),
            generation_id=self.generation,
        )
        metadata = group_records.encode_subscription(subscription)
        return wire.JoinGroupRequest(
            group_id=self.config.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type="consumer",
            protocols=tuple(wire.JoinGroupProtocol(name=name, metadata=metadata) for name in self.config.strategies),
            client_id=self.config.client_id,
            client_host="",
        )

    def on_join_response(self, answer: wire.JoinGroupResponse) -> Reply:
        """NONE: the member is in the new generation's join; `sync_request` comes next (the leader first needs
        the partition counts of `leader_topics()`)."""
        error = answer.error_code
        if error is ErrorCode.NONE:
            self.state = MemberState.COMPLETING_REBALANCE
            self.member_id = answer.member_id
            self._joined = answer
            return DONE
        self.state = MemberState.UNJOINED
        if error is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id  # KIP-394: join again at once with the id the coordinator gave
            return Reply(Then.RETRY, error)
        if error is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return Reply(Then.RETRY, error)
        return self._retry_or_fail(error, "join", REJOIN)

    def leader_topics(self) -> tuple[str, ...]:
        """The topics the leader must count partitions of before `sync_request`; () for a follower."""
        joined = self._joined
        assert joined is not None and self.state is MemberState.COMPLETING_REBALANCE, "a JoinGroup was answered"
        if joined.leader != joined.member_id or not joined.members:
            return ()
        topics = {t for m in joined.members for t in group_records.decode_subscription(m.metadata).topics}
        return tuple(sorted(topics))

    def sync_request(self, partitions_per_topic: Mapping[str, int]) -> wire.SyncGroupRequest:
        """The SyncGroup; the leader's carries every member's assignment by the chosen protocol's assignor."""
        joined = self._joined
        assert joined is not None and self.state is MemberState.COMPLETING_REBALANCE, "a JoinGroup was answered"
        assignments: tuple[wire.SyncGroupAssignment, ...] = ()
        if joined.leader == joined.member_id and joined.members:
            assignments = leader_assignments(joined, partitions_per_topic)
        return wire.SyncGroupRequest(
            group_id=self.config.group_id,
            generation_id=joined.generation_id,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=joined.protocol_type,
            protocol_name=joined.protocol_name,
            assignments=assignments,
        )

    def on_sync_response(self, answer: wire.SyncGroupResponse, now_ms: MonoMs) -> Reply:
        """NONE: the member is STABLE in the new generation; the Reply's `change` says what to revoke (commit
        first), keep and add. A cooperative rebalance that took partitions away leaves `rejoin_needed` set: the
        second round frees them for their new owner."""
        joined, self._joined = self._joined, None
        assert joined is not None, "a SyncGroup follows an answered JoinGroup"
        error = answer.error_code
        if error is not ErrorCode.NONE:
            self.state = MemberState.UNJOINED
            if error is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            return self._retry_or_fail(error, "sync", REJOIN | RETRIABLE)
        self.state = MemberState.STABLE
        self.generation = joined.generation_id
        self.protocol = joined.protocol_name
        decoded = group_records.decode_assignment(answer.assignment).partitions
        assigned = tuple((t, p) for t, ps in decoded for p in ps)
        new, held = set(assigned), set(self.assigned)
        self.rejoin_needed = self.protocol == COOPERATIVE and bool(set(self.owned) - new)
        change = AssignmentChange(
            assigned=assigned,
            added=tuple(tp for tp in assigned if tp not in held),
            revoked=tuple(tp for tp in self.assigned if tp not in new),
        )
        self.assigned = self.owned = assigned
        self.heartbeat_due_ms = MonoMs(now_ms + self.config.heartbeat_interval_ms)
        self.session_deadline_ms = MonoMs(now_ms + self.config.session_timeout_ms)
        self.polled(now_ms)  # Kafka's HeartbeatThread.enable resets the poll timer after a join
        return Reply(Then.DONE, change=change)

    def _retry_or_fail(self, error: ErrorCode, what: str, retriable: frozenset[ErrorCode]) -> Reply:
        if error is ErrorCode.FENCED_INSTANCE_ID:
            return self._fenced()
        if error in COORDINATOR_LOST:
            return Reply(Then.BACKOFF, error, find_coordinator=True)
        if error in RETRIABLE or error in retriable:
            return Reply(Then.BACKOFF, error)
        return Reply(Then.FAIL, error, f"{what} of group {self.config.group_id} failed")

    def _fenced(self) -> Reply:
        reason = f"group.instance.id {self.config.group_instance_id} was taken by another member"
        return Reply(Then.FAIL, ErrorCode.FENCED_INSTANCE_ID, reason)

    # -- in a generation ------------------------------------------------------------------------------------------

    def on_heartbeat_response(self, answer: wire.HeartbeatResponse, sent_as: tuple[int, str], now_ms: MonoMs) -> Reply:
        """`sent_as` is (generation, member id) the heartbeat went out with: an answer about a generation the
        member has since left, or that arrives while it rejoins, is stale and ignored."""
        if sent_as != (self.generation, self.member_id) or self.needs_join:
            return DONE
        error = answer.error_code
        if error is ErrorCode.FENCED_INSTANCE_ID:
            return self._fenced()
        if error in COORDINATOR_LOST:
            self.heartbeat_due_ms = now_ms  # find it and heartbeat again at once
            return Reply(Then.BACKOFF, error, find_coordinator=True)
        if error in REJOIN:
            self._rejoin(error)
            return Reply(Then.REJOIN, error)
        if error is ErrorCode.NONE:
            self.session_deadline_ms = MonoMs(now_ms + self.config.session_timeout_ms)
        return DONE  # any other error: tried again at the next interval

    def commit_request(self, offsets: Mapping[TopicPartition, int]) -> wire.OffsetCommitRequest:
        return wire.OffsetCommitRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            partitions=tuple(
                wire.OffsetCommitPartition(topic=t, partition=p, committed_offset=o) for (t, p), o in offsets.items()
            ),
        )

    def on_commit_response(self, answer: wire.OffsetCommitResponse) -> Reply:
        """A commit refused for the generation (the group rebalanced) makes the member rejoin; the commit is not
        retried (its partitions may belong to another member now)."""
        errors = [answer.error_code, *(wire.error_code_of(p.error) for p in answer.partitions)]
        error = next((e for e in errors if e is not ErrorCode.NONE), ErrorCode.NONE)
        if error is ErrorCode.NONE:
            return DONE
        if error in REJOIN:
            self._rejoin(error)
            return Reply(
                Then.REJOIN, error, f"commit of group {self.config.group_id} refused: the group has rebalanced"
            )
        if error is ErrorCode.FENCED_INSTANCE_ID:
            return self._fenced()
        if error in COORDINATOR_LOST:
            return Reply(Then.BACKOFF, error, find_coordinator=True)
        if error in RETRIABLE:
            return Reply(Then.BACKOFF, error)
        return Reply(Then.FAIL, error, f"commit of group {self.config.group_id} failed")

    def _rejoin(self, error: ErrorCode) -> None:
        """REBALANCE_IN_PROGRESS keeps the generation (the member rejoins in it); ILLEGAL_GENERATION and
        UNKNOWN_MEMBER_ID lose it (Kafka's resetGenerationOnResponseError)."""
        self.rejoin_needed = True
        if error is not ErrorCode.REBALANCE_IN_PROGRESS:
            self.generation = NO_GENERATION
            self.state = MemberState.UNJOINED
            if error is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""

    def leave(self, reason: str) -> wire.LeaveGroupRequest | None:
        """Leave the group (Kafka's maybeLeaveGroup): a dynamic member sends LeaveGroup; a static member sends
        nothing (its place waits for its restart, KIP-345). Either way it forgets its member id and generation and
        rejoins at its next poll."""
        request = None
        if self.config.group_instance_id is None and self.member_id:
            identity = wire.MemberIdentity(member_id=self.member_id, reason=reason)
            request = wire.LeaveGroupRequest(group_id=self.config.group_id, members=(identity,))
        self.generation = NO_GENERATION
        self.member_id = ""
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        return request

    def close_request(self, reason: str) -> wire.LeaveGroupRequest | None:
        """On close: the LeaveGroup a dynamic member sends (None for a static one), leaving the state as it is."""
        if self.config.group_instance_id is not None or not self.member_id:
            return None
        identity = wire.MemberIdentity(member_id=self.member_id, reason=reason)
        return wire.LeaveGroupRequest(group_id=self.config.group_id, members=(identity,))

    def coordinator_lost(self) -> None:
        """The coordinator went away (the shell found out): a JoinGroup or SyncGroup out to it gets no answer, so
        the member joins again (the new coordinator)."""
        if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
            self.state = MemberState.UNJOINED
            self._joined = None


def leader_assignments(
    joined: wire.JoinGroupResponse, partitions_per_topic: Mapping[str, int]
) -> tuple[wire.SyncGroupAssignment, ...]:
    """The leader's part (Kafka's onLeaderElected): every member's subscription, the assignor named by the chosen
    protocol; each member's partitions encoded in the assignor's order (grouped by topic)."""
    subscriptions: dict[str, assignors.Subscription] = {}
    for member in joined.members:
        decoded = group_records.decode_subscription(member.metadata)
        subscriptions[member.member_id] = assignors.Subscription(
            topics=decoded.topics,
            owned_partitions=[(t, p) for t, ps in decoded.owned_partitions for p in ps],
            generation=decoded.generation_id,
            group_instance_id=member.group_instance_id,
        )
    result = assignors.assign(joined.protocol_name or "range", partitions_per_topic, subscriptions)
    return tuple(
        wire.SyncGroupAssignment(member_id=member_id, assignment=group_records.encode_assignment(_grouped(partitions)))
        for member_id, partitions in result.partitions.items()
    )


def _grouped(partitions: Sequence[TopicPartition]) -> group_records.ConsumerAssignment:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return group_records.ConsumerAssignment(tuple((t, tuple(ps)) for t, ps in by_topic.items()))
