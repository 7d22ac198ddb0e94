"""A seeded simulation of one consumer group: the real GroupCoordinator, a failing-over coordinator, lossy delays.

Every step does one thing — deliver or drop one message, let time pass on the coordinator, complete or fail one
`__consumer_offsets` append, move the coordinator to the other broker (the new one loads the partition's log), or
crash or restart one consumer — and then the group invariants (`hightide.audit.groups`) are checked over every
group event emitted so far. The same seed gives the same run.

The coordinator is the real one (hightide.core.group_coordinator), and so is each consumer's membership: the very
`hightide.core.group_member.GroupMembership` the client service runs (MEMBER_ID_REQUIRED, the leader's assignment
by the seed's strategy — range, roundrobin, sticky or cooperative-sticky with its two rounds —, SyncGroup,
heartbeats when due, commits in their generation, rejoin on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION /
UNKNOWN_MEMBER_ID, a join in flight started over when the coordinator moves). The simulator fakes only the network
(a consumer listens for the answer to its last JoinGroup or SyncGroup only, as a client waits on one request), the
disk (the offsets log) and the clock. Half of the consumers are static members. An append is committed to the log
only when the step completing it says so; a failover may keep or lose appends in flight, as a leader change keeps a
committed tail and loses an uncommitted one.

`commit_check` lets a test swap in a known-bad rule (a coordinator that accepts commits from any generation) to
show that the invariants catch it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hightide.audit.groups import GroupViolation, check_group_history
from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.effects import Emit
from hightide.core.group_coordinator import (
    AnswerGroup,
    AppendGroupRecords,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupEffect,
    GroupRecord,
    LoadGroupPartition,
)
from hightide.core.group_member import GroupMembership, MemberConfig, MemberState, Then
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode

GROUP = "sim-group"
TOPIC = "orders"
PARTITIONS = 6
SESSION_MS = 6_000
REBALANCE_MS = 10_000
HEARTBEAT_MS = 1_000
T0 = 1_000_000
WALL0 = 1_700_000_000_000
CONSUMERS = 4
STEPS = 1_500
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


@dataclass
class Message:
    to: str  # "coordinator" or a consumer name
    sender: str
    body: Any  # a request (to the coordinator) or a response (to a consumer)
    broker: int = 0  # the coordinator it was sent to
    request: Any = None  # for a response: the request it answers
    seq: int = 0  # the sender's number for the request (its answer carries it back)


@dataclass
class SimConsumer:
    name: str
    instance_id: str | None
    membership: GroupMembership
    alive: bool = True
    incarnation: int = 0
    awaiting: int = -1  # the seq of the JoinGroup or SyncGroup whose answer it waits for
    position: dict[int, int] = field(default_factory=dict)


class GroupSimulation:
    def __init__(self, seed: int, bad_commit_check: bool = False) -> None:
        self.rng = random.Random(seed)
        self.mono_ms = T0
        self.config = GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=500)
        self.log: list[GroupRecord] = []
        self.epoch = 0
        self.leader = 1
        self.coordinators = {b: self._coordinator(b, bad_commit_check) for b in (1, 2)}
        self.in_flight: list[Message] = []
        self.appends: list[tuple[int, AppendGroupRecords]] = []  # (broker, append) not yet complete
        self.requests: dict[tuple[int, int], Message] = {}  # (broker, request id) -> the request
        self.next_request = 0
        self.next_seq = 0
        self.history: list[events.Event] = []
        self.strategy = self.rng.choice(STRATEGIES)
        self.consumers = [
            SimConsumer(f"c{i}", instance, self._membership(instance))
            for i, instance in enumerate(f"static-{i}" if i % 2 == 0 else None for i in range(CONSUMERS))
        ]
        self._carry_out(1, self.coordinators[1].on_become_leader(0, self.epoch, self.now))

    @staticmethod
    def _coordinator(broker: int, bad: bool) -> GroupCoordinator:
        coordinator = GroupCoordinator(
            broker, GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=500)
        )
        if bad:
            # A known-bad coordinator: it does not check the generation of a commit.
            original: Callable[[wire.OffsetCommitRequest], ErrorCode] = coordinator._commit_check

            def lenient(request: wire.OffsetCommitRequest) -> ErrorCode:
                error = original(request)
                return (
                    ErrorCode.NONE
                    if error in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS)
                    else error
                )

            coordinator._commit_check = lenient  # type: ignore[method-assign]
        return coordinator

    def _membership(self, instance_id: str | None) -> GroupMembership:
        config = MemberConfig(
            group_id=GROUP,
            topics=(TOPIC,),
            strategies=(self.strategy,),
            group_instance_id=instance_id,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=REBALANCE_MS,
        )
        return GroupMembership(config, MonoMs(self.mono_ms))

    @property
    def now(self) -> Now:
        return Now(MonoMs(self.mono_ms), WallMs(WALL0 + self.mono_ms))

    # -- the shell ------------------------------------------------------------------------------------------------

    def _carry_out(self, broker: int, effects: list[GroupEffect]) -> None:
        for effect in effects:
            if isinstance(effect, AnswerGroup):
                asked = self.requests.pop((broker, effect.request_id))
                self.in_flight.append(
                    Message(asked.sender, "coordinator", effect.response, broker, asked.body, asked.seq)
                )
            elif isinstance(effect, Emit):
                events.check_event(effect.event)
                self.history.append(effect.event)
            elif isinstance(effect, AppendGroupRecords):
                self.appends.append((broker, effect))
            else:
                assert isinstance(effect, LoadGroupPartition)
                loaded = self.coordinators[broker].on_partition_loaded(0, effect.leader_epoch, list(self.log), self.now)
                self._carry_out(broker, loaded)

    def _send(self, consumer: SimConsumer, body: wire.Wire) -> int:
        self.next_seq += 1
        self.in_flight.append(Message("coordinator", consumer.name, body, self.leader, seq=self.next_seq))
        return self.next_seq

    def _deliver_request(self, message: Message) -> None:
        coordinator = self.coordinators[message.broker]
        self.next_request += 1
        request_id = self.next_request
        self.requests[(message.broker, request_id)] = message
        body, now = message.body, self.now
        if isinstance(body, wire.JoinGroupRequest):
            effects = coordinator.on_join_group(request_id, body, f"{self.rng.getrandbits(32):08x}", now)
        elif isinstance(body, wire.SyncGroupRequest):
            effects = coordinator.on_sync_group(request_id, body, now)
        elif isinstance(body, wire.HeartbeatRequest):
            effects = coordinator.on_heartbeat(request_id, body, now)
        elif isinstance(body, wire.OffsetCommitRequest):
            effects = coordinator.on_offset_commit(request_id, body, now)
        else:
            assert isinstance(body, wire.LeaveGroupRequest)
            effects = coordinator.on_leave_group(request_id, body, now)
        self._carry_out(message.broker, effects)

    # -- the consumers --------------------------------------------------------------------------------------------

    def _consumer(self, name: str) -> SimConsumer:
        return next(c for c in self.consumers if c.name == name)

    def _join(self, consumer: SimConsumer) -> None:
        """As the client's `_join`: give up what the protocol gives up before joining, then JoinGroup."""
        consumer.membership.prepare_join()
        consumer.awaiting = self._send(consumer, consumer.membership.join_request())

    def _on_answer(self, consumer: SimConsumer, message: Message) -> None:
        membership, answer = consumer.membership, message.body
        if not consumer.alive:
            return
        reply = None
        if isinstance(answer, wire.JoinGroupResponse | wire.SyncGroupResponse):
            if message.seq != consumer.awaiting:
                return  # not the answer it waits for (it gave up on that request)
            consumer.awaiting = -1
            if isinstance(answer, wire.JoinGroupResponse):
                assert membership.state is MemberState.PREPARING_REBALANCE
                reply = membership.on_join_response(answer)
                if reply.then is Then.DONE:  # the leader counts the topic's partitions; a follower sends none
                    counts = {topic: PARTITIONS for topic in membership.leader_topics()}
                    consumer.awaiting = self._send(consumer, membership.sync_request(counts))
                elif reply.then is Then.RETRY:
                    self._join(consumer)  # with the member id the coordinator required, at once
            else:
                assert membership.state is MemberState.COMPLETING_REBALANCE
                reply = membership.on_sync_response(answer, MonoMs(self.mono_ms))
        elif isinstance(answer, wire.HeartbeatResponse):
            request = message.request
            sent_as = (request.generation_id, request.member_id)
            reply = membership.on_heartbeat_response(answer, sent_as, MonoMs(self.mono_ms))
        elif isinstance(answer, wire.OffsetCommitResponse):
            reply = membership.on_commit_response(answer)
            if reply.then is Then.FAIL and reply.error is not ErrorCode.FENCED_INSTANCE_ID:
                return  # as the client's auto-commit: a failed commit is tried again at the next interval
        if reply is not None and reply.then is Then.FAIL:
            consumer.alive = False  # Kafka's consumer fails for good (another process has its instance id)

    def _act(self, consumer: SimConsumer) -> None:
        """What a live consumer does on its own, as the client's two tasks: its application polls (join when out of
        the group or asked to rejoin, else commit its positions), or its heartbeat task runs (leave after
        max.poll.interval.ms without a poll, else heartbeat when due)."""
        membership, now_ms = consumer.membership, MonoMs(self.mono_ms)
        if self.rng.random() < 0.5:
            membership.polled(now_ms)
            if membership.needs_join and membership.state in (MemberState.UNJOINED, MemberState.STABLE):
                self._join(consumer)
            elif membership.in_generation() and membership.assigned:
                for _, p in membership.assigned:
                    consumer.position[p] = consumer.position.get(p, 0) + self.rng.randint(0, 5)
                offsets = {(TOPIC, p): consumer.position[p] for _, p in membership.assigned}
                self._send(consumer, membership.commit_request(offsets))
        elif membership.poll_timed_out(now_ms):
            leave = membership.leave("consumer poll timeout has expired.")
            if leave is not None:
                self._send(consumer, leave)
        elif (heartbeat := membership.heartbeat_request(now_ms)) is not None:
            self._send(consumer, heartbeat)

    # -- the run ------------------------------------------------------------------------------------------------

    def step(self) -> None:
        roll = self.rng.random()
        live = [c for c in self.consumers if c.alive]
        if roll < 0.35 and self.in_flight:
            message = self.in_flight.pop(self.rng.randrange(len(self.in_flight)))
            if self.rng.random() < 0.03:
                return  # lost on the way
            if message.to == "coordinator":
                self._deliver_request(message)
            else:
                self._on_answer(self._consumer(message.to), message)
        elif roll < 0.5 and self.appends:
            self._complete_append()
        elif roll < 0.75 and live:
            self._act(self.rng.choice(live))
        elif roll < 0.95:
            self.mono_ms += self.rng.randint(1, 700)
            self._carry_out(self.leader, self.coordinators[self.leader].poll(self.now))
        elif roll < 0.97:
            self._failover()
        elif roll < 0.99 and live:
            crashed = self.rng.choice(live)
            crashed.alive = False
        else:
            self._restart()

    def _complete_append(self) -> None:
        """The oldest append completes (acks=all completes in offset order): committed; refused before it was
        appended (NOT_ENOUGH_REPLICAS: not in the log); or appended but not acknowledged in time
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND: in the log, though the coordinator hears it failed). An append of a
        broker that no longer leads fails: the new leader's log did not take it."""
        broker, append = self.appends.pop(0)
        roll = self.rng.random()
        error = ErrorCode.NONE
        if broker != self.leader:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif roll < 0.05:
            error = ErrorCode.NOT_ENOUGH_REPLICAS
        elif roll < 0.1:
            error = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if error in (ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
            self.log.extend(append.records)
        self._carry_out(broker, self.coordinators[broker].on_append_done(append.append_id, error, self.now))

    def _failover(self) -> None:
        """The offsets partition's leadership moves to the other broker. Of the old leader's appends in flight the
        new leader's log holds a prefix (those it had replicated), at random; the rest are lost."""
        old, new = self.leader, 3 - self.leader
        pending = [append for broker, append in self.appends if broker == old]
        for append in pending[: self.rng.randint(0, len(pending))]:
            self.log.extend(append.records)
        self._carry_out(old, self.coordinators[old].on_resign(0, self.now))
        self.epoch += 1
        self.leader = new
        self._carry_out(new, self.coordinators[new].on_become_leader(0, self.epoch, self.now))
        for consumer in self.consumers:
            consumer.membership.coordinator_lost()  # a join or sync out went with the old one: it asks the new one
            consumer.awaiting = -1

    def _restart(self) -> None:
        dead = [c for c in self.consumers if not c.alive]
        if not dead:
            return
        consumer = self.rng.choice(dead)
        consumer.alive, consumer.incarnation = True, consumer.incarnation + 1
        consumer.membership, consumer.awaiting = self._membership(consumer.instance_id), -1  # a new process

    def run(self, steps: int = STEPS) -> list[GroupViolation]:
        """Run, checking the invariants after every step; the first violations found, or none."""
        for _ in range(steps):
            self.step()
            found = check_group_history(self.history)
            if found:
                return found
        return []
