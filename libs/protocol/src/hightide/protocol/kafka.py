"""Kafka's own wire protocol, as a broker's Kafka listener speaks it: frames, headers, the versions served, and the
translation between Kafka's messages and Hightide's internal requests (`hightide.protocol.wire`).

Room: libs/protocol (vocabulary; issue 15). No I/O: the broker's listener (services/broker) reads and writes the
bytes. The message schemas and their encoding (flexible versions, tagged fields, compact types) are `kio`'s,
generated from Kafka's own JSON schemas; nothing here encodes a field by hand except the 4-byte frame size and
the first 8 bytes of a request header (its API key and version, read to choose the schema).

What Kafka does and this module keeps:
- A request's header is v2 when its API version is flexible, v1 otherwise; a response's header is v1 when flexible,
  v0 otherwise, except ApiVersions, whose response header is always v0 (so a client can read it whatever version
  it sent).
- ApiVersions at a version the broker does not serve is answered, at v0, with UNSUPPORTED_VERSION and the range of
  ApiVersions it does serve (Kafka's `ApiVersionsRequest.getErrorResponse`).
- Another served API at a version not served is answered UNSUPPORTED_VERSION at that version where its response
  has a top-level error (the lead's decision, issue 15; `unsupported_version_response`).
- Any other API key or version not served, and a body that does not parse, is Kafka's `InvalidRequestException`
  in `RequestContext.parseRequest`: the broker closes that connection without an answer (`UnservedRequest`, whose
  `reason` the broker logs and emits). The broker keeps serving every other connection.
- A frame whose size is negative or over `socket.request.max.bytes` (default 104857600) closes the connection
  (Kafka's `InvalidReceiveException` in `NetworkReceive`).
- A request that parses is answered, whatever topic names and partition indexes it holds. A partition the internal
  requests cannot carry (a topic name outside Kafka's legal characters or length, a negative index) can name no
  partition: it is left out of the internal request and answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers a
  partition it does not have (Metadata: INVALID_TOPIC_EXCEPTION, "." and ".." too, as Kafka's `Topic.validate`
  there). A whole-request error is answered per partition named (`error_response`), built without the internal
  types' bounds.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import io
import struct
import sys
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, Literal

from kio.index import load_request_schema as _kio_request_schema
from kio.index import load_response_schema as _kio_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode

# kio finds a schema by importing its module by name on every call (importlib and pkgutil, about 4 us), two or three
# times per request: each (api key, version) is looked up once.
load_request_schema = functools.cache(_kio_request_schema)
load_response_schema = functools.cache(_kio_response_schema)

SOCKET_REQUEST_MAX_BYTES_DEFAULT: Final = 104_857_600  # Kafka's socket.request.max.bytes
SIZE: Final = struct.Struct(">i")
HEADER_PREFIX: Final = struct.Struct(">hhi")  # api key, api version, correlation id

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
API_VERSIONS: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
INIT_PRODUCER_ID: Final = 22
OFFSET_FOR_LEADER_EPOCH: Final = 23
DESCRIBE_CLUSTER: Final = 60
DESCRIBE_CONFIGS: Final = 32
CREATE_PARTITIONS: Final = 37
ELECT_LEADERS: Final = 43
SASL_HANDSHAKE: Final = 17  # issue 15, security (kafka_sasl)
SASL_AUTHENTICATE: Final = 36

SERVED: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 9),  # v3: record batches (magic 2); v9: flexible, topics by name
    FETCH: (4, 12),  # v9+: current_leader_epoch (KIP-320); v12: flexible, diverging epochs; v13 uses topic ids
    LIST_OFFSETS: (1, 7),
    METADATA: (1, 12),
    API_VERSIONS: (0, 3),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 5),  # v6 names topics by id
    INIT_PRODUCER_ID: (0, 4),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    DESCRIBE_CLUSTER: (0, 1),
    DESCRIBE_CONFIGS: (1, 4),
    CREATE_PARTITIONS: (0, 3),
    ELECT_LEADERS: (0, 2),
    # SASL (issue 15, security): served on every listener, as Kafka advertises them; see kafka_sasl
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
}
"""API key -> (min, max) version this listener serves and ApiVersions advertises (the group, config and
reassignment APIs join it below)."""

UNKNOWN_TOPIC_OR_PARTITION: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)  # Kafka's answer when the request did not ask for them


def _operations(*codes: int) -> int:
    return sum(1 << code for code in codes)


# What a client asking for authorized operations is told (Metadata, DescribeCluster, DescribeGroups): every
# operation Kafka supports on the resource (AclEntry.supportedOperations), as Kafka's AuthHelper answers with no
# authorizer; Hightide's listener has none (docs/OPERATIONS.md: every authenticated user may do everything). As a
# bit field of AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS: Final = _operations(3, 4, 5, 6, 7, 8, 10, 11)
CLUSTER_OPERATIONS: Final = _operations(5, 7, 8, 9, 10, 11, 12)
GROUP_OPERATIONS: Final = _operations(3, 6, 8, 10, 11)


def authorized_operations(asked: bool | None, operations: int) -> int:
    """`operations` when the request asked for them, else Kafka's "not asked" (Int.MinValue)."""
    return operations if asked else AUTHORIZED_OPERATIONS_OMITTED


TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53  # Kafka's error for a transactional id it will not serve
TOPIC_RESOURCE: Final = 2  # DescribeConfigs' resource types
BROKER_RESOURCE: Final = 4
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1  # DescribeConfigs' config sources
CONFIG_SOURCE_STATIC_BROKER: Final = 4
CONFIG_SOURCE_DEFAULT: Final = 5
FETCH_MAX_WAIT_MS_MAX: Final = 60_000  # the internal Fetch's bound on max_wait_ms


class UnservedRequest(Exception):
    """A request that closes its connection without an answer (Kafka's InvalidRequestException): `reason` is
    "unknown_api", "unsupported_version" (one no UNSUPPORTED_VERSION answer can be written for) or "unparsable";
    `api_key` and `api_version` are the header's (-1 when it was too short to read)."""

    def __init__(self, message: str, reason: str = "unparsable", api_key: int = -1, api_version: int = -1) -> None:
        super().__init__(message)
        self.reason, self.api_key, self.api_version = reason, api_key, api_version


class FrameTooLarge(Exception):
    """A frame size over socket.request.max.bytes, or negative: the connection closes."""


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity; None for a version not served (answered UNSUPPORTED_VERSION)


def frame_size(prefix: bytes, max_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT) -> int:
    """The size a frame's 4-byte prefix announces (FrameTooLarge when Kafka would refuse it)."""
    size: int = SIZE.unpack(prefix)[0]
    if size < 0 or size > max_bytes:
        raise FrameTooLarge(f"invalid frame size {size} (socket.request.max.bytes is {max_bytes})")
    return size


def _flexible(api_key: int, version: int, kind: str) -> bool:
    schema = load_request_schema(api_key, version) if kind == "request" else load_response_schema(api_key, version)
    return bool(schema.__flexible__)


def parse_request(frame: bytes) -> Request:
    """A request from one frame (without its size prefix); UnservedRequest for what Kafka closes on."""
    if len(frame) < HEADER_PREFIX.size:
        raise UnservedRequest(f"a request header of {len(frame)} bytes", "unparsable")
    api_key, api_version, correlation_id = HEADER_PREFIX.unpack_from(frame)
    served = SERVED.get(api_key)
    if api_key == API_VERSIONS and served is not None and not served[0] <= api_version <= served[1]:
        return Request(api_key, api_version, correlation_id, None, None)  # answered UNSUPPORTED_VERSION at v0
    if served is None:
        raise UnservedRequest(f"api key {api_key} is not served", "unknown_api", api_key, api_version)
    if not served[0] <= api_version <= served[1]:
        if unsupported_version_schema(api_key, api_version) is None:
            message = f"api key {api_key} version {api_version} is not served (no response carries the error)"
            raise UnservedRequest(message, "unsupported_version", api_key, api_version)
        return Request(api_key, api_version, correlation_id, None, None)  # answered UNSUPPORTED_VERSION
    try:
        flexible = _flexible(api_key, api_version, "request")
        header_type = RequestHeaderV2 if flexible else RequestHeaderV1
        view = memoryview(frame)
        header: Any
        header, offset = entity_reader(header_type)(view, 0)  # kio's readers answer the bytes they read
        schema = load_request_schema(api_key, api_version)
        # Bytes after the body are ignored, as Kafka's parseRequest ignores them (librdkafka's Metadata v12 has 3).
        body, _ = entity_reader(schema)(view[offset:], 0)
    except (
        SerialError,
        ValueError,
        TypeError,
        UnicodeDecodeError,
        OverflowError,
        KeyError,
        IndexError,
        struct.error,
    ) as error:
        # kio raises KeyError for a tagged field it does not know, where Kafka would skip it: closed as unparsable
        raise UnservedRequest(
            f"api key {api_key} version {api_version}: {error}", "unparsable", api_key, api_version
        ) from None
    return Request(api_key, api_version, correlation_id, header.client_id, body)


def encode_response(request: Request, body: Any) -> bytes:
    """One response frame (size prefix included) answering `request` with the kio entity `body`."""
    version = request.api_version if request.body is not None or request.api_key != API_VERSIONS else 0
    flexible = request.api_key != API_VERSIONS and _flexible(request.api_key, version, "response")
    buffer = io.BytesIO()
    buffer.write(bytes(SIZE.size))  # the size, written last in place: a Fetch's records are not copied once more
    if flexible:
        entity_writer(ResponseHeaderV1)(buffer, ResponseHeaderV1(correlation_id=_i32(request.correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(buffer, ResponseHeaderV0(correlation_id=_i32(request.correlation_id)))
    entity_writer(type(body))(buffer, body)
    with buffer.getbuffer() as view:
        SIZE.pack_into(view, 0, len(view) - SIZE.size)
    return buffer.getvalue()


# -- building kio entities ------------------------------------------------------------------------------------------


def _i32(value: int) -> Any:
    return value


def _nested(schema: type[Any], name: str) -> type[Any]:
    found: type[Any] = getattr(sys.modules[schema.__module__], name)
    return found


def topic_uuid(topic_id: str) -> uuid.UUID | None:
    """Hightide's topic id text (URL-safe base64, as Kafka prints it) as Kafka's UUID; None when it has none."""
    if not topic_id:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))
    except ValueError:
        return None


def _convert(kafka_type: str, value: Any) -> Any:
    if kafka_type == "error_code":
        return KioErrorCode(int(value))
    if kafka_type in {"timedelta_i32", "timedelta_i64"} and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type in {"datetime_i64"} and isinstance(value, int):
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    if kafka_type == "uuid" and isinstance(value, str):
        return topic_uuid(value)
    return value


def make(schema: type[Any], **values: Any) -> Any:
    """An entity of `schema` from the values its version has (others are dropped); a required field not given is
    zero-valued (0, (), None) as Kafka's generated messages default them."""
    kwargs: dict[str, Any] = {}
    for name, kafka_type, required, annotation in _fields(schema):
        if name in values:
            kwargs[name] = _convert(kafka_type, values[name])
        elif required:
            kwargs[name] = _zero(kafka_type, annotation)
    return schema(**kwargs)


_Field = tuple[str, str, bool, Any]
_FIELDS: dict[type[Any], tuple[_Field, ...]] = {}


def _fields(schema: type[Any]) -> tuple[_Field, ...]:
    """Each field of `schema`: its name, Kafka type, whether it has no default, and its annotation (read once per
    schema: `dataclasses.fields` and the metadata look-ups were a third of building an answer's entities)."""
    fields = _FIELDS.get(schema)
    if fields is None:
        fields = _FIELDS[schema] = tuple(
            (
                item.name,
                item.metadata.get("kafka_type", ""),
                item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING,
                item.type,
            )
            for item in dataclasses.fields(schema)
        )
    return fields


def _zero(kafka_type: str, annotation: Any) -> Any:
    if kafka_type == "error_code":
        return KioErrorCode.none
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    if kafka_type in {"string", "uuid", "records", "bytes", "datetime_i64"}:
        return None
    if kafka_type in {"bool"}:
        return False
    if kafka_type:
        return 0
    return ()


def response_schema(request: Request) -> type[Any]:
    return load_response_schema(request.api_key, request.api_version)


# -- ApiVersions ----------------------------------------------------------------------------------------------------


def api_versions_response(request: Request) -> Any:
    if request.body is None:
        schema = load_response_schema(API_VERSIONS, 0)
        lo, hi = SERVED[API_VERSIONS]
        keys = (make(_nested(schema, "ApiVersion"), api_key=API_VERSIONS, min_version=lo, max_version=hi),)
        return make(schema, error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys)
    schema = response_schema(request)
    version = _nested(schema, "ApiVersion")
    keys = tuple(make(version, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SERVED.items()))
    return make(schema, error_code=ErrorCode.NONE, api_keys=keys, throttle_time=0)


# -- Kafka requests -> internal requests ----------------------------------------------------------------------------


def carried(topic: str | None, partition: int) -> bool:
    """Whether the internal requests can carry this partition: a name `wire.TopicName` admits and a non-negative
    index. One they cannot is no partition any broker has."""
    return wire.carries_topic_name(topic) and partition >= 0


def _rows(
    row: type[Any], topics: Iterable[Any], name: str, partitions: str, index: str, *, held: bool, **fields: Any
) -> tuple[Any, ...]:
    """Internal answer rows (`topic`, `partition`, `fields`) for the partitions of a Kafka request's `topics` that
    the internal request held (`held`), or that it could not (`carried` is false). Built without validation: they
    only become Kafka entities, and their names and indexes may be ones the internal types refuse."""
    return tuple(
        row.model_construct(topic=getattr(t, name), partition=getattr(p, index), **fields)
        for t in topics
        for p in getattr(t, partitions)
        if carried(getattr(t, name), getattr(p, index)) == held
    )


def produce_request(body: Any) -> wire.ProduceRequest | None:
    """The internal Produce of the partitions it can carry; None when it can carry none."""
    partitions = tuple(
        wire.ProducePartitionData(topic=topic.name, partition=p.index, records=bytes(p.records or b""))
        for topic in body.topic_data
        for p in topic.partition_data
        if carried(topic.name, p.index)
    )
    if not partitions:
        return None
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    return wire.ProduceRequest(acks=int(body.acks), timeout_ms=max(timeout_ms, 0), partitions=partitions)  # type: ignore[arg-type]


def fetch_request(body: Any) -> wire.FetchRequest | None:
    """The internal consumer fetch (None when it names no partition: nothing to wait for)."""
    partitions = tuple(
        wire.FetchPartitionRequest(
            topic=topic.topic,
            partition=p.partition,
            fetch_offset=p.fetch_offset,
            current_leader_epoch=getattr(p, "current_leader_epoch", -1),
            last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),
            log_start_offset=getattr(p, "log_start_offset", -1),
            partition_max_bytes=max(int(p.partition_max_bytes), 0),
        )
        for topic in body.topics
        for p in topic.partitions
        if carried(topic.topic, p.partition)
    )
    if not partitions:
        return None
    max_wait_ms = int(body.max_wait.total_seconds() * 1000)
    return wire.FetchRequest(
        replica_id=-1,
        max_wait_ms=min(max(max_wait_ms, 0), FETCH_MAX_WAIT_MS_MAX),
        min_bytes=max(int(body.min_bytes), 0),
        max_bytes=max(int(getattr(body, "max_bytes", 50 * 1024 * 1024)), 0),
        partitions=partitions,
    )


def list_offsets_request(body: Any) -> wire.ListOffsetsRequest | None:
    """The internal ListOffsets of the partitions it can carry; None when it can carry none."""
    partitions = tuple(
        wire.ListOffsetsPartition(
            topic=topic.name,
            partition=p.partition_index,
            timestamp=p.timestamp,
            current_leader_epoch=getattr(p, "current_leader_epoch", -1),
        )
        for topic in body.topics
        for p in topic.partitions
        if carried(topic.name, p.partition_index)
    )
    return wire.ListOffsetsRequest(partitions=partitions) if partitions else None


def offsets_for_leader_epoch_request(body: Any) -> wire.OffsetsForLeaderEpochRequest | None:
    """The internal OffsetsForLeaderEpoch of the partitions it can carry; None when it can carry none."""
    partitions = tuple(
        wire.EpochQuery(
            topic=topic.topic,
            partition=p.partition,
            current_leader_epoch=getattr(p, "current_leader_epoch", -1),
            leader_epoch=p.leader_epoch,
        )
        for topic in body.topics
        for p in topic.partitions
        if carried(topic.topic, p.partition)
    )
    if not partitions:
        return None
    replica_id = max(int(getattr(body, "replica_id", -1)), -1)
    return wire.OffsetsForLeaderEpochRequest(replica_id=replica_id, partitions=partitions)


def _legal_name(name: str | None) -> bool:
    """Kafka's Topic.validate passes: a name the internal requests carry, other than "." and ".."."""
    return wire.carries_topic_name(name) and name not in (".", "..")


def metadata_request(body: Any) -> wire.MetadataRequest:
    """The internal Metadata of the topics asked by a legal name (`metadata_response` answers the others)."""
    if body.topics is None:
        return wire.MetadataRequest(topics=None)
    return wire.MetadataRequest(topics=tuple(t.name for t in body.topics if _legal_name(t.name)))


def creatable_topic(topic: Any) -> wire.CreatableTopic:
    """One topic of a CreateTopics, internal (raises pydantic's ValidationError where Hightide's bounds refuse it)."""
    assignments = None
    if topic.assignments:
        ordered = sorted(topic.assignments, key=lambda a: a.partition_index)
        assignments = tuple(tuple(int(b) for b in a.broker_ids) for a in ordered)
    return wire.CreatableTopic(
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        assignments=assignments,
        configs={c.name: c.value for c in topic.configs if c.value is not None},
    )


def create_topics_request(body: Any, answered: Collection[str] = ()) -> wire.CreateTopicsRequest | None:
    """The internal CreateTopics of the topics not `answered` already (the listener's refusals); None: no topic."""
    topics = tuple(creatable_topic(topic) for topic in body.topics if topic.name not in answered)
    return wire.CreateTopicsRequest(topics=topics) if topics else None


def delete_topics_request(body: Any, answered: Collection[str] = ()) -> wire.DeleteTopicsRequest | None:
    """The internal DeleteTopics of the names not `answered` already (the listener's refusals); None: no name."""
    names = tuple(dict.fromkeys(name for name in body.topic_names if name not in answered))
    return wire.DeleteTopicsRequest(topics=names) if names else None


# -- internal responses -> Kafka responses --------------------------------------------------------------------------


def _by_topic(items: Iterable[Any]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for item in items:
        grouped.setdefault(item.topic, []).append(item)
    return grouped


def produce_response(request: Request, answer: wire.ProduceResponse) -> Any:
    schema = response_schema(request)
    topic_schema, part_schema = _nested(schema, "TopicProduceResponse"), _nested(schema, "PartitionProduceResponse")
    topics_asked = request.body.topic_data
    parts = answer.partitions
    if answer.error and not parts:  # the whole request failed: every partition asked gets its error
        parts = _rows(
            wire.ProducePartitionResponse, topics_asked, "name", "partition_data", "index", held=True,
            error=answer.error, message=answer.message,
        )  # fmt: skip
    parts += _rows(wire.ProducePartitionResponse, topics_asked, "name", "partition_data", "index", held=False,
                   error=UNKNOWN_TOPIC_OR_PARTITION)  # fmt: skip
    topics = tuple(
        make(
            topic_schema,
            name=name,
            partition_responses=tuple(
                make(
                    part_schema,
                    index=p.partition,
                    error_code=p.error,
                    base_offset=p.base_offset,
                    log_append_time=-1,
                    log_start_offset=p.log_start_offset,
                    record_errors=(),
                    error_message=p.message or None,
                )
                for p in items
            ),
        )
        for name, items in _by_topic(parts).items()
    )
    return make(schema, responses=topics, throttle_time=0)


def fetch_response(request: Request, answer: wire.FetchResponse | None) -> Any:
    schema = response_schema(request)
    topic_schema, part_schema = _nested(schema, "FetchableTopicResponse"), _nested(schema, "PartitionData")
    parts = () if answer is None else answer.partitions
    if answer is not None and answer.error and not parts:
        parts = _rows(wire.FetchPartitionResponse, request.body.topics, "topic", "partitions", "partition", held=True,
                      error=answer.error)  # fmt: skip
    parts += _rows(wire.FetchPartitionResponse, request.body.topics, "topic", "partitions", "partition", held=False,
                   error=UNKNOWN_TOPIC_OR_PARTITION)  # fmt: skip
    topics = []
    for name, items in _by_topic(parts).items():
        partitions = []
        for p in items:
            extra: dict[str, Any] = {}
            if p.diverging_epoch >= 0 and hasattr(sys.modules[schema.__module__], "EpochEndOffset"):  # v12+
                extra["diverging_epoch"] = make(
                    _nested(schema, "EpochEndOffset"), epoch=p.diverging_epoch, end_offset=p.diverging_end_offset
                )
            partitions.append(
                make(
                    part_schema,
                    partition_index=p.partition,
                    error_code=p.error,
                    high_watermark=p.high_watermark,
                    last_stable_offset=p.high_watermark,  # no transactions: the LSO is the high watermark
                    log_start_offset=p.log_start_offset,
                    aborted_transactions=None if p.error else (),
                    preferred_read_replica=-1,
                    records=p.records,
                    **extra,
                )
            )
        topics.append(make(topic_schema, topic=name, partitions=tuple(partitions)))
    return make(schema, throttle_time=0, error_code=ErrorCode.NONE, session_id=0, responses=tuple(topics))


def list_offsets_response(request: Request, answer: wire.ListOffsetsResponse) -> Any:
    schema = response_schema(request)
    topic_schema = _nested(schema, "ListOffsetsTopicResponse")
    part_schema = _nested(schema, "ListOffsetsPartitionResponse")
    parts = answer.partitions
    if answer.error and not parts:
        parts = _rows(wire.ListOffsetsPartitionResponse, request.body.topics, "name", "partitions", "partition_index",
                      held=True, error=answer.error)  # fmt: skip
    parts += _rows(wire.ListOffsetsPartitionResponse, request.body.topics, "name", "partitions", "partition_index",
                   held=False, error=UNKNOWN_TOPIC_OR_PARTITION)  # fmt: skip
    topics = tuple(
        make(
            topic_schema,
            name=name,
            partitions=tuple(
                make(
                    part_schema,
                    partition_index=p.partition,
                    error_code=p.error,
                    timestamp=p.timestamp,
                    offset=p.offset,
                    leader_epoch=p.leader_epoch,
                )
                for p in items
            ),
        )
        for name, items in _by_topic(parts).items()
    )
    return make(schema, throttle_time=0, topics=topics)


def offsets_for_leader_epoch_response(request: Request, answer: wire.OffsetsForLeaderEpochResponse) -> Any:
    schema = response_schema(request)
    topic_schema, part_schema = _nested(schema, "OffsetForLeaderTopicResult"), _nested(schema, "EpochEndOffset")
    parts = answer.partitions
    if answer.error and not parts:
        parts = _rows(wire.EpochEndOffsetResponse, request.body.topics, "topic", "partitions", "partition", held=True,
                      error=answer.error)  # fmt: skip
    parts += _rows(wire.EpochEndOffsetResponse, request.body.topics, "topic", "partitions", "partition", held=False,
                   error=UNKNOWN_TOPIC_OR_PARTITION)  # fmt: skip
    topics = tuple(
        make(
            topic_schema,
            topic=name,
            partitions=tuple(
                make(
                    part_schema,
                    error_code=p.error,
                    partition=p.partition,
                    leader_epoch=p.leader_epoch,
                    end_offset=p.end_offset,
                )
                for p in items
            ),
        )
        for name, items in _by_topic(parts).items()
    )
    return make(schema, throttle_time=0, topics=topics)


def _host_port(listener: str) -> tuple[str, int] | None:
    host, _, port = listener.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host, int(port)


def metadata_response(request: Request, answer: wire.MetadataResponse, cluster_id: str, controller_id: int) -> Any:
    """Kafka's Metadata answer: the unfenced brokers that have a Kafka listener, and the topics asked."""
    schema = response_schema(request)
    broker_schema = _nested(schema, "MetadataResponseBroker")
    topic_schema, part_schema = _nested(schema, "MetadataResponseTopic"), _nested(schema, "MetadataResponsePartition")
    brokers = []
    for b in answer.brokers:
        endpoint = _host_port(b.kafka_listener)
        if endpoint is not None and not b.fenced:
            brokers.append(make(broker_schema, node_id=b.broker_id, host=endpoint[0], port=endpoint[1], rack=None))
    body = request.body
    topic_operations = authorized_operations(
        getattr(body, "include_topic_authorized_operations", False), TOPIC_OPERATIONS
    )
    cluster_asked = getattr(body, "include_cluster_authorized_operations", False)
    topics = tuple(
        make(
            topic_schema,
            error_code=t.error,
            name=t.name,
            topic_id=t.topic_id,
            is_internal=False,
            partitions=tuple(
                make(
                    part_schema,
                    error_code=p.error,
                    partition_index=p.partition,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=tuple(p.replicas),
                    isr_nodes=tuple(p.isr),
                    offline_replicas=tuple(p.offline_replicas),
                )
                for p in t.partitions
            ),
            topic_authorized_operations=topic_operations,
        )
        for t in (*answer.topics, *_illegal_topics(request))
    )
    return make(
        schema,
        throttle_time=0,
        brokers=tuple(brokers),
        cluster_id=cluster_id,
        controller_id=controller_id,
        topics=topics,
        cluster_authorized_operations=authorized_operations(cluster_asked, CLUSTER_OPERATIONS),
    )


def _illegal_topics(request: Request) -> tuple[wire.TopicMetadata, ...]:
    """INVALID_TOPIC_EXCEPTION for each topic a Metadata request asks by a name Kafka's Topic.validate refuses."""
    asked = request.body.topics or ()
    return tuple(
        wire.TopicMetadata.model_construct(name=t.name, error=int(ErrorCode.INVALID_TOPIC_EXCEPTION))
        for t in asked
        if t.name is not None and not _legal_name(t.name)
    )


def init_producer_id_response(request: Request, answer: wire.InitProducerIdResponse) -> Any:
    return make(
        response_schema(request),
        throttle_time=0,
        error_code=answer.error,
        producer_id=answer.producer_id,
        producer_epoch=answer.producer_epoch,
    )


Refusals = Mapping[str, tuple[int, str]]
"""Topics the listener answers itself, by name: (error code, message)."""


def _topic_results(answered: Refusals) -> tuple[wire.TopicResult, ...]:
    """Unvalidated internal results (as `_rows`) of topics answered without the controller, by name."""
    return tuple(
        wire.TopicResult.model_construct(name=name, error=error, message=message)
        for name, (error, message) in answered.items()
    )


def create_topics_response(request: Request, answer: wire.CreateTopicsResponse, refused: Refusals = {}) -> Any:  # noqa: B006 (read only)
    schema = response_schema(request)
    result_schema = _nested(schema, "CreatableTopicResult")
    results = answer.topics
    if answer.error and not results:
        names = dict.fromkeys(t.name for t in request.body.topics)
        results = _topic_results({name: (answer.error, answer.message) for name in names if name not in refused})
    topics = tuple(
        make(
            result_schema,
            name=r.name,
            topic_id=r.topic_id,
            error_code=r.error,
            error_message=r.message or None,
            num_partitions=r.num_partitions,
            replication_factor=r.replication_factor,
            configs=None,
        )
        for r in (*results, *_topic_results(refused))
    )
    return make(schema, throttle_time=0, topics=topics)


def delete_topics_response(request: Request, answer: wire.DeleteTopicsResponse, refused: Refusals = {}) -> Any:  # noqa: B006 (read only)
    schema = response_schema(request)
    result_schema = _nested(schema, "DeletableTopicResult")
    results = answer.topics
    if answer.error and not results:
        names = dict.fromkeys(request.body.topic_names)
        results = _topic_results({name: (answer.error, answer.message) for name in names if name not in refused})
    responses = tuple(
        make(result_schema, name=r.name, error_code=r.error, error_message=r.message or None)
        for r in (*results, *_topic_results(refused))
    )
    return make(schema, throttle_time=0, responses=responses)


def describe_cluster_response(request: Request, answer: wire.DescribeClusterResponse, controller_id: int) -> Any:
    """`controller_id` is a broker's, as KRaft answers clients: admin requests go to a broker, which forwards."""
    schema = response_schema(request)
    broker_schema = _nested(schema, "DescribeClusterBroker")
    brokers = []
    for b in answer.brokers:
        endpoint = _host_port(b.kafka_listener)
        if endpoint is not None and not b.fenced:
            brokers.append(make(broker_schema, broker_id=b.broker_id, host=endpoint[0], port=endpoint[1], rack=None))
    return make(
        schema,
        throttle_time=0,
        error_code=answer.error,
        error_message=answer.message or None,
        endpoint_type=1,
        cluster_id=answer.cluster_id,
        controller_id=controller_id,
        brokers=tuple(brokers),
        cluster_authorized_operations=authorized_operations(
            getattr(request.body, "include_cluster_authorized_operations", False), CLUSTER_OPERATIONS
        ),
    )


def error_response(request: Request, error: ErrorCode, message: str) -> Any:
    """The answer to a request whose translation failed (an internal body Hightide refuses): its top-level error
    where the message has one, else each named partition or topic with it."""
    empty: dict[int, Any] = {
        PRODUCE: lambda: produce_response(request, wire.ProduceResponse(error=int(error), message=message)),
        FETCH: lambda: fetch_response(request, wire.FetchResponse(error=int(error), message=message)),
        LIST_OFFSETS: lambda: list_offsets_response(request, wire.ListOffsetsResponse(error=int(error))),
        OFFSET_FOR_LEADER_EPOCH: lambda: offsets_for_leader_epoch_response(
            request, wire.OffsetsForLeaderEpochResponse(error=int(error))
        ),
        METADATA: lambda: make(response_schema(request), throttle_time=0, brokers=(), topics=()),
        CREATE_TOPICS: lambda: create_topics_response(
            request, wire.CreateTopicsResponse(error=int(error), message=message)
        ),
        DELETE_TOPICS: lambda: delete_topics_response(
            request, wire.DeleteTopicsResponse(error=int(error), message=message)
        ),
        INIT_PRODUCER_ID: lambda: init_producer_id_response(request, wire.InitProducerIdResponse(error=int(error))),
        DESCRIBE_CLUSTER: lambda: describe_cluster_response(
            request, wire.DescribeClusterResponse(error=int(error), message=message), -1
        ),
        CREATE_PARTITIONS: lambda: create_partitions_response(
            request, [(t.name, int(error), message) for t in request.body.topics]
        ),
        ELECT_LEADERS: lambda: elect_leaders_response(
            request, wire.ElectLeadersResponse(error=int(error), message=message)
        ),
        DESCRIBE_CONFIGS: lambda: describe_configs_response(
            request,
            [(r.resource_type, r.resource_name, int(error), message, []) for r in request.body.resources],
        ),
        # SASL (issue 15, security)
        SASL_HANDSHAKE: lambda: make(response_schema(request), error_code=error, mechanisms=()),
        SASL_AUTHENTICATE: lambda: make(
            response_schema(request), error_code=error, error_message=message, auth_bytes=b""
        ),
    }
    return empty[request.api_key]()


# -- CreatePartitions, ElectLeaders, DescribeConfigs ----------------------------------------------------------------


def create_partitions_request(topic: Any) -> wire.CreatePartitionsRequest:
    """The internal request of one topic of a CreatePartitions (Hightide's names one topic; raises pydantic's
    ValidationError where Hightide's bounds refuse it)."""
    assignments = None if topic.assignments is None else tuple(tuple(a.broker_ids) for a in topic.assignments)
    return wire.CreatePartitionsRequest(topic=topic.name, count=topic.count, assignments=assignments)


def create_partitions_response(request: Request, results: list[tuple[str, int, str]]) -> Any:
    schema = response_schema(request)
    result_schema = _nested(schema, "CreatePartitionsTopicResult")
    return make(
        schema,
        throttle_time=0,
        results=tuple(
            make(result_schema, name=name, error_code=error, error_message=message or None)
            for name, error, message in results
        ),
    )


def elect_leaders_request(body: Any) -> wire.ElectLeadersRequest:
    election_type: Literal["preferred", "unclean"] = (
        "unclean" if int(getattr(body, "election_type", 0)) == 1 else "preferred"
    )
    partitions = None
    if body.topic_partitions is not None:  # the partitions it can carry (`elect_leaders_response` answers the rest)
        partitions = tuple(
            wire.TopicPartitionRef(topic=t.topic, partition=p)
            for t in body.topic_partitions
            for p in t.partitions
            if carried(t.topic, p)
        )
    return wire.ElectLeadersRequest(election_type=election_type, partitions=partitions)


def elect_leaders_response(request: Request, answer: wire.ElectLeadersResponse) -> Any:
    schema = response_schema(request)
    topic_schema, part_schema = _nested(schema, "ReplicaElectionResult"), _nested(schema, "PartitionResult")
    results = answer.results
    asked = request.body.topic_partitions or ()
    if answer.error and not results:
        results = _elections(asked, held=True, error=answer.error, message=answer.message)
    results += _elections(asked, held=False, error=UNKNOWN_TOPIC_OR_PARTITION, message="")
    topics = tuple(
        make(
            topic_schema,
            topic=name,
            partition_result=tuple(
                make(part_schema, partition_id=r.partition, error_code=r.error, error_message=r.message or None)
                for r in items
            ),
        )
        for name, items in _by_topic(results).items()
    )
    top = answer.error if not answer.results else 0
    return make(schema, throttle_time=0, error_code=top, replica_election_results=topics)


def _elections(asked: Iterable[Any], *, held: bool, error: int, message: str) -> tuple[wire.ElectionResult, ...]:
    """Unvalidated results (as `_rows`) for the partitions an ElectLeaders names (its partitions are indexes)."""
    return tuple(
        wire.ElectionResult.model_construct(topic=t.topic, partition=p, error=error, message=message)
        for t in asked
        for p in t.partitions
        if carried(t.topic, p) == held
    )


ConfigRow = tuple[str, str | None, int]  # name, value, source
ResourceAnswer = tuple[int, str, int, str, list[ConfigRow]]  # resource type, name, error, message, configs


def describe_configs_response(request: Request, answers: list[ResourceAnswer]) -> Any:
    schema = response_schema(request)
    result_schema = _nested(schema, "DescribeConfigsResult")
    config_schema = _nested(schema, "DescribeConfigsResourceResult")
    return make(
        schema,
        throttle_time=0,
        results=tuple(
            make(
                result_schema,
                error_code=error,
                error_message=message or None,
                resource_type=resource_type,
                resource_name=name,
                configs=tuple(
                    make(
                        config_schema,
                        name=config,
                        value=value,
                        read_only=resource_type == BROKER_RESOURCE,  # no dynamic broker configs
                        is_default=source == CONFIG_SOURCE_DEFAULT,
                        config_source=source,
                        is_sensitive=value is None,  # a password's value is never sent
                        synonyms=(),
                        config_type=0,
                        documentation=None,
                    )
                    for config, value, source in configs
                ),
            )
            for resource_type, name, error, message, configs in answers
        ),
    )


# -- issue 15, groups/configs/reassignments slice: the group APIs, IncrementalAlterConfigs and the reassignment APIs.
# Their translations are `hightide.protocol.kafka_groups`; what each version means is in its docstring.

OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
DELETE_GROUPS: Final = 42
INCREMENTAL_ALTER_CONFIGS: Final = 44
ALTER_PARTITION_REASSIGNMENTS: Final = 45
LIST_PARTITION_REASSIGNMENTS: Final = 46

SERVED.update(
    {
        OFFSET_COMMIT: (2, 8),  # v9+ carries the new consumer protocol's member epoch (KIP-848): not served
        OFFSET_FETCH: (1, 8),  # v8: batched groups; v9+ member epochs (KIP-848)
        FIND_COORDINATOR: (0, 4),  # v4: batched keys
        JOIN_GROUP: (0, 9),  # v4+: a new member first gets MEMBER_ID_REQUIRED (KIP-394)
        HEARTBEAT: (0, 4),
        LEAVE_GROUP: (0, 5),  # v3+: batched members
        SYNC_GROUP: (0, 5),
        DESCRIBE_GROUPS: (0, 5),
        LIST_GROUPS: (0, 5),  # v4: states filter; v5: types filter
        DELETE_GROUPS: (0, 2),
        INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ALTER_PARTITION_REASSIGNMENTS: (0, 0),
        LIST_PARTITION_REASSIGNMENTS: (0, 0),
    }
)


# -- issue 15, the answer to a version not served (the lead's decision): UNSUPPORTED_VERSION where it can be written.


def unsupported_version_schema(api_key: int, api_version: int) -> type[Any] | None:
    """The response schema that answers a version not served of a served API with UNSUPPORTED_VERSION: kio's
    schema for that version when it has a top-level error code; None otherwise (the connection closes)."""
    if api_version < 0:
        return None
    try:
        schema = load_response_schema(api_key, api_version)
    except Exception:  # kio's UnknownEntity: a version no Kafka release has defined
        return None
    names = {item.name for item in dataclasses.fields(schema)}
    return schema if "error_code" in names else None


def unsupported_version_response(request: Request) -> Any:
    """UNSUPPORTED_VERSION at the request's own version (its top-level error), everything else empty."""
    schema = unsupported_version_schema(request.api_key, request.api_version)
    assert schema is not None, request
    strings = {
        item.name: ""
        for item in dataclasses.fields(schema)
        if item.metadata.get("kafka_type") == "string" and "None" not in str(item.type)
    }  # a non-nullable string is "" (make's zero is null)
    return make(schema, **strings, error_code=ErrorCode.UNSUPPORTED_VERSION)
