"""The archiver and the export against a real nats-server: nothing lost, nothing twice, nothing blocking.

Method: a real nats-server with JetStream (`support.nats.NatsServer`, or a `hightide-nats` container under
HIGHTIDE_CONTAINERS=1; stopped and started again on the same port and store for an outage). The test publishes
EVENTS messages exactly as a relay does (a msgpack array of envelopes per message, with its `Nats-Msg-Id`), runs
`Archiver` in the same event loop, and reads the lake back.
Partial lake states after a crash are made by hand with `LakeWriter` and then a part removed. Every wait polls a
condition with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from hightide.lake import (
    Archiver,
    LakeError,
    LakeInUse,
    LakeWriter,
    archiver_lag,
    count_events,
    export_once,
    read_envelopes,
    scan_lake,
)
from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.protocol.events import HighWatermarkAdvanced
from hightide.protocol.subjects import events_message_id, events_subject
from hightide.runtime.event_store import ensure_events_stream
from hightide.runtime.logging import get_logger
from hightide.runtime.nats import NatsSettings, connect
from support.containers import NatsLike
from support.containers import nats_server as make_nats_server

CLUSTER = "lake"
LOG = get_logger("test.archiver")
DEADLINE_S = 20.0
HOUR_MS = 3_600_000
MARCH_1_MS = 1_772_323_200_000


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsLike]:
    server = make_nats_server(tmp_path / "nats").start()  # a container under HIGHTIDE_CONTAINERS=1
    try:
        yield server
    finally:
        server.stop()


class Relay:
    """Publishes outbox records as the relay does: each message one emitter's next `per_message` events."""

    def __init__(self, js: JetStreamContext, emitters: int = 3) -> None:
        self.js = js
        self.emitters = [Emitter("broker", i, f"inc-{i}") for i in range(1, emitters + 1)]
        self.next_sequence = dict.fromkeys(self.emitters, 0)
        self.published: list[int] = []  # stream sequences

    def envelopes(self, emitter: Emitter, count: int, wall_ms: int) -> list[Envelope]:
        first = self.next_sequence[emitter]
        self.next_sequence[emitter] = first + count
        return [
            Envelope(
                CLUSTER,
                emitter,
                seq,
                wall_ms + seq,
                seq,
                HighWatermarkAdvanced(
                    topic="t", partition=emitter.emitter_id, replica=1, leader_epoch=0, previous=0, high_watermark=seq
                ),
            )
            for seq in range(first, first + count)
        ]

    async def publish(self, messages: int, per_message: int = 5, wall_ms: int = MARCH_1_MS) -> None:
        for i in range(messages):
            emitter = self.emitters[i % len(self.emitters)]
            batch = self.envelopes(emitter, per_message, wall_ms)
            await self.publish_raw(emitter, batch[0].sequence, encode_envelopes(batch))

    async def publish_raw(self, emitter: Emitter, first_sequence: int, data: bytes) -> None:
        subject = events_subject(CLUSTER, emitter.service, emitter.emitter_id)
        msg_id = events_message_id(emitter.service, emitter.emitter_id, emitter.incarnation, first_sequence)
        end = time.monotonic() + DEADLINE_S
        while True:  # as the relay does: again with the same id until stored (JetStream is back after NATS)
            try:
                ack = await self.js.publish(subject, data, headers={"Nats-Msg-Id": msg_id}, timeout=1.0)
                break
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                assert time.monotonic() < end, "JetStream did not store a message in time"
        self.published.append(ack.seq)

    @property
    def events(self) -> int:
        return sum(self.next_sequence.values())


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not await condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling a condition with a deadline


async def open_nats(server: NatsLike) -> Client:
    return await connect(NatsSettings(url=server.url, reconnect_wait_s=0.1), log=LOG)


@asynccontextmanager
async def running(archiver: Archiver) -> AsyncIterator[Archiver]:
    """The archiver's run() in a task of a TaskGroup, stopped (and awaited) on the way out."""
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(archiver.run())
        try:
            yield archiver
        finally:
            archiver.stopping.set()


async def connected(nc: Client) -> bool:
    return nc.is_connected


def sample(archiver: Archiver, name: str) -> float | None:
    return archiver.metrics.registry.get_sample_value(f"hightide_archiver_{name}_total")


async def caught_up(nc: Client) -> bool:
    return await archiver_lag(nc, CLUSTER) == 0


def assert_each_event_once(lake: Path, relay: Relay) -> None:
    rows = read_envelopes(lake)
    keys = Counter((e.emitter, e.sequence) for _, e in rows)
    assert [k for k, n in keys.items() if n > 1] == [], "an event appears twice"
    for emitter, count in relay.next_sequence.items():
        assert sorted(s for (em, s) in keys if em == emitter) == list(range(count)), f"a gap for {emitter}"
    assert len(rows) == relay.events


def test_the_archiver_moves_every_event_into_the_lake_and_acknowledges_it(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(60)
        archiver = Archiver(nc, CLUSTER, tmp_path / "lake", LOG, batch_wait_s=0.2)
        async with running(archiver):
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message")
            assert archiver.ready
            await relay.publish(30, wall_ms=MARCH_1_MS + HOUR_MS)  # while it runs, into the next hour
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge the newer messages")
        assert_each_event_once(tmp_path / "lake", relay)
        assert [s for s, _ in read_envelopes(tmp_path / "lake")][::5] == relay.published
        assert {p.path.parent.name for p in scan_lake(tmp_path / "lake").files} == {"hour=00", "hour=01"}
        assert sample(archiver, "messages") == 90
        await nc.close()

    asyncio.run(scenario())


def test_after_a_crash_between_part_renames_a_restarted_archiver_deletes_the_parts_and_archives_once(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(4, wall_ms=MARCH_1_MS)
        await relay.publish(4, wall_ms=MARCH_1_MS + HOUR_MS)
        # given: the archiver wrote messages 1-8 as one batch of two parts and died after renaming only the first
        await write_by_hand(nc, lake, range(1, 9))
        first, second = scan_lake(lake).complete[0].parts
        second.path.unlink()
        # when an archiver starts on that lake
        archiver = Archiver(nc, CLUSTER, lake, LOG, batch_wait_s=0.2, batch_messages_max=3)
        async with running(archiver):
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message")
        # then the orphaned part is gone and every event is there once, in batches of the new boundaries
        assert not first.path.exists()
        assert_each_event_once(lake, relay)
        assert [(b.first, b.last) for b in scan_lake(lake).complete] == [(1, 3), (4, 6), (7, 8)]
        await nc.close()

    asyncio.run(scenario())


def test_redelivered_messages_already_in_the_lake_are_skipped_whatever_the_new_batch_boundaries(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(20)
        # given: batches 3-7 and 12-13 were written but never acknowledged (a crash after the last rename)
        await write_by_hand(nc, lake, range(3, 8))
        await write_by_hand(nc, lake, range(12, 14))
        # when the archiver gets all 20 again, four at a time
        archiver = Archiver(nc, CLUSTER, lake, LOG, batch_wait_s=0.2, batch_messages_max=4)
        async with running(archiver):
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message")
        # then nothing is there twice, and the 7 it had were skipped
        assert_each_event_once(lake, relay)
        assert sample(archiver, "skipped_messages") == 7
        assert scan_lake(lake).archived.ranges == [(1, 20)]
        await nc.close()

    asyncio.run(scenario())


async def write_by_hand(nc: Client, lake: Path, sequences: range) -> None:
    """Write stream messages `sequences` into the lake as an archiver would, without acknowledging them."""
    js = nc.jetstream()
    messages = [(seq, (await js.get_msg(f"HT_{CLUSTER}_EVENTS", seq)).data or b"") for seq in sequences]
    with LakeWriter(lake, LOG) as writer:
        writer.write(messages)


def test_stopping_and_starting_nats_under_the_archiver_loses_nothing(nats_server: NatsLike, tmp_path: Path) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(1500, per_message=3)
        # A short ack wait: what was delivered but never reached us before the outage comes again in seconds.
        archiver = Archiver(nc, CLUSTER, lake, LOG, batch_wait_s=0.2, batch_messages_max=100, ack_wait_s=2.0)
        async with running(archiver):
            await wait_for(lambda: asyncio.to_thread(lambda: bool(scan_lake(lake).complete)), "a first batch")
            nats_server.stop()  # mid-stream: batches in flight, acks on the wire
            archived_during_outage = count_events(lake)
            nats_server.start()
            await wait_for(lambda: connected(nc), "the client to reconnect")
            await relay.publish(300, per_message=3)
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message", deadline_s=40)
        assert archived_during_outage < relay.events
        assert_each_event_once(lake, relay)
        await nc.close()

    asyncio.run(scenario())


def test_nothing_is_acknowledged_until_it_is_written_and_a_failed_write_is_retried(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(6)
        # given a file where the archiver must create the date partition's directory
        lake.mkdir()
        (lake / "date=2026-03-01").write_text("in the way")
        archiver = Archiver(nc, CLUSTER, lake, LOG, batch_wait_s=0.2)
        async with running(archiver):
            await wait_for(lambda: failed_writes(archiver), "a failed write")
            # then nothing is acknowledged
            info = await nc.jetstream().consumer_info(f"HT_{CLUSTER}_EVENTS", "archiver")
            assert (info.ack_floor.stream_seq, info.num_ack_pending) == (0, 6)
            # and once the way is clear, the same batch is written and acknowledged
            (lake / "date=2026-03-01").unlink()
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message")
        assert_each_event_once(lake, relay)
        await nc.close()

    asyncio.run(scenario())


async def failed_writes(archiver: Archiver) -> bool:
    return (sample(archiver, "write_errors") or 0) > 0


def test_a_message_that_does_not_decode_is_quarantined_and_does_not_block_the_lake(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(3)
        await relay.publish_raw(Emitter("broker", 9, "bad"), 0, b"\xc1 not msgpack")
        await relay.publish(3)
        archiver = Archiver(nc, CLUSTER, lake, LOG, batch_wait_s=0.2)
        async with running(archiver):
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message")
        assert (lake / "quarantine" / "4.msgpack").read_bytes() == b"\xc1 not msgpack"
        assert_each_event_once(lake, relay)
        assert sample(archiver, "quarantined_messages") == 1
        await nc.close()

    asyncio.run(scenario())


def test_export_once_archives_everything_so_far_and_a_second_run_writes_nothing(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        assert await export_once(nc, CLUSTER, lake, log=LOG) == (empty := await export_once(nc, CLUSTER, lake, log=LOG))
        assert (empty.messages, empty.events, empty.files, empty.skipped) == (0, 0, 0, 0)  # no stream: nothing
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(2500, per_message=2)
        first = await export_once(nc, CLUSTER, lake, log=LOG)
        assert (first.messages, first.events, first.skipped) == (2500, 5000, 0) and first.files >= 3
        second = await export_once(nc, CLUSTER, lake, log=LOG)
        assert (second.messages, second.events, second.files, second.skipped) == (0, 0, 0, 2500)
        await relay.publish(10, per_message=2)
        third = await export_once(nc, CLUSTER, lake, log=LOG)
        assert (third.messages, third.events, third.files, third.skipped) == (10, 20, 1, 2500)
        assert_each_event_once(lake, relay)
        # the export read through an ephemeral consumer of its own, and left none behind
        assert await nc.jetstream().consumers_info(f"HT_{CLUSTER}_EVENTS") == []
        await nc.close()

    asyncio.run(scenario())


def test_a_stream_created_anew_is_refused_by_a_lake_of_the_old_one(nats_server: NatsLike, tmp_path: Path) -> None:
    # Its sequences start again at 1: the lake would take its messages for ones it holds and skip them.
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(3)
        assert (await export_once(nc, CLUSTER, lake, log=LOG)).messages == 3
        await relay.js.delete_stream(f"HT_{CLUSTER}_EVENTS")
        await ensure_events_stream(relay.js, CLUSTER)
        await Relay(relay.js).publish(3)
        with pytest.raises(LakeError, match="give this stream a lake of its own"):
            await export_once(nc, CLUSTER, lake, log=LOG)
        with pytest.raises(LakeError, match="give this stream a lake of its own"):
            await Archiver(nc, CLUSTER, lake, LOG).run()
        await nc.close()

    asyncio.run(scenario())


def test_the_lock_refuses_an_export_and_a_second_archiver_while_an_archiver_runs(
    nats_server: NatsLike, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"

    async def scenario() -> None:
        nc = await open_nats(nats_server)
        relay = Relay(nc.jetstream())
        await ensure_events_stream(relay.js, CLUSTER)
        await relay.publish(5)
        archiver = Archiver(nc, CLUSTER, lake, LOG, batch_wait_s=0.2)
        async with running(archiver):
            await wait_for(lambda: caught_up(nc), "the archiver to acknowledge every message")
            with pytest.raises(LakeInUse, match=f"in use by pid {os.getpid()}"):
                await export_once(nc, CLUSTER, lake, log=LOG)
            with pytest.raises(LakeInUse):
                await Archiver(nc, CLUSTER, lake, LOG).run()
        # once the archiver has stopped, the export may write (and has nothing left to write)
        summary = await export_once(nc, CLUSTER, lake, log=LOG)
        assert (summary.messages, summary.skipped) == (0, 5)
        await nc.close()

    asyncio.run(scenario())


def test_the_lag_is_unknown_without_an_archiver_consumer(nats_server: NatsLike) -> None:
    async def scenario() -> None:
        nc = await open_nats(nats_server)
        assert await archiver_lag(nc, CLUSTER) is None
        await nc.close()

    asyncio.run(scenario())
