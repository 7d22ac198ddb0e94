"""What the audit reports: one `Finding` per broken invariant or lost record, in a shape both audits produce.

Room: libs/audit (pure). The plain-Python checks (`hightide.audit.invariants`) and the PySpark jobs
(`hightide.history`) both end in rows of exactly these columns, and a test requires the two lists to be equal row
for row; so every column is a plain value with no nulls (a sentinel where a finding has no such thing), the
tuples are sorted, and `detail` is built only from values both implementations hold (ints and names, never a
Python repr of a collection).

| column       | what                                                                                          |
| ------------ | --------------------------------------------------------------------------------------------- |
| invariant    | the check's name (`one_leader_per_epoch`, ...); `hightide.audit.invariants.CHECKS` lists them   |
| topic        | the partition's topic; "" when the finding is not about one partition                          |
| partition    | the partition; -1 when none                                                                    |
| replica      | the broker whose replica is involved; -1 when none or several                                  |
| first_offset | the first offset involved; -1 when none                                                        |
| last_offset  | the last offset involved (inclusive); -1 when none                                             |
| records      | the client values of the records involved (sorted); () when the history names none             |
| events       | the ids (`event_id`) of the events that show it (sorted)                                       |
| cause        | "" for a violation; for a loss the audit explains, what explains it: acks1_leader_change,      |
|              | unclean_election, last_known_leader_election or lossy_crashes; for a duplicate Kafka allows,   |
|              | producer_state_retention                                                                       |
| detail       | one sentence a person can act on                                                              |

A finding with a cause is an attributed loss: Kafka allows it under that cause, so it is reported but it is not a
violation (the audit exits 0 when every finding has a cause).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from hightide.protocol.envelope import Envelope

NO_PARTITION: Final = -1
NO_REPLICA: Final = -1
NO_OFFSET: Final = -1
LOSS_CAUSES: Final = frozenset(
    {
        "acks1_leader_change",
        "unclean_election",
        "last_known_leader_election",
        "lossy_crashes",
        "producer_state_retention",  # issue 12 (gaps): a duplicate, not a loss (checks.clients.no_duplicates)
    }
)
COLUMNS: Final = (
    "invariant",
    "topic",
    "partition",
    "replica",
    "first_offset",
    "last_offset",
    "records",
    "events",
    "cause",
    "detail",
)


def event_id(service: str, emitter_id: int, incarnation: str, sequence: int) -> str:
    """An event's id in findings: its emitter and its place in that emitter's sequence (unique in a history)."""
    return f"{service}:{emitter_id}:{incarnation}:{sequence}"


def envelope_id(envelope: Envelope) -> str:
    emitter = envelope.emitter
    return event_id(emitter.service, emitter.emitter_id, emitter.incarnation, envelope.sequence)


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    invariant: str
    topic: str = ""
    partition: int = NO_PARTITION
    replica: int = NO_REPLICA
    first_offset: int = NO_OFFSET
    last_offset: int = NO_OFFSET
    records: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    cause: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        assert self.records == tuple(sorted(self.records)), "a finding's records are sorted"
        assert self.events == tuple(sorted(self.events)), "a finding's events are sorted"
        assert self.cause == "" or self.cause in LOSS_CAUSES, f"unknown loss cause {self.cause!r}"

    @property
    def is_violation(self) -> bool:
        return self.cause == ""

    def as_row(self) -> dict[str, object]:
        """The finding as a table row (lists for the tuples), in `COLUMNS` order."""
        return {name: list(value) if isinstance(value, tuple) else value for name, value in self._items()}

    def _items(self) -> Iterable[tuple[str, object]]:
        return ((name, getattr(self, name)) for name in COLUMNS)


def finding(
    invariant: str,
    *,
    topic: str = "",
    partition: int = NO_PARTITION,
    replica: int = NO_REPLICA,
    first_offset: int = NO_OFFSET,
    last_offset: int = NO_OFFSET,
    records: Iterable[str] = (),
    events: Iterable[str] = (),
    cause: str = "",
    detail: str = "",
) -> Finding:
    """A Finding with its records and events sorted and deduplicated (the canonical form both audits compare)."""
    return Finding(
        invariant,
        topic,
        partition,
        replica,
        first_offset,
        last_offset,
        tuple(sorted(set(records))),
        tuple(sorted(set(events))),
        cause,
        detail,
    )


def from_row(row: dict[str, object]) -> Finding:
    """A table row (as `as_row` writes it, or as Spark collects it) back as a Finding."""
    values = {name: row[name] for name in COLUMNS}
    values["records"] = tuple(values["records"])  # type: ignore[arg-type]
    values["events"] = tuple(values["events"])  # type: ignore[arg-type]
    return Finding(**values)  # type: ignore[arg-type]
