"""The range assignor: each topic on its own, its partitions cut into contiguous ranges, one per member.

Room: libs/core (rules as pure functions). Owns Kafka's `RangeAssignor` without rack awareness (every member
here has no `client.rack`, which is the case in which Kafka skips its rack matching). For each topic, the
members subscribed to it are sorted (static members first, by group.instance.id, then by member id); with P
partitions and N members, the first P % N members get P // N + 1 partitions and the rest P // N, in order.

Java order: a member's list holds its topics in the iteration order of the leader's partitions-per-topic
`HashMap` (see `_java`); Kafka's tests compare the lists as sets, and so does a consumer, but a caller who
prints the lists sees Kafka's order.
"""

from __future__ import annotations

from hightide.core.assignors._group import Group, TopicPartition, member_sort_key


def assign_range(group: Group) -> dict[str, list[TopicPartition]]:
    """Kafka's `RangeAssignor.assign`: member id -> its partitions (every member present, maybe empty)."""
    consumers_per_topic: dict[str, list[str]] = {}
    for member_id, subscription in group.subscriptions.items():
        for topic in subscription.topics:
            consumers_per_topic.setdefault(topic, []).append(member_id)
    assignment: dict[str, list[TopicPartition]] = {member_id: [] for member_id in group.subscriptions}
    for topic, partition_count in group.partitions_per_topic.items():
        members = sorted(
            consumers_per_topic.get(topic, []),
            key=lambda m: member_sort_key(m, group.subscriptions[m].group_instance_id),
        )
        if not members:
            continue
        per_member, with_extra = divmod(partition_count, len(members))
        start = 0
        for index, member_id in enumerate(members):
            length = per_member + (1 if index < with_extra else 0)
            assignment[member_id].extend((topic, p) for p in range(start, start + length))
            start += length
        assert start == partition_count, "every partition of a subscribed topic is assigned"
    return assignment
