"""The log event sink: changes of state reach the log at info, per-request events only at debug."""

from __future__ import annotations

from structlog.testing import capture_logs

from hightide.protocol.events import BrokerFenced, RecordsAppended
from hightide.runtime.events import LogEventSink


def test_state_changes_log_at_info_and_per_request_events_at_debug() -> None:
    sink = LogEventSink()
    appended = RecordsAppended(
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
    with capture_logs() as logs:
        sink.emit(appended)
        sink.emit(BrokerFenced(broker=2, broker_epoch=7, reason="session_timeout"))
    assert [(line["event"], line["log_level"]) for line in logs] == [
        ("RecordsAppended", "debug"),
        ("BrokerFenced", "info"),
    ]
    assert logs[1]["broker"] == 2 and logs[1]["reason"] == "session_timeout"
    assert sink.counts == {"RecordsAppended": 1, "BrokerFenced": 1}
