"""Clustered NATS (issue 14): a kill -9 of a NATS node under an acks=all producer loses nothing.

A local cluster as `hightide cluster up --nats-nodes 3` starts it: three nats-server processes routed to each other,
JetStream on each; two controllers, three brokers, the archiver, every one connected with all three URLs. The
metadata log, the controller's lease bucket and the event store are created with three replicas (the default,
clamped to the cluster's size). An idempotent acks=all producer (Hightide's own client) runs; the NATS node that
leads the metadata stream (JetStream's `$JS.API.STREAM.INFO` says which) is killed with -9, the hard case: the
controller's next append and the lease must go to a new stream leader. The producer keeps going, and a topic is
created after the kill (the metadata log still takes appends). The node is restarted and rejoins: every stream
shows its replica on it current again. Then every acknowledged record is read back exactly once, at the offset
it was acknowledged with; the event stream holds a gap-free run of sequences; and the archived lake's history
audit (per-emitter sequences contiguous among its invariants) finds no violation.

Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from hightide.client.admin import Admin
from hightide.client.bench_cluster import create_topic
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer, ConsumerRecord
from hightide.client.local_cluster import LocalCluster
from hightide.client.producer import ProduceFailed, Producer, ProducerConfig, RecordFuture
from hightide.lake import read_envelopes
from hightide.protocol.permissions import Role
from hightide.protocol.subjects import controller_bucket, events_stream, metadata_stream
from hightide.runtime.nats import credentials_seed, nkey_inbox_prefix
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, wait_for

pytestmark = pytest.mark.slow

CLUSTER_ID = "natsha"
TOPIC = "replicated"
PARTITIONS = 3
READY_S = 90.0
PROGRESS_S = 120.0
REJOIN_S = 120.0
BEFORE_KILL = 150  # records acknowledged before the kill
AFTER_KILL = 300  # and after it
RATE_PER_S = 100
LAKE_S = 180.0  # more than the archiver's ack wait (60 s), after which a lost delivery comes again


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=2, cluster_id=CLUSTER_ID, config=[], nats_nodes=3)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, READY_S, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


@dataclass
class Outcomes:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    failed: list[tuple[bytes, str]] = field(default_factory=list)

    def record(self, value: bytes, future: RecordFuture) -> None:
        error = future.exception()
        if error is None:
            result = future.result()
            self.acked[value] = (result.partition, result.offset)
        else:
            self.failed.append((value, error.error_code.name if isinstance(error, ProduceFailed) else repr(error)))


async def produce(producer: Producer, stop: asyncio.Event, out: Outcomes) -> int:
    index = 0
    started = time.monotonic()
    while not stop.is_set():
        delay = started + index / RATE_PER_S - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the workload, not synchronisation
        value = b"%d" % index
        future = await producer.send(TOPIC, value)
        future.add_done_callback(lambda f, v=value: out.record(v, f))
        index += 1
    return index


async def until(condition: Callable[[], Awaitable[Any]], deadline_s: float, what: str) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        with contextlib.suppress(nats.errors.Error, TimeoutError, LookupError):
            value = await condition()
            if value:
                return value
        assert time.monotonic() < end, f"timed out after {deadline_s:.0f} s waiting for {what}"
        await asyncio.sleep(0.2)  # polling a condition with a deadline


async def stream_info(nc: Client, stream: str) -> dict[str, Any]:
    """JetStream's own answer for `stream` ($JS.API.STREAM.INFO): config, state and cluster (leader, replicas)."""
    answer: dict[str, Any] = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=2)).data)
    if "error" in answer:  # no leader yet, for one: JetStream answers with an error object
        raise LookupError(f"{stream}: {answer['error']}")
    return answer


def streams() -> list[str]:
    return [metadata_stream(CLUSTER_ID), events_stream(CLUSTER_ID), f"KV_{controller_bucket(CLUSTER_ID)}"]


async def whole(nc: Client, stream: str) -> bool:
    """The stream has a leader and two replicas, each current and online: all three nodes hold it."""
    cluster = (await stream_info(nc, stream)).get("cluster", {})
    replicas = cluster.get("replicas", [])
    return (
        bool(cluster.get("leader"))
        and len(replicas) == 2
        and all(r.get("current") and not r.get("offline") for r in replicas)
    )


async def read_all(conn: ClusterConnection, expected: int) -> list[ConsumerRecord]:
    consumer = Consumer(conn)
    consumer.assign({(TOPIC, p): 0 for p in range(PARTITIONS)})
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + 90
    try:
        while len(records) < expected and time.monotonic() < deadline:
            records += await consumer.poll()
    finally:
        await consumer.close()
    return records


def creds(path: Path) -> dict[str, str]:
    """nats-py's options for a credentials file of ours (a seed-only file, or a .creds with a JWT)."""
    seed = credentials_seed(path)
    if seed is None:
        return {"user_credentials": str(path)}
    return {"nkeys_seed_str": seed, "inbox_prefix": nkey_inbox_prefix(seed)}  # the user's own inbox (issue 14)


def test_kill_9_of_the_metadata_streams_nats_leader_loses_no_acknowledged_record_and_no_event(
    cluster: LocalCluster,
) -> None:
    state = cluster.read_state()
    assert state is not None and len(state.nats_pids) == 3
    servers = state.nats_url.split(",")
    assert len(servers) == 3, "every service and command is given all three NATS URLs"

    async def main() -> tuple[Outcomes, int, list[ConsumerRecord], dict[str, Any], int]:
        # As the operator: the JetStream API (stream leaders and replicas) is the admin role's (issue 14's users).
        admin = state.credentials_file(Role.ADMIN)
        js_nc = await nats.connect(
            servers, max_reconnect_attempts=-1, reconnect_time_wait=0.2, **({} if admin is None else creds(admin))
        )
        conn = await ClusterConnection.open(state.nats_url, state.cluster_id, credentials_file=admin)
        try:
            for stream in streams():
                info = await stream_info(js_nc, stream)
                assert info["config"]["num_replicas"] == 3, f"{stream} is replicated on all three nodes"
            await until(lambda: all_whole(js_nc), READY_S, "every stream on all three nodes")
            await create_topic(conn, TOPIC, partitions=PARTITIONS)
            out = Outcomes()
            async with Producer(conn, ProducerConfig(acks=-1, enable_idempotence=True)) as producer:
                stop = asyncio.Event()
                sender = asyncio.ensure_future(produce(producer, stop, out))
                try:
                    await until(ready_count(out, BEFORE_KILL), PROGRESS_S, f"{BEFORE_KILL} acknowledgements")
                    leader = (await stream_info(js_nc, metadata_stream(CLUSTER_ID)))["cluster"]["leader"]
                    killed = int(leader.removeprefix("nats-"))
                    cluster.stop_nats_node(killed, hard=True)
                    killed_at, acked_at_kill = time.monotonic(), len(out.acked)
                    await until(lambda: led_by_another(js_nc, leader), PROGRESS_S, "a new metadata stream leader")
                    print(f"the metadata stream had a new leader {time.monotonic() - killed_at:.1f} s after the kill")
                    await until(
                        ready_count(out, acked_at_kill + AFTER_KILL), PROGRESS_S, "acknowledgements after the kill"
                    )
                    # The metadata log takes appends without the node that led it: a topic is created.
                    created = await Admin(conn).create_topic("after-the-kill", 1, 3)
                    assert created.error == 0, created.message
                    cluster.start_nats_node(killed)
                    await until(lambda: all_whole(js_nc), REJOIN_S, f"nats-{killed} to rejoin every stream")
                finally:
                    stop.set()
                    sent = await sender
                await asyncio.wait_for(producer.flush(), 150)
            records = await read_all(conn, len(out.acked))
            events = await stream_info(js_nc, events_stream(CLUSTER_ID))
            # A message the archiver's pull had taken when its NATS node died is redelivered only after the
            # consumer's ack wait (60 s): the lake holds every event once it has them all, then the cluster stops.
            started = time.monotonic()
            await until(lambda: lake_holds(cluster.lake, events["state"]["last_seq"]), LAKE_S, "the lake to catch up")
            print(f"the lake held every event {time.monotonic() - started:.1f} s after the run")
        finally:
            await conn.close()
            await js_nc.close()
        return out, sent, records, events, killed

    out, sent, records, events, killed = asyncio.run(main())
    print(f"killed nats-{killed}; {sent} sent, {len(out.acked)} acknowledged, {len(out.failed)} failed")
    assert not out.failed, f"records failed while one NATS node of three was down: {out.failed[:5]}"
    assert len(out.acked) == sent, "every record sent was acknowledged"
    read = [(r.value, r.partition, r.offset) for r in records]
    values = [value for value, _, _ in read]
    assert len(values) == len(set(values)), "a record is in the log twice"
    at = {value: (partition, offset) for value, partition, offset in read}
    missing = [v for v, where in out.acked.items() if at.get(v) != where]
    assert not missing, f"{len(missing)} acknowledged records are not where they were acknowledged: {missing[:5]}"
    state_ = events["state"]
    assert state_["first_seq"] == 1 and state_.get("num_deleted", 0) == 0, state_
    assert state_["messages"] == state_["last_seq"], f"the event stream has a gap: {state_}"


def ready_count(out: Outcomes, count: int) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return len(out.acked) >= count

    return reached


async def all_whole(nc: Client) -> bool:
    return all([await whole(nc, stream) for stream in streams()])


async def led_by_another(nc: Client, old_leader: str) -> bool:
    leader = (await stream_info(nc, metadata_stream(CLUSTER_ID))).get("cluster", {}).get("leader")
    return bool(leader) and leader != old_leader


async def lake_holds(lake: Path, last_seq: int) -> bool:
    """Whether the lake holds every event stream message up to `last_seq`."""
    held = await asyncio.to_thread(lambda: {sequence for sequence, _ in read_envelopes(lake)})
    return held >= set(range(1, last_seq + 1))
