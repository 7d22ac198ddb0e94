"""The sticky assignors: balanced, and moving as few partitions as balance allows.

Room: libs/core (rules as pure functions). Owns Kafka's `AbstractStickyAssignor` (without racks), which both
`StickyAssignor` (eager) and `CooperativeStickyAssignor` run, and the cooperative assignor's two-phase
adjustment (KIP-429). It never does I/O; a member's last assignment and generation come in its Subscription.

The algorithm, as Kafka's:
1. Ownership (`allSubscriptionsEqual`): each member claims its owned partitions; when two members claim the
   same partition the higher generation wins, and with equal generations neither keeps it (the partition is
   "doubly claimed" and will be revoked). Claims are read in the order of the leader's subscriptions HashMap.
2. If every member subscribes to the same topics, the constrained algorithm: each member keeps up to its
   quota of its owned partitions (the first ones in its own order if they are of one topic, else by partition
   number; `floor(P/N)`, or `ceil(P/N)` for the first `P % N` members in HashMap order that own that many),
   then the rest go round-robin, topic by topic, to the members still short, sorted by member id.
3. Otherwise the general algorithm: keep every owned partition whose topic the member still subscribes to,
   give each unassigned partition to the least-loaded subscriber (ties by member id), then move partitions
   from a member with 2+ more than another subscriber until balanced, preferring to move a partition back to
   its previous owner (from an older generation) and, through `PartitionMovements`, to undo an earlier move
   rather than chain a new one; a rebalance that ends no better balanced is reverted.
4. Cooperative-sticky only: a partition going from its owner to another member is withheld from the new
   member (`transferring`) until the owner has revoked it and the group has rebalanced once more.

Java order: claims, quotas and `PartitionMovements`' choice of partition depend on HashMap/HashSet iteration;
`_java.JavaHashMap` reproduces it (the subscriptions and owned-partitions maps by member-id hash, each
movement set by `TopicPartition.hashCode`). The TreeSet of members by load is a list kept sorted by
(load, `String.compareTo`).

Where this departs from Kafka, on inputs Kafka gets wrong:
- A member with an empty subscription makes the subscriptions unequal. Kafka compares later members against
  the first non-empty subscription it met, so an empty one in front is treated as "same", and the
  constrained algorithm then hands it partitions of topics it never subscribed to.
- The general algorithm moves a partition back to its previous owner only if that member is still
  subscribed to the topic and takes part in the rebalance; Kafka's check reads the previous owner's load
  without looking (an unsubscribed previous owner would get the partition back; a fixed one throws).
- `maxGeneration` is computed per call; Kafka keeps it in the assignor instance across rebalances.
- The constrained algorithm keeps a member's first quota of owned partitions in the member's own order (the
  order of the assignment it was given: its original partitions first, the ones it took over from a member
  that left appended) when they are all of one topic, as Kafka 3.7 and earlier did for every member. Kafka 3.8
  (KAFKA-16277) sorts them by (partition, topic), which spreads a member's partitions over the topics of a
  multi-topic group but, with one topic, makes a survivor keep its lowest-numbered partitions rather than its
  own: a member that died and comes back then gets other partitions than its old ones, where the seeds (and
  Kafka <= 3.7) give it back exactly what it had. Hightide sorts as Kafka 3.8 only when the owned partitions
  span topics, where the spread matters. Single-topic groups in which an over-quota member's owned order is
  not ascending therefore differ from Kafka 3.8.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from hightide.core.assignors._group import DEFAULT_GENERATION, Group, TopicPartition
from hightide.core.assignors._java import (
    JavaHashMap,
    java_string_hash,
    java_string_key,
    topic_partition_hash,
)

OwnedPartitions = JavaHashMap[str, list[TopicPartition]]


def assign_sticky(
    group: Group, *, cooperative: bool
) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """Kafka's `AbstractStickyAssignor.assignPartitions`, then the cooperative adjustment if asked.

    Returns (member id -> partitions, partitions transferring ownership -> their next owner); the second is
    empty for the eager `sticky` strategy.
    """
    owned: OwnedPartitions = JavaHashMap(java_string_hash)
    doubly_claimed: set[TopicPartition] = set()
    all_equal, max_generation = _all_subscriptions_equal(group, owned, doubly_claimed)
    transferring: dict[TopicPartition, str] | None
    if all_equal:
        constrained = _ConstrainedAssignmentBuilder(group, owned, doubly_claimed)
        assignment = constrained.build()
        transferring = constrained.transferring
    else:
        assignment = _GeneralAssignmentBuilder(group, owned, max_generation).build()
        transferring = None  # Kafka: the general case leaves it to the cooperative assignor to compute
    if not cooperative:
        return assignment, {}
    if transferring is None:
        transferring = _partitions_transferring_ownership(group, assignment)
    for partition, new_owner in transferring.items():  # CooperativeStickyAssignor.adjustAssignment
        assignment[new_owner].remove(partition)
    return assignment, transferring


def _all_subscriptions_equal(
    group: Group, owned: OwnedPartitions, doubly_claimed: set[TopicPartition]
) -> tuple[bool, int]:
    """Kafka's `allSubscriptionsEqual`: fills each member's valid owned partitions; returns (equal, max generation)."""
    first_topics: frozenset[str] | None = None
    all_equal = True
    max_generation = DEFAULT_GENERATION
    previous_owner: dict[TopicPartition, str] = {}
    for member_id, subscription in group.subscriptions.items():
        topics = frozenset(subscription.topics)
        if first_topics is None:
            first_topics = topics
        elif topics != first_topics:
            all_equal = False
        generation = subscription.generation
        max_generation = max(max_generation, generation)
        mine: list[TopicPartition] = []
        owned.put(member_id, mine)
        for tp in subscription.owned_partitions:
            other = previous_owner.get(tp)
            if other is None:
                mine.append(tp)
                previous_owner[tp] = member_id
                continue
            other_generation = group.subscriptions[other].generation
            if generation == other_generation:
                # Two members of one generation claim it: neither can be trusted with it; it will be revoked.
                doubly_claimed.add(tp)
                _remove_if_present(owned[other], tp)
                previous_owner[tp] = member_id
            elif generation > other_generation:
                mine.append(tp)
                _remove_if_present(owned[other], tp)
                previous_owner[tp] = member_id
            # else: the other member's newer claim stands
    return all_equal, max_generation


def _remove_if_present(partitions: list[TopicPartition], tp: TopicPartition) -> None:
    if tp in partitions:
        partitions.remove(tp)


def _sorted_partitions(group: Group, topics: Iterable[str]) -> list[TopicPartition]:
    return [(topic, p) for topic in topics for p in range(group.partitions_per_topic[topic])]


class _ConstrainedAssignmentBuilder:
    """Kafka's `ConstrainedAssignmentBuilder`: every member subscribes to the same topics."""

    def __init__(self, group: Group, owned: OwnedPartitions, doubly_claimed: set[TopicPartition]) -> None:
        self.group = group
        self.owned = owned
        self.doubly_claimed = doubly_claimed
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.transferring: dict[TopicPartition, str] = {}
        self.under_min_quota: list[str] = []
        self.exactly_min_quota: list[str] = []
        total = sum(group.partitions_per_topic.values())
        members = len(owned)
        self.min_quota = total // members
        self.max_quota = -(-total // members)
        self.expected_over_min = total % members
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {member_id: [] for member_id in owned}
        self.assigned: set[TopicPartition] = set()

    def build(self) -> dict[str, list[TopicPartition]]:
        self._assign_owned_partitions()
        topics = sorted(self.group.partitions_per_topic.keys(), key=java_string_key)
        unassigned = [tp for tp in _sorted_partitions(self.group, topics) if tp not in self.assigned]
        self.under_min_quota.sort(key=java_string_key)
        self.exactly_min_quota.sort(key=java_string_key)
        self._assign_round_robin(unassigned)
        self._verify_unfilled_members()
        return self.assignment

    def _keep(self, member_id: str, partitions: list[TopicPartition]) -> None:
        self.assignment[member_id].extend(partitions)
        self.assigned.update(partitions)

    def _assign_owned_partitions(self) -> None:
        for member_id, claimed in self.owned.items():
            mine = [tp for tp in claimed if tp not in self.doubly_claimed]
            if len({topic for topic, _ in mine}) > 1:
                # Kafka 3.8 (KAFKA-16277) sorts by (partition, topic) so a member keeps a spread of topics; with one
                # topic Hightide keeps the member's own order instead (a departure, see the module docstring).
                mine.sort(key=lambda tp: (tp[1], java_string_key(tp[0])))
            if len(mine) < self.min_quota:
                self._keep(member_id, mine)
                self.under_min_quota.append(member_id)
            elif len(mine) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min_quota.clear()
                self._keep(member_id, mine[: self.max_quota])
                for tp in mine[self.max_quota :]:
                    self.maybe_revoked[tp] = member_id
            else:
                self._keep(member_id, mine[: self.min_quota])
                for tp in mine[self.min_quota :]:
                    self.maybe_revoked[tp] = member_id
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min_quota.append(member_id)

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        # Kafka walks `under_min_quota` with an iterator it removes through and restarts; `cursor` is that
        # iterator's position (the index of the element next() would return).
        cursor = 0
        for tp in unassigned:
            if cursor < len(self.under_min_quota):
                member_id = self.under_min_quota[cursor]
                cursor += 1
            elif not self.under_min_quota and not self.exactly_min_quota:
                raise AssertionError(f"no unfilled member left for {tp}: the quotas were miscounted")
            elif not self.under_min_quota:
                member_id = self.exactly_min_quota.pop(0)
            else:
                cursor = 1
                member_id = self.under_min_quota[0]
            count = self._assign_new_partition(tp, member_id)
            if count == self.min_quota:
                cursor -= 1
                assert self.under_min_quota[cursor] == member_id, "only a member below min quota reaches it"
                del self.under_min_quota[cursor]
                self.exactly_min_quota.append(member_id)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new_partition(self, tp: TopicPartition, member_id: str) -> int:
        self.assignment[member_id].append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member_id) or tp in self.doubly_claimed:
            self.transferring[tp] = member_id
        return len(self.assignment[member_id])

    def _verify_unfilled_members(self) -> None:
        if not self.under_min_quota:
            return
        assert self.current_over_min == self.expected_over_min, "members left below min quota with no partitions left"
        for member_id in self.under_min_quota:
            assert len(self.assignment[member_id]) == self.min_quota, f"{member_id} ended below min quota"


class _MembersByLoad:
    """Kafka's `TreeSet<String>` ordered by (number of assigned partitions, member id).

    As in Kafka, a member's load must not change while it is in the set: callers remove, mutate, re-add.
    """

    def __init__(self, assignment: dict[str, list[TopicPartition]]) -> None:
        self._assignment = assignment
        self._keys: list[tuple[int, bytes, str]] = []

    def _key(self, member_id: str) -> tuple[int, bytes, str]:
        return (len(self._assignment[member_id]), java_string_key(member_id), member_id)

    def add(self, member_id: str) -> None:
        key = self._key(member_id)
        index = bisect.bisect_left(self._keys, key)
        if index == len(self._keys) or self._keys[index] != key:
            self._keys.insert(index, key)

    def remove(self, member_id: str) -> None:
        key = self._key(member_id)
        index = bisect.bisect_left(self._keys, key)
        if index < len(self._keys) and self._keys[index] == key:
            del self._keys[index]

    def first(self) -> str:
        return self._keys[0][2]

    def last(self) -> str:
        return self._keys[-1][2]

    def first_where(self, wanted: Callable[[str], bool]) -> str | None:
        """The least-loaded member (ties by member id) for which `wanted` holds, or None."""
        return next((key[2] for key in self._keys if wanted(key[2])), None)

    def __iter__(self) -> Iterator[str]:
        # A snapshot: Kafka's loops over the TreeSet stop right after they change it.
        return iter([key[2] for key in self._keys])


@dataclass(slots=True)
class _PartitionMovements:
    """Kafka's `PartitionMovements`: where each moved partition came from, to undo moves rather than chain them."""

    by_topic: dict[str, dict[tuple[str, str], JavaHashMap[TopicPartition, None]]] = field(default_factory=dict)
    movements: dict[TopicPartition, tuple[str, str]] = field(default_factory=dict)

    def _remove_record(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.movements.pop(tp)
        for_topic = self.by_topic[tp[0]]
        for_topic[pair].remove(tp)
        if not len(for_topic[pair]):
            del for_topic[pair]
        if not for_topic:
            del self.by_topic[tp[0]]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.movements[tp] = pair
        for_topic = self.by_topic.setdefault(tp[0], {})
        if pair not in for_topic:
            for_topic[pair] = JavaHashMap(topic_partition_hash)  # new HashSet<>()
        for_topic[pair].put(tp, None)

    def move(self, tp: TopicPartition, old_member: str, new_member: str) -> None:
        if tp in self.movements:
            source, destination = self._remove_record(tp)
            assert destination == old_member, "a partition moves on from where its last move put it"
            if source != new_member:  # not moving back to where it started
                self._add_record(tp, (source, new_member))
        else:
            self._add_record(tp, (old_member, new_member))

    def actual_partition_to_move(self, tp: TopicPartition, old_member: str, new_member: str) -> TopicPartition:
        """Kafka's `getTheActualPartitionToBeMoved`: prefer reversing an earlier move of this topic."""
        for_topic = self.by_topic.get(tp[0])
        if for_topic is None:
            return tp
        if tp in self.movements:
            old_member = self.movements[tp][0]
        reverse = for_topic.get((new_member, old_member))
        if reverse is None:
            return tp
        return reverse.first()  # HashSet.iterator().next()


class _GeneralAssignmentBuilder:
    """Kafka's `GeneralAssignmentBuilder`: members subscribe to different topics."""

    def __init__(self, group: Group, owned: OwnedPartitions, max_generation: int) -> None:
        self.group = group
        self.max_generation = max_generation
        counts = group.partitions_per_topic
        self.topic_members: dict[str, list[str]] = {topic: [] for topic in counts}
        self.member_topics: dict[str, list[str]] = {}
        self.member_topic_set: dict[str, frozenset[str]] = {}
        for member_id, subscription in group.subscriptions.items():
            subscribed = [topic for topic in subscription.topics if topic in counts]
            self.member_topics[member_id] = subscribed
            self.member_topic_set[member_id] = frozenset(subscribed)
            for topic in subscribed:
                self.topic_members[topic].append(member_id)
        # `owned` holds every member (allSubscriptionsEqual put each one), in HashMap order.
        self.current: dict[str, list[TopicPartition]] = {member_id: list(parts) for member_id, parts in owned.items()}
        self.partition_owner: dict[TopicPartition, str] = {
            tp: member_id for member_id, parts in self.current.items() for tp in parts
        }
        topics = sorted(counts.keys(), key=lambda t: (len(self.topic_members[t]), java_string_key(t)))
        self.sorted_all_partitions = _sorted_partitions(group, topics)
        self.by_load = _MembersByLoad(self.current)
        self.movements = _PartitionMovements()
        self.revocation_required = False

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_assignment()
        assigned = self._assign_owned_partitions()
        unassigned = [tp for tp in self.sorted_all_partitions if tp not in assigned]
        for member_id in self.current:
            self.by_load.add(member_id)
        self._balance(previous, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[TopicPartition, tuple[str, int]]:
        """Kafka's `prepopulateCurrentAssignments`: partitions members of older generations owned, newest wins."""
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for member_id, subscription in self.group.subscriptions.items():
            if subscription.generation >= self.max_generation:
                continue
            for tp in subscription.owned_partitions:
                known = previous.get(tp)
                if known is None or subscription.generation > known[1]:
                    previous[tp] = (member_id, subscription.generation)
        return previous

    def _assign_owned_partitions(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for member_id, partitions in self.current.items():
            subscribed = self.group.subscriptions[member_id].topics
            kept = []
            for tp in partitions:
                if tp[0] in subscribed:
                    kept.append(tp)
                    assigned.add(tp)
                else:
                    # No longer subscribed: revoked (Kafka leaves its partition_owner entry, to be overwritten).
                    self.revocation_required = True
            partitions[:] = kept
        return assigned

    def _balance(self, previous: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self.by_load.last()]
        for tp in unassigned:
            if self.topic_members[tp[0]]:
                self._assign_to_least_loaded(tp)

        fixed_topics = {topic for topic, members in self.topic_members.items() if len(members) < 2}
        self.sorted_all_partitions = [tp for tp in self.sorted_all_partitions if tp[0] not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp[0] not in fixed_topics]

        fixed: dict[str, list[TopicPartition]] = {}
        for member_id in self.member_topics:
            if not self._can_member_participate(member_id):
                self.by_load.remove(member_id)
                fixed[member_id] = self.current.pop(member_id)

        before = {member_id: list(parts) for member_id, parts in self.current.items()}
        owners_before = dict(self.partition_owner)
        if not self.revocation_required:
            self._perform_reassignments(unassigned, previous)
        performed = self._perform_reassignments(self.sorted_all_partitions, previous)
        if not initializing and performed and _balance_score(self.current) >= _balance_score(before):
            self.current.clear()
            self.current.update(before)
            self.partition_owner = owners_before
        self.current.update(fixed)

    def _assign_to_least_loaded(self, tp: TopicPartition) -> None:
        """Kafka's `maybeAssignPartition`: the least-loaded subscriber (ties by member id) gets it."""
        member_id = self.by_load.first_where(lambda m: tp[0] in self.member_topic_set[m])
        if member_id is not None:
            self.by_load.remove(member_id)
            self.current[member_id].append(tp)
            self.partition_owner[tp] = member_id
            self.by_load.add(member_id)

    def _max_assignment_size(self, member_id: str) -> int:
        return sum(self.group.partitions_per_topic[topic] for topic in self.member_topics[member_id])

    def _can_member_participate(self, member_id: str) -> bool:
        if len(self.current[member_id]) < self._max_assignment_size(member_id):
            return True
        return any(len(self.topic_members[tp[0]]) >= 2 for tp in self.current[member_id])

    def _is_balanced(self) -> bool:
        """Kafka's `isBalanced`: loads within one, or no member could take a partition without unbalancing."""
        smallest = len(self.current[self.by_load.first()])
        largest = len(self.current[self.by_load.last()])
        if smallest >= largest - 1:
            return True
        # Kafka walks every partition each member could get and looks up its holder's load; the busiest holder
        # of each topic gives the same answer in O(partitions + members x topics). A member's own partitions
        # never count against it (its load is not above its load + 1).
        busiest: dict[str, int] = {}
        for parts in self.current.values():
            for topic, _ in parts:
                busiest[topic] = max(busiest.get(topic, 0), len(parts))
        for member_id in self.by_load:
            count = len(self.current[member_id])
            if count == self._max_assignment_size(member_id):
                continue
            if any(busiest.get(topic, 0) > count + 1 for topic in self.member_topics[member_id]):
                return False
        return True

    def _perform_reassignments(
        self, reassignable: list[TopicPartition], previous: dict[TopicPartition, tuple[str, int]]
    ) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in reassignable:
                if self._is_balanced():
                    break
                member_id = self.partition_owner.get(tp)
                assert member_id is not None, f"{tp} of a shared topic has an owner after the first pass"
                load = len(self.current[member_id])
                earlier = previous.get(tp)
                if (
                    earlier is not None
                    and self._may_return_to(earlier[0], tp)
                    and load > len(self.current[earlier[0]]) + 1
                ):
                    self._reassign(tp, earlier[0])
                    performed = modified = True
                    continue
                if any(load > len(self.current[other]) + 1 for other in self.topic_members[tp[0]]):
                    self._reassign(tp, self._least_loaded_subscriber(tp[0]))
                    performed = modified = True
        return performed

    def _may_return_to(self, member_id: str, tp: TopicPartition) -> bool:
        # Departure from Kafka (see the module docstring): only to a participating subscriber of the topic.
        return member_id in self.current and tp[0] in self.member_topic_set[member_id]

    def _least_loaded_subscriber(self, topic: str) -> str:
        member_id = self.by_load.first_where(lambda m: topic in self.member_topic_set[m])
        assert member_id is not None, f"topic {topic} has subscribers taking part in the rebalance"
        return member_id

    def _reassign(self, tp: TopicPartition, new_member: str) -> None:
        """Kafka's `reassignPartition` + `processPartitionMovement`."""
        moved = self.movements.actual_partition_to_move(tp, self.partition_owner[tp], new_member)
        old_member = self.partition_owner[moved]
        self.by_load.remove(old_member)
        self.by_load.remove(new_member)
        self.movements.move(moved, old_member, new_member)
        self.current[old_member].remove(moved)
        self.current[new_member].append(moved)
        self.partition_owner[moved] = new_member
        self.by_load.add(new_member)
        self.by_load.add(old_member)


def _balance_score(assignment: dict[str, list[TopicPartition]]) -> int:
    """Kafka's `getBalanceScore`: the sum over member pairs of the difference in their loads."""
    loads = [len(parts) for parts in assignment.values()]
    return sum(abs(a - b) for i, a in enumerate(loads) for b in loads[i + 1 :])


def _partitions_transferring_ownership(
    group: Group, assignment: dict[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Kafka's `computePartitionsTransferringOwnership`: assigned to a new member while another owned it."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member_id, assigned in assignment.items():
        owned = group.subscriptions[member_id].owned_partitions
        owned_set, assigned_set = set(owned), set(assigned)
        added.update((tp, member_id) for tp in assigned if tp not in owned_set)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: member_id for tp, member_id in added.items() if tp in revoked}
