"""`hightide events export --lake DIR`: archive everything in the EVENTS stream so far, once, and stop.

Room: libs/lake. It reads the stream through an ephemeral consumer of its own (no acks, deleted at the end), never
the archiver's durable one, so an export neither steals nor acknowledges the archiver's messages. It archives up
to the stream's last sequence as it was at the start, from the first sequence the lake does not hold, through the
same `LakeWriter` as the archiver: running it twice, or after the archiver, writes nothing twice. It takes the
lake's lock, so it refuses a lake a running archiver writes (`LakeInUse`, naming the pid).

Expected failures are `LakeError`s with a one-line message (the lake in use or unusable, the event store not
answering); a missing stream is nothing to export, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from hightide.lake.archiver import stream_identity
from hightide.lake.layout import LakeError
from hightide.lake.writer import LakeWriter, WriteResult
from hightide.protocol.subjects import events_stream, events_subjects
from hightide.runtime.logging import Logger

EXPORT_BATCH_MESSAGES_MAX: Final = 1000
# An export's consumer has every message ready: a fetch that waits this long has reached the end.
FETCH_TIMEOUT_S: Final = 2.0
# If the export dies, JetStream deletes its ephemeral consumer after this long idle.
INACTIVE_THRESHOLD_S: Final = 30.0


class ExportFailed(LakeError):
    """The event store stopped answering during an export; what was written so far stays in the lake."""


@dataclass(frozen=True, slots=True)
class ExportSummary:
    messages: int  # EVENTS messages newly archived
    events: int  # events written
    files: int  # Parquet files written
    skipped: int  # messages the lake already held
    quarantined: int = 0  # messages that did not decode (raw bytes kept under quarantine/)

    def plus(self, result: WriteResult) -> ExportSummary:
        return ExportSummary(
            self.messages + result.messages,
            self.events + result.events,
            self.files + result.files,
            self.skipped + result.skipped,
            self.quarantined + result.quarantined,
        )


async def export_once(nc: Client, cluster_id: str, lake: Path, *, log: Logger) -> ExportSummary:
    """Archive the EVENTS stream up to its last sequence at the start; the counts of what happened."""
    js = nc.jetstream()
    try:
        info = await js.stream_info(events_stream(cluster_id))
    except NotFoundError:
        return ExportSummary(0, 0, 0, 0)
    except nats.errors.Error as error:
        raise ExportFailed(f"the event store did not answer: {type(error).__name__} {error}".strip()) from None
    state = info.state
    if state.messages == 0:
        return ExportSummary(0, 0, 0, 0)
    writer = LakeWriter(lake, log)
    await asyncio.to_thread(writer.open)
    try:
        await asyncio.to_thread(writer.bind_stream, *stream_identity(info))
        start = writer.archived.first_missing(state.first_seq)
        summary = ExportSummary(0, 0, 0, skipped=min(start, state.last_seq + 1) - state.first_seq)
        if start <= state.last_seq:
            summary = await _export_range(js, cluster_id, writer, start, state.last_seq, summary)
    finally:
        writer.close()
    log.info("events_exported", lake=str(lake), last_stream_sequence=state.last_seq, **_fields(summary))
    return summary


async def _export_range(
    js: JetStreamContext, cluster_id: str, writer: LakeWriter, start: int, last: int, summary: ExportSummary
) -> ExportSummary:
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=INACTIVE_THRESHOLD_S,
        mem_storage=True,
        num_replicas=1,
    )
    try:
        subscription = await js.pull_subscribe(
            events_subjects(cluster_id), stream=events_stream(cluster_id), config=config
        )
    except nats.errors.Error as error:
        raise ExportFailed(f"could not read the event store: {type(error).__name__} {error}".strip()) from None
    try:
        while True:
            batch = await _fetch(subscription)
            if not batch:
                await _check_answering(js, cluster_id)  # an outage also looks like an empty fetch
                return summary
            messages = [(msg.metadata.sequence.stream, msg.data) for msg in batch]
            summary = summary.plus(await asyncio.to_thread(writer.write, [m for m in messages if m[0] <= last]))
            if max(seq for seq, _ in messages) >= last or batch[-1].metadata.num_pending == 0:
                return summary
    finally:
        with contextlib.suppress(nats.errors.Error):
            await subscription.unsubscribe()
        if config.name is not None:  # pull_subscribe named the ephemeral consumer
            with contextlib.suppress(nats.errors.Error):
                await js.delete_consumer(events_stream(cluster_id), config.name)


async def _fetch(subscription: JetStreamContext.PullSubscription) -> list[Msg]:
    try:
        return await subscription.fetch(EXPORT_BATCH_MESSAGES_MAX, timeout=FETCH_TIMEOUT_S)
    except TimeoutError:  # nothing left (messages up to `last` may have aged out meanwhile)
        return []
    except nats.errors.Error as error:
        raise ExportFailed(f"the event store stopped answering: {type(error).__name__} {error}".strip()) from None


async def _check_answering(js: JetStreamContext, cluster_id: str) -> None:
    try:
        await js.stream_info(events_stream(cluster_id))
    except nats.errors.Error as error:
        raise ExportFailed(f"the event store stopped answering: {type(error).__name__} {error}".strip()) from None


def _fields(summary: ExportSummary) -> dict[str, int]:
    return {
        "messages": summary.messages,
        "events": summary.events,
        "files": summary.files,
        "skipped": summary.skipped,
        "quarantined": summary.quarantined,
    }
