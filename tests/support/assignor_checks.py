"""Kafka's checks on an assignment, shared by the assignor unit and property tests.

`verify_validity_and_balance` is AbstractStickyAssignorTest.verifyValidityAndBalance: every assigned partition's
topic is one its member subscribes to, no partition goes to two members, and two members whose loads differ by
2+ hold no partitions of a common topic. `settle_cooperative` is CooperativeStickyAssignorTest's override of it:
while a round revokes partitions, no partition may be revoked and handed to another member in the same round,
and the group rebalances again (members report what they now own) until nothing is revoked.
"""

from __future__ import annotations

from hightide.core.assignors import Subscription, TopicPartition, assign

FOLLOW_UP_REBALANCES_MAX = 4  # Kafka's test allows at most four follow-up rebalances


def verify_validity_and_balance(
    subscriptions: dict[str, Subscription], partitions: dict[str, list[TopicPartition]]
) -> None:
    assert set(partitions) == set(subscriptions), "every member gets an assignment, and only members do"
    members = sorted(partitions)
    for i, member in enumerate(members):
        mine = partitions[member]
        for topic, p in mine:
            assert topic in subscriptions[member].topics, f"{member} got {topic}-{p} without subscribing to {topic}"
        assert len(set(mine)) == len(mine), f"{member} got a partition twice: {mine}"
        for other in members[i + 1 :]:
            theirs = partitions[other]
            common = set(mine) & set(theirs)
            assert not common, f"{member} and {other} both got {sorted(common)}"
            if abs(len(mine) - len(theirs)) <= 1:
                continue
            shared_topics = {t for t, _ in mine} & {t for t, _ in theirs}
            assert not shared_topics, (
                f"{member} ({len(mine)}) and {other} ({len(theirs)}) share topics {sorted(shared_topics)}: "
                "a partition could move to the less loaded one"
            )


def cooperative_round_is_safe(
    subscriptions: dict[str, Subscription], partitions: dict[str, list[TopicPartition]]
) -> bool:
    """Kafka's verifyCooperativeValidity: asserts no partition is both revoked and added; True if any is revoked."""
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for member, assigned in partitions.items():
        owned = set(subscriptions[member].owned_partitions)
        revoked |= owned - set(assigned)
        added |= set(assigned) - owned
    assert not added & revoked, f"revoked and reassigned in one round: {sorted(added & revoked)}"
    return bool(revoked)


def settle_cooperative(
    partitions_per_topic: dict[str, int],
    subscriptions: dict[str, Subscription],
    partitions: dict[str, list[TopicPartition]],
    generation: int = 1,
) -> dict[str, list[TopicPartition]]:
    """Run the follow-up cooperative rebalances until nothing is revoked; return the settled assignment.

    Updates `subscriptions` in place, as Kafka's test does, so the caller's next round starts from them.
    """
    rebalances = 0
    while cooperative_round_is_safe(subscriptions, partitions):
        for member, owned in partitions.items():
            subscriptions[member] = Subscription(subscriptions[member].topics, owned, generation)
        partitions = assign("cooperative-sticky", partitions_per_topic, subscriptions).partitions
        rebalances += 1
        assert rebalances <= FOLLOW_UP_REBALANCES_MAX, "the cooperative rebalances do not settle"
    return partitions


def is_fully_balanced(partitions: dict[str, list[TopicPartition]]) -> bool:
    loads = [len(p) for p in partitions.values()]
    return max(loads) - min(loads) <= 1
