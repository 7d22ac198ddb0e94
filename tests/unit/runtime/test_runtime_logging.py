"""Structured logging: JSON lines with the process's identity, console lines for people, stdlib logs alike.

Method: configure logging into a StringIO, log through structlog and through plain stdlib logging (as nats-py
does), and parse what came out. Every test configures afresh, which is also the idempotence check.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from hightide.runtime.config import ConfigError
from hightide.runtime.logging import configure_logging, get_logger, reset_logging


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    reset_logging()
    yield
    reset_logging()


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_timestamp_level_event_service_and_fields() -> None:
    stream = io.StringIO()
    configure_logging(json=True, service="broker", service_id=2, stream=stream)
    get_logger("hightide.test").info("isr shrunk", topic="orders", partition=3)
    (line,) = _lines(stream)
    assert line["event"] == "isr shrunk"
    assert line["level"] == "info"
    assert (line["service"], line["service_id"], line["logger"]) == ("broker", 2, "hightide.test")
    assert (line["topic"], line["partition"]) == ("orders", 3)
    assert isinstance(line["timestamp"], str) and line["timestamp"].endswith("Z")


def test_stdlib_records_come_out_as_json_too() -> None:
    stream = io.StringIO()
    configure_logging(json=True, service="controller", stream=stream)
    logging.getLogger("nats.aio.client").warning("nats: encountered error")
    (line,) = _lines(stream)
    assert (line["event"], line["level"], line["service"]) == ("nats: encountered error", "warning", "controller")


def test_an_exception_stays_inside_its_json_line() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    try:
        raise ValueError("bad batch")
    except ValueError:
        get_logger("t").exception("append failed")
    (line,) = _lines(stream)
    assert line["event"] == "append failed"
    assert "bad batch" in json.dumps(line["exception"])


def test_configuring_twice_replaces_the_output_and_the_level() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(json=True, stream=first)
    configure_logging(json=True, level="warning", stream=second)
    log = get_logger("t")
    log.info("hidden")
    log.warning("shown")
    assert first.getvalue() == ""
    assert [line["event"] for line in _lines(second)] == ["shown"]
    handlers = [h for h in logging.getLogger().handlers if h.get_name() == "hightide.runtime.logging"]
    assert len(handlers) == 1


def test_a_logger_fetched_before_configure_follows_the_later_configuration() -> None:
    log = get_logger("early")
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    log.info("after configure")
    assert [line["event"] for line in _lines(stream)] == ["after configure"]


def test_console_rendering_is_readable_text() -> None:
    stream = io.StringIO()
    configure_logging(json=False, level="DEBUG", stream=stream)
    get_logger("t").debug("fetching", offset=7)
    text = stream.getvalue()
    assert "fetching" in text and "offset=7" in text
    assert not text.startswith("{")


def test_an_unknown_level_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Unknown log level: loud"):
        configure_logging(json=True, level="loud")


def test_logging_before_configure_goes_to_stderr_not_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    get_logger("library").info("before configure", partition=1)
    get_logger("library").debug("below the default level")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "before configure" in captured.err and "partition=1" in captured.err
    assert "below the default level" not in captured.err
