"""The consumer group invariants, as pure checks over a history of group events.

Room: libs/audit (pure). The simulator runs these after every step over the group events its coordinators
emitted, and a test feeds each one a history that breaks it. They read only the catalogue's group events
(`GroupGenerationStarted`, `GroupAssignmentSynced`, `OffsetsCommitted`, `GroupLoaded`, `GroupDeleted`), in the
order they happened; they are not in the audit's `CHECKS` registry yet (that registry requires a PySpark twin of
every check).

| invariant                  | statement                                                                          |
| -------------------------- | ---------------------------------------------------------------------------------- |
| one_generation_at_a_time   | a group's generations start in increasing order, each once: no two coordinators     |
|                            | (or two rebalances) run the same generation, and none goes back                     |
| one_owner_per_partition    | in one generation of a group no partition is assigned to two members, and the       |
|                            | generation's assignment is decided once                                             |
| no_stale_commit            | a commit by a group member is accepted only in the group's current generation; a   |
|                            | commit with no generation only while the group has no members                      |

A deleted group starts again from generation 0 (Kafka's deleted group is a new group), so deletion resets what is
known of it. A group first seen after the history began (loaded by a coordinator) is known from its `GroupLoaded`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hightide.protocol import events

NO_GENERATION = -1


@dataclass(frozen=True, slots=True)
class GroupViolation:
    invariant: str
    group_id: str
    generation_id: int
    detail: str


@dataclass(slots=True)
class _Known:
    generation_id: int
    members: tuple[str, ...]
    started: set[int] = field(default_factory=set)
    assignments: dict[int, tuple[tuple[str, str, int], ...]] = field(default_factory=dict)


def check_group_history(history: Iterable[events.Event]) -> list[GroupViolation]:
    """Every violation of the group invariants in `history` (events in the order they happened)."""
    known: dict[str, _Known] = {}
    found: list[GroupViolation] = []
    for event in history:
        if isinstance(event, events.GroupGenerationStarted):
            found += _generation_started(known, event)
        elif isinstance(event, events.GroupLoaded):
            group = known.get(event.group_id)
            if group is None or group.generation_id <= event.generation_id:
                started = set() if group is None else group.started
                known[event.group_id] = _Known(event.generation_id, event.members, started | {event.generation_id})
        elif isinstance(event, events.GroupAssignmentSynced):
            found += _assignment_synced(known, event)
        elif isinstance(event, events.OffsetsCommitted):
            found += _offsets_committed(known, event)
        elif isinstance(event, events.GroupDeleted):
            known.pop(event.group_id, None)
    return found


def _generation_started(known: dict[str, _Known], event: events.GroupGenerationStarted) -> list[GroupViolation]:
    group = known.get(event.group_id)
    if group is None:
        known[event.group_id] = _Known(event.generation_id, event.members, {event.generation_id})
        return []
    found = []
    if event.generation_id in group.started:
        found.append(
            GroupViolation(
                "one_generation_at_a_time",
                event.group_id,
                event.generation_id,
                f"generation {event.generation_id} of group {event.group_id} started a second time",
            )
        )
    elif event.generation_id < group.generation_id:
        found.append(
            GroupViolation(
                "one_generation_at_a_time",
                event.group_id,
                event.generation_id,
                f"generation {event.generation_id} of group {event.group_id} started after generation "
                f"{group.generation_id}",
            )
        )
    group.started.add(event.generation_id)
    if event.generation_id >= group.generation_id:
        group.generation_id = event.generation_id
        group.members = event.members
    return found


def _assignment_synced(known: dict[str, _Known], event: events.GroupAssignmentSynced) -> list[GroupViolation]:
    found = []
    owners: dict[tuple[str, int], str] = {}
    for member, topic, partition in zip(event.members, event.topics, event.partitions, strict=True):
        other = owners.setdefault((topic, partition), member)
        if other != member:
            found.append(
                GroupViolation(
                    "one_owner_per_partition",
                    event.group_id,
                    event.generation_id,
                    f"{topic}-{partition} is assigned to both {other} and {member} in generation "
                    f"{event.generation_id} of group {event.group_id}",
                )
            )
    group = known.get(event.group_id)
    if group is None:
        return found
    rows = tuple(sorted(zip(event.members, event.topics, event.partitions, strict=True)))
    earlier = group.assignments.setdefault(event.generation_id, rows)
    if earlier != rows:
        found.append(
            GroupViolation(
                "one_owner_per_partition",
                event.group_id,
                event.generation_id,
                f"generation {event.generation_id} of group {event.group_id} was given two different assignments",
            )
        )
    return found


def _offsets_committed(known: dict[str, _Known], event: events.OffsetsCommitted) -> list[GroupViolation]:
    group = known.get(event.group_id)
    if group is None:
        return []
    if event.generation_id == NO_GENERATION:
        if group.members:
            return [
                GroupViolation(
                    "no_stale_commit",
                    event.group_id,
                    event.generation_id,
                    f"a commit with no generation was accepted while group {event.group_id} had "
                    f"{len(group.members)} members in generation {group.generation_id}",
                )
            ]
        return []
    if event.generation_id != group.generation_id:
        return [
            GroupViolation(
                "no_stale_commit",
                event.group_id,
                event.generation_id,
                f"member {event.member_id} committed in generation {event.generation_id} of group {event.group_id} "
                f"while generation {group.generation_id} was current",
            )
        ]
    return []
