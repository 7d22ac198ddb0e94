"""The replica-state and high-watermark invariants: each replica's offsets stay in order, and a leader's HW only
moves up, in a chain, and only past what its maximal ISR holds.

Room: libs/audit (pure: no I/O). The specification the PySpark checks of `hightide.history.checks.high_watermark`
must match row for row. It owns three checks:

| check               | rule                                                                     | source           |
| ------------------- | ------------------------------------------------------------------------ | ---------------- |
| hw_within_log       | after every offset-changing event of a replica: log start <= HW <= LEO    | B1 HwLeLeo       |
| leader_hw_monotonic | in one leadership tenure, HighWatermarkAdvanced goes strictly up and     | C1 (Vanlightly   |
|                     | chains (`previous` is the HW the tenure held)                            | §6.4)            |
| hw_advance_guarded  | a leader's HW advances to h only with |ISR| >= min ISR and every other    | C2 SafeToAdvance |
|                     | maximal-ISR member known (FollowerStateUpdated) at LEO >= h               | Hwm, Kip320 r. 3 |

Replica state (hw_within_log) is folded by `hightide.audit.rebuild`'s replica rules, keyed by (topic, partition,
replica) over the emitter streams in `History.all()` order: LogOpened replaces the state; RecordsAppended sets the
LEO; HighWatermarkAdvanced the HW; LogTruncated the LEO (`truncated_to`) and HW, and the log start becomes
`truncated_to` (start_over) or min(log start, `truncated_to`); LogStartOffsetAdvanced sets the log start;
LogDeleted and ReplicaOffline end the replica (what comes after starts from 0, 0, 0, as the rebuild does). A
finding is reported where the order breaks (the state before the event held it), not again while it stays broken.

A leadership tenure (leader_hw_monotonic, hw_advance_guarded) is a run of one broker incarnation's events for one
replica from a BecameLeader to its next BecameLeader, BecameFollower, LogOpened, LogDeleted or ReplicaOffline.
In a tenure, as `hightide.core.partition` does (Kafka's Partition.scala):

- the committed ISR is the last BecameLeader's or IsrChangeCompleted's `isr`, where an IsrChangeCompleted
  counts only while a proposal is in flight: Kafka changes a leader's committed ISR only in makeLeader or on the
  answer to its pending AlterPartition, so a leader that "completes" a change it never proposed has not heard
  the controller (the `leader_shrinks_isr_on_its_own` mutant does that);
- an IsrChangeProposed is pending until an IsrChangeCompleted with error NONE, OPERATION_NOT_ATTEMPTED or
  INELIGIBLE_REPLICA (the other errors leave it in flight until new metadata, a BecameLeader, arrives); the
  maximal ISR is committed | pending (Kafka's maximalIsr: an expansion counts the new member at once, a shrink
  keeps the old ones);
- a follower's known LEO is the leader's last FollowerStateUpdated for it since the leader's core was made or
  last followed (LogOpened, BecameFollower, LogDeleted, ReplicaOffline); a BecameLeader keeps it (Kafka's
  resetReplicaState keeps it when the leader was already leading). Unknown counts as -1;
- the core emits FollowerStateUpdated before the HighWatermarkAdvanced it causes, so the order of the stream is
  the order of knowledge;
- min.insync.replicas is effective as Kafka's effectiveMinIsr: min(the topic's value, |replicas|), and it is
  the committed ISR that must reach it (§8 C2's #isr_r; Kafka's isUnderMinIsr, and `hightide.core.partition`'s
  gate, count `partitionState.isr`): a pending expansion does not make an ISR big enough, though every member
  of the maximal ISR must hold the records.

The topic's value is the least that any TopicCreated or TopicConfigsAltered of that topic name in the history set,
committed or not (an abandoned intent can only lower the bound). A TopicCreated without it, a config removed, or a
value that is not a whole number >= 1 counts as the cluster's default: the least `min_insync_replicas` that a
ControllerElected of that cluster (the envelope's cluster id) names (the controller's own `min.insync.replicas`,
which it writes into the partition records of every topic without one), or Kafka's default, 1 (the
`min.insync.replicas` row of `hightide.core.topic_configs`), where no ControllerElected says (events from before its
version 3). A broker applies a config change when its metadata reaches it, which its own events do not order, and
controllers with different defaults may take turns, so the least value is the one rule that never flags a legitimate
advance.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.protocol import events
from hightide.protocol.envelope import Envelope

HW_WITHIN_LOG: Final = "hw_within_log"
LEADER_HW_MONOTONIC: Final = "leader_hw_monotonic"
HW_ADVANCE_GUARDED: Final = "hw_advance_guarded"

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
DEFAULT_MIN_INSYNC_REPLICAS: Final = 1  # hightide.core.topic_configs (Kafka's default)
MIN_INSYNC_REPLICAS_DIGITS_MAX: Final = 9  # a whole number of at most 9 digits; anything else reads as the default
ENDS_PROPOSAL_ERRORS: Final = ("NONE", "OPERATION_NOT_ATTEMPTED", "INELIGIBLE_REPLICA")
NO_LEO: Final = -1

ReplicaKey = tuple[str, int, int]  # topic, partition, replica
Offsets = tuple[int, int, int]  # log start, HW, LEO

_OFFSET_CHANGES: Final = (
    events.LogOpened,
    events.RecordsAppended,
    events.HighWatermarkAdvanced,
    events.LogTruncated,
    events.LogStartOffsetAdvanced,
)
_TENURE_ENDS: Final = (events.BecameFollower, events.LogOpened, events.LogDeleted, events.ReplicaOffline)
_BY_REPLICA: Final = (events.BecameLeader, events.HighWatermarkAdvanced, *_TENURE_ENDS)
_BY_LEADER: Final = (events.IsrChangeProposed, events.IsrChangeCompleted, events.FollowerStateUpdated)


# -- B1 ----------------------------------------------------------------------------------------------------------


def hw_within_log(history: History) -> Iterator[Finding]:
    """B1 HwLeLeo (reliability.md §8; hachikuji's follower HW = min(leader HW, LEO)): on every replica, after
    every event of its broker that moves its offsets, log start offset <= HW <= LEO. Offsets named: LEO .. HW - 1
    when the HW is past the LEO, else HW .. log start - 1."""
    held: dict[ReplicaKey, Offsets] = {}
    for envelope in history.all():
        event = envelope.event
        if isinstance(event, events.LogDeleted | events.ReplicaOffline):
            held.pop((event.topic, event.partition, event.replica), None)
        elif isinstance(event, _OFFSET_CHANGES):
            key = (event.topic, event.partition, event.replica)
            before = None if isinstance(event, events.LogOpened) else held.get(key, (0, 0, 0))
            after = _folded(before or (0, 0, 0), event)
            held[key] = after
            if not _in_order(after) and (before is None or _in_order(before)):
                yield _out_of_order(envelope, key, after)


def _folded(before: Offsets, event: events.Event) -> Offsets:
    """The replica's (log start, HW, LEO) after one event, by the rebuild's replica rules."""
    log_start, high_watermark, log_end = before
    match event:
        case events.LogOpened():
            return event.log_start_offset, event.high_watermark, event.log_end_offset
        case events.RecordsAppended():
            return log_start, high_watermark, event.log_end_offset
        case events.HighWatermarkAdvanced():
            return log_start, event.high_watermark, log_end
        case events.LogTruncated():
            start = event.truncated_to if event.reason == "start_over" else min(log_start, event.truncated_to)
            return start, event.high_watermark, event.truncated_to
        case events.LogStartOffsetAdvanced():
            return event.log_start_offset, high_watermark, log_end
    raise AssertionError(f"not an offset change: {event}")


def _in_order(offsets: Offsets) -> bool:
    log_start, high_watermark, log_end = offsets
    return log_start <= high_watermark <= log_end


def _out_of_order(envelope: Envelope, key: ReplicaKey, offsets: Offsets) -> Finding:
    log_start, high_watermark, log_end = offsets
    first, last = (log_end, high_watermark - 1) if high_watermark > log_end else (high_watermark, log_start - 1)
    return finding(
        HW_WITHIN_LOG,
        topic=key[0],
        partition=key[1],
        replica=key[2],
        first_offset=first,
        last_offset=last,
        events=[History.id(envelope)],
        detail=(f"log start {log_start} <= HW {high_watermark} <= LEO {log_end} broken after {envelope.event.TYPE}"),
    )


# -- leadership tenures (C1, C2) -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tenure:
    """One leadership tenure of a replica, as its broker's events tell it."""

    leader_epoch: int
    replicas: tuple[int, ...]
    high_watermark: int  # the HW the tenure last stated (BecameLeader, then each HighWatermarkAdvanced)
    high_watermark_event: str
    isr: tuple[int, ...]
    isr_event: str
    pending: tuple[int, ...] = ()  # the members of an IsrChangeProposed in flight
    pending_event: str = ""

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return tuple(sorted({*self.isr, *self.pending}))


@dataclass(slots=True)
class _LeaderView:
    """What one broker incarnation's replica knows as leader: its tenure (None when not leading) and its
    followers' LEOs with the FollowerStateUpdated that said each."""

    tenure: _Tenure | None = None
    follower_leos: dict[int, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Advance:
    """A HighWatermarkAdvanced in a leader's tenure, with what the leader knew at that moment."""

    envelope: Envelope
    event: events.HighWatermarkAdvanced
    tenure: _Tenure
    hw_before: int
    hw_before_event: str
    follower_leos: dict[int, tuple[int, str]]


def leader_advances(history: History) -> Iterator[_Advance]:
    """Every HighWatermarkAdvanced a replica emitted while it led, with its tenure as it stood just before."""
    for stream in history.streams.values():
        views: dict[tuple[str, str, int, int], _LeaderView] = {}
        for envelope in stream:
            event = envelope.event
            if isinstance(event, _BY_REPLICA):
                replica = event.replica
            elif isinstance(event, _BY_LEADER):
                replica = event.leader  # their `replica`, if any, is the follower
            else:
                continue
            key = (envelope.emitter.incarnation, event.topic, event.partition, replica)
            advance = _step(views.setdefault(key, _LeaderView()), envelope)
            if advance is not None:
                yield advance


def _step(view: _LeaderView, envelope: Envelope) -> _Advance | None:
    event, event_id = envelope.event, History.id(envelope)
    tenure = view.tenure
    match event:
        case events.BecameLeader():
            isr = tuple(event.isr)
            view.tenure = _Tenure(
                event.leader_epoch, tuple(event.replicas), event.high_watermark, event_id, isr, event_id
            )
        case _ if isinstance(event, _TENURE_ENDS):
            view.tenure = None
            view.follower_leos = {}
        case events.FollowerStateUpdated():
            view.follower_leos[event.replica] = (event.log_end_offset, event_id)
        case events.IsrChangeProposed() if tenure is not None:
            tenure.pending, tenure.pending_event = tuple(event.proposed_isr), event_id
        case events.IsrChangeCompleted() if tenure is not None and tenure.pending:
            tenure.isr, tenure.isr_event = tuple(event.isr), event_id
            if event.error in ENDS_PROPOSAL_ERRORS:
                tenure.pending, tenure.pending_event = (), ""
        case events.HighWatermarkAdvanced() if tenure is not None:
            advance = _Advance(
                envelope,
                event,
                dataclasses.replace(tenure),
                tenure.high_watermark,
                tenure.high_watermark_event,
                dict(view.follower_leos),
            )
            tenure.high_watermark, tenure.high_watermark_event = event.high_watermark, event_id
            return advance
    return None


# -- C1 ----------------------------------------------------------------------------------------------------------


def leader_hw_monotonic(history: History) -> Iterator[Finding]:
    """C1 LeaderHwMonotonicInTenure (Vanlightly §6.4; reliability.md §8): within one leadership tenure of a
    replica, each HighWatermarkAdvanced goes strictly up (`high_watermark` > `previous`) and chains (`previous` is
    the HW the tenure held: its BecameLeader's, then the last advance's). Not required of followers. Offsets
    named: the lowest and the highest of the three HWs involved."""
    for advance in leader_advances(history):
        event, before = advance.event, advance.hw_before
        if event.high_watermark > event.previous == before:
            continue
        values = (before, event.previous, event.high_watermark)
        yield finding(
            LEADER_HW_MONOTONIC,
            topic=event.topic,
            partition=event.partition,
            replica=event.replica,
            first_offset=min(values),
            last_offset=max(values),
            events=[History.id(advance.envelope), advance.hw_before_event],
            detail=(
                f"leader {event.replica} of epoch {advance.tenure.leader_epoch} moved its HW from {event.previous} "
                f"to {event.high_watermark} while it held HW {before}"
            ),
        )


# -- C2 ----------------------------------------------------------------------------------------------------------


def hw_advance_guarded(history: History) -> Iterator[Finding]:
    """C2 HwAdvanceGuard (TLA+ SafeToAdvanceHwm, Kip320 rule 3, Vanlightly §6.5.2; Kafka's maybeIncrementLeaderHW):
    when a leader's HW advances to h, its committed ISR has at least min(min.insync.replicas, |replicas|)
    members, and every maximal-ISR member but the leader is known at LEO >= h. One finding for a too small ISR
    (offsets
    previous .. h - 1) and one per member behind (offsets max(previous, its LEO) .. h - 1)."""
    min_isr = topic_min_insync_replicas(history)
    defaults = cluster_min_insync_replicas(history)
    for advance in leader_advances(history):
        default = defaults.get(advance.envelope.cluster_id, DEFAULT_MIN_INSYNC_REPLICAS)
        yield from _guard(advance, min_isr.get(advance.event.topic, default))


def _guard(advance: _Advance, topic_min_isr: int) -> Iterator[Finding]:
    event, tenure = advance.event, advance.tenure
    leader, maximal = event.replica, tenure.maximal_isr
    said = (
        f"leader {leader} of epoch {tenure.leader_epoch} advanced the HW from {event.previous} "
        f"to {event.high_watermark}"
    )
    effective = min(topic_min_isr, len(tenure.replicas))
    if len(tenure.isr) < effective:
        members = ", ".join(str(member) for member in sorted(tenure.isr))
        yield finding(
            HW_ADVANCE_GUARDED,
            topic=event.topic,
            partition=event.partition,
            replica=leader,
            first_offset=event.previous,
            last_offset=event.high_watermark - 1,
            events=[History.id(advance.envelope), tenure.isr_event],
            detail=f"{said} with ISR [{members}], below min.insync.replicas {effective}",
        )
    for member in maximal:
        if member == leader:
            continue
        log_end, said_by = advance.follower_leos.get(member, (NO_LEO, ""))
        if log_end >= event.high_watermark:
            continue
        known = f"was known at LEO {log_end}" if said_by else "had no known LEO"
        yield finding(
            HW_ADVANCE_GUARDED,
            topic=event.topic,
            partition=event.partition,
            replica=leader,
            first_offset=max(event.previous, log_end),
            last_offset=event.high_watermark - 1,
            events=[History.id(advance.envelope), *([said_by] * bool(said_by))],
            detail=f"{said} while its maximal ISR member {member} {known}",
        )


def topic_min_insync_replicas(history: History) -> dict[str, int]:
    """Each topic name's least min.insync.replicas in the history (see the module docstring)."""
    least: dict[str, int] = {}
    defaults = cluster_min_insync_replicas(history)

    def seen(envelope: Envelope, topic: str, text: str | None) -> None:
        value = min_insync_replicas_value(text, defaults.get(envelope.cluster_id, DEFAULT_MIN_INSYNC_REPLICAS))
        least[topic] = min(value, least.get(topic, value))

    for envelope, created in history.of_type(events.TopicCreated):
        values: list[str | None] = [text for name, text in created.configs if name == MIN_INSYNC_REPLICAS]
        for text in values or [None]:
            seen(envelope, created.topic, text)
    for envelope, altered in history.of_type(events.TopicConfigsAltered):
        for name, text in altered.configs:
            if name == MIN_INSYNC_REPLICAS:
                seen(envelope, altered.topic, text)
    return least


def cluster_min_insync_replicas(history: History) -> dict[str, int]:
    """Each cluster id's min.insync.replicas for a topic that does not set it: the least that a ControllerElected
    of that cluster names (a cluster none names has Kafka's default; see the module docstring)."""
    least: dict[str, int] = {}
    for envelope, elected in history.of_type(events.ControllerElected):
        if elected.min_insync_replicas >= 1:
            cluster = envelope.cluster_id
            least[cluster] = min(elected.min_insync_replicas, least.get(cluster, elected.min_insync_replicas))
    return least


def min_insync_replicas_value(text: str | None, default: int = DEFAULT_MIN_INSYNC_REPLICAS) -> int:
    """A config value as the audit reads it: a whole number >= 1, else (unset, removed, unreadable) `default`, the
    cluster's."""
    if text is None or re.fullmatch(f"[0-9]{{1,{MIN_INSYNC_REPLICAS_DIGITS_MAX}}}", text) is None or int(text) < 1:
        return default
    return int(text)


CHECKS: Final[dict[str, Callable[[History], Iterable[Finding]]]] = {
    HW_WITHIN_LOG: hw_within_log,
    LEADER_HW_MONOTONIC: leader_hw_monotonic,
    HW_ADVANCE_GUARDED: hw_advance_guarded,
}
