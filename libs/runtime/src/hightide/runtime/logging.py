"""Structured logging for every Hightide process: JSON lines in services, readable console output in the CLI.

Room: libs/runtime. It owns the structlog and stdlib logging configuration. Everything goes through stdlib
logging with structlog's ProcessorFormatter, so third-party records (nats-py logs through stdlib) come out in
the same format: a JSON stream must never be interleaved with plain-text lines. It must never write to stdout,
which belongs to the CLI's data.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import IO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from hightide.runtime.config import ConfigError

Logger = structlog.stdlib.BoundLogger

# Tags the one root handler this module installs, so a second configure_logging replaces it, not adds to it.
_HANDLER_NAME = "hightide.runtime.logging"


def configure_logging(
    *,
    json: bool,
    level: str = "info",
    service: str | None = None,
    service_id: int | None = None,
    stream: IO[str] | None = None,
) -> None:
    """Send all logs to `stream` (stderr by default) as JSON lines (`timestamp`, `level`, `event`, `logger`, the
    bound `service`/`service_id`, and the event's fields) or console lines. Calling it again reconfigures."""
    level_number = _level_number(level)
    shared = _shared_processors(service, service_id)
    structlog.configure(
        # filter_by_level first: a debug call below the level costs a level check, not a processor chain.
        processors=[structlog.stdlib.filter_by_level, *shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a logger fetched at import time must follow a configure_logging that runs later.
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _renderer(json, stream)],
        )
    )
    _replace_root_handler(handler, level_number)


def get_logger(name: str) -> Logger:
    """A logger named `name` (usually `__name__`). Safe before configure_logging: it then logs info and above
    to stderr as console lines, and it follows the configuration once there is one."""
    if not structlog.is_configured():
        # structlog's own default prints to stdout, which is the CLI's data channel.
        structlog.configure(
            processors=[structlog.stdlib.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
            cache_logger_on_first_use=False,
        )
    return structlog.stdlib.get_logger(name)


def reset_logging() -> None:
    """Undo configure_logging (for tests): structlog's defaults, no Hightide handler, the root at WARNING."""
    structlog.reset_defaults()
    _replace_root_handler(None, logging.WARNING)


def _level_number(level: str) -> int:
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None:
        raise ConfigError(f"Unknown log level: {level} (expected debug, info, warning, error or critical)")
    return number


def _shared_processors(service: str | None, service_id: int | None) -> list[Processor]:
    bound = {key: value for key, value in (("service", service), ("service_id", service_id)) if value is not None}
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _BindStatic(bound),
        structlog.processors.StackInfoRenderer(),
    ]


def _renderer(json: bool, stream: IO[str] | None) -> Processor:
    if json:
        return _JsonWithTracebacks()
    target = sys.stderr if stream is None else stream
    return structlog.dev.ConsoleRenderer(colors=target.isatty())


def _replace_root_handler(handler: logging.Handler | None, level_number: int) -> None:
    root = logging.getLogger()
    for old in [old for old in root.handlers if old.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
        old.close()
    if handler is not None:
        root.addHandler(handler)
    root.setLevel(level_number)


class _BindStatic:
    """Adds the process's identity (service, service_id) to every event, structlog's and stdlib's alike."""

    def __init__(self, bound: Mapping[str, object]) -> None:
        self._bound = bound

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        for key, value in self._bound.items():
            event_dict.setdefault(key, value)
        return event_dict


class _JsonWithTracebacks:
    """JSON rendering with exceptions as structured dicts, so a traceback stays inside its one JSON line."""

    def __init__(self) -> None:
        self._tracebacks = structlog.processors.dict_tracebacks
        self._json = structlog.processors.JSONRenderer()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str | bytes:
        rendered = self._json(logger, method_name, self._tracebacks(logger, method_name, event_dict))
        assert isinstance(rendered, str | bytes)
        return rendered
