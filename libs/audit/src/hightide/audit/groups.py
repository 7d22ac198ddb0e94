"""The consumer group invariants, as pure checks over a history of group events.

Room: libs/audit (pure). The simulator runs these after every step over the group events its coordinators
emitted, and a test feeds each one a history that breaks it. They read only the catalogue's group events
(`GroupGenerationStarted`, `GroupAssignmentSynced`, `OffsetsCommitted`, `GroupLoaded`, `GroupDeleted`), in the
order they happened; they are not in the audit's `CHECKS` registry yet (that registry requires a PySpark twin of
every check).

| invariant                  | statement                                                                          |
| -------------------------- | ---------------------------------------------------------------------------------- |
| one_generation_at_a_time   | a coordinator starts a group's generations in increasing order, each once; none     |
|                            | starts at or below a generation already handed out (synced) or loaded, and a new    |
|                            | coordinator never loads less than was handed out                                    |
| one_owner_per_partition    | in one generation of a group no partition is assigned to two members, and the       |
|                            | generation's assignment is decided once                                             |
| no_stale_commit            | a commit by a group member is accepted only in the group's current generation; a   |
|                            | commit with no generation only while the group has no members                      |
| resumes_at_commit          | a consumer given a partition (PartitionsAssigned) resumes at the group's last     |
|                            | commit of it: it fetched that very offset and starts there, so nothing is skipped   |
|                            | and nothing before the commit read again                                           |

A generation becomes durable when its assignment is persisted (`GroupAssignmentSynced`, after the append committed);
until then it lives only in its coordinator. Like Kafka's, a coordinator that loses the offsets partition between
a join phase's end and the leader's SyncGroup loses that generation, and the next coordinator starts the same
number again: no member ever got an assignment or committed in the lost one (commits wait for the sync), so this is
allowed — after the group was unloaded or loaded, only durable generations count. A deleted group starts again from
generation 0 (Kafka's deleted group is a new group). A group first seen after the history began is known from its
`GroupLoaded`.
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
    generation_id: int  # the current generation, as its coordinator sees it
    members: tuple[str, ...]
    durable: int = NO_GENERATION  # the newest generation handed out (synced) or loaded
    started: set[int] = field(default_factory=set)  # started by the coordinator in office, since it loaded
    assignments: dict[int, tuple[tuple[str, str, int], ...]] = field(default_factory=dict)


def check_group_history(history: Iterable[events.Event]) -> list[GroupViolation]:
    """Every violation of the group invariants in `history` (events in the order they happened)."""
    known: dict[str, _Known] = {}
    commits: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> the last committed offset
    found: list[GroupViolation] = []
    for event in history:
        if isinstance(event, events.OffsetsCommitted):
            for topic, partition, offset in zip(event.topics, event.partitions, event.offsets, strict=True):
                commits[(event.group_id, topic, partition)] = offset
        elif isinstance(event, events.PartitionsAssigned):
            found += _resumes_at_commit(commits, event)
        elif isinstance(event, events.GroupDeleted):
            commits = {k: v for k, v in commits.items() if k[0] != event.group_id}
        if isinstance(event, events.GroupGenerationStarted):
            found += _generation_started(known, event)
        elif isinstance(event, events.GroupLoaded):
            found += _loaded(known, event)
        elif isinstance(event, events.GroupUnloaded):
            group = known.get(event.group_id)
            if group is not None:  # what it had not persisted is gone with it
                group.started, group.generation_id = set(), group.durable
        elif isinstance(event, events.GroupAssignmentSynced):
            found += _assignment_synced(known, event)
        elif isinstance(event, events.OffsetsCommitted):
            found += _offsets_committed(known, event)
        elif isinstance(event, events.GroupDeleted):
            known.pop(event.group_id, None)
    return found


def _loaded(known: dict[str, _Known], event: events.GroupLoaded) -> list[GroupViolation]:
    group = known.get(event.group_id)
    if group is None:
        known[event.group_id] = _Known(event.generation_id, event.members, event.generation_id)
        return []
    found = []
    if event.generation_id < group.durable:
        found.append(
            GroupViolation(
                "one_generation_at_a_time",
                event.group_id,
                event.generation_id,
                f"group {event.group_id} was loaded at generation {event.generation_id}, below generation "
                f"{group.durable} already handed out",
            )
        )
    group.generation_id, group.members, group.started = event.generation_id, event.members, set()
    group.durable = max(group.durable, event.generation_id)
    return found


def _generation_started(known: dict[str, _Known], event: events.GroupGenerationStarted) -> list[GroupViolation]:
    group = known.get(event.group_id)
    if group is None:
        known[event.group_id] = _Known(event.generation_id, event.members, started={event.generation_id})
        return []
    found = []
    if event.generation_id in group.started or event.generation_id <= group.durable:
        found.append(
            GroupViolation(
                "one_generation_at_a_time",
                event.group_id,
                event.generation_id,
                f"generation {event.generation_id} of group {event.group_id} started a second time",
            )
        )
    elif event.generation_id < group.generation_id:  # within one coordinator's office
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
    group.durable = max(group.durable, event.generation_id)
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


def _resumes_at_commit(
    commits: dict[tuple[str, str, int], int], event: events.PartitionsAssigned
) -> list[GroupViolation]:
    found = []
    rows = zip(event.topics, event.partitions, event.committed, event.offsets, strict=True)
    for topic, partition, fetched, start in rows:
        last = commits.get((event.group_id, topic, partition))
        if last is not None and fetched != last:
            detail = f"was told the commit of {topic}-{partition} is {fetched}, but the last commit is {last}"
        elif fetched >= 0 and start != fetched:
            detail = f"starts {topic}-{partition} at {start}, not at its committed offset {fetched}"
        else:
            continue
        found.append(
            GroupViolation(
                "resumes_at_commit",
                event.group_id,
                event.generation_id,
                f"member {event.member_id} of group {event.group_id} {detail}",
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
