"""Every catalogued event survives its envelope's msgpack form, and nothing else gets through.

Method: hypothesis builds events of every catalogue type from the types their fields declare (sized ints at
their bounds included), wraps them in envelopes and checks encode -> decode gives them back equal. Then it damages
envelopes (a field of the wrong type, out of range, missing or extra; an unknown type or version; random bytes)
and checks that the only thing that escapes is InvalidEvent.
"""

from __future__ import annotations

import contextlib
import dataclasses

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
from hightide.protocol.events import (
    CATALOGUE,
    Event,
    InvalidEvent,
    RecordsAppended,
    _check_value,
    _field_tests,
    check_event,
)
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


_INT_EDGES = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1]
_SCALARS = st.one_of(
    st.sampled_from(_INT_EDGES),
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=3).map(tuple)), max_leaves=6
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(CATALOGUE.values())), st.data())
def test_a_fields_quick_test_passes_nothing_the_full_check_refuses(
    event_class: type[Event], data: st.DataObject
) -> None:
    """check_event's shortcut (issue 15) may send a valid value to the full check, never an invalid one past it."""
    for name, quick, hint in _field_tests(event_class):
        if quick is None:
            continue
        value = data.draw(_VALUES, label=name)
        if quick(value):
            _check_value(event_class.TYPE, name, hint, value)  # must not raise


@pytest.mark.parametrize("event_class", list(CATALOGUE.values()), ids=list(CATALOGUE))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_field_of_a_valid_event_takes_the_quick_test(event_class: type[Event], data: st.DataObject) -> None:
    """The catalogue's fields all have a quick test, and a valid event passes every one of them: the full check,
    with its type look-ups, is left for what may be wrong."""
    event = data.draw(events(event_class))
    for name, quick, _ in _field_tests(event_class):
        assert quick is not None, f"{event_class.TYPE}.{name} has no quick test"
        assert quick(getattr(event, name)), f"{event_class.TYPE}.{name}={getattr(event, name)!r}"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "must be int, not bool"),
        (2**31, "is outside"),
        ([1, 2], "must be int, not list"),
        (type("Int", (int,), {})(7), None),  # an int subclass: not quick, but valid
    ],
)
def test_what_the_quick_test_leaves_is_judged_by_the_full_check(value: object, message: str | None) -> None:
    _, quick, _ = next(test for test in _field_tests(RecordsAppended) if test[0] == "partition")
    assert quick is not None and not quick(value)
    event = dataclasses.replace(
        RecordsAppended(
            topic="t",
            partition=0,
            replica=1,
            leader_epoch=0,
            base_offset=0,
            last_offset=0,
            record_count=1,
            size_bytes=70,
            log_end_offset=1,
            as_leader=True,
        ),
        partition=value,
    )
    if message is None:
        check_event(event)
    else:
        with pytest.raises(InvalidEvent, match=message):
            check_event(event)
