"""Where a service's emitted events go.

Room: libs/runtime. The cores return `Emit(event)` effects; the shell hands each event to its `EventSink` in the
order the effects came, after the state change they report is durable. The log sink writes one structlog line per
event, named by the event type, so a running cluster is observable today; the outbox and the JetStream `EVENTS`
relay (the events issue) implement the same interface.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import structlog

from hightide.protocol.events import Event


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


class LogEventSink:
    """Each event as a log line at debug level (the event name is its type); counts by type for status views."""

    def __init__(self, logger: Any | None = None) -> None:
        self._log = logger or structlog.get_logger("hightide.events")
        self.counts: dict[str, int] = {}

    def emit(self, event: Event) -> None:
        self.counts[event.TYPE] = self.counts.get(event.TYPE, 0) + 1
        self._log.debug(event.TYPE, **{f.name: getattr(event, f.name) for f in dataclasses.fields(event)})
