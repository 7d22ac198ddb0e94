"""Which partition a keyed record goes to: Kafka's default partitioner, bit for bit.

Room: libs/core (rules as pure functions). Owns the key-to-partition mapping, which must equal Kafka's
(`Utils.murmur2`, `Utils.toPositive`, `BuiltInPartitioner.partitionForKey`) so that a key lands in the same
partition whichever client wrote it. Never reads a clock or draws randomness: records without a key are
spread by the producer, not here.
"""

from __future__ import annotations

import struct
from typing import Final

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK_32: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: the 32-bit MurmurHash2 of data, as a signed int like Java's.

    Python ints do not wrap, so every multiplication is masked back to 32 bits; Java's `>>>` is a plain
    `>>` on the masked, non-negative value.
    """
    length = len(data)
    m = _M
    h = (_SEED ^ length) & _MASK_32
    whole = length & ~3
    for word in struct.unpack_from(f"<{whole >> 2}I", data):  # 4-byte little-endian words
        k = (word * m) & _MASK_32
        k ^= k >> _R
        k = (k * m) & _MASK_32
        h = ((h * m) & _MASK_32) ^ k
    tail = length & 3
    # Java's switch falls through: case 3 also does 2 and 1.
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & _MASK_32
    h ^= h >> 13
    h = (h * m) & _MASK_32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs, which would fail for Integer.MIN_VALUE)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with this (serialized) key."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
