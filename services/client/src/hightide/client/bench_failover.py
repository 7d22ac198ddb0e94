"""The longest stall an acks=all producer sees after kill -9 of its partition's leader, beside the time the
controller took to elect the new leader.

Room: services/client (`hightide bench --workload failover`, and the e2e test that holds the goal). Issue 11's
goal: the stall is at most the election time + 1 s. The election time is what the cluster costs (for a dead
broker, mostly `broker.session.timeout.ms`, 9 s by default as `make run` runs it); the second is what the
client may add: noticing that its in-flight requests will never be answered, and sending them again to the new
leader.

| figure              | how                                                                                     |
| ------------------- | --------------------------------------------------------------------------------------- |
| election            | kill -9 of the leader to the first metadata answer naming another leader, polled every  |
|                     | `ELECTION_POLL_S` on a connection of its own (so the poll cannot tell the producer)     |
| longest stall       | the longest gap between consecutive acknowledgements of a producer sending one record   |
|                     | every 1/`RATE_PER_S` s to a one-partition topic (RF=3, min.insync.replicas=2), Kafka's   |
|                     | defaults otherwise (acks=all, idempotence, request.timeout.ms 30 s, retries): it holds  |
|                     | the time from the kill to the first acknowledgement after it                             |

Numbers are returned and printed, never asserted here; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from hightide.client.bench_cluster import BenchCluster, create_topic
from hightide.client.connection import METADATA_TRY_TIMEOUT_S, ClusterConnection
from hightide.client.local_cluster import LocalCluster
from hightide.client.producer import ProduceFailed, Producer, ProducerConfig, RecordFuture
from hightide.protocol.permissions import Role
from hightide.runtime.rpc import RequestFailed

RATE_PER_S: Final = 500
BEFORE_S: Final = 1.0  # producing before the kill
AFTER_S: Final = 1.5  # producing after the new leader is in the metadata
ELECTION_POLL_S: Final = 0.02
ELECTION_DEADLINE_S: Final = 120.0
DRAIN_DEADLINE_S: Final = 180.0
GOAL_SLACK_S: Final = 1.0  # the goal: stall <= election + this


@dataclass(frozen=True, slots=True)
class Ack:
    value: bytes
    offset: int
    at: float  # monotonic seconds


@dataclass(frozen=True)
class FailoverRun:
    killed_broker: int
    new_leader: int
    election_s: float
    stall_s: float
    kill_to_first_ack_s: float
    sent: int
    acknowledged: tuple[Ack, ...]
    failed: tuple[tuple[bytes, str], ...]  # value, Kafka error name

    @property
    def goal_s(self) -> float:
        return self.election_s + GOAL_SLACK_S

    @property
    def goal_met(self) -> bool:
        return self.stall_s <= self.goal_s


def stall_of(ack_times: Sequence[float], killed_at: float) -> tuple[float, float]:
    """(the longest stall, the time from the kill to the first acknowledgement after it). The stall is the
    longest gap between consecutive acknowledgements, or from the kill to the first one after it if that is
    longer (no acknowledgement before the kill); infinite when none came after the kill."""
    ordered = sorted(ack_times)
    after = [t for t in ordered if t > killed_at]
    if not after:
        return math.inf, math.inf
    first_after = after[0] - killed_at
    longest_gap = max((later - earlier for earlier, later in itertools.pairwise(ordered)), default=0.0)
    return max(longest_gap, first_after), first_after


@dataclass
class _Outcomes:
    acks: list[Ack] = field(default_factory=list)
    failed: list[tuple[bytes, str]] = field(default_factory=list)

    def record(self, value: bytes, future: RecordFuture) -> None:
        at = time.monotonic()
        error = future.exception()
        if error is None:
            self.acks.append(Ack(value, future.result().offset, at))
        else:
            name = error.error_code.name if isinstance(error, ProduceFailed) else type(error).__name__
            self.failed.append((value, name))


async def _send_paced(producer: Producer, topic: str, rate_per_s: int, stop: asyncio.Event, out: _Outcomes) -> int:
    """Send record i at t0 + i/rate until `stop`; every outcome goes to `out` as it is known. Returns the count."""
    started = time.monotonic()
    index = 0
    while not stop.is_set():
        delay = started + index / rate_per_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing to the rate, not synchronisation
        value = b"%d" % index
        future = await producer.send(topic, value)
        future.add_done_callback(functools.partial(out.record, value))
        index += 1
    return index


async def _leader_and_pid(local: LocalCluster, watcher: ClusterConnection, topic: str) -> tuple[int, int]:
    await watcher.metadata((topic,))
    info = watcher.leader_of(topic, 0)
    state = local.read_state()
    if info is None or info.leader < 0 or state is None or str(info.leader) not in state.brokers:
        raise RuntimeError(f"{topic}-0 has no leader among the local cluster's brokers")
    return info.leader, state.brokers[str(info.leader)]


async def _wait_elected(watcher: ClusterConnection, topic: str, killed: int) -> tuple[int, float]:
    """The new leader and when a metadata answer first named it."""
    deadline = time.monotonic() + ELECTION_DEADLINE_S
    while time.monotonic() < deadline:
        with contextlib.suppress(RequestFailed):  # a busy broker's late answer: ask again
            answer = await watcher.metadata((topic,), timeout_s=METADATA_TRY_TIMEOUT_S)
            found = [t for t in answer.topics if t.name == topic and not t.error and t.partitions]
            if found and found[0].partitions[0].leader not in (-1, killed):
                return found[0].partitions[0].leader, time.monotonic()
        await asyncio.sleep(ELECTION_POLL_S)  # polling the metadata, bounded by the deadline above
    raise RuntimeError(f"no new leader of {topic}-0 within {ELECTION_DEADLINE_S:.0f} s of the kill")


async def measure_failover(
    local: LocalCluster,
    conn: ClusterConnection,
    topic: str,
    *,
    rate_per_s: int = RATE_PER_S,
    before_s: float = BEFORE_S,
    after_s: float = AFTER_S,
    config: ProducerConfig | None = None,
) -> FailoverRun:
    """Create `topic` (one partition, RF=3, min.insync.replicas=2), produce at `rate_per_s`, kill -9 its leader
    after `before_s`, keep producing until `after_s` past the election, then flush. The killed broker stays
    down (the caller restarts it if it wants)."""
    await create_topic(conn, topic, partitions=1)
    state = local.read_state()
    assert state is not None, "the cluster is up"
    client = state.credentials_file(Role.CLIENT)
    watcher = await ClusterConnection.open(state.nats_url, state.cluster_id, credentials_file=client)
    out = _Outcomes()
    try:
        async with Producer(conn, config or ProducerConfig()) as producer:
            stop = asyncio.Event()
            sender = asyncio.ensure_future(_send_paced(producer, topic, rate_per_s, stop, out))
            try:
                await asyncio.sleep(before_s)  # the workload's own timing: producing before the kill
                killed, pid = await _leader_and_pid(local, watcher, topic)
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                new_leader, elected_at = await _wait_elected(watcher, topic, killed)
                await asyncio.sleep(after_s)  # the workload's own timing: producing after the election
            finally:
                stop.set()
                sent = await sender
            await asyncio.wait_for(producer.flush(), DRAIN_DEADLINE_S)
    finally:
        await watcher.close()
    stall, first_after = stall_of([a.at for a in out.acks], killed_at)
    return FailoverRun(
        killed_broker=killed,
        new_leader=new_leader,
        election_s=elected_at - killed_at,
        stall_s=stall,
        kill_to_first_ack_s=first_after,
        sent=sent,
        acknowledged=tuple(sorted(out.acks, key=lambda a: a.at)),
        failed=tuple(out.failed),
    )


async def run_failover_bench(work: Path) -> FailoverRun:
    """One kill -9 of a leader on a fresh cluster started as `make run` starts one (Kafka's default
    broker.session.timeout.ms, so the election takes what it takes there)."""
    cluster = BenchCluster(work)
    async with cluster as conn:
        return await measure_failover(cluster.local, conn, "bench-failover")
