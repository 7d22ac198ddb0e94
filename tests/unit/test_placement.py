"""A new topic's replicas land where Kafka's AdminUtils.assignReplicasToBrokers puts them.

Method: Kafka's own vectors, each named by the Kafka test that asserts it. AdminRackAwareTest.testReplicaAssignment
(the 5-broker map, also drawn in AdminUtils' javadoc) and its error cases; the Java port's
testAssignReplicasToBrokersWithInvalidParameters (partitions are checked before the replication factor);
AddPartitionsTest.testReplicaPlacementAllServers/PartialServers, which reach the algorithm through the
add-partitions path (fixed start index = position of partition 0's leader, start partition id = the current
partition count); and AdminRackAwareTest's rack-aware map and rack-alternated lists. Kafka's rack-aware tests
that draw a random start index are run here for every value the draws can take, with Kafka's own
checkReplicaDistribution ported below.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Mapping

import pytest

from hightide.core.placement import (
    Choose,
    InvalidReplicaAssignment,
    assign_replicas_to_brokers,
    assign_replicas_to_brokers_rack_aware,
    choose_first,
    rack_alternated_broker_list,
)
from hightide.protocol.errors import ErrorCode

FIVE_BROKERS = [0, 1, 2, 3, 4]


def drawing(*draws: int) -> Choose:
    """A `choose` that gives these draws in turn, as rand.nextInt did in one run of Kafka's test."""
    remaining = iter(draws)
    return lambda _num_brokers: next(remaining)


# --- rack-unaware: Kafka's vectors -------------------------------------------------------------------------------


def test_five_brokers_ten_partitions_rf_3_from_index_0_is_kafkas_map() -> None:
    # AdminRackAwareTest.testReplicaAssignment (and AdminTest before it): from p5 on the shift is 1, so the
    # second replica sits two brokers after the leader instead of one.
    assert assign_replicas_to_brokers(FIVE_BROKERS, 10, 3, 0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_the_map_is_keyed_in_partition_order() -> None:
    assert list(assign_replicas_to_brokers(FIVE_BROKERS, 10, 3, 0)) == list(range(10))


def test_adding_six_partitions_to_a_topic_whose_partition_0_is_led_by_broker_2() -> None:
    # AddPartitionsTest.testReplicaPlacementAllServers: brokers 0-3, partition 0 = [2, 3, 0, 1], grown to 7.
    # The add-partitions path passes the index of partition 0's leader (2) and the current count (1).
    assignment = assign_replicas_to_brokers([0, 1, 2, 3], 6, 4, 2, 1)
    expected = {1: (3, {3, 2, 0, 1}), 2: (0, {0, 3, 1, 2}), 3: (1, {1, 0, 2, 3})}
    expected |= {4: (2, {2, 3, 0, 1}), 5: (3, {3, 0, 1, 2}), 6: (0, {0, 1, 2, 3})}
    # Kafka asserts the leader and the replica set; its sets are even written in the order computed here.
    assert {p: (replicas[0], set(replicas)) for p, replicas in assignment.items()} == expected


def test_adding_two_partitions_to_a_topic_whose_partition_0_is_led_by_broker_1() -> None:
    # AddPartitionsTest.testReplicaPlacementPartialServers: brokers 0-3, partition 0 = [1, 2], grown to 3.
    assignment = assign_replicas_to_brokers([0, 1, 2, 3], 2, 2, 1, 1)
    assert {p: (replicas[0], set(replicas)) for p, replicas in assignment.items()} == {1: (2, {0, 2}), 2: (3, {1, 3})}


def test_a_negative_start_partition_id_means_partition_0() -> None:
    assert assign_replicas_to_brokers(FIVE_BROKERS, 10, 3, 0, -1) == assign_replicas_to_brokers(
        FIVE_BROKERS, 10, 3, 0, 0
    )


def test_brokers_are_taken_in_the_order_given() -> None:
    # Kafka indexes the collection it is given; its callers sort ids, but the algorithm does not.
    assert assign_replicas_to_brokers([7, 3, 5], 3, 2, 0) == {0: [7, 3], 1: [3, 5], 2: [5, 7]}


def test_one_broker_holds_every_partition_alone() -> None:
    assert assign_replicas_to_brokers([9], 3, 1) == {0: [9], 1: [9], 2: [9]}


# --- the random start, made explicit ------------------------------------------------------------------------------


def test_without_a_fixed_start_index_choose_is_asked_twice_start_index_first() -> None:
    calls: list[int] = []
    draws = drawing(2, 3)

    def choose(n: int) -> int:
        calls.append(n)
        return draws(n)

    assignment = assign_replicas_to_brokers(FIVE_BROKERS, 5, 2, choose=choose)
    assert calls == [5, 5]  # like Kafka's two rand.nextInt(brokers) calls
    # Start index 2: partition 0 is led by broker 2; shift 3: its follower is 1 + 3 % 4 = 4 brokers on.
    assert assignment[0] == [2, 1]


def test_a_fixed_start_index_never_asks_choose() -> None:
    def choose(n: int) -> int:
        raise AssertionError("choose must not be called when the start index is fixed")

    assert assign_replicas_to_brokers(FIVE_BROKERS, 10, 3, 0, choose=choose)[9] == [4, 1, 2]


def test_the_default_choice_places_replicas_as_fixed_start_index_0_does() -> None:
    assert choose_first(5) == 0
    assert assign_replicas_to_brokers(FIVE_BROKERS, 10, 3) == assign_replicas_to_brokers(FIVE_BROKERS, 10, 3, 0)


# --- errors --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("broker_ids", "num_partitions", "replication_factor", "error_code", "message"),
    [
        # AdminRackAwareTest.testReplicaAssignment
        (FIVE_BROKERS, 10, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."),
        (
            FIVE_BROKERS,
            10,
            6,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor: 6 larger than available brokers: 5.",
        ),
        # testAssignReplicasToBrokersWithInvalidParameters: with both wrong, the partition count is reported
        (FIVE_BROKERS, 0, 0, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
        (FIVE_BROKERS, -3, 3, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
        (FIVE_BROKERS, 10, -1, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."),
        # No brokers at all is a replication factor larger than the brokers available.
        ([], 3, 1, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor: 1 larger than available brokers: 0."),
        # Kafka's callers never pass duplicates; here they are refused rather than doubling a replica.
        ([1, 2, 1], 3, 2, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate broker ids in [1, 2, 1]."),
    ],
)
def test_a_request_kafka_refuses_raises_with_kafkas_error_code_and_message(
    broker_ids: list[int], num_partitions: int, replication_factor: int, error_code: ErrorCode, message: str
) -> None:
    with pytest.raises(InvalidReplicaAssignment) as raised:
        assign_replicas_to_brokers(broker_ids, num_partitions, replication_factor)
    assert raised.value.error_code is error_code
    assert str(raised.value) == f"{error_code.name}: {message}"


def test_the_rack_aware_variant_refuses_what_kafka_refuses() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2"}
    for num_partitions, replication_factor, error_code in [
        (0, 0, ErrorCode.INVALID_PARTITIONS),
        (10, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        (10, len(racks) + 1, ErrorCode.INVALID_REPLICATION_FACTOR),
    ]:
        with pytest.raises(InvalidReplicaAssignment) as raised:
            assign_replicas_to_brokers_rack_aware(racks, num_partitions, replication_factor)
        assert raised.value.error_code is error_code


# --- rack-aware: Kafka's vectors -----------------------------------------------------------------------------------

SIX_BROKERS_THREE_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_the_rack_alternated_list_takes_one_broker_per_rack_in_turn() -> None:
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    assert rack_alternated_broker_list(SIX_BROKERS_THREE_RACKS) == [0, 3, 1, 5, 4, 2]
    without_5 = {b: rack for b, rack in SIX_BROKERS_THREE_RACKS.items() if b != 5}
    assert rack_alternated_broker_list(without_5) == [0, 3, 1, 4, 2]  # rack1 runs out and is skipped


def test_the_rack_alternated_list_of_adminutils_javadoc() -> None:
    racks = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_broker_list(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_racks_sort_as_java_sorts_strings() -> None:
    # Derived from String.compareTo (UTF-16 code units): U+1F600 is the surrogate 0xD83D..., which is below
    # U+FF00, although Python's code-point order puts it above.
    assert rack_alternated_broker_list({0: "\uff00", 1: "\U0001f600"}) == [1, 0]
    assert rack_alternated_broker_list({0: "rack10", 1: "rack2", 2: "rack1"}) == [2, 0, 1]


def test_seven_partitions_rf_3_on_three_racks_is_kafkas_map() -> None:
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers; partition 6 starts the
    # second round, so its followers shift (0, 4, 2 rather than repeating 0, 3, 1).
    assert assign_replicas_to_brokers_rack_aware(SIX_BROKERS_THREE_RACKS, 7, 3, 0, 0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


# --- rack-aware: Kafka's distribution tests, for every random draw -------------------------------------------------


def check_replica_distribution(
    assignment: Mapping[int, list[int]],
    broker_racks: Mapping[int, str],
    *,
    verify_rack_aware: bool = True,
    verify_leader_distribution: bool = True,
    verify_replicas_distribution: bool = True,
) -> None:
    """Kafka's RackAwareTest.checkReplicaDistribution, with the partition count and RF read off the map."""
    num_brokers = len(broker_racks)
    num_partitions = len(assignment)
    replication_factor = len(next(iter(assignment.values())))
    for replicas in assignment.values():
        assert len(set(replicas)) == len(replicas), "one partition has two replicas on one broker"
    if verify_rack_aware:
        for replicas in assignment.values():
            assert len({broker_racks[b] for b in replicas}) == replication_factor, "two replicas on one rack"
    if verify_leader_distribution:
        leaders = Counter(replicas[0] for replicas in assignment.values())
        assert sorted(leaders.values()) == [num_partitions // num_brokers] * num_brokers, "leaders uneven"
    if verify_replicas_distribution:
        replicas_per_broker = Counter(b for replicas in assignment.values() for b in replicas)
        expected = [num_partitions * replication_factor // num_brokers] * num_brokers
        assert sorted(replicas_per_broker.values()) == expected, "replicas uneven"


def assign_with_draws(
    broker_racks: Mapping[int, str], num_partitions: int, replication_factor: int, start_partition_id: int = -1
) -> Iterator[dict[int, list[int]]]:
    """Kafka's call with fixedStartIndex -1, once for each (start index, shift) that rand.nextInt could give."""
    for start_index, shift in itertools.product(range(len(broker_racks)), repeat=2):
        yield assign_replicas_to_brokers_rack_aware(
            broker_racks, num_partitions, replication_factor, -1, start_partition_id, choose=drawing(start_index, shift)
        )


RACKS_2_2_2 = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


def test_rack_aware_with_fixed_start_index_2() -> None:
    # testAssignmentWithRackAware
    check_replica_distribution(assign_replicas_to_brokers_rack_aware(RACKS_2_2_2, 6, 3, 2, 0), RACKS_2_2_2)


def test_rack_aware_with_any_random_start_index() -> None:
    # testAssignmentWithRackAwareWithRandomStartIndex
    for assignment in assign_with_draws(RACKS_2_2_2, 6, 3):
        check_replica_distribution(assignment, RACKS_2_2_2)


def test_rack_aware_with_uneven_replicas_still_spans_racks() -> None:
    # testAssignmentWithRackAwareWithUnevenReplicas: 13 partitions cannot spread evenly
    check_replica_distribution(
        assign_replicas_to_brokers_rack_aware(RACKS_2_2_2, 13, 3, 0, 0),
        RACKS_2_2_2,
        verify_leader_distribution=False,
        verify_replicas_distribution=False,
    )


def test_rack_aware_with_uneven_racks_spreads_leaders() -> None:
    # testAssignmentWithRackAwareWithUnevenRacks
    racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    for assignment in assign_with_draws(racks, 12, 3):
        check_replica_distribution(assignment, racks, verify_replicas_distribution=False)


@pytest.mark.parametrize("num_partitions", [12, 6])
def test_rack_aware_with_two_replicas(num_partitions: int) -> None:
    # testAssignmentWith2ReplicasRackAware, testAssignmentWith2ReplicasRackAwareWith6Partitions
    for assignment in assign_with_draws(RACKS_2_2_2, num_partitions, 2):
        check_replica_distribution(assignment, RACKS_2_2_2)


def test_rack_aware_with_two_replicas_on_three_brokers() -> None:
    # testAssignmentWith2ReplicasRackAwareWith6PartitionsAnd3Brokers
    racks = {0: "rack1", 1: "rack2", 4: "rack3"}
    for assignment in assign_with_draws(racks, 3, 2):
        check_replica_distribution(assignment, racks)


def test_rack_aware_expansion_from_partition_12() -> None:
    # testRackAwareExpansion
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    for assignment in assign_with_draws(racks, 12, 2, start_partition_id=12):
        assert list(assignment) == list(range(12, 24))
        check_replica_distribution(assignment, racks)


def test_rack_aware_with_many_partitions() -> None:
    # testLargeNumberPartitionsAssignment
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    racks |= {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"}
    for assignment in assign_with_draws(racks, 96, 3):
        check_replica_distribution(assignment, racks)


@pytest.mark.parametrize(("replication_factor", "racks_per_partition"), [(5, 3), (2, 2)])
def test_rack_aware_with_more_or_fewer_replicas_than_racks(replication_factor: int, racks_per_partition: int) -> None:
    # testMoreReplicasThanRacks, testLessReplicasThanRacks
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    for assignment in assign_with_draws(racks, 6, replication_factor):
        assert [len(replicas) for replicas in assignment.values()] == [replication_factor] * 6
        assert all(len({racks[b] for b in replicas}) == racks_per_partition for replicas in assignment.values())


def test_rack_aware_on_a_single_rack() -> None:
    # testSingleRack
    racks = dict.fromkeys(range(6), "rack1")
    for assignment in assign_with_draws(racks, 6, 3):
        assert all(len(replicas) == 3 for replicas in assignment.values())
        assert Counter(replicas[0] for replicas in assignment.values()) == dict.fromkeys(range(6), 1)


def test_rack_aware_skips_a_broker_that_already_has_a_replica() -> None:
    # testSkipBrokerWithReplicaAlreadyAssigned: 4 replicas on 3 racks, so a rack repeats
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    check_replica_distribution(
        assign_replicas_to_brokers_rack_aware(racks, 6, 4, 2),
        racks,
        verify_rack_aware=False,
        verify_leader_distribution=False,
        verify_replicas_distribution=False,
    )


def test_the_distribution_check_can_fail() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack1", 3: "rack2"}
    with pytest.raises(AssertionError, match="two replicas on one broker"):
        check_replica_distribution({0: [0, 0]}, racks)
    with pytest.raises(AssertionError, match="two replicas on one rack"):
        check_replica_distribution({0: [0, 2]}, racks)
    with pytest.raises(AssertionError, match="leaders uneven"):
        check_replica_distribution({0: [0, 1], 1: [0, 3], 2: [2, 1], 3: [2, 3]}, racks)
    with pytest.raises(AssertionError, match="replicas uneven"):
        check_replica_distribution({0: [0, 1], 1: [1, 0], 2: [2, 1], 3: [3, 0]}, racks)
