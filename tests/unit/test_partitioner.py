"""A keyed record lands in the partition Kafka's default partitioner would pick.

Method: the vectors of Kafka's UtilsTest.testMurmur2 (plus the empty and one-byte keys, which exercise the
hash's tail alone), then partitions computed by hand from them; if these agree with Java, a key written by a
Kafka client and by Hightide lands in the same partition.
"""

from __future__ import annotations

import pytest

from hightide.core.partitioner import murmur2, partition_for_key, to_positive


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
        (b"", 275646681),
        (b"a", -1563381124),
    ],
)
def test_murmur2_matches_kafkas_utils_murmur2(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_is_a_signed_32_bit_int_like_javas() -> None:
    hashes = [murmur2(bytes(range(n))) for n in range(64)]
    assert all(-(2**31) <= h < 2**31 for h in hashes)
    assert any(h < 0 for h in hashes) and any(h >= 0 for h in hashes)


def test_to_positive_clears_the_sign_bit_rather_than_negating() -> None:
    assert to_positive(5) == 5
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # where abs() would overflow in Java
    assert to_positive(-973932308) == 1173551340


@pytest.mark.parametrize(
    ("key", "num_partitions", "expected"),
    [(b"21", 3, 0), (b"foobar", 10, 6), (b"a-little-bit-longer-string", 6, 5), (b"anything", 1, 0)],
)
def test_partition_for_key_is_the_positive_hash_modulo_the_partition_count(
    key: bytes, num_partitions: int, expected: int
) -> None:
    assert partition_for_key(key, num_partitions) == expected


def test_a_topic_without_partitions_has_no_partition_for_a_key() -> None:
    with pytest.raises(ValueError, match="num_partitions must be at least 1, not 0"):
        partition_for_key(b"k", 0)
