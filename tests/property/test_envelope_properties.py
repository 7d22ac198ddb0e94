"""Every catalogued event survives its envelope's msgpack form, and nothing else gets through.

Method: hypothesis builds events of every catalogue type from the types their fields declare (sized ints at
their bounds included), wraps them in envelopes and checks encode -> decode gives them back equal. Then it damages
envelopes (a field of the wrong type, out of range, missing or extra; an unknown type or version; random bytes)
and checks that the only thing that escapes is InvalidEvent.
"""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.protocol.envelope import (
    Emitter,
    Envelope,
    decode_envelopes,
    encode_envelopes,
    from_plain,
    to_plain,
)
from hightide.protocol.events import CATALOGUE, Event, InvalidEvent
from support.event_strategies import events_of


@st.composite
def events(draw: st.DrawFn, event_class: type[Event] | None = None) -> Event:
    event_class = event_class or draw(st.sampled_from(list(CATALOGUE.values())))
    return draw(events_of(event_class))


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    emitter = Emitter(
        draw(st.sampled_from(["broker", "controller", "producer", "consumer"])),
        draw(st.integers(-1, 2**31 - 1)),
        draw(st.uuids()).hex,
    )
    return Envelope(
        "cluster-1",
        emitter,
        draw(st.integers(0, 2**63 - 1)),
        draw(st.integers(0, 2**63 - 1)),
        draw(st.integers(0, 2**63 - 1)),
        draw(events()),
    )


@pytest.mark.parametrize("event_class", list(CATALOGUE.values()), ids=list(CATALOGUE))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips_through_its_envelope(event_class: type[Event], data: st.DataObject) -> None:
    envelope = Envelope("c", Emitter("broker", 1, "inc"), 0, 1, 2, data.draw(events(event_class)))
    (back,) = decode_envelopes(encode_envelopes([envelope]))
    assert back == envelope and back.type == event_class.TYPE


@settings(max_examples=300, deadline=None)
@given(st.lists(envelopes(), max_size=5))
def test_a_batch_of_envelopes_round_trips_in_order(batch: list[Envelope]) -> None:
    assert decode_envelopes(encode_envelopes(batch)) == batch


DAMAGE = st.sampled_from(
    [
        ("sequence", -1),
        ("sequence", 2**63),
        ("emitter_id", 2**31),
        ("wall_ms", "now"),
        ("service", "mystery"),
        ("cluster_id", ""),
        ("type", "NoSuchEvent"),
        ("version", 99),
        ("event", {}),
        ("event", [1, 2]),
        ("extra", 1),
    ]
)


@settings(max_examples=300, deadline=None)
@given(envelopes(), DAMAGE)
def test_a_damaged_envelope_is_invalid_event(envelope: Envelope, damage: tuple[str, object]) -> None:
    plain = to_plain(envelope)
    key, value = damage
    plain[key] = value
    with pytest.raises(InvalidEvent):
        from_plain(plain)


@settings(max_examples=300, deadline=None)
@given(envelopes(), st.data())
def test_an_event_field_of_the_wrong_type_or_size_is_invalid_event(envelope: Envelope, data: st.DataObject) -> None:
    plain = to_plain(envelope)
    fields = plain["event"]
    if not fields:
        return
    name = data.draw(st.sampled_from(sorted(fields)))
    # Wrong for every declared field type: beyond int64, a float, a map.
    fields[name] = data.draw(st.sampled_from([2**63, 1.5, {"a": 1}]))
    with pytest.raises(InvalidEvent):
        from_plain(msgpack.unpackb(msgpack.packb(plain), raw=False))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_invalid_event(garbage: bytes) -> None:
    with contextlib.suppress(InvalidEvent):
        decode_envelopes(garbage)
