"""The event store: the JetStream stream `HT_<cluster>_EVENTS` every emitter's outbox relays into.

Room: libs/runtime. Each message is one outbox record: a msgpack array of envelopes (`protocol.envelope`) from
one emitter incarnation, published on `ht.<cluster>.events.<service>.<id>` with `Nats-Msg-Id` =
`<service>.<id>.<incarnation>.<first sequence>`, so a batch relayed twice (after a crash, or when an ack was
lost to a NATS outage) is stored once as long as the second copy comes within the duplicate window.

The stream keeps events for `events.retention.ms` (7 days by default): the archiver moves them to the Parquet
lake long before that, and `hightide events tail` reads what is still here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError

from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.protocol.events import Event
from hightide.protocol.subjects import events_message_id, events_stream, events_subject, events_subjects
from hightide.runtime.events import EventSink
from hightide.runtime.outbox import (
    SUFFIX,
    GroupsFile,
    OutboxError,
    OutboxHeader,
    OutboxReader,
    OutboxRecord,
    OutboxWriter,
    merge_arrays,
    read_cursor,
    read_groups,
    remove,
    try_lock,
    write_cursor,
)
from hightide.runtime.stream_replicas import DEFAULT_STREAM_REPLICAS, cluster_replicas

DEFAULT_RETENTION_MS: Final = 7 * 24 * 3600 * 1000
# How long the stream remembers a message id. A relay that lost an ack republishes within seconds of NATS
# coming back; five minutes covers an outage that long with the copy still dropped.
DUPLICATE_WINDOW_S: Final = 300.0
MAX_EVENTS_PER_MESSAGE: Final = 1000  # a few hundred KiB at most: well under NATS' max_payload
MAX_MESSAGE_BYTES: Final = 512 * 1024
RELAY_WINDOW: Final = 32  # messages awaiting their acks at once
PUBLISH_TIMEOUT_S: Final = 5.0
BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 2.0
IDLE_RECHECK_S: Final = 1.0
DRAIN_TIMEOUT_S: Final = 10.0
CURSOR_SAVE_INTERVAL_S: Final = 0.2
RELAY_LINGER_S: Final = 0.05


def events_stream_config(
    cluster_id: str, *, replicas: int = 1, retention_ms: int = DEFAULT_RETENTION_MS
) -> api.StreamConfig:
    return api.StreamConfig(
        name=events_stream(cluster_id),
        subjects=[events_subjects(cluster_id)],
        storage=api.StorageType.FILE,
        num_replicas=replicas,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        max_msgs=-1,
        max_bytes=-1,
        max_age=retention_ms / 1000,
        duplicate_window=DUPLICATE_WINDOW_S,
    )


async def ensure_events_stream(
    js: JetStreamContext,
    cluster_id: str,
    *,
    replicas: int = DEFAULT_STREAM_REPLICAS,
    retention_ms: int = DEFAULT_RETENTION_MS,
) -> None:
    """Create the stream if it does not exist (an existing one is left as it is configured), with `replicas`
    clamped to the NATS cluster's size (`stream_replicas`)."""
    name = events_stream(cluster_id)
    try:
        await js.stream_info(name)
    except NotFoundError:
        replicas = cluster_replicas(js, replicas)
        try:
            await js.add_stream(events_stream_config(cluster_id, replicas=replicas, retention_ms=retention_ms))
        except APIError:
            await js.stream_info(name)  # created by another process meanwhile


# -- emitting: the sink the services hand their events to ----------------------------------------------------------


class OutboxEventSink:
    """Wraps each event in its envelope and writes it to the outbox: at the end of the current turn of the event
    loop (many events, one record, one `write`), or at once on `flush`. A service calls `flush` before anything
    that acts on what its events report leaves the process (a reply, a request to another service), so a kill -9
    can never leave an action without its event."""

    def __init__(
        self,
        cluster_id: str,
        emitter: Emitter,
        writer: OutboxWriter,
        *,
        on_written: Callable[[], None] = lambda: None,
        also: EventSink | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self.emitter = emitter
        self.writer = writer
        self.on_written = on_written
        self.also = also
        self.counts: dict[str, int] = {}
        self._pending: list[Envelope] = []
        self._next_sequence = writer.next_sequence
        self._scheduled = False

    def emit(self, event: Event) -> None:
        envelope = Envelope(
            self.cluster_id, self.emitter, self._next_sequence, time.time_ns() // 1_000_000, time.monotonic_ns(), event
        )
        self._next_sequence += 1
        self._pending.append(envelope)
        self.counts[event.TYPE] = self.counts.get(event.TYPE, 0) + 1
        if self.also is not None:
            self.also.emit(event)
        if not self._scheduled:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
                self._scheduled = True
            except RuntimeError:  # no event loop (a synchronous caller): write now
                self.flush()

    def flush(self) -> None:
        self._scheduled = False
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MAX_EVENTS_PER_MESSAGE):
            self._write(pending[start : start + MAX_EVENTS_PER_MESSAGE])
        self.on_written()

    def _write(self, chunk: list[Envelope]) -> None:
        """One record, or halves of it while it is over MAX_MESSAGE_BYTES (a record is at most one message)."""
        data = encode_envelopes(chunk)
        if len(data) > MAX_MESSAGE_BYTES and len(chunk) > 1:
            middle = len(chunk) // 2
            self._write(chunk[:middle])
            self._write(chunk[middle:])
            return
        self.writer.append(chunk[0].sequence, len(chunk), data)


class NullEventSink:
    """Emission switched off: the benchmark-only setting that measures what emission costs."""

    counts: dict[str, int]

    def __init__(self) -> None:
        self.counts = {}

    def emit(self, event: Event) -> None:
        pass

    def flush(self) -> None:
        pass


# -- relaying: the outbox to the stream ----------------------------------------------------------------------------


class EventRelay:
    """Publishes outbox records to the `EVENTS` stream, in order, up to `window` at a time, and moves the published
    cursor as acks come back. After a failure (NATS gone, a timeout) it backs off and starts again from the first
    record not acknowledged: the stream drops the copies of any that had arrived. On start it first adopts outboxes
    of ended incarnations in the same directory (a crash, or a NATS outage longer than the last run), publishes
    what they still hold, and deletes them."""

    def __init__(
        self,
        nc: Client,
        cluster_id: str,
        directory: Path,
        writer: OutboxWriter | None,
        log: Any,
        *,
        window: int = RELAY_WINDOW,
        replicas: int = DEFAULT_STREAM_REPLICAS,
        retention_ms: int = DEFAULT_RETENTION_MS,
        publish_timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=publish_timeout_s)
        self.cluster_id = cluster_id
        self.directory = directory
        self.writer = writer
        self.log = log
        self.window = window
        self.replicas = replicas
        self.retention_ms = retention_ms
        self.published = 0  # records acknowledged, for status and tests
        self.adopted = 0  # outboxes of ended incarnations replayed
        self.failures = 0  # publish rounds that failed (and were retried)
        self._wake = asyncio.Event()
        self._own_position = read_cursor(writer.path) if writer is not None else 0
        self._own_reader: OutboxReader | None = None
        self._failures = 0
        self._saved: dict[Path, int] = {}
        self._last_save = 0.0
        self._plans: dict[Path, list[tuple[int, int]]] = {}  # per outbox: planned messages beyond the cursor
        self._group_files: dict[Path, GroupsFile] = {}

    def notify(self) -> None:
        self._wake.set()

    @property
    def caught_up(self) -> bool:
        """Everything the live outbox holds is in the stream."""
        return self.writer is None or self._own_position >= self.writer.end

    async def run(self, stopping: asyncio.Event) -> None:
        await self._until_stream(stopping)
        await self._adopt_ended(stopping)
        while not stopping.is_set():
            if self.writer is not None and not self.caught_up:
                if self.writer.end - self._own_position < MAX_MESSAGE_BYTES // 2:
                    # Linger (as a producer's linger.ms) so one message carries what a busy service writes in
                    # that time: the events are already safe in the outbox, and a message per turn of the event
                    # loop costs the data path (relay CPU, JetStream writes) far more than the wait.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stopping.wait(), RELAY_LINGER_S)
                try:
                    await self._relay_own(stopping)
                except (OSError, OutboxError) as error:  # the outbox itself is unreadable: say so, keep trying
                    self.log.error("outbox_relay_failed", error=type(error).__name__, detail=str(error)[:200])
                    await self._back_off(stopping, "outbox_relay_failed", error)
                continue
            self._wake.clear()
            if self.caught_up:
                if self.writer is not None:  # idle: save where the stream has it (rate-limited; the idle
                    self._save_cursor(self.writer.path, self._own_position)  # wait below comes back to it)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(self._wake.wait(), stopping.wait()), IDLE_RECHECK_S)

    async def drain(self, timeout_s: float) -> bool:
        """Publish what the live outbox holds, within `timeout_s`; True when all of it is in the stream."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        never = asyncio.Event()
        while not self.caught_up:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._relay_own(never), remaining)
        if self.writer is not None:
            self._save_cursor(self.writer.path, self._own_position, now=True)
        return True

    def close(self) -> None:
        if self._own_reader is not None:
            self._own_reader.close()
            self._own_reader = None
        for file in self._group_files.values():
            file.close()
        self._group_files.clear()

    async def _until_stream(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await ensure_events_stream(
                    self.js, self.cluster_id, replicas=self.replicas, retention_ms=self.retention_ms
                )
                return
            except Exception as error:  # NATS away or JetStream not ready: the outbox keeps everything meanwhile
                await self._back_off(stopping, "events_stream_unavailable", error)

    async def _adopt_ended(self, stopping: asyncio.Event) -> None:
        own = self.writer.path if self.writer is not None else None
        for path in sorted(self.directory.glob(f"*{SUFFIX}"), key=_modified):
            if path == own or stopping.is_set():
                continue
            lock = try_lock(path)
            if lock is None:
                continue  # a live process owns it
            try:
                await self._replay(path, stopping)
            finally:
                os.close(lock)

    async def _replay(self, path: Path, stopping: asyncio.Event) -> None:
        try:
            reader = OutboxReader(path)
        except OutboxError as error:
            self.log.error("outbox_unreadable", path=str(path), error=str(error))
            return
        try:
            position = max(read_cursor(path), reader.records_start)
            size = path.stat().st_size
            while position < size and not stopping.is_set():
                position = await self._publish_from(reader, position, size, stopping)
            if stopping.is_set():
                return
            if reader.damaged_at is not None:
                self.log.warning(
                    "outbox_damaged_tail", path=str(path), position=reader.damaged_at, dropped_bytes=size - position
                )
            self.adopted += 1
            self.log.info("outbox_replayed", path=str(path), incarnation=reader.header.incarnation)
            remove(path)
        finally:
            reader.close()
            groups = self._group_files.pop(path, None)
            if groups is not None:
                groups.close()
            self._plans.pop(path, None)
            self._saved.pop(path, None)

    async def _relay_own(self, stopping: asyncio.Event) -> None:
        assert self.writer is not None
        if self._own_reader is None:
            self._own_reader = OutboxReader(self.writer.path)
            self._own_position = max(self._own_position, self._own_reader.records_start)
        self._own_position = await self._publish_from(self._own_reader, self._own_position, self.writer.end, stopping)

    async def _publish_from(self, reader: OutboxReader, position: int, end: int, stopping: asyncio.Event) -> int:
        """Publish up to `window` messages from `position`, each several records (the planned extents first, see
        outbox.read_groups); the position after the last message acknowledged in a row."""
        header = reader.header
        subject = events_subject(self.cluster_id, header.service, header.emitter_id)
        plan = [extent for extent in self._plan_of(reader.path, position) if extent[0] >= position]
        groups, planned_used = self._form_groups(reader, position, end, plan)
        if not groups:
            if reader.damaged_at is not None and reader.damaged_at == position:
                return end  # a torn tail nobody acted on (see outbox.py): nothing more to publish
            return position
        extents = [(group[0].position, group[-1].end) for group in groups]
        if len(extents) > planned_used:
            self._groups_file(reader.path).append(extents[planned_used:])  # on disk before any is published
        self._plans[reader.path] = extents + plan[planned_used:]  # kept if this round is cancelled midway
        results = await asyncio.gather(
            *(self._publish(subject, header, group) for group in groups), return_exceptions=True
        )
        failure: BaseException | None = None
        unacked: list[tuple[int, int]] = []
        for group, result in zip(groups, results, strict=True):
            if failure is None and isinstance(result, BaseException):
                failure = result
            if failure is None:
                position = group[-1].end
                self.published += len(group)
            else:
                unacked.append((group[0].position, group[-1].end))
        self._plans[reader.path] = unacked + plan[planned_used:]
        self._save_cursor(reader.path, position)
        if failure is not None:
            await self._back_off(stopping, "events_publish_failed", failure)
        else:
            self._failures = 0
        return position

    def _form_groups(
        self, reader: OutboxReader, position: int, end: int, plan: list[tuple[int, int]]
    ) -> tuple[list[list[OutboxRecord]], int]:
        """Records from `position` gathered into messages: first exactly as planned, then new ones of up to
        MAX_EVENTS_PER_MESSAGE events and MAX_MESSAGE_BYTES; how many of them came from the plan."""
        groups: list[list[OutboxRecord]] = []
        current: list[OutboxRecord] = []
        size = count = 0
        planned_used = 0
        for record in reader.records(position, end):
            if planned_used < len(plan):
                current.append(record)
                if record.end >= plan[planned_used][1]:
                    groups.append(current)
                    current = []
                    planned_used += 1
                continue
            if current and (
                size + len(record.data) > MAX_MESSAGE_BYTES or count + record.count > MAX_EVENTS_PER_MESSAGE
            ):
                groups.append(current)
                current, size, count = [], 0, 0
            if len(groups) >= self.window:
                break
            current.append(record)
            size += len(record.data)
            count += record.count
        if current and len(groups) < self.window:
            if planned_used < len(plan):
                planned_used += 1  # a planned message cut short by a torn tail: what is left of it
            groups.append(current)
        return groups, planned_used

    def _plan_of(self, outbox: Path, position: int) -> list[tuple[int, int]]:
        plan = self._plans.get(outbox)
        if plan is None:
            plan = read_groups(outbox, position)
            self._plans[outbox] = plan
        return plan

    def _groups_file(self, outbox: Path) -> GroupsFile:
        file = self._group_files.get(outbox)
        if file is None:
            file = self._group_files[outbox] = GroupsFile(outbox)
        return file

    def _save_cursor(self, outbox: Path, position: int, *, now: bool = False) -> None:
        """Persist how far the stream has this outbox, at most every CURSOR_SAVE_INTERVAL_S while busy (a file
        replace per publish round cost a fifth of a broker's time): a crash republishes at most that much, as
        planned, and the stream drops those copies by their message ids. Once nothing planned lies beyond the
        cursor, the plan file is emptied."""
        if self._saved.get(outbox) == position:
            return
        clock = time.monotonic()
        if not now and clock - self._last_save < CURSOR_SAVE_INTERVAL_S:
            return
        write_cursor(outbox, position)
        self._saved[outbox] = position
        self._last_save = clock
        if not self._plans.get(outbox) and outbox in self._group_files:
            self._group_files[outbox].clear()

    async def _publish(self, subject: str, header: OutboxHeader, group: list[OutboxRecord]) -> None:
        first = group[0].first_sequence
        message_id = events_message_id(header.service, header.emitter_id, header.incarnation, first)
        await self.js.publish(subject, merge_arrays(group), headers={"Nats-Msg-Id": message_id})

    async def _back_off(self, stopping: asyncio.Event, what: str, error: BaseException) -> None:
        self._failures += 1
        self.failures += 1
        delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2 ** min(self._failures - 1, 8))
        log = self.log.warning if self._failures == 1 else self.log.debug
        log(what, error=type(error).__name__, detail=str(error)[:200], retry_in_s=delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), delay)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


async def _first(*awaitables: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


# -- one process's whole pipeline ---------------------------------------------------------------------------------


class EventPipeline:
    """A process's outbox, its sink and its relay, started and stopped together."""

    def __init__(self, sink: OutboxEventSink, relay: EventRelay, writer: OutboxWriter) -> None:
        self.sink = sink
        self.relay = relay
        self.writer = writer
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def open(
        cls,
        nc: Client,
        directory: Path,
        *,
        cluster_id: str,
        service: str,
        emitter_id: int,
        log: Any,
        also: EventSink | None = None,
        replicas: int = DEFAULT_STREAM_REPLICAS,
        retention_ms: int = DEFAULT_RETENTION_MS,
        publish_timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> EventPipeline:
        incarnation = uuid.uuid4().hex
        header = OutboxHeader(cluster_id, service, emitter_id, incarnation)
        writer = OutboxWriter.create(directory, header)
        relay = EventRelay(
            nc,
            cluster_id,
            directory,
            writer,
            log,
            replicas=replicas,
            retention_ms=retention_ms,
            publish_timeout_s=publish_timeout_s,
        )
        emitter = Emitter(service, emitter_id, incarnation)
        sink = OutboxEventSink(cluster_id, emitter, writer, on_written=relay.notify, also=also)
        return cls(sink, relay, writer)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self.relay.run(self._stopping))

    async def stop_relay(self) -> None:
        """Stop relaying in the background (what is written stays in the outbox)."""
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
        """Write what is pending, publish it (within the timeout), stop. The outbox file is deleted only when the
        stream has all of it; otherwise it stays for the next process to replay. True when nothing is left."""
        self.sink.flush()
        await self.stop_relay()
        drained = await self.relay.drain(drain_timeout_s)
        self.relay.close()
        self.writer.close()
        if drained:
            remove(self.writer.path)
        return drained
