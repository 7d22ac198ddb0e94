"""Java's iteration orders, emulated, so that the assignors' ties break as Kafka's do.

Room: libs/core (rules as pure functions). Owns `String.hashCode`, `TopicPartition.hashCode`, `String.compareTo`
and the order in which a `java.util.HashMap`/`HashSet` hands back its keys. Kafka's assignors iterate HashMaps
in several places where the order decides the result (which member keeps its surplus partitions, which
member wins a doubly claimed partition, which partition a sticky move picks); without these, a Hightide group
and a Kafka group given the same members would settle on different, equally valid, assignments.

How a HashMap orders its keys (OpenJDK 8-21, unchanged since): a key lives in bucket
`spread(hash) & (capacity - 1)` with `spread(h) = h ^ (h >>> 16)`; a bucket is a list kept in insertion order,
and a resize splits each bucket into two lists that keep their relative order, so iteration is "by bucket,
then by insertion" for the capacity the table has reached. Capacity starts at 16 (or `tableSizeFor(n)` for
`new HashMap<>(n)`), doubles whenever the size passes 3/4 of it, and also doubles when one bucket reaches 9
entries while the table is smaller than 64. A table never shrinks. Not emulated: a bucket of 9+ entries in a
table of 64+ becomes a red-black tree whose iteration order differs; with assignor-sized maps that needs nine
colliding hashes among a few dozen keys, and the orders here would then be wrong for that one bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MASK_32 = 0xFFFFFFFF
_DEFAULT_CAPACITY = 16
_MAXIMUM_CAPACITY = 1 << 30
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def _to_int32(value: int) -> int:
    value &= _MASK_32
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a signed int."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK_32
    return _to_int32(h)


def java_string_key(text: str) -> bytes:
    """A sort key that orders strings as Java's `String.compareTo` does (by UTF-16 code unit, not code point)."""
    return text.encode("utf-16-be", "surrogatepass")


def topic_partition_hash(tp: tuple[str, int]) -> int:
    """Kafka's `TopicPartition.hashCode`: 31 * (31 + partition) + topic.hashCode()."""
    topic, partition = tp
    return _to_int32(31 * (31 + partition) + java_string_hash(topic))


def table_size_for(capacity: int) -> int:
    """Java's `HashMap.tableSizeFor`: the smallest power of two >= capacity (1 for 0)."""
    n = 1
    while n < capacity:
        n <<= 1
    return min(n, _MAXIMUM_CAPACITY)


def _spread(h: int) -> int:
    unsigned = h & _MASK_32
    return unsigned ^ (unsigned >> 16)


class JavaHashMap(Generic[K, V]):
    """A dict that iterates in the order a `java.util.HashMap` with the same history would.

    `hash_of` is the key's Java `hashCode`. `initial_capacity` is the argument of `new HashMap<>(n)` (None for
    `new HashMap<>()`). Only the operations the assignors use: put, get, remove, membership, iteration.
    """

    __slots__ = ("_capacity", "_entries", "_hash_of", "_next_seq")

    def __init__(self, hash_of: Callable[[K], int], initial_capacity: int | None = None) -> None:
        self._hash_of = hash_of
        # Java allocates the table lazily; the first put gives it this capacity.
        self._capacity = _DEFAULT_CAPACITY if initial_capacity is None else table_size_for(initial_capacity)
        self._entries: dict[K, tuple[int, int, V]] = {}  # key -> (bucket hash, insertion seq, value)
        self._next_seq = 0

    @classmethod
    def copy_of(cls, other: JavaHashMap[K, V]) -> JavaHashMap[K, V]:
        """`new HashMap<>(other)`: sized for other's size, filled in other's iteration order."""
        copy: JavaHashMap[K, V] = cls(other._hash_of, int(len(other) / 0.75 + 1.0))
        for key, value in other.items():
            copy.put(key, value)
        return copy

    def put(self, key: K, value: V) -> None:
        existing = self._entries.get(key)
        if existing is not None:  # Java replaces the value in place: the key keeps its position
            self._entries[key] = (existing[0], existing[1], value)
            return
        h = _spread(self._hash_of(key))
        self._entries[key] = (h, self._next_seq, value)
        self._next_seq += 1
        self._grow_if_needed(h)

    def _grow_if_needed(self, h: int) -> None:
        if self._capacity < _MIN_TREEIFY_CAPACITY:
            mask = self._capacity - 1
            bucket_size = sum(1 for other, _, _ in self._entries.values() if other & mask == h & mask)
            if bucket_size > _TREEIFY_THRESHOLD:
                self._capacity <<= 1  # treeifyBin resizes instead of treeifying a small table
        if len(self._entries) > self._capacity * 3 // 4 and self._capacity < _MAXIMUM_CAPACITY:
            self._capacity <<= 1

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[2]

    def __getitem__(self, key: K) -> V:
        return self._entries[key][2]

    def remove(self, key: K) -> V | None:
        entry = self._entries.pop(key, None)
        return None if entry is None else entry[2]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def keys(self) -> list[K]:
        mask = self._capacity - 1
        ordered = sorted(self._entries.items(), key=lambda item: (item[1][0] & mask, item[1][1]))
        return [key for key, _ in ordered]

    def items(self) -> list[tuple[K, V]]:
        return [(key, self._entries[key][2]) for key in self.keys()]

    def values(self) -> list[V]:
        return [self._entries[key][2] for key in self.keys()]

    def first(self) -> K:
        """`iterator().next()`: the key a Java loop over this map would see first."""
        mask = self._capacity - 1
        return min(self._entries.items(), key=lambda item: (item[1][0] & mask, item[1][1]))[0]


def java_string_hash_map(keys: Iterable[str], initial_capacity: int | None = None) -> JavaHashMap[str, None]:
    """A HashMap (or HashSet) of strings, filled in the given order."""
    hashed: JavaHashMap[str, None] = JavaHashMap(java_string_hash, initial_capacity)
    for key in keys:
        hashed.put(key, None)
    return hashed
