"""The envelope every stored event travels in, and its msgpack form.

Room: libs/protocol (vocabulary). The core emits bare events; the shell wraps each in an `Envelope` saying where
and when it happened before it goes to the outbox and the `EVENTS` stream:

| field          | meaning                                                                                   |
| -------------- | ----------------------------------------------------------------------------------------- |
| cluster_id     | the cluster the emitter belongs to                                                        |
| emitter        | service (broker, controller, producer, consumer, ...), its id, and its incarnation: a new |
|                | one each time the process starts                                                          |
| sequence       | 0, 1, 2, ... per emitter incarnation, with no gaps: a gap in the store is a lost event    |
| wall_ms        | wall-clock time (ms since the epoch): for people and for partitioning the archive         |
| mono_ns        | the emitter's monotonic clock: orders one incarnation's events even when the wall jumps   |
| type, version  | the catalogue's event type and the version of its fields                                  |
| event          | the event itself                                                                          |

On the wire an envelope is a msgpack map; `decode_envelope` checks every field (sizes included, by the
catalogue's `check_event`) and raises `InvalidEvent` for anything else, so a reader never holds a bad event. An
event of an older version of its type is upcast to the current one as it is read (`events.upcast`), so every
reader (the lake, the rebuild, `events tail`) holds current events only.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Final

import msgpack

from hightide.protocol.events import (
    CATALOGUE,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    Event,
    InvalidEvent,
    check_event,
    field_hints,
    upcast,
)

SERVICES: Final = frozenset({"broker", "controller", "producer", "consumer", "archiver", "canary"})
_ENVELOPE_KEYS: Final = frozenset(
    {"cluster_id", "service", "emitter_id", "incarnation", "sequence", "wall_ms", "mono_ns", "type", "version", "event"}
)


@dataclass(frozen=True, slots=True)
class Emitter:
    service: str
    emitter_id: int
    incarnation: str


@dataclass(frozen=True, slots=True)
class Envelope:
    cluster_id: str
    emitter: Emitter
    sequence: int
    wall_ms: int
    mono_ns: int
    event: Event

    @property
    def type(self) -> str:
        return self.event.TYPE

    @property
    def version(self) -> int:
        return self.event.VERSION


def to_plain(envelope: Envelope) -> dict[str, Any]:
    """The envelope as a msgpack-ready map (an event's tuples become lists)."""
    return {
        "cluster_id": envelope.cluster_id,
        "service": envelope.emitter.service,
        "emitter_id": envelope.emitter.emitter_id,
        "incarnation": envelope.emitter.incarnation,
        "sequence": envelope.sequence,
        "wall_ms": envelope.wall_ms,
        "mono_ns": envelope.mono_ns,
        "type": envelope.type,
        "version": envelope.version,
        "event": {name: getattr(envelope.event, name) for name in field_hints(type(envelope.event))},
    }


def from_plain(plain: object) -> Envelope:
    """The envelope in a map made by `to_plain` (after msgpack), checked whole; InvalidEvent if anything is off."""
    if not isinstance(plain, dict) or set(plain) != _ENVELOPE_KEYS:
        keys = sorted(map(str, plain)) if isinstance(plain, dict) else type(plain).__name__
        raise InvalidEvent(f"not an event envelope: {keys}")
    _check(isinstance(plain["cluster_id"], str) and plain["cluster_id"] != "", "cluster_id", plain)
    _check(plain["service"] in SERVICES, "service", plain)
    _check(isinstance(plain["incarnation"], str) and plain["incarnation"] != "", "incarnation", plain)
    _check(_is_int(plain["emitter_id"], INT32_MIN, INT32_MAX), "emitter_id", plain)
    _check(_is_int(plain["sequence"], 0, INT64_MAX), "sequence", plain)
    _check(_is_int(plain["wall_ms"], 0, INT64_MAX), "wall_ms", plain)
    _check(_is_int(plain["mono_ns"], 0, INT64_MAX), "mono_ns", plain)
    event_class = CATALOGUE.get(plain["type"]) if isinstance(plain["type"], str) else None
    if event_class is None:
        raise InvalidEvent(f"unknown event type {plain['type']!r}")
    version = plain["version"]
    if not _is_int(version, 1, event_class.VERSION):
        raise InvalidEvent(f"{event_class.TYPE} version {version!r}: this reader knows 1 to {event_class.VERSION}")
    fields = plain["event"]
    if version < event_class.VERSION and isinstance(fields, dict):
        fields = upcast(event_class, version, fields)  # an older version reads as the current one (events.py rules)
    event = _event(event_class, fields)
    emitter = Emitter(plain["service"], plain["emitter_id"], plain["incarnation"])
    return Envelope(plain["cluster_id"], emitter, plain["sequence"], plain["wall_ms"], plain["mono_ns"], event)


def encode_envelopes(envelopes: list[Envelope]) -> bytes:
    """Many envelopes in one msgpack array (one JetStream message, one outbox record)."""
    data: bytes = msgpack.packb([to_plain(e) for e in envelopes], use_bin_type=True)
    return data


def decode_envelopes(data: bytes) -> list[Envelope]:
    try:
        plain = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as error:  # msgpack raises many unrelated types for bad input
        raise InvalidEvent(f"not a msgpack array of envelopes: {type(error).__name__}") from None
    if not isinstance(plain, list):
        raise InvalidEvent(f"expected an array of envelopes, got {type(plain).__name__}")
    return [from_plain(item) for item in plain]


def _check(ok: bool, name: str, plain: dict[str, Any]) -> None:
    if not ok:
        raise InvalidEvent(f"envelope {name}={plain[name]!r} is not valid")


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _event(event_class: type[Event], fields: object) -> Event:
    hints = field_hints(event_class)
    if not isinstance(fields, dict) or fields.keys() != hints.keys():
        got = sorted(map(str, fields)) if isinstance(fields, dict) else type(fields).__name__
        raise InvalidEvent(f"{event_class.TYPE} needs fields {sorted(hints)}, got {got}")
    converted = _with_tuples(event_class)
    event = event_class(
        **{name: _typed(hints[name], value) if name in converted else value for name, value in fields.items()}
    )
    check_event(event)
    return event


def _with_tuples(event_class: type[Event]) -> frozenset[str]:
    """The fields whose declared type holds a tuple (the only ones `_typed` changes); found once per class."""
    names = _TUPLE_FIELDS.get(event_class)
    if names is None:
        names = frozenset(name for name, hint in field_hints(event_class).items() if _holds_tuple(hint))
        _TUPLE_FIELDS[event_class] = names
    return names


_TUPLE_FIELDS: dict[type[Event], frozenset[str]] = {}


def _holds_tuple(hint: object) -> bool:
    return typing.get_origin(hint) is tuple or any(_holds_tuple(arg) for arg in typing.get_args(hint))


def _typed(hint: object, value: object) -> object:
    """msgpack gives lists where the catalogue declares tuples: turn them back, by the field's declared type."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _typed(typing.get_args(hint)[0], value)
    if origin is tuple and isinstance(value, list):
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], item) for item in value)
        return tuple(_typed(arg, item) for arg, item in zip(args, value, strict=False)) + tuple(value[len(args) :])
    if origin in (typing.Union, types.UnionType) and isinstance(value, list):
        for option in typing.get_args(hint):
            if typing.get_origin(option) is tuple:
                return _typed(option, value)
    return value
