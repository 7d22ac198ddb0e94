"""Every assignor keeps Kafka's promises for any group: valid, balanced where promised, sticky where promised.

Method: hypothesis draws groups of up to 8 members over up to 5 topics of up to 8 partitions: each member
with its own topic list (maybe empty), maybe a group.instance.id, a generation (or none), and owned partitions
(each partition claimed by at most one member, or, in the conflicting-claims draws, by several). Then:
- every strategy: each partition of a subscribed topic goes to exactly one member, a subscriber (for
  cooperative-sticky, "goes to" includes being withheld in `transferring` for its next owner);
- sticky and cooperative-sticky: Kafka's verifyValidityAndBalance (two members whose loads differ by 2+ share
  no topic; cooperative after its follow-up rebalances settle), and the stronger form the general algorithm
  stops on: no member could take a partition of a topic it subscribes to from a member with 2+ more;
- roundrobin with equal subscriptions: loads within one;
- sticky and cooperative-sticky with equal subscriptions (Kafka's constrained algorithm): a member keeps its
  still-valid owned partitions up to its final load (it never gives one away while taking a new one);
- any subscriptions: no owned partition leaves its still-subscribed owner for a member that ends up with 2+
  more than the owner (moving it back would improve balance). The stronger per-member form does not hold
  for Kafka's general algorithm: with A on t0 and B on t0, t1, B owning t0-0 and both topics one partition,
  Kafka gives t0-0 to A and t1-0 to B, and so does Hightide;
- cooperative-sticky: no partition goes from its owner to another member in one round;
- determinism: the same input gives the same answer.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.core.assignors import STRATEGIES, Assignment, Subscription, TopicPartition, assign
from support.assignor_checks import settle_cooperative, verify_validity_and_balance

EXAMPLES = 300

TOPICS = st.sampled_from(["t0", "t1", "t2", "orders", "Aa", "BB"])  # "Aa"/"BB": equal String.hashCode
MEMBER_IDS = st.text(alphabet="abcAB01-", min_size=1, max_size=6)
GENERATIONS = st.sampled_from([-1, 0, 1, 2, 3])

Group = tuple[dict[str, int], dict[str, Subscription]]


@st.composite
def groups(draw: st.DrawFn, *, conflicting_claims: bool = False, equal_subscriptions: bool = False) -> Group:
    counts = draw(st.dictionaries(TOPICS, st.integers(0, 8), min_size=1, max_size=5))
    topics = sorted(counts)
    member_ids = draw(st.lists(MEMBER_IDS, min_size=1, max_size=8, unique=True))
    shared = draw(st.lists(st.sampled_from(topics), unique=True))
    subscribed = {
        m: shared if equal_subscriptions else draw(st.lists(st.sampled_from(topics), unique=True)) for m in member_ids
    }
    partitions = [(t, p) for t in topics for p in range(counts[t])]
    owned: dict[str, list[TopicPartition]] = {m: [] for m in member_ids}
    # One owner (or none: -1) per partition, then, for conflicting claims, a few extra claimants.
    owners = draw(st.lists(st.integers(-1, len(member_ids) - 1), min_size=len(partitions), max_size=len(partitions)))
    for tp, index in zip(partitions, owners, strict=True):
        if index >= 0:
            owned[member_ids[index]].append(tp)
    if conflicting_claims and partitions:
        extra = st.tuples(st.sampled_from(partitions), st.sampled_from(member_ids))
        for tp, m in draw(st.lists(extra, max_size=6)):
            if tp not in owned[m]:
                owned[m].append(tp)
    shuffle = draw(st.randoms(use_true_random=False))
    instance_ids = draw(st.lists(st.sampled_from(["i0", "i1", "i2", "i3", None]), min_size=len(member_ids)))
    seen: set[str] = set()
    subscriptions = {}
    for m, drawn_instance_id in zip(member_ids, instance_ids, strict=False):
        instance_id = None if drawn_instance_id in seen else drawn_instance_id  # an instance id names one member
        if instance_id is not None:
            seen.add(instance_id)
        shuffle.shuffle(owned[m])  # owned partitions arrive in any order
        subscriptions[m] = Subscription(subscribed[m], owned[m], draw(GENERATIONS), instance_id)
    return counts, subscriptions


def _expected_partitions(counts: dict[str, int], subscriptions: dict[str, Subscription]) -> set[TopicPartition]:
    subscribed = {t for s in subscriptions.values() for t in s.topics}
    return {(t, p) for t in subscribed for p in range(counts.get(t, 0))}


def _check_valid(counts: dict[str, int], subscriptions: dict[str, Subscription], result: Assignment) -> None:
    assert list(result.partitions) == list(subscriptions), "every member, in the caller's order"
    placed = Counter(tp for parts in result.partitions.values() for tp in parts)
    placed.update(list(result.transferring))
    assert set(placed) == _expected_partitions(counts, subscriptions), "every subscribed partition, and only those"
    assert all(n == 1 for n in placed.values()), f"placed twice: {[tp for tp, n in placed.items() if n > 1]}"
    holders = [(m, tp) for m, parts in result.partitions.items() for tp in parts]
    holders += [(m, tp) for tp, m in result.transferring.items()]
    for member, (topic, p) in holders:
        assert topic in subscriptions[member].topics, f"{member} got {topic}-{p} without subscribing"


def _check_no_member_could_take_more(
    subscriptions: dict[str, Subscription], partitions: dict[str, list[TopicPartition]]
) -> None:
    owner = {tp: m for m, parts in partitions.items() for tp in parts}
    for member, parts in partitions.items():
        for tp, other in owner.items():
            if tp[0] in subscriptions[member].topics:
                assert len(partitions[other]) <= len(parts) + 1, (
                    f"{member} ({len(parts)}) could take {tp} from {other} ({len(partitions[other])})"
                )


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(STRATEGIES), groups(conflicting_claims=True))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(strategy: str, group: Group) -> None:
    counts, subscriptions = group
    result = assign(strategy, counts, subscriptions)
    _check_valid(counts, subscriptions, result)
    assert result == assign(strategy, counts, subscriptions), "the same group gives the same assignment"
    if strategy != "cooperative-sticky":
        assert result.transferring == {}


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(["sticky", "cooperative-sticky"]), groups(conflicting_claims=True))
def test_the_sticky_assignors_balance_as_kafka_verifies(strategy: str, group: Group) -> None:
    counts, subscriptions = group
    partitions = assign(strategy, counts, subscriptions).partitions
    if strategy == "cooperative-sticky":
        partitions = settle_cooperative(counts, dict(subscriptions), dict(partitions))
    verify_validity_and_balance(subscriptions, partitions)
    _check_no_member_could_take_more(subscriptions, partitions)


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(equal_subscriptions=True))
def test_roundrobin_with_equal_subscriptions_deals_within_one(group: Group) -> None:
    counts, subscriptions = group
    loads = [len(parts) for parts in assign("roundrobin", counts, subscriptions).partitions.values()]
    assert max(loads) - min(loads) <= 1


def _valid_owned(subscriptions: dict[str, Subscription], counts: dict[str, int]) -> dict[str, set[TopicPartition]]:
    """Owned partitions that still exist and whose topic the owner still subscribes to."""
    return {
        m: {(t, p) for t, p in s.owned_partitions if t in s.topics and p < counts.get(t, 0)}
        for m, s in subscriptions.items()
    }


def _moved_without_need(
    subscriptions: dict[str, Subscription], partitions: dict[str, list[TopicPartition]]
) -> list[tuple[TopicPartition, str, str]]:
    """(partition, owner, new holder) where moving it back to its still-present owner would improve balance."""
    owner = {tp: m for m, s in subscriptions.items() for tp in s.owned_partitions if tp[0] in s.topics}
    return [
        (tp, owner[tp], m)
        for m, parts in partitions.items()
        for tp in parts
        if owner.get(tp, m) != m and len(partitions[owner[tp]]) + 1 < len(parts)
    ]


def _check_kept(
    subscriptions: dict[str, Subscription], counts: dict[str, int], partitions: dict[str, list[TopicPartition]]
) -> None:
    """Equal subscriptions: a member gives up an owned partition only to get down to its balanced load."""
    for member, owned in _valid_owned(subscriptions, counts).items():
        kept = owned & set(partitions[member])
        assert len(kept) >= min(len(owned), len(partitions[member])), (
            f"{member} gave up {sorted(owned - kept)} but took {sorted(set(partitions[member]) - owned)}"
        )


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(["sticky", "cooperative-sticky"]), groups(equal_subscriptions=True))
def test_with_equal_subscriptions_a_member_keeps_its_owned_partitions_up_to_its_load(
    strategy: str, group: Group
) -> None:
    counts, subscriptions = group
    _check_kept(subscriptions, counts, assign(strategy, counts, subscriptions).partitions)


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups())
def test_sticky_moves_an_owned_partition_only_when_balance_needs_it(group: Group) -> None:
    """Any subscriptions: no partition leaves its owner for a member that ends 2+ partitions busier."""
    counts, subscriptions = group
    assert _moved_without_need(subscriptions, assign("sticky", counts, subscriptions).partitions) == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups())
def test_cooperative_never_hands_an_owned_partition_straight_to_another_member(group: Group) -> None:
    counts, subscriptions = group
    result = assign("cooperative-sticky", counts, subscriptions)
    owner = {tp: m for m, s in subscriptions.items() for tp in s.owned_partitions}
    for member, parts in result.partitions.items():
        for tp in parts:
            assert owner.get(tp, member) == member, f"{tp} went from {owner.get(tp)} to {member} in one round"
    for tp, next_owner in result.transferring.items():
        assert tp in owner and owner[tp] != next_owner, "only a partition someone else owns is withheld"
    assert _moved_without_need(subscriptions, {**result.partitions}) == []
