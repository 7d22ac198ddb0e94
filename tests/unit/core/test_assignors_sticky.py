"""The sticky assignors give what Kafka's StickyAssignor and CooperativeStickyAssignor give.

Method: Kafka's AbstractStickyAssignorTest cases (the rack-free ones), each run for both `sticky` and
`cooperative-sticky` as Kafka runs them, through `assign`; then StickyAssignorTest's own cases for `sticky`.
As in Kafka's tests, the cooperative runs go through `settle_cooperative` (the follow-up rebalances, checking
that no partition is revoked and reassigned in one round) before the final assignment is checked, so the
expected assignments are the same for both strategies. Where Kafka's test reads the assignor's
`partitionsTransferringOwnership`, these read `Assignment.transferring` of the cooperative run. Kafka's
`isSticky()` (an internal movement check) has no counterpart in the API and is not asserted. Then the seeds'
walkthrough: three consumers on ten partitions, one leaves and comes back.
"""

from __future__ import annotations

import random

import pytest

from hightide.core.assignors import Assignment, Subscription, TopicPartition, assign
from support.assignor_checks import is_fully_balanced, settle_cooperative, verify_validity_and_balance

T = "topic"
T1 = "topic1"
T2 = "topic2"
T3 = "topic3"
C1, C2, C3, C4 = "consumer1", "consumer2", "consumer3", "consumer4"
GENERATION = 1  # Kafka's test's generationId
STICKY_STRATEGIES = ("sticky", "cooperative-sticky")

Partitions = dict[str, list[TopicPartition]]


def _run(
    strategy: str, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
) -> tuple[Assignment, Partitions]:
    """One rebalance as Kafka's test runs it: (the assignor's answer, the checked final assignment)."""
    result = assign(strategy, partitions_per_topic, subscriptions)
    final = result.partitions
    if strategy == "cooperative-sticky":
        final = settle_cooperative(partitions_per_topic, subscriptions, dict(final), GENERATION)
    verify_validity_and_balance(subscriptions, final)
    return result, final


def _transferring(strategy: str, result: Assignment, expected: dict[TopicPartition, str]) -> None:
    """Kafka's assertion on partitionsTransferringOwnership, which only the cooperative answer carries."""
    if strategy == "cooperative-sticky":
        assert result.transferring == expected
    else:
        assert result.transferring == {}


def _owned(topics: list[str], owned: list[TopicPartition], generation: int = GENERATION) -> Subscription:
    return Subscription(topics, owned, generation)


both_sticky_strategies = pytest.mark.parametrize("strategy", STICKY_STRATEGIES)


@both_sticky_strategies
def test_one_consumer_no_topic(strategy: str) -> None:
    """AbstractStickyAssignorTest.testOneConsumerNoTopic."""
    result, final = _run(strategy, {}, {"consumer": Subscription([])})
    assert final == {"consumer": []}
    assert result.transferring == {}


@both_sticky_strategies
def test_one_consumer_nonexistent_topic(strategy: str) -> None:
    """AbstractStickyAssignorTest.testOneConsumerNonexistentTopic."""
    _, final = _run(strategy, {T: 0}, {"consumer": Subscription([T])})
    assert final == {"consumer": []}


@both_sticky_strategies
def test_one_consumer_one_topic(strategy: str) -> None:
    """AbstractStickyAssignorTest.testOneConsumerOneTopic."""
    _, final = _run(strategy, {T: 3}, {"consumer": Subscription([T])})
    assert final == {"consumer": [(T, 0), (T, 1), (T, 2)]}


@both_sticky_strategies
def test_only_assigns_partitions_from_subscribed_topics(strategy: str) -> None:
    """AbstractStickyAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics: owned partitions of others drop."""
    owned = [(T, 0), (T, 1), ("other", 0), ("other", 1)]
    result, final = _run(strategy, {T: 2}, {"consumer": _owned([T], owned)})
    assert final == {"consumer": [(T, 0), (T, 1)]}
    assert result.transferring == {}


@both_sticky_strategies
def test_one_consumer_multiple_topics(strategy: str) -> None:
    """AbstractStickyAssignorTest.testOneConsumerMultipleTopics."""
    _, final = _run(strategy, {T1: 1, T2: 2}, {"consumer": Subscription([T1, T2])})
    assert final == {"consumer": [(T1, 0), (T2, 0), (T2, 1)]}


@both_sticky_strategies
def test_two_consumers_one_topic_one_partition(strategy: str) -> None:
    """AbstractStickyAssignorTest.testTwoConsumersOneTopicOnePartition."""
    result, final = _run(strategy, {T: 1}, {C1: Subscription([T]), C2: Subscription([T])})
    assert sorted(len(p) for p in final.values()) == [0, 1]
    assert result.transferring == {}


@both_sticky_strategies
def test_two_consumers_one_topic_two_partitions(strategy: str) -> None:
    """AbstractStickyAssignorTest.testTwoConsumersOneTopicTwoPartitions."""
    _, final = _run(strategy, {T: 2}, {C1: Subscription([T]), C2: Subscription([T])})
    assert final == {C1: [(T, 0)], C2: [(T, 1)]}


@both_sticky_strategies
def test_multiple_consumers_mixed_topic_subscriptions(strategy: str) -> None:
    """AbstractStickyAssignorTest.testMultipleConsumersMixedTopicSubscriptions (the general algorithm)."""
    subscriptions = {C1: Subscription([T1]), C2: Subscription([T1, T2]), C3: Subscription([T1])}
    _, final = _run(strategy, {T1: 3, T2: 2}, subscriptions)
    assert final == {C1: [(T1, 0), (T1, 2)], C2: [(T2, 0), (T2, 1)], C3: [(T1, 1)]}


@both_sticky_strategies
def test_two_consumers_two_topics_six_partitions(strategy: str) -> None:
    """AbstractStickyAssignorTest.testTwoConsumersTwoTopicsSixPartitions."""
    _, final = _run(strategy, {T1: 3, T2: 3}, {C1: Subscription([T1, T2]), C2: Subscription([T1, T2])})
    assert final == {C1: [(T1, 0), (T1, 2), (T2, 1)], C2: [(T1, 1), (T2, 0), (T2, 2)]}


@both_sticky_strategies
def test_consumer_owning_min_quota_expected_max_quota(strategy: str) -> None:
    """AbstractStickyAssignorTest.testConsumerOwningMinQuotaExpectedMaxQuota."""
    subscriptions = {C1: _owned([T1, T2], [(T1, 0), (T2, 1)]), C2: _owned([T1, T2], [(T1, 1), (T2, 2)])}
    result, final = _run(strategy, {T1: 2, T2: 3}, subscriptions)
    assert final == {C1: [(T1, 0), (T2, 1), (T2, 0)], C2: [(T1, 1), (T2, 2)]}
    assert result.transferring == {}


@both_sticky_strategies
def test_max_quota_consumer_more_than_num_expected_max_capacity_members(strategy: str) -> None:
    """AbstractStickyAssignorTest.testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers."""
    subscriptions = {
        C1: _owned([T1, T2], [(T1, 0), (T2, 0)]),
        C2: _owned([T1, T2], [(T1, 1), (T2, 1)]),
        C3: _owned([T1, T2], []),
    }
    result, final = _run(strategy, {T1: 2, T2: 2}, subscriptions)
    _transferring(strategy, result, {(T2, 0): C3})
    assert final == {C1: [(T1, 0)], C2: [(T1, 1), (T2, 1)], C3: [(T2, 0)]}


@both_sticky_strategies
def test_all_consumers_are_under_min_quota(strategy: str) -> None:
    """AbstractStickyAssignorTest.testAllConsumersAreUnderMinQuota."""
    subscriptions = {C1: _owned([T1, T2], [(T1, 0)]), C2: _owned([T1, T2], [(T1, 1)]), C3: _owned([T1, T2], [])}
    result, final = _run(strategy, {T1: 2, T2: 3}, subscriptions)
    assert result.transferring == {}
    assert final == {C1: [(T1, 0), (T2, 1)], C2: [(T1, 1), (T2, 2)], C3: [(T2, 0)]}


@both_sticky_strategies
def test_add_remove_consumer_one_topic(strategy: str) -> None:
    """AbstractStickyAssignorTest.testAddRemoveConsumerOneTopic."""
    _, final = _run(strategy, {T: 3}, {C1: Subscription([T])})
    assert final == {C1: [(T, 0), (T, 1), (T, 2)]}

    subscriptions = {C1: _owned([T], final[C1]), C2: _owned([T], [])}
    result, final = _run(strategy, {T: 3}, subscriptions)
    _transferring(strategy, result, {(T, 2): C2})
    assert final == {C1: [(T, 0), (T, 1)], C2: [(T, 2)]}

    result, final = _run(strategy, {T: 3}, {C2: _owned([T], final[C2])})
    assert set(final[C2]) == {(T, 0), (T, 1), (T, 2)}
    assert result.transferring == {}


@both_sticky_strategies
def test_topic_balance_after_reassignment(strategy: str) -> None:
    """AbstractStickyAssignorTest.testTopicBalanceAfterReassignment: every member gets an equal share of each topic."""
    topics = [T1, T2]
    counts = {T1: 12, T2: 12}

    def per_topic(final: Partitions, expected: int) -> None:
        for partitions in final.values():
            assert [sum(1 for t, _ in partitions if t == topic) for topic in topics] == [expected, expected]
        assert is_fully_balanced(final)

    _, final = _run(strategy, counts, {C1: Subscription(topics)})
    per_topic(final, 12)
    _, final = _run(strategy, counts, {C1: _owned(topics, final[C1]), C2: _owned(topics, [])})
    per_topic(final, 6)
    four = {
        C1: _owned(topics, final[C1]),
        C2: _owned(topics, final[C2]),
        C3: _owned(topics, []),
        C4: _owned(topics, []),
    }
    _, final = _run(strategy, counts, four)
    per_topic(final, 3)
    result, final = _run(strategy, counts, {C3: _owned(topics, final[C3]), C4: _owned(topics, final[C4])})
    per_topic(final, 6)
    assert result.transferring == {}


@both_sticky_strategies
def test_add_remove_two_consumers_two_topics(strategy: str) -> None:
    """AbstractStickyAssignorTest.testAddRemoveTwoConsumersTwoTopics: Kafka's exact lists, in Kafka's order."""
    topics = [T1, T2]
    counts = {T1: 3, T2: 4}
    result, final = _run(strategy, counts, {C1: Subscription(topics), C2: Subscription(topics)})
    assert final == {C1: [(T1, 0), (T1, 2), (T2, 1), (T2, 3)], C2: [(T1, 1), (T2, 0), (T2, 2)]}
    assert result.transferring == {}

    four = {
        C1: _owned(topics, final[C1]),
        C2: _owned(topics, final[C2]),
        C3: _owned(topics, []),
        C4: _owned(topics, []),
    }
    result, final = _run(strategy, counts, four)
    _transferring(strategy, result, {(T1, 2): C3, (T2, 3): C3, (T2, 2): C4})
    assert final == {
        C1: [(T1, 0), (T2, 1)],
        C2: [(T2, 0), (T1, 1)],
        C3: [(T1, 2), (T2, 3)],
        C4: [(T2, 2)],
    }

    result, final = _run(strategy, counts, {C3: _owned(topics, final[C3]), C4: _owned(topics, final[C4])})
    assert final == {C3: [(T1, 2), (T2, 3), (T1, 0), (T2, 1)], C4: [(T2, 2), (T1, 1), (T2, 0)]}
    assert result.transferring == {}


@both_sticky_strategies
def test_poor_round_robin_assignment_scenario(strategy: str) -> None:
    """AbstractStickyAssignorTest.testPoorRoundRobinAssignmentScenario: where roundrobin leaves consumer3 empty."""
    counts = {f"topic{i}": i % 2 + 1 for i in range(1, 6)}
    all_five = [f"topic{i}" for i in range(1, 6)]
    odd = ["topic1", "topic3", "topic5"]
    subscriptions = {
        C1: Subscription(all_five),
        C2: Subscription(odd),
        C3: Subscription(odd),
        C4: Subscription(all_five),
    }
    _, final = _run(strategy, counts, subscriptions)
    assert all(len(p) == 2 for p in final.values())
    assert assign("roundrobin", counts, subscriptions).partitions[C3] == []


@both_sticky_strategies
def test_add_remove_topic_two_consumers(strategy: str) -> None:
    """AbstractStickyAssignorTest.testAddRemoveTopicTwoConsumers: a new topic adds, a removed one takes away."""
    counts = {T: 3}
    _, first = _run(strategy, counts, {C1: Subscription([T]), C2: Subscription([T])})
    assert sorted(len(p) for p in first.values()) == [1, 2]

    counts[T2] = 3
    subscriptions = {C1: _owned([T, T2], first[C1]), C2: _owned([T, T2], first[C2])}
    result, second = _run(strategy, counts, subscriptions)
    assert result.transferring == {}
    assert is_fully_balanced(second)
    assert [len(second[C1]), len(second[C2])] == [3, 3]
    assert set(first[C1]) <= set(second[C1]) and set(first[C2]) <= set(second[C2])

    del counts[T]
    subscriptions = {C1: _owned([T2], second[C1]), C2: _owned([T2], second[C2])}
    result, third = _run(strategy, counts, subscriptions)
    assert result.transferring == {}
    assert sorted(len(p) for p in third.values()) == [1, 2]
    assert set(third[C1]) <= set(second[C1]) and set(third[C2]) <= set(second[C2])


def _name(prefix: str, i: int, max_num: int) -> str:
    """Kafka's getCanonicalName: the number zero-padded to the width of max_num."""
    return f"{prefix}{i:0{len(str(max_num))}d}"


@both_sticky_strategies
def test_reassignment_after_one_consumer_leaves(strategy: str) -> None:
    """AbstractStickyAssignorTest.testReassignmentAfterOneConsumerLeaves (19 topics, consumer i on topics 1..i)."""
    counts = {_name("t", i, 20): i for i in range(1, 20)}
    subscriptions = {
        _name("c", i, 20): Subscription([_name("t", j, 20) for j in range(1, i + 1)]) for i in range(1, 20)
    }
    _, final = _run(strategy, counts, subscriptions)
    subscriptions = {c: _owned(list(s.topics), final[c]) for c, s in subscriptions.items()}
    del subscriptions["c10"]
    _run(strategy, counts, subscriptions)


@both_sticky_strategies
def test_reassignment_after_one_consumer_added(strategy: str) -> None:
    """AbstractStickyAssignorTest.testReassignmentAfterOneConsumerAdded."""
    subscriptions = {_name("c", i, 10): Subscription(["topic"]) for i in range(1, 10)}
    result, _ = _run(strategy, {"topic": 20}, subscriptions)
    assert result.transferring == {}
    subscriptions[_name("c", 10, 10)] = Subscription(["topic"])
    result, _ = _run(strategy, {"topic": 20}, subscriptions)
    assert result.transferring == {}


@both_sticky_strategies
def test_same_subscriptions(strategy: str) -> None:
    """AbstractStickyAssignorTest.testSameSubscriptions."""
    counts = {_name("t", i, 15): i for i in range(1, 15)}
    topics = list(counts)
    subscriptions = {_name("c", i, 9): Subscription(topics) for i in range(1, 9)}
    result, final = _run(strategy, counts, subscriptions)
    assert result.transferring == {}
    subscriptions = {c: _owned(topics, final[c]) for c in subscriptions}
    del subscriptions[_name("c", 5, 9)]
    result, _ = _run(strategy, counts, subscriptions)
    assert result.transferring == {}


@both_sticky_strategies
@pytest.mark.parametrize("generations", [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)])
def test_subscription_not_equal_and_assign_same_partition_with_3_generation(
    strategy: str, generations: tuple[int, int, int]
) -> None:
    """AbstractStickyAssignorTest.testSubscriptionNotEqualAndAssignSamePartitionWith3Generation."""
    g1, g2, g3 = generations
    subscriptions = {
        C1: _owned([T], [(T, 0), (T, 2)], g1),
        C2: _owned([T], [(T, 1), (T, 2), (T, 3)], g2),
        C3: _owned([T], [(T, 2), (T, 4), (T, 5)], g3),
        C4: _owned([T1], [(T1, 0)], 2),
    }
    partitions = assign(strategy, {T: 6, T1: 1}, subscriptions).partitions
    everything = [tp for p in partitions.values() for tp in p]
    assert len(everything) == len(set(everything))
    assert all(1 <= len(p) <= 2 for p in partitions.values())


@both_sticky_strategies
def test_new_subscription(strategy: str) -> None:
    """AbstractStickyAssignorTest.testNewSubscription: consumer0 starts subscribing to a topic."""
    counts = {_name("t", i, 5): 1 for i in range(1, 5)}
    subscriptions = {_name("c", i, 3): Subscription([_name("t", j, 5) for j in range(i, 3 * i - 1)]) for i in range(3)}
    _run(strategy, counts, subscriptions)
    c0 = _name("c", 0, 3)
    subscriptions[c0] = Subscription([*subscriptions[c0].topics, _name("t", 1, 5)])
    _run(strategy, counts, subscriptions)


@both_sticky_strategies
def test_move_existing_assignments(strategy: str) -> None:
    """AbstractStickyAssignorTest.testMoveExistingAssignments."""
    counts = {f"topic{i}": 1 for i in range(1, 7)}
    subscriptions = {
        C1: _owned(["topic1", "topic2"], [("topic1", 0)]),
        C2: _owned(["topic1", "topic2", "topic3", "topic4"], [("topic2", 0), ("topic3", 0)]),
        C3: _owned(["topic2", "topic3", "topic4", "topic5", "topic6"], [("topic4", 0), ("topic5", 0), ("topic6", 0)]),
    }
    _run(strategy, counts, subscriptions)


@both_sticky_strategies
def test_stickiness(strategy: str) -> None:
    """AbstractStickyAssignorTest.testStickiness: when the group leader leaves, the others keep their partition."""
    subscriptions = {c: Subscription([T1]) for c in (C1, C2, C3, C4)}
    result, first = _run(strategy, {T1: 3}, subscriptions)
    assert result.transferring == {}
    assert all(len(p) <= 1 for p in first.values())

    remaining = {c: _owned([T1], first[c]) for c in (C2, C3, C4)}
    result, second = _run(strategy, {T1: 3}, remaining)
    assert result.transferring == {}
    for member, partitions in second.items():
        assert len(partitions) == 1
        assert set(first[member]) <= set(partitions), f"{member} lost the partition it had"


@both_sticky_strategies
def test_assignment_updated_for_deleted_topic(strategy: str) -> None:
    """AbstractStickyAssignorTest.testAssignmentUpdatedForDeletedTopic."""
    result, final = _run(strategy, {T1: 1, T3: 100}, {"consumer": Subscription([T1, T2, T3])})
    assert result.transferring == {}
    assert len(final["consumer"]) == 101


@both_sticky_strategies
def test_no_exception_thrown_when_only_subscribed_topic_deleted(strategy: str) -> None:
    """AbstractStickyAssignorTest.testNoExceptionThrownWhenOnlySubscribedTopicDeleted."""
    _, final = _run(strategy, {T: 3}, {"consumer": Subscription([T])})
    result = assign(strategy, {}, {"consumer": _owned([T], final["consumer"])})
    assert result.partitions == {"consumer": []}
    assert result.transferring == {}


@both_sticky_strategies
def test_all_consumers_reach_expected_quota_and_are_considered_filled(strategy: str) -> None:
    """AbstractStickyAssignorTest.testAllConsumersReachExpectedQuotaAndAreConsideredFilled."""
    subscriptions = {C1: _owned([T], [(T, 0), (T, 1)]), C2: _owned([T], [(T, 2)]), C3: _owned([T], [])}
    result, final = _run(strategy, {T: 4}, subscriptions)
    assert final == {C1: [(T, 0), (T, 1)], C2: [(T, 2)], C3: [(T, 3)]}
    assert result.transferring == {}


@both_sticky_strategies
@pytest.mark.parametrize("stale_generation", [9, -1], ids=["stale", "none"])
def test_owned_partitions_are_invalidated_for_consumer_with_stale_or_no_generation(
    strategy: str, stale_generation: int
) -> None:
    """AbstractStickyAssignorTest.testOwnedPartitionsAreInvalidatedForConsumerWith{Stale,No}Generation."""
    claimed = [(T, 0), (T, 2), (T2, 1)]
    subscriptions = {C1: _owned([T, T2], claimed, 10), C2: _owned([T, T2], claimed, stale_generation)}
    result, final = _run(strategy, {T: 3, T2: 3}, subscriptions)
    assert set(final[C1]) == set(claimed)
    assert set(final[C2]) == {(T, 1), (T2, 0), (T2, 2)}
    assert result.transferring == {}


@both_sticky_strategies
def test_partitions_transferring_ownership_include_the_partition_claimed_by_multiple_consumers_in_same_generation(
    strategy: str,
) -> None:
    """AbstractStickyAssignorTest.testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultiple..."""
    subscriptions = {C1: _owned([T], [(T, 0), (T, 1)]), C2: _owned([T], [(T, 0), (T, 2)]), C3: _owned([T], [])}
    result, final = _run(strategy, {T: 3}, subscriptions)
    _transferring(strategy, result, {(T, 0): C3})
    assert final == {C1: [(T, 1)], C2: [(T, 2)], C3: [(T, 0)]}


@both_sticky_strategies
def test_ensure_partitions_assigned_to_highest_generation(strategy: str) -> None:
    """AbstractStickyAssignorTest.testEnsurePartitionsAssignedToHighestGeneration."""
    topics = [T, T2, T3]
    subscriptions = {
        C1: _owned(topics, [(T, 0), (T2, 0), (T3, 0)], 10),
        C2: _owned(topics, [(T, 1), (T2, 1), (T3, 1)], 9),
        C3: _owned(topics, [(T2, 1), (T3, 0), (T3, 2)], 8),
    }
    result, final = _run(strategy, {T: 3, T2: 3, T3: 3}, subscriptions)
    assert set(final[C1]) == {(T, 0), (T2, 0), (T3, 0)}
    assert set(final[C2]) == {(T, 1), (T2, 1), (T3, 1)}
    assert set(final[C3]) == {(T, 2), (T2, 2), (T3, 2)}
    assert result.transferring == {}


@both_sticky_strategies
def test_no_reassignment_on_current_members(strategy: str) -> None:
    """AbstractStickyAssignorTest.testNoReassignmentOnCurrentMembers."""
    topics = [T, T2, T3, T1]
    subscriptions = {
        C1: _owned(topics, [], -1),
        C2: _owned(topics, [(T, 0), (T2, 0), (T1, 0)], 9),
        C3: _owned(topics, [(T3, 2), (T2, 2), (T1, 1)], 8),
        C4: _owned(topics, [(T3, 1), (T, 1), (T, 2)], 7),
    }
    result, final = _run(strategy, {T: 3, T1: 3, T2: 3, T3: 3}, subscriptions)
    assert set(final[C1]) == {(T1, 2), (T2, 1), (T3, 0)}
    assert result.transferring == {}


@both_sticky_strategies
def test_owned_partitions_are_invalidated_for_consumer_with_multiple_generation(strategy: str) -> None:
    """AbstractStickyAssignorTest.testOwnedPartitionsAreInvalidatedForConsumerWithMultipleGeneration."""
    subscriptions = {
        C1: _owned([T, T2], [(T, 0), (T2, 1), (T, 1)], 10),
        C2: _owned([T, T2], [(T, 0), (T2, 1), (T2, 2)], 8),
    }
    result, final = _run(strategy, {T: 3, T2: 3}, subscriptions)
    assert set(final[C1]) == {(T, 0), (T2, 1), (T, 1)}
    assert set(final[C2]) == {(T, 2), (T2, 2), (T2, 0)}
    assert result.transferring == {}


@both_sticky_strategies
@pytest.mark.parametrize("returning_id", ["C3", "C3-new"], ids=["same-id", "new-id"])
def test_seed_walkthrough_a_member_leaves_and_comes_back(strategy: str, returning_id: str) -> None:
    """The seeds' sticky example (seed 001): C1, C2, C3 share P0-P9; C3 dies and only its partitions move, to C1
    and C2, who keep their own; C3 comes back (a new member, owning nothing) and the assignment is again exactly
    the initial one: the survivors give back exactly the partitions they took over.

    It holds because an over-quota survivor keeps the first of its owned partitions in its own order (its
    original ones first, the taken-over ones appended), as Kafka <= 3.7 did; Kafka 3.8 (KAFKA-16277) keeps C1's
    lowest-numbered four [0, 2, 3, 6] and C2's [1, 4, 5], and hands C3 [7, 8, 9] (see `_sticky`'s departures).
    """
    counts = {"T": 10}
    _, first = _run(strategy, counts, {c: Subscription(["T"]) for c in ("C1", "C2", "C3")})
    assert first == {
        "C1": [("T", p) for p in (0, 3, 6, 9)],
        "C2": [("T", 1), ("T", 4), ("T", 7)],
        "C3": [("T", 2), ("T", 5), ("T", 8)],
    }

    _, second = _run(strategy, counts, {c: _owned(["T"], first[c]) for c in ("C1", "C2")})
    # C1 and C2 keep what they had; C3's partitions are appended, in assignment order.
    assert second == {
        "C1": [("T", p) for p in (0, 3, 6, 9, 2)],
        "C2": [("T", p) for p in (1, 4, 7, 5, 8)],
    }

    back = {c: _owned(["T"], second[c], 2) for c in ("C1", "C2")} | {returning_id: Subscription(["T"])}
    _, third = _run(strategy, counts, back)
    assert third == {"C1": first["C1"], "C2": first["C2"], returning_id: first["C3"]}


# StickyAssignorTest's own cases: the eager `sticky` strategy only.


@pytest.mark.parametrize(
    ("partition_count", "consumer1_final"), [(3, [(T, 1)]), (4, [(T, 1), (T, 3)])], ids=["equal", "unequal"]
)
def test_sticky_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple_consumers_in_same_generation(
    partition_count: int,
    consumer1_final: list[TopicPartition],
) -> None:
    """StickyAssignorTest.testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultiple...PerConsumer.

    Eager: the doubly claimed topic-0 goes straight to consumer3 (cooperative-sticky withholds it; see that file).
    """
    subscriptions = {C1: _owned([T], [(T, 0), (T, 1)]), C2: _owned([T], [(T, 0), (T, 2)]), C3: _owned([T], [])}
    _, final = _run("sticky", {T: partition_count}, subscriptions)
    assert final == {C1: consumer1_final, C2: [(T, 2)], C3: [(T, 0)]}
    assert is_fully_balanced(final)


@pytest.mark.parametrize("all_subscriptions_equal", [True, False], ids=["equal", "unequal"])
def test_sticky_assignment_with_multiple_generations_1(all_subscriptions_equal: bool) -> None:
    """StickyAssignorTest.testAssignmentWithMultipleGenerations1: a returning member's older claim loses to newer."""
    all_topics = [T, T2]
    c2_topics = all_topics if all_subscriptions_equal else [T]
    counts = {T: 6, T2: 6}
    _, r1 = _run(
        "sticky", counts, {C1: Subscription(all_topics), C2: Subscription(c2_topics), C3: Subscription(all_topics)}
    )
    assert [len(r1[c]) for c in (C1, C2, C3)] == [4, 4, 4]

    _, r2 = _run("sticky", counts, {C1: _owned(all_topics, r1[C1]), C2: _owned(c2_topics, r1[C2])})
    assert [len(r2[C1]), len(r2[C2])] == [6, 6]
    if all_subscriptions_equal:  # only the constrained algorithm promises this one
        assert set(r1[C1]) <= set(r2[C1])
    assert set(r1[C2]) <= set(r2[C2])
    assert set(r2[C2]) & set(r1[C3])

    _, r3 = _run("sticky", counts, {C2: _owned(c2_topics, r2[C2], 2), C3: _owned(all_topics, r1[C3], 1)})
    assert [len(r3[C2]), len(r3[C3])] == [6, 6]
    assert not set(r3[C2]) & set(r3[C3])
    assert is_fully_balanced(r3)


@pytest.mark.parametrize("all_subscriptions_equal", [True, False], ids=["equal", "unequal"])
def test_sticky_assignment_with_multiple_generations_2(all_subscriptions_equal: bool) -> None:
    """StickyAssignorTest.testAssignmentWithMultipleGenerations2."""
    all_topics = [T, T2, T3]
    c1_topics = all_topics if all_subscriptions_equal else [T]
    c3_topics = all_topics if all_subscriptions_equal else [T, T2]
    counts = {T: 4, T2: 4, T3: 4}
    _, r1 = _run(
        "sticky", counts, {C1: Subscription(c1_topics), C2: Subscription(all_topics), C3: Subscription(c3_topics)}
    )
    assert [len(r1[c]) for c in (C1, C2, C3)] == [4, 4, 4]

    _, r2 = _run("sticky", counts, {C2: _owned(all_topics, r1[C2], 1)})
    assert len(r2[C2]) == 12 and set(r1[C2]) <= set(r2[C2])

    subscriptions = {
        C1: _owned(c1_topics, r1[C1], 1),
        C2: _owned(all_topics, r2[C2], 2),
        C3: _owned(c3_topics, r1[C3], 1),
    }
    _, r3 = _run("sticky", counts, subscriptions)
    assert [len(r3[c]) for c in (C1, C2, C3)] == [4, 4, 4]
    assert is_fully_balanced(r3)


@pytest.mark.parametrize("all_subscriptions_equal", [True, False], ids=["equal", "unequal"])
def test_sticky_assignment_with_conflicting_previous_generations(all_subscriptions_equal: bool) -> None:
    """StickyAssignorTest.testAssignmentWithConflictingPreviousGenerations: generation 2 claims win over 1."""
    all_topics = [T, T2, T3]
    c1_topics = all_topics if all_subscriptions_equal else [T]
    c2_topics = all_topics if all_subscriptions_equal else [T, T2]
    c1_claims = (
        [(T, 0), (T, 1), (T, 2), (T2, 2), (T2, 3), (T3, 0)] if all_subscriptions_equal else [(T, p) for p in range(4)]
    )
    c2_claims = [(T, 0), (T, 1), (T2, 0), (T2, 1), (T2, 2), (T2, 3)]
    c3_claims = [(T, 2), (T, 3), (T3, 0), (T3, 1), (T3, 2), (T3, 3)]
    subscriptions = {
        C1: _owned(c1_topics, c1_claims, 1),
        C2: _owned(c2_topics, c2_claims, 2),
        C3: _owned(all_topics, c3_claims, 2),
    }
    _, final = _run("sticky", {T: 4, T2: 4, T3: 4}, subscriptions)
    assert [len(final[c]) for c in (C1, C2, C3)] == [4, 4, 4]
    assert set(final[C2]) <= set(c2_claims)
    assert set(final[C3]) <= set(c3_claims)
    assert is_fully_balanced(final)


@both_sticky_strategies
def test_large_assignment_with_multiple_consumers_leaving_and_random_subscription(strategy: str) -> None:
    """AbstractStickyAssignorTest.testLargeAssignmentWithMultipleConsumersLeavingAndRandomSubscription (seeded)."""
    rng = random.Random(13)
    counts = {_name("t", i, 40): rng.randrange(10) + 1 for i in range(40)}
    topics = list(counts)
    subscriptions = {
        _name("c", i, 200): Subscription([rng.choice(topics) for _ in range(rng.randrange(20))]) for i in range(200)
    }
    _, final = _run(strategy, counts, subscriptions)
    subscriptions = {
        c: _owned(list(s.topics), final[c]) if c != _name("c", 0, 200) else s for c, s in subscriptions.items()
    }
    for _ in range(50):
        subscriptions.pop(_name("c", rng.randrange(200), 200), None)
    _run(strategy, counts, subscriptions)


@both_sticky_strategies
def test_reassignment_with_random_subscriptions_and_changes(strategy: str) -> None:
    """AbstractStickyAssignorTest.testReassignmentWithRandomSubscriptionsAndChanges (seeded, 20 rounds of 100)."""
    rng = random.Random(7)

    def random_sublist(topics: list[str]) -> list[str]:
        chosen = list(topics)
        for _ in range(rng.randrange(len(topics))):
            chosen.pop(rng.randrange(len(chosen)))
        return sorted(chosen)

    for _ in range(20):
        counts = {_name("t", i, 20): i + 1 for i in range(10 + rng.randrange(10))}
        topics = list(counts)
        members = [_name("c", i, 40) for i in range(20 + rng.randrange(20))]
        subscriptions = {c: Subscription(random_sublist(topics)) for c in members}
        _, final = _run(strategy, counts, subscriptions)
        _run(strategy, counts, {c: _owned(random_sublist(topics), final[c]) for c in members})


# --- issue 13, groups2: the seeds' C1/C2/C3 example (a member dies and comes back), with each member's owned
# partitions in assignment order, as Kafka's StickyAssignor userData carries them.


@both_sticky_strategies
def test_seeds_c1_c2_c3_on_six_partitions_the_returning_member_gets_its_own_back(strategy: str) -> None:
    """Three members share 6 partitions (the e2e's group); c3 dies; c1 and c2 take its partitions over and keep
    their own (the taken-over ones appended, in assignment order); c3 comes back as a new member and gets its old
    partitions {2, 5} back, nothing else moving.

    c1 owns [0, 3, 2]: it keeps its first two in its own order, [0, 3]. Kafka 3.8 (KAFKA-16277) sorts them first
    and keeps [0, 2], giving c3 partition 3; Hightide sorts only when the owned partitions span topics (Kafka's
    testTopicBalanceAfterReassignment and testAddRemoveTwoConsumersTwoTopics, above, still pass).
    """
    counts = {T: 6}
    _, first = _run(strategy, counts, {m: Subscription([T]) for m in (C1, C2, C3)})
    assert first == {C1: [(T, 0), (T, 3)], C2: [(T, 1), (T, 4)], C3: [(T, 2), (T, 5)]}

    _, second = _run(strategy, counts, {m: _owned([T], first[m], 1) for m in (C1, C2)})
    assert second == {C1: [(T, 0), (T, 3), (T, 2)], C2: [(T, 1), (T, 4), (T, 5)]}

    back = {C1: _owned([T], second[C1], 2), C2: _owned([T], second[C2], 2), "consumer3-new": Subscription([T])}
    result, third = _run(strategy, counts, back)
    assert third == {C1: first[C1], C2: first[C2], "consumer3-new": first[C3]}
    # Cooperative: c1 and c2 revoke 2 and 5 first; c3 gets them in the follow-up rebalance.
    _transferring(strategy, result, {(T, 2): "consumer3-new", (T, 5): "consumer3-new"})


def test_owned_partitions_of_several_topics_are_still_kept_by_partition_number() -> None:
    """Where a member's owned partitions span topics, the constrained algorithm sorts them by (partition, topic)
    as Kafka 3.8 does (KAFKA-16277), whatever order the member reported: c1 over quota keeps the lowest-numbered
    ones across both topics, so each member keeps a spread of topics."""
    counts = {T1: 2, T2: 2}
    subscriptions = {
        C1: _owned([T1, T2], [(T2, 1), (T1, 1), (T2, 0), (T1, 0)]),
        C2: Subscription([T1, T2]),
    }
    result = assign("sticky", counts, subscriptions)
    assert result.partitions == {C1: [(T1, 0), (T2, 0)], C2: [(T1, 1), (T2, 1)]}


def test_owned_partitions_of_one_topic_are_kept_in_the_members_order() -> None:
    """With one topic, an over-quota member keeps the first of its owned partitions in the order it reported
    them (its assignment's order), not the lowest-numbered."""
    counts = {T: 4}
    subscriptions = {C1: _owned([T], [(T, 3), (T, 1), (T, 0), (T, 2)]), C2: Subscription([T])}
    result = assign("sticky", counts, subscriptions)
    assert result.partitions == {C1: [(T, 3), (T, 1)], C2: [(T, 0), (T, 2)]}
