"""The assignors' Java emulation iterates exactly as a java.util.HashMap does.

Method: each expected order below was printed by OpenJDK 17 (a HashMap/HashSet filled in the given order, then
iterated); the emulation must reproduce it. The cases cover a bucket shared by equal hashes ("Aa"/"BB"), a
resize past 12 entries, the resize a 9th colliding entry forces on a table smaller than 64, a table that
keeps its capacity after removals, and Kafka's TopicPartition.hashCode. Then the String.hashCode and
String.compareTo vectors the emulation rests on.
"""

from __future__ import annotations

import pytest

from hightide.core.assignors._java import (
    JavaHashMap,
    java_string_hash,
    java_string_hash_map,
    java_string_key,
    topic_partition_hash,
)

RESIZE_KEYS = [f"consumer-{chr(ord('a') + (i * 7) % 26)}{i}" for i in range(13)]
COLLIDING = ["".join(("Aa", "BB")[(i >> b) & 1] for b in (3, 2, 1, 0)) for i in range(16)]  # all hash alike


@pytest.mark.parametrize(
    ("keys", "java_order"),
    [
        (["topic2", "topic1"], "topic1,topic2"),
        (["BB", "x", "Aa", "consumer1"], "BB,Aa,x,consumer1"),
        (
            RESIZE_KEYS,
            "consumer-v3,consumer-x7,consumer-q6,consumer-z11,consumer-o2,consumer-l9,consumer-a0,consumer-s10,"
            "consumer-h1,consumer-j5,consumer-c4,consumer-g12,consumer-e8",
        ),
        (
            [*COLLIDING[:10], "t0", "t1", "zz"],
            "zz,AaAaAaAa,AaAaAaBB,AaAaBBAa,AaAaBBBB,AaBBAaAa,AaBBAaBB,AaBBBBAa,AaBBBBBB,BBAaAaAa,BBAaAaBB,t0,t1",
        ),
    ],
    ids=["two-topics", "shared-bucket", "resize-at-13", "collisions-force-resize-to-64"],
)
def test_string_keys_iterate_in_javas_order(keys: list[str], java_order: str) -> None:
    assert java_string_hash_map(keys).keys() == java_order.split(",")


def test_a_table_keeps_its_capacity_after_removals() -> None:
    """Filled to 13 (capacity 32), emptied to 2, refilled: Java still iterates by 32 buckets."""
    hashed = java_string_hash_map(RESIZE_KEYS)
    for key in RESIZE_KEYS[2:]:
        hashed.remove(key)
    hashed.put("topic1", None)
    hashed.put("topic2", None)
    assert hashed.keys() == ["topic1", "topic2", "consumer-a0", "consumer-h1"]


def test_topic_partitions_iterate_as_a_java_hash_set_of_topic_partition() -> None:
    tps: JavaHashMap[tuple[str, int], None] = JavaHashMap(topic_partition_hash)
    for topic in ("topic", "t1", "orders"):
        for p in range(7):
            tps.put((topic, p), None)
    java = (
        "topic:0,topic:2,t1:6,topic:1,t1:5,orders:0,topic:4,t1:4,orders:1,topic:3,t1:3,orders:2,topic:6,t1:2,"
        "orders:3,topic:5,t1:1,orders:4,t1:0,orders:5,orders:6"
    )
    assert [f"{t}:{p}" for t, p in tps] == java.split(",")
    assert tps.first() == ("topic", 0)


@pytest.mark.parametrize(
    ("text", "java_hash"),
    [("", 0), ("a", 97), ("Aa", 2112), ("BB", 2112), ("hello", 99162322), ("topic1", -868034334), ("é😀", 1996812)],
)
def test_string_hash_code_is_javas(text: str, java_hash: int) -> None:
    assert java_string_hash(text) == java_hash


def test_string_order_is_javas_utf16_order_not_python_code_points() -> None:
    """U+FF5E sorts after U+1F600 in Python but before it in Java, whose surrogates (U+D83D...) are smaller."""
    assert sorted(["\U0001f600", "\uff5e"]) == ["\uff5e", "\U0001f600"]
    assert sorted(["\U0001f600", "\uff5e"], key=java_string_key) == ["\U0001f600", "\uff5e"]
