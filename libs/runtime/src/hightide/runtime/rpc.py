"""Request/reply over NATS with explicit timeouts, and the bounded inbox that lets one task drive a core.

Room: libs/runtime. A service never calls its core from a NATS callback: each callback puts the message in the
service's `Inbox` (bounded: when it is full the callback waits, so NATS' own per-subscription limits push back
on senders), and one task takes messages out in order and handles each to the end before the next. The core
therefore never sees two inputs at once, as in the simulator.

`request` is the only way a service or client asks something of another: every call has a timeout, and a
failure to get an answer is an error code (REQUEST_TIMED_OUT, or the caller's code for "nobody listens"), never
a hang or a bare exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.wire import Response, Wire, decode, encode

R = TypeVar("R", bound=Response)
INBOX_CAPACITY: Final = 1024


class RequestFailed(HightideError):
    """No usable answer: the request timed out, nobody listens on the subject, or the answer was malformed."""


async def request(
    nc: Client,
    subject: str,
    body: Wire,
    response_type: type[R],
    *,
    timeout_s: float,
    unavailable: ErrorCode = ErrorCode.BROKER_NOT_AVAILABLE,
) -> R:
    """Send `body` to `subject` and decode the answer as `response_type`."""
    assert timeout_s > 0
    try:
        reply = await nc.request(subject, encode(body), timeout=timeout_s)
    except NoRespondersError:
        raise RequestFailed(f"no service answers on {subject}", unavailable) from None
    except (TimeoutError, NatsTimeoutError):
        raise RequestFailed(f"no answer on {subject} within {timeout_s:.3f}s", ErrorCode.REQUEST_TIMED_OUT) from None
    except ConnectionClosedError:
        raise RequestFailed("the NATS connection is closed", ErrorCode.NETWORK_EXCEPTION) from None
    try:
        return decode(response_type, reply.data)
    except HightideError as error:
        raise RequestFailed(f"malformed answer on {subject}: {error}", ErrorCode.UNKNOWN_SERVER_ERROR) from None


@dataclass(frozen=True, slots=True)
class Envelope:
    """One input for the driving task: what kind it is, and its payload (a NATS message, a timer tick, …)."""

    kind: str
    payload: object


class Inbox:
    """A bounded FIFO of inputs with exactly one consumer."""

    def __init__(self, capacity: int = INBOX_CAPACITY) -> None:
        assert capacity > 0
        self._queue: asyncio.Queue[Envelope] = asyncio.Queue(maxsize=capacity)

    async def put(self, kind: str, payload: object) -> None:
        await self._queue.put(Envelope(kind, payload))

    def put_nowait(self, kind: str, payload: object) -> bool:
        """For timers: a tick that finds the inbox full is dropped (the next one comes soon)."""
        try:
            self._queue.put_nowait(Envelope(kind, payload))
        except asyncio.QueueFull:
            return False
        return True

    def subscriber(self, kind: str) -> Callable[[Msg], Awaitable[None]]:
        """A NATS subscription callback that queues each message as `kind`."""

        async def on_message(msg: Msg) -> None:
            await self.put(kind, msg)

        return on_message

    async def get(self) -> Envelope:
        return await self._queue.get()

    def qsize(self) -> int:
        return self._queue.qsize()


async def reply(nc: Client, msg: Msg, body: Wire) -> None:
    """Answer a request; a request without a reply subject (a plain publish) gets no answer."""
    if msg.reply:
        await nc.publish(msg.reply, encode(body))
