"""Which member of a consumer group reads which partition: Kafka's four client-side assignors, bit for bit.

Room: libs/core (rules as pure functions). Owns `assign(strategy, partitions_per_topic, subscriptions)`, the
computation a group's leader runs between JoinGroup and SyncGroup, for the strategies of Kafka's
`partition.assignment.strategy`: `range`, `roundrobin`, `sticky` and `cooperative-sticky`. The results equal
Kafka's own (`RangeAssignor`, `RoundRobinAssignor`, `StickyAssignor`, `CooperativeStickyAssignor`), ties
included: where Kafka iterates a `HashMap`, the order is Java's (see `_java`). Rack awareness
(`client.rack`) is left out: Hightide's members carry no rack, which is the case in which Kafka skips it.

Never does I/O, reads a clock or draws randomness; the coordinator service calls it and sends the result.
"""

from __future__ import annotations

from collections.abc import Mapping

from hightide.core.assignors._group import (
    DEFAULT_GENERATION,
    Assignment,
    AssignorInputError,
    Group,
    Subscription,
    TopicPartition,
    member_sort_key,
)
from hightide.core.assignors._range import assign_range
from hightide.core.assignors._roundrobin import assign_roundrobin
from hightide.core.assignors._sticky import assign_sticky

__all__ = [
    "DEFAULT_GENERATION",
    "STRATEGIES",
    "Assignment",
    "AssignorInputError",
    "Subscription",
    "TopicPartition",
    "assign",
    "member_sort_key",
]

STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
"""Kafka's assignor names (`ConsumerPartitionAssignor.name()`), as `partition.assignment.strategy` lists them."""


def assign(
    strategy: str, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> Assignment:
    """Assign the subscribed topics' partitions to the members, as Kafka's assignor named `strategy` would.

    `partitions_per_topic` gives each topic's partition count (topics nobody subscribes to, and topics with no
    partitions, are ignored, as Kafka's leader ignores them); `subscriptions` maps member id to Subscription,
    in the order the coordinator lists the members. Every member appears in the result, maybe with no
    partitions. Raises AssignorInputError for an unknown strategy or a negative partition count.
    """
    if strategy not in STRATEGIES:
        raise AssignorInputError(f"unknown assignment strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    group = Group.of(partitions_per_topic, subscriptions)
    if not subscriptions:
        return Assignment({})
    transferring: dict[TopicPartition, str] = {}
    if strategy == "range":
        raw = assign_range(group)
    elif strategy == "roundrobin":
        raw = assign_roundrobin(group)
    else:
        raw, transferring = assign_sticky(group, cooperative=strategy == "cooperative-sticky")
    return Assignment({member_id: raw[member_id] for member_id in subscriptions}, transferring)
