"""`hightide events tail` and `hightide events export`: the event store read by people, and copied to the lake.

Room: services/client. `tail` reads the EVENTS stream (`HT_<cluster>_EVENTS`, one msgpack array of envelopes per
message) through an ordered consumer from its first message, and prints each event as a readable line or as one
JSON object. It only reads: it never publishes to the stream, and its consumer is ephemeral (no acks, no durable
state), so any number of tails may run beside the archiver. `export` hands the NATS connection to the lake's
`export_once`, which owns everything about the archive (files, lock, idempotence); this module only prints its
summary.

Without `--follow`, `tail` stops at the stream's last sequence as of when it started, so its output is a snapshot
of the store. With `--follow` it keeps printing until SIGINT or SIGTERM, which end it with exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import nats.errors
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import NotFoundError

from hightide.client.commands import UsageError, cluster_address, command_nats_settings
from hightide.protocol.envelope import Envelope, decode_envelopes, to_plain
from hightide.protocol.events import CATALOGUE, InvalidEvent, field_hints
from hightide.protocol.permissions import Role
from hightide.protocol.subjects import events_stream, events_subjects
from hightide.runtime.logging import get_logger
from hightide.runtime.nats import NatsSettings, connect

EXIT_OK: Final = 0
# How long the reader waits for a message before it checks the stream again (without --follow: whether what it
# set out to print has meanwhile been removed by retention, so that it never waits for a message that is gone).
IDLE_CHECK_S: Final = 1.0
# The ordered consumer's heartbeat: after two missed ones nats-py recreates the consumer where it left off.
IDLE_HEARTBEAT_S: Final = 2.0
# The client buffers at most this much of the stream ahead of the printer; flow control holds the server back.
PENDING_BYTES_MAX: Final = 64 * 1024 * 1024
INCARNATION_SHORT_CHARS: Final = 8
_PLAIN_STRING: Final = re.compile(r"[^\s\"'=\[\]]+")


class EventsFailed(Exception):
    """An events command could not do its work; the message is one line, fit for the CLI (exit 1)."""


def add_events_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    events = subparsers.add_parser("events", help="the event store: tail it, export it to the lake").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    tail = events.add_parser("tail", parents=[common], help="print the stored events, oldest first")
    tail.add_argument("--type", action="append", default=[], metavar="T", help="only this event type (repeatable)")
    tail.add_argument("--follow", action="store_true", help="then keep printing new events until interrupted")
    tail.add_argument("--format", choices=["text", "json"], default="text")
    tail.set_defaults(run=events_tail)
    export = events.add_parser("export", parents=[common], help="archive everything stored so far to the lake")
    export.add_argument("--lake", type=Path, required=True, metavar="DIR")
    export.set_defaults(run=events_export)


# -- tail ------------------------------------------------------------------------------------------------------


def events_tail(args: argparse.Namespace) -> int:
    wanted = _wanted_types(args.type)
    _url, cluster_id = cluster_address(args)
    line_of = _json_line if args.format == "json" else _text_line
    printer = _Printer(sys.stdout, wanted, line_of)
    try:
        settings = command_nats_settings(args, Role.CLIENT, name="hightide-events-tail")
        return asyncio.run(_tail_until_signal(settings, cluster_id, printer, follow=args.follow))
    except BrokenPipeError:
        # `hightide events tail | head`: the reader has gone, which is not a failure. Point stdout at /dev/null
        # so the interpreter's last flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _wanted_types(types: list[str]) -> frozenset[str] | None:
    unknown = sorted(set(types) - set(CATALOGUE))
    if unknown:
        raise UsageError(f"unknown event type {', '.join(unknown)}; known types: {', '.join(sorted(CATALOGUE))}")
    return frozenset(types) or None


async def _tail_until_signal(settings: NatsSettings, cluster_id: str, printer: _Printer, *, follow: bool) -> int:
    """Run the reader until it is done (without --follow) or SIGINT/SIGTERM arrives, then close NATS."""
    nc = await connect(settings)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        reader = asyncio.create_task(_tail(nc, cluster_id, printer, follow=follow))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for task in (reader, stopping):
            task.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
        if reader.done() and not reader.cancelled():
            reader.result()  # the reader's own failure, if it failed
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        printer.flush()
        return EXIT_OK
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await nc.close()


async def _tail(nc: Client, cluster_id: str, printer: _Printer, *, follow: bool) -> None:
    js = nc.jetstream()
    stream = events_stream(cluster_id)
    state = await _stream_state(js, stream)
    if state is None:
        print(f"hightide events tail: no events yet (the stream {stream} does not exist)", file=sys.stderr)
        return
    last_seq_at_start = state.last_seq
    if not follow and state.messages == 0:
        return
    subscription = await _subscribe(js, cluster_id, stream)
    try:
        while True:
            try:
                msg = await subscription.next_msg(timeout=IDLE_CHECK_S)
            except nats.errors.TimeoutError:
                printer.flush()
                if not follow and await _nothing_left(js, stream, last_seq_at_start):
                    return
                continue
            metadata = msg.metadata
            printer.message(metadata.sequence.stream, msg.data, caught_up=metadata.num_pending == 0)
            # num_pending 0 before the last sequence at start: the messages up to it were removed meanwhile.
            if not follow and (metadata.sequence.stream >= last_seq_at_start or metadata.num_pending == 0):
                return
    finally:
        with contextlib.suppress(nats.errors.Error):
            await subscription.unsubscribe()


async def _stream_state(js: Any, stream: str) -> api.StreamState | None:
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        return None
    except (nats.errors.Error, TimeoutError) as error:
        raise EventsFailed(f"cannot read the stream {stream}: {_one_line(error)}") from None
    state: api.StreamState = info.state
    return state


async def _subscribe(js: Any, cluster_id: str, stream: str) -> Any:
    """An ordered consumer of the whole stream: ephemeral, in memory on the server, no acks; nats-py recreates it
    from the next stream sequence if it sees a gap or misses heartbeats (a NATS restart)."""
    try:
        return await js.subscribe(
            events_subjects(cluster_id),
            stream=stream,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.ALL,
            idle_heartbeat=IDLE_HEARTBEAT_S,
            pending_bytes_limit=PENDING_BYTES_MAX,
        )
    except (nats.errors.Error, TimeoutError) as error:
        raise EventsFailed(f"cannot read the stream {stream}: {_one_line(error)}") from None


async def _nothing_left(js: Any, stream: str, last_seq_at_start: int) -> bool:
    """True when no message up to `last_seq_at_start` is still stored (retention removed them meanwhile)."""
    state = await _stream_state(js, stream)
    return state is None or state.messages == 0 or state.first_seq > last_seq_at_start


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


@dataclass(slots=True)
class _Printer:
    """Decodes each message, filters its events by type and writes one line per event."""

    out: TextIO
    wanted: frozenset[str] | None
    line_of: Callable[[Envelope, int], str]
    last_stream_seq: int = 0

    def message(self, stream_seq: int, data: bytes, *, caught_up: bool) -> None:
        assert stream_seq > self.last_stream_seq, f"stream sequence {stream_seq} after {self.last_stream_seq}"
        self.last_stream_seq = stream_seq
        try:
            envelopes = decode_envelopes(data)
        except InvalidEvent as error:
            self.flush()
            warning = f"hightide events tail: warning: stream sequence {stream_seq} does not decode: {error}"
            print(warning, file=sys.stderr)
            return
        lines = [self.line_of(e, stream_seq) for e in envelopes if self.wanted is None or e.type in self.wanted]
        if lines:
            self.out.write("\n".join(lines) + "\n")
        if caught_up:
            self.flush()  # a follower sees each new event at once; a reader of the backlog is not slowed by flushes

    def flush(self) -> None:
        self.out.flush()


def _text_line(envelope: Envelope, _stream_seq: int) -> str:
    """`2023-11-14T22:13:20.123Z broker-1 3f2a9c1d #17 HighWatermarkAdvanced topic=demo partition=0 ...`"""
    emitter = envelope.emitter
    seconds, millis = divmod(envelope.wall_ms, 1000)
    head = (
        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z "
        f"{emitter.service}-{emitter.emitter_id} {emitter.incarnation[:INCARNATION_SHORT_CHARS]} "
        f"#{envelope.sequence} {envelope.type}"
    )
    event = envelope.event
    fields = (f"{name}={_text_value(getattr(event, name))}" for name in field_hints(type(event)))
    return " ".join([head, *fields])


def _text_value(value: object) -> str:
    """Plain strings as they are; strings a reader could misread (empty, spaces, quotes, `=`) and everything else
    (numbers, booleans, null, lists) as compact JSON, so every line splits back into its fields."""
    if type(value) is int:
        return str(value)  # the common case, first: most fields are offsets, epochs and ids
    if isinstance(value, str) and _PLAIN_STRING.fullmatch(value):
        return value
    return json.dumps(value, separators=(",", ":"))


def _json_line(envelope: Envelope, stream_seq: int) -> str:
    """The envelope as `to_plain` gives it, with the stream sequence of its message before the event's fields."""
    plain = to_plain(envelope)
    event = plain.pop("event")
    return json.dumps({**plain, "stream_sequence": stream_seq, "event": event})


# -- export ----------------------------------------------------------------------------------------------------


def events_export(args: argparse.Namespace) -> int:
    _url, cluster_id = cluster_address(args)
    settings = command_nats_settings(args, Role.CLIENT, name="hightide-events-export")
    return asyncio.run(_export(dataclasses.replace(settings, max_reconnect_attempts=10), cluster_id, args.lake))


async def _export(settings: NatsSettings, cluster_id: str, lake: Path) -> int:
    # Imported here: the lake brings pyarrow, which no other command needs at start-up.
    from hightide.lake import LakeError, export_once  # noqa: PLC0415

    nc = await connect(settings)
    try:
        summary = await export_once(nc, cluster_id, lake, log=get_logger("hightide.events.export"))
    except LakeError as error:  # the lake in use by an archiver or unusable, or the event store not answering
        raise EventsFailed(str(error)) from None
    finally:
        await nc.close()
    print(
        f"exported {summary.events} events in {summary.messages} messages to {summary.files} files in {lake}"
        f" ({summary.skipped} messages already archived, {summary.quarantined} quarantined)"
    )
    return EXIT_OK
