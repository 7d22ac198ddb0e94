"""The roundrobin assignor gives what Kafka's RoundRobinAssignor gives, order within a member included.

Method: every case of Kafka's RoundRobinAssignorTest (the Java test's name is in each docstring), run through
`assign("roundrobin", ...)` and compared as lists, as Kafka's test compares them; then the seeds' two
walkthroughs (equal subscriptions deal evenly; unequal ones need not).
"""

from __future__ import annotations

from hightide.core.assignors import Assignment, Subscription, assign

T = "topic"
T1 = "topic1"
T2 = "topic2"


def _roundrobin(partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]) -> Assignment:
    return assign("roundrobin", partitions_per_topic, subscriptions)


def test_one_consumer_no_topic() -> None:
    """RoundRobinAssignorTest.testOneConsumerNoTopic."""
    assert _roundrobin({}, {"consumer": Subscription([])}).partitions == {"consumer": []}


def test_one_consumer_nonexistent_topic() -> None:
    """RoundRobinAssignorTest.testOneConsumerNonexistentTopic."""
    assert _roundrobin({}, {"consumer": Subscription([T])}).partitions == {"consumer": []}


def test_one_consumer_one_topic() -> None:
    """RoundRobinAssignorTest.testOneConsumerOneTopic."""
    assert _roundrobin({T: 3}, {"consumer": Subscription([T])}).partitions == {"consumer": [(T, 0), (T, 1), (T, 2)]}


def test_only_assigns_partitions_from_subscribed_topics() -> None:
    """RoundRobinAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics."""
    result = _roundrobin({T: 3, "other": 3}, {"consumer": Subscription([T])})
    assert result.partitions == {"consumer": [(T, 0), (T, 1), (T, 2)]}


def test_one_consumer_multiple_topics() -> None:
    """RoundRobinAssignorTest.testOneConsumerMultipleTopics."""
    result = _roundrobin({T1: 1, T2: 2}, {"consumer": Subscription([T1, T2])})
    assert result.partitions == {"consumer": [(T1, 0), (T2, 0), (T2, 1)]}


def test_two_consumers_one_topic_one_partition() -> None:
    """RoundRobinAssignorTest.testTwoConsumersOneTopicOnePartition."""
    result = _roundrobin({T: 1}, {"consumer1": Subscription([T]), "consumer2": Subscription([T])})
    assert result.partitions == {"consumer1": [(T, 0)], "consumer2": []}


def test_two_consumers_one_topic_two_partitions() -> None:
    """RoundRobinAssignorTest.testTwoConsumersOneTopicTwoPartitions."""
    result = _roundrobin({T: 2}, {"consumer1": Subscription([T]), "consumer2": Subscription([T])})
    assert result.partitions == {"consumer1": [(T, 0)], "consumer2": [(T, 1)]}


def test_multiple_consumers_mixed_topics() -> None:
    """RoundRobinAssignorTest.testMultipleConsumersMixedTopics."""
    result = _roundrobin(
        {T1: 3, T2: 2},
        {"consumer1": Subscription([T1]), "consumer2": Subscription([T1, T2]), "consumer3": Subscription([T1])},
    )
    assert result.partitions == {
        "consumer1": [(T1, 0)],
        "consumer2": [(T1, 1), (T2, 0), (T2, 1)],
        "consumer3": [(T1, 2)],
    }


def test_two_dynamic_consumers_two_topics_six_partitions() -> None:
    """RoundRobinAssignorTest.testTwoDynamicConsumersTwoTopicsSixPartitions."""
    result = _roundrobin({T1: 3, T2: 3}, {"consumer1": Subscription([T1, T2]), "consumer2": Subscription([T1, T2])})
    assert result.partitions == {
        "consumer1": [(T1, 0), (T1, 2), (T2, 1)],
        "consumer2": [(T1, 1), (T2, 0), (T2, 2)],
    }


def test_two_static_consumers_two_topics_six_partitions() -> None:
    """RoundRobinAssignorTest.testTwoStaticConsumersTwoTopicsSixPartitions: instance ids decide, not member ids."""
    result = _roundrobin(
        {T1: 3, T2: 3},
        {
            "consumer-b": Subscription([T1, T2], group_instance_id="instance1"),
            "consumer-a": Subscription([T1, T2], group_instance_id="instance2"),
        },
    )
    assert result.partitions == {
        "consumer-b": [(T1, 0), (T1, 2), (T2, 1)],
        "consumer-a": [(T1, 1), (T2, 0), (T2, 2)],
    }


def test_one_static_consumer_and_one_dynamic_consumer_two_topics_six_partitions() -> None:
    """RoundRobinAssignorTest.testOneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions."""
    result = _roundrobin(
        {T1: 3, T2: 3},
        {"consumer-b": Subscription([T1, T2], group_instance_id="instance1"), "consumer-a": Subscription([T1, T2])},
    )
    assert result.partitions == {
        "consumer-b": [(T1, 0), (T1, 2), (T2, 1)],
        "consumer-a": [(T1, 1), (T2, 0), (T2, 2)],
    }


def test_static_member_round_robin_assignment_persistent() -> None:
    """RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistent."""
    members = {f"consumer{i}": Subscription([T1, T2], group_instance_id=f"instance{i}") for i in (1, 2, 3)}
    members["consumer4"] = Subscription([T1, T2])
    expected = {
        "consumer1": [(T1, 0), (T2, 1)],
        "consumer2": [(T1, 1), (T2, 2)],
        "consumer3": [(T1, 2)],
        "consumer4": [(T2, 0)],
    }
    assert _roundrobin({T1: 3, T2: 3}, members).partitions == expected

    del members["consumer4"]
    members["consumer5"] = Subscription([T1, T2])
    expected["consumer5"] = expected.pop("consumer4")
    assert _roundrobin({T1: 3, T2: 3}, members).partitions == expected


def test_static_member_round_robin_assignment_persistent_after_member_id_changes() -> None:
    """RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistentAfterMemberIdChanges."""
    members = {f"consumer{i}": Subscription([T1, T2], group_instance_id=f"instance{i}") for i in (1, 2, 3)}

    def by_instance() -> dict[str | None, list[tuple[str, int]]]:
        result = _roundrobin({T1: 5, T2: 5}, members)
        return {s.group_instance_id: result.partitions[m] for m, s in members.items()}

    before = by_instance()
    assert before == {
        "instance1": [(T1, 0), (T1, 3), (T2, 1), (T2, 4)],
        "instance2": [(T1, 1), (T1, 4), (T2, 2)],
        "instance3": [(T1, 2), (T2, 0), (T2, 3)],
    }
    members["consumer4"] = members.pop("consumer3")
    members["consumer5"] = members.pop("consumer2")
    assert by_instance() == before


def test_seed_walkthrough_equal_subscriptions_deal_evenly() -> None:
    """The seeds' example: C0 and C1 both on T1 and T2 of three partitions each get three partitions apiece."""
    result = _roundrobin({"T1": 3, "T2": 3}, {"C0": Subscription(["T1", "T2"]), "C1": Subscription(["T1", "T2"])})
    assert result.partitions == {
        "C0": [("T1", 0), ("T1", 2), ("T2", 1)],
        "C1": [("T1", 1), ("T2", 0), ("T2", 2)],
    }


def test_seed_walkthrough_unequal_subscriptions_can_be_uneven() -> None:
    """The seeds' example: C0 on T1; C1 on T1, T2; C2 on T1, T2, T3 (1, 2, 3 partitions): C2 gets four of six."""
    result = _roundrobin(
        {"T1": 1, "T2": 2, "T3": 3},
        {"C0": Subscription(["T1"]), "C1": Subscription(["T1", "T2"]), "C2": Subscription(["T1", "T2", "T3"])},
    )
    assert result.partitions == {
        "C0": [("T1", 0)],
        "C1": [("T2", 0)],
        "C2": [("T2", 1), ("T3", 0), ("T3", 1), ("T3", 2)],
    }
