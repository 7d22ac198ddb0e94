"""The `__consumer_offsets` record formats, the consumer protocol's metadata, and which partition holds a group.

Method: byte layouts written out by hand from Kafka's message definitions (OffsetCommitKey/Value,
GroupMetadataKey/Value, ConsumerProtocolSubscription/Assignment) and compared with what the codec makes; round trips;
bad bytes give the codec's one error; Java's String.hashCode on strings whose hash Java users know.
"""

from __future__ import annotations

import struct

import pytest

from hightide.core.group_coordinator import group_partition, java_string_hash_code
from hightide.protocol import group_records as gr


def kstring(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_key_is_version_1_group_topic_partition() -> None:
    key = gr.OffsetCommitKey("g", "orders", 7)
    expected = struct.pack(">h", 1) + kstring("g") + kstring("orders") + struct.pack(">i", 7)
    assert gr.encode_key(key) == expected
    assert gr.decode_key(expected) == key


def test_group_metadata_key_is_version_2_group() -> None:
    expected = struct.pack(">h", 2) + kstring("payments")
    assert gr.encode_key(gr.GroupMetadataKey("payments")) == expected
    assert gr.decode_key(expected) == gr.GroupMetadataKey("payments")


def test_offset_commit_value_is_version_3_with_leader_epoch() -> None:
    value = gr.OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1_700_000_000_000)
    expected = struct.pack(">hqi", 3, 42, 5) + kstring("m") + struct.pack(">q", 1_700_000_000_000)
    assert gr.encode_offset_commit_value(value) == expected
    assert gr.decode_offset_commit_value(expected) == value


def test_offset_commit_value_version_1_has_an_expire_timestamp_and_no_leader_epoch() -> None:
    data = struct.pack(">hq", 1, 9) + kstring("") + struct.pack(">qq", 100, 200)
    assert gr.decode_offset_commit_value(data) == gr.OffsetCommitValue(9, gr.NO_LEADER_EPOCH, "", 100)


def test_group_metadata_value_version_3_lays_out_members_as_kafka_does() -> None:
    member = gr.MemberMetadata("m-1", "i-1", "client", "/10.0.0.1", 30_000, 10_000, b"\x01", b"\x02\x03")
    value = gr.GroupMetadataValue("consumer", 4, "range", "m-1", 123, (member,))
    expected = (
        struct.pack(">h", 3)
        + kstring("consumer")
        + struct.pack(">i", 4)
        + kstring("range")
        + kstring("m-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + kstring("m-1")
        + kstring("i-1")
        + kstring("client")
        + kstring("/10.0.0.1")
        + struct.pack(">ii", 30_000, 10_000)  # rebalanceTimeout comes before sessionTimeout
        + struct.pack(">i", 1)
        + b"\x01"
        + struct.pack(">i", 2)
        + b"\x02\x03"
    )
    assert gr.encode_group_metadata_value(value) == expected
    assert gr.decode_group_metadata_value(expected) == value


def test_an_empty_group_has_null_protocol_and_leader() -> None:
    value = gr.GroupMetadataValue("consumer", 2, None, None, -1, ())
    data = gr.encode_group_metadata_value(value)
    assert data == struct.pack(">h", 3) + kstring("consumer") + struct.pack(">ihhqi", 2, -1, -1, -1, 0)
    assert gr.decode_group_metadata_value(data) == value


def test_group_metadata_value_version_0_takes_the_session_timeout_as_rebalance_timeout() -> None:
    data = (
        struct.pack(">h", 0)
        + kstring("consumer")
        + struct.pack(">i", 1)
        + kstring("range")
        + kstring("a")
        + struct.pack(">i", 1)
        + kstring("a")
        + kstring("c")
        + kstring("h")
        + struct.pack(">i", 6000)
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    member = gr.decode_group_metadata_value(data).members[0]
    assert (member.session_timeout, member.rebalance_timeout, member.group_instance_id) == (6000, 6000, None)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        struct.pack(">h", 9) + kstring("g"),
        struct.pack(">h", 2) + kstring("g") + b"x",
        b"\x00\x02\x00\x05ab",
    ],
)
def test_bad_keys_are_corrupt_records(data: bytes) -> None:
    with pytest.raises(gr.InvalidGroupRecord):
        gr.decode_key(data)


def test_a_flexible_value_version_is_refused() -> None:
    with pytest.raises(gr.InvalidGroupRecord, match="version 4"):
        gr.decode_offset_commit_value(struct.pack(">hq", 4, 1))


def test_consumer_subscription_v3_round_trips_with_owned_partitions_generation_and_rack() -> None:
    subscription = gr.ConsumerSubscription(("a", "b"), b"ud", (("a", (0, 2)),), 7, "rack-1")
    data = gr.encode_subscription(subscription)
    assert data[:2] == struct.pack(">h", 3)
    assert gr.decode_subscription(data) == subscription


def test_consumer_subscription_v0_is_topics_and_user_data() -> None:
    data = struct.pack(">hi", 0, 1) + kstring("t") + struct.pack(">i", -1)
    assert gr.encode_subscription(gr.ConsumerSubscription(("t",)), version=0) == data
    assert gr.decode_subscription(data) == gr.ConsumerSubscription(("t",))


def test_consumer_assignment_layout_and_the_empty_assignment() -> None:
    data = struct.pack(">hi", 3, 1) + kstring("t") + struct.pack(">iii", 2, 0, 5) + struct.pack(">i", -1)
    assignment = gr.ConsumerAssignment((("t", (0, 5)),))
    assert gr.encode_assignment(assignment) == data
    assert gr.decode_assignment(data) == assignment
    assert gr.decode_assignment(b"") == gr.ConsumerAssignment(())


def test_an_array_longer_than_its_bytes_is_corrupt() -> None:
    with pytest.raises(gr.InvalidGroupRecord, match="array"):
        gr.decode_assignment(struct.pack(">hi", 3, 1_000_000))


@pytest.mark.parametrize(
    ("text", "hash_code"),
    [
        ("", 0),
        ("abc", 96354),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 code units, as Java counts
    ],
)
def test_java_string_hash_code(text: str, hash_code: int) -> None:
    assert java_string_hash_code(text) == hash_code


def test_group_partition_is_abs_hash_mod_partitions() -> None:
    assert group_partition("abc", 50) == 96354 % 50
    assert group_partition("hello", 7) == 99162322 % 7
    # Utils.abs(Integer.MIN_VALUE) is 0 (Math.abs would stay negative).
    assert group_partition("polygenelubricants", 50) == 0
    negative = "a" * 7  # "aaaaaaa".hashCode() is negative in Java
    assert java_string_hash_code(negative) < 0
    assert group_partition(negative, 50) == abs(java_string_hash_code(negative)) % 50
