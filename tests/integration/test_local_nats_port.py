"""A local cluster's nats-server is its own: when the port it was given is taken before it binds (two clusters
starting at once both find 4222 free), the cluster does not take the other process's server for its own.

Method: real nats-servers. The race is made certain rather than hoped for: `free_port` is made to hand out, as the
free port it found, a port another nats-server (no users: it would admit anyone) already holds. The cluster's server
must lose the bind, be started again on a port chosen afresh, and answer with the cluster's own credentials.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hightide.client import local_cluster
from hightide.client.local_cluster import ClusterError, LocalCluster, pid_alive, stop_process
from hightide.protocol.permissions import Role
from hightide.runtime.nats import NatsSettings, connect
from hightide.runtime.nats_auth import CREDENTIALS_DIR, ensure_credentials, server_authorization
from support.nats import NatsServer


@pytest.fixture
def foreign(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "foreign").start()
    try:
        yield server
    finally:
        server.stop()


def _taken_first(monkeypatch: pytest.MonkeyPatch, port: int, times: int) -> None:
    """`free_port` answers `port` (taken) for its first `times` calls, as if another process bound it since."""
    real = local_cluster.free_port
    calls = {"n": 0}

    def free_port(preferred: int | None = None) -> int:
        calls["n"] += 1
        return port if calls["n"] <= times else real(preferred)

    monkeypatch.setattr(local_cluster, "free_port", free_port)


def _start(data_dir: Path) -> tuple[str, dict[str, int], Path]:
    cluster = LocalCluster(data_dir)
    (data_dir / "logs").mkdir(parents=True)
    paths = ensure_credentials(data_dir / CREDENTIALS_DIR, [1])
    authorization = server_authorization("port-race", paths, no_auth_user=Role.CLIENT)
    url, pids = cluster._start_nats(1, authorization, paths[Role.ADMIN])
    return url, pids, paths[Role.ADMIN]


async def _admin_connects(url: str, credentials: Path) -> bool:
    nc = await connect(NatsSettings(url=url, credentials_file=credentials, max_reconnect_attempts=0))
    await nc.close()
    return True


def test_a_port_taken_before_the_bind_is_chosen_afresh_not_shared(
    tmp_path: Path, foreign: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _taken_first(monkeypatch, foreign.port, times=1)
    url, pids, admin = _start(tmp_path / "cluster")
    try:
        assert url != foreign.url, "the cluster took another process's nats-server for its own"
        assert pid_alive(pids["1"])
        assert asyncio.run(_admin_connects(url, admin)), "the cluster's own users must be admitted"
        log = (tmp_path / "cluster" / "logs" / "nats-server.log").read_text()
        assert "address already in use" in log and log.count("Server is ready") == 1
    finally:
        for pid in pids.values():
            stop_process(pid, hard=True)


def test_a_port_taken_every_time_fails_clearly_and_leaves_nothing_running(
    tmp_path: Path, foreign: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _taken_first(monkeypatch, foreign.port, times=local_cluster.NATS_START_ATTEMPTS)
    with pytest.raises(ClusterError, match="port was taken by another process"):
        _start(tmp_path / "cluster")
    log = (tmp_path / "cluster" / "logs" / "nats-server.log").read_text()
    assert log.count("address already in use") == local_cluster.NATS_START_ATTEMPTS
    assert "Server is ready" not in log
    conf = str(tmp_path / "cluster" / "nats.conf")
    assert not [pid for pid in _pids() if conf in _cmdline(pid)], "a nats-server of the failed start still runs"


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""  # gone meanwhile
