"""Record batches are Kafka's RecordBatch v2, byte for byte.

Method: the layout is checked against bytes written out field by field in this file (with its own CRC-32C and
its own batch writer, so nothing here merely round-trips the module), against a batch a real Kafka 0.11
broker stored, and against the varint vectors of Kafka's ByteUtilsTest. Then round trips through every codec,
and one test per way a batch can be rejected, each asserting the Kafka error code a broker would answer with.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard

from hightide.protocol import records as records_module
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    Header,
    InvalidRecordBatch,
    Record,
    check_crc,
    decode_batch,
    decode_batches,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_varint,
    iter_batch_headers,
    patch_batch,
    read_batch_header,
    validate_batches,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def crc32c_reference(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) bit by bit: slow, obviously right."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def build_batch(
    records: bytes,
    *,
    record_count: int,
    last_offset_delta: int,
    attributes: int = 0,
    base_offset: int = 0,
    base_timestamp: int = 1_000,
    max_timestamp: int = 1_000,
) -> bytes:
    """A batch around an arbitrary records blob, with a correct CRC: how the tests make well-checksummed
    batches whose insides are wrong."""
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            -1,
            -1,
            -1,
            record_count,
        )
        + records
    )
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), -1, 2, crc32c_reference(after_crc)) + after_crc


def record(offset_delta: int, value: bytes | None, *, key: bytes | None = None, tail: bytes = b"\x00") -> bytes:
    """One record as Kafka lays it out: attributes 0, timestampDelta 0, offsetDelta, key, value, then tail
    (the header count and headers; b"\\x00" is no headers)."""
    key_field = b"\x01" if key is None else encode_varint(len(key)) + key
    value_field = b"\x01" if value is None else encode_varint(len(value)) + value
    body = b"\x00\x00" + encode_varint(offset_delta) + key_field + value_field + tail
    return encode_varint(len(body)) + body


def flip_bit(data: bytes, bit: int) -> bytes:
    damaged = bytearray(data)
    damaged[bit // 8] ^= 1 << (bit % 8)
    return bytes(damaged)


def rejection(call: Callable[[], object]) -> InvalidRecordBatch:
    with pytest.raises(InvalidRecordBatch) as raised:
        call()
    return raised.value


# -- the layout, byte for byte -------------------------------------------------------------------------------


def test_the_reference_crc_is_crc32c() -> None:
    assert crc32c_reference(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_every_header_field_sits_at_its_kafka_offset() -> None:
    data = encode_batch(
        [b"a", b"bb", b"ccc"],
        timestamps=[2_000, 5_000, 3_000],
        base_offset=0x0102030405060708,
        partition_leader_epoch=7,
        producer_id=1234,
        producer_epoch=5,
        base_sequence=42,
        timestamp_type=1,
        is_transactional=True,
    )
    assert data[0:8] == (0x0102030405060708).to_bytes(8, "big")  # baseOffset
    assert data[8:12] == (len(data) - 12).to_bytes(4, "big")  # batchLength: the bytes after it
    assert data[12:16] == (7).to_bytes(4, "big")  # partitionLeaderEpoch
    assert data[16] == 2  # magic
    assert data[17:21] == crc32c_reference(data[21:]).to_bytes(4, "big")  # crc over attributes..end
    assert data[21:23] == b"\x00\x18"  # attributes: LogAppendTime (bit 3) | transactional (bit 4)
    assert data[23:27] == (2).to_bytes(4, "big")  # lastOffsetDelta
    assert data[27:35] == (2_000).to_bytes(8, "big")  # baseTimestamp: the first record's
    assert data[35:43] == (5_000).to_bytes(8, "big")  # maxTimestamp
    assert data[43:51] == (1234).to_bytes(8, "big")  # producerId
    assert data[51:53] == (5).to_bytes(2, "big")  # producerEpoch
    assert data[53:57] == (42).to_bytes(4, "big")  # baseSequence
    assert data[57:61] == (3).to_bytes(4, "big")  # recordCount
    header = read_batch_header(data)
    assert header == BatchHeader(
        0x0102030405060708, len(data) - 12, 7, 2, header.crc, 0x18, 2, 2_000, 5_000, 1234, 5, 42, 3
    )
    assert (header.size, header.last_offset, header.next_offset) == (
        len(data),
        header.base_offset + 2,
        header.base_offset + 3,
    )
    assert (header.timestamp_type, header.is_transactional, header.is_control) == (1, True, False)


def test_a_one_record_batch_is_exactly_the_hand_built_bytes() -> None:
    record_bytes = bytes(
        [
            0x10,  # length 8 (zigzag 16)
            0x00,  # attributes
            0x00,  # timestampDelta 0
            0x00,  # offsetDelta 0
            0x02, ord("k"),  # keyLength 1, key
            0x02, ord("v"),  # valueLength 1, value
            0x00,  # headersCount 0
        ]
    )  # fmt: skip
    after_crc = (
        b"\x00\x00"  # attributes: no compression, CreateTime
        + b"\x00\x00\x00\x00"  # lastOffsetDelta 0
        + (1000).to_bytes(8, "big")  # baseTimestamp
        + (1000).to_bytes(8, "big")  # maxTimestamp
        + b"\xff" * 8  # producerId -1
        + b"\xff\xff"  # producerEpoch -1
        + b"\xff\xff\xff\xff"  # baseSequence -1
        + b"\x00\x00\x00\x01"  # recordCount 1
        + record_bytes
    )
    expected = (
        b"\x00" * 8  # baseOffset 0
        + (70 - 12).to_bytes(4, "big")  # batchLength: 61-byte header + 9-byte record, less 12
        + b"\xff\xff\xff\xff"  # partitionLeaderEpoch -1: the broker stamps it
        + b"\x02"  # magic
        + crc32c_reference(after_crc).to_bytes(4, "big")
        + after_crc
    )
    assert encode_batch([b"v"], keys=[b"k"], timestamps=1000) == expected
    assert decode_batch(expected)[1] == [Record(offset=0, timestamp=1000, key=b"k", value=b"v")]


# Three batches a Kafka 0.11 broker stored, as captured in kafka-python's test suite (test/record/
# test_records.py, `record_batch_data_v2`): value "123"; two empty values; value "123".
KAFKA_BROKER_BATCHES = [
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00;\x00\x00\x00\x01\x02\x03\x18\xa2p\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x01]\xff{\x06<\x00\x00\x01]\xff{\x06<\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\xff\x00\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00@\x00\x00\x00\x02\x02\xc8\\\xbd#\x00\x00\x00\x00\x00\x01"
    b"\x00\x00\x01]\xff|\xddl\x00\x00\x01]\xff|\xde\x14\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\xff\x00\x00\x00\x02\x0c\x00\x00\x00\x01\x00\x00\x0e\x00\xd0\x02\x02\x01\x00\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00;\x00\x00\x00\x02\x02.\x0b\x85\xb7\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x01]\xff|\xe7\x9d\x00\x00\x01]\xff|\xe7\x9d\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\xff\xff\x00\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00",
]


def test_batches_a_kafka_broker_stored_decode_and_validate() -> None:
    data = b"".join(KAFKA_BROKER_BATCHES)
    decoded = decode_batches(data)
    assert [[(r.offset, r.timestamp, r.key, r.value) for r in records] for _, records in decoded] == [
        [(0, 1503229838908, None, b"123")],
        [(1, 1503229959532, None, b""), (2, 1503229959700, None, b"")],
        [(3, 1503229962141, None, b"123")],
    ]
    assert [h.partition_leader_epoch for h in validate_batches(data, deep=True)] == [1, 2, 2]


def test_encoding_the_same_records_reproduces_the_brokers_bytes() -> None:
    assert encode_batch([b"123"], timestamps=1503229838908, partition_leader_epoch=1) == KAFKA_BROKER_BATCHES[0]
    assert (
        encode_batch([b"", b""], timestamps=[1503229959532, 1503229959700], base_offset=1, partition_leader_epoch=2)
        == KAFKA_BROKER_BATCHES[1]
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (64, b"\x80\x01"),
        (-64, b"\x7f"),
        (-65, b"\x81\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varints_are_kafkas_zigzag_bytes(value: int, expected: bytes) -> None:
    # the vectors of Kafka's ByteUtilsTest.testVarintSerde
    assert encode_varint(value) == expected
    assert decode_varint(b"\xaa" + expected + b"\xbb", 1) == (value, 1 + len(expected))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(2**63), b"\xff" * 9 + b"\x01")],
)
def test_varlongs_are_kafkas_zigzag_bytes(value: int, expected: bytes) -> None:
    # the vectors of Kafka's ByteUtilsTest.testVarlongSerde
    assert encode_varint(value) == expected
    assert decode_varlong(expected) == (value, 10)


def test_a_varint_longer_than_kafka_allows_or_cut_short_is_corrupt() -> None:
    assert "longer than 5 bytes" in str(rejection(lambda: decode_varint(b"\x80\x80\x80\x80\x80\x01")))
    assert "overflows int32" in str(rejection(lambda: decode_varint(b"\xff\xff\xff\xff\x1f")))
    assert "longer than 10 bytes" in str(rejection(lambda: decode_varlong(b"\x80" * 10 + b"\x01")))
    assert "truncated" in str(rejection(lambda: decode_varint(b"\x80\x80")))
    with pytest.raises(ValueError, match="outside int64"):
        encode_varint(2**63)


# -- codecs and round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", CODECS)
def test_records_round_trip_through_every_codec(compression: Compression) -> None:
    keys = [b"user-1", None, b"", b"user-2"]
    values = [b"x" * 300, b"", None, bytes(range(256))]
    headers = [
        [Header("trace-id", b"abc"), Header("empty", b""), Header("null", None)],
        [],
        [Header("ünïcode", b"\x00\xff")],
        [],
    ]
    timestamps = [5_000, 4_000, NO_TIMESTAMP, 9_000]
    data = encode_batch(
        values, keys=keys, timestamps=timestamps, headers=headers, base_offset=100, compression=compression
    )
    header, records = decode_batch(data)
    assert header.compression is compression
    assert (header.base_timestamp, header.max_timestamp, header.record_count) == (5_000, 9_000, 4)
    assert records == [
        Record(100 + i, timestamps[i], keys[i], values[i], tuple(headers[i])) for i in range(len(values))
    ]
    assert validate_batches(data, deep=True) == [header]


@pytest.mark.parametrize("compression", CODECS)
def test_the_producer_fast_path_writes_the_same_bytes_as_the_general_path(compression: Compression) -> None:
    # keys=[None]*n takes the general path; no keys takes the table-driven one
    for values in ([b"v" * 100] * 150, [b"a", None, b"b"], [b"big" * 6000], [b"x"] * 20_000):
        plain = encode_batch(values, timestamps=7, compression=compression)
        general = encode_batch(values, keys=[None] * len(values), timestamps=7, compression=compression)
        assert plain == general


def test_compressed_records_are_one_blob_in_each_codecs_standard_framing() -> None:
    values = [b"hello"] * 10
    gzip_blob = encode_batch(values, compression=Compression.GZIP)[BATCH_HEADER_SIZE:]
    lz4_blob = encode_batch(values, compression=Compression.LZ4)[BATCH_HEADER_SIZE:]
    zstd_blob = encode_batch(values, compression=Compression.ZSTD)[BATCH_HEADER_SIZE:]
    plain_blob = encode_batch(values)[BATCH_HEADER_SIZE:]
    assert gzip_blob[:3] == b"\x1f\x8b\x08"  # a gzip member, deflate
    assert zlib.decompress(gzip_blob, 31) == plain_blob
    # LZ4 frame magic, then KafkaLZ4BlockOutputStream's descriptor: FLG 0x60 (version 1, independent
    # blocks, no checksums, no content size), BD 0x40 (64 KiB blocks)
    assert lz4_blob[:6] == b"\x04\x22\x4d\x18\x60\x40"
    assert lz4.frame.decompress(lz4_blob) == plain_blob
    assert zstd_blob[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
    assert zstandard.ZstdDecompressor().decompress(zstd_blob) == plain_blob
    # snappy-java's SnappyOutputStream framing (Kafka's Java producer): magic, version 1, compatible version 1,
    # then each block's int32 length and raw snappy bytes
    snappy_blob = encode_batch(values, compression=Compression.SNAPPY)[BATCH_HEADER_SIZE:]
    assert snappy_blob[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    (block_size,) = struct.unpack_from(">i", snappy_blob, 16)
    assert len(snappy_blob) == 20 + block_size
    assert bytes(cramjam.snappy.decompress_raw(snappy_blob[20:])) == plain_blob


def test_snappy_decodes_as_librdkafka_and_java_write_it() -> None:
    """librdkafka writes one raw snappy block; Java writes xerial framing in blocks of at most 32 KiB. Both are read,
    and the encoder's blocks are 32 KiB, so a larger batch spans several."""
    plain = b"".join(record(i, b"v%05d" % i * 40) for i in range(400))
    raw = bytes(cramjam.snappy.compress_raw(plain))
    data = build_batch(raw, record_count=400, last_offset_delta=399, attributes=Compression.SNAPPY)
    assert [r.value for r in decode_batch(data)[1]][-1] == b"v00399" * 40
    blocks = [bytes(cramjam.snappy.compress_raw(plain[i : i + 32_768])) for i in range(0, len(plain), 32_768)]
    assert len(blocks) > 1
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">i", len(b)) + b for b in blocks)
    data = build_batch(framed, record_count=400, last_offset_delta=399, attributes=Compression.SNAPPY)
    assert len(decode_batch(data)[1]) == 400
    encoded = encode_batch([b"v%05d" % i * 40 for i in range(400)], compression=Compression.SNAPPY)
    assert encoded.count(b"\x82SNAPPY") == 1 and len(decode_batch(encoded)[1]) == 400


def test_a_zstd_frame_without_content_size_decodes_as_kafkas_zstd_jni_writes_it() -> None:
    plain = record(0, b"a") + record(1, b"b")
    blob = zstandard.ZstdCompressor(write_content_size=False).compress(plain)
    data = build_batch(blob, record_count=2, last_offset_delta=1, attributes=Compression.ZSTD)
    assert [r.value for r in decode_batch(data)[1]] == [b"a", b"b"]


def test_under_log_append_time_every_record_carries_the_batch_max_timestamp() -> None:
    data = build_batch(record(0, b"a") + record(1, b"b"), record_count=2, last_offset_delta=1,
                       attributes=0x08, base_timestamp=1_000, max_timestamp=7_777)  # fmt: skip
    assert [r.timestamp for r in decode_batch(data)[1]] == [7_777, 7_777]


def test_decoding_reads_bytes_bytearrays_and_memoryviews_at_any_position() -> None:
    data = b"\xee" * 5 + encode_batch([b"a", b"b"], base_offset=3)
    for buf in (data, bytearray(data), memoryview(data)):
        header, records = decode_batch(buf, 5)
        assert (header.base_offset, [r.value for r in records]) == (3, [b"a", b"b"])


def test_an_invalid_utf8_header_key_decodes_with_replacement_characters_as_kafkas_java_client_does() -> None:
    tail = b"\x02" + encode_varint(2) + b"\xff\xfe" + b"\x01"  # one header, key 0xff 0xfe, null value
    data = build_batch(record(0, b"v", tail=tail), record_count=1, last_offset_delta=0)
    assert decode_batch(data)[1][0].headers == (Header("\ufffd\ufffd", None),)


def test_a_compacted_batch_with_gaps_in_its_offsets_decodes() -> None:
    # Compaction removes records but keeps the batch, so offset deltas may skip; only a producer's batch
    # must be dense (see the deep validation tests)
    data = build_batch(record(0, b"a") + record(2, b"c"), record_count=2, last_offset_delta=2, base_offset=10)
    header, records = decode_batch(data)
    assert [r.offset for r in records] == [10, 12]
    assert header.next_offset == 13


def test_encoding_rejects_programmer_errors_with_value_error() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(ValueError, match="2 keys for 1 values"):
        encode_batch([b"a"], keys=[b"k", b"k"])
    with pytest.raises(ValueError, match="timestamps"):
        encode_batch([b"a"], timestamps=[1, 2])
    with pytest.raises(ValueError, match="out of range"):
        encode_batch([b"a"], partition_leader_epoch=2**31)


# -- walking, checking and patching --------------------------------------------------------------------------


def test_validate_batches_returns_the_header_of_each_concatenated_batch() -> None:
    first, second = encode_batch([b"a"] * 3), encode_batch([b"b"], base_offset=3)
    headers = validate_batches(first + second, deep=True)
    assert [(h.base_offset, h.record_count, h.size) for h in headers] == [
        (0, 3, len(first)),
        (3, 1, len(second)),
    ]
    assert validate_batches(b"") == []


def test_iter_batch_headers_yields_whole_batches_and_stops_before_a_partial_one() -> None:
    first, second = encode_batch([b"a"] * 3), encode_batch([b"b"] * 2, base_offset=3)
    data = first + second
    assert [(pos, h.base_offset) for pos, h in iter_batch_headers(data)] == [(0, 0), (len(first), 3)]
    for cut in (1, BATCH_HEADER_SIZE - 1, BATCH_HEADER_SIZE, len(second) - 1):
        assert [pos for pos, _ in iter_batch_headers(data[: len(data) - cut])] == [0]
    assert list(iter_batch_headers(b"")) == []


def test_patching_base_offset_and_leader_epoch_keeps_the_crc_valid() -> None:
    data = bytearray(b"\x00" * 3 + encode_batch([b"a", b"b"]))
    patch_batch(data, 3, base_offset=1_000_000, partition_leader_epoch=42)
    header = read_batch_header(data, 3)
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset) == (
        1_000_000,
        42,
        1_000_001,
    )
    check_crc(data, 3, header)
    assert [r.offset for r in decode_batch(data, 3)[1]] == [1_000_000, 1_000_001]
    with pytest.raises(ValueError, match="no batch header"):
        patch_batch(bytearray(60), 0, 0, 0)


def test_read_batch_header_does_not_need_the_records() -> None:
    data = encode_batch([b"a" * 1000])
    header = read_batch_header(data[:BATCH_HEADER_SIZE])
    assert (header.magic, header.size) == (MAGIC_V2, len(data))
    assert header.batch_length == len(data) - LOG_OVERHEAD


# -- rejections ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("byte", [21, 22, 23, 30, 57, 60, 61, 62, -2, -1])
def test_a_flipped_bit_anywhere_after_byte_21_fails_the_crc(byte: int) -> None:
    data = encode_batch([b"some value", b"another"], keys=[b"k", None], timestamps=[1, 2])
    damaged = flip_bit(data, (byte % len(data)) * 8 + 5)
    header = read_batch_header(damaged)
    error = rejection(lambda: check_crc(damaged, 0, header))
    assert error.error_code is ErrorCode.CORRUPT_MESSAGE
    assert str(error).startswith("CORRUPT_MESSAGE: batch at byte 0: CRC mismatch (stored 0x")
    assert rejection(lambda: validate_batches(damaged)).error_code is ErrorCode.CORRUPT_MESSAGE
    assert rejection(lambda: decode_batch(damaged)).error_code is ErrorCode.CORRUPT_MESSAGE


def test_errors_name_the_byte_where_the_bad_batch_starts() -> None:
    good = encode_batch([b"a"])
    bad = flip_bit(encode_batch([b"b"]), 62 * 8)
    assert f"batch at byte {len(good)}: CRC mismatch" in str(rejection(lambda: validate_batches(good + bad)))


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (16, b"\x01", "magic 1, only 2 is supported"),
        (8, (48).to_bytes(4, "big"), "batchLength 48 is below the minimum 49"),
        (57, (2**32 - 1).to_bytes(4, "big"), "negative recordCount -1"),
    ],
)
def test_a_header_kafka_could_not_have_written_is_corrupt(offset: int, value: bytes, message: str) -> None:
    data = bytearray(encode_batch([b"a"]))
    data[offset : offset + len(value)] = value
    error = rejection(lambda: read_batch_header(data))
    assert (error.error_code, message in str(error)) == (ErrorCode.CORRUPT_MESSAGE, True)


def test_a_truncated_batch_is_corrupt() -> None:
    data = encode_batch([b"a" * 100])
    assert "truncated header (60 of 61 bytes)" in str(rejection(lambda: read_batch_header(data[:60])))
    short = data[:-1]
    assert "truncated" in str(rejection(lambda: check_crc(short, 0, read_batch_header(short))))
    assert "truncated" in str(rejection(lambda: decode_batch(short)))
    assert "truncated" in str(rejection(lambda: validate_batches(data + data[:70])))
    assert "truncated" in str(rejection(lambda: decode_batches(data + data[:5])))


def test_a_batch_over_the_size_limit_is_record_too_large_before_anything_else() -> None:
    # Kafka's RecordTooLargeException, which travels as MESSAGE_TOO_LARGE (10); the size check comes first
    data = encode_batch([b"a" * 100])
    assert validate_batches(data, max_batch_bytes=len(data))[0].size == len(data)
    error = rejection(lambda: validate_batches(data, max_batch_bytes=len(data) - 1))
    assert error.error_code is ErrorCode.RECORD_TOO_LARGE
    assert str(error).startswith("MESSAGE_TOO_LARGE: batch at byte 0")
    assert f"{len(data)} bytes exceeds the limit of {len(data) - 1}" in str(error)
    damaged = flip_bit(data, 70 * 8)
    assert rejection(lambda: validate_batches(damaged, max_batch_bytes=100)).error_code is ErrorCode.RECORD_TOO_LARGE


def test_unknown_codecs_are_unsupported_compression_types() -> None:
    for codec in (5, 6, 7):
        data = build_batch(b"\x00" * 10, record_count=1, last_offset_delta=0, attributes=codec)
        error = rejection(lambda data=data: decode_batch(data))
        assert error.error_code is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert rejection(lambda data=data: validate_batches(data, deep=True)).error_code is (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        )
    header = read_batch_header(build_batch(b"", record_count=0, last_offset_delta=0, attributes=6))
    assert rejection(lambda: header.compression).error_code is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_a_record_count_that_disagrees_with_the_records_is_corrupt() -> None:
    two_records = record(0, b"a") + record(1, b"b")
    for count in (1, 3):
        data = build_batch(two_records, record_count=count, last_offset_delta=count - 1)
        validate_batches(data)  # the shallow walk checks only header and CRC
        error = rejection(lambda data=data: validate_batches(data, deep=True))
        assert error.error_code is ErrorCode.CORRUPT_MESSAGE
        assert f"recordCount is {count} but it holds 2 records" in str(error)


@pytest.mark.parametrize(
    ("records", "count", "last_offset_delta", "message"),
    [
        (record(0, b"a") + record(2, b"b"), 2, 1, "record 1 has offsetDelta 2, expected 1"),
        (record(1, b"a") + record(2, b"b"), 2, 1, "record 0 has offsetDelta 1, expected 0"),
        (record(0, b"a") + record(2, b"b") + record(5, b"c"), 3, 2, "record 1 has offsetDelta 2, expected 1"),
        (record(0, b"a") + record(1, b"b"), 2, 5, "lastOffsetDelta 5 but 2 records"),
        (b"", 0, -1, "no records"),
    ],
)
def test_a_producers_batch_must_have_dense_offsets_from_zero(
    records: bytes, count: int, last_offset_delta: int, message: str
) -> None:
    # what Kafka's LogValidator refuses from a client as INVALID_RECORD, though such a batch decodes
    data = build_batch(records, record_count=count, last_offset_delta=last_offset_delta)
    decode_batch(data)
    error = rejection(lambda: validate_batches(data, deep=True))
    assert (error.error_code, message in str(error)) == (ErrorCode.INVALID_RECORD, True)


@pytest.mark.parametrize(
    ("delta", "accepted"),
    [(150, True), (151, False), (64, False), (8191, False), (-65, False), (-8192, False), (8192, False), (-1, False)],
)
def test_offset_deltas_past_the_one_byte_varints_are_read_whole(delta: int, accepted: bool) -> None:
    """Records 64 and on of a batch have two-byte offset deltas (zigzag 128-16,383), which the checks read without
    the general varint reader: a batch of 300 records, record 150's delta set to `delta` (two bytes, or one or three
    at the ends), is accepted only with 150, and otherwise refused naming the delta as written."""
    count = 300
    deltas = [*range(150), delta, *range(151, count)]
    data = build_batch(b"".join(record(d, b"v") for d in deltas), record_count=count, last_offset_delta=count - 1)
    header, records = decode_batch(data)
    assert [r.offset for r in records] == deltas  # the decoder reads them too (base offset 0)
    if accepted:
        assert validate_batches(data, deep=True) == [header]
        return
    error = rejection(lambda: validate_batches(data, deep=True))
    assert error.error_code is ErrorCode.INVALID_RECORD
    assert f"record 150 has offsetDelta {delta}, expected 150" in str(error)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (record(0, b"abc")[:-1], "record 0 at byte 0: length 9 does not fit in the 8 bytes left"),
        (b"\x10\x00\x00\x00\x01\x02v\x00\x00", "length prefix says 8 bytes but the fields take 7"),
        (b"\x10\x00\x00\x00\x01\x08v\x00\x00", "length 4 at byte 6 runs past the record's end"),
        (b"\x10\x00\x00\x00\x03\x02v\x00\x00", "negative length -2"),
        (b"\x1e\x00" + b"\xff" * 9 + b"\x7f\x00\x01\x01\x00", "varint at byte 2 overflows int64"),
        (b"\x10\x00\x00\x80\x80\x80\x80\x80\x01\x00", "varint at byte 3 is longer than 5 bytes"),
        (b"\x0c\x00\x00\x00\x01\x01\x08\x00\x00\x00", "header count 4 does not fit in the record"),
        (b"\x12\x00\x00\x00\x01\x01\x02\x03\x00\x00", "header key length -2 at byte 8 does not fit"),
        (b"\x80", "record 0 at byte 0: truncated"),
    ],
)
def test_malformed_records_are_corrupt_and_say_where(records: bytes, message: str) -> None:
    data = build_batch(records, record_count=1, last_offset_delta=0)
    error = rejection(lambda: decode_batch(data))
    assert error.error_code is ErrorCode.CORRUPT_MESSAGE
    assert message in str(error), str(error)


def test_a_broken_compressed_stream_is_corrupt() -> None:
    plain = record(0, b"a" * 200)
    streams = {
        Compression.GZIP: zlib.compress(plain, 6, 31),
        Compression.LZ4: lz4.frame.compress(plain, block_linked=False, store_size=False),
        Compression.ZSTD: zstandard.ZstdCompressor(write_content_size=False).compress(plain),
    }
    for codec, stream in streams.items():
        _assert_broken_is_corrupt(codec, stream)
    gzip_with_tail = build_batch(streams[Compression.GZIP] + b"xx", record_count=1, last_offset_delta=0, attributes=1)
    assert "followed by 2 stray bytes" in str(rejection(lambda: decode_batch(gzip_with_tail)))


def test_a_broken_snappy_stream_is_corrupt() -> None:
    plain = record(0, b"a" * 200)
    raw = bytes(cramjam.snappy.compress_raw(plain))
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(raw)) + raw
    _assert_broken_is_corrupt(Compression.SNAPPY, raw)
    _assert_broken_is_corrupt(Compression.SNAPPY, framed)
    for broken, message in (
        (framed[:18], "length is cut short"),  # the header, then half a block length
        (framed[:16] + struct.pack(">i", 9_999) + raw, "runs past"),
        (framed[:16] + struct.pack(">i", -1) + raw, "runs past"),
    ):
        data = build_batch(broken, record_count=1, last_offset_delta=0, attributes=Compression.SNAPPY)
        error = rejection(lambda data=data: decode_batch(data))
        assert error.error_code is ErrorCode.CORRUPT_MESSAGE and message in str(error), str(error)


def _assert_broken_is_corrupt(codec: Compression, stream: bytes) -> None:
    """A stream cut short, and bytes that are no stream of the codec, are CORRUPT_MESSAGE naming the codec."""
    for broken, message in ((stream[:-4], ""), (b"garbage!" * 4, "decompression failed")):
        data = build_batch(broken, record_count=1, last_offset_delta=0, attributes=codec)
        error = rejection(lambda data=data: decode_batch(data))
        assert error.error_code is ErrorCode.CORRUPT_MESSAGE, (codec, str(error))
        assert f"batch at byte 0: {codec.name.lower()}" in str(error)
        assert message in str(error)


@pytest.mark.parametrize(
    "compress",
    [
        lambda data: (Compression.GZIP, zlib.compress(data, 6, 31)),
        lambda data: (Compression.LZ4, lz4.frame.compress(data, store_size=False)),
        lambda data: (Compression.ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(data)),
        lambda data: (Compression.ZSTD, zstandard.ZstdCompressor().compress(data)),
        lambda data: (Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))),
        lambda data: (Compression.SNAPPY, records_module._snappy_xerial(data)),
    ],
)
def test_records_that_inflate_past_the_limit_are_rejected_without_inflating_them(
    compress: Callable[[bytes], tuple[Compression, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records_module, "DECOMPRESSED_BYTES_MAX", 1_000)
    codec, blob = compress(record(0, b"\x00" * 2_000))
    data = build_batch(blob, record_count=1, last_offset_delta=0, attributes=codec)
    error = rejection(lambda: decode_batch(data))
    assert error.error_code is ErrorCode.CORRUPT_MESSAGE
    assert "1000" in str(error)
