"""Kafka's group, IncrementalAlterConfigs and reassignment messages, translated to and from Hightide's internal
requests (`hightide.protocol.wire`), as the broker's Kafka listener serves them.

Room: libs/protocol (vocabulary; issue 15). No I/O and no rules: the group coordinator (hightide.core) decides,
the broker's listener carries. The schemas and their encoding are `kio`'s (see `hightide.protocol.kafka`).

What each version changes, and what this module does with it (Kafka's own handling in `KafkaApis` and
`GroupCoordinator`):
- FindCoordinator v0-v3 names one key; v4 a batch (`coordinator_keys`), answered key by key. Key type 1
  (a transactional id) is not served: Hightide has no transactions.
- JoinGroup v0 has no rebalance timeout: the session timeout stands for it, as Kafka. Before v4 a new member
  is not asked to rejoin with its id (KIP-394): the listener rejoins for it (see `rejoin_for_old_client`).
  Protocol name and type are nullable only from v7: an unknown one is "" before.
- LeaveGroup v0-v2 names one member (its error is the top-level error); v3+ a batch.
- OffsetCommit v2-v4 carry a retention time, which Kafka 2.1+ ignores (so does Hightide); v5+ have none.
- OffsetFetch v1 has no top-level error (it goes to each partition); v2-v7 have one; v8 batches groups.
- The classic protocol's member metadata and assignments (the client's assignor's bytes) pass through as bytes.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.kafka import (
    ALTER_PARTITION_REASSIGNMENTS,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    GROUP_OPERATIONS,
    HEARTBEAT,
    INCREMENTAL_ALTER_CONFIGS,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_PARTITION_REASSIGNMENTS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
    UNKNOWN_TOPIC_OR_PARTITION,
    Request,
    authorized_operations,
    carried,
    make,
    response_schema,
)

CLASSIC: Final = "classic"  # ListGroups v5's group type of every Hightide group
JOIN_GROUP_REQUIRES_MEMBER_ID: Final = 4  # KIP-394's first JoinGroup version
INCREMENTAL_OPS: Final = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}  # Kafka's AlterConfigOp.OpType

GROUP_APIS: Final = frozenset(
    {FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH}
    | {LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS}
)
ADMIN_APIS: Final = frozenset({INCREMENTAL_ALTER_CONFIGS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS})


def _nested(schema: type[Any], name: str) -> type[Any]:
    found: type[Any] = getattr(sys.modules[schema.__module__], name)
    return found


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _text(request: Request, value: str | None, nullable_from: int) -> str | None:
    """A nullable string at versions that have it; "" for null before."""
    if value is None and request.api_version < nullable_from:
        return ""
    return value


# -- FindCoordinator ------------------------------------------------------------------------------------------------


def coordinator_keys(body: Any) -> list[tuple[str, int]]:
    """(key, key type) of each key asked: one before v4, a batch from v4."""
    key_type = int(getattr(body, "key_type", 0))
    if hasattr(body, "coordinator_keys"):
        return [(key, key_type) for key in body.coordinator_keys]
    return [(body.key, key_type)]


CoordinatorAnswer = tuple[str, int, int, str, int, str]  # key, error, node id, host, port, message


def find_coordinator_response(request: Request, answers: list[CoordinatorAnswer]) -> Any:
    schema = response_schema(request)
    if request.api_version >= 4:
        coordinator = _nested(schema, "Coordinator")
        return make(
            schema,
            throttle_time=0,
            coordinators=tuple(
                make(
                    coordinator,
                    key=key,
                    node_id=node,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message or None,
                )
                for key, error, node, host, port, message in answers
            ),
        )
    _, error, node, host, port, message = answers[0]
    return make(
        schema, throttle_time=0, error_code=error, error_message=message or None, node_id=node, host=host, port=port
    )


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------------------


def join_group_request(body: Any, client_id: str | None, member_id: str | None = None) -> wire.JoinGroupRequest:
    session_ms = _ms(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    return wire.JoinGroupRequest(
        group_id=body.group_id,
        session_timeout_ms=max(session_ms, 0),
        rebalance_timeout_ms=max(session_ms if rebalance is None else _ms(rebalance), 0),
        member_id=body.member_id if member_id is None else member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=body.protocol_type,
        protocols=tuple(wire.JoinGroupProtocol(name=p.name, metadata=bytes(p.metadata)) for p in body.protocols),
        client_id=(client_id or "")[:1024],
        reason=(getattr(body, "reason", None) or "")[:4096],
    )


def rejoin_for_old_client(request: Request, answer: wire.JoinGroupResponse) -> bool:
    """Before JoinGroup v4 Kafka adds a new member at once; the coordinator (v4+ semantics) answered
    MEMBER_ID_REQUIRED with the member's id: the listener joins again with it, as a v4 client would."""
    return request.api_version < JOIN_GROUP_REQUIRES_MEMBER_ID and answer.error_code is ErrorCode.MEMBER_ID_REQUIRED


def join_group_response(request: Request, answer: wire.JoinGroupResponse) -> Any:
    schema = response_schema(request)
    member = _nested(schema, "JoinGroupResponseMember")
    return make(
        schema,
        throttle_time=0,
        error_code=answer.error,
        generation_id=answer.generation_id,
        protocol_type=answer.protocol_type,
        protocol_name=_text(request, answer.protocol_name, 7),
        leader=answer.leader,
        skip_assignment=False,
        member_id=answer.member_id,
        members=tuple(
            make(member, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in answer.members
        ),
    )


def sync_group_request(body: Any) -> wire.SyncGroupRequest:
    return wire.SyncGroupRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments=tuple(
            wire.SyncGroupAssignment(member_id=a.member_id, assignment=bytes(a.assignment)) for a in body.assignments
        ),
    )


def sync_group_response(request: Request, answer: wire.SyncGroupResponse) -> Any:
    return make(
        response_schema(request),
        throttle_time=0,
        error_code=answer.error,
        protocol_type=answer.protocol_type,
        protocol_name=answer.protocol_name,
        assignment=answer.assignment,
    )


def heartbeat_request(body: Any) -> wire.HeartbeatRequest:
    return wire.HeartbeatRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
    )


def heartbeat_response(request: Request, answer: wire.HeartbeatResponse) -> Any:
    return make(response_schema(request), throttle_time=0, error_code=answer.error)


def leave_group_request(body: Any) -> wire.LeaveGroupRequest:
    if hasattr(body, "members"):
        members = tuple(
            wire.MemberIdentity(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                reason=(getattr(m, "reason", None) or "")[:4096],
            )
            for m in body.members
        )
    else:
        members = (wire.MemberIdentity(member_id=body.member_id),)
    return wire.LeaveGroupRequest(group_id=body.group_id, members=members)


def leave_group_response(request: Request, answer: wire.LeaveGroupResponse) -> Any:
    schema = response_schema(request)
    if request.api_version < 3:
        error = answer.error or next((m.error for m in answer.members if m.error), 0)
        return make(schema, throttle_time=0, error_code=error)
    member = _nested(schema, "MemberResponse")
    return make(
        schema,
        throttle_time=0,
        error_code=answer.error,
        members=tuple(
            make(member, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error)
            for m in answer.members
        ),
    )


# -- OffsetCommit, OffsetFetch --------------------------------------------------------------------------------------


def offset_commit_request(body: Any) -> wire.OffsetCommitRequest | None:
    """The internal OffsetCommit of the partitions it can carry (`kafka.carried`); None when it can carry none:
    Kafka answers a request of unknown topics only, UNKNOWN_TOPIC_OR_PARTITION each, without its coordinator."""
    partitions = tuple(
        wire.OffsetCommitPartition(
            topic=t.name,
            partition=p.partition_index,
            committed_offset=p.committed_offset,
            committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
            committed_metadata=p.committed_metadata,
        )
        for t in body.topics
        for p in t.partitions
        if carried(t.name, p.partition_index)
    )
    if not partitions:
        return None
    return wire.OffsetCommitRequest(
        group_id=body.group_id,
        generation_id=body.generation_id_or_member_epoch,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        partitions=partitions,
    )


def _by_topic(items: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for topic, item in items:
        grouped.setdefault(topic, []).append(item)
    return grouped


def offset_commit_response(request: Request, answer: wire.OffsetCommitResponse) -> Any:
    schema = response_schema(request)
    topic_schema, part_schema = (
        _nested(schema, "OffsetCommitResponseTopic"),
        _nested(schema, "OffsetCommitResponsePartition"),
    )
    asked = [(t.name, p.partition_index) for t in request.body.topics for p in t.partitions]
    if answer.partitions:
        rows = [(p.topic, (p.partition, p.error)) for p in answer.partitions]
    else:
        rows = [(name, (index, answer.error)) for name, index in asked if carried(name, index)]
    rows += [(name, (index, UNKNOWN_TOPIC_OR_PARTITION)) for name, index in asked if not carried(name, index)]
    topics = tuple(
        make(
            topic_schema,
            name=name,
            partitions=tuple(make(part_schema, partition_index=i, error_code=e) for i, e in parts),
        )
        for name, parts in _by_topic(rows).items()
    )
    return make(schema, throttle_time=0, topics=topics)


def _fetch_partitions(topics: Any) -> tuple[wire.TopicPartitionRef, ...] | None:
    """The partitions asked that the internal request can carry (`_uncarried` answers the others)."""
    if topics is None:
        return None
    return tuple(
        wire.TopicPartitionRef(topic=t.name, partition=p)
        for t in topics
        for p in t.partition_indexes
        if carried(t.name, p)
    )


def _uncarried(topics: Any) -> list[tuple[str, Any]]:
    """A partition asked that the internal request cannot carry is no partition with a committed offset: -1 and no
    error, as Kafka answers a topic it does not have. Unvalidated rows (`kafka._rows`)."""
    return [
        (t.name, wire.OffsetFetchPartitionResponse.model_construct(topic=t.name, partition=p))
        for t in topics or ()
        for p in t.partition_indexes
        if not carried(t.name, p)
    ]


def offset_fetch_requests(body: Any) -> list[wire.OffsetFetchRequest]:
    """One internal request per group (v8 batches groups, each possibly with its own coordinator)."""
    if hasattr(body, "groups"):
        return [
            wire.OffsetFetchRequest(group_id=g.group_id, partitions=_fetch_partitions(g.topics)) for g in body.groups
        ]
    return [wire.OffsetFetchRequest(group_id=body.group_id, partitions=_fetch_partitions(body.topics))]


def _fetch_topics(
    topic_schema: type[Any],
    part_schema: type[Any],
    asked: wire.OffsetFetchRequest,
    answer: wire.OffsetFetchResponse,
    partition_error: bool,
    topics_asked: Any,
) -> tuple[Any, ...]:
    rows: list[tuple[str, Any]]
    if answer.partitions or asked.partitions is None:
        rows = [(p.topic, p) for p in answer.partitions]
    else:
        rows = [
            (ref.topic, wire.OffsetFetchPartitionResponse(topic=ref.topic, partition=ref.partition))
            for ref in asked.partitions
        ]
    rows += _uncarried(topics_asked)
    return tuple(
        make(
            topic_schema,
            name=name,
            partitions=tuple(
                make(
                    part_schema,
                    partition_index=p.partition,
                    committed_offset=p.committed_offset,
                    committed_leader_epoch=p.committed_leader_epoch,
                    metadata=p.metadata,
                    error_code=p.error or (answer.error if partition_error else 0),
                )
                for p in parts
            ),
        )
        for name, parts in _by_topic(rows).items()
    )


def offset_fetch_response(
    request: Request, answers: list[tuple[wire.OffsetFetchRequest, wire.OffsetFetchResponse]]
) -> Any:
    schema = response_schema(request)
    if request.api_version >= 8:
        group_schema = _nested(schema, "OffsetFetchResponseGroup")
        topic_schema, part_schema = (
            _nested(schema, "OffsetFetchResponseTopics"),
            _nested(schema, "OffsetFetchResponsePartitions"),
        )
        groups = tuple(
            make(
                group_schema,
                group_id=asked.group_id,
                topics=_fetch_topics(topic_schema, part_schema, asked, answer, False, group.topics),
                error_code=answer.error,
            )
            for (asked, answer), group in zip(answers, request.body.groups, strict=True)
        )
        return make(schema, throttle_time=0, groups=groups)
    asked, answer = answers[0]
    topic_schema, part_schema = (
        _nested(schema, "OffsetFetchResponseTopic"),
        _nested(schema, "OffsetFetchResponsePartition"),
    )
    partition_error = request.api_version < 2  # v1 has no top-level error
    topics = _fetch_topics(topic_schema, part_schema, asked, answer, partition_error, request.body.topics)
    return make(schema, throttle_time=0, topics=topics, error_code=answer.error)


# -- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------------------------


def list_groups_request(body: Any) -> wire.ListGroupsRequest:
    return wire.ListGroupsRequest(states_filter=tuple(getattr(body, "states_filter", ()) or ()))


def list_groups_response(request: Request, answer: wire.ListGroupsResponse) -> Any:
    schema = response_schema(request)
    listed = _nested(schema, "ListedGroup")
    types = {t.lower() for t in getattr(request.body, "types_filter", ()) or ()}
    groups = () if types and CLASSIC not in types else answer.groups
    return make(
        schema,
        throttle_time=0,
        error_code=answer.error,
        groups=tuple(
            make(
                listed,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.group_state,
                group_type=CLASSIC,
            )
            for g in groups
        ),
    )


def describe_groups_request(body: Any) -> wire.DescribeGroupsRequest:
    return wire.DescribeGroupsRequest(groups=tuple(body.groups))


def describe_groups_response(request: Request, answer: wire.DescribeGroupsResponse) -> Any:
    schema = response_schema(request)
    group_schema, member_schema = _nested(schema, "DescribedGroup"), _nested(schema, "DescribedGroupMember")
    groups = answer.groups
    if answer.error and not groups:
        groups = tuple(
            wire.DescribedGroup.model_construct(
                error=answer.error, group_id=g, group_state="", protocol_type="", protocol_data="", members=()
            )
            for g in request.body.groups
        )
    return make(
        schema,
        throttle_time=0,
        groups=tuple(
            make(
                group_schema,
                error_code=g.error,
                group_id=g.group_id,
                group_state=g.group_state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol_data,
                members=tuple(
                    make(
                        member_schema,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.member_metadata,
                        member_assignment=m.member_assignment,
                    )
                    for m in g.members
                ),
                authorized_operations=authorized_operations(
                    getattr(request.body, "include_authorized_operations", False), GROUP_OPERATIONS
                ),
            )
            for g in groups
        ),
    )


def delete_groups_request(body: Any) -> wire.DeleteGroupsRequest:
    return wire.DeleteGroupsRequest(groups_names=tuple(body.groups_names))


def delete_groups_response(request: Request, answer: wire.DeleteGroupsResponse) -> Any:
    schema = response_schema(request)
    result = _nested(schema, "DeletableGroupResult")
    results = answer.results or tuple(
        wire.DeletableGroupResult.model_construct(group_id=g, error=answer.error) for g in request.body.groups_names
    )
    return make(
        schema, throttle_time=0, results=tuple(make(result, group_id=r.group_id, error_code=r.error) for r in results)
    )


# -- IncrementalAlterConfigs ----------------------------------------------------------------------------------------

AlterConfigsAnswer = tuple[int, str, int, str]  # resource type, name, error, message


def incremental_alter_configs_response(request: Request, answers: list[AlterConfigsAnswer]) -> Any:
    schema = response_schema(request)
    result = _nested(schema, "AlterConfigsResourceResponse")
    return make(
        schema,
        throttle_time=0,
        responses=tuple(
            make(
                result,
                error_code=error,
                error_message=message or None,
                resource_type=kind,
                resource_name=name,
            )
            for kind, name, error, message in answers
        ),
    )


# -- AlterPartitionReassignments, ListPartitionReassignments ------------------------------------------------------


def alter_partition_reassignments_request(body: Any) -> wire.AlterPartitionReassignmentsRequest:
    return wire.AlterPartitionReassignmentsRequest(
        partitions=tuple(
            wire.ReassignablePartition(
                topic=t.name,
                partition=p.partition_index,
                replicas=None if p.replicas is None else tuple(int(b) for b in p.replicas),
            )
            for t in body.topics
            for p in t.partitions
        )
    )


def alter_partition_reassignments_response(request: Request, answer: wire.AlterPartitionReassignmentsResponse) -> Any:
    schema = response_schema(request)
    topic_schema, part_schema = (
        _nested(schema, "ReassignableTopicResponse"),
        _nested(schema, "ReassignablePartitionResponse"),
    )
    rows = [(r.topic, r) for r in answer.results]
    topics = tuple(
        make(
            topic_schema,
            name=name,
            partitions=tuple(
                make(part_schema, partition_index=r.partition, error_code=r.error, error_message=r.message or None)
                for r in parts
            ),
        )
        for name, parts in _by_topic(rows).items()
    )
    top = answer.error if not answer.results else 0
    return make(schema, throttle_time=0, error_code=top, error_message=answer.message or None, responses=topics)


def list_partition_reassignments_request(body: Any) -> wire.ListPartitionReassignmentsRequest:
    if body.topics is None:
        return wire.ListPartitionReassignmentsRequest(partitions=None)
    return wire.ListPartitionReassignmentsRequest(
        partitions=tuple(
            wire.TopicPartitionRef(topic=t.name, partition=p) for t in body.topics for p in t.partition_indexes
        )
    )


def list_partition_reassignments_response(request: Request, answer: wire.ListPartitionReassignmentsResponse) -> Any:
    schema = response_schema(request)
    topic_schema = _nested(schema, "OngoingTopicReassignment")
    part_schema = _nested(schema, "OngoingPartitionReassignment")
    rows = [(r.topic, r) for r in answer.reassignments]
    topics = tuple(
        make(
            topic_schema,
            name=name,
            partitions=tuple(
                make(
                    part_schema,
                    partition_index=r.partition,
                    replicas=r.replicas,
                    adding_replicas=r.adding_replicas,
                    removing_replicas=r.removing_replicas,
                )
                for r in parts
            ),
        )
        for name, parts in _by_topic(rows).items()
    )
    return make(schema, throttle_time=0, error_code=answer.error, error_message=answer.message or None, topics=topics)
