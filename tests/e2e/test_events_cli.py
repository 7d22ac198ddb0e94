"""`hightide events tail` and `hightide events export` as a user runs them, against a real nats-server.

Method: the tests publish batches of real envelopes (msgpack arrays, as the outbox relay does) to the EVENTS
stream of a cluster id of their own, then run the CLI as a subprocess and compare its stdout with the output
written out by hand: every event once, in stream order. `--follow` is read line by line through a reader thread
with a deadline, and ended with a signal.
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import nats
import pytest

from hightide.lake import LakeLock, read_envelopes
from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.protocol.events import (
    BrokerRegistered,
    ControllerElected,
    Event,
    HighWatermarkAdvanced,
    PartitionChanged,
    RecordsAppended,
    TopicCreated,
)
from hightide.protocol.subjects import events_message_id, events_subject
from hightide.runtime.event_store import ensure_events_stream
from support.cli_process import run_cli
from support.nats import NatsServer, free_port

pytestmark = pytest.mark.slow

LINE_TIMEOUT_S = 15.0
BROKER_1 = Emitter("broker", 1, "3f2a9c1d0b7e4a55a1c2d3e4f5a6b7c8")
CONTROLLER_1 = Emitter("controller", 1, "9e8d7c6b5a4f4e3d8c2b1a0f9e8d7c6b")
WALL_MS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("events-cli") / "nats").start()
    yield server
    server.stop()


def envelope(emitter: Emitter, sequence: int, event: Event, cluster_id: str) -> Envelope:
    return Envelope(cluster_id, emitter, sequence, WALL_MS + sequence, 5_000_000 + sequence, event)


def publish(url: str, cluster_id: str, batches: list[list[Envelope]] | list[bytes]) -> None:
    """Each batch is one message of the stream, with the relay's subject and Nats-Msg-Id (raw bytes: damaged)."""

    async def run() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await ensure_events_stream(js, cluster_id)
        for batch in batches:
            if isinstance(batch, bytes):
                await js.publish(events_subject(cluster_id, "broker", 9), batch)
                continue
            first = batch[0]
            emitter = first.emitter
            message_id = events_message_id(emitter.service, emitter.emitter_id, emitter.incarnation, first.sequence)
            subject = events_subject(cluster_id, emitter.service, emitter.emitter_id)
            await js.publish(subject, encode_envelopes(batch), headers={"Nats-Msg-Id": message_id})
        await nc.close()

    asyncio.run(run())


def the_history(cluster_id: str) -> list[list[Envelope]]:
    """Three batches from two emitters: a broker registers and appends, the controller is elected and creates a
    topic, the broker's high watermark moves."""
    return [
        [
            envelope(BROKER_1, 0, BrokerRegistered(
                broker=1, broker_epoch=7, previous_broker_epoch=-1, fenced=True, controller_epoch=1, metadata_offset=1,
            ), cluster_id),
            envelope(BROKER_1, 1, RecordsAppended(
                topic="demo", partition=0, replica=1, leader_epoch=0, base_offset=0, last_offset=2, record_count=3,
                size_bytes=120, log_end_offset=3, as_leader=True,
            ), cluster_id),
        ],
        [
            envelope(CONTROLLER_1, 0, ControllerElected(
                controller=1, controller_epoch=1, metadata_offset=1, min_insync_replicas=2,
            ), cluster_id),
            envelope(CONTROLLER_1, 1, TopicCreated(
                topic="demo", topic_id="Zx1", partitions=1, replication_factor=1,
                configs=(("cleanup.policy", "delete"), ("x", "a b")), controller_epoch=1, metadata_offset=2,
            ), cluster_id),
            envelope(CONTROLLER_1, 2, PartitionChanged(
                topic="demo", partition=0, replicas=(1,), isr=(1,), elr=(), last_known_elr=(), leader=1,
                leader_epoch=0, partition_epoch=0, reason="created", controller_epoch=1, metadata_offset=2,
            ), cluster_id),
        ],
        [
            envelope(BROKER_1, 2, HighWatermarkAdvanced(
                topic="demo", partition=0, replica=1, leader_epoch=0, previous=0, high_watermark=3,
            ), cluster_id),
        ],
    ]  # fmt: skip


TEXT = """\
2023-11-14T22:13:20.123Z broker-1 3f2a9c1d #0 BrokerRegistered broker=1 broker_epoch=7 previous_broker_epoch=-1 fenced=true controller_epoch=1 metadata_offset=1
2023-11-14T22:13:20.124Z broker-1 3f2a9c1d #1 RecordsAppended topic=demo partition=0 replica=1 leader_epoch=0 base_offset=0 last_offset=2 record_count=3 size_bytes=120 log_end_offset=3 as_leader=true
2023-11-14T22:13:20.123Z controller-1 9e8d7c6b #0 ControllerElected controller=1 controller_epoch=1 metadata_offset=1 min_insync_replicas=2
2023-11-14T22:13:20.124Z controller-1 9e8d7c6b #1 TopicCreated topic=demo topic_id=Zx1 partitions=1 replication_factor=1 configs=[["cleanup.policy","delete"],["x","a b"]] controller_epoch=1 metadata_offset=2
2023-11-14T22:13:20.125Z controller-1 9e8d7c6b #2 PartitionChanged topic=demo partition=0 replicas=[1] isr=[1] elr=[] last_known_elr=[] leader=1 leader_epoch=0 partition_epoch=0 reason=created controller_epoch=1 metadata_offset=2
2023-11-14T22:13:20.125Z broker-1 3f2a9c1d #2 HighWatermarkAdvanced topic=demo partition=0 replica=1 leader_epoch=0 previous=0 high_watermark=3
"""  # noqa: E501 (the lines are what the command prints)


def hightide(url: str, cluster_id: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli([*args, "--nats-url", url, "--cluster-id", cluster_id], timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def history(nats_server: NatsServer) -> str:
    publish(nats_server.url, "tail", the_history("tail"))
    return "tail"


def test_tail_prints_every_stored_event_once_in_stream_order_as_readable_lines(
    nats_server: NatsServer, history: str, tmp_path: Path
) -> None:
    result = hightide(nats_server.url, history, "events", "tail", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == TEXT


def test_tail_json_prints_one_envelope_per_line_with_its_stream_sequence(
    nats_server: NatsServer, history: str, tmp_path: Path
) -> None:
    result = hightide(nats_server.url, history, "events", "tail", "--format", "json", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["service"], line["sequence"], line["stream_sequence"]) for line in lines] == [
        ("broker", 0, 1), ("broker", 1, 1), ("controller", 0, 2), ("controller", 1, 2), ("controller", 2, 2),
        ("broker", 2, 3),
    ]  # fmt: skip
    assert lines[3] == {
        "cluster_id": "tail",
        "service": "controller",
        "emitter_id": 1,
        "incarnation": CONTROLLER_1.incarnation,
        "sequence": 1,
        "wall_ms": WALL_MS + 1,
        "mono_ns": 5_000_001,
        "type": "TopicCreated",
        "version": 2,
        "stream_sequence": 2,
        "event": {
            "topic": "demo",
            "topic_id": "Zx1",
            "partitions": 1,
            "replication_factor": 1,
            "configs": [["cleanup.policy", "delete"], ["x", "a b"]],
            "controller_epoch": 1,
            "metadata_offset": 2,
        },
    }
    assert list(lines[0]) == [
        "cluster_id", "service", "emitter_id", "incarnation", "sequence", "wall_ms", "mono_ns", "type", "version",
        "stream_sequence", "event",
    ]  # fmt: skip
    assert [line["type"] for line in lines] == [line.split()[4] for line in TEXT.splitlines()]


def test_tail_type_keeps_only_the_named_types(nats_server: NatsServer, history: str, tmp_path: Path) -> None:
    result = hightide(
        nats_server.url, history, "events", "tail", "--type", "HighWatermarkAdvanced", "--type", "ControllerElected",
        cwd=tmp_path,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    expected = [line for line in TEXT.splitlines() if line.split()[4] in ("HighWatermarkAdvanced", "ControllerElected")]
    assert result.stdout.splitlines() == expected


def test_an_unknown_type_is_a_usage_error_naming_the_known_types(
    nats_server: NatsServer, history: str, tmp_path: Path
) -> None:
    result = hightide(nats_server.url, history, "events", "tail", "--type", "RecordAppended", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "unknown event type RecordAppended" in result.stderr
    assert "RecordsAppended" in result.stderr and "LeaderElected" in result.stderr


def test_without_a_stream_tail_prints_nothing_and_says_so_on_stderr(nats_server: NatsServer, tmp_path: Path) -> None:
    result = hightide(nats_server.url, "nostream", "events", "tail", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == "hightide events tail: no events yet (the stream HT_nostream_EVENTS does not exist)\n"


def test_when_nats_is_unreachable_tail_fails_with_one_line(tmp_path: Path) -> None:
    result = hightide(f"nats://127.0.0.1:{free_port()}", "local", "events", "tail", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("hightide events tail: NATS is unavailable at nats://127.0.0.1:")


def test_a_message_that_does_not_decode_is_named_on_stderr_and_the_rest_is_printed(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    batches = the_history("damaged")
    damaged = [encode_envelopes(batches[0]), b"\xc1 not msgpack", encode_envelopes(batches[2])]
    publish(nats_server.url, "damaged", damaged)
    result = hightide(nats_server.url, "damaged", "events", "tail", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [TEXT.splitlines()[i] for i in (0, 1, 5)]
    assert result.stderr.startswith("hightide events tail: warning: stream sequence 2 does not decode: ")
    assert len(result.stderr.splitlines()) == 1


def test_tail_reads_a_long_stream_whole(nats_server: NatsServer, tmp_path: Path) -> None:
    """3,000 messages of 20 events: past the ordered consumer's flow-control windows, every event once, in order."""
    messages, per_message = 3000, 20
    batches = [
        [
            envelope(BROKER_1, m * per_message + i, HighWatermarkAdvanced(
                topic="long", partition=m % 7, replica=1, leader_epoch=0, previous=m, high_watermark=m + 1,
            ), "long")
            for i in range(per_message)
        ]
        for m in range(messages)
    ]  # fmt: skip
    publish(nats_server.url, "long", batches)
    result = hightide(nats_server.url, "long", "events", "tail", "--format", "json", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["sequence"] for line in lines] == list(range(messages * per_message))
    assert [line["stream_sequence"] for line in lines[::per_message]] == list(range(1, messages + 1))


class LineReader:
    """A child's stdout read line by line on a thread, so the test can wait for a line with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_lines(self, count: int) -> list[str]:
        deadline = time.monotonic() + LINE_TIMEOUT_S
        got: list[str] = []
        while len(got) < count:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, f"stdout ended after {got}"
            got.append(line)
        return got


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_follow_prints_events_published_after_it_started_until_interrupted(
    nats_server: NatsServer, tmp_path: Path, signum: signal.Signals
) -> None:
    cluster_id = f"follow{signum.value}"
    batches = the_history(cluster_id)
    publish(nats_server.url, cluster_id, batches[:1])
    command = [
        sys.executable, "-m", "hightide.client.cli", "events", "tail", "--follow", "--format", "json",
        "--nats-url", nats_server.url, "--cluster-id", cluster_id,
    ]  # fmt: skip
    tail = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert tail.stdout is not None
        reader = LineReader(tail.stdout)
        assert [json.loads(line)["type"] for line in reader.next_lines(2)] == ["BrokerRegistered", "RecordsAppended"]
        publish(nats_server.url, cluster_id, batches[1:])
        later = [json.loads(line) for line in reader.next_lines(4)]
        assert [(e["type"], e["stream_sequence"]) for e in later] == [
            ("ControllerElected", 2), ("TopicCreated", 2), ("PartitionChanged", 2), ("HighWatermarkAdvanced", 3),
        ]  # fmt: skip
        tail.send_signal(signum)
        assert tail.wait(timeout=LINE_TIMEOUT_S) == 0
        assert reader.next_lines(0) == [] and reader.lines.get(timeout=LINE_TIMEOUT_S) is None  # nothing more
        assert tail.stderr is not None and tail.stderr.read() == ""
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()


def test_follow_carries_on_after_nats_restarts_and_prints_no_event_twice(tmp_path: Path) -> None:
    """Given a follower that has printed the first batch, when nats-server stops and starts again (same port, same
    store), then the events published afterwards reach it once: the ordered consumer was recreated from the next
    stream sequence."""
    server = NatsServer(tmp_path / "nats").start()
    batches = the_history("restart")
    try:
        publish(server.url, "restart", batches[:1])
        command = [
            sys.executable, "-m", "hightide.client.cli", "events", "tail", "--follow", "--format", "json",
            "--nats-url", server.url, "--cluster-id", "restart",
        ]  # fmt: skip
        tail = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        try:
            assert tail.stdout is not None
            reader = LineReader(tail.stdout)
            assert [json.loads(line)["stream_sequence"] for line in reader.next_lines(2)] == [1, 1]
            server.stop()
            server.start()
            publish(server.url, "restart", batches[1:])
            later = [json.loads(line) for line in reader.next_lines(4)]
            assert [(e["type"], e["stream_sequence"]) for e in later] == [
                ("ControllerElected", 2), ("TopicCreated", 2), ("PartitionChanged", 2), ("HighWatermarkAdvanced", 3),
            ]  # fmt: skip
            tail.send_signal(signal.SIGINT)
            assert tail.wait(timeout=LINE_TIMEOUT_S) == 0
            assert reader.lines.get(timeout=LINE_TIMEOUT_S) is None  # nothing more: no event twice
            assert tail.stderr is not None and "Traceback" not in tail.stderr.read()
        finally:
            if tail.poll() is None:
                tail.kill()
                tail.wait()
    finally:
        server.stop()


def test_export_archives_the_stream_once_and_a_second_export_writes_nothing(
    nats_server: NatsServer, history: str, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    first = hightide(nats_server.url, history, "events", "export", "--lake", str(lake), cwd=tmp_path)
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout.startswith("exported 6 events in 3 messages to ")
    assert first.stdout.endswith(f" files in {lake} (0 messages already archived, 0 quarantined)\n")
    archived = read_envelopes(lake)
    published = [(seq, e) for seq, batch in enumerate(the_history(history), start=1) for e in batch]
    assert sorted(archived, key=lambda row: (row[0], row[1].emitter.service, row[1].sequence)) == published

    again = hightide(nats_server.url, history, "events", "export", "--lake", str(lake), cwd=tmp_path)
    assert (again.returncode, again.stderr) == (0, "")
    assert (
        again.stdout
        == f"exported 0 events in 0 messages to 0 files in {lake} (3 messages already archived, 0 quarantined)\n"
    )
    assert read_envelopes(lake) == archived


def test_export_refuses_a_lake_another_writer_holds_with_one_line(
    nats_server: NatsServer, history: str, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    with LakeLock(lake):  # as a running archiver holds it
        result = hightide(nats_server.url, history, "events", "export", "--lake", str(lake), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"hightide events export: the lake {lake} is in use by ")


def test_hightide_archiver_is_the_archiver_service_process(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hightide.client.cli", "archiver", "--help"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("usage: hightide archiver") and "--lake" in result.stdout
