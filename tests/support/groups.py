"""A hand-driven shell around the pure GroupCoordinator, for unit tests and the group invariants' tests.

It carries out the coordinator's effects the way the broker service does, minus NATS and disk: appends go to an
in-memory `__consumer_offsets` log per partition (each partition's list of records is what a follower would hold
once the append committed), loads read that log back, answers are kept by request id and events in order. Appends
complete at once unless `hold_appends` is set, so a test can look at the state between "appended" and
"committed", or fail an append.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

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

T0 = 1_000_000
WALL0 = 1_700_000_000_000
SESSION_MS = 10_000
REBALANCE_MS = 30_000
TOPIC = "orders"
Ev = TypeVar("Ev", bound=events.Event)


def now_at(mono_ms: int) -> Now:
    return Now(MonoMs(mono_ms), WallMs(WALL0 + mono_ms))


def subscription(*topics: str) -> bytes:
    return group_records.encode_subscription(group_records.ConsumerSubscription(tuple(topics)))


def assignment(*partitions: int, topic: str = TOPIC) -> bytes:
    return group_records.encode_assignment(group_records.ConsumerAssignment(((topic, tuple(partitions)),)))


@dataclass
class GroupShell:
    """One broker's coordinator, the shared offsets log, and what it answered and emitted."""

    coordinator: GroupCoordinator
    log: dict[int, list[GroupRecord]]
    mono_ms: int = T0
    hold_appends: bool = False
    answers: dict[int, wire.Response] = field(default_factory=dict)
    events: list[events.Event] = field(default_factory=list)
    held: list[AppendGroupRecords] = field(default_factory=list)
    next_request_id: int = 0
    next_member: int = 0

    @classmethod
    def leading_all(cls, partitions: int = 3, broker_id: int = 1, **config: int) -> GroupShell:
        """A coordinator leading (and loaded with) every offsets partition of an empty log."""
        coordinator_config = GroupCoordinatorConfig(offsets_topic_num_partitions=partitions, **config)
        shell = cls(GroupCoordinator(broker_id, coordinator_config), {p: [] for p in range(partitions)})
        for partition in range(partitions):
            shell.become_leader(partition, leader_epoch=0)
        return shell

    @property
    def now(self) -> Now:
        return now_at(self.mono_ms)

    def advance(self, ms: int) -> None:
        """Time passes; whatever fell due fires (the shell's timer)."""
        self.mono_ms += ms
        self.carry_out(self.coordinator.poll(self.now))

    def advance_until_answered(self, *request_ids: int, step_ms: int = 1_000, steps_max: int = 100) -> None:
        """Time passes in steps until every request is answered (a join phase ending); bounded."""
        for _ in range(steps_max):
            if all(r in self.answers for r in request_ids):
                return
            self.advance(step_ms)
        raise AssertionError(f"requests {request_ids} unanswered after {steps_max * step_ms} ms")

    def carry_out(self, effects: list[GroupEffect]) -> None:
        for effect in effects:
            if isinstance(effect, AnswerGroup):
                assert effect.request_id not in self.answers, f"request {effect.request_id} answered twice"
                self.answers[effect.request_id] = effect.response
            elif isinstance(effect, Emit):
                events.check_event(effect.event)
                self.events.append(effect.event)
            elif isinstance(effect, AppendGroupRecords):
                if self.hold_appends:
                    self.held.append(effect)
                else:
                    self.commit_append(effect)
            elif isinstance(effect, LoadGroupPartition):
                records = list(self.log[effect.partition])
                self.carry_out(
                    self.coordinator.on_partition_loaded(effect.partition, effect.leader_epoch, records, self.now)
                )

    def commit_append(self, append: AppendGroupRecords, error: ErrorCode = ErrorCode.NONE) -> None:
        if error is ErrorCode.NONE:
            self.log[append.partition].extend(append.records)
        self.carry_out(self.coordinator.on_append_done(append.append_id, error, self.now))

    def release(self, error: ErrorCode = ErrorCode.NONE) -> None:
        held, self.held = self.held, []
        for append in held:
            self.commit_append(append, error)

    def become_leader(self, partition: int, leader_epoch: int) -> None:
        self.carry_out(self.coordinator.on_become_leader(partition, leader_epoch, self.now))

    def resign(self, partition: int) -> None:
        self.carry_out(self.coordinator.on_resign(partition, self.now))

    def _request_id(self) -> int:
        self.next_request_id += 1
        return self.next_request_id

    # -- requests: each returns the request id; `answers` holds the answer once there is one ---------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (("range", b""),),
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client_id: str = "consumer",
        protocol_type: str = "consumer",
    ) -> int:
        request_id = self._request_id()
        self.next_member += 1
        request = wire.JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=tuple(wire.JoinGroupProtocol(name=n, metadata=m) for n, m in protocols),
            client_id=client_id,
            client_host="/127.0.0.1",
        )
        suffix = str(UUID(int=self.next_member))
        self.carry_out(self.coordinator.on_join_group(request_id, request, suffix, self.now))
        return request_id

    def sync(
        self, group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, **kw: str
    ) -> int:
        request_id = self._request_id()
        request = wire.SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            assignments=tuple(
                wire.SyncGroupAssignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()
            ),
            **kw,
        )
        self.carry_out(self.coordinator.on_sync_group(request_id, request, self.now))
        return request_id

    def heartbeat(self, group: str, member_id: str, generation: int, instance_id: str | None = None) -> ErrorCode:
        request_id = self._request_id()
        request = wire.HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance_id
        )
        self.carry_out(self.coordinator.on_heartbeat(request_id, request, self.now))
        return self.answers[request_id].error_code

    def leave(self, group: str, *members: tuple[str, str | None]) -> wire.LeaveGroupResponse:
        request_id = self._request_id()
        request = wire.LeaveGroupRequest(
            group_id=group,
            members=tuple(wire.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members),
        )
        self.carry_out(self.coordinator.on_leave_group(request_id, request, self.now))
        answer = self.answers[request_id]
        assert isinstance(answer, wire.LeaveGroupResponse)
        return answer

    def commit(
        self,
        group: str,
        offsets: dict[int, int],
        *,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
        metadata: str = "",
        known: Callable[[str, int], bool] | None = None,
    ) -> int:
        """`known`: the broker's metadata (which partitions exist); None, every partition."""
        request_id = self._request_id()
        request = wire.OffsetCommitRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            partitions=tuple(
                wire.OffsetCommitPartition(
                    topic=TOPIC, partition=p, committed_offset=o, committed_leader_epoch=0, committed_metadata=metadata
                )
                for p, o in offsets.items()
            ),
        )
        if known is None:
            self.carry_out(self.coordinator.on_offset_commit(request_id, request, self.now))
        else:
            self.carry_out(self.coordinator.on_offset_commit(request_id, request, self.now, known))
        return request_id

    def commit_errors(self, request_id: int) -> set[ErrorCode]:
        answer = self.answers[request_id]
        assert isinstance(answer, wire.OffsetCommitResponse)
        return {wire.error_code_of(p.error) for p in answer.partitions}

    def fetch_offsets(self, group: str, partitions: tuple[int, ...] | None = None) -> wire.OffsetFetchResponse:
        refs = (
            None if partitions is None else tuple(wire.TopicPartitionRef(topic=TOPIC, partition=p) for p in partitions)
        )
        return self.coordinator.on_offset_fetch(wire.OffsetFetchRequest(group_id=group, partitions=refs))

    def delete(self, *groups: str) -> int:
        request_id = self._request_id()
        request = wire.DeleteGroupsRequest(groups_names=groups)
        self.carry_out(self.coordinator.on_delete_groups(request_id, request, self.now))
        return request_id

    # -- whole stories ------------------------------------------------------------------------------------------

    def join_response(self, request_id: int) -> wire.JoinGroupResponse:
        answer = self.answers[request_id]
        assert isinstance(answer, wire.JoinGroupResponse), answer
        return answer

    def sync_response(self, request_id: int) -> wire.SyncGroupResponse:
        answer = self.answers[request_id]
        assert isinstance(answer, wire.SyncGroupResponse), answer
        return answer

    def new_member(self, group: str, **join: object) -> str:
        """A dynamic member's first join: MEMBER_ID_REQUIRED with its id (it must rejoin with it)."""
        answer = self.join_response(self.join(group, **join))  # type: ignore[arg-type]
        assert answer.error_code is ErrorCode.MEMBER_ID_REQUIRED, answer
        return answer.member_id

    def events_of(self, kind: type[Ev]) -> list[Ev]:
        return [e for e in self.events if isinstance(e, kind)]
