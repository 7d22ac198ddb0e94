"""The `hightide` command against a local cluster, as the e2e tests drive it: run it, poll for a condition with a
deadline, and read `cluster status --json` and `topic describe` back."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hightide.client.local_cluster import LocalCluster
from support.cli_process import run_cli


def hightide(
    data_dir: Path, *args: str, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`hightide <args> --data-dir <data_dir>` in a process of its own, as a user types it (support/cli_process.py:
    forked from a process that has the CLI imported)."""
    return run_cli([*args, "--data-dir", str(data_dir)], timeout=timeout, stdin=stdin)


def wait_for(condition: Callable[[], Any], deadline_s: float, what: str) -> Any:
    """The condition's first truthy value, polled until the deadline (then the test fails, saying what)."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling a condition with a deadline


def status(cluster: LocalCluster) -> dict[str, Any]:
    """`cluster status --json`, or {} while no controller answers."""
    result = hightide(cluster.data_dir, "cluster", "status", "--json", timeout=30)
    if result.returncode != 0:
        return {}
    body: dict[str, Any] = json.loads(result.stdout)
    return body


def broker_states(cluster: LocalCluster) -> dict[int, dict[str, Any]]:
    return {int(b): s for b, s in status(cluster).get("broker_states", {}).items()}


def active_brokers(cluster: LocalCluster) -> list[int]:
    """The brokers registered and unfenced."""
    return sorted(b for b, s in broker_states(cluster).items() if not s["fenced"])


def describe(cluster: LocalCluster, topic: str) -> list[dict[str, str]]:
    """`topic describe`'s partition lines, each as {column: value} (an empty list column is '')."""
    result = hightide(cluster.data_dir, "topic", "describe", topic, timeout=30)
    partitions = []
    for line in result.stdout.splitlines():
        if line.startswith("\t"):
            columns = line.strip("\t").split("\t")
            partitions.append(dict(c.split(": ", 1) if ": " in c else (c.rstrip(":"), "") for c in columns))
    return partitions


class Producer:
    """`hightide produce --count --rate --print-acks` in the background, its ack lines collected as they come.

    Its stdout is read by a thread as it writes: a pipe nobody reads holds 64 KiB (~850 ack lines), and a producer
    blocked on it stops producing, so a fault injected after that would hit an idle partition."""

    def __init__(self, cluster: LocalCluster, topic: str, count: int, rate: int, *extra: str) -> None:
        command = [sys.executable, "-m", "hightide.client.cli", "produce", topic, "--count", str(count)]
        command += ["--rate", str(rate), "--print-acks", "--data-dir", str(cluster.data_dir), *extra]
        self.stderr = cluster.data_dir / "logs" / f"producer-{topic}.err"
        with open(self.stderr, "w") as stderr:  # a file, not a pipe, for the same reason
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.acks: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.acks.append(json.loads(line))

    def finish(self, timeout_s: float) -> int:
        """Wait for the producer to exit (its exit code) and for its last ack lines to be read."""
        self.process.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        return self.process.returncode
