"""Graceful shutdown: SIGTERM and SIGINT (or a programmatic trigger) set one event a service waits on.

Room: libs/runtime. It owns the signal handlers and the shutdown reason. It only records that shutdown was
requested; what to stop, and in which order (Kafka's controlled shutdown moves leadership away first), is the
service's business. It must never exit the process itself.
"""

from __future__ import annotations

import asyncio
import signal

from hightide.runtime.logging import Logger, get_logger

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Shutdown:
    """A one-way latch: once requested it stays requested, and the first reason is the one logged and kept."""

    def __init__(self, log: Logger | None = None) -> None:
        self._event = asyncio.Event()
        self._reason: str | None = None
        self._log = log or get_logger(__name__)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Handle SIGTERM and SIGINT in `loop` by requesting shutdown (instead of KeyboardInterrupt)."""
        for signum in SIGNALS:
            loop.add_signal_handler(signum, self.trigger, signum.name)

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give SIGTERM and SIGINT back to their default handling."""
        for signum in SIGNALS:
            loop.remove_signal_handler(signum)

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def trigger(self, reason: str) -> None:
        """Request shutdown for `reason` (a signal's name, or why the service gives up); later calls are no-ops."""
        if self._event.is_set():
            return
        self._reason = reason
        self._log.info("shutdown requested", reason=reason)
        self._event.set()
        assert self.requested and self._reason == reason

    async def wait(self) -> str:
        """Return once shutdown is requested, with its reason."""
        await self._event.wait()
        assert self._reason is not None
        return self._reason
