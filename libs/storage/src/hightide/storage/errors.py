"""The storage boundary's one exception type, and its named cases.

Room: libs/storage. Callers catch `StorageError` and answer with its `error_code` (Kafka's names): a read out of
range is OFFSET_OUT_OF_RANGE, a batch that fails validation is CORRUPT_MESSAGE or RECORD_TOO_LARGE, a file on disk
that cannot be trusted is KAFKA_STORAGE_ERROR. Every one of them leaves the log as it was.
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
