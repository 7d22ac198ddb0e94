"""Graceful shutdown: SIGTERM/SIGINT and programmatic triggers set one event, the first reason wins.

Method: install the handlers in a running loop, send the signal to this very process with os.kill, and await
the event with a timeout (the loop wakes on the signal; nothing sleeps). The handlers are uninstalled before the
loop ends so a later test's SIGINT behaves normally.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from collections.abc import Iterator

import pytest

from hightide.runtime.logging import configure_logging, reset_logging
from hightide.runtime.shutdown import Shutdown


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    yield
    reset_logging()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_requests_shutdown(signum: signal.Signals) -> None:
    async def main() -> tuple[bool, str, bool]:
        shutdown = Shutdown()
        loop = asyncio.get_running_loop()
        shutdown.install(loop)
        try:
            before = shutdown.requested
            os.kill(os.getpid(), signum)
            reason = await asyncio.wait_for(shutdown.wait(), timeout=5)
            return before, reason, shutdown.requested
        finally:
            shutdown.uninstall(loop)

    assert asyncio.run(main()) == (False, signum.name, True)


def test_trigger_requests_shutdown_and_the_first_reason_is_kept_and_logged_once() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)

    async def main() -> Shutdown:
        shutdown = Shutdown()
        waiter = asyncio.create_task(shutdown.wait())
        shutdown.trigger("lost the controller lease")
        shutdown.trigger("SIGTERM")
        assert await asyncio.wait_for(waiter, timeout=5) == "lost the controller lease"
        return shutdown

    shutdown = asyncio.run(main())
    assert (shutdown.requested, shutdown.reason) == (True, "lost the controller lease")
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e["reason"]) for e in events] == [("shutdown requested", "lost the controller lease")]


def test_wait_returns_at_once_when_already_requested() -> None:
    async def main() -> str:
        shutdown = Shutdown()
        shutdown.trigger("test")
        return await asyncio.wait_for(shutdown.wait(), timeout=5)

    assert asyncio.run(main()) == "test"
