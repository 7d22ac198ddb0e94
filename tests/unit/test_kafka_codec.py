"""`hightide.protocol.kafka`: the frames, headers and translations of the Kafka listener, without a socket.

Requests are built with kio's writers (the encoding Kafka's clients use), parsed back, and the answers' bytes are
checked at the header level Kafka's clients read: the response header version (v0, v1 for flexible versions, v0
always for ApiVersions), the correlation id, and the translation to Hightide's internal requests.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from typing import Any

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from hightide.broker import kafka_groups as broker_kafka_groups
from hightide.protocol import kafka, kafka_groups, kafka_sasl, wire
from hightide.protocol.errors import ErrorCode


def frame(header: object, body: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(header))(buffer, header)
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


def v2(api_key: int, version: int, correlation_id: int = 9) -> HeaderV2:
    return HeaderV2(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="t")


def test_frame_size_refuses_negative_and_oversized() -> None:
    assert kafka.frame_size(struct.pack(">i", 10)) == 10
    assert kafka.frame_size(struct.pack(">i", kafka.SOCKET_REQUEST_MAX_BYTES_DEFAULT)) == 104_857_600
    for size in (-1, kafka.SOCKET_REQUEST_MAX_BYTES_DEFAULT + 1):
        with pytest.raises(kafka.FrameTooLarge):
            kafka.frame_size(struct.pack(">i", size))
    with pytest.raises(kafka.FrameTooLarge):
        kafka.frame_size(struct.pack(">i", 101), max_bytes=100)


def test_api_versions_answers_with_header_v0_whatever_the_version() -> None:
    body = struct.pack(">hhih", 18, 3, 77, 1) + b"c" + b"\x00" + b"\x02n\x02v\x00"  # v3: header v2, compact strings
    request = kafka.parse_request(body)
    answer = kafka.encode_response(request, kafka.api_versions_response(request))
    size, correlation_id, error = struct.unpack_from(">iih", answer)
    assert (size, correlation_id, error) == (len(answer) - 4, 77, 0)  # no tagged-field byte after the id


def test_api_versions_at_an_unserved_version_is_v0_unsupported_version() -> None:
    request = kafka.parse_request(struct.pack(">hhi", 18, 4, 5) + b"anything")
    answer = kafka.encode_response(request, kafka.api_versions_response(request))
    assert struct.unpack(">iihihhh", answer)[1:] == (5, 35, 1, 18, 0, 3)


@pytest.mark.parametrize(
    "head",
    [
        struct.pack(">hhi", 57, 0, 1),  # UpdateFeatures: not served
        struct.pack(">hhi", 0, 13, 1),  # Produce v13 (topic ids): its response has no top-level error
        struct.pack(">hhi", 3, 0, 1),  # Metadata v0
        struct.pack(">hhi", 999, 0, 1),
        b"\x00\x03",  # shorter than a header
    ],
)
def test_unserved_keys_versions_and_short_headers_are_refused(head: bytes) -> None:
    with pytest.raises(kafka.UnservedRequest):
        kafka.parse_request(head + b"\x00\x00")


def test_an_unserved_version_with_a_top_level_error_is_answered_unsupported_version_at_that_version() -> None:
    request = kafka.parse_request(struct.pack(">hhi", 1, 13, 8) + b"\x00\x00")  # Fetch v13 (topic ids)
    assert request.body is None
    answer = kafka.encode_response(request, kafka.unsupported_version_response(request))
    # size, correlation id, the empty tagged fields of response header v1, throttle time, error code
    assert struct.unpack_from(">iibih", answer)[1:] == (8, 0, 0, 35)


def test_a_refusal_names_its_reason() -> None:
    with pytest.raises(kafka.UnservedRequest) as unknown:
        kafka.parse_request(struct.pack(">hhi", 999, 2, 1))
    assert (unknown.value.reason, unknown.value.api_key, unknown.value.api_version) == ("unknown_api", 999, 2)
    with pytest.raises(kafka.UnservedRequest) as short:
        kafka.parse_request(b"\x00")
    assert (short.value.reason, short.value.api_key) == ("unparsable", -1)
    with pytest.raises(kafka.UnservedRequest) as no_answer:
        kafka.parse_request(struct.pack(">hhi", 12, 5, 1))  # Heartbeat v5: no Kafka release defines it
    assert no_answer.value.reason == "unsupported_version"


def test_a_truncated_body_is_refused() -> None:
    whole = frame(
        v2(3, 12),
        MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    )
    assert kafka.parse_request(whole).body.topics is None
    with pytest.raises(kafka.UnservedRequest):
        kafka.parse_request(whole[:-2])


def test_flexible_answers_have_response_header_v1_and_others_v0() -> None:
    request = kafka.parse_request(
        frame(
            v2(3, 12, 31),
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="a"),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    )
    assert kafka.metadata_request(request.body) == wire.MetadataRequest(topics=("a",))
    answer = kafka.encode_response(request, kafka.metadata_response(request, wire.MetadataResponse(), "c", 1))
    assert struct.unpack_from(">ib", answer, 4) == (31, 0)  # correlation id, then an empty tagged-field section
    old = kafka.parse_request(struct.pack(">hhih", 3, 1, 32, -1) + struct.pack(">i", -1))  # v1: all topics
    assert kafka.metadata_request(old.body) == wire.MetadataRequest(topics=None)
    old_answer = kafka.encode_response(old, kafka.metadata_response(old, wire.MetadataResponse(), "c", 1))
    # v1 body right after the correlation id: the brokers array (int32 count 0).
    assert struct.unpack_from(">ii", old_answer, 4) == (32, 0)


def test_produce_translates_to_the_internal_request_and_back() -> None:
    body = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=(
            TopicProduceData(name="t", partition_data=(PartitionProduceData(index=2, records=Records(b"batch")),)),
        ),
    )
    request = kafka.parse_request(
        frame(HeaderV2(request_api_key=0, request_api_version=9, correlation_id=1, client_id=None), body)
    )
    internal = kafka.produce_request(request.body)
    assert internal == wire.ProduceRequest(
        acks=-1, timeout_ms=1500, partitions=(wire.ProducePartitionData(topic="t", partition=2, records=b"batch"),)
    )
    answer = wire.ProduceResponse(
        partitions=(wire.ProducePartitionResponse(topic="t", partition=2, error=0, base_offset=40, log_start_offset=0),)
    )
    produced = kafka.produce_response(request, answer)
    part = produced.responses[0].partition_responses[0]
    assert (produced.responses[0].name, part.index, part.base_offset, int(part.error_code)) == ("t", 2, 40, 0)
    failed = kafka.error_response(request, ErrorCode.INVALID_REQUEST, "no")
    assert int(failed.responses[0].partition_responses[0].error_code) == 42


def _produce_naming(*topics: tuple[str, int]) -> kafka.Request:
    data = tuple(
        TopicProduceData(name=name, partition_data=(PartitionProduceData(index=index, records=Records(b"b")),))
        for name, index in topics
    )
    body = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=data)
    return kafka.parse_request(frame(v2(0, 9), body))


def test_a_partition_the_internal_request_cannot_carry_is_answered_unknown_topic_or_partition() -> None:
    """A topic name outside Kafka's legal characters or length, or a negative index, names no partition: it is left
    out of the internal request and answered UNKNOWN_TOPIC_OR_PARTITION beside the others' answers."""
    request = _produce_naming(("t", 0), ("no spaces!", 0), ("x" * 250, 0), ("t2", -1))
    internal = kafka.produce_request(request.body)
    assert internal is not None
    assert [(p.topic, p.partition) for p in internal.partitions] == [("t", 0)]
    answer = wire.ProduceResponse(partitions=(wire.ProducePartitionResponse(topic="t", partition=0, error=0),))
    answered = {
        (topic.name, part.index): int(part.error_code)
        for topic in kafka.produce_response(request, answer).responses
        for part in topic.partition_responses
    }
    assert answered == {("t", 0): 0, ("no spaces!", 0): 3, ("x" * 250, 0): 3, ("t2", -1): 3}
    # A whole-request error reaches every partition the internal request held; the others stay unknown.
    failed = kafka.error_response(request, ErrorCode.INVALID_REQUEST, "no")
    codes = {(t.name, p.index): int(p.error_code) for t in failed.responses for p in t.partition_responses}
    assert codes == {("t", 0): 42, ("no spaces!", 0): 3, ("x" * 250, 0): 3, ("t2", -1): 3}
    assert kafka.produce_request(_produce_naming(("no spaces!", 0)).body) is None


def test_metadata_of_an_illegal_name_is_invalid_topic_exception() -> None:
    body = MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=name) for name in ("t", "a b", "..")),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    request = kafka.parse_request(frame(v2(3, 12), body))
    assert kafka.metadata_request(request.body) == wire.MetadataRequest(topics=("t",))
    answer = wire.MetadataResponse(topics=(wire.TopicMetadata(name="t", error=3),))
    answered = kafka.metadata_response(request, answer, "c", 1)
    assert [(t.name, int(t.error_code)) for t in answered.topics] == [("t", 3), ("a b", 17), ("..", 17)]


def test_authorized_operations_are_every_supported_one_when_asked_and_int_min_when_not() -> None:
    """Kafka's AuthHelper with no authorizer: AclEntry.supportedOperations as a bit field of AclOperation codes."""
    # READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11
    assert kafka.TOPIC_OPERATIONS == 0b1101_1111_1000
    assert kafka.CLUSTER_OPERATIONS == 0b1_1111_1010_0000  # CREATE ALTER DESCRIBE CLUSTER_ACTION .. IDEMPOTENT_WRITE
    assert kafka.GROUP_OPERATIONS == 0b1101_0100_1000  # READ DELETE DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    for asked in (True, False):
        body = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="t"),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=asked,
        )
        request = kafka.parse_request(frame(v2(3, 12), body))
        answer = kafka.metadata_response(request, wire.MetadataResponse(topics=(wire.TopicMetadata(name="t"),)), "c", 1)
        assert answer.topics[0].topic_authorized_operations == (kafka.TOPIC_OPERATIONS if asked else -(2**31))


@pytest.mark.parametrize(
    ("name", "carried"), [("t", True), ("a.b_c-D9", True), ("..", True), ("", False), ("a b", False), ("t\n", False)]
)
def test_carries_topic_name_is_the_wire_types_own_rule(name: str, carried: bool) -> None:
    assert wire.carries_topic_name(name) is carried
    assert wire.carries_topic_name("x" * 249) and not wire.carries_topic_name("x" * 250)
    try:
        wire.TopicResult(name=name, error=0)
        admitted = True
    except ValueError:
        admitted = False
    assert admitted is carried


def test_fetch_keeps_kip_320_fields_and_clamps_the_wait() -> None:
    body = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=120_000),
        min_bytes=1,
        topics=(
            FetchTopic(
                topic="t",
                partitions=(
                    FetchPartition(
                        partition=0,
                        current_leader_epoch=4,
                        fetch_offset=7,
                        last_fetched_epoch=3,
                        partition_max_bytes=1000,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    request = kafka.parse_request(frame(v2(1, 12), body))
    internal = kafka.fetch_request(request.body)
    assert internal is not None
    assert internal.replica_id == -1 and internal.max_wait_ms == 60_000
    assert internal.partitions == (
        wire.FetchPartitionRequest(
            topic="t",
            partition=0,
            fetch_offset=7,
            current_leader_epoch=4,
            last_fetched_epoch=3,
            partition_max_bytes=1000,
        ),
    )
    answer = wire.FetchResponse(
        partitions=(
            wire.FetchPartitionResponse(
                topic="t",
                partition=0,
                error=0,
                high_watermark=9,
                log_start_offset=0,
                diverging_epoch=2,
                diverging_end_offset=5,
                records=b"r",
            ),
        )
    )
    part = kafka.fetch_response(request, answer).responses[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset, bytes(part.records)) == (9, 9, b"r")
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (2, 5)


def test_topic_ids_are_kafkas_uuid() -> None:
    raw = uuid.uuid4()
    text = base64.urlsafe_b64encode(raw.bytes).rstrip(b"=").decode()
    assert kafka.topic_uuid(text) == raw
    assert kafka.topic_uuid("") is None


def _answers() -> dict[int, Any]:
    """For each served API, a translation of an internal answer with content (topics, partitions, brokers)."""
    broker = wire.BrokerMetadata(
        broker_id=1, broker_epoch=5, fenced=False, in_controlled_shutdown=False, kafka_listener="127.0.0.1:9092"
    )
    topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    return {
        kafka.PRODUCE: lambda r: kafka.produce_response(
            r, wire.ProduceResponse(partitions=(wire.ProducePartitionResponse(topic="t", partition=0, error=0),))
        ),
        kafka.FETCH: lambda r: kafka.fetch_response(
            r,
            wire.FetchResponse(
                partitions=(
                    wire.FetchPartitionResponse(topic="t", partition=0, error=0, records=b"x", diverging_epoch=1),
                )
            ),
        ),
        kafka.LIST_OFFSETS: lambda r: kafka.list_offsets_response(
            r,
            wire.ListOffsetsResponse(partitions=(wire.ListOffsetsPartitionResponse(topic="t", partition=0, error=0),)),
        ),
        kafka.METADATA: lambda r: kafka.metadata_response(
            r,
            wire.MetadataResponse(
                brokers=(broker,),
                topics=(
                    wire.TopicMetadata(
                        name="t",
                        topic_id=topic_id,
                        partitions=(
                            wire.PartitionMetadata(
                                partition=0, leader=1, leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,)
                            ),
                        ),
                    ),
                ),
            ),
            "c",
            1,
        ),
        kafka.API_VERSIONS: kafka.api_versions_response,
        kafka.CREATE_TOPICS: lambda r: kafka.create_topics_response(
            r, wire.CreateTopicsResponse(topics=(wire.TopicResult(name="t", error=0, topic_id=topic_id),))
        ),
        kafka.DELETE_TOPICS: lambda r: kafka.delete_topics_response(
            r, wire.DeleteTopicsResponse(topics=(wire.TopicResult(name="t", error=36, message="m"),))
        ),
        kafka.INIT_PRODUCER_ID: lambda r: kafka.init_producer_id_response(
            r, wire.InitProducerIdResponse(producer_id=7, producer_epoch=0)
        ),
        kafka.OFFSET_FOR_LEADER_EPOCH: lambda r: kafka.offsets_for_leader_epoch_response(
            r,
            wire.OffsetsForLeaderEpochResponse(
                partitions=(wire.EpochEndOffsetResponse(topic="t", partition=0, error=0),)
            ),
        ),
        kafka.DESCRIBE_CLUSTER: lambda r: kafka.describe_cluster_response(
            r, wire.DescribeClusterResponse(cluster_id="c", brokers=(broker,)), 1
        ),
        kafka.DESCRIBE_CONFIGS: lambda r: kafka.describe_configs_response(
            r, [(kafka.TOPIC_RESOURCE, "t", 0, "", [("retention.ms", "1", kafka.CONFIG_SOURCE_DYNAMIC_TOPIC)])]
        ),
        kafka.CREATE_PARTITIONS: lambda r: kafka.create_partitions_response(r, [("t", 0, "")]),
        kafka.ELECT_LEADERS: lambda r: kafka.elect_leaders_response(
            r, wire.ElectLeadersResponse(results=(wire.ElectionResult(topic="t", partition=0, error=84),))
        ),
        # SASL (issue 15, security)
        kafka.SASL_HANDSHAKE: lambda r: kafka_sasl.handshake_response(r, ErrorCode.NONE, ("PLAIN", "SCRAM-SHA-512")),
        kafka.SASL_AUTHENTICATE: lambda r: kafka_sasl.authenticate_response(
            r, ErrorCode.SASL_AUTHENTICATION_FAILED, "m", b"token", 5
        ),
    } | _group_and_admin_answers()


def _group_and_admin_answers() -> dict[int, Any]:
    """Issue 15, groups/configs/reassignments slice: the new APIs' answers, with content."""
    member = wire.JoinGroupMember(member_id="m", metadata=b"meta")
    described = wire.DescribedGroup(
        error=0,
        group_id="g",
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        members=(
            wire.DescribedGroupMember(
                member_id="m", client_id="c", client_host="h", member_metadata=b"x", member_assignment=b"y"
            ),
        ),
    )
    fetched = wire.OffsetFetchPartitionResponse(topic="t", partition=0, committed_offset=5, metadata="")
    return {
        kafka.FIND_COORDINATOR: lambda r: kafka_groups.find_coordinator_response(r, [("g", 0, 2, "h", 9092, "")]),
        kafka.JOIN_GROUP: lambda r: kafka_groups.join_group_response(
            r,
            wire.JoinGroupResponse(
                generation_id=3,
                protocol_type="consumer",
                protocol_name="range",
                leader="m",
                member_id="m",
                members=(member,),
            ),
        ),
        kafka.SYNC_GROUP: lambda r: kafka_groups.sync_group_response(
            r, wire.SyncGroupResponse(protocol_type="consumer", protocol_name="range", assignment=b"a")
        ),
        kafka.HEARTBEAT: lambda r: kafka_groups.heartbeat_response(r, wire.HeartbeatResponse(error=27)),
        kafka.LEAVE_GROUP: lambda r: kafka_groups.leave_group_response(
            r, wire.LeaveGroupResponse(members=(wire.LeaveGroupMemberResponse(member_id="m", error=0),))
        ),
        kafka.OFFSET_COMMIT: lambda r: kafka_groups.offset_commit_response(
            r,
            wire.OffsetCommitResponse(
                partitions=(wire.OffsetCommitPartitionResponse(topic="t", partition=0, error=0),)
            ),
        ),
        kafka.OFFSET_FETCH: lambda r: kafka_groups.offset_fetch_response(
            r, [(wire.OffsetFetchRequest(group_id="g"), wire.OffsetFetchResponse(partitions=(fetched,)))]
        ),
        kafka.LIST_GROUPS: lambda r: kafka_groups.list_groups_response(
            r,
            wire.ListGroupsResponse(
                groups=(wire.ListedGroup(group_id="g", protocol_type="consumer", group_state="Empty"),)
            ),
        ),
        kafka.DESCRIBE_GROUPS: lambda r: kafka_groups.describe_groups_response(
            r, wire.DescribeGroupsResponse(groups=(described,))
        ),
        kafka.DELETE_GROUPS: lambda r: kafka_groups.delete_groups_response(
            r, wire.DeleteGroupsResponse(results=(wire.DeletableGroupResult(group_id="g", error=68),))
        ),
        kafka.INCREMENTAL_ALTER_CONFIGS: lambda r: kafka_groups.incremental_alter_configs_response(
            r, [(kafka.TOPIC_RESOURCE, "t", 40, "bad")]
        ),
        kafka.ALTER_PARTITION_REASSIGNMENTS: lambda r: kafka_groups.alter_partition_reassignments_response(
            r,
            wire.AlterPartitionReassignmentsResponse(
                results=(wire.ReassignmentResult(topic="t", partition=0, error=0),)
            ),
        ),
        kafka.LIST_PARTITION_REASSIGNMENTS: lambda r: kafka_groups.list_partition_reassignments_response(
            r,
            wire.ListPartitionReassignmentsResponse(
                reassignments=(
                    wire.OngoingPartitionReassignment(
                        topic="t", partition=0, replicas=(1, 2, 3), adding_replicas=(3,), removing_replicas=(1,)
                    ),
                )
            ),
        ),
    }


@pytest.mark.parametrize(
    ("api_key", "version"), [(k, v) for k, (lo, hi) in sorted(kafka.SERVED.items()) for v in range(lo, hi + 1)]
)
def test_every_served_version_answers_with_content(api_key: int, version: int) -> None:
    # A request that names nothing: the answer's rows are all the internal answer's.
    group = types.SimpleNamespace(group_id="g", topics=None)
    asked = types.SimpleNamespace(topic_data=(), topics=(), topic_names=(), topic_partitions=(), groups=(group,))
    request = kafka.Request(api_key, version, 12, "c", body=asked)
    translated = _answers()[api_key](request)
    answer = kafka.encode_response(request, translated)
    size, correlation_id = struct.unpack_from(">ii", answer)
    assert (size, correlation_id) == (len(answer) - 4, 12)
    # The body, read back with kio at the same version, is what was written (header v0, or v1 when flexible).
    flexible = api_key != kafka.API_VERSIONS and kafka.load_response_schema(api_key, version).__flexible__
    schema = kafka.load_response_schema(api_key, version)
    body, read = entity_reader(schema)(memoryview(answer)[8 + (1 if flexible else 0) :], 0)
    assert read == len(answer) - 8 - (1 if flexible else 0)
    assert body == translated


def _sample(kind: Any) -> Any:
    """A value of a kio field type with content: one element in every array, 1 in every number, "t" in strings."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in typing.get_args(kind) if a is not type(None)))
    if origin is tuple:
        return (_sample(typing.get_args(kind)[0]),)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return kind(**{f.name: _sample(hints[f.name]) for f in dataclasses.fields(kind)})
    if kind is bool:
        return False
    if kind is uuid.UUID:
        return uuid.UUID(int=1)
    if "Timedelta" in getattr(kind, "__name__", ""):
        return datetime.timedelta(milliseconds=100)
    if isinstance(kind, type) and issubclass(kind, str):
        return "t"
    if isinstance(kind, type) and issubclass(kind, bytes):
        return Records(b"x")
    assert isinstance(kind, type) and issubclass(kind, int), kind
    return 1


TRANSLATIONS: dict[int, Any] = {  # the translation, and where the internal request names its first topic
    kafka.PRODUCE: (kafka.produce_request, lambda r: r.partitions[0].topic),
    kafka.FETCH: (kafka.fetch_request, lambda r: r.partitions[0].topic),
    kafka.LIST_OFFSETS: (kafka.list_offsets_request, lambda r: r.partitions[0].topic),
    kafka.METADATA: (kafka.metadata_request, lambda r: r.topics[0]),
    kafka.CREATE_TOPICS: (kafka.create_topics_request, lambda r: r.topics[0].name),
    kafka.DELETE_TOPICS: (kafka.delete_topics_request, lambda r: r.topics[0]),
    kafka.OFFSET_FOR_LEADER_EPOCH: (kafka.offsets_for_leader_epoch_request, lambda r: r.partitions[0].topic),
    kafka.CREATE_PARTITIONS: (lambda b: kafka.create_partitions_request(b.topics[0]), lambda r: r.topic),
    kafka.ELECT_LEADERS: (kafka.elect_leaders_request, lambda r: r.partitions[0].topic),
    # issue 15, groups/configs/reassignments slice ("t" is each request's group id or topic)
    kafka.FIND_COORDINATOR: (kafka_groups.coordinator_keys, lambda r: r[0][0]),
    kafka.JOIN_GROUP: (lambda b: kafka_groups.join_group_request(b, "c"), lambda r: r.group_id),
    kafka.SYNC_GROUP: (kafka_groups.sync_group_request, lambda r: r.assignments[0].member_id),
    kafka.HEARTBEAT: (kafka_groups.heartbeat_request, lambda r: r.member_id),
    kafka.LEAVE_GROUP: (kafka_groups.leave_group_request, lambda r: r.members[0].member_id),
    kafka.OFFSET_COMMIT: (kafka_groups.offset_commit_request, lambda r: r.partitions[0].topic),
    kafka.OFFSET_FETCH: (kafka_groups.offset_fetch_requests, lambda r: r[0].partitions[0].topic),
    kafka.LIST_GROUPS: (kafka_groups.list_groups_request, lambda r: (r.states_filter or ("t",))[0]),
    kafka.DESCRIBE_GROUPS: (kafka_groups.describe_groups_request, lambda r: r.groups[0]),
    kafka.DELETE_GROUPS: (kafka_groups.delete_groups_request, lambda r: r.groups_names[0]),
    kafka.ALTER_PARTITION_REASSIGNMENTS: (
        kafka_groups.alter_partition_reassignments_request,
        lambda r: r.partitions[0].topic,
    ),
    kafka.LIST_PARTITION_REASSIGNMENTS: (
        kafka_groups.list_partition_reassignments_request,
        lambda r: r.partitions[0].topic,
    ),
}


@pytest.mark.parametrize(
    ("api_key", "version"), [(k, v) for k, (lo, hi) in sorted(kafka.SERVED.items()) for v in range(lo, hi + 1)]
)
def test_every_served_version_of_every_request_parses_and_translates(api_key: int, version: int) -> None:
    schema = kafka.load_request_schema(api_key, version)
    body = _sample(schema)
    header = (
        v2(api_key, version)
        if schema.__flexible__
        else HeaderV1(request_api_key=api_key, request_api_version=version, correlation_id=9, client_id="t")
    )
    request = kafka.parse_request(frame(header, body))
    assert (request.api_key, request.api_version, request.correlation_id, request.body) == (api_key, version, 9, body)
    if api_key in TRANSLATIONS:
        translate, topic_of = TRANSLATIONS[api_key]
        assert topic_of(translate(request.body)) == "t"  # the topic named reached the internal request
    if api_key in broker_kafka_groups.SERVED_APIS:  # an error answer at this version encodes
        kafka.encode_response(request, broker_kafka_groups.refused(request, ErrorCode.INVALID_REQUEST, "m"))
    elif api_key != kafka.API_VERSIONS:
        kafka.encode_response(request, kafka.error_response(request, ErrorCode.INVALID_REQUEST, "m"))
