"""The clients' own events: what `hightide produce` asked for and was told, and what `hightide consume` read.

Room: services/client. The CLI's producer and consumer emit through the same outbox pipeline as the services
(`runtime.event_store.EventPipeline`), in `<data-dir>/events-outbox/clients`, as emitter `producer` or `consumer`
with the process id as its id. A client killed before its relay caught up leaves its outbox there; the next client
run with the same data dir replays it. With these the audit can hold the cluster to its end-to-end promises: an
acknowledged record is in the log at its offset, a failed one is not, and a consumer reads each offset once.

Values are named by at most their last 64 characters (`value_text`). Outcomes follow Jepsen: `ok`, `failed`
(definite: never appended) or `unknown` (a timeout or lost connection on some attempt,
`ProduceFailed.indefinite`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from nats.aio.client import Client

from hightide.client.consumer import ConsumerRecord
from hightide.client.producer import ProduceFailed, RecordFuture
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import RecordsConsumed, SendCompleted, SendInvoked
from hightide.runtime.event_store import EventPipeline
from hightide.runtime.events import EventSink

CLIENT_OUTBOX: Final = Path("events-outbox") / "clients"
VALUE_CHARACTERS: Final = 64  # of a value, its last ones: a verifiable producer's values end in their number
_EMITTER_ID_LIMIT: Final = 2**31


def open_client_events(nc: Client, data_dir: Path, cluster_id: str, service: str, log: Any) -> EventPipeline:
    pipeline = EventPipeline.open(
        nc,
        data_dir / CLIENT_OUTBOX,
        cluster_id=cluster_id,
        service=service,
        emitter_id=os.getpid() % _EMITTER_ID_LIMIT,
        log=log,
    )
    pipeline.start()
    return pipeline


def send_invoked(events: EventSink, future: RecordFuture, key: str | None, value: str) -> None:
    events.emit(SendInvoked(topic=future.topic, partition=future.partition, key=key, value=value_text(value)))


def send_completed(events: EventSink, future: RecordFuture, value: str) -> None:
    """The outcome of a send whose future is done."""
    error = future.exception()
    if error is None:
        offset = future.result().offset
        outcome, error_name = "ok", ErrorCode.NONE.name
    else:
        offset = -1
        if isinstance(error, ProduceFailed):
            error_name = error.error_code.name
            outcome = "unknown" if error.indefinite else "failed"
        else:
            error_name, outcome = ErrorCode.UNKNOWN_SERVER_ERROR.name, "unknown"
    events.emit(
        SendCompleted(
            topic=future.topic,
            partition=future.partition,
            value=value_text(value),
            outcome=outcome,
            offset=offset,
            error=error_name,
        )
    )


def records_consumed(events: EventSink, records: Sequence[ConsumerRecord]) -> None:
    """One event per partition of a poll's records, offsets in the order the client got them."""
    by_partition: dict[tuple[str, int], list[ConsumerRecord]] = {}
    for record in records:
        by_partition.setdefault((record.topic, record.partition), []).append(record)
    for (topic, partition), items in by_partition.items():
        events.emit(
            RecordsConsumed(
                topic=topic,
                partition=partition,
                offsets=tuple(r.offset for r in items),
                values=tuple(value_text(r.value) for r in items),
            )
        )


def value_text(value: str | bytes | None) -> str:
    """A record's value as the events name it: text, at most its last VALUE_CHARACTERS characters, so a poll of
    large records stays a small event (the same rule on both sides keeps sends and reads comparable)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else value.decode(errors="backslashreplace")
    return text[-VALUE_CHARACTERS:]
