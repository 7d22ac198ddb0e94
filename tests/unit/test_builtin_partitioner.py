"""Records without a key are spread as Kafka's uniform sticky partitioner (KIP-794) spreads them.

Method: Kafka's BuiltInPartitionerTest ported case by case (sticky switching after `batch.size` bytes,
unavailable partitions, adaptive weighting by queue sizes, a sticky batch size of at least 1), with the draws
Kafka's tests mock (`SequentialPartitioner`: 0, 1, 2, ...) passed in as arguments; then RecordAccumulatorTest's
adaptive case (queue sizes 1, 7, 2, then the partitions of a leader that has taken nothing for longer than
`partitioner.availability.timeout.ms` left out) and its fractional-batch case (no switch while the last batch
fills, up to twice `batch.size`); then the producer's three `partitioner.*` configs with Kafka's defaults and
errors. Each test reads given / when / then.
"""

from __future__ import annotations

import itertools
import random

import pytest

from hightide.client.producer import ProducerConfig
from hightide.core.partitioner import (
    BuiltInPartitioner,
    NodeLatencyStats,
    PartitionLoad,
    load_stats_input,
)


class Sequential:
    """Kafka's SequentialPartitioner's draws: 0, 1, 2, ... one per call."""

    def __init__(self) -> None:
        self._next = itertools.count()

    def __call__(self) -> int:
        return next(self._next)


def produce_one(
    partitioner: BuiltInPartitioner,
    draw: Sequential,
    available: list[int],
    num_partitions: int,
    size: int = 1,
    enable_switch: bool = True,
) -> int:
    """One record as the producer appends it: peek the sticky partition, then count its bytes. A draw is taken
    only when a partition is chosen, as Kafka's randomPartition is called only then."""
    if partitioner.current is None:
        info = partitioner.peek_current_partition_info(draw(), available, num_partitions)
    else:
        info = partitioner.current
    if partitioner.update_partition_info(info, size, enable_switch):
        partitioner.switch_partition(draw(), available, num_partitions)
    return info.partition


# -- BuiltInPartitionerTest -----------------------------------------------------------------------------------------


def test_the_sticky_partition_switches_only_once_sticky_batch_size_bytes_have_gone_to_it() -> None:
    # Given topic A with three partitions, all led, and a sticky batch size of 3 bytes
    partitioner = BuiltInPartitioner("topicA", 3)
    draw = Sequential()
    # When three 1-byte records are produced
    first = [produce_one(partitioner, draw, [0, 1, 2], 3) for _ in range(3)]
    # Then all three went to the same partition, and the next record goes to another one
    assert first == [first[0]] * 3
    assert partitioner.current is not None
    assert partitioner.current.partition != first[0]


def test_a_topic_with_one_partition_keeps_switching_to_it() -> None:
    # Given topic B with one partition and a sticky batch size of 1 byte (a switch after every record)
    partitioner = BuiltInPartitioner("topicB", 1)
    draw = Sequential()
    # When ten records are produced, then every one lands in partition 0
    assert [produce_one(partitioner, draw, [0], 1) for _ in range(10)] == [0] * 10


def test_a_partition_without_a_leader_is_never_chosen_while_some_partition_has_one() -> None:
    # Given topic A whose partition 1 has no leader, and a switch after every record
    partitioner = BuiltInPartitioner("topicA", 1)
    rng = random.Random(794)
    # When 101 records are produced with random draws
    chosen = []
    for _ in range(101):
        info = partitioner.peek_current_partition_info(rng.getrandbits(31), [0, 2], 3)
        chosen.append(info.partition)
        assert partitioner.update_partition_info(info, 1)
        partitioner.switch_partition(rng.getrandbits(31), [0, 2], 3)
    # Then partition 1 is never chosen, and both others are
    assert set(chosen) == {0, 2}


def test_the_only_led_partition_is_always_chosen() -> None:
    # Given topic B whose partition 0 has no leader and partition 1 has one
    partitioner = BuiltInPartitioner("topicB", 1)
    draw = Sequential()
    # When 101 records are produced, then every one lands in partition 1
    assert {produce_one(partitioner, draw, [1], 2) for _ in range(101)} == {1}


def test_with_no_partition_led_one_is_chosen_among_all() -> None:
    # Given topic C with one partition and no leader
    partitioner = BuiltInPartitioner("topicC", 1)
    draw = Sequential()
    # When records are produced, then they still have a partition: 0
    assert produce_one(partitioner, draw, [], 1) == 0
    assert partitioner.peek_current_partition_info(draw(), [], 1).partition == 0


def test_partitions_are_chosen_in_inverse_proportion_to_their_queue_sizes() -> None:
    # Given five partitions whose queues hold 5, 0, 3, 0 and 1 batches, and a switch after every record
    partitioner = BuiltInPartitioner("topicA", 1)
    queue_sizes = [5, 0, 3, 0, 1]
    partitioner.update_partition_load_stats(queue_sizes, [0, 1, 2, 3, 4], 5)
    # (weights 6 - size: 1, 6, 3, 6, 5; their sum is the draw's range)
    assert partitioner.load_stats_range_end() == 21
    draw = Sequential()
    # When the draws run twice over the range
    frequencies = [0] * 5
    for _ in range(partitioner.load_stats_range_end() * 2):
        frequencies[produce_one(partitioner, draw, [0, 1, 2, 3, 4], 5)] += 1
    # Then each partition was chosen twice its weight
    assert frequencies == [(6 - size) * 2 for size in queue_sizes]


def test_the_cumulative_frequency_table_is_kafkas_worked_example() -> None:
    # Given queue sizes 0, 3, 1 (Kafka's comment: weights 4, 1, 3, table 4, 5, 8)
    partitioner = BuiltInPartitioner("topicA", 1)
    partitioner.update_partition_load_stats([0, 3, 1], [0, 1, 2], 3)
    # Then draws 0-3 map to partition 0, 4 to partition 1, 5-7 to partition 2, and 8 wraps to partition 0
    assert partitioner.load_stats_range_end() == 8
    chosen = [partitioner.next_partition(draw, [0, 1, 2], 3) for draw in range(9)]
    assert chosen == [0, 0, 0, 0, 1, 2, 2, 2, 0]


def test_equal_queue_sizes_or_fewer_than_two_partitions_mean_a_uniform_choice() -> None:
    partitioner = BuiltInPartitioner("topicA", 1)
    # Given equal queues, none left out: uniform
    partitioner.update_partition_load_stats([2, 2, 2], [0, 1, 2], 3)
    assert partitioner.load_stats_range_end() == 0
    # Given one partition in all: uniform
    partitioner.update_partition_load_stats([4], [0], 1)
    assert partitioner.load_stats_range_end() == 0
    # Given equal queues but one partition left out (length 2 of 3): weighted among the two kept
    partitioner.update_partition_load_stats([2, 2, 2], [0, 2, 1], 2)
    assert partitioner.load_stats_range_end() == 2
    assert {partitioner.next_partition(draw, [0, 1, 2], 3) for draw in range(10)} == {0, 2}
    # Given no stats (adaptive partitioning off): uniform again
    partitioner.update_partition_load_stats(None, [], 0)
    assert partitioner.load_stats_range_end() == 0


def test_a_sticky_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="stickyBatchSize must be >= 1 but got 0"):
        BuiltInPartitioner("topicA", 0)
    assert BuiltInPartitioner("topicA", 1).sticky_batch_size == 1


def test_a_stale_partition_info_is_recognised_and_refused() -> None:
    # Given a partition info that a switch has replaced
    partitioner = BuiltInPartitioner("topicA", 1)
    old = partitioner.peek_current_partition_info(0, [0, 1], 2)
    assert partitioner.update_partition_info(old, 1)
    partitioner.switch_partition(1, [0, 1], 2)
    # Then it counts as changed, and counting bytes against it is refused; a record without one is not sticky
    assert partitioner.is_partition_changed(old)
    assert not partitioner.is_partition_changed(partitioner.current)
    assert not partitioner.is_partition_changed(None)
    with pytest.raises(ValueError, match="not the current sticky partition"):
        partitioner.update_partition_info(old, 1)


# -- RecordAccumulatorTest: fractional batches, adaptive choice, availability -------------------------------------


def test_no_switch_while_the_last_batch_fills_until_twice_the_sticky_batch_size() -> None:
    # Given a sticky batch size of 512 bytes and 32-byte records whose batch is still filling (switch disabled)
    partitioner = BuiltInPartitioner("topic", 512)
    draw = Sequential()
    first = produce_one(partitioner, draw, [0, 1, 2], 3, size=32, enable_switch=False)
    # When 1023 bytes have gone to it in all, then it has not switched
    for _ in range(30):
        assert produce_one(partitioner, draw, [0, 1, 2], 3, size=32, enable_switch=False) == first
    assert partitioner.current is not None and partitioner.current.partition == first
    assert partitioner.current.produced_bytes == 31 * 32  # 992
    # When the record that reaches 1024 bytes (twice 512) goes in, then it switches all the same
    produce_one(partitioner, draw, [0, 1, 2], 3, size=32, enable_switch=False)
    assert partitioner.current.partition != first


def test_a_switch_held_back_happens_once_the_batch_is_full() -> None:
    # Given 600 bytes produced to the sticky partition while its batch filled (switch held back)
    partitioner = BuiltInPartitioner("topic", 512)
    draw = Sequential()
    first = produce_one(partitioner, draw, [0, 1, 2], 3, size=600, enable_switch=False)
    info = partitioner.current
    assert info is not None and info.partition == first
    # While the batch still fills, a check with no bytes keeps it
    assert not partitioner.update_partition_info(info, 0, enable_switch=False)
    # When the batch is full and the producer checks again with no bytes (Kafka's partitionChanged)
    assert partitioner.update_partition_info(info, 0, enable_switch=True)
    partitioner.switch_partition(draw(), [0, 1, 2], 3)
    # Then the partition has switched
    assert partitioner.is_partition_changed(info)


def test_adaptive_choice_from_the_producers_queues_then_without_a_leader_that_takes_nothing() -> None:
    # Given partitions 0 and 1 led by broker 0 and partition 2 by broker 1, holding 1, 7 and 2 batches
    loads = [PartitionLoad(0, 0, 1), PartitionLoad(1, 0, 7), PartitionLoad(2, 1, 2)]
    stats = {0: NodeLatencyStats(0, 0), 1: NodeLatencyStats(0, 0)}
    sizes, ids, length = load_stats_input(loads, 3, adaptive=True, availability_timeout_ms=100, node_stats=stats)
    partitioner = BuiltInPartitioner("topic", 1)
    partitioner.update_partition_load_stats(sizes, ids, length)
    draw = Sequential()
    produce_one(partitioner, draw, [0, 1, 2], 3)  # primes the partitioner: it switches after every record
    # When records are produced twice over the draws' range
    frequencies = [0] * 3
    for _ in range(partitioner.load_stats_range_end() * 2):
        frequencies[produce_one(partitioner, draw, [0, 1, 2], 3)] += 1
    # Then each partition got twice its weight 8 - size
    assert frequencies == [14, 2, 12]
    # When broker 0 last took data 200 ms before it last had data ready (over the 100 ms timeout)
    stats[0].update(1_000, can_drain=True)
    stats[0].update(1_200, can_drain=False)
    sizes, ids, length = load_stats_input(loads, 3, adaptive=True, availability_timeout_ms=100, node_stats=stats)
    partitioner.update_partition_load_stats(sizes, ids, length)
    produce_one(partitioner, draw, [0, 1, 2], 3)  # the switch happens after an append
    # Then only partition 2, on broker 1, is chosen
    assert {produce_one(partitioner, draw, [0, 1, 2], 3) for _ in range(10)} == {2}


def test_the_load_stats_input_follows_kafkas_partition_ready() -> None:
    stats = {0: NodeLatencyStats(ready_ms=500, drain_ms=0)}  # broker 0: data ready, nothing taken for 500 ms
    loads = [PartitionLoad(0, 0, 3), PartitionLoad(1, -1, 1), PartitionLoad(2, 0, 0), PartitionLoad(3, 2, 4)]
    # Given adaptive partitioning off, or a partition with no queue yet: no stats (uniform)
    assert load_stats_input(loads, 4, adaptive=False, availability_timeout_ms=0, node_stats=stats)[0] is None
    assert load_stats_input(loads[:3], 4, adaptive=True, availability_timeout_ms=0, node_stats=stats)[0] is None
    # Given no availability timeout: the leaderless partition 1 alone is left out
    sizes, ids, length = load_stats_input(loads, 4, adaptive=True, availability_timeout_ms=0, node_stats=stats)
    assert sizes is not None and (sizes[:length], ids[:length]) == ([3, 0, 4], [0, 2, 3])
    # Given a 100 ms timeout: partition 0 (broker 0, batches waiting) is left out too, but not partition 2 on the
    # same broker, whose queue is empty
    sizes, ids, length = load_stats_input(loads, 4, adaptive=True, availability_timeout_ms=100, node_stats=stats)
    assert sizes is not None and (sizes[:length], ids[:length]) == ([0, 4], [2, 3])
    # Given a timeout longer than the stall: nothing more left out
    sizes, ids, length = load_stats_input(loads, 4, adaptive=True, availability_timeout_ms=500, node_stats=stats)
    assert ids[:length] == [0, 2, 3]


def test_node_latency_stats_move_the_drain_time_only_when_the_broker_takes_data() -> None:
    stats = NodeLatencyStats(ready_ms=10, drain_ms=10)
    stats.update(50, can_drain=False)
    assert (stats.ready_ms, stats.drain_ms) == (50, 10)
    stats.update(70, can_drain=True)
    assert (stats.ready_ms, stats.drain_ms) == (70, 70)


# -- the producer's configs ---------------------------------------------------------------------------------------


def test_the_partitioner_configs_have_kafkas_names_and_defaults() -> None:
    defaults = ProducerConfig.from_properties({})
    assert defaults.partitioner_adaptive_partitioning_enable is True
    assert defaults.partitioner_availability_timeout_ms == 0
    assert defaults.partitioner_ignore_keys is False
    config = ProducerConfig.from_properties(
        {
            "partitioner.adaptive.partitioning.enable": "false",
            "partitioner.availability.timeout.ms": "250",
            "partitioner.ignore.keys": "TRUE",
        }
    )
    assert config.partitioner_adaptive_partitioning_enable is False
    assert config.partitioner_availability_timeout_ms == 250
    assert config.partitioner_ignore_keys is True


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("partitioner.ignore.keys", "yes", "Invalid value yes for configuration partitioner.ignore.keys: Expected"),
        ("partitioner.adaptive.partitioning.enable", "1", "Invalid value 1 for configuration partitioner.adaptive"),
        ("partitioner.availability.timeout.ms", "soon", "Invalid value soon for configuration partitioner.avail"),
        ("partitioner.availability.timeout.ms", "-1", "Value must be at least 0"),
        ("partitioner.class", "x", "Unknown producer config name: partitioner.class"),
    ],
)
def test_a_bad_partitioner_config_is_refused_with_kafkas_message(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProducerConfig.from_properties({name: value})
