"""Where a service's emitted events go.

Room: libs/runtime. The cores return `Emit(event)` effects; the shell hands each event to its `EventSink` in the
order the effects came, after the state change they report is durable. The log sink writes one structlog line per
event, named by the event type; the outbox sink (`event_store.OutboxEventSink`) stores each event in the outbox
for the `EVENTS` stream, and logs it through this one too.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Final, Protocol

import structlog

from hightide.protocol import events
from hightide.protocol.events import Event

# Events that come with every record or fetch: logged at debug. Every other event is a rare change of state an
# operator wants in the log at info, as Kafka logs ISR updates, leader and follower transitions and truncations.
PER_REQUEST_EVENTS: Final = frozenset(
    {
        events.RecordsAppended.TYPE,
        events.HighWatermarkAdvanced.TYPE,
        events.FetchServed.TYPE,
        events.FollowerStateUpdated.TYPE,
        events.ProduceCompleted.TYPE,
    }
)


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...

    def flush(self) -> None:
        """Make every event emitted so far durable (the outbox); called before acting on them outside."""


class LogEventSink:
    """Each event as a log line named by its type: per-request events at debug, changes of state at info;
    counts by type for status views."""

    def __init__(self, logger: Any | None = None) -> None:
        self._log = logger or structlog.get_logger("hightide.events")
        self._std = logging.getLogger("hightide.events")  # the stdlib logger structlog's levels come from
        self.counts: dict[str, int] = {}

    def emit(self, event: Event) -> None:
        self.counts[event.TYPE] = self.counts.get(event.TYPE, 0) + 1
        per_request = event.TYPE in PER_REQUEST_EVENTS
        if per_request and not self._std.isEnabledFor(logging.DEBUG):
            return  # the usual case on the data path: not even the fields are gathered
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
        if per_request:
            self._log.debug(event.TYPE, **fields)
        else:
            self._log.info(event.TYPE, **fields)

    def flush(self) -> None:
        pass
