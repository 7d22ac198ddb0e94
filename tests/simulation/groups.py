"""A seeded simulation of one consumer group: the real GroupCoordinator, a failing-over coordinator, lossy delays.

Every step does one thing — deliver or drop one message, let time pass on the coordinator, complete or fail one
`__consumer_offsets` append, move the coordinator to the other broker (the new one loads the partition's log), or
crash or restart one consumer — and then the group invariants (`hightide.audit.groups`) are checked over every
group event emitted so far. The same seed gives the same run.

The coordinator is the real one (hightide.core.group_coordinator); the consumers are small state machines that
follow the classic protocol as Kafka's ConsumerCoordinator does (MEMBER_ID_REQUIRED, leader assigns by range,
SyncGroup, heartbeats, commits in their generation, rejoin on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION /
UNKNOWN_MEMBER_ID, find the coordinator again after NOT_COORDINATOR). Half of them are static members. An append is
committed to the log only when the step completing it says so; a failover may keep or lose appends in flight,
as a leader change keeps a committed tail and loses an uncommitted one.

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
from hightide.protocol import events, group_records, wire
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


@dataclass
class Message:
    to: str  # "coordinator" or a consumer name
    sender: str
    body: Any  # a request (to the coordinator) or a response (to a consumer)
    broker: int = 0  # the coordinator it was sent to


@dataclass
class SimConsumer:
    name: str
    instance_id: str | None
    alive: bool = True
    incarnation: int = 0
    member_id: str = ""
    generation: int = -1
    phase: str = "unjoined"  # unjoined, joining, syncing, stable
    assignment: tuple[int, ...] = ()
    next_heartbeat_ms: int = 0
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
        self.requests: dict[tuple[int, int], str] = {}  # (broker, request id) -> consumer name
        self.next_request = 0
        self.history: list[events.Event] = []
        self.consumers = [SimConsumer(f"c{i}", f"static-{i}" if i % 2 == 0 else None) for i in range(CONSUMERS)]
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

    @property
    def now(self) -> Now:
        return Now(MonoMs(self.mono_ms), WallMs(WALL0 + self.mono_ms))

    # -- the shell ------------------------------------------------------------------------------------------------

    def _carry_out(self, broker: int, effects: list[GroupEffect]) -> None:
        for effect in effects:
            if isinstance(effect, AnswerGroup):
                name = self.requests.pop((broker, effect.request_id))
                self.in_flight.append(Message(name, "coordinator", effect.response, broker))
            elif isinstance(effect, Emit):
                events.check_event(effect.event)
                self.history.append(effect.event)
            elif isinstance(effect, AppendGroupRecords):
                self.appends.append((broker, effect))
            else:
                assert isinstance(effect, LoadGroupPartition)
                loaded = self.coordinators[broker].on_partition_loaded(0, effect.leader_epoch, list(self.log), self.now)
                self._carry_out(broker, loaded)

    def _send(self, consumer: SimConsumer, body: wire.Wire) -> None:
        self.in_flight.append(Message("coordinator", consumer.name, body, self.leader))

    def _deliver_request(self, message: Message) -> None:
        coordinator = self.coordinators[message.broker]
        self.next_request += 1
        request_id = self.next_request
        self.requests[(message.broker, request_id)] = message.sender
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
        consumer.phase = "joining"
        subscription = group_records.encode_subscription(group_records.ConsumerSubscription((TOPIC,)))
        self._send(
            consumer,
            wire.JoinGroupRequest(
                group_id=GROUP,
                session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=REBALANCE_MS,
                member_id=consumer.member_id,
                group_instance_id=consumer.instance_id,
                protocols=(wire.JoinGroupProtocol(name="range", metadata=subscription),),
                client_id=consumer.name,
            ),
        )

    def _on_answer(self, consumer: SimConsumer, answer: wire.Response) -> None:
        if not consumer.alive:
            return
        error = answer.error_code
        if error is ErrorCode.FENCED_INSTANCE_ID:
            consumer.alive = False  # Kafka's consumer fails for good: another process has its instance id
            return
        if isinstance(answer, wire.JoinGroupResponse) and consumer.phase == "joining":
            self._on_join(consumer, answer)
        elif isinstance(answer, wire.SyncGroupResponse) and consumer.phase == "syncing":
            if error is ErrorCode.NONE:
                consumer.phase = "stable"
                assigned = group_records.decode_assignment(answer.assignment).partitions
                consumer.assignment = tuple(p for _, ps in assigned for p in ps)
                consumer.next_heartbeat_ms = self.mono_ms + HEARTBEAT_MS
            else:
                self._rejoin(consumer, error)
        elif isinstance(answer, wire.HeartbeatResponse | wire.OffsetCommitResponse) and consumer.phase == "stable":
            errors = {error}
            if isinstance(answer, wire.OffsetCommitResponse):
                errors |= {wire.error_code_of(p.error) for p in answer.partitions}
            for e in errors - {ErrorCode.NONE}:
                self._rejoin(consumer, e)
                break

    def _on_join(self, consumer: SimConsumer, answer: wire.JoinGroupResponse) -> None:
        error = answer.error_code
        if error is ErrorCode.MEMBER_ID_REQUIRED:
            consumer.member_id = answer.member_id
            self._join(consumer)
        elif error is ErrorCode.NONE:
            consumer.member_id, consumer.generation, consumer.phase = answer.member_id, answer.generation_id, "syncing"
            assignments: tuple[wire.SyncGroupAssignment, ...] = ()
            if answer.leader == answer.member_id:
                members = sorted(m.member_id for m in answer.members)
                per = {m: tuple(p for p in range(PARTITIONS) if p % len(members) == i) for i, m in enumerate(members)}
                assignments = tuple(
                    wire.SyncGroupAssignment(
                        member_id=m,
                        assignment=group_records.encode_assignment(group_records.ConsumerAssignment(((TOPIC, ps),))),
                    )
                    for m, ps in per.items()
                )
            self._send(
                consumer,
                wire.SyncGroupRequest(
                    group_id=GROUP,
                    generation_id=answer.generation_id,
                    member_id=answer.member_id,
                    group_instance_id=consumer.instance_id,
                    assignments=assignments,
                ),
            )
        else:
            self._rejoin(consumer, error)

    def _rejoin(self, consumer: SimConsumer, error: ErrorCode) -> None:
        if error is ErrorCode.UNKNOWN_MEMBER_ID:
            consumer.member_id = ""
        consumer.phase, consumer.assignment = "unjoined", ()

    def _act(self, consumer: SimConsumer) -> None:
        """What a live consumer does on its own: join when out of the group, heartbeat and commit when in it."""
        if consumer.phase == "unjoined":
            self._join(consumer)
        elif consumer.phase == "stable" and self.mono_ms >= consumer.next_heartbeat_ms:
            consumer.next_heartbeat_ms = self.mono_ms + HEARTBEAT_MS
            self._send(
                consumer,
                wire.HeartbeatRequest(
                    group_id=GROUP,
                    generation_id=consumer.generation,
                    member_id=consumer.member_id,
                    group_instance_id=consumer.instance_id,
                ),
            )
        elif consumer.phase == "stable" and consumer.assignment:
            for p in consumer.assignment:
                consumer.position[p] = consumer.position.get(p, 0) + self.rng.randint(0, 5)
            self._send(
                consumer,
                wire.OffsetCommitRequest(
                    group_id=GROUP,
                    generation_id=consumer.generation,
                    member_id=consumer.member_id,
                    group_instance_id=consumer.instance_id,
                    partitions=tuple(
                        wire.OffsetCommitPartition(topic=TOPIC, partition=p, committed_offset=consumer.position[p])
                        for p in consumer.assignment
                    ),
                ),
            )

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
                self._on_answer(self._consumer(message.to), message.body)
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
            if consumer.phase in ("joining", "syncing"):
                consumer.phase = "unjoined"  # its answer went with the old coordinator: it asks the new one

    def _restart(self) -> None:
        dead = [c for c in self.consumers if not c.alive]
        if not dead:
            return
        consumer = self.rng.choice(dead)
        consumer.alive, consumer.incarnation = True, consumer.incarnation + 1
        consumer.member_id, consumer.generation, consumer.phase, consumer.assignment = "", -1, "unjoined", ()

    def run(self, steps: int = STEPS) -> list[GroupViolation]:
        """Run, checking the invariants after every step; the first violations found, or none."""
        for _ in range(steps):
            self.step()
            found = check_group_history(self.history)
            if found:
                return found
        return []
