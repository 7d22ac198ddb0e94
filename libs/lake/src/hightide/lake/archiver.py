"""The archiving loop: the EVENTS stream -> the Parquet lake, through one durable JetStream consumer.

Room: libs/lake (the archiver service is its wiring). It owns the consumer `archiver` on `HT_<cluster>_EVENTS`
(pull, explicit acks, every message from the first) and the order of things for each batch:

1. collect up to `batch_messages_max` messages, or whatever arrives within `batch_wait_s` of the first one;
2. write them with the `LakeWriter` (skipping what the lake holds, quarantining what does not decode), which
   returns only once the files are fsynced and renamed into place;
3. only then acknowledge every message of the batch.

A crash anywhere before 3 leaves the messages unacknowledged, so JetStream delivers them again after
`ack_wait_s`, and the writer skips those the lake already holds: at least once from the stream, exactly once
into the lake. A lost ack costs the same redelivery and nothing else. Fetch errors (NATS down, the consumer
gone) back off and retry, re-creating the consumer; nats-py reconnects by itself. A failed write (disk full)
keeps the batch and retries it. The lake's lock is held from `run` to its end, so an export cannot write
beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Final

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from hightide.lake.layout import LakeError
from hightide.lake.metrics import ArchiverMetrics
from hightide.lake.writer import LakeWriter, StreamMessage
from hightide.protocol.subjects import events_stream, events_subjects
from hightide.runtime.event_store import ensure_events_stream
from hightide.runtime.logging import Logger

ARCHIVER_CONSUMER: Final = "archiver"
BATCH_MESSAGES_MAX: Final = 1000
BATCH_WAIT_S: Final = 1.0
# Long enough that a batch is written (seconds at most) before JetStream gives up on it; a redelivery after a
# real crash waits this long, and is then skipped or written.
ACK_WAIT_S: Final = 60.0
# Room for two batches in flight: the one being written and the next being collected.
MAX_ACK_PENDING: Final = 2 * BATCH_MESSAGES_MAX
BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 5.0
FETCH_TIMEOUT_MIN_S: Final = 0.05


class Backoff:
    """Exponential, from BACKOFF_MIN_S doubling to BACKOFF_MAX_S; `reset` after a success."""

    def __init__(self) -> None:
        self._next_s = BACKOFF_MIN_S

    def next_s(self) -> float:
        delay, self._next_s = self._next_s, min(self._next_s * 2, BACKOFF_MAX_S)
        return delay

    def reset(self) -> None:
        self._next_s = BACKOFF_MIN_S


class Archiver:
    """Archives the cluster's EVENTS stream into `lake` until `stopping` is set."""

    def __init__(
        self,
        nc: Client,
        cluster_id: str,
        lake: Path,
        log: Logger,
        *,
        metrics: ArchiverMetrics | None = None,
        batch_messages_max: int = BATCH_MESSAGES_MAX,
        batch_wait_s: float = BATCH_WAIT_S,
        ack_wait_s: float = ACK_WAIT_S,
    ) -> None:
        assert 1 <= batch_messages_max <= MAX_ACK_PENDING, batch_messages_max
        assert batch_wait_s >= FETCH_TIMEOUT_MIN_S and ack_wait_s > 0, (batch_wait_s, ack_wait_s)
        self.stopping = asyncio.Event()
        self.metrics = metrics or ArchiverMetrics()
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream()
        self._cluster_id = cluster_id
        self._lake = lake
        self._log = log
        self._batch_messages_max = batch_messages_max
        self._batch_wait_s = batch_wait_s
        self._ack_wait_s = ack_wait_s
        self._subscription: JetStreamContext.PullSubscription | None = None
        self._backoff = Backoff()

    @property
    def ready(self) -> bool:
        return self._subscription is not None and self._nc.is_connected

    async def run(self) -> None:
        writer = LakeWriter(self._lake, self._log)
        await asyncio.to_thread(writer.open)  # recovery may delete and fsync: off the event loop
        self._log.info("archiver_started", lake=str(self._lake), archived=writer.archived.ranges[-3:])
        try:
            while not self.stopping.is_set() and not self._nc.is_closed:
                batch = await self._next_batch(writer)
                if batch:
                    await self._archive(writer, batch)
        finally:
            await self._unsubscribe()
            writer.close()
            self._log.info("archiver_stopped")

    # -- fetching --------------------------------------------------------------------------------------------------

    async def _next_batch(self, writer: LakeWriter) -> list[Msg]:
        """The next batch, or [] after an idle wait, a pause for a disconnected client, or a failed fetch. A lake
        bound to another stream raises LakeError."""
        if not self._nc.is_connected:
            await self._pause()  # no pull requests piling up in the reconnect buffer
            return []
        try:
            if self._subscription is None:
                self._subscription = await self._subscribe(writer)
            batch = await self._collect(self._subscription)
        except nats.errors.Error as error:
            self.metrics.fetch_errors.inc()
            self._log.warning("archiver_fetch_failed", error=f"{type(error).__name__}: {error}")
            await self._unsubscribe()
            await self._pause()
            return []
        self._backoff.reset()
        return batch

    async def _subscribe(self, writer: LakeWriter) -> JetStreamContext.PullSubscription:
        await ensure_events_stream(self._js, self._cluster_id)
        info = await self._js.stream_info(events_stream(self._cluster_id))
        await asyncio.to_thread(writer.bind_stream, *stream_identity(info))
        config = api.ConsumerConfig(
            durable_name=ARCHIVER_CONSUMER,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self._ack_wait_s,
            max_deliver=-1,  # never give up on an event: a message that cannot be written is quarantined instead
            max_ack_pending=MAX_ACK_PENDING,
        )
        subscription = await self._js.pull_subscribe(
            events_subjects(self._cluster_id),
            durable=ARCHIVER_CONSUMER,
            stream=events_stream(self._cluster_id),
            config=config,
        )
        self._log.info("archiver_consuming", stream=events_stream(self._cluster_id), consumer=ARCHIVER_CONSUMER)
        return subscription

    async def _collect(self, subscription: JetStreamContext.PullSubscription) -> list[Msg]:
        """Up to batch_messages_max messages, or what arrives within batch_wait_s of the first ([] when idle)."""
        batch: list[Msg] = []
        deadline: float | None = None  # the window opens with the first message
        while len(batch) < self._batch_messages_max:
            timeout_s = self._batch_wait_s if deadline is None else deadline - time.monotonic()
            if timeout_s < FETCH_TIMEOUT_MIN_S:
                break
            try:
                got = await subscription.fetch(self._batch_messages_max - len(batch), timeout=timeout_s)
            except TimeoutError:  # nats' TimeoutError is one: nothing (more) arrived in time
                break
            except nats.errors.Error:
                if not batch:
                    raise
                break  # keep what came; the next fetch meets the error again
            if not got:
                break
            if deadline is None:
                deadline = time.monotonic() + self._batch_wait_s
            batch += got
        return batch

    # -- writing and acknowledging ---------------------------------------------------------------------------------

    async def _archive(self, writer: LakeWriter, batch: list[Msg]) -> None:
        messages: list[StreamMessage] = [(msg.metadata.sequence.stream, msg.data) for msg in batch]
        while True:
            started = time.monotonic()
            try:
                result = await asyncio.to_thread(writer.write, messages)
                break
            except (OSError, LakeError) as error:
                # Disk full, or something in the lake's way. The writer removed what it had placed of this batch
                # and nothing is acknowledged, so retrying (or a redelivery to the next process) loses nothing.
                self.metrics.write_errors.inc()
                self._log.error("archiver_write_failed", error=str(error), lake=str(self._lake))
                await self._pause()
                if self.stopping.is_set():
                    return
        self.metrics.observe(result, time.monotonic() - started, max(seq for seq, _ in messages))
        for msg in batch:
            with contextlib.suppress(nats.errors.Error):  # a lost ack: redelivered later, then skipped
                await msg.ack()
        self._log.debug("archiver_batch", messages=len(messages), events=result.events, files=result.files)

    async def _unsubscribe(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()

    async def _pause(self) -> None:
        """Wait the next backoff delay, or less if asked to stop."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), self._backoff.next_s())


def stream_identity(info: api.StreamInfo) -> tuple[str, str]:
    """(name, creation time): what tells this stream from an earlier one of the same name."""
    return info.config.name or "", info.created.isoformat() if info.created else ""


async def archiver_lag(nc: Client, cluster_id: str) -> int | None:
    """Messages of the EVENTS stream the archiver has not yet acknowledged (delivered or not); None when there is
    no stream or no archiver consumer to ask."""
    try:
        info = await nc.jetstream().consumer_info(events_stream(cluster_id), ARCHIVER_CONSUMER)
    except NotFoundError:
        return None
    return int(info.num_pending or 0) + int(info.num_ack_pending or 0)
