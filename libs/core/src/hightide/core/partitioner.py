"""Which partition a record goes to: Kafka's built-in partitioner (KIP-794); a key's partition bit for bit.

Room: libs/core (rules as pure functions). Owns:

- the key-to-partition mapping, which must equal Kafka's (`Utils.murmur2`, `Utils.toPositive`,
  `BuiltInPartitioner.partitionForKey`) so that a key lands in the same partition whichever client wrote it;
- the uniform sticky partitioner for records without a key (Kafka's `BuiltInPartitioner`): one partition per
  topic until `batch.size` bytes have gone to it, then another, drawn uniformly among the partitions with a
  leader, or, with `partitioner.adaptive.partitioning.enable`, weighted by the inverse of the partitions' queue
  sizes (the cumulative frequency table of `updatePartitionLoadStats`);
- which partitions count for those weights (Kafka's `RecordAccumulator.partitionReady`): those with a leader, less
  those whose leader has had data ready but taken none for `partitioner.availability.timeout.ms`
  (`NodeLatencyStats`).

Never reads a clock or draws randomness: the producer passes `now_ms` and each random draw in.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


# -- the uniform sticky partitioner (KIP-794) ------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class StickyPartitionInfo:
    """The current sticky partition of a topic and the bytes produced to it since it was chosen (Kafka's
    `BuiltInPartitioner.StickyPartitionInfo`). Compared by identity: a new one is made at each switch."""

    partition: int
    produced_bytes: int = 0


class BuiltInPartitioner:
    """Kafka's `BuiltInPartitioner`, one per topic: the sticky partition for records without a key (or all records,
    with `partitioner.ignore.keys`) and the load stats that weight the choice of the next one.

    The producer's cycle, as Kafka's RecordAccumulator.append: `peek_current_partition_info`, append the record to
    that partition, then `update_partition_info` with the bytes appended, which says to `switch_partition` once
    `sticky_batch_size` bytes have gone to the partition (if switching is enabled: the producer disables it while
    the partition's last batch is not full, up to twice `sticky_batch_size`, so that lingering batches are not cut
    short).

    `available` is the partitions that have a leader, `num_partitions` all of the topic's; `draw` is a uniformly
    random non-negative int (Kafka's `Utils.toPositive(ThreadLocalRandom.nextInt())`), used only when a new partition
    is chosen."""

    __slots__ = ("_load_stats", "_sticky", "sticky_batch_size", "topic")

    def __init__(self, topic: str, sticky_batch_size: int) -> None:
        if sticky_batch_size < 1:
            raise ValueError(f"stickyBatchSize must be >= 1 but got {sticky_batch_size}")
        self.topic = topic
        self.sticky_batch_size = sticky_batch_size
        self._sticky: StickyPartitionInfo | None = None
        # (cumulative frequency table, partition ids), both of the same length; None: uniform choice.
        self._load_stats: tuple[list[int], list[int]] | None = None

    @property
    def current(self) -> StickyPartitionInfo | None:
        """The current sticky partition, or None before the first record (the next peek chooses one)."""
        return self._sticky

    def next_partition(self, draw: int, available: Sequence[int], num_partitions: int) -> int:
        """The partition to switch to: weighted by the load stats if there are any, else uniform among the
        partitions with a leader, else among all."""
        if draw < 0:
            raise ValueError(f"the random draw must be non-negative, not {draw}")
        if self._load_stats is None:
            if available:
                return available[draw % len(available)]
            if num_partitions < 1:
                raise ValueError(f"num_partitions must be at least 1, not {num_partitions}")
            return draw % num_partitions
        frequencies, partition_ids = self._load_stats
        weighted = draw % frequencies[-1]
        # The first entry strictly greater than the draw (Kafka's binarySearch, insertion point + 1 on a hit).
        return partition_ids[bisect.bisect_right(frequencies, weighted)]

    def peek_current_partition_info(
        self, draw: int, available: Sequence[int], num_partitions: int
    ) -> StickyPartitionInfo:
        """The current sticky partition, chosen now if there is none yet."""
        if self._sticky is None:
            return self.switch_partition(draw, available, num_partitions)
        return self._sticky

    def is_partition_changed(self, info: StickyPartitionInfo | None) -> bool:
        """Whether `info` is no longer the current sticky partition (None: the record was not sticky)."""
        return info is not None and info is not self._sticky

    def update_partition_info(
        self, info: StickyPartitionInfo | None, appended_bytes: int, enable_switch: bool = True
    ) -> bool:
        """Count `appended_bytes` produced to the sticky partition; True when it must now switch (then call
        `switch_partition`, after refreshing the load stats): once `sticky_batch_size` bytes have gone to it and
        switching is enabled, or twice that whatever `enable_switch` says. Kafka's `updatePartitionInfo`, whose
        switch is split off so that the draw and the load stats are worked out only when a switch happens."""
        if info is None:
            return False
        if info is not self._sticky:
            raise ValueError(f"partition {info.partition} of {self.topic} is not the current sticky partition")
        produced = info.produced_bytes = info.produced_bytes + appended_bytes
        sticky_batch_size = self.sticky_batch_size
        return (produced >= sticky_batch_size and enable_switch) or produced >= 2 * sticky_batch_size

    def switch_partition(self, draw: int, available: Sequence[int], num_partitions: int) -> StickyPartitionInfo:
        """A new sticky partition, chosen by `next_partition`, with no bytes produced to it yet."""
        self._sticky = StickyPartitionInfo(self.next_partition(draw, available, num_partitions))
        return self._sticky

    def update_partition_load_stats(
        self, queue_sizes: Sequence[int] | None, partition_ids: Sequence[int], length: int
    ) -> None:
        """Kafka's `updatePartitionLoadStats`: from the queue sizes (batches waiting) of the first `length`
        partitions in `partition_ids`, the cumulative frequency table of the weights `max + 1 - size`. None, fewer
        than two partitions in all (`len(queue_sizes)`), or equal sizes with none excluded: uniform choice.

        The arrays may be longer than `length`: partitions past it were excluded as unavailable."""
        if queue_sizes is None:
            self._load_stats = None
            return
        if len(queue_sizes) != len(partition_ids) or not 0 <= length <= len(queue_sizes):
            raise ValueError(
                f"{len(queue_sizes)} queue sizes, {len(partition_ids)} partition ids and length {length} disagree"
            )
        if length < 1 or len(queue_sizes) < 2:
            self._load_stats = None
            return
        sizes = queue_sizes[:length]
        max_plus_1 = max(sizes) + 1
        if length == len(queue_sizes) and all(size == sizes[0] for size in sizes):
            self._load_stats = None
            return
        table: list[int] = []
        running = 0
        for size in sizes:
            running += max_plus_1 - size
            table.append(running)
        self._load_stats = (table, list(partition_ids[:length]))

    def load_stats_range_end(self) -> int:
        """The end of the weighted draw's range (the table's last entry), or 0 while the choice is uniform."""
        return 0 if self._load_stats is None else self._load_stats[0][-1]


@dataclass(slots=True)
class NodeLatencyStats:
    """When a broker last had data ready to take and when it last took some (Kafka's
    `RecordAccumulator.NodeLatencyStats`); a leader whose `ready_ms - drain_ms` exceeds
    `partitioner.availability.timeout.ms` has its partitions left out of the adaptive choice."""

    ready_ms: int
    drain_ms: int

    def update(self, now_ms: int, can_drain: bool) -> None:
        """Kafka's `updateNodeLatencyStats`: data was ready now, and the broker took it (`can_drain`) or not."""
        if can_drain:
            self.drain_ms = now_ms
        self.ready_ms = now_ms


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """A partition as the producer's queues see it: its leader (-1: none) and how many batches wait to be sent."""

    partition: int
    leader: int
    queue_size: int


def load_stats_input(
    partitions: Sequence[PartitionLoad],
    num_partitions: int,
    *,
    adaptive: bool,
    availability_timeout_ms: int,
    node_stats: Mapping[int, NodeLatencyStats],
) -> tuple[list[int] | None, list[int], int]:
    """The arguments of `BuiltInPartitioner.update_partition_load_stats` as Kafka's `partitionReady` builds them
    from the producer's partition queues of one topic (`partitions`, one per queue the producer has):

    - None (uniform choice) unless adaptive partitioning is on and every partition of the topic has a queue
      (a partition missing from the queues would never be weighted, so never chosen);
    - partitions without a leader are left out, and so, when `availability_timeout_ms` > 0, are partitions with
      batches waiting whose leader has had data ready but taken none for longer than that (an empty queue is
      never left out).
    """
    if not adaptive or len(partitions) < num_partitions:
        return None, [], 0
    queue_sizes = [0] * len(partitions)
    partition_ids = [0] * len(partitions)
    length = 0
    for load in sorted(partitions, key=lambda p: p.partition):
        if load.leader < 0:
            continue
        queue_sizes[length] = load.queue_size
        partition_ids[length] = load.partition
        length += 1
        if load.queue_size and availability_timeout_ms > 0:
            stats = node_stats.get(load.leader)
            if stats is not None and stats.ready_ms - stats.drain_ms > availability_timeout_ms:
                length -= 1  # left out: the next partition takes its place
    return queue_sizes, partition_ids, length
