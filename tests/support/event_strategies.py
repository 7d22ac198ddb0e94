"""Hypothesis strategies for catalogue events: any value a field's declared type and size allow."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any

from hypothesis import strategies as st

from hightide.protocol.events import Event, IntRange


def values_of(hint: object) -> st.SearchStrategy[Any]:
    """Values of one field's declared type: sized ints over their whole range, short texts and tuples."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *metadata = typing.get_args(hint)
        ranges = [m for m in metadata if isinstance(m, IntRange)]
        return st.integers(ranges[0].low, ranges[0].high) if ranges else values_of(base)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(values_of(args[0]), max_size=4).map(tuple)
        return st.tuples(*(values_of(a) for a in args))
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(values_of(a) for a in typing.get_args(hint)))
    if hint is type(None):
        return st.none()
    return {str: st.text(max_size=12), bool: st.booleans(), int: st.integers(-(2**63), 2**63 - 1)}[hint]  # type: ignore[index]


@st.composite
def events_of(draw: st.DrawFn, event_class: type[Event]) -> Event:
    """An event of `event_class` with every field drawn from its declared type."""
    hints = typing.get_type_hints(event_class, include_extras=True)
    return event_class(**{f.name: draw(values_of(hints[f.name])) for f in dataclasses.fields(event_class)})
