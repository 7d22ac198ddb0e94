"""The audit runs on a real Spark cluster: a standalone master and two workers started from the pyspark package.

Method: `spark-class ...deploy.master.Master` and two `...deploy.worker.Worker`s (one core, 1 GiB each) on
127.0.0.1; the test waits until the master's JSON status (`/json/`) lists both workers ALIVE (polled with a
deadline), then runs `hightide history audit --master spark://...` on a damaged simulated history's lake (exit 1,
the finding printed) and the spark-submit job (`hightide/history/jobs/audit.py`) on a clean one (exit 0), and reads
from the master that both applications ran there. The spark-submit run gives the executors a Python that does not
exist: the audit runs no Python on the executors (no UDFs), so they need neither Python nor the hightide packages.
Every process started is stopped in a `finally`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark
import pytest

import hightide.history.jobs.audit as audit_job
from hightide.audit import audit
from support import simulated
from support.lake_history import write_lake

SPARK_HOME = Path(pyspark.__file__).parent
REGISTERED_WITHIN_S = 120
RUN_TIMEOUT_S = 400
STOP_WITHIN_S = 20
POLL_S = 0.5

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def spark_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def master_status(web_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as response:
        status: dict[str, Any] = json.load(response)
        return status


def wait_for(condition: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        time.sleep(POLL_S)  # polling the condition, not waiting for it


def alive_workers(web_port: int) -> int:
    try:
        status = master_status(web_port)
    except OSError:
        return 0  # the master is not listening yet
    return sum(worker["state"] == "ALIVE" for worker in status["workers"])


@contextmanager
def standalone_cluster(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A master and two workers; yields the master URL and the master's web UI port."""
    port, web_port = free_port(), free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    deploy = "org.apache.spark.deploy"
    master = [spark_class, f"{deploy}.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    commands = [[*master, "--webui-port", str(web_port)]]
    for worker in (1, 2):
        commands.append(
            [
                spark_class,
                f"{deploy}.worker.Worker",
                f"spark://127.0.0.1:{port}",
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(free_port()), "--work-dir", str(tmp_path / f"worker-{worker}")),
            ]
        )
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for number, command in enumerate(commands):
            log = (tmp_path / f"spark-{number}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    command, env=spark_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
        wait_for(lambda: alive_workers(web_port) == 2, REGISTERED_WITHIN_S, "two workers registered")
        yield f"spark://127.0.0.1:{port}", web_port
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)  # spark-class execs the JVM in its own new session
        for process in processes:
            try:
                process.wait(timeout=STOP_WITHIN_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_the_audit_runs_on_a_standalone_cluster(tmp_path: Path) -> None:
    damaged = simulated.damaged(simulated.clean_history(3))
    damaged_lake = write_lake(damaged, tmp_path / "damaged-lake")
    clean_lake = write_lake(simulated.clean_history(1), tmp_path / "clean-lake")
    expected = audit(damaged)
    assert expected

    with standalone_cluster(tmp_path) as (master, web_port):
        hightide = str(Path(sys.executable).with_name("hightide"))
        by_cli = subprocess.run(
            [hightide, "history", "audit", "--lake", str(damaged_lake), "--master", master],
            env=spark_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        submitted = subprocess.run(
            [
                str(SPARK_HOME / "bin" / "spark-submit"),
                *("--master", master),
                *("--conf", "spark.pyspark.python=/nonexistent/python"),
                *("--conf", f"spark.pyspark.driver.python={sys.executable}"),
                *(audit_job.__file__, "--lake", str(clean_lake)),
            ],
            env=spark_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        applications = master_status(web_port)["completedapps"]

    assert by_cli.returncode == 1, by_cli.stdout + by_cli.stderr
    for found in expected:
        assert found.detail in by_cli.stdout
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr[-3000:]
    assert "result: clean" in submitted.stdout
    ran = [app for app in applications if app["name"] == "hightide-history"]
    assert len(ran) == 2, applications
    assert all(app["cores"] == 2 for app in ran), ran  # both workers' cores: the executors did the work
