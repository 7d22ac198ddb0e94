"""docs/EVENTS.md is the event catalogue as the code defines it, and the catalogue checks what it declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.protocol import catalogue_doc
from hightide.protocol.events import CATALOGUE, InvalidEvent, TopicConfigsAltered, check_event

EVENTS_MD = Path(__file__).resolve().parents[2] / "docs" / "EVENTS.md"


def test_docs_events_md_is_current() -> None:
    assert EVENTS_MD.read_text() == catalogue_doc.render(), (
        "docs/EVENTS.md is out of date: run `python -m hightide.protocol.catalogue_doc > docs/EVENTS.md`"
    )


def test_every_event_type_has_a_section_with_each_field_and_its_sized_type() -> None:
    text = catalogue_doc.render()
    for name, event_class in CATALOGUE.items():
        assert f"## {name} (version {event_class.VERSION})" in text
    section = catalogue_doc.section(TopicConfigsAltered)
    assert "| `topic` | str |" in section
    assert "| `configs` | list of (str, str or null) |" in section
    assert "| `partition` | int32 |" in catalogue_doc.section(CATALOGUE["RecordsAppended"])
    assert "| `base_offset` | int64 |" in catalogue_doc.section(CATALOGUE["RecordsAppended"])


def test_a_fixed_length_tuple_field_is_checked_item_by_item() -> None:
    check_event(TopicConfigsAltered(topic="t", configs=(("retention.ms", None), ("segment.ms", "1"))))
    for bad in ((("retention.ms",),), (("retention.ms", 5),), (("a", "b", "c"),)):
        with pytest.raises(InvalidEvent):
            check_event(TopicConfigsAltered(topic="t", configs=bad))  # type: ignore[arg-type]
