"""The outbox relay against a real nats-server: every emitted event reaches the EVENTS stream exactly once, in
per-incarnation sequence order, through a NATS outage, a lost published cursor, and the death of the process
that wrote it (its outbox is replayed by the next one).

Method: an `EventPipeline` (outbox, sink, relay) on a real nats-server from tests/support/nats.py; the stream is
read back message by message and decoded. Waits are conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import nats
import pytest
import structlog
from nats.aio.client import Client

from hightide.protocol.envelope import Emitter, Envelope, decode_envelopes
from hightide.protocol.events import BrokerFenced
from hightide.protocol.subjects import events_message_id, events_stream
from hightide.runtime.event_store import EventPipeline, EventRelay, OutboxEventSink, ensure_events_stream
from hightide.runtime.outbox import (
    SUFFIX,
    GroupsFile,
    OutboxHeader,
    OutboxReader,
    OutboxWriter,
    cursor_path,
    merge_arrays,
    read_cursor,
    write_cursor,
)
from support.containers import NatsLike, nats_server

CLUSTER = "relaytest"
LOG = structlog.get_logger("test")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsLike]:
    running = nats_server(tmp_path / "nats").start()  # a container under HIGHTIDE_CONTAINERS=1
    yield running
    running.stop()


async def _connect(url: str, pending_size: int = 2 * 1024 * 1024) -> Client:
    """`pending_size` bounds what nats-py itself buffers while it reconnects: past it, publishing fails at once and
    only the relay's retries from its cursor bring those events to the stream."""
    return await nats.connect(
        url, connect_timeout=2, reconnect_time_wait=0.2, max_reconnect_attempts=-1, pending_size=pending_size
    )


async def _until(condition: Callable[[], Awaitable[bool]], deadline_s: float, what: str) -> None:
    end = asyncio.get_running_loop().time() + deadline_s
    while not await condition():
        assert asyncio.get_running_loop().time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling a condition with a deadline


async def _stored(nc: Client) -> list[Envelope]:
    js = nc.jetstream()
    info = await js.stream_info(events_stream(CLUSTER))
    envelopes: list[Envelope] = []
    for sequence in range(info.state.first_seq, info.state.last_seq + 1):
        message = await js.get_msg(events_stream(CLUSTER), sequence)
        envelopes.extend(decode_envelopes(message.data or b""))
    return envelopes


def _event(i: int) -> BrokerFenced:
    return BrokerFenced(broker=i % 1000, broker_epoch=i, reason="session_timeout")


def _assert_exactly_once(envelopes: list[Envelope], expected: dict[str, int]) -> None:
    """Each incarnation's sequences 0..n-1, each once, in order."""
    by_incarnation: dict[str, list[int]] = {}
    for envelope in envelopes:
        by_incarnation.setdefault(envelope.emitter.incarnation, []).append(envelope.sequence)
    assert {k: len(v) for k, v in by_incarnation.items()} == expected
    for incarnation, sequences in by_incarnation.items():
        assert sequences == list(range(expected[incarnation])), incarnation


def test_every_event_reaches_the_stream_once_and_a_clean_close_removes_the_outbox(
    tmp_path: Path, server: NatsLike
) -> None:
    async def scenario() -> None:
        nc = await _connect(server.url)
        pipeline = EventPipeline.open(
            nc, tmp_path / "outbox", cluster_id=CLUSTER, service="broker", emitter_id=1, log=LOG
        )
        pipeline.start()
        for i in range(2_500):
            pipeline.sink.emit(_event(i))
            if i % 100 == 0:
                await asyncio.sleep(0)  # let turns of the loop end, so records hold different numbers of events
        assert await pipeline.close()
        envelopes = await _stored(nc)
        _assert_exactly_once(envelopes, {pipeline.writer.header.incarnation: 2_500})
        assert [e.event for e in envelopes] == [_event(i) for i in range(2_500)]
        assert not list((tmp_path / "outbox").iterdir())
        await nc.close()

    asyncio.run(scenario())


def test_a_nats_outage_loses_and_duplicates_nothing(tmp_path: Path, server: NatsLike) -> None:
    async def scenario() -> None:
        nc = await _connect(server.url, pending_size=4096)
        pipeline = EventPipeline.open(
            nc,
            tmp_path / "outbox",
            cluster_id=CLUSTER,
            service="controller",
            emitter_id=2,
            log=LOG,
            publish_timeout_s=0.5,
        )
        pipeline.start()
        emitted = 0

        async def emit(count: int) -> None:
            nonlocal emitted
            for _ in range(count):
                pipeline.sink.emit(_event(emitted))
                emitted += 1
                if emitted % 50 == 0:
                    await asyncio.sleep(0.001)

        await emit(500)
        await _until(lambda: _true(pipeline.relay.caught_up), 15, "the first events published")
        server.stop()
        await emit(1_000)  # NATS is gone: the outbox keeps them
        await _until(lambda: _true(pipeline.relay.failures >= 2), 15, "publishes to fail while NATS is away")
        assert not pipeline.relay.caught_up
        await emit(200)
        server.start()
        await emit(500)
        await _until(lambda: _true(pipeline.relay.caught_up), 30, "the relay to catch up after the outage")
        assert await pipeline.close()
        _assert_exactly_once(await _stored(nc), {pipeline.writer.header.incarnation: 2_200})
        await nc.close()

    asyncio.run(scenario())


async def _true(value: bool) -> bool:
    return value


def _ended_outbox(directory: Path, header: OutboxHeader, count: int, per_record: int) -> Path:
    """An outbox as a process that ended before relaying leaves it: `count` events, `per_record` to a record."""
    writer = OutboxWriter.create(directory, header)
    sink = OutboxEventSink(CLUSTER, _emitter(header), writer)
    for i in range(count):
        sink.emit(_event(i))
        if i % per_record == per_record - 1:
            sink.flush()
    sink.flush()
    writer.close()
    return writer.path


def test_a_lost_cursor_republishes_and_the_stream_keeps_one_copy(tmp_path: Path, server: NatsLike) -> None:
    async def scenario() -> None:
        nc = await _connect(server.url)
        directory = tmp_path / "outbox"
        header = OutboxHeader(CLUSTER, "broker", 7, "ended-incarnation")
        _ended_outbox(directory, header, 300, 30)  # the process ends with its outbox unpublished
        # A first relay publishes it all, then the cursor is lost as if the process died before writing it.
        first = EventRelay(nc, CLUSTER, directory, None, LOG)
        stop = asyncio.Event()
        await first._until_stream(stop)
        await first._adopt_ended(stop)
        assert first.adopted == 1 and first.published == 10
        assert not (directory / f"ended-incarnation{SUFFIX}").exists()
        # Put the same outbox back with no cursor: everything goes again, and the stream drops every copy.
        _ended_outbox(directory, header, 300, 30)
        second = EventRelay(nc, CLUSTER, directory, None, LOG)
        await second._adopt_ended(stop)
        assert second.published == 10
        _assert_exactly_once(await _stored(nc), {"ended-incarnation": 300})
        await nc.close()

    asyncio.run(scenario())


def _emitter(header: OutboxHeader) -> Emitter:
    return Emitter(header.service, header.emitter_id, header.incarnation)


def test_an_ended_incarnations_outbox_is_replayed_from_its_cursor_by_the_next_process(
    tmp_path: Path, server: NatsLike
) -> None:
    """A process killed before its relay caught up: the next one with the same directory publishes the rest,
    from the cursor on (what was published before stays once), stops at a torn tail, and deletes the outbox."""

    async def scenario() -> None:
        nc = await _connect(server.url)
        directory = tmp_path / "outbox"
        # The ended process: its first 100 events published, 400 more only in its outbox, and a torn last write.
        previous = EventPipeline.open(nc, directory, cluster_id=CLUSTER, service="broker", emitter_id=5, log=LOG)
        previous.start()
        for i in range(100):
            previous.sink.emit(_event(i))
        previous.sink.flush()
        await _until(lambda: _true(previous.relay.caught_up), 15, "the first 100 published")
        await previous.stop_relay()
        for i in range(100, 500):
            previous.sink.emit(_event(i))
            if i % 40 == 0:
                previous.sink.flush()
        previous.sink.flush()
        path = previous.writer.path
        published_to = read_cursor(path)
        assert 0 < published_to < previous.writer.end
        previous.writer.close()  # (kill -9 releases the lock the same way)
        with open(path, "ab") as f:
            f.write(b"\x00\x00\x01\x00torn")  # a record header and part of its data: never acted upon
        # The next process in the same directory.
        nxt = EventPipeline.open(nc, directory, cluster_id=CLUSTER, service="broker", emitter_id=5, log=LOG)
        nxt.start()
        nxt.sink.emit(_event(9_999))
        await _until(lambda: _true(nxt.relay.adopted == 1 and nxt.relay.caught_up), 30, "the replay")
        assert not path.exists() and not cursor_path(path).exists()
        assert await nxt.close()
        envelopes = await _stored(nc)
        _assert_exactly_once(
            envelopes,
            {previous.writer.header.incarnation: 500, nxt.writer.header.incarnation: 1},
        )
        assert Counter(e.emitter.incarnation for e in envelopes[:100]) == {previous.writer.header.incarnation: 100}
        await nc.close()

    asyncio.run(scenario())


def test_a_live_incarnations_outbox_is_left_to_its_owner(tmp_path: Path, server: NatsLike) -> None:
    async def scenario() -> None:
        nc = await _connect(server.url)
        directory = tmp_path / "outbox"
        owner = OutboxWriter.create(directory, OutboxHeader(CLUSTER, "producer", 1, "alive"))
        owner.append(0, 1, b"\x90")  # an empty msgpack array: a record nobody else may publish
        relay = EventRelay(nc, CLUSTER, directory, None, LOG)
        stop = asyncio.Event()
        await relay._until_stream(stop)
        await relay._adopt_ended(stop)
        assert relay.adopted == 0 and relay.published == 0
        assert owner.path.exists()
        assert OutboxReader(owner.path).header.incarnation == "alive"
        owner.close()
        write_cursor(owner.path, 0)
        os.remove(owner.path)
        await nc.close()

    asyncio.run(scenario())


def test_a_message_published_before_a_crash_is_published_again_exactly_as_planned(
    tmp_path: Path, server: NatsLike
) -> None:
    """The relay stored records 0-1 as one message and died before its cursor moved. The next relay must send
    that message again with the same records (the stream drops it as a copy) and the rest after it: grouping
    records 0-4 into one message under the same id would be dropped whole, losing records 2-4."""

    async def scenario() -> None:
        nc = await _connect(server.url)
        directory = tmp_path / "outbox"
        header = OutboxHeader(CLUSTER, "broker", 9, "crashed")
        path = _ended_outbox(directory, header, 50, 10)  # five records of ten events
        records = list(OutboxReader(path).records(0))
        assert len(records) == 5
        GroupsFile(path).append([(records[0].position, records[1].end)])
        js = nc.jetstream()
        await ensure_events_stream(js, CLUSTER)
        message_id = events_message_id("broker", 9, "crashed", 0)
        await js.publish("ht.relaytest.events.broker.9", merge_arrays(records[:2]), headers={"Nats-Msg-Id": message_id})
        relay = EventRelay(nc, CLUSTER, directory, None, LOG)
        await relay._adopt_ended(asyncio.Event())
        assert relay.adopted == 1
        _assert_exactly_once(await _stored(nc), {"crashed": 50})
        await nc.close()

    asyncio.run(scenario())
