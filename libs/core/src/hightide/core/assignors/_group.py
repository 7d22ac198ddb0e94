"""The assignors' shared vocabulary: a member's subscription, the result, and the group as Kafka's leader sees it.

Room: libs/core (rules as pure functions). Owns `Subscription`, `Assignment`, the checks on what a caller passes
in, and `Group`: the subscriptions and partition counts in the `HashMap`s Kafka's group leader builds from them
(`ConsumerCoordinator.onLeaderElected` and `AbstractPartitionAssignor.assign(Cluster, GroupSubscription)`), so
that every assignor iterates them in Kafka's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hightide.core.assignors._java import JavaHashMap, java_string_hash, java_string_hash_map, java_string_key
from hightide.protocol.errors import ErrorCode, HightideError

TopicPartition = tuple[str, int]
"""(topic, partition), Kafka's `TopicPartition`."""

DEFAULT_GENERATION = -1
"""Kafka's `AbstractStickyAssignor.DEFAULT_GENERATION`: the member reports no generation."""


class AssignorInputError(HightideError):
    """An assignment request Kafka's group leader could not run: an unknown strategy or a bad partition count."""

    error_code = ErrorCode.INVALID_REQUEST


@dataclass(frozen=True, slots=True)
class Subscription:
    """What one member sends in its JoinGroup metadata (Kafka's `ConsumerPartitionAssignor.Subscription`).

    `owned_partitions` and `generation` are the member's assignment in the generation it last completed
    (`ownedPartitions` and `generationId` of ConsumerProtocolSubscription v1+, or the eager sticky assignor's
    user data, which carries the same two things); the sticky assignors read them, range and roundrobin do not.
    `group_instance_id` is set for a static member (KIP-345).
    """

    topics: Sequence[str]
    owned_partitions: Sequence[TopicPartition] = ()
    generation: int = DEFAULT_GENERATION
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            raise AssignorInputError(f"subscription topics must be a list of names, not the string {self.topics!r}")
        object.__setattr__(self, "topics", tuple(self.topics))
        try:
            owned = tuple((str(topic), int(partition)) for topic, partition in self.owned_partitions)
        except (TypeError, ValueError) as e:
            raise AssignorInputError(f"owned partitions must be (topic, partition) pairs: {e}") from None
        object.__setattr__(self, "owned_partitions", owned)


@dataclass(frozen=True, slots=True)
class Assignment:
    """The leader's answer: member id -> its partitions, and (cooperative-sticky only) the partitions in flight.

    `transferring` maps a partition that changes owner in this rebalance to the member that will get it: the
    cooperative protocol withholds it from that member (it is not in `partitions`) until its current owner has
    revoked it and the group rebalanced once more (KIP-429). Empty for the eager strategies.
    """

    partitions: dict[str, list[TopicPartition]]
    transferring: dict[TopicPartition, str] = field(default_factory=dict)


def member_sort_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes]:
    """Kafka's `MemberInfo.compareTo`: static members first, by group.instance.id; then dynamic ones by member id.

    Range and roundrobin sort members with it, so a static member keeps its place (and its partitions) when it
    rejoins under a new member id.
    """
    if group_instance_id is not None:
        return (0, java_string_key(group_instance_id))
    return (1, java_string_key(member_id))


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass(slots=True)
class Group:
    """The inputs as Kafka's leader holds them: `HashMap`s whose iteration order the assignors inherit.

    `subscriptions` is filled in the caller's member order, as the leader fills its map from the JoinGroup
    response's member list. `partitions_per_topic` holds only subscribed topics with at least one partition,
    filled from the `HashSet` of all subscribed topics, as `AbstractPartitionAssignor.assign(Cluster, ...)`
    does. Each member's topics lose duplicates (Kafka's consumer sends a set); its owned partitions lose
    duplicates (Kafka would count a duplicate as a conflicting claim with itself) and partitions that do not
    exist (one past the topic's count breaks Kafka's merge of sorted partition lists); a negative generation
    becomes -1, as Kafka's `Subscription` turns it into "no generation".
    """

    subscriptions: JavaHashMap[str, Subscription]
    partitions_per_topic: JavaHashMap[str, int]

    @classmethod
    def of(cls, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Group:
        for topic, count in partitions_per_topic.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise AssignorInputError(f"topic {topic!r} has partition count {count!r}; it must be an int >= 0")
        members: JavaHashMap[str, Subscription] = JavaHashMap(java_string_hash)
        for member_id, subscription in subscriptions.items():
            if not isinstance(subscription, Subscription):
                raise AssignorInputError(
                    f"member {member_id!r} needs a Subscription, not {type(subscription).__name__}"
                )
            members.put(member_id, subscription)
        all_subscribed = java_string_hash_map(topic for s in members.values() for topic in s.topics)
        counts: JavaHashMap[str, int] = JavaHashMap(java_string_hash)
        for topic in all_subscribed:
            if partitions_per_topic.get(topic, 0) > 0:
                counts.put(topic, partitions_per_topic[topic])
        cleaned: JavaHashMap[str, Subscription] = JavaHashMap(java_string_hash)
        for member_id, subscription in members.items():
            owned = [tp for tp in dict.fromkeys(subscription.owned_partitions) if 0 <= tp[1] < (counts.get(tp[0]) or 0)]
            generation = max(subscription.generation, DEFAULT_GENERATION)  # Kafka: negative is no generation
            cleaned.put(
                member_id, Subscription(_dedupe(subscription.topics), owned, generation, subscription.group_instance_id)
            )
        return cls(cleaned, counts)
