"""The event store end to end: a real local cluster (nats-server, controller, three brokers, the archiver, each
a process) whose every event must reach the Parquet lake once, through a NATS outage and a kill -9, and from which
the cluster's final state can be rebuilt exactly.

Method: `LocalCluster` as `hightide cluster up` starts it; load from the CLI's verifiable producer (which emits
its own SendInvoked/SendCompleted events); faults by signals (SIGTERM to nats-server, SIGKILL to a broker). The
lake is read with `hightide.lake.reader`, the state rebuilt with `hightide.audit.rebuild`, and compared with the
brokers' logs on disk after a clean stop (`support.disk_state`) and the metadata log's final image. Every wait is
a condition with a deadline; the one timed hold is the outage itself, which the scenario defines as 10 s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.test_cluster_failover import CONFIG, active_brokers, create_topic, describe, wait_for
from hightide.audit.rebuild import rebuild
from hightide.client.local_cluster import ClusterState, LocalCluster, find_nats_server, pid_alive
from hightide.core.metadata_image import MetadataImage
from hightide.lake.reader import read_envelopes
from hightide.protocol.envelope import Envelope, decode_envelopes
from hightide.protocol.permissions import Role
from hightide.runtime.metadata_log import MetadataLog
from hightide.runtime.nats import connect
from hightide.runtime.outbox import SUFFIX, OutboxReader, read_cursor
from support.audited import assert_history_clean
from support.cluster_cli import Producer
from support.containers import ContainerCluster, local_cluster
from support.disk_state import read_disk_state

pytestmark = pytest.mark.slow

OUTAGE_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = local_cluster(tmp_path / "cluster")  # containers under HIGHTIDE_CONTAINERS=1
    local.up(brokers=3, controllers=1, cluster_id="events", config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


def stop_nats(cluster: LocalCluster) -> None:
    state = cluster.read_state()
    assert state is not None
    os.kill(state.nats_pid, signal.SIGTERM)
    wait_for(lambda: not pid_alive(state.nats_pid), 15, "nats-server to stop")


def start_nats(cluster: LocalCluster) -> None:
    """nats-server again with the cluster's own config: the same port, the same JetStream store."""
    if isinstance(cluster, ContainerCluster):
        cluster.restart_nats()
        return
    state = cluster.read_state()
    assert state is not None
    log = open(cluster.data_dir / "logs" / "nats-server.log", "ab")  # noqa: SIM115 (the child keeps it)
    process = subprocess.Popen(
        [find_nats_server(), "-c", str(cluster.data_dir / "nats.conf")], stdout=log, stderr=log, start_new_session=True
    )
    state.nats_pid = process.pid
    cluster.write_state(state)


def lake_of(cluster: LocalCluster) -> list[Envelope]:
    return [envelope for _, envelope in read_envelopes(cluster.data_dir / "lake")]


def assert_each_incarnation_complete_and_once(envelopes: list[Envelope]) -> dict[str, list[Envelope]]:
    """Per emitter incarnation: sequences 0..n-1, every one exactly once (by their (incarnation, sequence))."""
    seen = Counter((e.emitter.incarnation, e.sequence) for e in envelopes)
    twice = [key for key, count in seen.items() if count > 1]
    assert not twice, f"events stored twice: {twice[:5]}"
    by_incarnation: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        by_incarnation.setdefault(envelope.emitter.incarnation, []).append(envelope)
    for incarnation, items in by_incarnation.items():
        sequences = sorted(e.sequence for e in items)
        assert sequences == list(range(len(sequences))), (
            f"{items[0].emitter.service}-{items[0].emitter.emitter_id} incarnation {incarnation}: gaps in "
            f"{sequences[:3]}..{sequences[-3:]} ({len(sequences)} events)"
        )
    return by_incarnation


def test_a_10_second_nats_outage_under_load_loses_and_duplicates_no_event(cluster: LocalCluster) -> None:
    create_topic(cluster, "outage", partitions=3)
    producer = Producer(cluster, "outage", count=12_000, rate=800)
    wait_for(lambda: len(producer.acks) >= 1_500, 60, "the producer to be under way")
    stop_nats(cluster)
    outage_started = time.time()
    time.sleep(OUTAGE_S)  # the outage the scenario is about, not a synchronisation
    start_nats(cluster)
    outage_ended = time.time()
    assert producer.finish(timeout_s=240) == 0, producer.stderr.read_text()[-2000:]
    assert len(producer.acks) == 12_000 and all(a["error"] is None for a in producer.acks)
    wait_for(lambda: len(active_brokers(cluster)) == 3, 60, "three active brokers after the outage")
    cluster.down()  # every service drains its outbox, then the archiver catches up with the stream

    envelopes = lake_of(cluster)
    by_incarnation = assert_each_incarnation_complete_and_once(envelopes)
    services = Counter((e.emitter.service, e.emitter.emitter_id) for e in envelopes)
    assert {("broker", 1), ("broker", 2), ("broker", 3), ("controller", 1)} <= set(services)
    completed = [e.event for e in envelopes if e.type == "SendCompleted"]
    assert len(completed) == 12_000 and all(getattr(c, "outcome", None) == "ok" for c in completed)
    assert len(by_incarnation) >= 5  # three brokers, the controller, the producer (and other CLI clients)
    # Events made while NATS was away were kept in their outboxes (one implementation, `hightide.runtime.outbox`, in
    # every service) and arrived afterwards: the producer's sends at least. A broker may make none: with fetch
    # sessions (KIP-227) a leader announces a fetch only for the partitions it answers, and nothing moves while its
    # followers cannot reach it.
    during = Counter(e.emitter.service for e in envelopes if outage_started * 1000 < e.wall_ms < outage_ended * 1000)
    assert during["producer"] > 0, f"no producer event from the outage reached the lake (by service: {dict(during)})"


def test_a_broker_killed_with_9_has_its_outbox_replayed_by_its_next_incarnation(cluster: LocalCluster) -> None:
    create_topic(cluster, "replay", partitions=3)
    # NATS stops under a producer: the broker killed leads a partition the producer writes to, so the appends, fetch
    # answers and ISR changes it makes as NATS goes are still in its outbox. (Stopped after the producer had finished,
    # an idle cluster makes no event: caught-up followers stay in the ISR and unchanged partitions are not announced.)
    producer = Producer(cluster, "replay", count=100_000, rate=1_000)
    wait_for(lambda: len(producer.acks) >= 1_000, 60, "the producer under way")
    victim = int(describe(cluster, "replay")[0]["Leader"])
    outbox_dir = cluster.data_dir / f"broker-{victim}" / "events-outbox"
    (outbox,) = outbox_dir.glob(f"*{SUFFIX}")
    stop_nats(cluster)
    producer.process.kill()
    producer.finish(timeout_s=30)

    def unpublished() -> bool:
        return outbox.stat().st_size > max(read_cursor(outbox), 64)

    wait_for(unpublished, 30, f"broker {victim} to hold events it could not publish")
    cluster.stop_broker(victim, hard=True)
    cursor = read_cursor(outbox)
    reader = OutboxReader(outbox)
    written = [e for record in reader.records(0) for e in decode_envelopes(record.data)]
    unsent = [e for record in reader.records(cursor) for e in decode_envelopes(record.data)]
    reader.close()
    assert unsent, "the killed broker should have held events the stream did not have"
    start_nats(cluster)
    cluster.start_broker(victim)
    wait_for(lambda: not outbox.exists(), 60, "the new incarnation to replay and remove the old outbox")
    wait_for(lambda: len(active_brokers(cluster)) == 3, 60, f"broker {victim} back")
    cluster.down()

    envelopes = lake_of(cluster)
    assert_each_incarnation_complete_and_once(envelopes)
    dead = written[0].emitter.incarnation
    stored = [e for e in envelopes if e.emitter.incarnation == dead]
    assert stored == sorted(written, key=lambda e: e.sequence)[: len(stored)]
    assert [e.sequence for e in stored] == [e.sequence for e in written]
    assert set(unsent) <= set(stored)  # what only its outbox held when it died came from the replay


def test_the_final_state_after_kill_9_rounds_rebuilds_exactly_from_the_lake(cluster: LocalCluster) -> None:
    create_topic(cluster, "rebuild", partitions=3)
    producer = Producer(cluster, "rebuild", count=8_000, rate=1_000)
    for round_number in range(2):
        wait_for(lambda n=round_number: len(producer.acks) >= 2_000 * (n + 1), 90, "the producer to move on")
        leader = int(describe(cluster, "rebuild")[0]["Leader"])
        cluster.stop_broker(leader, hard=True)
        wait_for(lambda old=leader: describe(cluster, "rebuild")[0]["Leader"] not in ("none", str(old)), 30, "a leader")
        cluster.start_broker(leader)
        wait_for(
            lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, "rebuild")), 60, "every ISR full again"
        )
    assert producer.finish(timeout_s=240) == 0
    # A clean stop, one process at a time: each broker's controlled shutdown and last events, then the
    # controller; the metadata log's final image is read before the archiver and nats-server stop.
    for broker in (1, 2, 3):
        cluster.stop_broker(broker, hard=False)
    state = cluster.read_state()
    assert state is not None
    for controller in state.controllers:
        cluster.stop_controller(int(controller), hard=False)
    image = asyncio.run(final_image(state))
    cluster.down()

    rebuilt = rebuild(lake_of(cluster))
    assert rebuilt.anomalies == (), rebuilt.anomalies[:5]
    on_disk = {}
    for broker in (1, 2, 3):
        on_disk.update(read_disk_state(cluster.data_dir / f"broker-{broker}", broker))
    assert len(on_disk) == 9  # three partitions, three replicas each
    assert dict(rebuilt.replicas) == on_disk
    topic = image.topic("rebuild")
    assert topic is not None
    for partition, registration in enumerate(topic.partitions):
        state_now = rebuilt.partitions[("rebuild", partition)]
        assert (
            state_now.replicas,
            state_now.isr,
            state_now.elr,
            state_now.last_known_elr,
            state_now.leader,
            state_now.leader_epoch,
            state_now.partition_epoch,
        ) == (
            registration.replicas,
            registration.isr,
            registration.elr,
            registration.last_known_elr,
            registration.leader,
            registration.leader_epoch,
            registration.partition_epoch,
        ), partition
    assert topic.partitions[0].leader_epoch >= 2  # each kill moved partition 0's leadership


async def final_image(state: ClusterState) -> MetadataImage:
    # as a broker reads it: only the controller and brokers may read the metadata log (NATS permissions)
    nc = await connect(state.nats_settings(Role.BROKER, name="test-final-image", max_reconnect_attempts=0))
    try:
        log = MetadataLog(nc, state.cluster_id)
        last = await log.last_sequence()
        image = MetadataImage()
        async for _, batch in log.read(0, until=last):
            image = image.apply_all(batch.records)
        return image
    finally:
        await nc.close()
