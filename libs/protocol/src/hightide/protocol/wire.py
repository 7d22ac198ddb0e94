"""The request and response bodies that cross NATS, and their msgpack codec.

Room: libs/protocol (vocabulary). Every body is a frozen pydantic model with `extra="forbid"` and strict types:
msgpack decodes to exactly the Python types declared, and nothing is coerced ("5" is not 5). Integers are sized
as Kafka sizes the same field (Int16 error codes, Int32 ids/epochs/sizes, Int64 offsets/times), and every list
and byte string has a bound, so a hostile request cannot make a service allocate without limit.

`decode` is the one boundary exception: anything that is not a valid body of the expected type raises
`InvalidRequest` (INVALID_REQUEST), which handlers answer with and otherwise ignore. Responses carry a top-level
`error` (an ErrorCode number) and `message` for failures of the whole request; per-partition errors sit with each
partition, as in Kafka's APIs.

The field names and meanings are Kafka's (Produce v9, Fetch v12+, ListOffsets, OffsetsForLeaderEpoch, Metadata,
BrokerRegistration, BrokerHeartbeat, AlterPartition, CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders,
InitProducerId, DescribeCluster), reduced to what Hightide uses.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeVar

import msgpack
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.subjects import BrokerApi, ControllerApi

Int16 = Annotated[int, Field(ge=-(2**15), le=2**15 - 1)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
NonNegInt32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
BrokerId = Annotated[int, Field(ge=0, le=2**31 - 1)]
ReplicaId = Annotated[int, Field(ge=-1, le=2**31 - 1)]
PartitionId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TOPIC_NAME_PATTERN: Final = r"^[a-zA-Z0-9._-]+$"
TOPIC_NAME_LENGTH_MAX: Final = 249
TopicName = Annotated[
    str, StringConstraints(min_length=1, max_length=TOPIC_NAME_LENGTH_MAX, pattern=TOPIC_NAME_PATTERN)
]
_TOPIC_NAME: Final = re.compile(TOPIC_NAME_PATTERN)
ShortText = Annotated[str, StringConstraints(max_length=4096)]
ConfigName = Annotated[str, StringConstraints(min_length=1, max_length=255)]


def carries_topic_name(name: str | None) -> bool:
    """Whether `TopicName` admits `name` (Kafka's legal characters and length; "." and ".." too, which Kafka's
    Topic.validate refuses and the controller's topic rules answer). A name it does not admit can name no topic."""
    return name is not None and len(name) <= TOPIC_NAME_LENGTH_MAX and _TOPIC_NAME.fullmatch(name) is not None


PARTITIONS_PER_REQUEST_MAX: Final = 10_000
TOPICS_PER_REQUEST_MAX: Final = 1_000
REPLICAS_MAX: Final = 1_000
CONFIGS_MAX: Final = 100
BODY_BYTES_MAX: Final = 64 * 1024 * 1024
"""No NATS message is larger than this (nats-server's max_payload cannot exceed it)."""


class InvalidRequest(HightideError):
    error_code = ErrorCode.INVALID_REQUEST


class Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Response(Wire):
    error: Int16 = 0
    message: ShortText = ""

    @property
    def error_code(self) -> ErrorCode:
        return error_code_of(self.error)


def error_code_of(number: int) -> ErrorCode:
    """The ErrorCode of a wire number; an unknown number is UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode(number)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


BrokerIds = Annotated[tuple[BrokerId, ...], Field(max_length=REPLICAS_MAX)]


# -- produce ---------------------------------------------------------------------------------------------------


class ProducePartitionData(Wire):
    topic: TopicName
    partition: PartitionId
    records: Annotated[bytes, Field(min_length=1, max_length=BODY_BYTES_MAX)]


class ProduceRequest(Wire):
    acks: Literal[-1, 0, 1]
    timeout_ms: NonNegInt32
    partitions: Annotated[tuple[ProducePartitionData, ...], Field(min_length=1, max_length=PARTITIONS_PER_REQUEST_MAX)]


class ProducePartitionResponse(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16
    base_offset: Int64 = -1
    log_start_offset: Int64 = -1
    message: ShortText = ""


class ProduceResponse(Response):
    partitions: Annotated[tuple[ProducePartitionResponse, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


# -- fetch -----------------------------------------------------------------------------------------------------


class FetchPartitionRequest(Wire):
    topic: TopicName
    partition: PartitionId
    fetch_offset: Int64
    current_leader_epoch: Int32 = -1
    last_fetched_epoch: Int32 = -1
    log_start_offset: Int64 = -1
    partition_max_bytes: NonNegInt32 = 1024 * 1024


class FetchRequest(Wire):
    replica_id: ReplicaId
    broker_epoch: Int64 = -1
    max_wait_ms: Annotated[int, Field(ge=0, le=60_000)] = 500
    min_bytes: NonNegInt32 = 1
    max_bytes: NonNegInt32 = 50 * 1024 * 1024
    partitions: Annotated[tuple[FetchPartitionRequest, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)]
    # Incremental fetch sessions (KIP-227, follower fetches: `hightide.core.fetch_session`). Kafka's SessionId and
    # SessionEpoch (0 and -1: no session, a full fetch) and ForgottenTopicsData.
    session_id: Int32 = 0
    session_epoch: Int32 = -1
    forgotten: Annotated[tuple[TopicPartitionRef, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()

    @model_validator(mode="after")
    def _names_a_partition(self) -> FetchRequest:
        if not self.partitions and self.session_epoch <= 0:
            raise ValueError("a fetch outside an incremental fetch session names at least one partition")
        return self


class FetchPartitionResponse(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16
    high_watermark: Int64 = -1
    log_start_offset: Int64 = -1
    log_end_offset: Int64 = -1
    diverging_epoch: Int32 = -1
    diverging_end_offset: Int64 = -1
    records: Annotated[bytes, Field(max_length=BODY_BYTES_MAX)] = b""


class FetchResponse(Response):
    partitions: Annotated[tuple[FetchPartitionResponse, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()
    session_id: Int32 = 0  # KIP-227: the session the leader keeps for this follower (0: none)


# -- list offsets and offsets for leader epoch -----------------------------------------------------------------

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1


class ListOffsetsPartition(Wire):
    topic: TopicName
    partition: PartitionId
    timestamp: Int64
    current_leader_epoch: Int32 = -1


class ListOffsetsRequest(Wire):
    partitions: Annotated[tuple[ListOffsetsPartition, ...], Field(min_length=1, max_length=PARTITIONS_PER_REQUEST_MAX)]


class ListOffsetsPartitionResponse(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16
    timestamp: Int64 = -1
    offset: Int64 = -1
    leader_epoch: Int32 = -1


class ListOffsetsResponse(Response):
    partitions: Annotated[tuple[ListOffsetsPartitionResponse, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


class EpochQuery(Wire):
    topic: TopicName
    partition: PartitionId
    current_leader_epoch: Int32 = -1
    leader_epoch: Int32


class OffsetsForLeaderEpochRequest(Wire):
    replica_id: ReplicaId = -1
    partitions: Annotated[tuple[EpochQuery, ...], Field(min_length=1, max_length=PARTITIONS_PER_REQUEST_MAX)]


class EpochEndOffsetResponse(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16
    leader_epoch: Int32 = -1
    end_offset: Int64 = -1


class OffsetsForLeaderEpochResponse(Response):
    partitions: Annotated[tuple[EpochEndOffsetResponse, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


# -- metadata --------------------------------------------------------------------------------------------------


class MetadataRequest(Wire):
    topics: Annotated[tuple[TopicName, ...], Field(max_length=TOPICS_PER_REQUEST_MAX)] | None = None


class BrokerMetadata(Wire):
    broker_id: BrokerId
    broker_epoch: Int64
    fenced: bool
    in_controlled_shutdown: bool
    kafka_listener: ShortText = ""  # issue 15: the advertised Kafka listener, host:port ("" when none)


class PartitionMetadata(Wire):
    partition: PartitionId
    error: Int16 = 0
    leader: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    replicas: BrokerIds
    isr: BrokerIds
    elr: BrokerIds = ()
    last_known_elr: BrokerIds = ()
    offline_replicas: BrokerIds = ()
    """Kafka's MetadataResponse offline_replicas: replicas whose log their broker reported unusable (KIP-858's
    offline log directory); they are neither leader nor in the ISR until their broker registers again."""
    adding_replicas: BrokerIds = ()
    removing_replicas: BrokerIds = ()
    """A reassignment in progress (issue 13): the replicas being added and removed (Kafka's
    ListPartitionReassignments, carried here so `topic describe` needs one request)."""


class TopicMetadata(Wire):
    name: TopicName
    error: Int16 = 0
    topic_id: ShortText = ""
    partitions: Annotated[tuple[PartitionMetadata, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()
    configs: Annotated[dict[ConfigName, ShortText], Field(max_length=CONFIGS_MAX)] = Field(default_factory=dict)


class MetadataResponse(Response):
    brokers: Annotated[tuple[BrokerMetadata, ...], Field(max_length=REPLICAS_MAX)] = ()
    topics: Annotated[tuple[TopicMetadata, ...], Field(max_length=TOPICS_PER_REQUEST_MAX)] = ()
    metadata_offset: Int64 = -1


# -- broker lifecycle (controller APIs) ------------------------------------------------------------------------


class BrokerRegistrationRequest(Wire):
    broker_id: BrokerId
    incarnation_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    previous_broker_epoch: Int64 = -1
    kafka_listener: ShortText = ""  # issue 15: the advertised Kafka listener, host:port ("" when none)
    directory_id: ShortText = ""  # i13-elr: the log dir's directory.id (KIP-858's meta.properties), "" when none


class BrokerRegistrationResponse(Response):
    broker_epoch: Int64 = -1


class BrokerHeartbeatRequest(Wire):
    broker_id: BrokerId
    broker_epoch: Int64
    current_metadata_offset: Int64
    want_fence: bool = False
    want_shut_down: bool = False
    offline_replicas: Annotated[tuple[TopicPartitionRef, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()
    """The broker's replicas whose log storage refused (Kafka's OfflineLogDirs, KIP-858, by partition): sent in
    every heartbeat while they are offline; a restart brings them back after log recovery."""


class BrokerHeartbeatResponse(Response):
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    in_controlled_shutdown: bool = False


class AlterPartitionRequest(Wire):
    broker_id: BrokerId
    broker_epoch: Int64
    topic: TopicName
    partition: PartitionId
    leader_epoch: Int32
    partition_epoch: Int32
    new_isr: BrokerIds
    new_isr_broker_epochs: Annotated[tuple[Int64, ...], Field(max_length=REPLICAS_MAX)]


class AlterPartitionResponse(Response):
    # None only with a top-level error (a request that did not decode), as Kafka's response then has no topics.
    topic: TopicName | None = None
    partition: PartitionId | None = None
    leader: Int32 = -1
    leader_epoch: Int32 = -1
    isr: BrokerIds = ()
    partition_epoch: Int32 = -1


# -- admin (controller APIs) -----------------------------------------------------------------------------------


class CreatableTopic(Wire):
    name: TopicName
    num_partitions: Annotated[int, Field(ge=-1, le=PARTITIONS_PER_REQUEST_MAX)] = -1
    replication_factor: Annotated[int, Field(ge=-1, le=REPLICAS_MAX)] = -1
    assignments: Annotated[tuple[BrokerIds, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] | None = None
    configs: Annotated[dict[ConfigName, ShortText], Field(max_length=CONFIGS_MAX)] = Field(default_factory=dict)


class CreateTopicsRequest(Wire):
    topics: Annotated[tuple[CreatableTopic, ...], Field(min_length=1, max_length=TOPICS_PER_REQUEST_MAX)]


class TopicResult(Wire):
    name: TopicName
    error: Int16
    message: ShortText = ""
    topic_id: ShortText = ""
    num_partitions: Int32 = -1
    replication_factor: Int32 = -1


class CreateTopicsResponse(Response):
    topics: Annotated[tuple[TopicResult, ...], Field(max_length=TOPICS_PER_REQUEST_MAX)] = ()


class DeleteTopicsRequest(Wire):
    topics: Annotated[tuple[TopicName, ...], Field(min_length=1, max_length=TOPICS_PER_REQUEST_MAX)]


class DeleteTopicsResponse(Response):
    topics: Annotated[tuple[TopicResult, ...], Field(max_length=TOPICS_PER_REQUEST_MAX)] = ()


class CreatePartitionsRequest(Wire):
    topic: TopicName
    count: Annotated[int, Field(ge=1, le=PARTITIONS_PER_REQUEST_MAX)]
    assignments: Annotated[tuple[BrokerIds, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] | None = None


class CreatePartitionsResponse(Response):
    pass


class AlterConfigsRequest(Wire):
    """Kafka's IncrementalAlterConfigs for one topic: SET `set_configs`, DELETE `delete_configs`."""

    topic: TopicName
    set_configs: Annotated[dict[ConfigName, ShortText], Field(max_length=CONFIGS_MAX)] = Field(default_factory=dict)
    delete_configs: Annotated[tuple[ConfigName, ...], Field(max_length=CONFIGS_MAX)] = ()
    validate_only: bool = False


class AlterConfigsResponse(Response):
    pass


class TopicPartitionRef(Wire):
    topic: TopicName
    partition: PartitionId


class ElectLeadersRequest(Wire):
    election_type: Literal["preferred", "unclean"]
    partitions: Annotated[tuple[TopicPartitionRef, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] | None = None


class ElectionResult(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16
    message: ShortText = ""


class ElectLeadersResponse(Response):
    results: Annotated[tuple[ElectionResult, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


class InitProducerIdRequest(Wire):
    pass


class InitProducerIdResponse(Response):
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


class DescribeClusterRequest(Wire):
    pass


class DescribeClusterResponse(Response):
    cluster_id: ShortText = ""
    controller_id: Int32 = -1
    controller_epoch: Int32 = -1
    metadata_offset: Int64 = -1
    brokers: Annotated[tuple[BrokerMetadata, ...], Field(max_length=REPLICAS_MAX)] = ()


# -- each API's bodies -----------------------------------------------------------------------------------------

REQUEST_OF: Final[dict[str, type[Wire]]] = {
    BrokerApi.PRODUCE: ProduceRequest,
    BrokerApi.FETCH: FetchRequest,
    BrokerApi.LIST_OFFSETS: ListOffsetsRequest,
    BrokerApi.OFFSETS_FOR_LEADER_EPOCH: OffsetsForLeaderEpochRequest,
    BrokerApi.METADATA: MetadataRequest,
    ControllerApi.REGISTER_BROKER: BrokerRegistrationRequest,
    ControllerApi.BROKER_HEARTBEAT: BrokerHeartbeatRequest,
    ControllerApi.ALTER_PARTITION: AlterPartitionRequest,
    ControllerApi.CREATE_TOPICS: CreateTopicsRequest,
    ControllerApi.DELETE_TOPICS: DeleteTopicsRequest,
    ControllerApi.CREATE_PARTITIONS: CreatePartitionsRequest,
    ControllerApi.ALTER_CONFIGS: AlterConfigsRequest,
    ControllerApi.ELECT_LEADERS: ElectLeadersRequest,
    ControllerApi.INIT_PRODUCER_ID: InitProducerIdRequest,
    ControllerApi.DESCRIBE_CLUSTER: DescribeClusterRequest,
}
"""The request body of every broker and controller API, by API name."""

RESPONSE_OF: Final[dict[str, type[Response]]] = {
    BrokerApi.PRODUCE: ProduceResponse,
    BrokerApi.FETCH: FetchResponse,
    BrokerApi.LIST_OFFSETS: ListOffsetsResponse,
    BrokerApi.OFFSETS_FOR_LEADER_EPOCH: OffsetsForLeaderEpochResponse,
    BrokerApi.METADATA: MetadataResponse,
    ControllerApi.REGISTER_BROKER: BrokerRegistrationResponse,
    ControllerApi.BROKER_HEARTBEAT: BrokerHeartbeatResponse,
    ControllerApi.ALTER_PARTITION: AlterPartitionResponse,
    ControllerApi.CREATE_TOPICS: CreateTopicsResponse,
    ControllerApi.DELETE_TOPICS: DeleteTopicsResponse,
    ControllerApi.CREATE_PARTITIONS: CreatePartitionsResponse,
    ControllerApi.ALTER_CONFIGS: AlterConfigsResponse,
    ControllerApi.ELECT_LEADERS: ElectLeadersResponse,
    ControllerApi.INIT_PRODUCER_ID: InitProducerIdResponse,
    ControllerApi.DESCRIBE_CLUSTER: DescribeClusterResponse,
}
"""The response body of every API: a request that does not decode is answered with its API's response (error
set), so the caller reads the Kafka error code rather than a body it cannot decode."""


# -- codec -----------------------------------------------------------------------------------------------------

W = TypeVar("W", bound=Wire)
RW = TypeVar("RW", bound=Response)


def encode(body: Wire) -> bytes:
    data: bytes = msgpack.packb(body.model_dump(), use_bin_type=True)
    return data


def decode(kind: type[W], data: bytes) -> W:
    """The body of type `kind` in `data`, or InvalidRequest saying what is wrong with it (the first problem)."""
    if len(data) > BODY_BYTES_MAX:
        raise InvalidRequest(f"body of {len(data)} bytes exceeds {BODY_BYTES_MAX}")
    try:
        raw = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True, max_bin_len=BODY_BYTES_MAX)
    except Exception as error:  # msgpack raises many unrelated types for bad input
        raise InvalidRequest(f"not a msgpack body: {type(error).__name__}") from None
    if not isinstance(raw, dict):
        raise InvalidRequest(f"expected a map for {kind.__name__}, got {type(raw).__name__}")
    try:
        return kind.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or kind.__name__
        raise InvalidRequest(f"{kind.__name__}.{where}: {first['msg']}") from None


def error_response(kind: type[RW], error: ErrorCode, message: str = "", **fields: Any) -> RW:
    """A response of type `kind` that fails the whole request with `error`."""
    return kind(error=int(error), message=message[:4096], **fields)


# -- partition reassignment (issue 13): AlterPartitionReassignments and ListPartitionReassignments ------------------


class ReassignablePartition(Wire):
    """One partition's target replicas; None cancels the reassignment in progress (Kafka's null replicas)."""

    topic: TopicName
    partition: PartitionId
    replicas: BrokerIds | None


class AlterPartitionReassignmentsRequest(Wire):
    partitions: Annotated[tuple[ReassignablePartition, ...], Field(min_length=1, max_length=PARTITIONS_PER_REQUEST_MAX)]


class ReassignmentResult(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16
    message: ShortText = ""


class AlterPartitionReassignmentsResponse(Response):
    results: Annotated[tuple[ReassignmentResult, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


class ListPartitionReassignmentsRequest(Wire):
    """None: every partition being reassigned; otherwise only these (unknown ones are left out, as Kafka)."""

    partitions: Annotated[tuple[TopicPartitionRef, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] | None = None


class OngoingPartitionReassignment(Wire):
    topic: TopicName
    partition: PartitionId
    replicas: BrokerIds
    adding_replicas: BrokerIds
    removing_replicas: BrokerIds


class ListPartitionReassignmentsResponse(Response):
    reassignments: Annotated[
        tuple[OngoingPartitionReassignment, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)
    ] = ()


REQUEST_OF[ControllerApi.ALTER_PARTITION_REASSIGNMENTS] = AlterPartitionReassignmentsRequest
REQUEST_OF[ControllerApi.LIST_PARTITION_REASSIGNMENTS] = ListPartitionReassignmentsRequest
RESPONSE_OF[ControllerApi.ALTER_PARTITION_REASSIGNMENTS] = AlterPartitionReassignmentsResponse
RESPONSE_OF[ControllerApi.LIST_PARTITION_REASSIGNMENTS] = ListPartitionReassignmentsResponse
REQUEST_OF[BrokerApi.REPLICA_FETCH] = FetchRequest  # NATS permissions (issue 14): a follower's fetch
RESPONSE_OF[BrokerApi.REPLICA_FETCH] = FetchResponse


# -- consumer groups (issue 13: the group coordinator's APIs) ----------------------------------------------------
# Kafka's classic group protocol (JoinGroup v9, SyncGroup v5, Heartbeat v4, LeaveGroup v5, OffsetCommit v8,
# OffsetFetch v8, FindCoordinator v4, ListGroups v4, DescribeGroups v5, DeleteGroups v2), reduced to what
# Hightide uses. A member id of "" is Kafka's UNKNOWN_MEMBER_ID, a generation of -1 "no generation" (a simple
# consumer's commit).

GROUPS_PER_REQUEST_MAX: Final = 1_000
MEMBERS_MAX: Final = 10_000
PROTOCOLS_MAX: Final = 100
GROUP_METADATA_BYTES_MAX: Final = 1024 * 1024
GroupId = Annotated[str, StringConstraints(max_length=249)]
"""Kafka allows any string; "" is answered INVALID_GROUP_ID by the coordinator, not refused at decoding."""
MemberId = Annotated[str, StringConstraints(max_length=1024)]
ProtocolBytes = Annotated[bytes, Field(max_length=GROUP_METADATA_BYTES_MAX)]


class FindCoordinatorRequest(Wire):
    key: GroupId
    key_type: Literal[0] = 0  # 0: a group (transactions are not built)


class FindCoordinatorResponse(Response):
    node_id: Int32 = -1
    partition: Int32 = -1
    """The group's `__consumer_offsets` partition (not in Kafka's response; it helps tests and the CLI)."""


class JoinGroupProtocol(Wire):
    name: Annotated[str, StringConstraints(min_length=1, max_length=249)]
    metadata: ProtocolBytes


class JoinGroupRequest(Wire):
    group_id: GroupId
    session_timeout_ms: NonNegInt32
    rebalance_timeout_ms: NonNegInt32
    member_id: MemberId = ""
    group_instance_id: MemberId | None = None
    protocol_type: Annotated[str, StringConstraints(max_length=249)] = "consumer"
    protocols: Annotated[tuple[JoinGroupProtocol, ...], Field(min_length=1, max_length=PROTOCOLS_MAX)]
    client_id: MemberId = ""
    client_host: MemberId = ""
    reason: ShortText = ""


class JoinGroupMember(Wire):
    member_id: MemberId
    group_instance_id: MemberId | None = None
    metadata: ProtocolBytes


class JoinGroupResponse(Response):
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: MemberId = ""
    member_id: MemberId = ""
    members: Annotated[tuple[JoinGroupMember, ...], Field(max_length=MEMBERS_MAX)] = ()


class SyncGroupAssignment(Wire):
    member_id: MemberId
    assignment: ProtocolBytes


class SyncGroupRequest(Wire):
    group_id: GroupId
    generation_id: Int32
    member_id: MemberId
    group_instance_id: MemberId | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Annotated[tuple[SyncGroupAssignment, ...], Field(max_length=MEMBERS_MAX)] = ()


class SyncGroupResponse(Response):
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: ProtocolBytes = b""


class HeartbeatRequest(Wire):
    group_id: GroupId
    generation_id: Int32
    member_id: MemberId
    group_instance_id: MemberId | None = None


class HeartbeatResponse(Response):
    pass


class MemberIdentity(Wire):
    member_id: MemberId = ""
    group_instance_id: MemberId | None = None
    reason: ShortText = ""


class LeaveGroupRequest(Wire):
    group_id: GroupId
    members: Annotated[tuple[MemberIdentity, ...], Field(min_length=1, max_length=MEMBERS_MAX)]


class LeaveGroupMemberResponse(Wire):
    member_id: MemberId
    group_instance_id: MemberId | None = None
    error: Int16


class LeaveGroupResponse(Response):
    members: Annotated[tuple[LeaveGroupMemberResponse, ...], Field(max_length=MEMBERS_MAX)] = ()


class OffsetCommitPartition(Wire):
    topic: TopicName
    partition: PartitionId
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: ShortText | None = None


class OffsetCommitRequest(Wire):
    group_id: GroupId
    generation_id: Int32 = -1
    member_id: MemberId = ""
    group_instance_id: MemberId | None = None
    partitions: Annotated[tuple[OffsetCommitPartition, ...], Field(min_length=1, max_length=PARTITIONS_PER_REQUEST_MAX)]


class OffsetCommitPartitionResponse(Wire):
    topic: TopicName
    partition: PartitionId
    error: Int16


class OffsetCommitResponse(Response):
    partitions: Annotated[tuple[OffsetCommitPartitionResponse, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


class OffsetFetchRequest(Wire):
    group_id: GroupId
    partitions: Annotated[tuple[TopicPartitionRef, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] | None = None
    """None: every partition the group has committed an offset for."""


class OffsetFetchPartitionResponse(Wire):
    topic: TopicName
    partition: PartitionId
    committed_offset: Int64 = -1
    committed_leader_epoch: Int32 = -1
    metadata: ShortText | None = ""
    error: Int16 = 0


class OffsetFetchResponse(Response):
    partitions: Annotated[tuple[OffsetFetchPartitionResponse, ...], Field(max_length=PARTITIONS_PER_REQUEST_MAX)] = ()


class ListGroupsRequest(Wire):
    states_filter: Annotated[tuple[ShortText, ...], Field(max_length=10)] = ()


class ListedGroup(Wire):
    group_id: GroupId
    protocol_type: str
    group_state: str


class ListGroupsResponse(Response):
    groups: Annotated[tuple[ListedGroup, ...], Field(max_length=1_000_000)] = ()


class DescribeGroupsRequest(Wire):
    groups: Annotated[tuple[GroupId, ...], Field(min_length=1, max_length=GROUPS_PER_REQUEST_MAX)]


class DescribedGroupMember(Wire):
    member_id: MemberId
    group_instance_id: MemberId | None = None
    client_id: MemberId
    client_host: MemberId
    member_metadata: ProtocolBytes
    member_assignment: ProtocolBytes


class DescribedGroup(Wire):
    error: Int16
    group_id: GroupId
    group_state: str
    protocol_type: str
    protocol_data: str
    generation_id: Int32 = -1
    members: Annotated[tuple[DescribedGroupMember, ...], Field(max_length=MEMBERS_MAX)] = ()


class DescribeGroupsResponse(Response):
    groups: Annotated[tuple[DescribedGroup, ...], Field(max_length=GROUPS_PER_REQUEST_MAX)] = ()


class DeleteGroupsRequest(Wire):
    groups_names: Annotated[tuple[GroupId, ...], Field(min_length=1, max_length=GROUPS_PER_REQUEST_MAX)]


class DeletableGroupResult(Wire):
    group_id: GroupId
    error: Int16


class DeleteGroupsResponse(Response):
    results: Annotated[tuple[DeletableGroupResult, ...], Field(max_length=GROUPS_PER_REQUEST_MAX)] = ()


REQUEST_OF.update(
    {
        BrokerApi.FIND_COORDINATOR: FindCoordinatorRequest,
        BrokerApi.JOIN_GROUP: JoinGroupRequest,
        BrokerApi.SYNC_GROUP: SyncGroupRequest,
        BrokerApi.HEARTBEAT: HeartbeatRequest,
        BrokerApi.LEAVE_GROUP: LeaveGroupRequest,
        BrokerApi.OFFSET_COMMIT: OffsetCommitRequest,
        BrokerApi.OFFSET_FETCH: OffsetFetchRequest,
        BrokerApi.LIST_GROUPS: ListGroupsRequest,
        BrokerApi.DESCRIBE_GROUPS: DescribeGroupsRequest,
        BrokerApi.DELETE_GROUPS: DeleteGroupsRequest,
    }
)
RESPONSE_OF.update(
    {
        BrokerApi.FIND_COORDINATOR: FindCoordinatorResponse,
        BrokerApi.JOIN_GROUP: JoinGroupResponse,
        BrokerApi.SYNC_GROUP: SyncGroupResponse,
        BrokerApi.HEARTBEAT: HeartbeatResponse,
        BrokerApi.LEAVE_GROUP: LeaveGroupResponse,
        BrokerApi.OFFSET_COMMIT: OffsetCommitResponse,
        BrokerApi.OFFSET_FETCH: OffsetFetchResponse,
        BrokerApi.LIST_GROUPS: ListGroupsResponse,
        BrokerApi.DESCRIBE_GROUPS: DescribeGroupsResponse,
        BrokerApi.DELETE_GROUPS: DeleteGroupsResponse,
    }
)
