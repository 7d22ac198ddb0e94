"""The cooperative-sticky assignor withholds a moving partition for one round, as Kafka's does (KIP-429).

Method: CooperativeStickyAssignorTest's own cases through `assign("cooperative-sticky", ...)` (the cases it
shares with the eager assignor run for both strategies in test_assignors_sticky.py), then the two-phase
rebalance of the seeds' walkthrough written out round by round: round one revokes without reassigning, round
two, with the revoked partitions no longer owned, hands them over.
"""

from __future__ import annotations

import pytest

from hightide.core.assignors import Subscription, TopicPartition, assign
from support.assignor_checks import cooperative_round_is_safe, is_fully_balanced, settle_cooperative

T = "topic"
T1 = "topic1"
C1, C2, C3 = "consumer1", "consumer2", "consumer3"
GENERATION = 1


def _owned(topics: list[str], owned: list[TopicPartition], generation: int = GENERATION) -> Subscription:
    return Subscription(topics, owned, generation)


@pytest.mark.parametrize(
    ("partition_count", "consumer1_final"), [(3, [(T, 1)]), (4, [(T, 1), (T, 3)])], ids=["equal", "unequal"]
)
def test_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple_consumers_in_same_generation(
    partition_count: int, consumer1_final: list[TopicPartition]
) -> None:
    """CooperativeStickyAssignorTest.testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultiple...

    topic-0 counts as owned by both claimants, so consumer3 cannot have it until both have revoked it.
    """
    subscriptions = {C1: _owned([T], [(T, 0), (T, 1)]), C2: _owned([T], [(T, 0), (T, 2)]), C3: _owned([T], [])}
    result = assign("cooperative-sticky", {T: partition_count}, subscriptions)
    assert result.partitions == {C1: consumer1_final, C2: [(T, 2)], C3: []}
    assert result.transferring == {(T, 0): C3}
    final = settle_cooperative({T: partition_count}, subscriptions, result.partitions)
    assert final[C3] == [(T, 0)]
    assert is_fully_balanced(final)


def test_assignor_with_old_version_subscriptions() -> None:
    """CooperativeStickyAssignorTest.testAssignorWithOldVersionSubscriptions (generation from v1 user data)."""
    subscriptions = {C1: _owned([T1], [(T1, 0)]), C2: _owned([T1], [(T1, 1)]), C3: _owned([T1], [])}
    result = assign("cooperative-sticky", {T1: 3}, subscriptions)
    assert result.partitions == {C1: [(T1, 0)], C2: [(T1, 1)], C3: [(T1, 2)]}
    assert result.transferring == {}


def test_a_moving_partition_is_revoked_in_one_round_and_assigned_in_the_next() -> None:
    """Two-phase rebalance: C1 owns all four partitions; C2 joins. Round one only takes two away from C1."""
    counts = {T: 4}
    first = {C1: _owned([T], [(T, p) for p in range(4)]), C2: _owned([T], [])}
    round_one = assign("cooperative-sticky", counts, first)
    assert round_one.partitions == {C1: [(T, 0), (T, 1)], C2: []}
    assert round_one.transferring == {(T, 2): C2, (T, 3): C2}
    assert cooperative_round_is_safe(first, round_one.partitions)  # revokes, so another round follows

    second = {C1: _owned([T], round_one.partitions[C1], 2), C2: _owned([T], [], 2)}
    round_two = assign("cooperative-sticky", counts, second)
    assert round_two.partitions == {C1: [(T, 0), (T, 1)], C2: [(T, 2), (T, 3)]}
    assert round_two.transferring == {}
    assert not cooperative_round_is_safe(second, round_two.partitions)  # nothing revoked: settled


def test_the_general_algorithm_computes_transferring_from_the_owned_partitions() -> None:
    """Unequal subscriptions (Kafka's general case): transferring is what was owned by one and given to another."""
    counts = {T: 2, T1: 2}
    subscriptions = {C1: _owned([T, T1], [(T, 0), (T, 1), (T1, 0), (T1, 1)]), C2: _owned([T], [])}
    result = assign("cooperative-sticky", counts, subscriptions)
    moved = {tp for tp, member in result.transferring.items() if member == C2}
    assert moved and moved <= {(T, 0), (T, 1)}
    assert not moved & set(result.partitions[C2])
    assert set(result.partitions[C1]) | moved == {(T, 0), (T, 1), (T1, 0), (T1, 1)}
    final = settle_cooperative(counts, subscriptions, result.partitions)
    assert sorted(len(p) for p in final.values()) == [2, 2]


def test_the_eager_sticky_strategy_reports_no_transfers() -> None:
    """The eager protocol revokes everything before the rebalance, so there is nothing to withhold."""
    subscriptions = {C1: _owned([T], [(T, p) for p in range(4)]), C2: _owned([T], [])}
    result = assign("sticky", {T: 4}, subscriptions)
    assert result.partitions == {C1: [(T, 0), (T, 1)], C2: [(T, 2), (T, 3)]}
    assert result.transferring == {}
