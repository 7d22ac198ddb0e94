"""The group coordinator: consumer groups of Kafka's classic protocol, and their committed offsets. Pure.

Room: libs/core. Kafka's GroupCoordinator and GroupMetadataManager (the classic protocol, as
`kafka.coordinator.group` and the new runtime's `ClassicGroup` keep it), as a sans-io object that the broker
service and the simulator drive. It owns:

- which groups this broker coordinates: those whose `__consumer_offsets` partition
  (`group_partition`: `abs(group_id.hashCode()) % offsets.topic.num.partitions`) it leads. A partition it has
  just become leader of is loading (COORDINATOR_LOAD_IN_PROGRESS) until the shell hands back the partition's
  committed records, which are replayed into every group and offset; a partition it does not lead answers
  NOT_COORDINATOR;
- each group's state machine, members, generations and leader: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  session timeouts, the rebalance timeout and `group.initial.rebalance.delay.ms`, static membership;
- committed offsets: OffsetCommit (refused from a stale generation) and OffsetFetch; ListGroups,
  DescribeGroups, DeleteGroups.

Group states (Kafka's `GroupState`; a transition not in this table is a bug, asserted):

| from                | to                                 | when                                                  |
| ------------------- | ---------------------------------- | ----------------------------------------------------- |
| Empty               | PreparingRebalance, Dead           | a member joins; deleted                               |
| PreparingRebalance  | CompletingRebalance, Empty, Dead   | the join phase ends (with members / with none left)   |
| CompletingRebalance | Stable, PreparingRebalance, Dead   | the leader's assignment persisted; a member changes   |
| Stable              | PreparingRebalance, Dead           | a member joins, leaves, expires or changes protocols  |
| Dead                | (none)                             |                                                       |

Persist, then announce: the group's metadata (generation, protocol, leader, members with their subscription and
assignment) is appended to the log before the members get the assignment, and offsets before the commit is
answered. The shell appends `AppendGroupRecords` with acks=all and reports the outcome with `on_append_done`; a
record with no value is a tombstone. A new leader of the partition rebuilds the same state from those records.

Inputs: decoded requests (with the shell's request id), `Now` (monotonic for sessions and timeouts, wall clock for
commit timestamps), leadership of offsets partitions, the records read back, append outcomes, and a member id
suffix for each JoinGroup (the shell draws a UUID: the core draws no randomness). Outputs: effects, in order —
`AppendGroupRecords`, `LoadGroupPartition`, `AnswerGroup` and `Emit`. `poll(now)` fires what is due (expired
sessions, the end of a join phase); `next_deadline_ms` says when to call it next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from hightide.core.clock import MonoMs, Now
from hightide.core.effects import Emit
from hightide.protocol import events, wire
from hightide.protocol import group_records as records
from hightide.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
NO_GENERATION: Final = -1
UNKNOWN_MEMBER_ID: Final = ""
INT32_MAX: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Kafka's broker configs for groups, with Kafka's defaults."""

    offsets_topic_num_partitions: int = 50
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = INT32_MAX
    offset_metadata_max_bytes: int = 4_096

    def __post_init__(self) -> None:
        assert self.offsets_topic_num_partitions >= 1
        assert 0 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms
        assert self.group_initial_rebalance_delay_ms >= 0
        assert self.group_max_size >= 1


def java_string_hash_code(text: str) -> int:
    """Java's `String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a wrapping int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def group_partition(group_id: str, offsets_topic_num_partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's `Utils.abs(groupId.hashCode) % partitions`
    (`Utils.abs` maps Integer.MIN_VALUE to 0, where Math.abs would leave it negative)."""
    h = java_string_hash_code(group_id)
    return (0 if h == -(2**31) else abs(h)) % offsets_topic_num_partitions


# -- effects -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One `__consumer_offsets` record: Kafka's binary key and value; a value of None is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class AppendGroupRecords:
    """Append `records` to `__consumer_offsets` partition `partition` as its leader in `leader_epoch`, acks=all,
    and report with `on_append_done(append_id, error)` once they are committed (or failed)."""

    append_id: int
    partition: int
    leader_epoch: int
    records: tuple[GroupRecord, ...]


@dataclass(frozen=True, slots=True)
class LoadGroupPartition:
    """Read `__consumer_offsets` partition `partition` from its start up to its high watermark and hand the
    records, in offset order, to `on_partition_loaded(partition, leader_epoch, records, now)`."""

    partition: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class AnswerGroup:
    """Answer the group request `request_id` with `response`."""

    request_id: int
    response: wire.Response


GroupEffect = AppendGroupRecords | LoadGroupPartition | AnswerGroup | Emit


# -- state -------------------------------------------------------------------------------------------------------


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_TRANSITIONS: Final = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.PREPARING_REBALANCE: {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD},
    GroupState.COMPLETING_REBALANCE: {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.STABLE: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
    GroupState.DEAD: set(),
}


@dataclass(slots=True)
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_deadline_ms: int
    assignment: bytes = b""
    join_request_id: int | None = None
    sync_request_id: int | None = None

    def metadata(self, protocol: str) -> bytes:
        return next(data for name, data in self.protocols if name == protocol)

    def same_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(slots=True)
class _InitialDelay:
    """Kafka's InitialDelayedJoin: the first rebalance of an Empty group waits `delay_ms`, and again (up to the
    rebalance timeout in all) while new members keep arriving, so a group starting up rebalances once."""

    delay_ms: int
    remaining_ms: int
    member_added: bool = False


@dataclass(slots=True)
class _Group:
    group_id: str
    partition: int
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    generation_id: int = 0
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline (mono ms)
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline_ms: int | None = None
    commits_in_flight: int = 0
    initial_delay: _InitialDelay | None = None
    state_timestamp_ms: int = -1

    def transition(self, state: GroupState) -> None:
        assert state in _TRANSITIONS[self.state], f"group {self.group_id}: {self.state} -> {state} is not allowed"
        self.state = state

    def awaiting_join(self) -> list[_Member]:
        return [m for m in self.members.values() if m.join_request_id is not None]

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_request_id is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: Sequence[str]) -> bool:
        """Kafka's `supportsProtocols`: an empty group takes any; otherwise the type matches and at least one of
        the protocols is supported by every member."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(set(protocols) & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        names = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def select_protocol(self) -> str:
        """Kafka's `selectProtocol`: each member votes for its most preferred protocol that every member supports;
        most votes wins (a tie goes to the protocol named first by the earliest member, where Kafka's choice
        depends on a hash map's order)."""
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id}: no protocol every member supports"
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])  # max keeps the first of equals: insertion order

    def is_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A static member whose instance id now belongs to another member id (it was replaced)."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id


@dataclass(slots=True)
class _OffsetsPartition:
    leader_epoch: int
    loaded: bool = False


@dataclass(frozen=True, slots=True)
class _PendingSync:
    group_id: str
    generation_id: int


@dataclass(frozen=True, slots=True)
class _PendingCommit:
    request_id: int
    group_id: str
    generation_id: int
    member_id: str
    offsets: tuple[tuple[tuple[str, int], CommittedOffset], ...]
    refused: tuple[tuple[str, int, ErrorCode], ...]  # partitions answered with an error without being appended


@dataclass(frozen=True, slots=True)
class _PendingStaticRejoin:
    request_id: int
    group_id: str
    new_member_id: str
    old_member: _Member


@dataclass(frozen=True, slots=True)
class _PendingDelete:
    request_id: int
    results: dict[str, ErrorCode]
    waiting: frozenset[int]


@dataclass(slots=True)
class _PendingAppend:
    partition: int
    leader_epoch: int
    what: _Pending | None


_Pending = _PendingSync | _PendingCommit | _PendingStaticRejoin | _PendingDelete


def _coordinator_error(append_error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed `__consumer_offsets` append to what a group client is told
    (GroupMetadataManager.storeGroup / storeOffsets)."""
    if append_error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if append_error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if append_error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return append_error


class GroupCoordinator:
    """Every group whose offsets partition this broker leads. See the module docstring."""

    def __init__(self, broker_id: int, config: GroupCoordinatorConfig | None = None) -> None:
        self.broker_id = broker_id
        self.config = config or GroupCoordinatorConfig()
        self._partitions: dict[int, _OffsetsPartition] = {}
        self._groups: dict[str, _Group] = {}
        self._appends: dict[int, _PendingAppend] = {}
        self._next_append_id = 0

    # -- what the shell and tests may read ------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return group_partition(group_id, self.config.offsets_topic_num_partitions)

    def group_state(self, group_id: str) -> GroupState | None:
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def generation(self, group_id: str) -> int | None:
        group = self._groups.get(group_id)
        return None if group is None else group.generation_id

    def member_ids(self, group_id: str) -> tuple[str, ...]:
        group = self._groups.get(group_id)
        return () if group is None else tuple(group.members)

    def leader_of(self, group_id: str) -> str | None:
        group = self._groups.get(group_id)
        return None if group is None else group.leader_id

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self._groups.get(group_id)
        return {} if group is None else dict(group.offsets)

    def loaded_partitions(self) -> tuple[int, ...]:
        return tuple(sorted(p for p, state in self._partitions.items() if state.loaded))

    def next_deadline_ms(self) -> MonoMs | None:
        """When `poll` has something to do next (a session or a join phase ends), or None."""
        deadlines = [
            deadline
            for group in self._groups.values()
            for deadline in (
                None if group.commits_in_flight else group.join_deadline_ms,
                *(m.session_deadline_ms for m in group.members.values()),
                *group.pending_members.values(),
            )
            if deadline is not None
        ]
        return MonoMs(min(deadlines)) if deadlines else None

    # -- leadership of __consumer_offsets partitions --------------------------------------------------------------

    def on_become_leader(self, partition: int, leader_epoch: int, now: Now) -> list[GroupEffect]:
        """This broker leads `partition` in `leader_epoch`: load it (answering COORDINATOR_LOAD_IN_PROGRESS
        meanwhile). Leading it already in an older epoch, it unloads first: the log may differ."""
        assert 0 <= partition < self.config.offsets_topic_num_partitions, partition
        current = self._partitions.get(partition)
        if current is not None and current.leader_epoch == leader_epoch:
            return []
        out: list[GroupEffect] = []
        if current is not None:
            out += self.on_resign(partition, now)
        self._partitions[partition] = _OffsetsPartition(leader_epoch)
        out.append(LoadGroupPartition(partition, leader_epoch))
        return out

    def on_partition_loaded(
        self, partition: int, leader_epoch: int, log: Iterable[GroupRecord], now: Now
    ) -> list[GroupEffect]:
        """The records of `partition` read back (its committed log, oldest first): replay them into groups and
        offsets (Kafka's `GroupMetadataManager.doLoadGroupsAndOffsets`: the last record of each key wins, a
        tombstone removes). A load for an epoch this broker no longer leads in is dropped."""
        state = self._partitions.get(partition)
        if state is None or state.leader_epoch != leader_epoch or state.loaded:
            return []
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        metadata: dict[str, records.GroupMetadataValue | None] = {}
        for record in log:
            key = records.decode_key(record.key)
            if isinstance(key, records.OffsetCommitKey):
                group_offsets = offsets.setdefault(key.group, {})
                if record.value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    value = records.decode_offset_commit_value(record.value)
                    group_offsets[(key.topic, key.partition)] = CommittedOffset(
                        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp
                    )
            else:
                metadata[key.group] = (
                    None if record.value is None else records.decode_group_metadata_value(record.value)
                )
        state.loaded = True
        out: list[GroupEffect] = []
        for group_id in sorted(set(offsets) | {g for g, v in metadata.items() if v is not None}):
            group = self._rebuild(group_id, partition, metadata.get(group_id), offsets.get(group_id, {}), now)
            if group is None:
                continue
            self._groups[group_id] = group
            out.append(
                Emit(
                    events.GroupLoaded(
                        group_id=group_id,
                        partition=partition,
                        generation_id=group.generation_id,
                        state=group.state.value,
                        members=tuple(group.members),
                        offsets_count=len(group.offsets),
                    )
                )
            )
        return out

    def _rebuild(
        self,
        group_id: str,
        partition: int,
        value: records.GroupMetadataValue | None,
        offsets: dict[tuple[str, int], CommittedOffset],
        now: Now,
    ) -> _Group | None:
        if value is None and not offsets:
            return None
        group = _Group(group_id, partition, offsets=dict(offsets))
        if value is not None:
            group.protocol_type = value.protocol_type or None
            group.generation_id = value.generation
            group.protocol = value.protocol
            group.leader_id = value.leader
            group.state_timestamp_ms = value.current_state_timestamp
            for m in value.members:
                member = _Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout,
                    rebalance_timeout_ms=m.rebalance_timeout,
                    protocol_type=value.protocol_type,
                    protocols=((value.protocol or "", m.subscription),),
                    # Kafka reschedules every loaded member's session from the load: the new coordinator has
                    # heard no heartbeat yet.
                    session_deadline_ms=now.mono_ms + m.session_timeout,
                    assignment=m.assignment,
                )
                group.members[m.member_id] = member
                if m.group_instance_id is not None:
                    group.static_members[m.group_instance_id] = m.member_id
            # A group with members was persisted at its sync: it is Stable (Kafka loads it so).
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def on_resign(self, partition: int, now: Now) -> list[GroupEffect]:
        """This broker no longer leads `partition`: drop its groups. Requests parked on them (joins and syncs
        waiting for the rebalance) are answered NOT_COORDINATOR: the members find the new coordinator."""
        del now
        if self._partitions.pop(partition, None) is None:
            return []
        out: list[GroupEffect] = []
        for group_id in [g for g, group in self._groups.items() if group.partition == partition]:
            group = self._groups.pop(group_id)
            for member in group.members.values():
                if member.join_request_id is not None:
                    out.append(self._answer(member.join_request_id, wire.JoinGroupResponse, ErrorCode.NOT_COORDINATOR))
                if member.sync_request_id is not None:
                    out.append(self._answer(member.sync_request_id, wire.SyncGroupResponse, ErrorCode.NOT_COORDINATOR))
            out.append(
                Emit(events.GroupUnloaded(group_id=group_id, partition=partition, generation_id=group.generation_id))
            )
        return out

    def _check_coordinator(self, group_id: str) -> ErrorCode:
        """NONE if this broker serves the group now; else NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        state = self._partitions.get(self.partition_for(group_id))
        if state is None:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE if state.loaded else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    # -- JoinGroup --------------------------------------------------------------------------------------------------

    def on_join_group(
        self, request_id: int, request: wire.JoinGroupRequest, member_id_suffix: str, now: Now
    ) -> list[GroupEffect]:
        """Kafka's `handleJoinGroup`. `member_id_suffix` is the shell's random draw (a UUID) for a new member id,
        `client_id-suffix` as Kafka makes it."""
        error = self._join_precheck(request)
        if error is not ErrorCode.NONE:
            return [self._answer(request_id, wire.JoinGroupResponse, error, member_id=request.member_id)]
        group = self._groups.get(request.group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER_ID:
                return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID)]
            group = self._groups[request.group_id] = _Group(request.group_id, self.partition_for(request.group_id))
        if len(group.members) >= self.config.group_max_size and request.member_id not in group.members:
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.GROUP_MAX_SIZE_REACHED)]
        protocols = tuple((p.name, p.metadata) for p in request.protocols)
        if request.member_id == UNKNOWN_MEMBER_ID:
            return self._join_unknown_member(group, request_id, request, protocols, member_id_suffix, now)
        return self._join_known_member(group, request_id, request, protocols, now)

    def _join_precheck(self, request: wire.JoinGroupRequest) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        error = self._check_coordinator(request.group_id)
        if error is not ErrorCode.NONE:
            return error
        timeout = request.session_timeout_ms
        if not self.config.group_min_session_timeout_ms <= timeout <= self.config.group_max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return ErrorCode.NONE

    def _join_unknown_member(
        self,
        group: _Group,
        request_id: int,
        request: wire.JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
        suffix: str,
        now: Now,
    ) -> list[GroupEffect]:
        if group.state is GroupState.DEAD:
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.COORDINATOR_NOT_AVAILABLE)]
        if not group.supports(request.protocol_type, [name for name, _ in protocols]):
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)]
        new_member_id = f"{request.client_id}-{suffix}" if request.client_id else suffix
        instance_id = request.group_instance_id
        if instance_id is not None and instance_id in group.static_members:
            return self._replace_static_member(group, request_id, request, protocols, new_member_id, now)
        if instance_id is None:
            # KIP-394: a dynamic member first learns its id and must rejoin with it, so a member whose join
            # response is lost does not leave a ghost behind: until then it is pending, on its session timeout.
            group.pending_members[new_member_id] = now.mono_ms + request.session_timeout_ms
            return [
                self._answer(request_id, wire.JoinGroupResponse, ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id)
            ]
        return self._add_member_and_rebalance(group, request_id, request, protocols, new_member_id, now)

    def _join_known_member(
        self,
        group: _Group,
        request_id: int,
        request: wire.JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
        now: Now,
    ) -> list[GroupEffect]:
        member_id = request.member_id
        if group.state is GroupState.DEAD:
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.COORDINATOR_NOT_AVAILABLE)]
        if not group.supports(request.protocol_type, [name for name, _ in protocols]):
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)]
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, request_id, request, protocols, member_id, now)
        if group.is_fenced(member_id, request.group_instance_id):
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.FENCED_INSTANCE_ID)]
        member = group.members.get(member_id)
        if member is None:
            return [self._answer(request_id, wire.JoinGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)]
        out: list[GroupEffect] = []
        if group.state is GroupState.PREPARING_REBALANCE:
            out += self._update_member_and_rebalance(group, member, request_id, request, protocols, "", now)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.same_protocols(protocols):
                # A repeated join (its response was lost): answer with the generation it already joined.
                member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
                out.append(AnswerGroup(request_id, self._join_response(group, member)))
            else:
                out += self._update_member_and_rebalance(
                    group, member, request_id, request, protocols, f"member {member_id} changed its protocols", now
                )
        elif group.state is GroupState.STABLE:
            if member_id == group.leader_id or not member.same_protocols(protocols):
                # The leader rejoining forces a rebalance: it may have seen a metadata change (new partitions).
                reason = f"leader {member_id} rejoined" if member_id == group.leader_id else "protocols changed"
                out += self._update_member_and_rebalance(group, member, request_id, request, protocols, reason, now)
            else:
                member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
                out.append(AnswerGroup(request_id, self._join_response(group, member)))
        else:  # Empty: members are gone
            out.append(
                self._answer(request_id, wire.JoinGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            )
        return out

    def _add_member_and_rebalance(
        self,
        group: _Group,
        request_id: int,
        request: wire.JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
        member_id: str,
        now: Now,
    ) -> list[GroupEffect]:
        member = _Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=protocols,
            session_deadline_ms=now.mono_ms + request.session_timeout_ms,
            join_request_id=request_id,
        )
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        if group.initial_delay is not None and group.generation_id == 0:
            # Kafka extends the initial delay only for a group's very first generation (`newMemberAdded`).
            group.initial_delay.member_added = True
        out: list[GroupEffect] = [
            Emit(
                events.MemberJoined(
                    group_id=group.group_id,
                    member_id=member_id,
                    group_instance_id=request.group_instance_id,
                    generation_id=group.generation_id,
                    protocols=tuple(name for name, _ in protocols),
                )
            )
        ]
        out += self._maybe_prepare_rebalance(group, f"member {member_id} joined", now)
        out += self._try_complete_join(group, now)
        return out

    def _update_member_and_rebalance(
        self,
        group: _Group,
        member: _Member,
        request_id: int,
        request: wire.JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
        reason: str,
        now: Now,
    ) -> list[GroupEffect]:
        out: list[GroupEffect] = []
        if member.join_request_id is not None and member.join_request_id != request_id:
            # Kafka answers the older of two joins of one member with UNKNOWN_MEMBER_ID; it is superseded.
            out.append(self._answer(member.join_request_id, wire.JoinGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID))
        member.protocols = protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.join_request_id = request_id
        member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
        out += self._maybe_prepare_rebalance(group, reason, now)
        out += self._try_complete_join(group, now)
        return out

    def _replace_static_member(
        self,
        group: _Group,
        request_id: int,
        request: wire.JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
        new_member_id: str,
        now: Now,
    ) -> list[GroupEffect]:
        """KIP-345: a static member rejoining with an unknown member id (it restarted) takes over its instance id:
        the old member id is fenced. In a Stable group whose chosen protocol stays the same with the new member's
        protocols there is no rebalance (Kafka's `updateStaticMemberAndRebalance` compares the protocol the next
        generation would select, not the metadata: a restarted consumer's subscription no longer lists what it
        owned) — it gets the generation and, at its SyncGroup, the assignment it had — once the group's metadata
        with the new id is persisted; otherwise it rejoins like any member and the group rebalances."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        out: list[GroupEffect] = []
        for parked, kind in (
            (old.join_request_id, wire.JoinGroupResponse),
            (old.sync_request_id, wire.SyncGroupResponse),
        ):
            if parked is not None:
                out.append(self._answer(parked, kind, ErrorCode.FENCED_INSTANCE_ID))
        replacement = _Member(
            member_id=new_member_id,
            group_instance_id=instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=protocols,
            session_deadline_ms=now.mono_ms + request.session_timeout_ms,
            assignment=old.assignment,
        )
        self._swap_member(group, old_id, replacement)
        out += self._left_and_joined(group, old, replacement)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol:
            append_id = self._new_append(group, _PendingStaticRejoin(request_id, group.group_id, new_member_id, old))
            out.append(self._group_metadata_append(append_id, group, now))
            return out
        replacement.join_request_id = request_id
        out += self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined", now)
        out += self._try_complete_join(group, now)
        return out

    def _swap_member(self, group: _Group, old_id: str, replacement: _Member) -> None:
        """Put `replacement` where `old_id` was (same place in join order; the leader's role moves with it)."""
        group.members = {
            (replacement.member_id if mid == old_id else mid): (replacement if mid == old_id else m)
            for mid, m in group.members.items()
        }
        if replacement.group_instance_id is not None:
            group.static_members[replacement.group_instance_id] = replacement.member_id
        if group.leader_id == old_id:
            group.leader_id = replacement.member_id

    def _left_and_joined(self, group: _Group, old: _Member, new: _Member) -> list[GroupEffect]:
        return [
            Emit(
                events.MemberLeft(
                    group_id=group.group_id,
                    member_id=old.member_id,
                    group_instance_id=old.group_instance_id,
                    generation_id=group.generation_id,
                    reason="replaced",
                )
            ),
            Emit(
                events.MemberJoined(
                    group_id=group.group_id,
                    member_id=new.member_id,
                    group_instance_id=new.group_instance_id,
                    generation_id=group.generation_id,
                    protocols=tuple(name for name, _ in new.protocols),
                )
            ),
        ]

    def _join_response(self, group: _Group, member: _Member, *, with_members: bool = True) -> wire.JoinGroupResponse:
        """The answer to a member's join in the current generation: the leader also gets every member's metadata
        for the chosen protocol, to compute the assignment."""
        assert group.protocol is not None
        members: tuple[wire.JoinGroupMember, ...] = ()
        if with_members and member.member_id == group.leader_id:
            members = tuple(
                wire.JoinGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata(group.protocol)
                )
                for m in group.members.values()
            )
        return wire.JoinGroupResponse(
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members,
        )

    # -- rebalances ---------------------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: _Group, reason: str, now: Now) -> list[GroupEffect]:
        if group.state not in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return []
        return self._prepare_rebalance(group, reason, now)

    def _prepare_rebalance(self, group: _Group, reason: str, now: Now) -> list[GroupEffect]:
        """Kafka's `prepareRebalance`: syncs waiting for an assignment that will not come are answered
        REBALANCE_IN_PROGRESS; an Empty group waits `group.initial.rebalance.delay.ms` (extended while members
        keep arriving), any other the largest rebalance timeout of its members, for every member to rejoin."""
        out: list[GroupEffect] = []
        if group.state is GroupState.COMPLETING_REBALANCE:
            out += self._answer_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
        rebalance_timeout = group.rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay = min(self.config.group_initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_delay = _InitialDelay(delay, max(rebalance_timeout - delay, 0))
            group.join_deadline_ms = now.mono_ms + delay
        else:
            group.initial_delay = None
            group.join_deadline_ms = now.mono_ms + rebalance_timeout
        group.transition(GroupState.PREPARING_REBALANCE)
        group.state_timestamp_ms = now.wall_ms
        out.append(
            Emit(
                events.GroupRebalanceStarted(group_id=group.group_id, generation_id=group.generation_id, reason=reason)
            )
        )
        return out

    def _try_complete_join(self, group: _Group, now: Now) -> list[GroupEffect]:
        """The join phase ends early once every known member has rejoined (not while an initial delay runs)."""
        if group.state is not GroupState.PREPARING_REBALANCE or group.initial_delay is not None:
            return []
        if not group.all_joined():
            return []
        return self._complete_join(group, now)

    def _complete_join(self, group: _Group, now: Now) -> list[GroupEffect]:
        """Kafka's `onCompleteJoin`: dynamic members that did not rejoin are removed (static ones stay, until their
        session expires); a new generation begins, with a leader among the members that joined; every joined
        member is answered. With no member left the group is Empty, and that generation is persisted.

        Not while a commit accepted in the current generation is still being appended: Kafka appends the commit's
        records to the leader's log under the group's lock, so they always precede the next generation's record;
        here the append is asynchronous, so the new generation waits for it (and `OffsetsCommitted` always comes
        before the next `GroupGenerationStarted`)."""
        if group.commits_in_flight:
            return []
        out: list[GroupEffect] = []
        for member in [m for m in group.members.values() if m.join_request_id is None and m.group_instance_id is None]:
            out += self._remove_member(group, member, "rebalance_timeout")
        joined = group.awaiting_join()
        if group.members and not joined:
            # Only static members that have not rejoined: wait another rebalance timeout for them (or for their
            # sessions to expire), as Kafka does.
            group.join_deadline_ms = now.mono_ms + group.rebalance_timeout_ms()
            return out
        group.join_deadline_ms = None
        group.initial_delay = None
        group.generation_id += 1
        group.state_timestamp_ms = now.wall_ms
        if not group.members:
            group.protocol = None
            group.leader_id = None
            group.transition(GroupState.EMPTY)
        else:
            if group.leader_id not in {m.member_id for m in joined}:
                group.leader_id = joined[0].member_id
            group.protocol = group.select_protocol()
            group.transition(GroupState.COMPLETING_REBALANCE)
        out.append(
            Emit(
                events.GroupGenerationStarted(
                    group_id=group.group_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type or "",
                    protocol=group.protocol,
                    leader=group.leader_id,
                    members=tuple(group.members),
                )
            )
        )
        if group.state is GroupState.EMPTY:
            out.append(self._group_metadata_append(self._new_append(group, None), group, now))
            return out
        for member in joined:
            assert member.join_request_id is not None
            out.append(AnswerGroup(member.join_request_id, self._join_response(group, member)))
            member.join_request_id = None
            member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
        return out

    def _remove_member(self, group: _Group, member: _Member, reason: str) -> list[GroupEffect]:
        out: list[GroupEffect] = []
        if member.join_request_id is not None:
            out.append(self._answer(member.join_request_id, wire.JoinGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID))
        if member.sync_request_id is not None:
            out.append(self._answer(member.sync_request_id, wire.SyncGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID))
        del group.members[member.member_id]
        if (
            member.group_instance_id is not None
            and group.static_members.get(member.group_instance_id) == member.member_id
        ):
            del group.static_members[member.group_instance_id]
        out.append(
            Emit(
                events.MemberLeft(
                    group_id=group.group_id,
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    generation_id=group.generation_id,
                    reason=reason,
                )
            )
        )
        return out

    def _remove_member_and_update_group(
        self, group: _Group, member: _Member, reason: str, now: Now
    ) -> list[GroupEffect]:
        """Kafka's `removeMemberAndUpdateGroup`: a member gone from a Stable or CompletingRebalance group starts a
        rebalance; from a rebalancing one, it may be the last one the join phase waited for."""
        out = self._remove_member(group, member, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            out += self._prepare_rebalance(group, f"member {member.member_id} left ({reason})", now)
        # Like Kafka's join purgatory, which tries a new DelayedJoin at once: with no member left to wait for, the
        # join phase ends now.
        out += self._try_complete_join(group, now)
        return out

    # -- SyncGroup ----------------------------------------------------------------------------------------------

    def on_sync_group(self, request_id: int, request: wire.SyncGroupRequest, now: Now) -> list[GroupEffect]:
        """Kafka's `handleSyncGroup`: in CompletingRebalance every member waits for the leader's assignment, which
        is persisted with the group's metadata before anyone is answered; in Stable a member gets its assignment
        at once."""
        error = self._member_precheck(request.group_id, request.member_id, request.group_instance_id)
        group = self._groups.get(request.group_id)
        if error is ErrorCode.NONE and group is not None:
            error = self._sync_check(group, request)
        if error is not ErrorCode.NONE or group is None:
            return [self._answer(request_id, wire.SyncGroupResponse, error)]
        member = group.members[request.member_id]
        member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
        if group.state is GroupState.STABLE:
            return [AnswerGroup(request_id, self._sync_response(group, member))]
        member.sync_request_id = request_id
        if request.member_id != group.leader_id:
            return []
        assignment = {a.member_id: a.assignment for a in request.assignments}
        for m in group.members.values():  # a member the leader left out gets nothing; unknown ones are ignored
            m.assignment = assignment.get(m.member_id, b"")
        append_id = self._new_append(group, _PendingSync(group.group_id, group.generation_id))
        return [self._group_metadata_append(append_id, group, now)]

    def _sync_check(self, group: _Group, request: wire.SyncGroupRequest) -> ErrorCode:
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _sync_response(self, group: _Group, member: _Member) -> wire.SyncGroupResponse:
        return wire.SyncGroupResponse(
            protocol_type=group.protocol_type, protocol_name=group.protocol, assignment=member.assignment
        )

    def _answer_syncs(self, group: _Group, error: ErrorCode) -> list[GroupEffect]:
        out: list[GroupEffect] = []
        for member in group.members.values():
            if member.sync_request_id is None:
                continue
            if error is ErrorCode.NONE:
                out.append(AnswerGroup(member.sync_request_id, self._sync_response(group, member)))
            else:
                out.append(self._answer(member.sync_request_id, wire.SyncGroupResponse, error))
            member.sync_request_id = None
        return out

    def _assignment_synced(self, group: _Group, now: Now) -> list[GroupEffect]:
        """The leader's assignment is in the log: hand it out and become Stable (Kafka's
        `setAndPropagateAssignment`)."""
        group.transition(GroupState.STABLE)
        group.state_timestamp_ms = now.wall_ms
        members, topics, partitions = [], [], []
        if group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            for member in group.members.values():
                try:
                    assigned = records.decode_assignment(member.assignment).partitions
                except records.InvalidGroupRecord:
                    assigned = ()  # the group coordinator does not judge a leader's bytes; the event cannot show them
                for topic, numbers in assigned:
                    for number in numbers:
                        members.append(member.member_id)
                        topics.append(topic)
                        partitions.append(number)
        out: list[GroupEffect] = [
            Emit(
                events.GroupAssignmentSynced(
                    group_id=group.group_id,
                    generation_id=group.generation_id,
                    members=tuple(members),
                    topics=tuple(topics),
                    partitions=tuple(partitions),
                )
            )
        ]
        out += self._answer_syncs(group, ErrorCode.NONE)
        for member in group.members.values():
            member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
        return out

    # -- Heartbeat and LeaveGroup -------------------------------------------------------------------------------

    def _member_precheck(self, group_id: str, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """The checks every request of a member makes, in Kafka's order."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        error = self._check_coordinator(group_id)
        if error is not ErrorCode.NONE:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def on_heartbeat(self, request_id: int, request: wire.HeartbeatRequest, now: Now) -> list[GroupEffect]:
        """Kafka's `handleHeartbeat`: a heartbeat keeps the member's session; while the group rebalances it says
        REBALANCE_IN_PROGRESS, so the member rejoins; from another generation, ILLEGAL_GENERATION."""
        error = self._member_precheck(request.group_id, request.member_id, request.group_instance_id)
        group = self._groups.get(request.group_id)
        if error is ErrorCode.NONE and group is not None:
            if request.generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            elif group.state is GroupState.EMPTY:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                member = group.members[request.member_id]
                member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
                if group.state is GroupState.PREPARING_REBALANCE:
                    error = ErrorCode.REBALANCE_IN_PROGRESS
        return [self._answer(request_id, wire.HeartbeatResponse, error)]

    def on_leave_group(self, request_id: int, request: wire.LeaveGroupRequest, now: Now) -> list[GroupEffect]:
        """Kafka's `handleLeaveGroup` (v3+: many members; a static member may leave by instance id alone)."""
        error = ErrorCode.INVALID_GROUP_ID if not request.group_id else self._check_coordinator(request.group_id)
        group = self._groups.get(request.group_id)
        if error is ErrorCode.NONE and (group is None or group.state is GroupState.DEAD):
            error = ErrorCode.UNKNOWN_MEMBER_ID if group is None else ErrorCode.COORDINATOR_NOT_AVAILABLE
        if error is not ErrorCode.NONE or group is None:
            return [self._answer(request_id, wire.LeaveGroupResponse, error)]
        out: list[GroupEffect] = []
        answers = []
        for leaving in request.members:
            member_id = leaving.member_id
            if member_id == UNKNOWN_MEMBER_ID and leaving.group_instance_id is not None:
                member_id = group.static_members.get(leaving.group_instance_id, UNKNOWN_MEMBER_ID)
            if group.is_fenced(member_id, leaving.group_instance_id):
                member_error = ErrorCode.FENCED_INSTANCE_ID
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                member_error = ErrorCode.NONE
            elif member_id in group.members:
                out += self._remove_member_and_update_group(group, group.members[member_id], "left", now)
                member_error = ErrorCode.NONE
            else:
                member_error = ErrorCode.UNKNOWN_MEMBER_ID
            answers.append(
                wire.LeaveGroupMemberResponse(
                    member_id=leaving.member_id, group_instance_id=leaving.group_instance_id, error=int(member_error)
                )
            )
        out.append(AnswerGroup(request_id, wire.LeaveGroupResponse(members=tuple(answers))))
        return out

    # -- time -----------------------------------------------------------------------------------------------------

    def poll(self, now: Now) -> list[GroupEffect]:
        """Fire what is due: pending members and sessions that expired (Kafka's DelayedHeartbeat), join phases
        that ended (DelayedJoin, InitialDelayedJoin)."""
        out: list[GroupEffect] = []
        for group in list(self._groups.values()):
            for member_id in [m for m, deadline in group.pending_members.items() if deadline <= now.mono_ms]:
                del group.pending_members[member_id]
                out += self._try_complete_join(group, now)
            for member in list(group.members.values()):
                if member.session_deadline_ms <= now.mono_ms and member.member_id in group.members:
                    if self._keep_alive(group, member):
                        member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
                        continue
                    out += self._remove_member_and_update_group(group, member, "session_timeout", now)
            if group.join_deadline_ms is not None and group.join_deadline_ms <= now.mono_ms:
                out += self._join_deadline(group, now)
        return out

    def _join_phase_may_end(self, group: _Group, now: Now) -> list[GroupEffect]:
        """The join phase ends if its deadline passed or every member rejoined (after a commit it waited for)."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return []
        if group.join_deadline_ms is not None and group.join_deadline_ms <= now.mono_ms:
            return self._join_deadline(group, now)
        return self._try_complete_join(group, now)

    @staticmethod
    def _keep_alive(group: _Group, member: _Member) -> bool:
        """A member waiting on the coordinator is not expired meanwhile (Kafka's `shouldKeepAlive`): its join is
        parked until the join phase ends (the rebalance timeout governs it), its sync until the assignment."""
        waiting_join = member.join_request_id is not None and group.state is GroupState.PREPARING_REBALANCE
        return waiting_join or member.sync_request_id is not None

    def _join_deadline(self, group: _Group, now: Now) -> list[GroupEffect]:
        delay = group.initial_delay
        if delay is not None and delay.member_added and delay.remaining_ms > 0:
            extension = min(delay.delay_ms, delay.remaining_ms)
            group.initial_delay = _InitialDelay(delay.delay_ms, delay.remaining_ms - extension)
            group.join_deadline_ms = now.mono_ms + extension
            return []
        group.initial_delay = None
        return self._complete_join(group, now)

    # -- offsets --------------------------------------------------------------------------------------------------

    def on_offset_commit(
        self,
        request_id: int,
        request: wire.OffsetCommitRequest,
        now: Now,
        known: Callable[[str, int], bool] = lambda topic, partition: True,
    ) -> list[GroupEffect]:
        """Kafka's `handleCommitOffsets`: a member of the current generation commits (in Stable, or while
        PreparingRebalance so it can commit before rejoining); a commit with generation -1 is a simple consumer's,
        allowed only while the group is Empty (no member manages it). Anything else is refused per partition:
        ILLEGAL_GENERATION from a stale generation, UNKNOWN_MEMBER_ID from a member the group does not know,
        REBALANCE_IN_PROGRESS while the assignment is being decided.

        Before all that, KafkaApis' check against the broker's metadata: a partition it does not have (`known`
        false) is UNKNOWN_TOPIC_OR_PARTITION and is not committed; a request naming only such partitions is answered
        without the group's checks."""
        unknown = [
            (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in request.partitions if not known(p.topic, p.partition)
        ]
        if unknown:
            kept = tuple(p for p in request.partitions if known(p.topic, p.partition))
            if not kept:
                return [AnswerGroup(request_id, self._partition_answers(unknown))]
            request = request.model_copy(update={"partitions": kept})
        error = self._commit_check(request)
        if error is not ErrorCode.NONE:
            return [
                AnswerGroup(request_id, self._partition_answers([*unknown, *((p, error) for p in request.partitions)]))
            ]
        group = self._groups.get(request.group_id)
        if group is None:
            group = self._groups[request.group_id] = _Group(request.group_id, self.partition_for(request.group_id))
        commit: list[tuple[tuple[str, int], CommittedOffset]] = []
        answers = list(unknown)
        for p in request.partitions:
            metadata = p.committed_metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                answers.append((p, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            commit.append(
                (
                    (p.topic, p.partition),
                    CommittedOffset(p.committed_offset, p.committed_leader_epoch, metadata, now.wall_ms),
                )
            )
            answers.append((p, ErrorCode.NONE))
        if not commit:
            return [AnswerGroup(request_id, self._partition_answers(answers))]
        refused = tuple((p.topic, p.partition, e) for p, e in answers if e is not ErrorCode.NONE)
        pending = _PendingCommit(
            request_id, group.group_id, request.generation_id, request.member_id, tuple(commit), refused
        )
        append_id = self._new_append(group, pending)
        group.commits_in_flight += 1
        records_out = tuple(
            GroupRecord(
                records.encode_key(records.OffsetCommitKey(group.group_id, topic, partition)),
                records.encode_offset_commit_value(
                    records.OffsetCommitValue(c.offset, c.leader_epoch, c.metadata, c.commit_timestamp)
                ),
            )
            for (topic, partition), c in commit
        )
        return [
            AppendGroupRecords(append_id, group.partition, self._partitions[group.partition].leader_epoch, records_out)
        ]

    def _commit_check(self, request: wire.OffsetCommitRequest) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        error = self._check_coordinator(request.group_id)
        if error is not ErrorCode.NONE:
            return error
        group = self._groups.get(request.group_id)
        if group is None:
            # No group: a simple consumer's commit creates one; a group member's comes from a generation this
            # coordinator no longer has (Kafka: ILLEGAL_GENERATION).
            return ErrorCode.NONE if request.generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_fenced(request.member_id, request.group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if request.generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if request.member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    @staticmethod
    def _partition_answers(
        answers: Sequence[tuple[wire.OffsetCommitPartition, ErrorCode]],
    ) -> wire.OffsetCommitResponse:
        return wire.OffsetCommitResponse(
            partitions=tuple(
                wire.OffsetCommitPartitionResponse(topic=p.topic, partition=p.partition, error=int(e))
                for p, e in answers
            )
        )

    def on_offset_fetch(self, request: wire.OffsetFetchRequest) -> wire.OffsetFetchResponse:
        """Kafka's `handleFetchOffsets`: the committed offset of each partition asked for (-1 where none is),
        or of every partition the group committed when none is named. An unknown group has none."""
        error = ErrorCode.INVALID_GROUP_ID if not request.group_id else self._check_coordinator(request.group_id)
        if error is not ErrorCode.NONE:
            return wire.OffsetFetchResponse(error=int(error))
        group = self._groups.get(request.group_id)
        offsets = {} if group is None or group.state is GroupState.DEAD else group.offsets
        wanted = sorted(offsets) if request.partitions is None else [(p.topic, p.partition) for p in request.partitions]
        answers = []
        for topic, partition in wanted:
            committed = offsets.get((topic, partition))
            if committed is None:
                answers.append(wire.OffsetFetchPartitionResponse(topic=topic, partition=partition))
            else:
                answers.append(
                    wire.OffsetFetchPartitionResponse(
                        topic=topic,
                        partition=partition,
                        committed_offset=committed.offset,
                        committed_leader_epoch=committed.leader_epoch,
                        metadata=committed.metadata,
                    )
                )
        return wire.OffsetFetchResponse(partitions=tuple(answers))

    # -- ListGroups, DescribeGroups, DeleteGroups -----------------------------------------------------------------

    def on_list_groups(self, request: wire.ListGroupsRequest) -> wire.ListGroupsResponse:
        """Every group this broker coordinates now (Kafka answers COORDINATOR_LOAD_IN_PROGRESS while any of its
        partitions loads: the list would be incomplete)."""
        if any(not p.loaded for p in self._partitions.values()):
            return wire.ListGroupsResponse(error=int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
        wanted = {s.lower() for s in request.states_filter}
        groups = tuple(
            wire.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value)
            for g in sorted(self._groups.values(), key=lambda g: g.group_id)
            if not wanted or g.state.value.lower() in wanted
        )
        return wire.ListGroupsResponse(groups=groups)

    def on_describe_groups(self, request: wire.DescribeGroupsRequest) -> wire.DescribeGroupsResponse:
        """Kafka's `handleDescribeGroup`: an unknown group reads as Dead with no error; members' metadata and
        assignments are shown only while Stable (at other times they are being decided)."""
        return wire.DescribeGroupsResponse(groups=tuple(self._describe(group_id) for group_id in request.groups))

    def _describe(self, group_id: str) -> wire.DescribedGroup:
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._check_coordinator(group_id)
        group = self._groups.get(group_id)
        if error is not ErrorCode.NONE or group is None:
            return wire.DescribedGroup(
                error=int(error),
                group_id=group_id,
                group_state=GroupState.DEAD.value,
                protocol_type="",
                protocol_data="",
            )
        stable = group.state is GroupState.STABLE
        members = tuple(
            wire.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(group.protocol) if stable and group.protocol else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return wire.DescribedGroup(
            error=0,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol or "") if stable else "",
            generation_id=group.generation_id,
            members=members,
        )

    def on_delete_groups(self, request_id: int, request: wire.DeleteGroupsRequest, now: Now) -> list[GroupEffect]:
        """Kafka's `handleDeleteGroups`: an Empty group goes Dead at once, and tombstones for its metadata and
        every offset are appended; the answer waits for them. A group with members: NON_EMPTY_GROUP."""
        results: dict[str, ErrorCode] = {}
        doomed: list[_Group] = []
        for group_id in request.groups_names:
            error = ErrorCode.INVALID_GROUP_ID if not group_id else self._check_coordinator(group_id)
            group = self._groups.get(group_id)
            if error is not ErrorCode.NONE:
                results[group_id] = error
            elif group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                doomed.append(group)
                results[group_id] = ErrorCode.NONE
        out: list[GroupEffect] = []
        appends: list[AppendGroupRecords] = []
        for group in doomed:
            group.transition(GroupState.DEAD)
            del self._groups[group.group_id]
            tombstones = [GroupRecord(records.encode_key(records.GroupMetadataKey(group.group_id)), None)]
            tombstones += [
                GroupRecord(records.encode_key(records.OffsetCommitKey(group.group_id, t, p)), None)
                for t, p in group.offsets
            ]
            append_id = self._new_append(group, None)
            appends.append(
                AppendGroupRecords(
                    append_id, group.partition, self._partitions[group.partition].leader_epoch, tuple(tombstones)
                )
            )
            out.append(
                Emit(
                    events.GroupDeleted(
                        group_id=group.group_id, partition=group.partition, generation_id=group.generation_id
                    )
                )
            )
        if not appends:
            return [AnswerGroup(request_id, self._delete_answer(results))]
        waiting = frozenset(a.append_id for a in appends)
        for a in appends:
            self._appends[a.append_id].what = _PendingDelete(request_id, results, waiting)
        return [*appends, *out]

    @staticmethod
    def _delete_answer(results: dict[str, ErrorCode]) -> wire.DeleteGroupsResponse:
        return wire.DeleteGroupsResponse(
            results=tuple(wire.DeletableGroupResult(group_id=g, error=int(e)) for g, e in results.items())
        )

    # -- appends --------------------------------------------------------------------------------------------------

    def _new_append(self, group: _Group, what: _Pending | None) -> int:
        append_id = self._next_append_id
        self._next_append_id += 1
        self._appends[append_id] = _PendingAppend(group.partition, self._partitions[group.partition].leader_epoch, what)
        return append_id

    def _group_metadata_append(self, append_id: int, group: _Group, now: Now) -> AppendGroupRecords:
        value = records.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol,
            leader=group.leader_id,
            current_state_timestamp=now.wall_ms,
            members=tuple(
                records.MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(group.protocol) if group.protocol else b"",
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ),
        )
        record = GroupRecord(
            records.encode_key(records.GroupMetadataKey(group.group_id)), records.encode_group_metadata_value(value)
        )
        return AppendGroupRecords(append_id, group.partition, self._partitions[group.partition].leader_epoch, (record,))

    def on_append_done(self, append_id: int, error: ErrorCode, now: Now) -> list[GroupEffect]:
        """The outcome of an `AppendGroupRecords`: NONE once committed (acks=all), or the append's error."""
        pending = self._appends.pop(append_id, None)
        assert pending is not None, f"append {append_id} is not pending"
        state = self._partitions.get(pending.partition)
        stale = state is None or state.leader_epoch != pending.leader_epoch
        if error is ErrorCode.NONE and stale:
            # Committed, but this broker stopped coordinating meanwhile: the new coordinator loaded it.
            error = ErrorCode.NOT_COORDINATOR
        what = pending.what
        if isinstance(what, _PendingCommit):
            return self._commit_done(what, _coordinator_error(error), now, stale=stale)
        if isinstance(what, _PendingSync):
            return self._sync_done(what, _coordinator_error(error), now)
        if isinstance(what, _PendingStaticRejoin):
            return self._static_rejoin_done(what, _coordinator_error(error), now)
        if isinstance(what, _PendingDelete):
            what.results.update(
                {
                    g: _coordinator_error(error)
                    for g, e in what.results.items()
                    if e is ErrorCode.NONE and error is not ErrorCode.NONE
                }
            )
            if any(a in self._appends for a in what.waiting):
                return []
            return [AnswerGroup(what.request_id, self._delete_answer(what.results))]
        return []

    def _commit_done(self, what: _PendingCommit, error: ErrorCode, now: Now, *, stale: bool) -> list[GroupEffect]:
        answers = [wire.OffsetCommitPartitionResponse(topic=t, partition=p, error=int(e)) for t, p, e in what.refused]
        answers += [
            wire.OffsetCommitPartitionResponse(topic=t, partition=p, error=int(error)) for (t, p), _ in what.offsets
        ]
        answer = AnswerGroup(what.request_id, wire.OffsetCommitResponse(partitions=tuple(answers)))
        group = self._groups.get(what.group_id)
        if group is None or stale:
            return [answer]  # the group was unloaded (and perhaps loaded again: this append is not its to count)
        group.commits_in_flight -= 1
        assert group.commits_in_flight >= 0, group.group_id
        if error is not ErrorCode.NONE:
            return [answer, *self._join_phase_may_end(group, now)]
        group.offsets.update(dict(what.offsets))
        event = events.OffsetsCommitted(
            group_id=what.group_id,
            generation_id=what.generation_id,
            member_id=what.member_id,
            topics=tuple(t for (t, _), _ in what.offsets),
            partitions=tuple(p for (_, p), _ in what.offsets),
            offsets=tuple(c.offset for _, c in what.offsets),
        )
        return [Emit(event), answer, *self._join_phase_may_end(group, now)]

    def _sync_done(self, what: _PendingSync, error: ErrorCode, now: Now) -> list[GroupEffect]:
        group = self._groups.get(what.group_id)
        if (
            group is None
            or group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation_id != what.generation_id
        ):
            return []  # the group moved on (a rebalance answered the syncs already)
        if error is not ErrorCode.NONE:
            # Kafka's `resetAndPropagateAssignmentError`: the assignment is not persisted, so nobody gets it.
            for member in group.members.values():
                member.assignment = b""
            out = self._answer_syncs(group, error)
            return out + self._prepare_rebalance(group, f"assignment could not be persisted: {error.name}", now)
        return self._assignment_synced(group, now)

    def _static_rejoin_done(self, what: _PendingStaticRejoin, error: ErrorCode, now: Now) -> list[GroupEffect]:
        group = self._groups.get(what.group_id)
        member = None if group is None else group.members.get(what.new_member_id)
        if group is None or member is None:
            return [self._answer(what.request_id, wire.JoinGroupResponse, ErrorCode.UNKNOWN_MEMBER_ID)]
        if error is not ErrorCode.NONE:
            # Kafka reverts the replacement: the old member id stays the instance's.
            self._swap_member(group, what.new_member_id, what.old_member)
            return [self._answer(what.request_id, wire.JoinGroupResponse, error)]
        if group.state is not GroupState.STABLE:
            # A rebalance began meanwhile: the new member rejoins it like everyone else.
            member.join_request_id = what.request_id
            return self._try_complete_join(group, now)
        member.session_deadline_ms = now.mono_ms + member.session_timeout_ms
        # Like Kafka, even a rejoining leader gets no member list: the assignment stands, nobody recomputes it.
        return [AnswerGroup(what.request_id, self._join_response(group, member, with_members=False))]

    # -- helpers --------------------------------------------------------------------------------------------------

    @staticmethod
    def _answer(request_id: int, kind: type[wire.Response], error: ErrorCode, **fields: Any) -> AnswerGroup:
        return AnswerGroup(request_id, wire.error_response(kind, error, **fields))
