"""The whole stack of docker-compose.yml (3 NATS nodes, 2 controllers, 3 brokers, the archiver, the canary) under a
broker container's death: nothing acknowledged with acks=all is lost (issue 14 item 6, room: infra).

Method: `docker compose up --wait` of the repository's compose file under a project name of its own, NATS
published on a free host port; from the host, the `hightide` CLI creates a topic (RF=3, min.insync.replicas=2),
runs a verifiable producer (`produce --acks all --print-acks`), and meanwhile `docker kill`s the partition
leader's container. The producer keeps going on the two brokers left; every acknowledged value must then be read
back at its acknowledged offset, once. `compose down -v` removes everything, pass or fail. Every wait is a
condition with a deadline. Runs only in container mode (`make test-containers`): it needs the images and an engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hightide.client.commands import CREDENTIALS_ENV
from hightide.client.local_cluster import free_port
from support.cluster_cli import wait_for
from support.containers import containers_enabled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not containers_enabled(), reason="container mode only (make test-containers)"),
]

REPO = Path(__file__).resolve().parents[2]
AUTH_DIR = REPO / ".hightide-compose" / "nats-auth"  # where docker-compose.yml reads the users and credentials
SERVICE_UID = 10001  # the images' user
COMPOSE_UP_TIMEOUT_S = 300
TOPIC = "compose-verified"
COUNT = 3000
RATE = 200  # 15 s of producing: the kill lands in the middle


class Stack:
    def __init__(self, work: Path) -> None:
        self.project = f"hightide-test-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.work = work
        self.env = {**os.environ, "HIGHTIDE_NATS_PORT": str(self.port), "HIGHTIDE_CLUSTER_ID": "local"}

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = ["docker", "compose", "--project-name", self.project, "--file", str(REPO / "docker-compose.yml")]
        return subprocess.run(
            [*command, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def container(self, service: str) -> str:
        return f"{self.project}-{service}-1"

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cli_command(*args), capture_output=True, text=True, timeout=timeout, check=False, env=self.cli_env
        )

    @property
    def cli_env(self) -> dict[str, str]:
        """The host's commands run as the stack's operator: the admin role's credentials (issue 14's users)."""
        return {**os.environ, CREDENTIALS_ENV: str(AUTH_DIR / "admin.creds")}

    def cli_command(self, *args: str) -> list[str]:
        common = ["--nats-url", self.nats_url, "--cluster-id", "local", "--data-dir", str(self.work)]
        return [sys.executable, "-m", "hightide.client.cli", *args, *common]

    def describe(self) -> dict[str, str]:
        """The topic's one partition line of `topic describe`, as {column: value}; {} before it exists."""
        result = self.cli("topic", "describe", TOPIC, timeout=30)
        for line in result.stdout.splitlines():
            if line.startswith("\t"):
                columns = line.strip("\t").split("\t")
                return dict(c.split(": ", 1) if ": " in c else (c.rstrip(":"), "") for c in columns)
        return {}


def make_users() -> None:
    """The stack's NATS users, as OPERATIONS.md says to make them before the first `up`: `hightide nats-auth`, then
    the files handed to the services' uid (they are 0600)."""
    shutil.rmtree(AUTH_DIR, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "hightide.client.cli",
        "nats-auth",
        "--out",
        str(AUTH_DIR),
        "--cluster-id",
        "local",
        "--broker-ids",
        "1,2,3",
    ]
    made = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    for path in AUTH_DIR.iterdir():
        os.chown(path, SERVICE_UID, SERVICE_UID)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    make_users()
    running = Stack(tmp_path)
    try:
        up = running.compose("up", "--detach", "--wait", "--wait-timeout", str(COMPOSE_UP_TIMEOUT_S), timeout=400)
        assert up.returncode == 0, f"compose up failed:\n{up.stderr[-3000:]}\n{running.compose('ps', '-a').stdout}"
        yield running
    finally:
        logs = running.compose("logs", "--no-color", timeout=60)
        (tmp_path / "compose.log").write_text(logs.stdout + logs.stderr)
        down = running.compose("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=180)
        shutil.rmtree(AUTH_DIR, ignore_errors=True)
        assert down.returncode == 0, down.stderr


def test_killing_the_leaders_broker_container_loses_no_acknowledged_record(stack: Stack) -> None:
    created = stack.cli(
        "topic", "create", TOPIC, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2"
    )
    assert created.returncode == 0, created.stderr
    wait_for(lambda: stack.describe().get("Isr", "").count(",") == 2, 60, "a full ISR")

    command = stack.cli_command("produce", TOPIC, "--acks", "all", "--count", str(COUNT), "--rate", str(RATE))
    command.append("--print-acks")
    with open(stack.work / "producer.err", "w") as stderr:
        producer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=stack.cli_env)
    acks: list[dict[str, Any]] = []

    def read() -> None:
        assert producer.stdout is not None
        acks.extend(json.loads(line) for line in producer.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: len(acks) >= COUNT // 5, 60, "a fifth of the records acknowledged")
        leader = int(stack.describe()["Leader"])
        kill = ["docker", "kill", stack.container(f"broker-{leader}")]
        killed = subprocess.run(kill, capture_output=True, text=True, timeout=60, check=False)
        assert killed.returncode == 0, killed.stderr
        acked_before_kill = len(acks)
        wait_for(lambda: stack.describe().get("Leader") not in (None, "none", str(leader)), 30, "a new leader")
        assert producer.wait(timeout=300) == 0, (stack.work / "producer.err").read_text()[-2000:]
    finally:
        if producer.poll() is None:
            producer.kill()
        reader.join(timeout=30)

    assert len(acks) == COUNT
    acknowledged = [a for a in acks if a["error"] is None]
    assert len(acknowledged) > acked_before_kill, "producing did not go on after the kill"
    consumed = stack.cli(
        "consume",
        TOPIC,
        "--from-beginning",
        "--format",
        "json",
        "--max-messages",
        str(len(acknowledged)),
        "--timeout-ms",
        "60000",
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    values = [r["value"] for r in records]
    assert len(values) == len(set(values)), "a value was delivered twice"
    offset_of = {r["value"]: r["offset"] for r in records}
    lost = [a["value"] for a in acknowledged if offset_of.get(a["value"]) != a["offset"]]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, first {lost[:5]}"
    assert stack.compose("ps", "--status", "running", "--services").stdout.split().count(f"broker-{leader}") == 0
