"""Kafka's RecordBatch v2 (magic 2): the bytes a producer sends, a log segment holds and a fetch returns.

Room: libs/protocol (vocabulary). This module owns the batch format byte for byte as Kafka writes it
(`DefaultRecordBatch.java`, `DefaultRecord.java`, `ByteUtils.java`), so a Hightide log segment is a Kafka
log segment and a Kafka client's produce payload is appended as is. It encodes, decodes, checks and patches
batches; it says what a well-formed batch is, never whether one may be appended (producer state and
epochs are the core's rules), and never does I/O.

Layout (big-endian; byte offsets from the start of the batch; the CRC-32C covers bytes 21 to the end)::

    0  baseOffset int64              35 maxTimestamp int64
    8  batchLength int32             43 producerId int64
    12 partitionLeaderEpoch int32    51 producerEpoch int16
    16 magic int8 (= 2)              53 baseSequence int32
    17 crc uint32                    57 recordCount int32
    21 attributes int16              61 records: one compressed blob unless compression is none
    23 lastOffsetDelta int32
    27 baseTimestamp int64

Every record is `length varint, attributes int8, timestampDelta varlong, offsetDelta varint, key, value,
headers`, where key and value are a varint length (-1 = null) and the bytes, and varints are zigzag
base-128 like protobuf's.

One exception crosses this boundary: `InvalidRecordBatch`, carrying the Kafka error code a broker answers
with. Wrong arguments to the encoder are programmer errors and raise `ValueError`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, NamedTuple

import cramjam
import crc32c
import lz4.frame
import zstandard

from hightide.protocol.errors import ErrorCode, HightideError

BATCH_HEADER_SIZE: Final = 61  # bytes before the records
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the bytes batchLength does not count
MAGIC_V2: Final = 2
NO_TIMESTAMP: Final = -1

# A compressed batch of a few KiB can inflate to gigabytes (a "zip bomb"); decompression stops here and the
# batch is rejected. Kafka bounds it only by heap; 64 MiB is 64 times Kafka's default max.message.bytes.
DECOMPRESSED_BYTES_MAX: Final = 64 * 1024 * 1024

_CRC_START: Final = 21  # the CRC covers attributes .. end of batch
_MIN_BATCH_LENGTH: Final = BATCH_HEADER_SIZE - LOG_OVERHEAD
_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_LOG_APPEND_TIME: Final = 1

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_HEADER_BEFORE_CRC: Final = struct.Struct(">qiibI")  # baseOffset .. crc
_HEADER_AFTER_CRC: Final = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_BASE_OFFSET: Final = struct.Struct(">q")
_LEADER_EPOCH: Final = struct.Struct(">i")
_LOG_ENTRY: Final = struct.Struct(">qi")  # baseOffset, batchLength
assert _HEADER.size == BATCH_HEADER_SIZE
assert _HEADER_BEFORE_CRC.size == _CRC_START


class Compression(IntEnum):
    """The codec in attribute bits 0-2 (Kafka's `CompressionType` ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_CODECS: Final = tuple(Compression)


class InvalidRecordBatch(HightideError):
    """The one error of the record-batch boundary: bytes that are not a valid v2 batch.

    `error_code` is CORRUPT_MESSAGE for damaged framing, UNSUPPORTED_COMPRESSION_TYPE for a codec this
    module cannot read, INVALID_RECORD for well-formed batches a leader must refuse, RECORD_TOO_LARGE for
    a batch over the caller's size limit.
    """

    error_code = ErrorCode.CORRUPT_MESSAGE


class BatchHeader(NamedTuple):
    """The 61-byte batch header, field for field in layout order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        codec = self.attributes & _COMPRESSION_MASK
        if codec >= len(_CODECS):
            raise InvalidRecordBatch(
                f"batch at offset {self.base_offset}: unknown compression codec {codec}",
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            )
        return _CODECS[codec]

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime (the producer's clock), 1 = LogAppendTime (the broker's)."""
        return (self.attributes & _TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


Buffer = bytes | bytearray | memoryview


# --- varints (Kafka's ByteUtils) -----------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Kafka's `ByteUtils.writeVarint`/`writeVarlong`: zigzag, then base-128 little-endian groups.

    The two write the same bytes for any value in int32 range, so one encoder serves both.
    """
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varint {value} is outside int64")
    raw = (value << 1) ^ (value >> 63)  # zigzag: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ...
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Kafka's `ByteUtils.readVarint`: (value, position after it); at most 5 bytes, value within int32."""
    return _decode_varint_at(buf, pos, 32)


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Kafka's `ByteUtils.readVarlong`: (value, position after it); at most 10 bytes, value within int64."""
    return _decode_varint_at(buf, pos, 64)


def _decode_varint_at(buf: Buffer, pos: int, bits: int) -> tuple[int, int]:
    try:
        return _read_varint(buf, pos, bits)
    except IndexError:
        raise InvalidRecordBatch(f"varint at byte {pos}: truncated") from None
    except _MalformedError as e:
        raise InvalidRecordBatch(str(e)) from None


class _MalformedError(Exception):
    """A record-level defect; re-raised as InvalidRecordBatch with the batch and record it was found in."""


def _read_varint(data: Buffer, pos: int, bits: int) -> tuple[int, int]:
    """(value, position after it). IndexError if data ends first; _MalformedError if too long or too big."""
    raw = 0
    shift = 0
    for p in range(pos, pos + (bits + 6) // 7):  # 5 bytes for an int32, 10 for an int64, like Kafka
        byte = data[p]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> bits:
                raise _MalformedError(f"varint at byte {pos} overflows int{bits}")
            return (raw >> 1) ^ -(raw & 1), p + 1
        shift += 7
    raise _MalformedError(f"varint at byte {pos} is longer than {(bits + 6) // 7} bytes")


# The zigzag varint of every small non-negative int, so the hot loops index instead of calling:
# record lengths, value lengths and offset deltas of ordinary batches are all below this.
_VARINT_TABLE_SIZE: Final = 1 << 14
_VARINT: Final = tuple(encode_varint(n) for n in range(_VARINT_TABLE_SIZE))
_NULL: Final = b"\x01"  # varint -1: a null key, value or header value


def _varint(value: int) -> bytes:
    if 0 <= value < _VARINT_TABLE_SIZE:
        return _VARINT[value]
    return encode_varint(value)


# --- headers, CRC, walking ------------------------------------------------------------------------------


def read_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at pos, without checking the CRC or needing the records to be present."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: truncated header ({max(len(buf) - pos, 0)} of {BATCH_HEADER_SIZE} bytes)"
        )
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise InvalidRecordBatch(f"batch at byte {pos}: magic {header.magic}, only {MAGIC_V2} is supported")
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: batchLength {header.batch_length} is below the minimum {_MIN_BATCH_LENGTH}"
        )
    if header.record_count < 0:
        raise InvalidRecordBatch(f"batch at byte {pos}: negative recordCount {header.record_count}")
    return header


def check_crc(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Check that the whole batch is in buf and its CRC-32C matches the header's."""
    end = pos + header.size
    if end > len(buf):
        raise InvalidRecordBatch(f"batch at byte {pos}: truncated ({len(buf) - pos} of {header.size} bytes present)")
    computed: int = crc32c.crc32c(memoryview(buf)[pos + _CRC_START : end])
    if computed != header.crc:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: CRC mismatch (stored 0x{header.crc:08x}, computed 0x{computed:08x})"
        )


def iter_batch_headers(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in buf; stops before a partial one. No CRC check.

    A partial trailing batch is normal where this is used: a fetch cut at its byte limit, or a segment
    whose last write was torn by a crash. A present but invalid header still raises.
    """
    pos = 0
    end = len(buf)
    while end - pos >= BATCH_HEADER_SIZE:
        header = read_batch_header(buf, pos)
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def validate_batches(buf: Buffer, *, deep: bool = False, max_batch_bytes: int | None = None) -> list[BatchHeader]:
    """Check that buf is exactly a sequence of whole, intact batches and return their headers.

    Every batch: size within max_batch_bytes (checked first, as Kafka's `analyzeAndValidateRecords` does),
    header, CRC. With deep=True also what a leader checks on a client's produce (Kafka's `LogValidator`):
    the records decode, their count is the header's, and their offset deltas are 0..n-1.
    """
    headers: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    while pos < end:
        if max_batch_bytes is not None and end - pos >= LOG_OVERHEAD:
            size = _LOG_ENTRY.unpack_from(buf, pos)[1] + LOG_OVERHEAD
            if size > max_batch_bytes:
                raise InvalidRecordBatch(
                    f"batch at byte {pos}: {size} bytes exceeds the limit of {max_batch_bytes}",
                    ErrorCode.RECORD_TOO_LARGE,
                )
        header = read_batch_header(buf, pos)
        check_crc(buf, pos, header)
        if deep:
            check_batch_records(buf, pos, header)
        headers.append(header)
        pos += header.size
    assert pos == end
    return headers


def check_batch_records(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """The deep check of the batch at pos whose CRC is already checked (Kafka's `LogValidator`): its records
    decode, their count is the header's, and their offset deltas are 0..n-1. No CRC is computed again."""
    if header.compression is Compression.NONE:
        _check_records_in_place(buf, pos, header)
    else:
        _check_offset_deltas(pos, header, _decode_records_at(buf, pos, header))


def _check_records_in_place(buf: Buffer, pos: int, header: BatchHeader) -> None:  # noqa: PLR0915
    """The deep check of an uncompressed batch without building its records: the same checks, in the same
    order and with the same errors, as decoding it and then checking its offset deltas (a leader's per-record
    cost on every produce, so nothing is allocated for a record without headers)."""
    data = bytes(memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size])
    read = _read_varint
    end = len(data)
    p = start = 0
    count = 0
    first_bad_delta: tuple[int, int] | None = None  # (record, its offset delta): reported after the parse
    try:
        while p < end:
            start = p
            byte = data[p]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (byte & 0x7F) | (data[p + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = read(data, p, 32)
            record_end = p + length
            if length < 6 or record_end > end:
                raise _MalformedError(f"length {length} does not fit in the {end - p} bytes left")
            if data[p + 1] < 0x80:  # attributes (ignored), then timestampDelta
                p += 2
            else:
                _, p = read(data, p + 1, 64)
            byte = data[p]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                p += 1
            elif data[p + 1] < 0x80:  # two bytes: the deltas of records 64 to 8,191 of a batch
                raw = (byte & 0x7F) | (data[p + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                offset_delta, p = read(data, p, 32)
            if offset_delta != count and first_bad_delta is None:
                first_bad_delta = (count, offset_delta)
            for _ in (0, 1):  # key, then value: a nullable length and its bytes (a tuple: no range built per record)
                byte = data[p]
                if byte == 1:
                    p += 1
                    continue
                if byte < 0x80:
                    field_length = byte >> 1
                    p += 1
                    if byte & 1:
                        raise _MalformedError(f"negative length {-field_length - 1} at byte {p - 1}")
                elif data[p + 1] < 0x80 and not byte & 1:  # a two-byte non-negative length
                    field_length = ((byte & 0x7F) | (data[p + 1] << 7)) >> 1
                    p += 2
                else:
                    field_length, p = read(data, p, 32)
                    if field_length < 0:
                        raise _MalformedError(f"negative length {field_length} at byte {p}")
                if p + field_length > record_end:
                    raise _MalformedError(f"length {field_length} at byte {p} runs past the record's end")
                p += field_length
            if data[p] == 0:
                p += 1
            else:
                _, p = _read_headers(data, p, record_end)
            if p != record_end:
                raise _MalformedError(
                    f"length prefix says {length} bytes but the fields take {p - record_end + length}"
                )
            count += 1
    except IndexError:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: record {count} at byte {start}: truncated (byte offsets within the records)"
        ) from None
    except _MalformedError as e:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: record {count} at byte {start}: {e} (byte offsets within the records)"
        ) from None
    if count != header.record_count:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: recordCount is {header.record_count} but it holds {count} records"
        )
    if count == 0:
        raise InvalidRecordBatch(f"batch at byte {pos}: no records", ErrorCode.INVALID_RECORD)
    if header.last_offset_delta != count - 1:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: lastOffsetDelta {header.last_offset_delta} but {count} records",
            ErrorCode.INVALID_RECORD,
        )
    if first_bad_delta is not None:
        index, delta = first_bad_delta
        raise InvalidRecordBatch(
            f"batch at byte {pos}: record {index} has offsetDelta {delta}, expected {index}",
            ErrorCode.INVALID_RECORD,
        )


def _check_offset_deltas(pos: int, header: BatchHeader, records: list[Record]) -> None:
    count = len(records)
    if count == 0:
        raise InvalidRecordBatch(f"batch at byte {pos}: no records", ErrorCode.INVALID_RECORD)
    if header.last_offset_delta != count - 1:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: lastOffsetDelta {header.last_offset_delta} but {count} records",
            ErrorCode.INVALID_RECORD,
        )
    for expected, record in enumerate(records):
        if record.offset - header.base_offset != expected:
            raise InvalidRecordBatch(
                f"batch at byte {pos}: record {expected} has offsetDelta "
                f"{record.offset - header.base_offset}, expected {expected}",
                ErrorCode.INVALID_RECORD,
            )


def patch_batch(buf: bytearray, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Overwrite baseOffset and partitionLeaderEpoch in place, as a leader does on append.

    Both fields lie before byte 21, outside the CRC, which is why Kafka put them there: assigning offsets
    and stamping the epoch never recomputes a checksum.
    """
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise ValueError(f"no batch header at byte {pos} of a {len(buf)}-byte buffer")
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + 12, partition_leader_epoch)


# --- encoding -------------------------------------------------------------------------------------------


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | int = NO_TIMESTAMP,
    headers: Sequence[Sequence[Header]] | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
) -> bytes:
    """One v2 batch holding values (with keys, timestamps and headers), as a Kafka producer writes it.

    timestamps is one int for every record (a producer's usual case: deltas of 0) or one per record; the
    base timestamp is the first record's, like Kafka's `MemoryRecordsBuilder`.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a record batch holds at least one record")
    for name, seq in (("keys", keys), ("headers", headers)):
        if seq is not None and len(seq) != count:
            raise ValueError(f"{len(seq)} {name} for {count} values")
    if isinstance(timestamps, int):
        base_timestamp = max_timestamp = timestamps
    else:
        if len(timestamps) != count:
            raise ValueError(f"{len(timestamps)} timestamps for {count} values")
        base_timestamp, max_timestamp = timestamps[0], max(timestamps)
    compression = Compression(compression)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")

    plain = keys is None and headers is None and isinstance(timestamps, int)
    records = _encode_plain_records(values) if plain else None
    if records is None:
        records = _encode_records(values, keys, timestamps, headers, base_timestamp)
    if compression is not Compression.NONE:
        records = _compress(compression, records)

    attributes = compression | (timestamp_type << 3) | (_TRANSACTIONAL_BIT if is_transactional else 0)
    try:
        fields = (attributes, count - 1, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence)
        after_crc = _HEADER_AFTER_CRC.pack(*fields, count) + records
        crc = crc32c.crc32c(after_crc)
        before_crc = _HEADER_BEFORE_CRC.pack(
            base_offset, len(after_crc) + _CRC_START - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, crc
        )
    except struct.error as e:
        raise ValueError(f"a batch header field is out of range: {e}") from None
    return before_crc + after_crc


def _encode_plain_records(values: Sequence[bytes | None]) -> bytes | None:
    """The producer's hot path: no keys, no headers, one timestamp. None if a value needs the general path.

    Each record is one concatenation of table lookups, with no call per record. A null value, a record of
    16 KiB or more, or more than 16 Ki records leave the tables, and the general path takes over.
    """
    if len(values) > _VARINT_TABLE_SIZE:
        return None
    varint = _VARINT
    parts: list[bytes] = []
    append = parts.append
    try:
        for offset_delta, value in enumerate(values):
            if value is None:
                return None
            size = len(value)
            delta = varint[offset_delta]
            value_length = varint[size]
            # attributes 0, timestampDelta 0, offsetDelta, key length -1 (null), value, header count 0
            body_length = 4 + len(delta) + len(value_length) + size
            append(varint[body_length] + b"\x00\x00" + delta + b"\x01" + value_length + value + b"\x00")
    except IndexError:  # a length past the table
        return None
    return b"".join(parts)


def _encode_records(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    timestamps: Sequence[int] | int,
    headers: Sequence[Sequence[Header]] | None,
    base_timestamp: int,
) -> bytes:
    parts = []
    for offset_delta, value in enumerate(values):
        key = None if keys is None else keys[offset_delta]
        timestamp = timestamps if isinstance(timestamps, int) else timestamps[offset_delta]
        body = b"".join(
            (
                b"\x00",  # record attributes: unused in v2
                _varint(timestamp - base_timestamp),
                _varint(offset_delta),
                _NULL if key is None else _varint(len(key)) + key,
                _NULL if value is None else _varint(len(value)) + value,
                _encode_headers(() if headers is None else headers[offset_delta]),
            )
        )
        parts.append(_varint(len(body)) + body)
    return b"".join(parts)


def _encode_headers(headers: Sequence[Header]) -> bytes:
    if not headers:
        return b"\x00"
    parts = [_varint(len(headers))]
    for header in headers:
        key = header.key.encode("utf-8")
        parts.append(_varint(len(key)) + key)
        parts.append(_NULL if header.value is None else _varint(len(header.value)) + header.value)
    return b"".join(parts)


def _compress(compression: Compression, data: bytes) -> bytes:
    if compression is Compression.GZIP:
        # A gzip stream (wbits 31) at zlib's default level, as Java's GZIPOutputStream writes it.
        return zlib.compress(data, -1, 31)
    if compression is Compression.LZ4:
        # KafkaLZ4BlockOutputStream's frame: independent 64 KiB blocks, no checksums, no content size.
        compressed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
        return compressed
    if compression is Compression.SNAPPY:
        return _snappy_xerial(data)
    assert compression is Compression.ZSTD
    # A compressor per call: contexts are not thread-safe, and making one costs about 2 us per batch.
    return zstandard.ZstdCompressor(level=3).compress(data)


# Snappy as Kafka's clients write it. Java's (snappy-java's SnappyOutputStream, which Kafka's SnappyFactory wraps)
# writes the "xerial" framing: this 16-byte header (magic, version 1, compatible version 1), then blocks of at most
# 32 KiB, each a big-endian int32 length and a raw snappy block. librdkafka writes one raw snappy block, and reads
# either (`rd_kafka_snappy_java_uncompress` when the magic is there); snappy-java reads either too.
SNAPPY_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_SNAPPY_XERIAL_HEADER: Final = SNAPPY_XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_SNAPPY_XERIAL_BLOCK: Final = 32 * 1024
_SNAPPY_LENGTH: Final = struct.Struct(">i")


def _snappy_xerial(data: bytes) -> bytes:
    """`data` in the xerial framing, as Kafka's Java producer writes snappy."""
    parts = [_SNAPPY_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _SNAPPY_XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _SNAPPY_XERIAL_BLOCK]))
        parts.append(_SNAPPY_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _decompress_snappy(data: memoryview, limit: int) -> bytes:
    """A snappy records blob, xerial-framed (Java clients) or one raw block (librdkafka). Each raw block states its
    inflated size first; over `limit` in all, nothing is inflated (ValueError)."""
    if len(data) < len(_SNAPPY_XERIAL_HEADER) or bytes(data[: len(SNAPPY_XERIAL_MAGIC)]) != SNAPPY_XERIAL_MAGIC:
        return _snappy_block(data, limit)
    out: list[bytes] = []
    pos, room = len(_SNAPPY_XERIAL_HEADER), limit
    while pos < len(data):
        if pos + _SNAPPY_LENGTH.size > len(data):
            raise ValueError(f"a block's length is cut short at byte {pos} of {len(data)}")
        (size,) = _SNAPPY_LENGTH.unpack_from(data, pos)
        pos += _SNAPPY_LENGTH.size
        if size < 0 or pos + size > len(data):
            raise ValueError(f"a block of {size} bytes at byte {pos} runs past the {len(data)} bytes of the stream")
        block = _snappy_block(data[pos : pos + size], room)
        room -= len(block)
        out.append(block)
        pos += size
    return b"".join(out)


def _snappy_block(block: memoryview, limit: int) -> bytes:
    inflated = cramjam.snappy.decompress_raw_len(block)
    if inflated > limit:
        raise ValueError(f"a block states {inflated} inflated bytes, over the {limit} left of the limit")
    return bytes(cramjam.snappy.decompress_raw(block))


# --- decoding -------------------------------------------------------------------------------------------


def decode_batch(buf: Buffer, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """The header and records of the batch at pos, after checking its CRC."""
    header = read_batch_header(buf, pos)
    check_crc(buf, pos, header)
    return header, _decode_records_at(buf, pos, header)


def decode_batches(buf: Buffer) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch in buf, which they must fill exactly (use iter_batch_headers to skip a partial tail)."""
    batches = []
    pos = 0
    while pos < len(buf):
        header, records = decode_batch(buf, pos)
        batches.append((header, records))
        pos += header.size
    return batches


def _decode_records_at(buf: Buffer, pos: int, header: BatchHeader) -> list[Record]:
    compression = header.compression
    view = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size]
    data = bytes(view) if compression is Compression.NONE else _decompress(pos, compression, view)
    try:
        records = _decode_records(data, header)
    except _MalformedError as e:
        which = "records" if compression is Compression.NONE else f"{compression.name.lower()}-decompressed records"
        raise InvalidRecordBatch(f"batch at byte {pos}: {e} (byte offsets within the {which})") from None
    if len(records) != header.record_count:
        raise InvalidRecordBatch(
            f"batch at byte {pos}: recordCount is {header.record_count} but it holds {len(records)} records"
        )
    return records


def _decode_records(data: bytes, header: BatchHeader) -> list[Record]:  # noqa: PLR0915 (inlined on purpose)
    """Decode a records blob; raises _MalformedError naming the record and byte at fault.

    A tight loop on purpose (it is a consumer's per-record cost): the record length, timestampDelta and
    offsetDelta varints are decoded inline when they are one or two bytes long, as they almost always are,
    and only longer ones call _read_varint.
    """
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    # Like Kafka's DefaultRecordBatch: under LogAppendTime every record carries the broker's maxTimestamp.
    log_append_time = header.max_timestamp if header.timestamp_type == _LOG_APPEND_TIME else None
    read = _read_varint
    read_bytes = _read_nullable_bytes
    records: list[Record] = []
    append = records.append
    end = len(data)
    p = start = 0
    try:
        while p < end:
            start = p
            byte = data[p]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                p += 1
            elif data[p + 1] < 0x80:
                raw = (byte & 0x7F) | (data[p + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = read(data, p, 32)
            record_end = p + length
            if length < 6 or record_end > end:  # 6 = the smallest body: attributes and five 1-byte varints
                raise _MalformedError(f"length {length} does not fit in the {end - p} bytes left")
            # data[p] is the record attributes byte: unused in v2 and ignored, as Kafka does
            byte = data[p + 1]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                p += 2
            else:
                timestamp_delta, p = read(data, p + 1, 64)
            byte = data[p]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                p += 1
            elif data[p + 1] < 0x80:  # two bytes: the deltas of records 64 to 8,191 of a batch
                raw = (byte & 0x7F) | (data[p + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                offset_delta, p = read(data, p, 32)
            key, p = read_bytes(data, p, record_end)
            value, p = read_bytes(data, p, record_end)
            if data[p] == 0:  # no headers: the common case
                headers: tuple[Header, ...] = ()
                p += 1
            else:
                headers, p = _read_headers(data, p, record_end)
            if p != record_end:
                raise _MalformedError(
                    f"length prefix says {length} bytes but the fields take {p - record_end + length}"
                )
            timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    except IndexError:
        raise _MalformedError(f"record {len(records)} at byte {start}: truncated") from None
    except _MalformedError as e:
        raise _MalformedError(f"record {len(records)} at byte {start}: {e}") from None
    return records


def _read_nullable_bytes(data: bytes, p: int, record_end: int) -> tuple[bytes | None, int]:
    byte = data[p]
    if byte == 1:  # varint -1
        return None, p + 1
    if byte < 0x80:
        length = byte >> 1
        p += 1
        if byte & 1:
            raise _MalformedError(f"negative length {-length - 1} at byte {p - 1}")
    else:
        length, p = _read_varint(data, p, 32)
        if length < 0:
            raise _MalformedError(f"negative length {length} at byte {p}")
    if p + length > record_end:
        raise _MalformedError(f"length {length} at byte {p} runs past the record's end")
    return data[p : p + length], p + length


def _read_headers(data: bytes, p: int, record_end: int) -> tuple[tuple[Header, ...], int]:
    count, p = _read_varint(data, p, 32)
    if not 0 <= count <= (record_end - p) // 2:  # each header takes at least two bytes
        raise _MalformedError(f"header count {count} does not fit in the record")
    headers = []
    for _ in range(count):
        key_length, p = _read_varint(data, p, 32)
        if not 0 <= key_length <= record_end - p:
            raise _MalformedError(f"header key length {key_length} at byte {p} does not fit in the record")
        # Invalid UTF-8 becomes U+FFFD, as Java's `new String(bytes, UTF_8)` makes it in Kafka's clients.
        key = data[p : p + key_length].decode("utf-8", "replace")
        value, p = _read_nullable_bytes(data, p + key_length, record_end)
        headers.append(Header(key, value))
    return tuple(headers), p


def _decompress(pos: int, compression: Compression, data: memoryview) -> bytes:
    """Inflate a records blob, at most DECOMPRESSED_BYTES_MAX bytes of it."""
    where = f"batch at byte {pos}: {compression.name.lower()}"
    limit = DECOMPRESSED_BYTES_MAX
    try:
        if compression is Compression.GZIP:
            inflater = zlib.decompressobj(31)
            out = inflater.decompress(data, limit + 1)
            complete, trailing = inflater.eof, len(inflater.unused_data)
        elif compression is Compression.LZ4:
            decoder = lz4.frame.LZ4FrameDecompressor()
            out = decoder.decompress(data, max_length=limit + 1)
            complete, trailing = decoder.eof, len(decoder.unused_data or b"")
        elif compression is Compression.ZSTD:
            out, complete, trailing = _decompress_zstd(data, limit), True, 0
        elif compression is Compression.SNAPPY:
            out, complete, trailing = _decompress_snappy(data, limit), True, 0
        else:
            raise InvalidRecordBatch(f"{where} compression is not supported", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    except (zlib.error, zstandard.ZstdError, cramjam.DecompressionError, RuntimeError, ValueError) as e:
        raise InvalidRecordBatch(f"{where} decompression failed: {e}") from None
    if len(out) > limit:
        raise InvalidRecordBatch(f"{where} records inflate beyond {limit} bytes")
    if not complete:
        raise InvalidRecordBatch(f"{where} stream is truncated")
    if trailing:
        raise InvalidRecordBatch(f"{where} stream is followed by {trailing} stray bytes")
    return out


def _decompress_zstd(data: memoryview, limit: int) -> bytes:
    # Kafka's zstd-jni stream writes no content size, so the bounded decompress (which fails on a truncated
    # frame or one that inflates past the limit) is the common path. A stated size is checked first because
    # the decompressor then trusts it and ignores max_output_size. zstandard's C backend ignores bytes after
    # the first frame; the record decoder still sees every record the frame holds.
    decompressor = zstandard.ZstdDecompressor()
    content_size = zstandard.frame_content_size(data)
    if content_size < 0:
        try:
            return decompressor.decompress(data, max_output_size=limit)
        except zstandard.ZstdError as e:
            raise ValueError(f"{e} (the frame is cut short or inflates beyond {limit} bytes)") from None
    if content_size > limit:
        raise ValueError(f"frame states a content size of {content_size} bytes, over the limit of {limit}")
    return decompressor.decompress(data)


# --- log compaction: a batch rewritten with the records it keeps (hightide.storage.cleaner) ------------------

DELETE_HORIZON_BIT: Final = 0x40
"""Attribute bit 6 (KIP-534): the batch's baseTimestamp is its delete horizon, after which the cleaner may remove
its tombstones. Record timestamps stay baseTimestamp + timestampDelta, so each record keeps its timestamp."""


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534), or None when the cleaner has not stamped one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def rebuild_batch(header: BatchHeader, records: Sequence[Record], *, delete_horizon: int | None) -> bytes:
    """The batch of `header` holding only `records` (some of its own, in order), as Kafka's log cleaner rewrites
    it (`MemoryRecords.filterTo`): base offset, last offset delta, producer id, epoch and base sequence, partition
    leader epoch and flags kept, so offsets never move and a producer's last sequence survives; each record keeps
    its offset and timestamp; the CRC is computed again. With no records, the empty batch Kafka keeps for an
    idempotent producer's last batch (`writeEmptyHeader`: uncompressed, both timestamps the batch's max).
    `delete_horizon` (KIP-534) is stamped as the base timestamp with DELETE_HORIZON_BIT."""
    attributes = header.attributes & ~DELETE_HORIZON_BIT
    if not records:
        base_timestamp = max_timestamp = header.max_timestamp
        body = b""
        attributes &= ~_COMPRESSION_MASK
    else:
        base_timestamp = header.base_timestamp if delete_horizon is None else delete_horizon
        if header.timestamp_type == _LOG_APPEND_TIME:
            max_timestamp = header.max_timestamp
        else:
            max_timestamp = max(record.timestamp for record in records)
        body = _encode_retained(header, records, base_timestamp)
        if header.compression is not Compression.NONE:
            body = _compress(header.compression, body)
    if delete_horizon is not None:
        base_timestamp = delete_horizon
        attributes |= DELETE_HORIZON_BIT
    fields = (
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    after_crc = _HEADER_AFTER_CRC.pack(*fields) + body
    before_crc = _HEADER_BEFORE_CRC.pack(
        header.base_offset,
        len(after_crc) + _CRC_START - LOG_OVERHEAD,
        header.partition_leader_epoch,
        MAGIC_V2,
        crc32c.crc32c(after_crc),
    )
    return before_crc + after_crc


def _encode_retained(header: BatchHeader, records: Sequence[Record], base_timestamp: int) -> bytes:
    parts = []
    for record in records:
        offset_delta = record.offset - header.base_offset
        if not 0 <= offset_delta <= header.last_offset_delta:
            raise ValueError(f"record at offset {record.offset} is outside the batch at {header.base_offset}")
        body = b"".join(
            (
                b"\x00",
                _varint(record.timestamp - base_timestamp),
                _varint(offset_delta),
                _NULL if record.key is None else _varint(len(record.key)) + record.key,
                _NULL if record.value is None else _varint(len(record.value)) + record.value,
                _encode_headers(record.headers),
            )
        )
        parts.append(_varint(len(body)) + body)
    return b"".join(parts)
