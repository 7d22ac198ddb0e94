"""Rebuild a cluster's replication state from its event history alone: `rebuild(envelopes) -> ClusterState`.

Room: libs/audit (the history's rules, pure: no I/O, no libs/core). This is the specification the PySpark rebuild
job must match, and what a test compares with the live cluster (or its disks) after a run: every replica's log end
offset, high watermark, log start offset and leader epoch cache, and every partition's committed state.

Order. Events are first put in the order their emitters gave them:

1. one emitter incarnation's events by `sequence` (0, 1, 2, ... with no gap; an exact duplicate envelope, as an
   at-least-once relay may store, is dropped);
2. the incarnations of one emitter (service, id) by the `wall_ms` of their first event, then by incarnation name:
   a process restart is a new incarnation, and a process starts after its predecessor died;
3. nothing across emitters, except for the controller's metadata: a replica's state comes from its own broker's
   events only, and a partition's from the controllers'. Controller events are cut into terms at each
   ControllerElected, and terms are ordered by controller epoch (then first wall_ms), since a new controller may
   be a process that started before the one it replaces; within a topic's life, PartitionChanged is then taken
   by `partition_epoch`, never by which controller said it.

Controller decisions are written ahead (hightide.protocol.events' rules): a controller stores a decision's events,
stamped with its controller epoch E and the metadata offset the decision lands at, before it appends the
decision's records, so a controller killed or fenced in between leaves events for a decision that never
committed. The takeover offset of a controller epoch is its ControllerElected's `metadata_offset`: its first batch,
written before it decides anything, so no append of an earlier epoch can land at or after it. Hence the rule:

    a decision event of epoch E at metadata offset s never committed  <=>  s >= the takeover offset of the first
    controller epoch after E that has a ControllerElected, or s > the metadata offset of E's ControllerDeposed
    with reason append_fenced (the stream refused E's next append: nothing of E's landed after that offset)

and such an abandoned intent is left out of the fold (and listed in `ClusterState.abandoned`). With neither, the
decision counts as committed (its controller may still be appending it). Events without a stamp (version 1, -1)
are always kept. Two kept decisions of different controller epochs at one metadata offset contradict the rule and
are reported as an anomaly.

Replica rules, keyed by (topic, partition, broker):

| event                  | the replica after it                                                                 |
| ---------------------- | ------------------------------------------------------------------------------------ |
| LogOpened              | exactly the event's LEO, HW, log start offset and epoch entries (all before is       |
|                        | replaced: a restart recovered the log, or a new log was created)                     |
| RecordsAppended        | LEO = log_end_offset                                                                 |
| LeaderEpochStarted     | epochs = assign(epochs, leader_epoch, start_offset)                                  |
| HighWatermarkAdvanced  | HW = high_watermark                                                                  |
| LogTruncated           | LEO = truncated_to, HW = high_watermark; start_over: log start = truncated_to and    |
|                        | no epochs; otherwise log start = min(log start, truncated_to) and epochs =           |
|                        | truncate_from_end(epochs, truncated_to)                                              |
| LeaderEpochsTruncated  | epochs = truncate_from_end(epochs, end_offset)                                       |
| LogStartOffsetAdvanced | log start = log_start_offset; epochs = truncate_from_start(epochs, log_start_offset) |
| LogDeleted             | the replica is gone                                                                  |
| ReplicaOffline         | the replica is out of service (its storage refused a write): gone from the live set |
|                        | until a LogOpened, when its broker has restarted and recovered the log, brings it back |
|                        | (one not open is a log its storage refused to create or open: no change)             |

The epoch rules are Kafka's LeaderEpochFileCache (`hightide.audit.epochs`).

Partition rules, keyed by (topic, partition): TopicCreated begins a topic's life (its partitions are then those
its PartitionChanged events say); PartitionChanged replaces the partition's state when its partition_epoch is
above the one held; TopicDeleted ends the life and removes the partitions. A topic created again under the same
name starts over (its partition epochs start at 0 again). Offline replicas: ReplicaMarkedOffline adds its replica
to the partition's offline set; a BrokerRegistered of that broker, or the end of the topic's life, clears it.

The rebuild is not blind: wherever an event states what it expects of the state before it (RecordsAppended's
base offset, HighWatermarkAdvanced's previous HW, LogTruncated's LEO and HW before, the LEO and HW in
BecameLeader, BecameFollower and FetchServed, LogDeleted's and ReplicaOffline's LEO) or the order is broken (a
sequence gap, an event for a replica that was never opened, a partition epoch going back), the fold goes on by the
rules above and records an `Anomaly`. A history with a lost or reordered event shows up there, or in a state
that differs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from hightide.audit import epochs
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event

ReplicaKey = tuple[str, int, int]  # topic, partition, broker
PartitionKey = tuple[str, int]  # topic, partition
NO_TERM: Final = -1  # the controller epoch of controller events seen before any ControllerElected


@dataclass(frozen=True, slots=True)
class ReplicaState:
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    epoch_entries: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A place where the history contradicts itself: the event (by emitter and sequence) and what was wrong."""

    emitter: Emitter
    sequence: int
    event_type: str
    detail: str


@dataclass(frozen=True, slots=True)
class AbandonedIntent:
    """A controller decision whose events were stored but whose records never committed: its metadata offset is
    at or past `committed_below`, the offset from which its controller epoch wrote nothing (the next epoch's
    takeover batch, or the offset its fenced append was refused at)."""

    emitter: Emitter
    sequence: int
    event_type: str
    controller_epoch: int
    metadata_offset: int
    committed_below: int


@dataclass(frozen=True, slots=True)
class ClusterState:
    replicas: Mapping[ReplicaKey, ReplicaState]
    partitions: Mapping[PartitionKey, PartitionState]
    anomalies: tuple[Anomaly, ...] = ()
    offline_replicas: Mapping[PartitionKey, tuple[int, ...]] = field(default_factory=dict)
    """Each partition's replicas marked offline (sorted), for partitions that have any."""
    abandoned: tuple[AbandonedIntent, ...] = ()
    """The controller decisions left out because they never committed (in history order)."""


EMPTY_REPLICA: Final = ReplicaState(0, 0, 0, ())


def rebuild(envelopes: Iterable[Envelope]) -> ClusterState:
    """Fold a history (in any order: it is sorted here, see the module docstring) into the state it leaves."""
    anomalies: list[Anomaly] = []
    streams = emitter_streams(envelopes, anomalies)
    replicas = _ReplicaFold(anomalies)
    for stream in streams.values():
        for envelope in stream:
            replicas.apply(envelope)
    replicas.finish()
    partitions = _PartitionFold(anomalies)
    for envelope in controller_order(streams):
        partitions.apply(envelope)
    abandoned = abandoned_intents(streams)
    _check_one_decision_per_offset(streams, anomalies)
    return ClusterState(
        dict(sorted(replicas.states.items())),
        partitions.result(),
        tuple(anomalies),
        partitions.offline_result(),
        tuple(abandoned),
    )


# -- ordering --------------------------------------------------------------------------------------------------


def emitter_streams(
    envelopes: Iterable[Envelope], anomalies: list[Anomaly] | None = None
) -> dict[tuple[str, int], list[Envelope]]:
    """Each emitter's events in its own order: incarnations by first wall_ms (then name), each by sequence.
    Sequence gaps and clashing duplicates are recorded in `anomalies`; exact duplicates are dropped."""
    found = anomalies if anomalies is not None else []
    by_incarnation: dict[Emitter, dict[int, Envelope]] = {}
    for envelope in envelopes:
        held = by_incarnation.setdefault(envelope.emitter, {})
        previous = held.get(envelope.sequence)
        if previous is not None and previous != envelope:
            found.append(_anomaly(envelope, "two different events with one sequence number"))
            continue
        held[envelope.sequence] = envelope
    incarnations: dict[tuple[str, int], list[list[Envelope]]] = {}
    for emitter, held in by_incarnation.items():
        ordered = [held[sequence] for sequence in sorted(held)]
        expected = 0
        for envelope in ordered:
            if envelope.sequence != expected:
                found.append(_anomaly(envelope, f"sequence {envelope.sequence} follows {expected - 1}: events lost"))
            expected = envelope.sequence + 1
        incarnations.setdefault((emitter.service, emitter.emitter_id), []).append(ordered)
    streams: dict[tuple[str, int], list[Envelope]] = {}
    for key in sorted(incarnations):
        runs = sorted(incarnations[key], key=lambda run: (run[0].wall_ms, run[0].emitter.incarnation))
        streams[key] = [envelope for run in runs for envelope in run]
    return streams


def controller_order(streams: Mapping[tuple[str, int], list[Envelope]]) -> list[Envelope]:
    """Every emitter's metadata events (TopicCreated, TopicDeleted, PartitionChanged, ReplicaMarkedOffline,
    BrokerRegistered), cut into terms at ControllerElected and ordered by (controller epoch, first wall_ms,
    emitter), without the abandoned intents (decisions that never committed, see the module docstring)."""
    takeovers = Takeovers.of(streams)
    terms: list[tuple[tuple[int, int, str, int, str], list[Envelope]]] = []
    for (service, emitter_id), stream in streams.items():
        term: list[Envelope] = []
        controller_epoch = NO_TERM
        for envelope in stream:
            event = envelope.event
            if isinstance(event, events.ControllerElected):
                if term:
                    terms.append((_term_key(controller_epoch, term[0], service, emitter_id), term))
                term, controller_epoch = [], event.controller_epoch
            if isinstance(event, _METADATA_EVENTS) and takeovers.overtaking(event) is None:
                term.append(envelope)
        if term:
            terms.append((_term_key(controller_epoch, term[0], service, emitter_id), term))
    terms.sort(key=lambda keyed: keyed[0])
    return [envelope for _, term in terms for envelope in term]


def _term_key(controller_epoch: int, first: Envelope, service: str, emitter_id: int) -> tuple[int, int, str, int, str]:
    return (controller_epoch, first.wall_ms, service, emitter_id, first.emitter.incarnation)


@dataclass(frozen=True, slots=True)
class Takeovers:
    """Where each controller epoch's writing ended: the takeover offsets of the epochs after it (each
    ControllerElected's metadata offset), and the offset a fenced append of its own was refused at."""

    epochs: tuple[int, ...]  # ascending
    next_takeover: tuple[int, ...]  # next_takeover[i]: the least takeover offset of epochs[i:]
    fenced_at: Mapping[int, int]  # controller epoch -> the offset its refused append would have landed at

    @classmethod
    def of(cls, streams: Mapping[tuple[str, int], list[Envelope]]) -> Takeovers:
        offsets: dict[int, int] = {}
        fenced_at: dict[int, int] = {}
        for stream in streams.values():
            for envelope in stream:
                event = envelope.event
                if isinstance(event, events.ControllerElected) and event.metadata_offset >= 0:
                    held = offsets.get(event.controller_epoch, event.metadata_offset)
                    offsets[event.controller_epoch] = min(held, event.metadata_offset)
                if isinstance(event, events.ControllerDeposed):
                    cls._fenced(event, fenced_at)
        epochs = sorted(offsets)
        least: list[int] = []
        for epoch in reversed(epochs):
            least.append(min(offsets[epoch], least[-1]) if least else offsets[epoch])
        return cls(tuple(epochs), tuple(reversed(least)), fenced_at)

    @staticmethod
    def _fenced(deposed: events.ControllerDeposed, fenced_at: dict[int, int]) -> None:
        """An append refused by the stream: nothing of that epoch landed after the last offset it knew."""
        if deposed.reason == "append_fenced" and deposed.metadata_offset >= 0:
            fenced_at[deposed.controller_epoch] = deposed.metadata_offset + 1

    def committed_below(self, controller_epoch: int) -> int | None:
        """The offset from which `controller_epoch` wrote nothing, if the history knows one."""
        index = bisect.bisect_right(self.epochs, controller_epoch)
        bounds = [self.next_takeover[index]] if index < len(self.epochs) else []
        if controller_epoch in self.fenced_at:
            bounds.append(self.fenced_at[controller_epoch])
        return min(bounds, default=None)

    def overtaking(self, event: Event) -> int | None:
        """For a decision that never committed, the offset its epoch's writing ended at; None for any other
        event."""
        stamp = events.decision_stamp(event)
        if stamp is None or stamp[0] < 0 or stamp[1] < 0:
            return None
        bound = self.committed_below(stamp[0])
        return bound if bound is not None and stamp[1] >= bound else None


def abandoned_intents(streams: Mapping[tuple[str, int], list[Envelope]]) -> list[AbandonedIntent]:
    """Every controller decision in the history that never committed (the rule in the module docstring)."""
    takeovers = Takeovers.of(streams)
    found = []
    for stream in streams.values():
        for envelope in stream:
            takeover = takeovers.overtaking(envelope.event)
            stamp = events.decision_stamp(envelope.event)
            if takeover is not None and stamp is not None:
                emitter, sequence, name = envelope.emitter, envelope.sequence, envelope.event.TYPE
                found.append(AbandonedIntent(emitter, sequence, name, stamp[0], stamp[1], takeover))
    return found


def _check_one_decision_per_offset(streams: Mapping[tuple[str, int], list[Envelope]], anomalies: list[Anomaly]) -> None:
    """Kept decisions at one metadata offset are of one controller epoch: a batch has one writer."""
    takeovers = Takeovers.of(streams)
    writers: dict[int, int] = {}
    for stream in streams.values():
        for envelope in stream:
            stamp = events.decision_stamp(envelope.event)
            if stamp is None or stamp[0] < 0 or stamp[1] < 0 or takeovers.overtaking(envelope.event) is not None:
                continue
            writer = writers.setdefault(stamp[1], stamp[0])
            if writer != stamp[0]:
                detail = f"decisions of controller epochs {writer} and {stamp[0]} at metadata offset {stamp[1]}"
                anomalies.append(_anomaly(envelope, detail))


# -- replicas --------------------------------------------------------------------------------------------------

_REPLICA_CHANGES: Final = (
    events.LogOpened,
    events.RecordsAppended,
    events.LeaderEpochStarted,
    events.HighWatermarkAdvanced,
    events.LogTruncated,
    events.LeaderEpochsTruncated,
    events.LogStartOffsetAdvanced,
)


@dataclass(slots=True)
class _Replica:
    log_end_offset: int = 0
    high_watermark: int = 0
    log_start_offset: int = 0
    epoch_entries: epochs.EpochEntries = ()

    def frozen(self) -> ReplicaState:
        return ReplicaState(self.log_end_offset, self.high_watermark, self.log_start_offset, self.epoch_entries)


@dataclass(slots=True)
class _ReplicaFold:
    anomalies: list[Anomaly]
    open: dict[ReplicaKey, _Replica] = field(default_factory=dict)
    last: dict[ReplicaKey, Envelope] = field(default_factory=dict)  # each replica's last change

    @property
    def states(self) -> dict[ReplicaKey, ReplicaState]:
        return {key: replica.frozen() for key, replica in self.open.items()}

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        match event:
            case events.BecameLeader() | events.BecameFollower():
                self._check_offsets(envelope, (event.topic, event.partition, event.replica), event)
            case events.FetchServed():
                self._check_offsets(envelope, (event.topic, event.partition, event.leader), event)
            case events.ReplicaOffline() if (event.topic, event.partition, event.replica) not in self.open:
                # The storage refused to create or open its log (a full or failing disk when the replica was
                # assigned, or as its broker started): no LogOpened came, so nothing leaves the live set; the event
                # tells the controller it is offline.
                self._check_emitter(envelope, event.replica)
            case events.LogDeleted() | events.ReplicaOffline():
                replica = self._replica(envelope, (event.topic, event.partition, event.replica))
                self._expect(envelope, "LEO", event.log_end_offset, replica.log_end_offset)
                del self.open[(event.topic, event.partition, event.replica)]
            case _ if isinstance(event, _REPLICA_CHANGES):
                key = (event.topic, event.partition, event.replica)
                self._change(envelope, key, event)
                self._check_consistent(envelope, key)

    def _change(self, envelope: Envelope, key: ReplicaKey, event: Event) -> None:
        """One replica-changing event, by the table in the module docstring."""
        if isinstance(event, events.LogOpened):
            self._opened(envelope, event)
            return
        replica = self._replica(envelope, key)
        match event:
            case events.RecordsAppended():
                self._expect(envelope, "base offset (the LEO before)", event.base_offset, replica.log_end_offset)
                self._expect(envelope, "LEO (last offset + 1)", event.log_end_offset, event.last_offset + 1)
                replica.log_end_offset = event.log_end_offset
            case events.LeaderEpochStarted():
                replica.epoch_entries = self._assign(envelope, replica.epoch_entries, event)
            case events.HighWatermarkAdvanced():
                self._expect(envelope, "previous HW", event.previous, replica.high_watermark)
                replica.high_watermark = event.high_watermark
            case events.LogTruncated():
                self._truncated(envelope, replica, event)
            case events.LeaderEpochsTruncated():
                replica.epoch_entries = epochs.truncate_from_end(replica.epoch_entries, event.end_offset)
            case events.LogStartOffsetAdvanced():
                replica.log_start_offset = event.log_start_offset
                replica.epoch_entries = epochs.truncate_from_start(replica.epoch_entries, event.log_start_offset)

    def _opened(self, envelope: Envelope, event: events.LogOpened) -> None:
        key = (event.topic, event.partition, event.replica)
        self._check_emitter(envelope, event.replica)
        if not epochs.is_well_formed(event.leader_epochs):
            self._note(envelope, f"epoch entries {event.leader_epochs} are not increasing")
        self.open[key] = _Replica(
            event.log_end_offset, event.high_watermark, event.log_start_offset, tuple(event.leader_epochs)
        )

    def _truncated(self, envelope: Envelope, replica: _Replica, event: events.LogTruncated) -> None:
        self._expect(envelope, "LEO before", event.log_end_offset_before, replica.log_end_offset)
        self._expect(envelope, "HW before", event.high_watermark_before, replica.high_watermark)
        offset = event.truncated_to
        replica.log_end_offset = offset
        replica.high_watermark = event.high_watermark
        if event.reason == "start_over":
            replica.log_start_offset = offset
            replica.epoch_entries = ()
        else:
            replica.log_start_offset = min(replica.log_start_offset, offset)
            replica.epoch_entries = epochs.truncate_from_end(replica.epoch_entries, offset)

    def _assign(
        self, envelope: Envelope, entries: epochs.EpochEntries, event: events.LeaderEpochStarted
    ) -> epochs.EpochEntries:
        try:
            return epochs.assign(entries, event.leader_epoch, event.start_offset)
        except epochs.InvalidEpochEntry as error:
            self._note(envelope, str(error))
            return entries

    def _check_offsets(
        self,
        envelope: Envelope,
        key: ReplicaKey,
        event: events.BecameLeader | events.BecameFollower | events.FetchServed,
    ) -> None:
        replica = self.open.get(key)
        if replica is None:
            self._note(envelope, f"replica {key} was never opened (or was deleted)")
            return
        self._expect(envelope, "LEO", event.log_end_offset, replica.log_end_offset)
        self._expect(envelope, "HW", event.high_watermark, replica.high_watermark)

    def _replica(self, envelope: Envelope, key: ReplicaKey) -> _Replica:
        """The open replica `key`; an event for one never opened (or deleted) is an anomaly, and starts it empty."""
        self._check_emitter(envelope, key[2])
        replica = self.open.get(key)
        if replica is None:
            self._note(envelope, f"replica {key} was never opened (or was deleted)")
            replica = self.open[key] = _Replica()
        return replica

    def _check_emitter(self, envelope: Envelope, replica: int) -> None:
        if envelope.emitter.emitter_id != replica:
            self._note(envelope, f"replica {replica}'s event emitted by {envelope.emitter.emitter_id}")

    def _check_consistent(self, envelope: Envelope, key: ReplicaKey) -> None:
        replica = self.open[key]
        self.last[key] = envelope
        if not 0 <= replica.log_start_offset <= replica.high_watermark <= replica.log_end_offset:
            self._note(envelope, f"log start <= HW <= LEO broken: {replica.frozen()}")

    def finish(self) -> None:
        """Checks that hold only between whole operations: a follower's append announces the epochs of its
        batches (LeaderEpochStarted) before the RecordsAppended that moves its LEO past them."""
        for key, replica in self.open.items():
            if replica.epoch_entries and replica.epoch_entries[-1][1] > replica.log_end_offset:
                self._note(self.last[key], f"an epoch starts beyond the LEO: {replica.frozen()}")

    def _expect(self, envelope: Envelope, what: str, said: int, held: int) -> None:
        if said != held:
            self._note(envelope, f"{what} is {said} in the event but {held} in the history")

    def _note(self, envelope: Envelope, detail: str) -> None:
        self.anomalies.append(_anomaly(envelope, detail))


# -- partitions ------------------------------------------------------------------------------------------------

_METADATA_EVENTS: Final = (
    events.TopicCreated,
    events.TopicDeleted,
    events.PartitionChanged,
    events.ReplicaMarkedOffline,
    events.BrokerRegistered,
)


@dataclass(slots=True)
class _PartitionFold:
    anomalies: list[Anomaly]
    topic_ids: dict[str, str] = field(default_factory=dict)  # live topics: name -> topic id
    deleted: set[str] = field(default_factory=set)  # names whose last life ended
    partitions: dict[PartitionKey, PartitionState] = field(default_factory=dict)
    offline: dict[PartitionKey, set[int]] = field(default_factory=dict)

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        if isinstance(event, events.ReplicaMarkedOffline):
            self.offline.setdefault((event.topic, event.partition), set()).add(event.replica)
        elif isinstance(event, events.BrokerRegistered):
            for replicas in self.offline.values():
                replicas.discard(event.broker)
        elif isinstance(event, events.TopicCreated):
            if event.topic in self.topic_ids:
                self._note(envelope, f"topic {event.topic} created again while it exists")
            self._forget(event.topic)
            self.topic_ids[event.topic] = event.topic_id
            self.deleted.discard(event.topic)
        elif isinstance(event, events.TopicDeleted):
            if self.topic_ids.get(event.topic) != event.topic_id:
                self._note(envelope, f"topic {event.topic} ({event.topic_id}) deleted but not alive")
            self._forget(event.topic)
            self.topic_ids.pop(event.topic, None)
            self.deleted.add(event.topic)
        elif isinstance(event, events.PartitionChanged):
            self._changed(envelope, event)

    def _changed(self, envelope: Envelope, event: events.PartitionChanged) -> None:
        if event.topic in self.deleted:
            self._note(envelope, f"a change of deleted topic {event.topic}: ignored")
            return
        if event.topic not in self.topic_ids:
            self._note(envelope, f"a change of topic {event.topic} that was never created")
        key = (event.topic, event.partition)
        state = PartitionState(
            replicas=tuple(event.replicas),
            isr=tuple(event.isr),
            elr=tuple(event.elr),
            last_known_elr=tuple(event.last_known_elr),
            leader=event.leader,
            leader_epoch=event.leader_epoch,
            partition_epoch=event.partition_epoch,
        )
        held = self.partitions.get(key)
        if held is not None and event.partition_epoch <= held.partition_epoch:
            if state != held:
                self._note(envelope, f"partition epoch {event.partition_epoch} after {held.partition_epoch}")
            return
        self.partitions[key] = state

    def _forget(self, topic: str) -> None:
        for key in [key for key in self.partitions if key[0] == topic]:
            del self.partitions[key]
        for key in [key for key in self.offline if key[0] == topic]:
            del self.offline[key]

    def result(self) -> dict[PartitionKey, PartitionState]:
        return dict(sorted(self.partitions.items()))

    def offline_result(self) -> dict[PartitionKey, tuple[int, ...]]:
        return {key: tuple(sorted(replicas)) for key, replicas in sorted(self.offline.items()) if replicas}

    def _note(self, envelope: Envelope, detail: str) -> None:
        self.anomalies.append(_anomaly(envelope, detail))


def _anomaly(envelope: Envelope, detail: str) -> Anomaly:
    return Anomaly(envelope.emitter, envelope.sequence, envelope.event.TYPE, detail)


__all__ = [
    "AbandonedIntent",
    "Anomaly",
    "ClusterState",
    "PartitionKey",
    "PartitionState",
    "ReplicaKey",
    "ReplicaState",
    "Takeovers",
    "abandoned_intents",
    "controller_order",
    "emitter_streams",
    "rebuild",
]
