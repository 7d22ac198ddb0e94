"""A history made ready for the checks: every emitter's events in its own order, each event's id, and the
controllers' committed metadata events in metadata order, computed once and shared by every check.

Room: libs/audit (pure). The order is `hightide.audit.rebuild`'s (see its module docstring); the PySpark side
(`hightide.history.events`) numbers the same order as `position`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from hightide.audit.findings import envelope_id
from hightide.audit.rebuild import Anomaly, controller_order, emitter_streams
from hightide.protocol.envelope import Envelope
from hightide.protocol.events import Event

E = TypeVar("E", bound=Event)
EmitterKey = tuple[str, int]  # service, emitter id


@dataclass
class History:
    streams: dict[EmitterKey, list[Envelope]]
    anomalies: list[Anomaly] = field(default_factory=list)

    @classmethod
    def of(cls, envelopes: Iterable[Envelope]) -> History:
        anomalies: list[Anomaly] = []
        streams = emitter_streams(envelopes, anomalies)
        return cls(streams, anomalies)

    def all(self) -> Iterator[Envelope]:
        """Every event: emitters in (service, id) order, each in its own order."""
        for stream in self.streams.values():
            yield from stream

    def of_type(self, event_class: type[E]) -> list[tuple[Envelope, E]]:
        """The events of one type, with their envelopes, in `all()` order."""
        return [(envelope, envelope.event) for envelope in self.all() if isinstance(envelope.event, event_class)]

    @cached_property
    def controller(self) -> list[Envelope]:
        """The controllers' committed metadata events in metadata order (`rebuild.controller_order`)."""
        return controller_order(self.streams)

    @staticmethod
    def id(envelope: Envelope) -> str:
        return envelope_id(envelope)
