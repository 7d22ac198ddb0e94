"""The probe HTTP server over a real socket: /metrics, /healthz, /readyz, and what it refuses.

Method: start the server on 127.0.0.1 port 0 inside `asyncio.run`, speak raw HTTP/1.1 through
asyncio.open_connection, and read the response until the server closes the connection (it never keeps one
alive). The timeout test waits for the server's own (shortened) read timeout, which is the behaviour under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from hightide.runtime.http import HttpServer, header_bytes_max, request_line_bytes_max, serve_http
from hightide.runtime.metrics import BrokerMetrics

Scenario = Callable[[HttpServer], Awaitable[None]]


class Probes:
    """Switchable health and readiness, as a service's state would be."""

    def __init__(self) -> None:
        self.healthy = True
        self.ready = False


def _run(scenario: Scenario, probes: Probes | None = None, read_timeout_s: float = 5.0) -> None:
    probes = probes or Probes()
    metrics = BrokerMetrics()
    metrics.leader_count.set(3)

    async def main() -> None:
        server = await serve_http(
            "127.0.0.1",
            0,
            registry=metrics.registry,
            healthy=lambda: probes.healthy,
            ready=lambda: probes.ready,
            read_timeout_s=read_timeout_s,
        )
        try:
            await asyncio.wait_for(scenario(server), timeout=10)
        finally:
            await server.close()

    asyncio.run(main())


async def _exchange(port: int, request: bytes, *, half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        if half_close:
            writer.write_eof()
        await writer.drain()
        response = await reader.read()  # to EOF: the server closes after every response
    finally:
        writer.close()
        await writer.wait_closed()
    return _parse(response)


def _parse(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("ascii").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    assert int(headers["content-length"]) == len(body)
    return int(status_line.split(" ")[1]), headers, body


async def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    return await _exchange(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n".encode())


def test_metrics_serves_the_registry_in_prometheus_text() -> None:
    async def scenario(server: HttpServer) -> None:
        status, headers, body = await _get(server.port, "/metrics")
        assert status == 200
        assert headers["content-type"].startswith("text/plain; version=")
        assert b"kafka_server_replicamanager_leadercount 3.0" in body

    _run(scenario)


def test_a_query_string_does_not_change_the_route() -> None:
    async def scenario(server: HttpServer) -> None:
        status, _, _ = await _get(server.port, "/metrics?name[]=x")
        assert status == 200

    _run(scenario)


def test_healthz_and_readyz_follow_their_callables() -> None:
    probes = Probes()

    async def scenario(server: HttpServer) -> None:
        assert await _get(server.port, "/healthz") == (200, _headers(b"ok"), b"ok")
        assert (await _get(server.port, "/readyz"))[::2] == (503, b"not ready")
        probes.ready, probes.healthy = True, False
        assert (await _get(server.port, "/readyz"))[::2] == (200, b"ok")
        assert (await _get(server.port, "/healthz"))[::2] == (503, b"not healthy")

    _run(scenario, probes)


def _headers(body: bytes) -> dict[str, str]:
    return {"content-type": "text/plain; charset=utf-8", "content-length": str(len(body)), "connection": "close"}


def test_an_unknown_path_is_404() -> None:
    async def scenario(server: HttpServer) -> None:
        assert (await _get(server.port, "/admin"))[0] == 404

    _run(scenario)


def test_a_method_other_than_get_is_405_with_allow() -> None:
    async def scenario(server: HttpServer) -> None:
        for method in (b"POST", b"HEAD", b"DELETE"):
            status, headers, _ = await _exchange(server.port, method + b" /metrics HTTP/1.1\r\n\r\n")
            assert (status, headers["allow"]) == (405, "GET")

    _run(scenario)


def test_a_malformed_request_line_is_400() -> None:
    async def scenario(server: HttpServer) -> None:
        for request_line in (b"GET /metrics", b"GET metrics HTTP/1.1", b"GET / SPDY/3", b"GET  / HTTP/1.1", b"\xff"):
            status, _, body = await _exchange(server.port, request_line + b"\r\n\r\n")
            assert status == 400, request_line
            assert body.startswith(b"bad request")

    _run(scenario)


def test_a_request_line_over_the_limit_is_400() -> None:
    async def scenario(server: HttpServer) -> None:
        request = b"GET /" + b"a" * request_line_bytes_max + b" HTTP/1.1\r\n\r\n"
        status, _, body = await _exchange(server.port, request)
        assert (status, body) == (400, b"bad request: line too long")

    _run(scenario)


def test_headers_over_the_limit_are_400() -> None:
    async def scenario(server: HttpServer) -> None:
        header = b"X-Filler: " + b"f" * 1000 + b"\r\n"
        request = b"GET /healthz HTTP/1.1\r\n" + header * (header_bytes_max // len(header) + 1) + b"\r\n"
        status, _, body = await _exchange(server.port, request)
        assert (status, body) == (400, b"bad request: headers too large")

    _run(scenario)


def test_too_many_headers_are_400() -> None:
    async def scenario(server: HttpServer) -> None:
        request = b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"
        status, _, body = await _exchange(server.port, request)
        assert (status, body) == (400, b"bad request: too many headers")

    _run(scenario)


def test_a_client_that_closes_mid_request_gets_400_and_one_that_sends_nothing_gets_nothing() -> None:
    async def scenario(server: HttpServer) -> None:
        status, _, body = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x", half_close=True)
        assert (status, body) == (400, b"bad request: incomplete request")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write_eof()
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()

    _run(scenario)


def test_a_slow_client_gets_408_after_the_read_timeout() -> None:
    async def scenario(server: HttpServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the blank line that ends the headers
        await writer.drain()
        status, _, body = _parse(await reader.read())
        assert (status, body) == (408, b"request timeout")
        writer.close()
        await writer.wait_closed()

    _run(scenario, read_timeout_s=0.2)


def test_close_ends_connections_that_are_still_reading() -> None:
    async def main() -> None:
        server = await serve_http(
            "127.0.0.1", 0, registry=BrokerMetrics().registry, healthy=lambda: True, ready=lambda: True
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        await writer.drain()
        # Connections are accepted and their handlers started in order: once a later one is answered, the
        # first one's handler is waiting for the rest of its headers.
        assert (await _get(server.port, "/healthz"))[0] == 200
        assert server.connection_count == 1
        await asyncio.wait_for(server.close(), timeout=5)
        assert server.connection_count == 0
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""
        writer.close()
        await writer.wait_closed()

    asyncio.run(main())


def test_port_zero_binds_a_free_port_that_serves() -> None:
    async def scenario(server: HttpServer) -> None:
        assert server.port > 0
        assert (await _get(server.port, "/healthz"))[0] == 200

    _run(scenario)
