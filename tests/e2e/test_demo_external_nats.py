"""`hightide demo --nats-url URL` runs its clusters on the NATS server the user names, and leaves it as it was.

Method: a real nats-server started by the test (tests/support/nats.py) stands for the user's. The demo's cluster
context (`demo.running_cluster`, which every scenario runs in) is entered with its URL: the cluster it starts
uses that server (no nats-server of its own: `nats_pid` -1), under a cluster id of its own, and gets its brokers
registered and unfenced there. When the block ends, the cluster's processes are stopped, its streams are gone from
the server, and the server still serves. A second test runs the CLI with `--nats-url` pointing at a closed port:
the demo says in one line that it could not reach it, exit 1, no traceback.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from hightide.client import demo
from hightide.client.local_cluster import pid_alive
from support.cluster_cli import hightide
from support.nats import NatsServer, free_port


@pytest.fixture
def users_nats(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "users-nats").start()
    try:
        yield server
    finally:
        server.stop()


async def _stream_names(url: str) -> list[str]:
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        return [info.config.name or "" for info in await nc.jetstream().streams_info()]
    finally:
        await nc.close()


def test_the_demo_runs_its_cluster_on_the_users_nats_and_removes_its_streams(
    users_nats: NatsServer, tmp_path: Path
) -> None:
    progress = demo.Progress(io.StringIO())
    with demo.running_cluster(
        tmp_path / "cluster", progress, brokers=1, config=[], cluster_id="failover", nats_url=users_nats.url
    ) as cluster:
        state = cluster.read_state()
        assert state is not None
        assert state.nats_url == users_nats.url and state.nats_pid == -1
        assert state.cluster_id.startswith("failover-") and state.cluster_id != "failover"
        ours = [name for name in asyncio.run(_stream_names(users_nats.url)) if state.cluster_id in name]
        assert ours, "the cluster keeps its metadata and events on the user's server"
        services = [*state.brokers.values(), *state.controllers.values()]
    assert not any(pid_alive(pid) for pid in services)
    left = [name for name in asyncio.run(_stream_names(users_nats.url)) if state.cluster_id in name]
    assert left == []
    assert users_nats.process is not None and users_nats.process.poll() is None, "the user's server still runs"


def test_an_unreachable_nats_url_is_one_line(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    result = hightide(tmp_path, "demo", "--scenario", "failover", "--nats-url", url, timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("hightide demo:"), result.stderr
