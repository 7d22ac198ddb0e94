"""A consumer's membership of a group: Kafka's ConsumerCoordinator (the classic protocol), driven by `poll`.

Room: services/client. What a `Consumer` with `group.id` does around its fetches:

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
  make the next `poll` rejoin; FENCED_INSTANCE_ID fails the next `poll`); only while the member is in a stable
  generation (not while it joins);
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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from hightide.client.connection import ClientError
from hightide.core import assignors
from hightide.protocol import events, group_records, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi
from hightide.runtime.rpc import RequestFailed

if TYPE_CHECKING:
    from hightide.client.consumer import Consumer, ConsumerRecord

TopicPartition = tuple[str, int]
OFFSETS_TOPIC: Final = "__consumer_offsets"
WATCH_AFTER_S: Final = 1.0
R = TypeVar("R", bound=wire.Response)
_COORDINATOR_LOST: Final = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT}
)
_REJOIN: Final = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
_RETRY: Final = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.BROKER_NOT_AVAILABLE})


class GroupFailed(ClientError):
    """A group operation failed for good (FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, a commit refused…)."""


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
        self.coordinator: int | None = None
        self.coordinator_partition = -1  # the group's __consumer_offsets partition, whose leader is the coordinator
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.assigned: tuple[TopicPartition, ...] = ()
        self.owned: tuple[TopicPartition, ...] = ()  # what it had in `generation`, for the sticky assignors
        self.consumed: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.needs_join = True
        self._next_heartbeat = 0.0
        self._last_poll = time.monotonic()  # Kafka's poll timer, for max.poll.interval.ms
        self._heartbeats: asyncio.Task[None] | None = None  # the background heartbeat (Kafka's HeartbeatThread)
        self._failure: GroupFailed | None = None  # what the heartbeat task hit, raised by the next poll
        self._next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000

    # -- driven by poll -----------------------------------------------------------------------------------------

    async def before_poll(self) -> None:
        """Join if needed and auto-commit when due; the heartbeats run in the background from the first poll."""
        self._last_poll = time.monotonic()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if self._heartbeats is None or self._heartbeats.done():
            self._heartbeats = asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat {self.group_id}")
        if self.needs_join:
            await self._join()
        if self.config.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
            await self._commit_quietly()

    def took(self, records: Sequence[ConsumerRecord]) -> None:
        """`poll` handed these records out: they are consumed."""
        for record in records:
            self.consumed[(record.topic, record.partition)] = record.offset + 1

    async def commit(self) -> None:
        """Commit the consumed positions of the assigned partitions (Kafka's commitSync); GroupFailed if the group
        refused it (the member must rejoin: its generation is gone)."""
        offsets = {tp: self.consumed[tp] for tp in self.assigned if tp in self.consumed}
        if not offsets or offsets == {tp: self.committed.get(tp) for tp in offsets}:
            return
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        body = wire.OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            partitions=tuple(
                wire.OffsetCommitPartition(topic=t, partition=p, committed_offset=o) for (t, p), o in offsets.items()
            ),
        )
        while True:
            answer = await self._to_coordinator(BrokerApi.OFFSET_COMMIT, body, wire.OffsetCommitResponse, deadline)
            errors = {wire.error_code_of(p.error) for p in answer.partitions} | {answer.error_code}
            error = next((e for e in errors if e is not ErrorCode.NONE), ErrorCode.NONE)
            if error is ErrorCode.NONE:
                self.committed.update(offsets)
                return
            if error in _REJOIN:
                self.needs_join = True
                if error is ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                raise GroupFailed(f"commit of group {self.group_id} refused: the group has rebalanced", error)
            if error in _COORDINATOR_LOST:
                self.coordinator = None
            elif error not in _RETRY:
                raise GroupFailed(f"commit of group {self.group_id} failed", error)
            await self._backoff(deadline, error)

    async def close(self) -> None:
        """Stop heartbeating, commit (auto-commit), then leave the group unless static (its place waits for its
        restart)."""
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            self._heartbeats = None
        if self.config.enable_auto_commit and not self.needs_join:
            await self._commit_quietly()
        await self._leave_group("closed")

    async def _leave_group(self, reason: str) -> None:
        """LeaveGroup for a dynamic member (a static member's place waits for its restart, KIP-345)."""
        if self.config.group_instance_id is None and self.member_id and self.coordinator is not None:
            body = wire.LeaveGroupRequest(
                group_id=self.group_id, members=(wire.MemberIdentity(member_id=self.member_id, reason=reason),)
            )
            # If the coordinator does not answer, it expires the member after its session timeout instead.
            with contextlib.suppress(RequestFailed):
                await self.conn.broker(self.coordinator, BrokerApi.LEAVE_GROUP, body, wire.LeaveGroupResponse)

    async def _commit_quietly(self) -> None:
        # An auto-commit that fails is retried at the next interval (or a rebalance is under way).
        with contextlib.suppress(GroupFailed, ClientError):
            await self.commit()

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

    # -- heartbeats ---------------------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Kafka's HeartbeatThread: a heartbeat every `heartbeat.interval.ms` while the member is in a stable
        generation; past `max.poll.interval.ms` without a poll, it leaves the group."""
        interval_s = self.config.heartbeat_interval_ms / 1000
        while True:
            # Waiting for the heartbeat interval to pass (the protocol's own timer, not a synchronisation).
            await asyncio.sleep(max(self._next_heartbeat - time.monotonic(), min(interval_s, 0.1)))
            if self.needs_join or self.generation < 0 or not self.member_id:
                self._next_heartbeat = time.monotonic() + interval_s  # joining: the poll does the group's work
                continue
            if time.monotonic() - self._last_poll > self.config.max_poll_interval_ms / 1000:
                await self._leave_on_poll_timeout()
                continue
            try:
                await self._heartbeat()
            except GroupFailed as failed:
                self._failure = failed  # FENCED_INSTANCE_ID: the next poll raises it
                return
            except ClientError:
                self._next_heartbeat = time.monotonic() + interval_s  # tried again at the next interval

    async def _leave_on_poll_timeout(self) -> None:
        """Kafka's maybeLeaveGroup("consumer poll timeout has expired."): the application stalled between polls, so
        the member gives its partitions back to the group; the next poll rejoins."""
        await self._leave_group("consumer poll timeout has expired.")
        self.generation = -1
        self.member_id = ""
        self.needs_join = True

    async def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self.config.heartbeat_interval_ms / 1000
        generation, member_id = self.generation, self.member_id
        deadline = time.monotonic() + self.config.request_timeout_ms / 1000
        body = wire.HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
        )
        answer = await self._to_coordinator(BrokerApi.HEARTBEAT, body, wire.HeartbeatResponse, deadline)
        error = answer.error_code
        if (self.generation, self.member_id) != (generation, member_id) or self.needs_join:
            return  # the poll rejoined (or is rejoining) while this heartbeat was out: its answer is stale
        if error is ErrorCode.FENCED_INSTANCE_ID:
            raise GroupFailed(f"group.instance.id {self.config.group_instance_id} was taken by another member", error)
        if error in _REJOIN:
            if error is not ErrorCode.REBALANCE_IN_PROGRESS:
                self.generation = -1
                if error is ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
            self.needs_join = True
        elif error in _COORDINATOR_LOST:
            self.coordinator = None
            self._next_heartbeat = time.monotonic()  # find it and heartbeat again at once

    # -- joining --------------------------------------------------------------------------------------------------

    async def _join(self) -> None:
        """Kafka's joinGroupIfNeeded with eager revocation: commit, give up the partitions, join, sync, fetch the
        committed offsets of the new assignment."""
        if self.assigned and self.config.enable_auto_commit:
            await self._commit_quietly()
        if not self._cooperative():
            self.assigned = ()
            await self.consumer.reassign({})
        deadline = time.monotonic() + max(self.config.default_api_timeout_ms, self.config.max_poll_interval_ms) / 1000
        while self.needs_join:
            joined = await self._join_once(deadline)
            if joined is None:
                continue
            assignment = await self._sync_once(joined, deadline)
            if assignment is None:
                continue
            await self._start(assignment, deadline)

    def _protocols(self) -> tuple[wire.JoinGroupProtocol, ...]:
        owned: dict[str, list[int]] = {}
        for topic, partition in self.owned:
            owned.setdefault(topic, []).append(partition)
        subscription = group_records.ConsumerSubscription(
            topics=self.topics,
            owned_partitions=tuple((t, tuple(ps)) for t, ps in owned.items()),
            generation_id=self.generation,
        )
        metadata = group_records.encode_subscription(subscription)
        return tuple(wire.JoinGroupProtocol(name=name, metadata=metadata) for name in self.config.strategies)

    async def _join_once(self, deadline: float) -> wire.JoinGroupResponse | None:
        body = wire.JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type="consumer",
            protocols=self._protocols(),
            client_id=self.config.client_id,
            client_host="",
        )
        # A join waits for the whole group, up to the rebalance timeout (Kafka: max.poll.interval.ms + 5 s).
        timeout_s = (self.config.max_poll_interval_ms + 5_000) / 1000
        answer = await self._to_coordinator(
            BrokerApi.JOIN_GROUP, body, wire.JoinGroupResponse, deadline, timeout_s=timeout_s
        )
        error = answer.error_code
        if error is ErrorCode.NONE:
            return answer
        if error is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            return None
        if error is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if error in _COORDINATOR_LOST:
            self.coordinator = None
        elif error not in _RETRY and error is not ErrorCode.REBALANCE_IN_PROGRESS:
            raise GroupFailed(f"join of group {self.group_id} failed", error)
        await self._backoff(deadline, error)
        return None

    async def _sync_once(
        self, joined: wire.JoinGroupResponse, deadline: float
    ) -> group_records.ConsumerAssignment | None:
        self.member_id = joined.member_id
        assignments: tuple[wire.SyncGroupAssignment, ...] = ()
        if joined.leader == joined.member_id and joined.members:
            assignments = await self._assign(joined)
        body = wire.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=joined.generation_id,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=joined.protocol_type,
            protocol_name=joined.protocol_name,
            assignments=assignments,
        )
        answer = await self._to_coordinator(BrokerApi.SYNC_GROUP, body, wire.SyncGroupResponse, deadline)
        error = answer.error_code
        if error is ErrorCode.NONE:
            self.generation = joined.generation_id
            self.protocol = joined.protocol_name
            return group_records.decode_assignment(answer.assignment)
        if error is ErrorCode.FENCED_INSTANCE_ID:
            raise GroupFailed(f"group.instance.id {self.config.group_instance_id} was taken by another member", error)
        if error is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error in _COORDINATOR_LOST:
            self.coordinator = None
        elif error not in _REJOIN and error not in _RETRY:
            raise GroupFailed(f"sync of group {self.group_id} failed", error)
        await self._backoff(deadline, error)
        return None

    async def _assign(self, joined: wire.JoinGroupResponse) -> tuple[wire.SyncGroupAssignment, ...]:
        """The leader's part: every member's subscription, the subscribed topics' partition counts, Kafka's
        assignor named by the chosen protocol."""
        subscriptions: dict[str, assignors.Subscription] = {}
        for member in joined.members:
            decoded = group_records.decode_subscription(member.metadata)
            subscriptions[member.member_id] = assignors.Subscription(
                topics=decoded.topics,
                owned_partitions=[(t, p) for t, ps in decoded.owned_partitions for p in ps],
                generation=decoded.generation_id,
                group_instance_id=member.group_instance_id,
            )
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        await self.conn.refresh(tuple(topics))
        counts = {t: len(self.conn.partitions.get(t, [])) for t in topics}
        result = assignors.assign(joined.protocol_name or "range", counts, subscriptions)
        out = []
        for member_id, partitions in result.partitions.items():
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            assignment = group_records.ConsumerAssignment(tuple((t, tuple(ps)) for t, ps in by_topic.items()))
            out.append(
                wire.SyncGroupAssignment(member_id=member_id, assignment=group_records.encode_assignment(assignment))
            )
        return tuple(out)

    def _cooperative(self) -> bool:
        """Kafka's cooperative onJoinPrepare keeps the partitions, unless the member's generation is gone (lost)."""
        return self.protocol == "cooperative-sticky" and self.generation >= 0 and bool(self.member_id)

    async def _start(self, assignment: group_records.ConsumerAssignment, deadline: float) -> None:
        """The new assignment: the partitions it kept go on from where `poll` got to; the added ones start at the
        committed offsets, else `auto.offset.reset`."""
        assigned = tuple((t, p) for t, ps in assignment.partitions for p in ps)
        lost = set(self.owned) - set(assigned)
        self.needs_join = False
        if self.protocol == "cooperative-sticky" and lost:
            # The cooperative protocol's second phase: partitions moved away are free only after another rebalance.
            self.needs_join = True
        revoked = [tp for tp in self.assigned if tp not in set(assigned)]
        if revoked and self.config.enable_auto_commit:
            await self._commit_quietly()  # Kafka's onPartitionsRevoked: commit what was consumed before letting go
        kept = {tp: self.consumed[tp] for tp in assigned if tp in set(self.assigned) and tp in self.consumed}
        self.owned = assigned
        self.assigned = assigned
        self.consumed = dict(kept)
        self._next_heartbeat = time.monotonic() + self.config.heartbeat_interval_ms / 1000
        self._last_poll = time.monotonic()  # Kafka's HeartbeatThread.enable resets the poll timer after a join
        added = tuple(tp for tp in assigned if tp not in kept)
        if not added and not revoked and len(kept) == len(self.consumer.positions):
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
            if error in _COORDINATOR_LOST:
                self.coordinator = None
            elif error not in _RETRY:
                raise GroupFailed(f"offset fetch of group {self.group_id} failed", error)
            await self._backoff(deadline, error)
