"""What a replica checks of record batches before they may be appended: a producer's (Kafka's
`UnifiedLog.analyzeAndValidateRecords` then `LogValidator`) and a leader's, fetched by a follower.

Room: libs/core (rules as pure functions over bytes). Each batch's CRC is computed once; the headers returned are
the summary the replica core and the storage engine use afterwards, so nothing parses the same bytes again.
A refusal is `InvalidRecordBatch` carrying Kafka's error code.

| check                                               | producer's batches           | fetched from a leader |
| --------------------------------------------------- | ---------------------------- | --------------------- |
| at least one batch, whole, magic 2, CRC-32C         | CORRUPT_MESSAGE              | CORRUPT_MESSAGE       |
| each batch <= max.message.bytes                     | RECORD_TOO_LARGE             | no (ignoreRecordSize) |
| all batches <= segment.bytes                        | RECORD_LIST_TOO_LARGE        | no: storage rolls     |
| records > 0 and lastOffsetDelta + 1 == records      | INVALID_RECORD               | no                    |
| no control batch                                    | INVALID_RECORD               | no                    |
| records decode, offset deltas 0..n-1                | INVALID_RECORD (or CORRUPT)  | no                    |
| batches in increasing offsets (gaps allowed)        | (offsets assigned)           | CORRUPT_MESSAGE       |
| every record has a key, on a compacted topic        | INVALID_RECORD               | no                    |

A compacted leader's batches have gaps between them where the cleaner removed whole batches (Kafka's follower
append checks only that offsets increase); an overlap is refused.

Kafka's follower skips the size limit (`appendAsFollower` passes `ignoreRecordSize = true`): the leader already
accepted the batch under the topic's limits, which may have changed since.
"""

from __future__ import annotations

from itertools import pairwise

from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import (
    BatchHeader,
    InvalidRecordBatch,
    check_batch_records,
    decode_batch,
    validate_batches,
)


def validate_produce(
    records: bytes, *, max_message_bytes: int, segment_bytes: int, compacted: bool = False
) -> list[BatchHeader]:
    """A producer's batches for one partition, checked as a leader checks them before assigning offsets;
    `compacted` (cleanup.policy holds compact) refuses a record without a key, as Kafka's LogValidator does."""
    if not records:
        raise InvalidRecordBatch("no record batches to append", ErrorCode.INVALID_RECORD)
    headers = validate_batches(records, max_batch_bytes=max_message_bytes)
    if len(records) > segment_bytes:
        raise InvalidRecordBatch(
            f"{len(records)} bytes exceed segment.bytes {segment_bytes}", ErrorCode.RECORD_LIST_TOO_LARGE
        )
    for header in headers:
        if header.record_count <= 0 or header.last_offset_delta + 1 != header.record_count:
            raise InvalidRecordBatch(
                f"batch has {header.record_count} records but offset delta {header.last_offset_delta}",
                ErrorCode.INVALID_RECORD,
            )
        if header.is_control:
            raise InvalidRecordBatch("clients may not write control batches", ErrorCode.INVALID_RECORD)
    # Then every record is decoded, as Kafka's LogValidator reads each one: a batch whose CRC matches but whose
    # records do not parse would otherwise be stored, and every consumer would stop at it.
    position = 0
    for header in headers:
        check_batch_records(records, position, header)
        if compacted:
            _check_keys(records, position, header)
        position += header.size
    return headers


def _check_keys(records: bytes, position: int, header: BatchHeader) -> None:
    """Kafka's `validateKey`: a compacted topic keeps each key's latest record, so a record without one is refused.
    It decodes the batch a second time, on compacted topics only (their writers are coordinators, not the hot path)."""
    for record in decode_batch(records, position)[1]:
        if record.key is None:
            raise InvalidRecordBatch(
                "Compacted topic cannot accept message without key "
                f"(offset delta {record.offset - header.base_offset})",
                ErrorCode.INVALID_RECORD,
            )


def validate_replicated(records: bytes) -> list[BatchHeader]:
    """A leader's batches as a follower fetched them: whole, intact (one CRC each), in increasing offsets."""
    headers = validate_batches(records)
    for previous, header in pairwise(headers):
        if header.base_offset < previous.next_offset:
            raise InvalidRecordBatch(
                f"batch at offset {header.base_offset} overlaps the one ending at {previous.last_offset}",
                ErrorCode.CORRUPT_MESSAGE,
            )
    return headers


__all__ = ["validate_produce", "validate_replicated"]
