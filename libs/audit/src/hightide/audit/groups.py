"""The consumer group invariants, as pure checks over a history of group events.

Room: libs/audit (pure). The simulator runs these after every step over the group events its coordinators
emitted, and a test feeds each one a history that breaks it. They read only the catalogue's group events
(`GroupGenerationStarted`, `GroupAssignmentSynced`, `OffsetsCommitted`, `GroupLoaded`, `GroupUnloaded`,
`GroupDeleted`, `PartitionsAssigned`), in the order they happened. The history audit runs the same fold over a
lake's group events (`hightide.audit.checks.groups`, which defines their order across processes), with each
violation's events named; its PySpark twin is `hightide.history.checks.groups`.

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
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class GroupViolation:
    """One broken group invariant. `events` are the ids of the events that show it (as given to
    `check_identified`; empty from `check_group_history`); topic, partition and offsets when it is about one
    partition (offsets: the range skipped or read again, -1 when none)."""

    invariant: str
    group_id: str
    generation_id: int
    detail: str
    events: tuple[str, ...] = ()
    topic: str = ""
    partition: int = -1
    first_offset: int = NO_OFFSET
    last_offset: int = NO_OFFSET


@dataclass(slots=True)
class _Known:
    generation_id: int  # the current generation, as its coordinator sees it
    members: tuple[str, ...]
    members_from: str  # the id of the event that set `members` (a GroupLoaded, or a GroupGenerationStarted)
    durable: int = NO_GENERATION  # the newest generation handed out (synced) or loaded
    durable_from: str = ""  # the event that first handed out or loaded `durable`
    # started by the coordinator in office, since it loaded: generation -> the id of its first start
    started: dict[int, str] = field(default_factory=dict)
    # per generation: its first assignment (sorted member, topic, partition rows) and the id of its event
    assignments: dict[int, tuple[tuple[tuple[str, str, int], ...], str]] = field(default_factory=dict)


Commit = tuple[int, str]  # the last committed offset, and the id of the OffsetsCommitted event


def check_group_history(history: Iterable[events.Event]) -> list[GroupViolation]:
    """Every violation of the group invariants in `history` (events in the order they happened)."""
    return check_identified(("", event) for event in history)


def check_identified(history: Iterable[tuple[str, events.Event]]) -> list[GroupViolation]:
    """Every violation of the group invariants in `history`: (event id, event) pairs in the order they happened."""
    known: dict[str, _Known] = {}
    commits: dict[tuple[str, str, int], Commit] = {}  # (group, topic, partition) -> the last commit
    found: list[GroupViolation] = []
    for event_id, event in history:
        if isinstance(event, events.OffsetsCommitted):
            for topic, partition, offset in zip(event.topics, event.partitions, event.offsets, strict=True):
                commits[(event.group_id, topic, partition)] = (offset, event_id)
        elif isinstance(event, events.PartitionsAssigned):
            found += _resumes_at_commit(commits, event_id, event)
        elif isinstance(event, events.GroupDeleted):
            commits = {k: v for k, v in commits.items() if k[0] != event.group_id}
        if isinstance(event, events.GroupGenerationStarted):
            found += _generation_started(known, event_id, event)
        elif isinstance(event, events.GroupLoaded):
            found += _loaded(known, event_id, event)
        elif isinstance(event, events.GroupUnloaded):
            group = known.get(event.group_id)
            if group is not None:  # what it had not persisted is gone with it
                group.started, group.generation_id = {}, group.durable
        elif isinstance(event, events.GroupAssignmentSynced):
            found += _assignment_synced(known, event_id, event)
        elif isinstance(event, events.OffsetsCommitted):
            found += _offsets_committed(known, event_id, event)
        elif isinstance(event, events.GroupDeleted):
            known.pop(event.group_id, None)
    return found


def _ids(*ids: str) -> tuple[str, ...]:
    return tuple(sorted({i for i in ids if i}))


def _loaded(known: dict[str, _Known], event_id: str, event: events.GroupLoaded) -> list[GroupViolation]:
    group = known.get(event.group_id)
    if group is None:
        known[event.group_id] = _Known(event.generation_id, event.members, event_id)
        _hand_out(known[event.group_id], event_id, event.generation_id)
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
                _ids(event_id, group.durable_from),
            )
        )
    group.generation_id, group.members, group.members_from, group.started = (
        event.generation_id,
        event.members,
        event_id,
        {},
    )
    _hand_out(group, event_id, event.generation_id)
    return found


def _hand_out(group: _Known, event_id: str, generation_id: int) -> None:
    if generation_id > group.durable:
        group.durable, group.durable_from = generation_id, event_id


def _generation_started(
    known: dict[str, _Known], event_id: str, event: events.GroupGenerationStarted
) -> list[GroupViolation]:
    group = known.get(event.group_id)
    if group is None:
        known[event.group_id] = _Known(
            event.generation_id, event.members, event_id, started={event.generation_id: event_id}
        )
        return []
    found = []
    if event.generation_id in group.started or event.generation_id <= group.durable:
        earlier = group.started.get(event.generation_id, "")
        handed_out = group.durable_from if event.generation_id <= group.durable else ""
        found.append(
            GroupViolation(
                "one_generation_at_a_time",
                event.group_id,
                event.generation_id,
                f"generation {event.generation_id} of group {event.group_id} started a second time",
                _ids(event_id, earlier, handed_out),
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
                _ids(event_id),
            )
        )
    group.started.setdefault(event.generation_id, event_id)
    if event.generation_id >= group.generation_id:
        group.generation_id = event.generation_id
        group.members, group.members_from = event.members, event_id
    return found


def _assignment_synced(
    known: dict[str, _Known], event_id: str, event: events.GroupAssignmentSynced
) -> list[GroupViolation]:
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
                    _ids(event_id),
                    topic,
                    partition,
                )
            )
    group = known.get(event.group_id)
    if group is None:
        return found
    _hand_out(group, event_id, event.generation_id)
    rows = tuple(sorted(zip(event.members, event.topics, event.partitions, strict=True)))
    earlier, earlier_id = group.assignments.setdefault(event.generation_id, (rows, event_id))
    if earlier != rows:
        found.append(
            GroupViolation(
                "one_owner_per_partition",
                event.group_id,
                event.generation_id,
                f"generation {event.generation_id} of group {event.group_id} was given two different assignments",
                _ids(earlier_id, event_id),
            )
        )
    return found


def _resumes_at_commit(
    commits: dict[tuple[str, str, int], Commit], event_id: str, event: events.PartitionsAssigned
) -> list[GroupViolation]:
    found = []
    rows = zip(event.topics, event.partitions, event.committed, event.offsets, strict=True)
    for topic, partition, fetched, start in rows:
        commit = commits.get((event.group_id, topic, partition))
        last, last_id = commit if commit is not None else (NO_OFFSET, "")
        if commit is not None and fetched != last:
            detail = f"was told the commit of {topic}-{partition} is {fetched}, but the last commit is {last}"
            resume = last
        elif fetched >= 0 and start != fetched:
            detail = f"starts {topic}-{partition} at {start}, not at its committed offset {fetched}"
            resume = fetched
        else:
            continue
        # The offsets read again (it starts below where the group resumes) or skipped (above it).
        first, end = min(start, resume), max(start, resume) - 1
        found.append(
            GroupViolation(
                "resumes_at_commit",
                event.group_id,
                event.generation_id,
                f"member {event.member_id} of group {event.group_id} in generation {event.generation_id} {detail}",
                _ids(event_id, last_id),
                topic,
                partition,
                first if first <= end else NO_OFFSET,
                end if first <= end else NO_OFFSET,
            )
        )
    return found


def _offsets_committed(known: dict[str, _Known], event_id: str, event: events.OffsetsCommitted) -> list[GroupViolation]:
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
                    _ids(event_id, group.members_from),
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
                _ids(event_id, group.members_from),
            )
        ]
    return []
