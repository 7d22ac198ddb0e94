"""The roundrobin assignor: all partitions of all subscribed topics dealt around the sorted members in turn.

Room: libs/core (rules as pure functions). Owns Kafka's `RoundRobinAssignor`: partitions ordered by topic name
(Java's `TreeSet<String>`, i.e. `String.compareTo`) then partition number; members sorted as range sorts them
(static members by group.instance.id first, then dynamic ones by member id); a circular cursor over the
members skips those not subscribed to the partition's topic. With equal subscriptions the counts differ by at
most one; with unequal ones they may not.
"""

from __future__ import annotations

from hightide.core.assignors._group import Group, TopicPartition, member_sort_key
from hightide.core.assignors._java import java_string_key


def assign_roundrobin(group: Group) -> dict[str, list[TopicPartition]]:
    """Kafka's `RoundRobinAssignor.assign`: member id -> its partitions (every member present, maybe empty)."""
    subscriptions = group.subscriptions
    assignment: dict[str, list[TopicPartition]] = {member_id: [] for member_id in subscriptions}
    # Utils.sorted over the members in the subscriptions HashMap's order; the sort is stable, as Java's.
    members = sorted(subscriptions.keys(), key=lambda m: member_sort_key(m, subscriptions[m].group_instance_id))
    topics = sorted({t for s in subscriptions.values() for t in s.topics}, key=java_string_key)
    cursor = 0  # Kafka's CircularIterator: peek() is members[cursor], next() returns it and advances
    for topic in topics:
        for partition in range(group.partitions_per_topic.get(topic) or 0):
            # The topic came from some member's subscription, so this loop ends within one lap.
            while topic not in subscriptions[members[cursor]].topics:
                cursor = (cursor + 1) % len(members)
            assignment[members[cursor]].append((topic, partition))
            cursor = (cursor + 1) % len(members)
    return assignment
