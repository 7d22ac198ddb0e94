"""The operations HTTP endpoint of a service: GET /metrics, /healthz and /readyz, on plain asyncio streams.

Room: libs/runtime. It owns a deliberately tiny HTTP/1.x server: one GET request per connection, no bodies, no
keep-alive, a bounded request line and header block, a read timeout and a bounded number of connections, so a
scraper or a stray client can never hold a service's memory or tasks. It must never serve anything but these
read-only probes; it knows nothing of what makes a service healthy or ready (the service passes callables).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

from prometheus_client import CollectorRegistry

from hightide.runtime.metrics import render

request_line_bytes_max = 8 * 1024
header_bytes_max = 8 * 1024
header_count_max = 100
connections_max = 64
read_timeout_s_default = 5.0
_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = _TEXT
    allow: str | None = None


class _BadRequest(Exception):
    """The request is malformed or over a limit: answer 400 and close."""


class _NoRequest(Exception):
    """The client closed the connection before sending a request line: nothing to answer."""


Route = Callable[[], Response]


class HttpServer:
    """A listening probe server. Every connection's handler is tracked so that close() can end them: in Python
    3.11 `Server.wait_closed` does not wait for (or cancel) handlers still reading from a slow client."""

    def __init__(self, routes: Mapping[str, Route], read_timeout_s: float) -> None:
        assert read_timeout_s > 0, read_timeout_s
        self._routes = dict(routes)
        self._read_timeout_s = read_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[object]] = set()

    async def start(self, host: str, port: int) -> None:
        assert self._server is None, "already started"
        self._server = await asyncio.start_server(self._on_connection, host, port, limit=request_line_bytes_max)

    @property
    def port(self) -> int:
        """The bound port (the one the OS chose when started with port 0)."""
        assert self._server is not None and self._server.sockets, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connection_count(self) -> int:
        """Connections whose request is being read or answered."""
        return len(self._connections)

    async def close(self) -> None:
        """Stop listening and end every open connection."""
        if self._server is None:
            return
        self._server.close()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= connections_max:
            writer.close()
            return
        self._connections.add(task)
        try:
            response = await self._read_and_route(reader)
            if response is not None:
                writer.write(_encode(response))
                await writer.drain()
        except ConnectionError:
            pass  # the client went away; there is no one left to answer
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _read_and_route(self, reader: asyncio.StreamReader) -> Response | None:
        try:
            async with asyncio.timeout(self._read_timeout_s):
                method, target = await _read_request_head(reader)
        except TimeoutError:
            return Response(HTTPStatus.REQUEST_TIMEOUT, b"request timeout")
        except _NoRequest:
            return None
        except _BadRequest as error:
            return Response(HTTPStatus.BAD_REQUEST, f"bad request: {error}".encode())
        if method != "GET":
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"method not allowed", allow="GET")
        route = self._routes.get(target.split("?", 1)[0])
        return route() if route is not None else Response(HTTPStatus.NOT_FOUND, b"not found")


async def serve_http(
    host: str,
    port: int,
    *,
    registry: CollectorRegistry,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
    read_timeout_s: float = read_timeout_s_default,
) -> HttpServer:
    """Listen on `host`:`port` (0 for any free port) and serve /metrics from `registry`, /healthz from `healthy`
    and /readyz from `ready` (200 "ok" when true, 503 otherwise). Pass 127.0.0.1 unless the probes must be
    reachable from elsewhere (a Kubernetes kubelet, a Prometheus scraper)."""
    routes: dict[str, Route] = {
        "/metrics": lambda: _metrics(registry),
        "/healthz": lambda: _probe(healthy, b"not healthy"),
        "/readyz": lambda: _probe(ready, b"not ready"),
    }
    server = HttpServer(routes, read_timeout_s)
    await server.start(host, port)
    return server


def _metrics(registry: CollectorRegistry) -> Response:
    body, content_type = render(registry)
    return Response(HTTPStatus.OK, body, content_type)


def _probe(check: Callable[[], bool], failure: bytes) -> Response:
    return Response(HTTPStatus.OK, b"ok") if check() else Response(HTTPStatus.SERVICE_UNAVAILABLE, failure)


async def _read_request_head(reader: asyncio.StreamReader) -> tuple[str, str]:
    """(method, target) of a request line `METHOD /target HTTP/1.x`, after reading (and ignoring) its headers."""
    request_line = await _read_line(reader, first=True)
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/") or not parts[2].startswith("HTTP/1."):
        raise _BadRequest("malformed request line")
    header_bytes = 0
    for _ in range(header_count_max + 1):
        line = await _read_line(reader, first=False)
        if not line:
            return parts[0], parts[1]
        header_bytes += len(line)
        if header_bytes > header_bytes_max:
            raise _BadRequest("headers too large")
    raise _BadRequest("too many headers")


async def _read_line(reader: asyncio.StreamReader, *, first: bool) -> str:
    try:
        raw = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as error:
        if first and not error.partial:
            raise _NoRequest from None
        raise _BadRequest("incomplete request") from None
    except asyncio.LimitOverrunError:
        raise _BadRequest("line too long") from None
    try:
        return raw.decode("ascii").rstrip("\r\n")
    except UnicodeDecodeError:
        raise _BadRequest("not ASCII") from None


def _encode(response: Response) -> bytes:
    head = [
        f"HTTP/1.1 {response.status.value} {response.status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
    ]
    if response.allow is not None:
        head.append(f"Allow: {response.allow}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + response.body
