"""Group histories as a lake holds them, for the group checks of the history audit (`hightide.audit.checks.groups`)
and their Spark twins: hand-written stories, each breaking one group invariant (or none), and the seeded group
simulation's runs with every event in an envelope of the coordinator that emitted it.

Each story uses its own group and its own emitter incarnations, so that all of them together are one valid history
too (the parity test audits them in one lake).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hightide.core.effects import Emit
from hightide.core.group_coordinator import GroupEffect
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event
from simulation.groups import WALL0, GroupSimulation

TOPIC = "t"
BAD_COMMIT_SEED = 20  # the first seed at which the simulation catches a coordinator that accepts stale commits


@dataclass
class Story:
    """Envelopes written in the order they happen (each at the wall_ms given), each emitter incarnation numbered
    from 0. The group is the story's name."""

    name: str
    envelopes: list[Envelope] = field(default_factory=list)
    _sequences: dict[Emitter, int] = field(default_factory=dict)

    def broker(self, broker_id: int) -> Emitter:
        return Emitter("broker", broker_id, f"broker-{broker_id}-{self.name}")

    def consumer(self, consumer_id: int = 7) -> Emitter:
        return Emitter("consumer", consumer_id, f"consumer-{consumer_id}-{self.name}")

    def at(self, wall_ms: int, emitter: Emitter, event: Event) -> Envelope:
        sequence = self._sequences.get(emitter, 0)
        self._sequences[emitter] = sequence + 1
        envelope = Envelope("test", emitter, sequence, wall_ms, wall_ms * 1_000_000, event)
        self.envelopes.append(envelope)
        return envelope

    def started(self, wall_ms: int, generation: int, *members: str, broker: int = 1) -> Envelope:
        event = events.GroupGenerationStarted(
            group_id=self.name,
            generation_id=generation,
            protocol_type="consumer",
            protocol="range" if members else None,
            leader=members[0] if members else None,
            members=members,
        )
        return self.at(wall_ms, self.broker(broker), event)

    def synced(self, wall_ms: int, generation: int, *rows: tuple[str, int], broker: int = 1) -> Envelope:
        event = events.GroupAssignmentSynced(
            group_id=self.name,
            generation_id=generation,
            members=tuple(m for m, _ in rows),
            topics=tuple(TOPIC for _ in rows),
            partitions=tuple(p for _, p in rows),
        )
        return self.at(wall_ms, self.broker(broker), event)

    def committed(
        self, wall_ms: int, generation: int, member: str, offset: int, partition: int = 0, broker: int = 1
    ) -> Envelope:
        event = events.OffsetsCommitted(
            group_id=self.name,
            generation_id=generation,
            member_id=member,
            topics=(TOPIC,),
            partitions=(partition,),
            offsets=(offset,),
        )
        return self.at(wall_ms, self.broker(broker), event)

    def loaded(self, wall_ms: int, generation: int, *members: str, broker: int = 2) -> Envelope:
        event = events.GroupLoaded(
            group_id=self.name,
            partition=0,
            generation_id=generation,
            state="Stable" if members else "Empty",
            members=members,
            offsets_count=1,
        )
        return self.at(wall_ms, self.broker(broker), event)

    def unloaded(self, wall_ms: int, generation: int, broker: int = 1) -> Envelope:
        event = events.GroupUnloaded(group_id=self.name, partition=0, generation_id=generation)
        return self.at(wall_ms, self.broker(broker), event)

    def deleted(self, wall_ms: int, generation: int, broker: int = 1) -> Envelope:
        return self.at(
            wall_ms, self.broker(broker), events.GroupDeleted(group_id=self.name, partition=0, generation_id=generation)
        )

    def assigned(
        self, wall_ms: int, member: str, generation: int, committed: int, start: int, partition: int = 0
    ) -> Envelope:
        event = events.PartitionsAssigned(
            group_id=self.name,
            member_id=member,
            generation_id=generation,
            topics=(TOPIC,),
            partitions=(partition,),
            committed=(committed,),
            offsets=(start,),
        )
        return self.at(wall_ms, self.consumer(), event)


def kept_promises() -> tuple[Story, list[Envelope]]:
    """A group through rebalances, commits, a coordinator failover, an empty group's simple commit, a deletion and
    a new life; consumers resume at the commits. No violation."""
    s = Story("kept")
    s.started(10, 1, "a", "b")
    s.synced(11, 1, ("a", 0), ("b", 1))
    s.committed(12, 1, "a", 5)
    s.assigned(13, "b", 1, -1, 0, partition=1)  # nothing committed yet: auto.offset.reset decides
    s.started(20, 2, "a")
    s.synced(21, 2, ("a", 0), ("a", 1))
    s.assigned(22, "a", 2, 5, 5)
    s.committed(23, 2, "a", 9)
    s.started(24, 3, "a", "b")  # lost with its coordinator before the sync: the next one starts 3 again
    s.unloaded(30, 3)
    s.loaded(31, 2, "a")
    s.started(32, 3, "b", "a", broker=2)
    s.synced(33, 3, ("a", 0), ("b", 1), broker=2)
    s.assigned(34, "a", 3, 9, 9)
    s.started(40, 4, broker=2)
    s.committed(41, -1, "", 11, broker=2)
    s.deleted(50, 4, broker=2)
    s.started(51, 1, "c", broker=2)  # a deleted group is a new group
    s.assigned(52, "c", 1, -1, 0)  # its commits went with it
    return s, []


def started_twice() -> tuple[Story, list[Envelope]]:
    """Two coordinators (a deposed one that did not know) each completed a rebalance into generation 2."""
    s = Story("twice")
    s.started(10, 1, "a")
    first = s.started(20, 2, "a")
    bad = s.started(21, 2, "b", broker=2)
    return s, [first, bad]


def going_back() -> tuple[Story, list[Envelope]]:
    s = Story("back")
    s.started(10, 3, "a")
    bad = s.started(20, 2, "a")
    return s, [bad]


def handed_out_again() -> tuple[Story, list[Envelope]]:
    """Generation 2 was synced (handed out); after the coordinator lost the group it started again."""
    s = Story("again")
    s.started(10, 1, "a")
    s.synced(11, 1, ("a", 0))
    s.started(12, 2, "a")
    handed_out = s.synced(13, 2, ("a", 0))
    s.unloaded(20, 2)
    bad = s.started(21, 2, "a")
    return s, [handed_out, bad]


def loaded_below() -> tuple[Story, list[Envelope]]:
    """A new coordinator loads generation 1 while generation 2 was handed out."""
    s = Story("below")
    s.started(10, 1, "a")
    s.synced(11, 1, ("a", 0))
    s.started(12, 2, "a")
    handed_out = s.synced(13, 2, ("a", 0))
    bad = s.loaded(20, 1, "a")
    return s, [handed_out, bad]


def two_owners() -> tuple[Story, list[Envelope]]:
    s = Story("owners")
    s.started(10, 1, "a", "b")
    bad = s.synced(11, 1, ("a", 0), ("b", 0), ("b", 1))
    return s, [bad]


def two_assignments() -> tuple[Story, list[Envelope]]:
    s = Story("assignments")
    s.started(10, 1, "a", "b")
    first = s.synced(11, 1, ("a", 0), ("b", 1))
    bad = s.synced(12, 1, ("a", 1))
    return s, [first, bad]


def stale_commit() -> tuple[Story, list[Envelope]]:
    s = Story("stale")
    s.started(10, 1, "a", "b")
    current = s.started(20, 2, "a")
    bad = s.committed(21, 1, "b", 5)
    return s, [current, bad]


def commit_without_generation() -> tuple[Story, list[Envelope]]:
    s = Story("nogen")
    current = s.started(10, 1, "a")
    bad = s.committed(11, -1, "", 5)
    return s, [current, bad]


def told_a_stale_commit() -> tuple[Story, list[Envelope]]:
    """The group committed 4 then 9; the new owner is told 4 and starts there: it reads 4..8 again."""
    s = Story("told")
    s.started(10, 1, "a")
    s.committed(11, 1, "a", 4)
    last = s.committed(12, 1, "a", 9)
    s.started(20, 2, "b")
    bad = s.assigned(21, "b", 2, 4, 4)
    return s, [last, bad]


def starts_elsewhere() -> tuple[Story, list[Envelope]]:
    """The new owner is told the commit (9) but starts at 12: it skips 9..11."""
    s = Story("elsewhere")
    s.started(10, 1, "a")
    last = s.committed(11, 1, "a", 9)
    s.started(20, 2, "b")
    bad = s.assigned(21, "b", 2, 9, 12)
    return s, [last, bad]


def across_processes() -> tuple[Story, list[Envelope]]:
    """The order across processes: broker 1's clock stepped back (its own events stay in its order), and a
    consumer's PartitionsAssigned at the same wall_ms as the commit it fetched sorts after it (broker before
    consumer). No violation."""
    s = Story("order")
    s.started(100, 1, "a")
    s.committed(90, 1, "a", 3)  # the clock stepped back: still after generation 1 started
    s.started(101, 2, "b")
    s.committed(102, 2, "b", 6)
    s.assigned(102, "b", 2, 6, 6)
    return s, []


STORIES: dict[str, Callable[[], tuple[Story, list[Envelope]]]] = {
    "kept_promises": kept_promises,
    "started_twice": started_twice,
    "going_back": going_back,
    "handed_out_again": handed_out_again,
    "loaded_below": loaded_below,
    "two_owners": two_owners,
    "two_assignments": two_assignments,
    "stale_commit": stale_commit,
    "commit_without_generation": commit_without_generation,
    "told_a_stale_commit": told_a_stale_commit,
    "starts_elsewhere": starts_elsewhere,
    "across_processes": across_processes,
}


def all_stories() -> list[Envelope]:
    return [envelope for make in STORIES.values() for envelope in make()[0].envelopes]


class _Enveloped(GroupSimulation):
    """The group simulation, with each event it emits also put in an envelope of the coordinator (broker) that
    emitted it, stamped with the simulation's clock (made strictly increasing: one true clock)."""

    def __init__(self, seed: int, bad_commit_check: bool) -> None:
        self.envelopes: list[Envelope] = []
        self._sequences: dict[int, int] = {}
        self._wall = 0
        super().__init__(seed, bad_commit_check)

    def _carry_out(self, broker: int, effects: list[GroupEffect]) -> None:
        for effect in effects:
            super()._carry_out(broker, [effect])
            if isinstance(effect, Emit):
                sequence = self._sequences.get(broker, 0)
                self._sequences[broker] = sequence + 1
                self._wall = max(self._wall + 1, WALL0 + self.mono_ms)
                emitter = Emitter("broker", broker, f"broker-{broker}-group-simulation")
                self.envelopes.append(
                    Envelope("sim", emitter, sequence, self._wall, self.mono_ms * 1_000_000, effect.event)
                )


def simulated_group_history(seed: int, bad_commit_check: bool = False) -> tuple[list[Envelope], list[str]]:
    """The group simulation's run at `seed` as envelopes, and the invariants its own check found (none for the real
    coordinator; the run stops at the first violation)."""
    simulation = _Enveloped(seed, bad_commit_check)
    found = simulation.run()
    assert [e.event for e in simulation.envelopes] == simulation.history
    return simulation.envelopes, sorted({v.invariant for v in found})
