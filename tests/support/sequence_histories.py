"""Hand-made histories for `emitter_sequences_contiguous`: a clean one, and one per way an emitter's numbering can
break (a gap inside an incarnation, a gap at its start, two different events under one sequence). Shared by the
check's unit tests and its Spark parity test."""

from __future__ import annotations

from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope

TOPIC = "orders"
BROKER_A = Emitter("broker", 1, "a")
BROKER_B = Emitter("broker", 1, "b")
CONTROLLER = Emitter("controller", 100, "c")
WALL_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def hw_advanced(high_watermark: int) -> events.HighWatermarkAdvanced:
    return events.HighWatermarkAdvanced(
        topic=TOPIC, partition=0, replica=1, leader_epoch=0, previous=high_watermark - 1, high_watermark=high_watermark
    )


def envelope(emitter: Emitter, sequence: int, event: events.Event | None = None) -> Envelope:
    """The event an emitter numbered `sequence` (by default: its HW moved to sequence + 1), `sequence` ms in."""
    return Envelope("test", emitter, sequence, WALL_MS + sequence, sequence, event or hw_advanced(sequence + 1))


def numbered(emitter: Emitter, *sequences: int) -> list[Envelope]:
    return [envelope(emitter, sequence) for sequence in sequences]


def registered(sequence: int) -> Envelope:
    event = events.BrokerRegistered(broker=1, broker_epoch=sequence, previous_broker_epoch=-1, fenced=False)
    return envelope(CONTROLLER, sequence, event)


def clean() -> list[Envelope]:
    """Two incarnations of broker 1 and a controller, each numbered from 0; two events stored twice (at least once
    relay)."""
    a = numbered(BROKER_A, 0, 1, 2, 3)
    b = [envelope(BROKER_B, s) for s in range(3)]
    c = [registered(0), registered(1)]
    return [*a, *b, *c, a[1], c[0]]


def gap_inside() -> list[Envelope]:
    """Broker 1's incarnation a lost its events 3 and 4."""
    return [*numbered(BROKER_A, 0, 1, 2, 5, 6), registered(0)]


def gap_at_start() -> list[Envelope]:
    """Broker 1's incarnation b is seen from its event 3 on: 0..2 are lost."""
    return [*numbered(BROKER_A, 0, 1), *numbered(BROKER_B, 3, 4)]


def clash() -> list[Envelope]:
    """Broker 1's incarnation a numbered two different events 1 (and the first of them is also stored twice)."""
    first = numbered(BROKER_A, 0, 1, 2)
    other = envelope(BROKER_A, 1, hw_advanced(7))
    return [*first, other, first[1]]


HAND_MADE = {"clean": clean, "gap_inside": gap_inside, "gap_at_start": gap_at_start, "clash": clash}
