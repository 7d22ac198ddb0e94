"""Building record batches and opening logs for the storage tests."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from hightide.core.clock import WallMs
from hightide.protocol.records import decode_batches, encode_batch
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.log import PartitionLog

TP = TopicPartition("orders", 3)
EPOCH_START: Final = WallMs(0)  # the wall-clock time the storage tests start at, unless they say otherwise


def batch(count: int = 1, *, value_size: int = 10, timestamp: int = 1_000, tag: int = 0) -> bytes:
    """A producer's batch of `count` records whose values name the batch (`tag`) and the record."""
    values = [f"{tag}:{i}:".encode().ljust(value_size, b"x") for i in range(count)]
    return encode_batch(values, timestamps=timestamp)


def batch_of_size(size: int, count: int, timestamp: int = 1_000) -> bytes:
    """A batch of `count` records that is exactly `size` bytes long (the first record's value takes up the
    slack; the others' length moves it past varint-width jumps)."""
    for others in range(1, 4):
        for first in range(size):
            data = encode_batch([b"x" * first] + [b"y" * others] * (count - 1), timestamps=timestamp)
            if len(data) == size:
                return data
            if len(data) > size:
                break
    raise ValueError(f"no batch of {count} records is exactly {size} bytes")


def open_log(directory: Path, now: WallMs = EPOCH_START, **config: int) -> PartitionLog:
    return PartitionLog.open(directory / str(TP), TP, LogConfig(**config), now, clean_shutdown=True)


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in raw batches."""
    return [(record.offset, record.value) for _, records in decode_batches(data) for record in records]
