"""The event log's own completeness: every emitter incarnation numbers its events 0, 1, 2, ... and the history
holds each number once (`emitter_sequences_contiguous`).

Room: libs/audit (pure). The rest of the audit trusts the order of each emitter's events; this check says where
that trust is broken: events lost between an emitter and the lake (a gap), or an emitter that gave one sequence
number to two different events. The PySpark twin is `hightide.history.checks.sequences`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final

from hightide.audit.findings import Finding, event_id, finding
from hightide.audit.history import History
from hightide.protocol.envelope import Emitter, Envelope

NAME: Final = "emitter_sequences_contiguous"
# `hightide.audit.rebuild.emitter_streams` records a clash with exactly this detail.
CLASH_DETAIL: Final = "two different events with one sequence number"


def emitter_sequences_contiguous(history: History) -> Iterator[Finding]:
    """Each emitter incarnation's events carry sequences 0, 1, 2, ... with no gap, and no sequence holds two
    different events (an exact duplicate is allowed: the outbox relay publishes at least once, and the lake keeps
    one copy).

    Source: ARCHITECTURE.md §5 ("per-emitter sequence with no gaps") and reliability.md §8.1, which assumes a
    complete event store for every other invariant. One finding per gap, naming the events either side of it (only
    the one after it when the gap is at the incarnation's start) and the missing sequences in `detail`; one finding
    per clashing sequence, naming its event id.
    """
    for stream in history.streams.values():
        yield from _gaps(stream)
    clashing = {(a.emitter, a.sequence) for a in history.anomalies if a.detail == CLASH_DETAIL}
    for emitter, sequence in sorted(clashing, key=lambda key: (*_emitter_key(key[0]), key[1])):
        clash_id = event_id(emitter.service, emitter.emitter_id, emitter.incarnation, sequence)
        yield finding(
            NAME,
            events=[clash_id],
            detail=f"{emitter.service} {emitter.emitter_id} incarnation {emitter.incarnation} stored different "
            f"events under sequence {sequence}",
        )


def _emitter_key(emitter: Emitter) -> tuple[str, int, str]:
    return emitter.service, emitter.emitter_id, emitter.incarnation


def _gaps(stream: list[Envelope]) -> Iterator[Finding]:
    previous: Envelope | None = None
    for envelope in stream:
        if previous is not None and previous.emitter != envelope.emitter:
            previous = None  # the next incarnation starts its own numbering
        expected = 0 if previous is None else previous.sequence + 1
        if envelope.sequence > expected:
            either_side = [History.id(e) for e in (previous, envelope) if e is not None]
            emitter = envelope.emitter
            yield finding(
                NAME,
                events=either_side,
                detail=f"events {expected}..{envelope.sequence - 1} of {emitter.service} {emitter.emitter_id} "
                f"incarnation {emitter.incarnation} are missing",
            )
        previous = envelope


CHECKS: Final[dict[str, Callable[[History], Iterable[Finding]]]] = {NAME: emitter_sequences_contiguous}
