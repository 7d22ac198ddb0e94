"""A history written into a real lake directory, the way the archiver writes one: each emitter incarnation's events
in messages of up to `events_per_message`, numbered by a stream sequence, through `LakeWriter`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hightide.lake import LakeWriter
from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.runtime.logging import get_logger

LOG = get_logger("test.lake_history")


def write_lake(
    envelopes: Sequence[Envelope], lake: Path, events_per_message: int = 64, messages_per_write: int | None = None
) -> Path:
    """Archive `envelopes` into `lake` (created if missing) as one stream named EVENTS; returns `lake`. The messages
    go to the writer in one `write`, or `messages_per_write` at a time (each write its own batch of files)."""
    messages: list[tuple[int, bytes]] = []
    pending: dict[Emitter, list[Envelope]] = {}
    for envelope in envelopes:
        batch = pending.setdefault(envelope.emitter, [])
        batch.append(envelope)
        if len(batch) == events_per_message:
            messages.append((len(messages) + 1, encode_envelopes(batch)))
            pending[envelope.emitter] = []
    for batch in pending.values():
        if batch:
            messages.append((len(messages) + 1, encode_envelopes(batch)))
    with LakeWriter(lake, LOG) as writer:
        writer.bind_stream("EVENTS", "test")
        step = messages_per_write or max(1, len(messages))
        for first in range(0, len(messages), step):
            writer.write(messages[first : first + step])
    return lake
