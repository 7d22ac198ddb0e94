"""Replica assignment keeps Kafka's three goals for any brokers, partition counts and start indexes.

Method: hypothesis draws broker lists (any ids, any order), partition counts, replication factors, fixed start
indexes (also past the broker count, which Kafka allows) and start partition ids, and checks what
AdminUtils' javadoc promises rather than re-deriving the formula: every partition gets RF distinct brokers
from the list; leaders go round-robin, so their counts differ by at most one (and are equal when the
partition count is a multiple of the broker count); the partitions a broker leads have their second
replicas spread over every other broker; an expansion (start_partition_id) continues the leaders' rotation;
and the rack-aware variant spans as many racks as it can.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from hightide.core.placement import (
    assign_replicas_to_brokers,
    assign_replicas_to_brokers_rack_aware,
)

BROKER_IDS = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12, unique=True)
FIXED_START_INDEX = st.integers(-1, 40)
START_PARTITION_ID = st.integers(-1, 100)


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[int], int, int, int, int]:
    """(broker ids, partitions, replication factor, fixed start index, start partition id) Kafka accepts."""
    broker_ids = draw(BROKER_IDS)
    return (
        broker_ids,
        draw(st.integers(1, 60)),
        draw(st.integers(1, len(broker_ids))),
        draw(FIXED_START_INDEX),
        draw(START_PARTITION_ID),
    )


def leader_counts(assignment: dict[int, list[int]], broker_ids: list[int]) -> list[int]:
    leaders = Counter(replicas[0] for replicas in assignment.values())
    return [leaders[b] for b in broker_ids]


@given(requests())
def test_every_partition_gets_rf_distinct_brokers_from_the_list(request: tuple[list[int], int, int, int, int]) -> None:
    broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id = request
    assignment = assign_replicas_to_brokers(
        broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id
    )
    first = max(0, start_partition_id)
    assert list(assignment) == list(range(first, first + num_partitions))
    for replicas in assignment.values():
        assert len(replicas) == replication_factor
        assert len(set(replicas)) == replication_factor
        assert set(replicas) <= set(broker_ids)


@given(requests())
def test_leaders_are_spread_within_one_of_each_other(request: tuple[list[int], int, int, int, int]) -> None:
    broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id = request
    assignment = assign_replicas_to_brokers(
        broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id
    )
    counts = leader_counts(assignment, broker_ids)
    assert max(counts) - min(counts) <= 1


@given(BROKER_IDS, st.integers(1, 5), st.data())
def test_leaders_are_even_when_partitions_are_a_multiple_of_brokers(
    broker_ids: list[int], rounds: int, data: st.DataObject
) -> None:
    num_partitions = rounds * len(broker_ids)
    replication_factor = data.draw(st.integers(1, len(broker_ids)))
    assignment = assign_replicas_to_brokers(
        broker_ids, num_partitions, replication_factor, data.draw(FIXED_START_INDEX), data.draw(START_PARTITION_ID)
    )
    assert leader_counts(assignment, broker_ids) == [rounds] * len(broker_ids)


@given(BROKER_IDS.filter(lambda ids: len(ids) >= 2), st.integers(0, 40))
def test_the_partitions_a_broker_leads_have_second_replicas_on_every_other_broker(
    broker_ids: list[int], fixed_start_index: int
) -> None:
    # AdminUtils' goal 2: after n - 1 rounds of n partitions the growing shift has put each leader's second
    # replica once on every other broker.
    n = len(broker_ids)
    assignment = assign_replicas_to_brokers(broker_ids, n * (n - 1), 2, fixed_start_index)
    followers: dict[int, list[int]] = {b: [] for b in broker_ids}
    for leader, follower in assignment.values():
        followers[leader].append(follower)
    for leader, seconds in followers.items():
        assert sorted(seconds) == sorted(b for b in broker_ids if b != leader)


@given(BROKER_IDS, st.integers(1, 60), st.integers(0, 40), st.integers(0, 100), st.data())
def test_an_expansion_continues_the_leaders_rotation(
    broker_ids: list[int], num_partitions: int, fixed_start_index: int, existing_partitions: int, data: st.DataObject
) -> None:
    # Kafka's add-partitions path passes the existing partition count as start_partition_id, so partition p's
    # leader is the one it would have had if the topic had been created with all partitions at once.
    replication_factor = data.draw(st.integers(1, len(broker_ids)))
    whole = assign_replicas_to_brokers(
        broker_ids, existing_partitions + num_partitions, replication_factor, fixed_start_index
    )
    added = assign_replicas_to_brokers(
        broker_ids, num_partitions, replication_factor, fixed_start_index, existing_partitions
    )
    assert {p: replicas[0] for p, replicas in added.items()} == {
        p: whole[p][0] for p in range(existing_partitions, existing_partitions + num_partitions)
    }


@given(requests())
def test_within_a_round_each_partition_is_the_previous_one_moved_one_broker_on(
    request: tuple[list[int], int, int, int, int],
) -> None:
    # The shift changes only when the partition id reaches a multiple of the broker count.
    broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id = request
    assignment = assign_replicas_to_brokers(
        broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id
    )
    n = len(broker_ids)
    position = {b: i for i, b in enumerate(broker_ids)}
    for p in list(assignment)[1:]:
        if p % n != 0:
            moved = [broker_ids[(position[b] + 1) % n] for b in assignment[p - 1]]
            assert assignment[p] == moved


@given(requests(), st.integers(0, 11), st.integers(0, 11))
def test_choose_stands_for_kafkas_two_draws(
    request: tuple[list[int], int, int, int, int], start_draw: int, shift_draw: int
) -> None:
    broker_ids, num_partitions, replication_factor, _, start_partition_id = request
    n = len(broker_ids)
    draws = iter([start_draw % n, shift_draw % n])
    chosen = assign_replicas_to_brokers(
        broker_ids, num_partitions, replication_factor, -1, start_partition_id, choose=lambda _n: next(draws)
    )
    if start_draw % n == shift_draw % n:  # two equal draws are a fixed start index
        fixed = assign_replicas_to_brokers(
            broker_ids, num_partitions, replication_factor, start_draw % n, start_partition_id
        )
        assert chosen == fixed
    first = max(0, start_partition_id)
    assert chosen[first][0] == broker_ids[(first + start_draw) % n]


# --- rack-aware ---------------------------------------------------------------------------------------------------


@st.composite
def rack_requests(draw: st.DrawFn) -> tuple[dict[int, str], int, int, int, int]:
    broker_ids = draw(BROKER_IDS)
    racks = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=len(broker_ids), max_size=len(broker_ids)))
    return (
        dict(zip(broker_ids, racks, strict=True)),
        draw(st.integers(1, 60)),
        draw(st.integers(1, len(broker_ids))),
        draw(FIXED_START_INDEX),
        draw(START_PARTITION_ID),
    )


@given(rack_requests())
def test_rack_aware_replicas_span_as_many_racks_as_they_can(
    request: tuple[dict[int, str], int, int, int, int],
) -> None:
    broker_racks, num_partitions, replication_factor, fixed_start_index, start_partition_id = request
    assignment = assign_replicas_to_brokers_rack_aware(
        broker_racks, num_partitions, replication_factor, fixed_start_index, start_partition_id
    )
    num_racks = len(set(broker_racks.values()))
    first = max(0, start_partition_id)
    assert list(assignment) == list(range(first, first + num_partitions))
    for replicas in assignment.values():
        assert len(set(replicas)) == replication_factor
        assert set(replicas) <= set(broker_racks)
        assert len({broker_racks[b] for b in replicas}) == min(replication_factor, num_racks)
    counts = Counter(replicas[0] for replicas in assignment.values())
    assert max(counts.values()) - min(counts.get(b, 0) for b in broker_racks) <= 1


@given(requests())
def test_one_rack_places_replicas_as_the_rack_unaware_algorithm_does_on_sorted_ids(
    request: tuple[list[int], int, int, int, int],
) -> None:
    broker_ids, num_partitions, replication_factor, fixed_start_index, start_partition_id = request
    args = (num_partitions, replication_factor, fixed_start_index, start_partition_id)
    rack_aware = assign_replicas_to_brokers_rack_aware(dict.fromkeys(broker_ids, "rack"), *args)
    assert rack_aware == assign_replicas_to_brokers(sorted(broker_ids), *args)


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(0, 20), st.data())
def test_rf_equal_to_rack_count_on_even_racks_spreads_replicas_evenly(
    num_racks: int, brokers_per_rack: int, rounds: int, fixed_start_index: int, data: st.DataObject
) -> None:
    # AdminUtils' javadoc: "In a perfect situation where the number of replicas is the same as the number of
    # racks and each rack has the same number of brokers, it guarantees that the replica distribution is even
    # across brokers and racks."
    broker_racks = {b: f"rack{b % num_racks}" for b in range(num_racks * brokers_per_rack)}
    num_brokers = len(broker_racks)
    start_partition_id = data.draw(st.sampled_from([-1, 0, num_brokers, 3 * num_brokers]))
    assignment = assign_replicas_to_brokers_rack_aware(
        broker_racks, rounds * num_brokers, num_racks, fixed_start_index, start_partition_id
    )
    replicas_per_broker = Counter(b for replicas in assignment.values() for b in replicas)
    assert [replicas_per_broker[b] for b in broker_racks] == [rounds * num_racks] * num_brokers
