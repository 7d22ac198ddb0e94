"""The range assignor gives what Kafka's RangeAssignor gives.

Method: Kafka's RangeAssignorTest cases (the rack-free ones; the Java test's name is in each test's name),
run through `assign("range", ...)`, then the seeds' walkthrough (two consumers, two topics of three
partitions: C1 ends up with two more partitions than C2) and the input errors. Partition lists are compared
as lists where Kafka's order is defined (one topic) and as sets where Kafka's own test compares sets.
"""

from __future__ import annotations

import pytest

from hightide.core.assignors import Assignment, AssignorInputError, Subscription, assign

T1 = "topic1"
T2 = "topic2"


def _range(partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]) -> Assignment:
    return assign("range", partitions_per_topic, subscriptions)


def _sets(assignment: Assignment) -> dict[str, set[tuple[str, int]]]:
    return {member: set(partitions) for member, partitions in assignment.partitions.items()}


def test_one_consumer_no_topic() -> None:
    """RangeAssignorTest.testOneConsumerNoTopic."""
    assert _range({}, {"consumer1": Subscription([])}).partitions == {"consumer1": []}


def test_one_consumer_nonexistent_topic() -> None:
    """RangeAssignorTest.testOneConsumerNonexistentTopic."""
    assert _range({}, {"consumer1": Subscription([T1])}).partitions == {"consumer1": []}


def test_one_consumer_one_topic() -> None:
    """RangeAssignorTest.testOneConsumerOneTopic."""
    result = _range({T1: 3}, {"consumer1": Subscription([T1])})
    assert result.partitions == {"consumer1": [(T1, 0), (T1, 1), (T1, 2)]}


def test_only_assigns_partitions_from_subscribed_topics() -> None:
    """RangeAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics."""
    result = _range({T1: 3, "other": 3}, {"consumer1": Subscription([T1])})
    assert result.partitions == {"consumer1": [(T1, 0), (T1, 1), (T1, 2)]}


def test_one_consumer_multiple_topics() -> None:
    """RangeAssignorTest.testOneConsumerMultipleTopics."""
    result = _range({T1: 1, T2: 2}, {"consumer1": Subscription([T1, T2])})
    assert _sets(result) == {"consumer1": {(T1, 0), (T2, 0), (T2, 1)}}


def test_two_consumers_one_topic_one_partition() -> None:
    """RangeAssignorTest.testTwoConsumersOneTopicOnePartition."""
    result = _range({T1: 1}, {"consumer1": Subscription([T1]), "consumer2": Subscription([T1])})
    assert result.partitions == {"consumer1": [(T1, 0)], "consumer2": []}


def test_two_consumers_one_topic_two_partitions() -> None:
    """RangeAssignorTest.testTwoConsumersOneTopicTwoPartitions."""
    result = _range({T1: 2}, {"consumer1": Subscription([T1]), "consumer2": Subscription([T1])})
    assert result.partitions == {"consumer1": [(T1, 0)], "consumer2": [(T1, 1)]}


def test_multiple_consumers_mixed_topics() -> None:
    """RangeAssignorTest.testMultipleConsumersMixedTopics."""
    result = _range(
        {T1: 3, T2: 2},
        {
            "consumer1": Subscription([T1]),
            "consumer2": Subscription([T1, T2]),
            "consumer3": Subscription([T1]),
        },
    )
    assert _sets(result) == {
        "consumer1": {(T1, 0)},
        "consumer2": {(T1, 1), (T2, 0), (T2, 1)},
        "consumer3": {(T1, 2)},
    }


def test_two_consumers_two_topics_six_partitions() -> None:
    """RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions."""
    result = _range({T1: 3, T2: 3}, {"consumer1": Subscription([T1, T2]), "consumer2": Subscription([T1, T2])})
    assert _sets(result) == {
        "consumer1": {(T1, 0), (T1, 1), (T2, 0), (T2, 1)},
        "consumer2": {(T1, 2), (T2, 2)},
    }


def test_two_static_consumers_two_topics_six_partitions() -> None:
    """RangeAssignorTest.testTwoStaticConsumersTwoTopicsSixPartitions: static members sort by instance id."""
    result = _range(
        {T1: 3, T2: 3},
        {
            "consumer-b": Subscription([T1, T2], group_instance_id="instance1"),
            "consumer-a": Subscription([T1, T2], group_instance_id="instance2"),
        },
    )
    assert _sets(result) == {
        "consumer-b": {(T1, 0), (T1, 1), (T2, 0), (T2, 1)},
        "consumer-a": {(T1, 2), (T2, 2)},
    }


def test_one_static_consumer_and_one_dynamic_consumer_two_topics_six_partitions() -> None:
    """RangeAssignorTest.testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions: static sorts first."""
    result = _range(
        {T1: 3, T2: 3},
        {
            "consumer-b": Subscription([T1, T2], group_instance_id="instance1"),
            "consumer-a": Subscription([T1, T2]),
        },
    )
    assert _sets(result) == {
        "consumer-b": {(T1, 0), (T1, 1), (T2, 0), (T2, 1)},
        "consumer-a": {(T1, 2), (T2, 2)},
    }


def _static_members(count: int, topics: list[str]) -> dict[str, Subscription]:
    return {f"consumer{i}": Subscription(topics, group_instance_id=f"instance{i}") for i in range(1, count + 1)}


def test_static_member_range_assignment_persistent() -> None:
    """RangeAssignorTest.testStaticMemberRangeAssignmentPersistent: a new dynamic member takes the old one's place."""
    members = _static_members(3, [T1, T2]) | {"consumer4": Subscription([T1, T2])}
    expected = {
        "consumer1": {(T1, 0), (T1, 1), (T2, 0)},
        "consumer2": {(T1, 2), (T2, 1)},
        "consumer3": {(T1, 3), (T2, 2)},
        "consumer4": {(T1, 4), (T2, 3)},
    }
    assert _sets(_range({T1: 5, T2: 4}, members)) == expected

    del members["consumer4"]
    members["consumer5"] = Subscription([T1, T2])
    expected["consumer5"] = expected.pop("consumer4")
    assert _sets(_range({T1: 5, T2: 4}, members)) == expected


def _by_instance(assignment: Assignment, members: dict[str, Subscription]) -> dict[str, set[tuple[str, int]]]:
    return {
        s.group_instance_id: set(assignment.partitions[m])
        for m, s in members.items()
        if s.group_instance_id is not None
    }


def test_static_member_range_assignment_persistent_after_member_id_changes() -> None:
    """RangeAssignorTest.testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges."""
    members = _static_members(3, [T1, T2])
    before = _by_instance(_range({T1: 5, T2: 5}, members), members)
    assert before == {
        "instance1": {(T1, 0), (T1, 1), (T2, 0), (T2, 1)},
        "instance2": {(T1, 2), (T1, 3), (T2, 2), (T2, 3)},
        "instance3": {(T1, 4), (T2, 4)},
    }
    members["consumer4"] = members.pop("consumer3")
    members["consumer5"] = members.pop("consumer2")
    assert _by_instance(_range({T1: 5, T2: 5}, members), members) == before


def test_seed_walkthrough_range_favours_the_first_consumer_on_every_topic() -> None:
    """The seeds' range example: per topic C1 gets one partition more than C2, so over two topics two more."""
    result = _range({"t0": 3, "t1": 3}, {"C1": Subscription(["t0", "t1"]), "C2": Subscription(["t0", "t1"])})
    assert _sets(result) == {"C1": {("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)}, "C2": {("t0", 2), ("t1", 2)}}
    assert len(result.partitions["C1"]) - len(result.partitions["C2"]) == 2


def test_a_members_topics_come_in_kafkas_hashmap_order() -> None:
    """Kafka appends topic by topic in its HashMap's order, not in the order the caller listed the topics.

    String.hashCode("a") = 97 and ("b") = 98: buckets 1 and 2 of a 16-bucket table, so "a" comes first.
    """
    result = _range({"b": 1, "a": 1}, {"c": Subscription(["b", "a"])})
    assert result.partitions == {"c": [("a", 0), ("b", 0)]}


def test_an_unknown_strategy_is_refused_with_a_clear_error() -> None:
    with pytest.raises(AssignorInputError, match="unknown assignment strategy 'ranged'"):
        assign("ranged", {T1: 1}, {"c": Subscription([T1])})


def test_a_negative_partition_count_is_refused() -> None:
    with pytest.raises(AssignorInputError, match="partition count -1"):
        assign("range", {T1: -1}, {"c": Subscription([T1])})


def test_a_topic_name_where_a_list_belongs_is_refused() -> None:
    """Subscription("orders") would otherwise subscribe to the topics "o", "r", "d", ..."""
    with pytest.raises(AssignorInputError, match="not the string 'orders'"):
        Subscription("orders")


def test_a_member_without_a_subscription_is_refused() -> None:
    with pytest.raises(AssignorInputError, match="member 'c' needs a Subscription, not list"):
        assign("range", {T1: 1}, {"c": [T1]})  # type: ignore[dict-item]


def test_an_empty_group_gets_an_empty_assignment() -> None:
    for strategy in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        assert assign(strategy, {T1: 3}, {}) == Assignment({})


def test_an_owned_partition_that_is_not_a_pair_is_refused() -> None:
    with pytest.raises(AssignorInputError, match=r"owned partitions must be \(topic, partition\) pairs"):
        Subscription([T1], owned_partitions=[(T1, "zero")])
