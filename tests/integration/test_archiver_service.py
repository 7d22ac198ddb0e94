"""`python -m hightide.archiver --lake DIR` as a process: archives until SIGTERM, and one per lake.

Method: a real nats-server and the service started as `hightide archiver` starts it (its own process, the common
service arguments). The test publishes an EVENTS message as a relay would, waits (polling with a deadline) for the
lake to hold it, starts a second archiver on the same lake and expects one line and exit 1, then SIGTERMs the
first and expects exit 0 with the lake's lock free again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from hightide.lake import LakeLock, count_events
from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.protocol.events import BrokerFenced
from hightide.protocol.subjects import events_message_id, events_subject
from hightide.runtime.event_store import ensure_events_stream
from support.nats import NatsServer

CLUSTER = "svc"
DEADLINE_S = 20.0


def archiver(url: str, lake: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "hightide.archiver",
        "--lake",
        str(lake),
        "--nats-url",
        url,
        "--cluster-id",
        CLUSTER,
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("wb"))


async def publish_one(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await ensure_events_stream(js, CLUSTER)
    emitter = Emitter("broker", 1, "inc")
    event = BrokerFenced(broker=1, broker_epoch=3, reason="session_timeout")
    data = encode_envelopes([Envelope(CLUSTER, emitter, 0, int(time.time() * 1000), 1, event)])
    headers = {"Nats-Msg-Id": events_message_id("broker", 1, "inc", 0)}
    await js.publish(events_subject(CLUSTER, "broker", 1), data, headers=headers)
    await nc.close()


def test_the_archiver_service_archives_until_sigterm_and_refuses_a_second_one_on_its_lake(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats").start()
    lake = tmp_path / "lake"
    first = archiver(server.url, lake, tmp_path / "first.log")
    try:
        asyncio.run(publish_one(server.url))
        end = time.monotonic() + DEADLINE_S
        while count_events(lake) < 1:
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < end, "the archiver did not archive the event in time"
            time.sleep(0.05)  # polling the lake with a deadline
        second = subprocess.run(
            [sys.executable, "-m", "hightide.archiver", "--lake", str(lake), "--nats-url", server.url],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=False,
        )
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"hightide archiver: the lake {lake} is in use by pid {first.pid} (an archiver or an export writes it)"
        ]
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=DEADLINE_S) == 0
        with LakeLock(lake):  # free again
            pass
        # a lake bound to another stream (this one deleted and created anew): one log line, exit 1
        (lake / "_stream.json").write_text('{"stream": "HT_svc_EVENTS", "created": "2020-01-01T00:00:00+00:00"}')
        third = archiver(server.url, lake, tmp_path / "third.log")
        assert third.wait(timeout=DEADLINE_S) == 1
        stderr = (tmp_path / "third.log").read_text()
        assert "Traceback" not in stderr
        (failed,) = [json.loads(line) for line in stderr.splitlines() if '"archiver_failed"' in line]
        assert failed["error"].startswith(f"the lake {lake} archives stream HT_svc_EVENTS created 2020-01-01")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        server.stop()


def test_the_archiver_in_a_session_of_its_own_steps_behind_with_its_autogroup(tmp_path: Path) -> None:
    """As `hightide cluster up` starts it (its own session): niceness 10 for the process and, where the kernel groups
    sessions (autogroups), for its session's group, which is what the CPU is shared by there (issue 15)."""
    server = NatsServer(tmp_path / "nats").start()
    log = tmp_path / "archiver.log"
    command = [sys.executable, "-m", "hightide.archiver", "--lake", str(tmp_path / "lake"), "--nats-url", server.url]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True)
    try:
        end = time.monotonic() + DEADLINE_S
        while '"cpu_priority_lowered"' not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < end, "the archiver did not report its priority in time"
            time.sleep(0.05)  # polling its log with a deadline
        (lowered,) = [json.loads(line) for line in log.read_text().splitlines() if '"cpu_priority_lowered"' in line]
        expected = min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19)  # its default increment on this test's own
        assert os.getpriority(os.PRIO_PROCESS, process.pid) == lowered["niceness"] == expected
        group = Path(f"/proc/{process.pid}/autogroup")
        if group.exists():
            assert group.read_text().strip() == lowered["autogroup"]
            assert lowered["autogroup"].endswith(f" nice {expected}")
        else:  # no autogroups in this kernel: nothing else to lower
            assert lowered["autogroup"].startswith("left as it is")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=DEADLINE_S)
        server.stop()


@pytest.mark.parametrize("value", ["20", "-5", "ten"])
def test_a_niceness_it_cannot_take_is_refused_in_one_line(tmp_path: Path, value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hightide.archiver", "--lake", str(tmp_path / "lake"), f"--nice={value}"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "argument --nice:" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "lake").exists()
