"""docs/EVENTS.md, written from the event catalogue itself, so the documentation cannot drift from the code.

Room: libs/protocol (vocabulary). `render()` gives the document: one section per event type, in catalogue order,
with its version, its docstring and a table of its fields with their sized types. A test compares it with the
file in the repository; `python -m hightide.protocol.catalogue_doc > docs/EVENTS.md` writes it again.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from typing import Annotated

from hightide.protocol.events import CATALOGUE, INT32_MAX, INT64_MAX, Event, IntRange

HEADER = """# Event catalogue

Every state transition of a Hightide cluster is one of these events: a past-tense fact, emitted next to the
change itself. The shell wraps each in an envelope (cluster id, emitter, a per-emitter sequence with no gaps,
wall-clock and monotonic time, type, version) before it is stored.

This file is generated from `hightide.protocol.events` by `python -m hightide.protocol.catalogue_doc`; a test
fails when it is out of date. Integer fields are sized as Kafka sizes the same quantity.
"""


def type_name(hint: object) -> str:
    """A field's type as the catalogue declares it: int32, int64, str, bool, list of ..., or "... or null"."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *metadata = typing.get_args(hint)
        for meta in metadata:
            if isinstance(meta, IntRange):
                return {INT32_MAX: "int32", INT64_MAX: "int64"}.get(meta.high, f"int in [{meta.low}, {meta.high}]")
        return type_name(base)
    if origin is tuple:
        items = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if len(typing.get_args(hint)) == 2 and typing.get_args(hint)[1] is Ellipsis:
            return f"list of {type_name(items[0])}"
        return "(" + ", ".join(type_name(a) for a in items) + ")"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(hint))  # no "|": it would split a table cell
    if hint is type(None):
        return "null"
    assert isinstance(hint, type), hint
    return hint.__name__


def section(event_class: type[Event]) -> str:
    hints = typing.get_type_hints(event_class, include_extras=True)
    lines = [
        f"## {event_class.TYPE} (version {event_class.VERSION})",
        "",
        " ".join(inspect.cleandoc(event_class.__doc__ or "").split()),
        "",
        "| field | type |",
        "| --- | --- |",
    ]
    lines += [f"| `{f.name}` | {type_name(hints[f.name])} |" for f in dataclasses.fields(event_class)]
    return "\n".join(lines) + "\n"


def render() -> str:
    index = "\n".join(f"- [{name}](#{name.lower()}-version-{cls.VERSION})" for name, cls in CATALOGUE.items())
    parts = [HEADER, f"{len(CATALOGUE)} event types:\n\n{index}\n"]
    parts += [section(cls) for cls in CATALOGUE.values()]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
