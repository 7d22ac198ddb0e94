"""The records of `__consumer_offsets` and the consumer protocol's metadata, in Kafka's binary formats.

Room: libs/protocol (vocabulary: codecs, no rules). Owns the byte layout of:

- the keys and values the group coordinator appends to `__consumer_offsets` (Kafka's
  `group-coordinator/src/main/resources/common/message/`): `OffsetCommitKey` (key version 1: group, topic,
  partition), `OffsetCommitValue` (version 3: offset, leader epoch, metadata, commit timestamp),
  `GroupMetadataKey` (key version 2: group) and `GroupMetadataValue` (version 3: protocol type, generation,
  protocol, leader, current state timestamp, members). Each key and value starts with its int16 version, as in
  Kafka. A record with no value (a tombstone) deletes what its key names. Older value versions (0-2) decode too;
  the flexible versions (4+) are refused as Kafka's older brokers refuse them;
- the consumer protocol (`ConsumerProtocolSubscription` v0-3 and `ConsumerProtocolAssignment` v0-3): what a
  consumer puts in its JoinGroup metadata and what the leader's SyncGroup assignment carries for it.

Decoding bad bytes raises `InvalidGroupRecord` (CORRUPT_MESSAGE): one exception for this boundary.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from hightide.protocol.errors import ErrorCode, HightideError

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 3
GROUP_METADATA_VALUE_VERSION: Final = 3
CONSUMER_PROTOCOL_VERSION: Final = 3
NO_LEADER_EPOCH: Final = -1


class InvalidGroupRecord(HightideError):
    """Bytes that are not a record (or consumer protocol metadata) of a version this codec reads."""

    error_code = ErrorCode.CORRUPT_MESSAGE


# -- the records -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


GroupRecordKey = OffsetCommitKey | GroupMetadataKey


def encode_key(key: GroupRecordKey) -> bytes:
    out = _Writer()
    if isinstance(key, OffsetCommitKey):
        out.int16(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic).int32(key.partition)
    else:
        out.int16(GROUP_METADATA_KEY_VERSION).string(key.group)
    return out.done()


def decode_key(data: bytes) -> GroupRecordKey:
    """The key of a `__consumer_offsets` record: offset commit keys are versions 0 and 1, group keys version 2."""
    reader = _Reader(data)
    version = reader.int16()
    if version in (0, 1):
        key: GroupRecordKey = OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(reader.string())
    else:
        raise InvalidGroupRecord(f"unknown __consumer_offsets key version {version}")
    reader.end()
    return key


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    out = _Writer().int16(OFFSET_COMMIT_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
    return out.string(value.metadata).int64(value.commit_timestamp).done()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= OFFSET_COMMIT_VALUE_VERSION:
        raise InvalidGroupRecord(f"OffsetCommitValue version {version} is not one this codec reads (0-3)")
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    commit_timestamp = reader.int64()
    if version == 1:
        reader.int64()  # expireTimestamp: only version 1 has it, and retention is not by it any more
    reader.end()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    out = _Writer().int16(GROUP_METADATA_VALUE_VERSION).string(value.protocol_type).int32(value.generation)
    out.nullable_string(value.protocol).nullable_string(value.leader).int64(value.current_state_timestamp)
    out.int32(len(value.members))
    for member in value.members:
        out.string(member.member_id).nullable_string(member.group_instance_id)
        out.string(member.client_id).string(member.client_host)
        out.int32(member.rebalance_timeout).int32(member.session_timeout)
        out.blob(member.subscription).blob(member.assignment)
    return out.done()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= GROUP_METADATA_VALUE_VERSION:
        raise InvalidGroupRecord(f"GroupMetadataValue version {version} is not one this codec reads (0-3)")
    protocol_type, generation = reader.string(), reader.int32()
    protocol, leader = reader.nullable_string(), reader.nullable_string()
    timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.count()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id, client_host = reader.string(), reader.string()
        rebalance_timeout = reader.int32() if version >= 1 else None
        session_timeout = reader.int32()
        if rebalance_timeout is None:  # version 0 has none: Kafka takes the session timeout for it
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.blob(),
                reader.blob(),
            )
        )
    reader.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


# -- the consumer protocol --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    """`ConsumerProtocolSubscription`: a consumer's topics, what it owns now (cooperative and sticky assignors) and
    the generation it owned them in."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    """`ConsumerProtocolAssignment`: the partitions the leader gave one member, by topic."""

    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None = None


def encode_subscription(subscription: ConsumerSubscription, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    out = _Writer().int16(version).int32(len(subscription.topics))
    for topic in subscription.topics:
        out.string(topic)
    out.nullable_blob(subscription.user_data)
    if version >= 1:
        _write_topic_partitions(out, subscription.owned_partitions)
    if version >= 2:
        out.int32(subscription.generation_id)
    if version >= 3:
        out.nullable_string(subscription.rack_id)
    return out.done()


def decode_subscription(data: bytes) -> ConsumerSubscription:
    """A subscription of any version: fields a newer version added after the ones read are ignored, as Kafka's
    ConsumerProtocol reads a newer consumer's metadata with an older schema."""
    reader = _Reader(data)
    version = reader.int16()
    if version < 0:
        raise InvalidGroupRecord(f"consumer protocol version {version} is negative")
    topics = tuple(reader.string() for _ in range(reader.count()))
    user_data = reader.nullable_blob()
    owned = _read_topic_partitions(reader) if version >= 1 else ()
    generation_id = reader.int32() if version >= 2 else -1
    rack_id = reader.nullable_string() if version >= 3 else None
    return ConsumerSubscription(topics, user_data, owned, generation_id, rack_id)


def encode_assignment(assignment: ConsumerAssignment, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    out = _Writer().int16(version)
    _write_topic_partitions(out, assignment.partitions)
    return out.nullable_blob(assignment.user_data).done()


def decode_assignment(data: bytes) -> ConsumerAssignment:
    """An assignment of any version (their layout is the same); empty bytes are the empty assignment, as Kafka
    gives a member the leader left out."""
    if not data:
        return ConsumerAssignment(())
    reader = _Reader(data)
    if reader.int16() < 0:
        raise InvalidGroupRecord("consumer protocol version is negative")
    partitions = _read_topic_partitions(reader)
    return ConsumerAssignment(partitions, reader.nullable_blob())


def _write_topic_partitions(out: _Writer, topics: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
    out.int32(len(topics))
    for topic, partitions in topics:
        out.string(topic).int32(len(partitions))
        for partition in partitions:
            out.int32(partition)


def _read_topic_partitions(reader: _Reader) -> tuple[tuple[str, tuple[int, ...]], ...]:
    topics = []
    for _ in range(reader.count()):
        topic = reader.string()
        topics.append((topic, tuple(reader.int32() for _ in range(reader.count()))))
    return tuple(topics)


# -- Kafka's non-flexible primitive types ------------------------------------------------------------------------


class _Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, value: int) -> _Writer:
        self._parts.append(struct.pack(">h", value))
        return self

    def int32(self, value: int) -> _Writer:
        self._parts.append(struct.pack(">i", value))
        return self

    def int64(self, value: int) -> _Writer:
        self._parts.append(struct.pack(">q", value))
        return self

    def string(self, value: str) -> _Writer:
        data = value.encode()
        assert len(data) <= 0x7FFF, "a Kafka STRING is at most 32767 bytes"
        self._parts.append(struct.pack(">h", len(data)) + data)
        return self

    def nullable_string(self, value: str | None) -> _Writer:
        return self.int16(-1) if value is None else self.string(value)

    def blob(self, value: bytes) -> _Writer:
        self._parts.append(struct.pack(">i", len(value)) + value)
        return self

    def nullable_blob(self, value: bytes | None) -> _Writer:
        return self.int32(-1) if value is None else self.blob(value)

    def done(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    __slots__ = ("_data", "_position")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._position = 0

    def _take(self, size: int) -> bytes:
        if size < 0 or self._position + size > len(self._data):
            raise InvalidGroupRecord(f"truncated: {size} bytes wanted at {self._position} of {len(self._data)}")
        chunk = self._data[self._position : self._position + size]
        self._position += size
        return chunk

    def int16(self) -> int:
        value: int = struct.unpack(">h", self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = struct.unpack(">q", self._take(8))[0]
        return value

    def count(self) -> int:
        """An array's length: -1 (null) reads as empty; a count larger than the bytes left is corrupt."""
        count = self.int32()
        if count > len(self._data) - self._position:
            raise InvalidGroupRecord(f"array of {count} items in {len(self._data) - self._position} bytes")
        return max(count, 0)

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise InvalidGroupRecord("null where a string is required")
        return value

    def nullable_string(self) -> str | None:
        size = self.int16()
        if size == -1:
            return None
        try:
            return self._take(size).decode()
        except UnicodeDecodeError:
            raise InvalidGroupRecord("a string that is not UTF-8") from None

    def blob(self) -> bytes:
        value = self.nullable_blob()
        return b"" if value is None else value

    def nullable_blob(self) -> bytes | None:
        size = self.int32()
        return None if size == -1 else self._take(size)

    def end(self) -> None:
        if self._position != len(self._data):
            raise InvalidGroupRecord(f"{len(self._data) - self._position} bytes left over")
