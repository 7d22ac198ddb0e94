"""The log event sink: changes of state reach the log at info, per-request events only at debug."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from hightide.protocol.events import BrokerFenced, RecordsAppended
from hightide.runtime.events import LogEventSink


class RecordingLogger:
    """Stands in for the structlog logger: records the level each event was logged at."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def debug(self, event: str, **fields: Any) -> None:
        self.lines.append(("debug", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))


APPENDED = RecordsAppended(
    topic="orders",
    partition=0,
    replica=1,
    leader_epoch=0,
    base_offset=0,
    last_offset=9,
    record_count=10,
    size_bytes=500,
    log_end_offset=10,
    as_leader=True,
)


@pytest.fixture
def events_level() -> Iterator[logging.Logger]:
    std = logging.getLogger("hightide.events")
    before = std.level
    yield std
    std.setLevel(before)


def test_state_changes_log_at_info_and_per_request_events_at_debug(events_level: logging.Logger) -> None:
    events_level.setLevel(logging.DEBUG)
    logger = RecordingLogger()
    sink = LogEventSink(logger)
    sink.emit(APPENDED)
    sink.emit(BrokerFenced(broker=2, broker_epoch=7, reason="session_timeout", controller_epoch=3, metadata_offset=9))
    assert [(level, event) for level, event, _ in logger.lines] == [
        ("debug", "RecordsAppended"),
        ("info", "BrokerFenced"),
    ]
    assert logger.lines[1][2] == {
        "broker": 2,
        "broker_epoch": 7,
        "reason": "session_timeout",
        "controller_epoch": 3,
        "metadata_offset": 9,
    }
    assert sink.counts == {"RecordsAppended": 1, "BrokerFenced": 1}


def test_per_request_events_are_not_even_formatted_above_debug(events_level: logging.Logger) -> None:
    events_level.setLevel(logging.INFO)
    logger = RecordingLogger()
    sink = LogEventSink(logger)
    sink.emit(APPENDED)
    sink.emit(BrokerFenced(broker=2, broker_epoch=7, reason="session_timeout", controller_epoch=3, metadata_offset=9))
    assert [(level, event) for level, event, _ in logger.lines] == [("info", "BrokerFenced")]
    assert sink.counts == {"RecordsAppended": 1, "BrokerFenced": 1}
