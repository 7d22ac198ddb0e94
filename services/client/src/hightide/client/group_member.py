"""A consumer's membership of a group: Kafka's ConsumerCoordinator (the classic protocol), driven by `poll`.

Room: services/client. The wiring of `hightide.core.group_member.GroupMembership`, which holds the rules (states,
member id, generation, the subscription and the leader's assignment, what a rebalance revokes and adds, heartbeat
and poll due times, the errors that reset the member): this module sends the requests it builds over NATS, feeds
it the answers and the monotonic clock, runs the heartbeat task, and moves the consumer's fetch positions. What a
`Consumer` with `group.id` does around its fetches:

- finds the group's coordinator (FindCoordinator to any broker) and finds it again after NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE or a coordinator that does not answer;
- joins (JoinGroup, again with the member id after MEMBER_ID_REQUIRED; `group.instance.id` for a static member)
  with one protocol per `partition.assignment.strategy`, each carrying Kafka's ConsumerProtocol subscription (topics,
  the partitions it owned, its generation); the leader assigns with `hightide.core.assignors.assign` and SyncGroup
  hands the assignment out;
- eager rebalancing (range, roundrobin, sticky): before rejoining it commits what it consumed (auto-commit) and
  gives up every partition;
- cooperative rebalancing (cooperative-sticky, KIP-429): it commits (auto-commit) but keeps its partitions and
  their positions through the rebalance; the new assignment revokes only what it takes away (committed first),
  adds the new ones from their committed offsets, and a member that lost partitions rejoins for the second
  round. A member whose generation is gone (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, a poll timeout) has lost its
  partitions and gives them all up, as Kafka's onPartitionsLost;
- starts each assigned partition at the group's committed offset (OffsetFetch), else by `auto.offset.reset`;
- heartbeats every `heartbeat.interval.ms` from a background task, whether or not the application polls, as
  Kafka's AbstractCoordinator.HeartbeatThread (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID
  make the next `poll` rejoin; FENCED_INSTANCE_ID fails the next `poll`; no answer within `session.timeout.ms`
  makes it find the coordinator again); only while the member is in a stable generation (not while it joins);
- enforces `max.poll.interval.ms`: a member whose application has not polled for that long leaves the group
  (LeaveGroup for a dynamic member; a static member forgets its member id and generation), as Kafka's heartbeat
  thread does on "consumer poll timeout has expired"; its next `poll` rejoins;
- auto-commits every `auto.commit.interval.ms`, commits on demand (`commit`), and leaves the group on close (a
  dynamic member only: a static member's place is kept for its restart, KIP-345).

Commits are of what `poll` returned (the consumed position), never of records fetched but not yet handed out, so
a member that dies re-reads at most what it consumed after its last commit, and skips nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from hightide.client.connection import ClientError
from hightide.core.clock import MonoMs
from hightide.core.group_member import (
    COORDINATOR_LOST,
    RETRIABLE,
    AssignmentChange,
    GroupMembership,
    MemberConfig,
    Reply,
    Then,
)
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi
from hightide.runtime.rpc import RequestFailed

if TYPE_CHECKING:
    from hightide.client.consumer import Consumer, ConsumerRecord

TopicPartition = tuple[str, int]
OFFSETS_TOPIC: Final = "__consumer_offsets"
WATCH_AFTER_S: Final = 1.0
R = TypeVar("R", bound=wire.Response)


class GroupFailed(ClientError):
    """A group operation failed for good (FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, a commit refused…)."""


def _now_ms() -> MonoMs:
    return MonoMs(int(time.monotonic() * 1000))


class GroupMember:
    """One consumer's membership of `group.id`, subscribed to `topics`."""

    def __init__(self, consumer: Consumer, topics: Sequence[str]) -> None:
        config = consumer.config
        assert config.group_id, "a group member needs group.id"
        self.consumer = consumer
        self.conn = consumer.conn
        self.config = config
        self.group_id = config.group_id
        self.topics = tuple(topics)
        self.membership = GroupMembership(
            MemberConfig(
                group_id=config.group_id,
                topics=self.topics,
                strategies=config.strategies,
                group_instance_id=config.group_instance_id,
                client_id=config.client_id,
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                max_poll_interval_ms=config.max_poll_interval_ms,
            ),
            _now_ms(),
        )
        self.coordinator: int | None = None
        self.coordinator_partition = -1  # the group's __consumer_offsets partition, whose leader is the coordinator
        self.consumed: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self._heartbeats: asyncio.Task[None] | None = None  # the background heartbeat (Kafka's HeartbeatThread)
        self._failure: GroupFailed | None = None  # what the heartbeat task hit, raised by the next poll
        self._next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000

    # -- the membership's state, read by the consumer and tests -------------------------------------------------

    @property
    def assigned(self) -> tuple[TopicPartition, ...]:
        return self.membership.assigned

    @property
    def needs_join(self) -> bool:
        return self.membership.needs_join

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    @property
    def generation(self) -> int:
        return self.membership.generation

    # -- driven by poll -----------------------------------------------------------------------------------------

    async def before_poll(self) -> None:
        """Join if needed and auto-commit when due; the heartbeats run in the background from the first poll."""
        self.membership.polled(_now_ms())
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if self._heartbeats is None or self._heartbeats.done():
            self._heartbeats = asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat {self.group_id}")
        if self.membership.needs_join:
            await self._join()
        if self.config.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
            await self._commit_quietly()

    def took(self, records: Sequence[ConsumerRecord]) -> None:
        """`poll` handed these records out: they are consumed."""
        for record in records:
            self.consumed[(record.topic, record.partition)] = record.offset + 1

    async def commit(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Commit the consumed positions of the assigned partitions (or of `partitions`; Kafka's commitSync);
        GroupFailed if the group refused it (the member must rejoin: its generation is gone)."""
        wanted = self.membership.assigned if partitions is None else partitions
        offsets = {tp: self.consumed[tp] for tp in wanted if tp in self.consumed}
        if not offsets or offsets == {tp: self.committed.get(tp) for tp in offsets}:
            return
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        body = self.membership.commit_request(offsets)
        while True:
            answer = await self._to_coordinator(BrokerApi.OFFSET_COMMIT, body, wire.OffsetCommitResponse, deadline)
            reply = self.membership.on_commit_response(answer)
            if reply.then is Then.DONE:
                self.committed.update(offsets)
                return
            if reply.then in (Then.REJOIN, Then.FAIL):
                raise GroupFailed(reply.reason, reply.error)
            await self._back_off(reply, deadline)

    async def close(self) -> None:
        """Stop heartbeating, commit (auto-commit), then leave the group unless static (its place waits for its
        restart)."""
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            self._heartbeats = None
        if self.config.enable_auto_commit and not self.membership.needs_join:
            await self._commit_quietly()
        await self._send_leave(self.membership.close_request("closed"))

    async def _send_leave(self, request: wire.LeaveGroupRequest | None) -> None:
        """LeaveGroup, if the membership asked for one (a dynamic member: a static member's place waits for its
        restart, KIP-345)."""
        if request is not None and self.coordinator is not None:
            # If the coordinator does not answer, it expires the member after its session timeout instead.
            with contextlib.suppress(RequestFailed):
                await self.conn.broker(self.coordinator, BrokerApi.LEAVE_GROUP, request, wire.LeaveGroupResponse)

    async def _commit_quietly(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        # An auto-commit that fails is retried at the next interval (or a rebalance is under way).
        with contextlib.suppress(GroupFailed, ClientError):
            await self.commit(partitions)

    # -- the coordinator ----------------------------------------------------------------------------------------

    async def _find_coordinator(self, deadline: float) -> int:
        while True:
            if not self.conn.brokers:
                await self.conn.refresh(self.topics)
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            for broker in sorted(self.conn.brokers) or [0]:
                try:
                    answer = await self.conn.broker(
                        broker,
                        BrokerApi.FIND_COORDINATOR,
                        wire.FindCoordinatorRequest(key=self.group_id),
                        wire.FindCoordinatorResponse,
                        timeout_s=self._request_timeout_s(deadline),
                    )
                except RequestFailed as failed:
                    error = failed.error_code
                    continue
                if answer.error_code is ErrorCode.NONE:
                    self.coordinator_partition = answer.partition
                    await self.conn.refresh((OFFSETS_TOPIC,))  # to watch the coordinator's leadership
                    return answer.node_id
                error = answer.error_code
                break
            await self._backoff(deadline, error)
            await self.conn.refresh(self.topics)

    async def _to_coordinator(
        self, api: BrokerApi, body: wire.Wire, kind: type[R], deadline: float, timeout_s: float | None = None
    ) -> R:
        """One request to the coordinator (found first if unknown); a coordinator that does not answer is
        forgotten and the answer is REQUEST_TIMED_OUT / its error, for the caller's retry."""
        if self.coordinator is None:
            self.coordinator = await self._find_coordinator(deadline)
        timeout_s = timeout_s or self._request_timeout_s(deadline)
        leadership = self.conn.leadership(OFFSETS_TOPIC, self.coordinator_partition)
        try:
            if leadership is None or leadership.leader != self.coordinator:
                return await self.conn.broker(self.coordinator, api, body, kind, timeout_s=timeout_s)
            # A request that waits (a join waits for the whole group) ends once the metadata shows the coordinator
            # gone, as Kafka's client sees its connection drop, instead of waiting out its timeout.
            backoff_s = max(self.config.retry_backoff_ms / 1000, 0.05)
            return await self.conn.broker_watched(
                (leadership,),
                api,
                body,
                kind,
                timeout_s=timeout_s,
                watch_after_s=WATCH_AFTER_S,
                watch_every_s=backoff_s,
            )
        except RequestFailed as failed:
            self.coordinator = None
            return wire.error_response(kind, failed.error_code, str(failed))

    def _request_timeout_s(self, deadline: float) -> float:
        return max(min(self.config.request_timeout_ms / 1000, deadline - time.monotonic()), 0.05)

    async def _backoff(self, deadline: float, error: ErrorCode) -> None:
        if time.monotonic() + self.config.retry_backoff_ms / 1000 >= deadline:
            raise GroupFailed(f"group {self.group_id}: no answer within default.api.timeout.ms", error)
        await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # Kafka's retry.backoff.ms

    async def _back_off(self, reply: Reply, deadline: float) -> None:
        """A retriable answer: forget the coordinator if it is gone, wait `retry.backoff.ms`."""
        if reply.find_coordinator:
            self.coordinator = None
            self.membership.coordinator_lost()
        await self._backoff(deadline, reply.error)

    # -- heartbeats ---------------------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Kafka's HeartbeatThread: a heartbeat every `heartbeat.interval.ms` while the member is in a stable
        generation; past `max.poll.interval.ms` without a poll, it leaves the group."""
        interval_s = self.config.heartbeat_interval_ms / 1000
        while True:
            membership = self.membership
            due_s = (membership.heartbeat_due_ms - _now_ms()) / 1000 if membership.in_generation() else interval_s
            # Waiting for the heartbeat interval to pass (the protocol's own timer, not a synchronisation).
            await asyncio.sleep(max(due_s, min(interval_s, 0.1)))
            now_ms = _now_ms()
            if membership.poll_timed_out(now_ms):
                # Kafka's maybeLeaveGroup("consumer poll timeout has expired."): the application stalled between
                # polls, so the member gives its partitions back to the group; the next poll rejoins.
                await self._send_leave(membership.leave("consumer poll timeout has expired."))
                continue
            if membership.session_expired(now_ms):
                self.coordinator = None  # Kafka: "session timed out without receiving a heartbeat response"
            request = membership.heartbeat_request(now_ms)
            if request is None:
                continue
            deadline = time.monotonic() + self.config.request_timeout_ms / 1000
            try:
                answer = await self._to_coordinator(BrokerApi.HEARTBEAT, request, wire.HeartbeatResponse, deadline)
            except GroupFailed as failed:
                self._failure = failed  # no coordinator found in time: the next poll raises it
                return
            except ClientError:
                continue  # tried again at the next interval
            reply = membership.on_heartbeat_response(answer, (request.generation_id, request.member_id), _now_ms())
            if reply.then is Then.FAIL:
                self._failure = GroupFailed(reply.reason, reply.error)  # FENCED_INSTANCE_ID: the next poll raises it
                return
            if reply.find_coordinator:
                self.coordinator = None

    # -- joining --------------------------------------------------------------------------------------------------

    async def _join(self) -> None:
        """Kafka's joinGroupIfNeeded: commit, give up the partitions (eager), join, sync, fetch the committed offsets
        of the new assignment."""
        membership = self.membership
        if membership.assigned and self.config.enable_auto_commit:
            await self._commit_quietly()
        if not membership.cooperative():
            membership.prepare_join()
            await self.consumer.reassign({})
        deadline = time.monotonic() + max(self.config.default_api_timeout_ms, self.config.max_poll_interval_ms) / 1000
        while membership.needs_join:
            # A join waits for the whole group, up to the rebalance timeout (Kafka: max.poll.interval.ms + 5 s).
            timeout_s = (self.config.max_poll_interval_ms + 5_000) / 1000
            joined = await self._to_coordinator(
                BrokerApi.JOIN_GROUP, membership.join_request(), wire.JoinGroupResponse, deadline, timeout_s=timeout_s
            )
            if not await self._carry_on(membership.on_join_response(joined), deadline):
                continue
            counts: dict[str, int] = {}
            topics = membership.leader_topics()
            if topics:  # the leader's assignment needs the subscribed topics' partition counts
                await self.conn.refresh(topics)
                counts = {t: len(self.conn.partitions.get(t, [])) for t in topics}
            before = membership.assigned
            synced = await self._to_coordinator(
                BrokerApi.SYNC_GROUP, membership.sync_request(counts), wire.SyncGroupResponse, deadline
            )
            reply = membership.on_sync_response(synced, _now_ms())
            if not await self._carry_on(reply, deadline):
                continue
            assert reply.change is not None, "a SyncGroup taken comes with its assignment"
            await self._start(reply.change, before, deadline)

    async def _carry_on(self, reply: Reply, deadline: float) -> bool:
        """True when the answer was taken; otherwise raise, back off or go round again."""
        if reply.then is Then.DONE:
            return True
        if reply.then is Then.FAIL:
            raise GroupFailed(reply.reason, reply.error)
        if reply.then is Then.BACKOFF:
            await self._back_off(reply, deadline)
        return False

    async def _start(self, change: AssignmentChange, before: tuple[TopicPartition, ...], deadline: float) -> None:
        """The new assignment: the partitions it kept go on from where `poll` got to; the added ones start at the
        committed offsets, else `auto.offset.reset`."""
        assigned = change.assigned
        if change.revoked and self.config.enable_auto_commit:
            # Kafka's onPartitionsRevoked: commit what was consumed before letting go.
            await self._commit_quietly(before)
        held = set(before)
        kept = {tp: self.consumed[tp] for tp in assigned if tp in held and tp in self.consumed}
        self.consumed = dict(kept)
        added = tuple(tp for tp in assigned if tp not in kept)
        if not added and not change.revoked and len(kept) == len(self.consumer.positions):
            return  # a cooperative rebalance that changed nothing here: the fetches go on
        if not assigned:
            await self.consumer.reassign({})
            return
        committed = await self._committed(added, deadline) if added else {}
        positions: dict[TopicPartition, int] = dict(kept)
        for tp in added:
            offset = committed.get(tp, -1)
            if offset >= 0:
                positions[tp] = offset
            elif self.config.auto_offset_reset == "none":
                raise GroupFailed(
                    f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset is none",
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                )
            else:
                positions[tp] = -2 if self.config.auto_offset_reset == "earliest" else -1
        # The kept partitions go on from what `poll` returned (records fetched but not returned are fetched again).
        await self.consumer.reassign(positions)
        await self.consumer.resolve_positions()
        self.consumed = {tp: self.consumer.positions[tp] for tp in assigned}
        self.committed = {tp: o for tp, o in self.committed.items() if tp in kept} | {
            tp: o for tp, o in committed.items() if o >= 0
        }
        if self.consumer.on_event is not None and added:
            # Kafka's onPartitionsAssigned: the partitions added (all of them after an eager rebalance).
            self.consumer.on_event(
                events.PartitionsAssigned(
                    group_id=self.group_id,
                    member_id=self.member_id,
                    generation_id=self.generation,
                    topics=tuple(t for t, _ in added),
                    partitions=tuple(p for _, p in added),
                    committed=tuple(committed.get(tp, -1) for tp in added),
                    offsets=tuple(self.consumer.positions[tp] for tp in added),
                )
            )

    async def _committed(self, partitions: tuple[TopicPartition, ...], deadline: float) -> dict[TopicPartition, int]:
        body = wire.OffsetFetchRequest(
            group_id=self.group_id,
            partitions=tuple(wire.TopicPartitionRef(topic=t, partition=p) for t, p in partitions),
        )
        while True:
            answer = await self._to_coordinator(BrokerApi.OFFSET_FETCH, body, wire.OffsetFetchResponse, deadline)
            error = answer.error_code
            if error is ErrorCode.NONE:
                return {(p.topic, p.partition): p.committed_offset for p in answer.partitions}
            if error in COORDINATOR_LOST:
                self.coordinator = None
            elif error not in RETRIABLE:
                raise GroupFailed(f"offset fetch of group {self.group_id} failed", error)
            await self._backoff(deadline, error)
