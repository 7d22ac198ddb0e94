"""`hightide canary` refuses bad arguments with one line and exit 2, before it connects to anything.

Method: the CLI in a process of its own, as a user runs it, pointed at a NATS URL nothing listens on: every case
here must fail on its arguments (exit 2, the reason on one line, no traceback), never on the connection.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

UNREACHABLE = "nats://127.0.0.1:1"


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (["--rate", "0"], "--rate must be positive"),
        (["--rate", "-5"], "--rate must be positive"),
        (["--availability-window-ms", "0"], "--availability-window-ms must be positive"),
        (["--producer-property", "acks=1"], "the canary always produces with acks=all"),
        (["--producer-property", "enable.idempotence=false"], "enable.idempotence=true"),
        (["--producer-property", "no.such.config=1"], "Unknown producer config name: no.such.config"),
        (["--producer-property", "delivery.timeout.ms=soon"], "Invalid value soon"),
        (["--consumer-property", "missing-equals"], "expected key=value"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(arguments: list[str], reason: str) -> None:
    command = [sys.executable, "-m", "hightide.client.cli", "canary", "--nats-url", UNREACHABLE, *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert reason in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_unreachable_cluster_is_one_line_and_exit_1() -> None:
    command = [sys.executable, "-m", "hightide.client.cli", "canary", "--nats-url", UNREACHABLE]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
