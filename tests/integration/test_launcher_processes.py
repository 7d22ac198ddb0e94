"""The local cluster launcher counts a dead process as dead: a zombie (killed, not yet reaped by its parent) and a
reaped pid are not running, so `start-broker` right after a kill -9 starts the broker instead of refusing.

Method: real processes. A zombie is made the way a kill -9 under `cluster up` makes one: the killed process's
parent is another process (here a shell that never reaps), so this test process cannot reap it. Every wait is a
poll of a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hightide.client.local_cluster import LocalCluster, pid_alive, process_state

DEADLINE_S = 10.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling a condition with a deadline


@pytest.fixture
def zombie() -> Iterator[int]:
    """A killed child of a shell that never reaps it (`exec sleep` replaces the shell, so nobody calls wait)."""
    parent = subprocess.Popen(
        ["sh", "-c", "sleep 600 & echo $!; exec sleep 600"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        # Until the shell has become `sleep`, it might still reap the child itself.
        wait_for(lambda: Path(f"/proc/{parent.pid}/comm").read_text().strip() == "sleep", "the shell to exec sleep")
        os.kill(child, signal.SIGKILL)
        wait_for(lambda: process_state(child) == "Z", "the killed child to become a zombie")
        yield child
    finally:
        parent.kill()
        parent.wait()


def test_a_running_process_is_alive() -> None:
    process = subprocess.Popen(["sleep", "600"])
    try:
        assert pid_alive(process.pid)
    finally:
        process.kill()
        process.wait()


def test_a_zombie_is_not_alive(zombie: int) -> None:
    assert process_state(zombie) == "Z"
    assert not pid_alive(zombie)


def test_a_killed_child_of_ours_is_reaped_and_not_alive() -> None:
    process = subprocess.Popen(["sleep", "600"])
    os.kill(process.pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(process.pid), "the killed child to count as dead")
    assert process_state(process.pid) is None, "pid_alive reaped it"


def test_no_such_pid_is_not_alive() -> None:
    assert not pid_alive(0) and not pid_alive(-1)
    assert not pid_alive(2**22 + 12345)  # above Linux's pid_max default, so never a live pid


def test_start_broker_right_after_a_kill_starts_it_instead_of_refusing(tmp_path: Path, zombie: int) -> None:
    """cluster.json names a killed broker whose parent has not reaped it: start-broker must start a new one.
    The new broker has no NATS to reach (the URL is a closed port): it is started and then stopped here."""
    data_dir = tmp_path / "cluster"
    (data_dir / "logs").mkdir(parents=True)
    state = {"nats_url": "nats://127.0.0.1:9", "cluster_id": "zombie", "nats_pid": -1, "controllers": {},
             "brokers": {"1": zombie}, "archiver": None, "config": []}  # fmt: skip
    (data_dir / "cluster.json").write_text(json.dumps(state))
    command = [sys.executable, "-m", "hightide.client.cli", "cluster", "start-broker", "1", "--data-dir", str(data_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    written = LocalCluster(data_dir).read_state()
    assert written is not None
    started = written.brokers["1"]
    assert started != zombie
    os.kill(started, signal.SIGKILL)
    wait_for(lambda: not pid_alive(started), "the started broker to end")


def test_start_broker_refuses_while_the_broker_runs(tmp_path: Path) -> None:
    process = subprocess.Popen(["sleep", "600"])
    try:
        data_dir = tmp_path / "cluster"
        (data_dir / "logs").mkdir(parents=True)
        state = {"nats_url": "nats://127.0.0.1:9", "cluster_id": "live", "nats_pid": -1, "controllers": {},
                 "brokers": {"1": process.pid}, "archiver": None, "config": []}  # fmt: skip
        (data_dir / "cluster.json").write_text(json.dumps(state))
        command = [sys.executable, "-m", "hightide.client.cli", "cluster", "start-broker", "1", "--data-dir",
                   str(data_dir)]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 1
        assert "already running" in result.stderr and "Traceback" not in result.stderr
    finally:
        process.kill()
        process.wait()
