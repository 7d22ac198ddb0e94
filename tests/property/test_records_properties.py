"""Record batches survive any records and refuse any damage.

Method: hypothesis generates records (null and empty keys and values, headers, any int64 timestamp) and
codecs, and checks that decoding gives back what was encoded; then it damages batches (one flipped bit,
random bytes, mutated insides re-checksummed so that they get past the CRC) and checks that the only thing
that ever escapes is InvalidRecordBatch.
"""

from __future__ import annotations

import contextlib
import struct

import crc32c
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hightide.protocol import records as records_module
from hightide.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    Header,
    InvalidRecordBatch,
    Record,
    check_crc,
    decode_batches,
    encode_batch,
    read_batch_header,
    validate_batches,
)

CODECS = st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD])
INT64 = st.integers(-(2**62), 2**62 - 1)  # any two differ by less than 2**63: every timestamp delta fits
NULLABLE_BYTES = st.none() | st.binary(max_size=64)
HEADERS = st.lists(st.builds(Header, st.text(max_size=8), NULLABLE_BYTES), max_size=3)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def record_sets(draw: st.DrawFn) -> dict[str, object]:
    count = draw(st.integers(1, 12))
    return {
        "values": draw(st.lists(NULLABLE_BYTES, min_size=count, max_size=count)),
        "keys": draw(st.none() | st.lists(NULLABLE_BYTES, min_size=count, max_size=count)),
        "timestamps": draw(INT64 | st.lists(INT64, min_size=count, max_size=count)),
        "headers": draw(st.none() | st.lists(HEADERS, min_size=count, max_size=count)),
        "base_offset": draw(st.integers(0, 2**62)),
        "compression": draw(CODECS),
    }


def rechecksummed(data: bytearray) -> bytes:
    """The batch with its CRC recomputed, so that damage inside it reaches the record decoder."""
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


@FAST
@given(record_sets())
def test_any_records_round_trip_through_any_codec(spec: dict[str, object]) -> None:
    data = encode_batch(**spec)  # type: ignore[arg-type]
    ((header, records),) = decode_batches(data)
    values = spec["values"]
    assert isinstance(values, list)
    count = len(values)
    keys = spec["keys"] or [None] * count
    timestamps = spec["timestamps"]
    stamps = timestamps if isinstance(timestamps, list) else [timestamps] * count
    headers = spec["headers"] or [[]] * count
    assert isinstance(keys, list) and isinstance(headers, list)
    base_offset = spec["base_offset"]
    assert isinstance(base_offset, int)
    assert records == [Record(base_offset + i, stamps[i], keys[i], values[i], tuple(headers[i])) for i in range(count)]
    assert (header.record_count, header.last_offset_delta, header.max_timestamp) == (
        count,
        count - 1,
        max(stamps),
    )
    assert header.compression is spec["compression"]
    assert validate_batches(data, deep=True) == [header]


@FAST
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40))
def test_the_table_driven_fast_path_writes_what_the_general_path_writes(values: list[bytes]) -> None:
    assert encode_batch(values, timestamps=12) == encode_batch(values, keys=[None] * len(values), timestamps=12)


@FAST
@given(record_sets(), st.data())
def test_a_flipped_bit_anywhere_under_the_crc_is_detected(spec: dict[str, object], data: st.DataObject) -> None:
    batch = encode_batch(**spec)  # type: ignore[arg-type]
    header = read_batch_header(batch)
    bit = data.draw(st.integers(21 * 8, len(batch) * 8 - 1))
    damaged = bytearray(batch)
    damaged[bit // 8] ^= 1 << (bit % 8)
    # the header as it was: the CRC alone must catch the flip, whatever field it landed in
    try:
        check_crc(damaged, 0, header)
    except InvalidRecordBatch as e:
        assert "CRC mismatch" in str(e)
    else:
        raise AssertionError(f"flipping bit {bit} went unnoticed")


def only_invalid_record_batch(buf: bytes) -> None:
    for call in (
        decode_batches,
        lambda b: validate_batches(b, deep=True),
        lambda b: validate_batches(b, max_batch_bytes=200),
    ):
        with contextlib.suppress(InvalidRecordBatch):
            call(buf)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_invalid_record_batch(garbage: bytes) -> None:
    only_invalid_record_batch(garbage)


@settings(max_examples=500, deadline=None)
@given(
    st.binary(max_size=120),
    st.integers(0, 0xFFFF),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**31), 2**31 - 1),
)
def test_random_records_behind_a_valid_header_and_crc_raise_only_invalid_record_batch(
    records: bytes, attributes: int, last_offset_delta: int, record_count: int
) -> None:
    after_crc = struct.pack(">hiqqqhii", attributes - 0x8000, last_offset_delta, 0, 0, -1, -1, -1, record_count)
    after_crc += records
    batch = struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc
    only_invalid_record_batch(batch)


@FAST
@given(record_sets(), st.data())
def test_valid_batches_mutated_and_rechecksummed_raise_only_invalid_record_batch(
    spec: dict[str, object], data: st.DataObject
) -> None:
    batch = bytearray(encode_batch(**spec))  # type: ignore[arg-type]
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))
        batch[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch)))
    damaged = bytearray(batch[:cut])
    struct.pack_into(">i", damaged, 8, len(damaged) - 12)
    only_invalid_record_batch(rechecksummed(damaged))


def deep_outcome(check: object) -> tuple[str, str] | None:
    try:
        check()  # type: ignore[operator]
    except InvalidRecordBatch as e:
        return e.error_code.name, str(e)
    return None


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    record_sets(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=0, max_size=3),
    st.integers(-2, 2),
    st.integers(-2, 2),
)
def test_the_in_place_check_of_a_producers_batch_agrees_with_decoding_every_record(
    spec: dict[str, object], edits: list[tuple[int, int]], count_change: int, delta_change: int
) -> None:
    """The leader's fast deep check (no Record objects) must accept and refuse exactly what decoding every
    record and checking its offset deltas does, with the same error code and message, whatever the damage."""
    spec = {**spec, "compression": Compression.NONE, "base_offset": 0}
    data = bytearray(encode_batch(**spec))  # type: ignore[arg-type]
    for where, byte in edits:  # damage inside the records, past the header
        data[BATCH_HEADER_SIZE + where % max(len(data) - BATCH_HEADER_SIZE, 1)] = byte
    record_count, last_delta = struct.unpack_from(">i", data, 57)[0], struct.unpack_from(">i", data, 23)[0]
    struct.pack_into(">i", data, 57, record_count + count_change)
    struct.pack_into(">i", data, 23, last_delta + delta_change)
    batch = rechecksummed(data)
    try:
        header = read_batch_header(batch)
    except InvalidRecordBatch:
        assume(False)  # a header refused before any record is looked at (a negative recordCount)
    fast = deep_outcome(lambda: records_module._check_records_in_place(batch, 0, header))
    reference = deep_outcome(
        lambda: records_module._check_offset_deltas(0, header, records_module._decode_records_at(batch, 0, header))
    )
    assert fast == reference
