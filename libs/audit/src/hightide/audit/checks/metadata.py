"""The controller and metadata invariants (reliability.md §8 A1-A6): leaders, epochs, ISR and ELR, elections.

Room: libs/audit (pure). The plain-Python specification of these checks; `hightide.history.checks.metadata` runs the
same rules in Spark and must give the same findings, row for row.

Metadata order. The controller's committed decisions, as `hightide.audit.rebuild.controller_order` orders them:
each emitter's events cut into terms at its ControllerElected, terms ordered by (controller epoch, first wall_ms,
service, emitter id, incarnation), each term in its emitter's order, and every decision that never committed (an
abandoned intent, `rebuild.Takeovers.overtaking`) left out. Besides the metadata events of `controller_order` the
terms here also hold TopicConfigsAltered and LeaderElected (a term's first wall_ms is that of its first kept event
of these types). A LeaderElected comes right after the PartitionChanged of its own decision.

Topic lives. A topic deleted and created again under its name starts its epochs over, so the controller's events
are numbered by life: the number of TopicCreated of that name up to them in metadata order (0 before any).
A broker's events carry no life; they are placed as follows (the rules say why each is sound):

- `one_leader_per_epoch` needs no life for a broker's BecameLeader: it requires that some committed
  PartitionChanged of the topic, in any life, made that broker leader in that leader epoch. Within one life the
  controller's leaders are unique (checked on the controller's events), so a broker that agrees with the
  controller cannot share an epoch with another broker that agrees with it in the same life; and one that agrees
  with no life led an epoch the controller never gave it.
- `epochs_monotonic` compares a broker's events only within one replica log of one broker incarnation: from the
  start of the incarnation, or from the broker's LogDeleted of that partition, to the next such point. A topic's
  next life reaches a broker only after it deleted the old life's log (topic_deleted, or topic_id_changed when
  it learns of the new topic id first), so the epochs of two lives are never compared.

min.insync.replicas (for `isr_elr_well_formed`): the topic's own value, from its TopicCreated configs and later
TopicConfigsAltered (a removed config: None) in metadata order within the life, capped at the replica count as
the controller's effective_min_isr does. Where the topic does not set it (or removed it), the controller uses its
own `min.insync.replicas` setting (ControllerConfig), which its ControllerElected names (version 3): the value of
the term the decision belongs to. Where that event does not say (older versions), the clause is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.audit.rebuild import NO_TERM, Takeovers
from hightide.protocol import events
from hightide.protocol.envelope import Envelope

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
NO_LEADER: Final = -1
RECORDED_UNCLEAN: Final = frozenset({"unclean", "last_known_leader"})
FROM_OWN_ISR: Final = frozenset({"reassignment"})
"""Elections that choose from the ISR of their own change (Kafka's completeReassignmentIfNeeded: the change that
completes a reassignment both takes in the last target replica and replaces a removed leader from that ISR)."""
TERM_EVENTS: Final = (
    events.TopicCreated,
    events.TopicDeleted,
    events.TopicConfigsAltered,
    events.PartitionChanged,
    events.LeaderElected,
    events.ReplicaMarkedOffline,
    events.BrokerRegistered,
)


@dataclass(frozen=True, slots=True)
class Decided:
    """One committed controller event in metadata order, with its topic's life (see the module docstring)."""

    envelope: Envelope
    life: int
    min_isr: int | None  # the topic's min.insync.replicas at this point, None when the history cannot tell

    @property
    def id(self) -> str:
        return History.id(self.envelope)


def metadata_order(history: History) -> list[Decided]:
    """The committed metadata events (of `TERM_EVENTS`) in metadata order, each with its life and min ISR."""
    takeovers = Takeovers.of(history.streams)
    terms: list[tuple[tuple[int, int, str, int, str], list[Envelope], int | None]] = []
    for (service, emitter_id), stream in history.streams.items():
        term: list[Envelope] = []
        controller_epoch, default = NO_TERM, None
        for envelope in stream:
            if isinstance(envelope.event, events.ControllerElected):
                if term:
                    terms.append((_term_key(controller_epoch, term[0], service, emitter_id), term, default))
                term, controller_epoch = [], envelope.event.controller_epoch
                default = envelope.event.min_insync_replicas if envelope.event.min_insync_replicas >= 1 else None
            if isinstance(envelope.event, TERM_EVENTS) and takeovers.overtaking(envelope.event) is None:
                term.append(envelope)
        if term:
            terms.append((_term_key(controller_epoch, term[0], service, emitter_id), term, default))
    terms.sort(key=lambda keyed: keyed[0])
    return list(_with_lives((envelope, default) for _, term, default in terms for envelope in term))


def _term_key(controller_epoch: int, first: Envelope, service: str, emitter_id: int) -> tuple[int, int, str, int, str]:
    return (controller_epoch, first.wall_ms, service, emitter_id, first.emitter.incarnation)


def _with_lives(ordered: Iterable[tuple[Envelope, int | None]]) -> Iterator[Decided]:
    """Each decision with its topic's life and min ISR: the topic's own, else its deciding controller's default."""
    lives: dict[str, int] = {}
    min_isr: dict[str, int | None] = {}
    for envelope, default in ordered:
        event = envelope.event
        topic = getattr(event, "topic", "")
        if isinstance(event, events.TopicCreated):
            lives[topic] = lives.get(topic, 0) + 1
            min_isr[topic] = _parse(dict(event.configs).get(MIN_INSYNC_REPLICAS))
        elif isinstance(event, events.TopicConfigsAltered):
            altered = dict(event.configs)
            if MIN_INSYNC_REPLICAS in altered:
                min_isr[topic] = _parse(altered[MIN_INSYNC_REPLICAS])
        own = min_isr.get(topic)
        yield Decided(envelope, lives.get(topic, 0), own if own is not None else default)


def _parse(value: str | None) -> int | None:
    try:
        return None if value is None else int(value.strip())
    except ValueError:
        return None


def _changes(order: Sequence[Decided]) -> dict[tuple[str, int, int], list[Decided]]:
    """Each partition's committed PartitionChanged in metadata order, by (topic, life, partition)."""
    by_partition: dict[tuple[str, int, int], list[Decided]] = {}
    for decided in order:
        event = decided.envelope.event
        if isinstance(event, events.PartitionChanged):
            by_partition.setdefault((event.topic, decided.life, event.partition), []).append(decided)
    return by_partition


def _changed(decided: Decided) -> events.PartitionChanged:
    event = decided.envelope.event
    assert isinstance(event, events.PartitionChanged), event
    return event


def _listed(brokers: Iterable[int]) -> str:
    """A list of brokers in a detail, as the Spark side writes it: [1,2,3]."""
    return "[" + ",".join(str(b) for b in brokers) + "]"


# -- A1 --------------------------------------------------------------------------------------------------------


def one_leader_per_epoch(history: History) -> Iterator[Finding]:
    """A1 UniqueLeaderPerEpoch (KRaft's NeverTwoLeadersInSameEpoch): within one life of a topic, a partition's
    leader epoch has one leader. (1) The committed PartitionChanged of one (life, partition, leader epoch) with a
    leader (!= -1) name one broker; one finding per epoch that names several. (2) A broker's BecameLeader in epoch
    e is backed by a committed PartitionChanged of the partition (in some life) that made it leader in e; one
    finding per (partition, epoch, broker) that is not, naming its BecameLeader events and the committed
    PartitionChanged of that epoch."""
    order = metadata_order(history)
    leaders: dict[tuple[str, int, int, int], list[Decided]] = {}
    backed: set[tuple[str, int, int, int]] = set()
    by_epoch: dict[tuple[str, int, int], list[str]] = {}
    for decided in order:
        event = decided.envelope.event
        if isinstance(event, events.PartitionChanged) and event.leader != NO_LEADER:
            key = (event.topic, decided.life, event.partition, event.leader_epoch)
            leaders.setdefault(key, []).append(decided)
            backed.add((event.topic, event.partition, event.leader_epoch, event.leader))
            by_epoch.setdefault((event.topic, event.partition, event.leader_epoch), []).append(decided.id)
    for (topic, _, partition, leader_epoch), claims in sorted(leaders.items()):
        named = sorted({_changed(c).leader for c in claims})
        if len(named) > 1:
            brokers = " and ".join(str(b) for b in named)
            yield finding(
                "one_leader_per_epoch",
                topic=topic,
                partition=partition,
                events=[c.id for c in claims],
                detail=f"leader epoch {leader_epoch} led by brokers {brokers}",
            )
    rogue: dict[tuple[str, int, int, int], list[str]] = {}
    for envelope, became in history.of_type(events.BecameLeader):
        key = (became.topic, became.partition, became.leader_epoch, became.replica)
        if key not in backed:
            rogue.setdefault(key, []).append(History.id(envelope))
    for (topic, partition, leader_epoch, replica), ids in sorted(rogue.items()):
        yield finding(
            "one_leader_per_epoch",
            topic=topic,
            partition=partition,
            replica=replica,
            events=[*ids, *by_epoch.get((topic, partition, leader_epoch), [])],
            detail=f"leader epoch {leader_epoch} led by broker {replica}, "
            "which no committed PartitionChanged made its leader",
        )


# -- A2, A3 ----------------------------------------------------------------------------------------------------


def epochs_monotonic(history: History) -> Iterator[Finding]:
    """A2 EpochMonotonicity (Vanlightly §2.3): in metadata order, each committed PartitionChanged of a partition
    (within a topic life) after the one before it has a higher partition epoch, a leader epoch no lower, and a
    higher leader epoch when the leader changed; one finding per pair breaking it, with the first clause broken.
    A3 ReplicaEpochMonotonic (Kafka's Partition.makeLeader / makeFollower, hachikuji's BecomeLeader guard): the
    leader epochs of a broker's successive BecameLeader/BecameFollower for one partition never go down, within one
    replica log of one broker incarnation (module docstring). Equal epochs repeat legitimately: Hightide's core,
    like KRaft's brokers, applies a change of the partition epoch alone (an ISR change) and emits BecameLeader or
    BecameFollower again with the same leader epoch; it ignores only a partition epoch older than the one it
    holds."""
    for (topic, _, partition), changes in sorted(_changes(metadata_order(history)).items()):
        for before, after in pairwise(changes):
            detail = _epoch_step(_changed(before), _changed(after))
            if detail is not None:
                yield finding(
                    "epochs_monotonic", topic=topic, partition=partition, events=[before.id, after.id], detail=detail
                )
    for (topic, partition, replica), pairs in sorted(_replica_epoch_pairs(history).items()):
        for (before_id, before_epoch), (after_id, after_epoch) in pairs:
            yield finding(
                "epochs_monotonic",
                topic=topic,
                partition=partition,
                replica=replica,
                events=[before_id, after_id],
                detail=f"broker {replica} went from leader epoch {before_epoch} to {after_epoch}",
            )


def _epoch_step(before: events.PartitionChanged, after: events.PartitionChanged) -> str | None:
    if after.partition_epoch <= before.partition_epoch:
        return f"partition epoch {after.partition_epoch} after {before.partition_epoch}"
    if after.leader_epoch < before.leader_epoch:
        return f"leader epoch {after.leader_epoch} after {before.leader_epoch}"
    if after.leader != before.leader and after.leader_epoch == before.leader_epoch:
        return f"leader {before.leader} -> {after.leader} kept leader epoch {after.leader_epoch}"
    return None


EpochPair = tuple[tuple[str, int], tuple[str, int]]


def _replica_epoch_pairs(history: History) -> dict[tuple[str, int, int], list[EpochPair]]:
    """Per (topic, partition, broker): the consecutive (event id, leader epoch) pairs whose epoch went down."""
    found: dict[tuple[str, int, int], list[EpochPair]] = {}
    for (service, _), stream in history.streams.items():
        if service != "broker":
            continue
        last: dict[tuple[str, int, str], tuple[str, int]] = {}  # (topic, partition, incarnation) -> last seen
        for envelope in stream:
            event = envelope.event
            if isinstance(event, events.LogDeleted):
                last.pop((event.topic, event.partition, envelope.emitter.incarnation), None)
            elif isinstance(event, events.BecameLeader | events.BecameFollower):
                key = (event.topic, event.partition, envelope.emitter.incarnation)
                seen = (History.id(envelope), event.leader_epoch)
                held = last.get(key)
                if held is not None and event.leader_epoch < held[1]:
                    found.setdefault((event.topic, event.partition, event.replica), []).append((held, seen))
                last[key] = seen
    return found


# -- A4, A5 ----------------------------------------------------------------------------------------------------


def leader_in_isr(history: History) -> Iterator[Finding]:
    """A4 LeaderInIsr (hachikuji's kafka-specification; Kafka's PartitionChangeBuilder elects only from the
    target ISR): a committed PartitionChanged with a leader (!= -1) has that leader in its ISR."""
    for decided in metadata_order(history):
        event = decided.envelope.event
        if isinstance(event, events.PartitionChanged) and event.leader != NO_LEADER and event.leader not in event.isr:
            yield finding(
                "leader_in_isr",
                topic=event.topic,
                partition=event.partition,
                replica=event.leader,
                events=[decided.id],
                detail=f"leader {event.leader} not in ISR {_listed(event.isr)}",
            )


def isr_elr_well_formed(history: History) -> Iterator[Finding]:
    """A5 IsrElrWellFormed (KIP-966, Vanlightly's ValidControllerIsrAndElr): every committed PartitionChanged has
    no broker twice in its replicas, ISR or ELR; ISR ⊆ replicas; ELR ⊆ replicas; ISR ∩ ELR = ∅; and, where the
    topic's min.insync.replicas is known (module docstring), |ISR| ≥ min(min ISR, |replicas|) ⇒ ELR = ∅ (KIP-966
    rule 3a: the ELR is emptied once the ISR reaches min ISR). One finding per broken clause."""
    for decided in metadata_order(history):
        event = decided.envelope.event
        if isinstance(event, events.PartitionChanged):
            for detail in _malformed(event, decided.min_isr):
                yield finding(
                    "isr_elr_well_formed",
                    topic=event.topic,
                    partition=event.partition,
                    events=[decided.id],
                    detail=detail,
                )


def _malformed(event: events.PartitionChanged, min_isr: int | None) -> Iterator[str]:
    replicas, isr, elr = _listed(event.replicas), _listed(event.isr), _listed(event.elr)
    for name, brokers in (("replicas", event.replicas), ("ISR", event.isr), ("ELR", event.elr)):
        if len(set(brokers)) != len(brokers):
            yield f"{name} {_listed(brokers)} repeat a broker"
    if not set(event.isr) <= set(event.replicas):
        yield f"ISR {isr} not within replicas {replicas}"
    if not set(event.elr) <= set(event.replicas):
        yield f"ELR {elr} not within replicas {replicas}"
    if set(event.isr) & set(event.elr):
        yield f"ISR {isr} and ELR {elr} share a broker"
    if min_isr is not None and event.elr:
        effective = min(min_isr, len(event.replicas))
        if len(event.isr) >= effective:
            yield f"ELR {elr} kept while ISR {isr} reaches min.insync.replicas {effective}"


# -- A6 --------------------------------------------------------------------------------------------------------


def election_from_isr_or_elr(history: History) -> Iterator[Finding]:
    """A6 CleanElectionSource (KIP-966's election order; Kafka's PartitionChangeBuilder.electLeader).

    (1) Every committed LeaderElected with a leader (!= -1), against the partition's state before its decision
    (the committed PartitionChanged before the one its decision made): an elr election chose a member of that
    ELR; a clean, preferred or controlled_shutdown election (or any name but elr, unclean, last_known_leader)
    chose a member of that ISR; unclean and last_known_leader elections may choose outside both, but only when
    recorded as such (the loss attribution reports them, not this check); a reassignment election chose a member
    of the ISR its own change left (FROM_OWN_ISR: the leader's AlterPartition that completes a reassignment brings
    the new leader into the ISR in the same change).
    (2) Every leader change between two committed PartitionChanged of a partition (to a leader != -1) with no
    committed unclean, last_known_leader or reassignment LeaderElected for its (life, leader epoch, leader) chose
    from the previous ISR or ELR.
    """
    order = metadata_order(history)
    yield from _recorded_elections(order)
    unclean = {
        (e.topic, d.life, e.partition, e.leader_epoch, e.leader)
        for d in order
        if isinstance(e := d.envelope.event, events.LeaderElected) and e.election in RECORDED_UNCLEAN | FROM_OWN_ISR
    }
    for (topic, life, partition), changes in sorted(_changes(order).items()):
        for before, after in pairwise(changes):
            b, a = _changed(before), _changed(after)
            if a.leader in (NO_LEADER, b.leader) or (topic, life, partition, a.leader_epoch, a.leader) in unclean:
                continue
            if a.leader not in b.isr and a.leader not in b.elr:
                yield finding(
                    "election_from_isr_or_elr",
                    topic=topic,
                    partition=partition,
                    replica=a.leader,
                    events=[before.id, after.id],
                    detail=f"leader {b.leader} -> {a.leader} from outside ISR {_listed(b.isr)} "
                    f"and ELR {_listed(b.elr)}",
                )


def _recorded_elections(order: Sequence[Decided]) -> Iterator[Finding]:
    """Part (1): each LeaderElected against the state before its own PartitionChanged."""
    latest: dict[tuple[str, int, int], tuple[Decided | None, Decided]] = {}  # (before, own) per partition
    for decided in order:
        event = decided.envelope.event
        if isinstance(event, events.PartitionChanged):
            key = (event.topic, decided.life, event.partition)
            held = latest.get(key)
            latest[key] = (None if held is None else held[1], decided)
        elif isinstance(event, events.LeaderElected) and event.leader != NO_LEADER:
            pair = latest.get((event.topic, decided.life, event.partition))
            if pair is None or pair[0] is None or event.election in RECORDED_UNCLEAN:
                continue
            before = _changed(pair[0])
            allowed, name = (before.elr, "ELR") if event.election == "elr" else (before.isr, "ISR")
            when = "before it"
            if event.election in FROM_OWN_ISR:
                allowed, when = _changed(pair[1]).isr, "its change left"
            if event.leader not in allowed:
                yield finding(
                    "election_from_isr_or_elr",
                    topic=event.topic,
                    partition=event.partition,
                    replica=event.leader,
                    events=[pair[0].id, decided.id],
                    detail=f"{event.election} election of broker {event.leader} from outside the {name} "
                    f"{_listed(allowed)} {when}",
                )


CHECKS: Final[dict[str, Callable[[History], Iterable[Finding]]]] = {
    "one_leader_per_epoch": one_leader_per_epoch,
    "epochs_monotonic": epochs_monotonic,
    "leader_in_isr": leader_in_isr,
    "isr_elr_well_formed": isr_elr_well_formed,
    "election_from_isr_or_elr": election_from_isr_or_elr,
}
