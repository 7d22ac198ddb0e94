"""The storage boundary's one exception type, and its named cases.

Room: libs/storage. Callers catch `StorageError` and answer with its `error_code` (Kafka's names): a read out of
range is OFFSET_OUT_OF_RANGE, a batch that fails validation is CORRUPT_MESSAGE or RECORD_TOO_LARGE, a file on disk
that cannot be trusted or a disk that refuses a write is KAFKA_STORAGE_ERROR. Every one of them leaves the log's
offsets as they were, except a `DiskError` with `offline` set: then the log could not be put back and refuses
everything from then on (Kafka's log-directory failure), and recovery at the next start repairs the files.
"""

from __future__ import annotations

from hightide.protocol.errors import ErrorCode, HightideError


class StorageError(HightideError):
    """An expected failure of the partition log; `error_code` says which."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class InvalidConfig(StorageError):
    """A configuration name or value that Kafka would reject."""

    error_code = ErrorCode.INVALID_CONFIG


class CorruptCheckpoint(StorageError):
    """A checkpoint file that does not parse as Kafka's format."""


class CorruptIndex(StorageError):
    """An index file that cannot be trusted; the segment's indexes must be rebuilt."""


class OffsetOutOfRange(StorageError):
    """An offset below the log start offset or above the log end offset."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class DiskError(StorageError):
    """The disk refused a write, fsync or truncation (full or failing: ENOSPC, EIO, a short write).

    `offline` is False when the operation was undone and the log is exactly as before the call (a failed append
    whose segment was cut back); True when it could not be (a failed fsync, or a failure while cutting back): the
    log is then offline and refuses every later operation, as Kafka takes a failed log directory offline."""

    def __init__(self, message: str, *, offline: bool) -> None:
        super().__init__(message, ErrorCode.KAFKA_STORAGE_ERROR)
        self.offline = offline


class LogOffline(StorageError):
    """An operation on a log that an earlier disk failure took offline."""
