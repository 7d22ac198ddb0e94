"""The consumer groups' invariants in the history audit: one generation at a time, one owner per partition per
generation, no commit from a stale generation, and a new owner resumes at the group's last commit (issue 13).

Room: libs/audit (pure). The rules are `hightide.audit.groups` (the fold the group simulation runs after every
step); this module gives them a lake's group events in one order and turns each violation into a `Finding`. The
PySpark twins are `hightide.history.checks.groups`, with the same names and findings.

The order. A group's events come from several processes: its coordinators (one broker after another, as the
leadership of its `__consumer_offsets` partition moves) and its consumers (`PartitionsAssigned`). Across processes
there is no common order but the wall clock, and it is sound here as in `hightide.audit.checks.clients`: a
coordinator emits a commit's `OffsetsCommitted` before it answers it, a consumer emits `PartitionsAssigned` after
the OffsetFetch answer came back, and a new coordinator loads a group (`GroupLoaded`) only after the old one lost the
partition. So the group events (`GROUP_EVENTS`, nothing else is read) are taken by `wall_ms`, each emitter's own
in its own order: an event's clock is the greatest `wall_ms` of its emitter incarnation's group events up to it (a
clock stepped back does not reorder one process's events), ties broken by service, emitter id and the emitter's
order. Each violation's finding names the group, generation and member in `detail`, the partition and the offsets
skipped or read again where it is about one partition, and the events that show it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final

from hightide.audit.findings import Finding, finding
from hightide.audit.groups import check_identified
from hightide.audit.history import History
from hightide.protocol import events
from hightide.protocol.envelope import Envelope

GROUP_EVENTS: Final = (
    events.GroupGenerationStarted,
    events.GroupAssignmentSynced,
    events.OffsetsCommitted,
    events.GroupLoaded,
    events.GroupUnloaded,
    events.GroupDeleted,
    events.PartitionsAssigned,
)


def group_order(history: History) -> list[Envelope]:
    """The group events of the history in the order the checks take them (see the module docstring)."""
    keyed: list[tuple[tuple[int, str, int, int], Envelope]] = []
    for (service, emitter_id), stream in history.streams.items():
        clock: dict[str, int] = {}  # per incarnation (a process)
        for position, envelope in enumerate(stream):
            if isinstance(envelope.event, GROUP_EVENTS):
                incarnation = envelope.emitter.incarnation
                clock[incarnation] = max(clock.get(incarnation, envelope.wall_ms), envelope.wall_ms)
                keyed.append(((clock[incarnation], service, emitter_id, position), envelope))
    keyed.sort(key=lambda item: item[0])
    return [envelope for _, envelope in keyed]


def _findings(history: History, invariant: str) -> Iterator[Finding]:
    identified = ((History.id(envelope), envelope.event) for envelope in group_order(history))
    for violation in check_identified(identified):
        if violation.invariant == invariant:
            yield finding(
                invariant,
                topic=violation.topic,
                partition=violation.partition,
                first_offset=violation.first_offset,
                last_offset=violation.last_offset,
                events=violation.events,
                detail=violation.detail,
            )


def one_generation_at_a_time(history: History) -> Iterator[Finding]:
    """A group has one generation at a time (issue 13; Kafka's GroupMetadata: `generationId` only goes up, and a
    coordinator loading the group from `__consumer_offsets` continues from the generation the log holds): a
    coordinator starts a group's generations in increasing order, each once; none starts at or below a generation
    already handed out (its assignment synced) or loaded, and a new coordinator never loads less than was handed
    out. A generation its coordinator lost before the sync may start again under the next one (Kafka persists a
    generation at its sync); a deleted group starts over. One finding per GroupGenerationStarted or GroupLoaded that
    breaks it, naming it, the same generation's earlier start in the same coordinator's office, and the event that
    first handed out (synced) or loaded the generation it is not above."""
    return _findings(history, "one_generation_at_a_time")


def one_owner_per_partition(history: History) -> Iterator[Finding]:
    """No partition has two owners in one generation (issue 13; Kafka's `AbstractPartitionAssignor` contract and
    the assignors' `verifyValidityAndBalance`: each partition assigned to exactly one member), and a generation's
    assignment is decided once (Kafka's SyncGroup persists the leader's assignment once per generation). One
    finding per second owner named in a GroupAssignmentSynced (its topic and partition), and one per
    GroupAssignmentSynced that differs from the generation's first."""
    return _findings(history, "one_owner_per_partition")


def no_stale_commit(history: History) -> Iterator[Finding]:
    """A commit is accepted only in the group's current generation (issue 13; Kafka's
    `ClassicGroup.validateOffsetCommit`: ILLEGAL_GENERATION for another generation), and a commit with no
    generation (a simple consumer's) only while the group has no members. One finding per OffsetsCommitted that
    breaks it, naming it and the event that set the group's members (its GroupGenerationStarted or GroupLoaded)."""
    return _findings(history, "no_stale_commit")


def resumes_at_commit(history: History) -> Iterator[Finding]:
    """A consumer given a partition resumes at the group's last commit of it (issue 13 item 6: no record skipped
    or read twice past a commit; Kafka's ConsumerCoordinator fetches the committed offsets before it reads, and
    `auto.offset.reset` applies only where there is none): its PartitionsAssigned names that very offset as the
    commit it fetched and starts there. One finding per partition of a PartitionsAssigned that breaks it, naming
    the offsets read again or skipped (from where it starts to where the group resumes), the PartitionsAssigned and
    the last OffsetsCommitted of the partition."""
    return _findings(history, "resumes_at_commit")


CHECKS: Final[dict[str, Callable[[History], Iterable[Finding]]]] = {
    "one_generation_at_a_time": one_generation_at_a_time,
    "one_owner_per_partition": one_owner_per_partition,
    "no_stale_commit": no_stale_commit,
    "resumes_at_commit": resumes_at_commit,
}
