"""A group member's background heartbeat (Kafka's AbstractCoordinator.HeartbeatThread), max.poll.interval.ms, and
cooperative rebalancing (KIP-429).

Method: `LocalCluster` starts a nats-server, a controller and three brokers as processes; the test runs a real
`Consumer` with `group.id` in-process and reads the coordinator's view of the group with DescribeGroups (as
`hightide group describe` does).

- A member whose application does not poll for longer than `session.timeout.ms` keeps its place: its heartbeats
  go out in the background, so the coordinator does not expire it (same member id, same generation, Stable).
  Before the heartbeat ran on its own, the coordinator expired such a member.
- A member that does not poll for `max.poll.interval.ms` leaves the group, well before its (long) session timeout
  could have expired it; its next poll joins again as a new member.
- cooperative-sticky: a second member joins a one-member group; the first keeps the partitions it is left
  through both rounds and goes on reading them from where it was — with no commit at all, an eager rebalance would
  restart them at `auto.offset.reset` (earliest) and read them twice; it gives up only the two the assignor
  moves, which the newcomer gets in the second round.

The idle periods are the scenarios themselves (an application that does not poll), not synchronisation; every
other wait is a poll of a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hightide.client.bench_cluster import create_topic
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer, ConsumerConfig
from hightide.client.local_cluster import ClusterState, LocalCluster
from hightide.client.producer import Producer
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.permissions import Role
from hightide.protocol.subjects import BrokerApi
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, wait_for


def admin_credentials(cluster: ClusterState) -> Path | None:
    """The admin's credentials (the tests create their topics; NATS permissions, issue 14)."""
    return cluster.credentials_file(Role.ADMIN)


pytestmark = pytest.mark.slow

CLUSTER_ID = "heartbeat"
CONFIG = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=1000",
    "controller.lease.ms=2000",
    "replica.fetch.backoff.ms=200",
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
]
TOPIC = "beats"
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    local = LocalCluster(tmp_path_factory.mktemp("heartbeat") / "cluster")
    state = local.up(brokers=3, controllers=1, cluster_id=CLUSTER_ID, config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield state
    finally:
        local.down()
    assert_history_clean(local.lake)


async def describe(conn: ClusterConnection, group: str) -> wire.DescribedGroup:
    """The coordinator's view of `group` (FindCoordinator, then DescribeGroups), retried while it moves."""
    end = time.monotonic() + DEADLINE_S
    while True:
        found = await conn.broker(
            min(conn.brokers),
            BrokerApi.FIND_COORDINATOR,
            wire.FindCoordinatorRequest(key=group),
            wire.FindCoordinatorResponse,
        )
        if found.error_code is ErrorCode.NONE:
            answer = await conn.broker(
                found.node_id,
                BrokerApi.DESCRIBE_GROUPS,
                wire.DescribeGroupsRequest(groups=(group,)),
                wire.DescribeGroupsResponse,
            )
            if answer.error_code is ErrorCode.NONE and answer.groups and answer.groups[0].error == 0:
                return answer.groups[0]
        assert time.monotonic() < end, f"no description of group {group}"
        await asyncio.sleep(0.2)  # polling a condition with a deadline


async def poll_until_assigned(consumer: Consumer) -> None:
    end = time.monotonic() + DEADLINE_S
    while consumer.group is None or not consumer.group.assigned or consumer.group.needs_join:
        assert time.monotonic() < end, "the consumer got no assignment"
        await consumer.poll()


async def until_described(
    conn: ClusterConnection, group: str, ok: Callable[[wire.DescribedGroup], bool], within_s: float
) -> wire.DescribedGroup:
    end = time.monotonic() + within_s
    while True:
        described = await describe(conn, group)
        if ok(described):
            return described
        assert time.monotonic() < end, f"group {group}: {described.group_state}, {len(described.members)} members"
        await asyncio.sleep(0.2)  # polling a condition with a deadline


def test_a_member_that_does_not_poll_keeps_its_place_by_its_background_heartbeat(cluster: ClusterState) -> None:
    session_timeout_ms = 6_000  # group.min.session.timeout.ms

    async def scenario() -> None:
        conn = await ClusterConnection.open(
            cluster.nats_url, cluster.cluster_id, credentials_file=admin_credentials(cluster)
        )
        try:
            await create_topic(conn, TOPIC, 2)
            config = ConsumerConfig(
                group_id="idle",
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=500,
                auto_offset_reset="earliest",
            )
            consumer = Consumer(conn, config)
            consumer.subscribe([TOPIC])
            await poll_until_assigned(consumer)
            group = consumer.group
            assert group is not None
            member_id, generation = group.member_id, group.generation

            await asyncio.sleep(2 * session_timeout_ms / 1000)  # the application does not poll: the scenario

            described = await describe(conn, "idle")
            assert (described.group_state, described.generation_id) == ("Stable", generation)
            assert [m.member_id for m in described.members] == [member_id]
            await consumer.poll()
            assert (group.member_id, group.generation, group.needs_join) == (member_id, generation, False)
            await consumer.close()
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_a_member_that_does_not_poll_for_max_poll_interval_leaves_and_its_next_poll_rejoins(
    cluster: ClusterState,
) -> None:
    session_timeout_ms = 45_000
    max_poll_interval_ms = 2_000

    async def scenario() -> None:
        conn = await ClusterConnection.open(
            cluster.nats_url, cluster.cluster_id, credentials_file=admin_credentials(cluster)
        )
        try:
            await create_topic(conn, TOPIC + "-stalled", 2)
            config = ConsumerConfig(
                group_id="stalled",
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=500,
                max_poll_interval_ms=max_poll_interval_ms,
                auto_offset_reset="earliest",
            )
            consumer = Consumer(conn, config)
            consumer.subscribe([TOPIC + "-stalled"])
            await poll_until_assigned(consumer)
            group = consumer.group
            assert group is not None
            first_member = group.member_id
            stalled_at = time.monotonic()  # the last poll starts: Kafka's poll timer is reset at a poll's start
            await consumer.poll()

            # No poll from here: the member leaves (LeaveGroup) after max.poll.interval.ms, long before its
            # session timeout would have expired it.
            def left(d: wire.DescribedGroup) -> bool:
                return d.group_state == "Empty" and not d.members

            await until_described(conn, "stalled", left, session_timeout_ms / 1000 / 2)
            assert time.monotonic() - stalled_at >= max_poll_interval_ms / 1000
            assert group.needs_join

            await poll_until_assigned(consumer)  # the next poll rejoins
            assert group.member_id not in ("", first_member)
            described = await describe(conn, "stalled")
            assert described.group_state == "Stable"
            assert [m.member_id for m in described.members] == [group.member_id]
            await consumer.close()
        finally:
            await conn.close()

    asyncio.run(scenario())


# --- cooperative rebalancing (KIP-429) -------------------------------------------------------------------------


def test_a_cooperative_rebalance_leaves_the_partitions_a_member_keeps_reading(cluster: ClusterState) -> None:
    topic, per_partition, partitions = "coop", 20, 4

    async def produce(conn: ClusterConnection) -> None:
        async with Producer(conn) as producer:
            for p in range(partitions):
                for _ in range(per_partition):
                    await producer.send(topic, b"x", partition=p)
            await producer.flush()

    async def scenario() -> None:
        conn = await ClusterConnection.open(
            cluster.nats_url, cluster.cluster_id, credentials_file=admin_credentials(cluster)
        )
        try:
            await create_topic(conn, topic, partitions)
            await produce(conn)
            config = ConsumerConfig(
                group_id="coop",
                partition_assignment_strategy="cooperative-sticky",
                enable_auto_commit=False,  # no commit at all: an eager rebalance would read from earliest again
                session_timeout_ms=6_000,
                heartbeat_interval_ms=500,
                auto_offset_reset="earliest",
            )
            reads: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
            told: dict[str, list[events.PartitionsAssigned]] = {"a": [], "b": []}
            consumers = {name: Consumer(conn, config) for name in reads}
            for name, consumer in consumers.items():
                consumer.subscribe([topic])
                consumer.on_event = lambda e, n=name: (
                    told[n].append(e) if isinstance(e, events.PartitionsAssigned) else None
                )
            stop = asyncio.Event()

            async def keep_polling(name: str) -> None:
                while not stop.is_set():
                    reads[name] += [(r.partition, r.offset) for r in await consumers[name].poll()]

            a = asyncio.create_task(keep_polling("a"))
            end = time.monotonic() + DEADLINE_S
            while len(reads["a"]) < partitions * per_partition:
                assert time.monotonic() < end, "a did not read the first records"
                await asyncio.sleep(0.1)  # polling a condition with a deadline
            group_a = consumers["a"].group
            assert group_a is not None
            first_generation = group_a.generation

            b = asyncio.create_task(keep_polling("b"))
            group_b = consumers["b"].group
            assert group_b is not None

            def settled() -> bool:
                return (
                    len(group_a.assigned) == len(group_b.assigned) == partitions // 2
                    and group_a.generation == group_b.generation
                    and not group_a.needs_join
                    and not group_b.needs_join
                )

            while not settled():
                assert time.monotonic() < end, f"no settled assignment: {group_a.assigned} {group_b.assigned}"
                await asyncio.sleep(0.1)  # polling a condition with a deadline
            await produce(conn)
            kept = {p for _, p in group_a.assigned}
            moved = {p for _, p in group_b.assigned}

            def read_all() -> bool:
                a_done = {(p, o) for p, o in reads["a"] if p in kept and o >= per_partition}
                b_done = {(p, o) for p, o in reads["b"] if p in moved}
                return len(a_done) == len(kept) * per_partition and len(b_done) == len(moved) * 2 * per_partition

            while not read_all():
                assert time.monotonic() < end, "the records produced after the rebalance were not read"
                await asyncio.sleep(0.1)  # polling a condition with a deadline
            stop.set()
            await asyncio.gather(a, b)

            assert kept | moved == set(range(partitions)) and not kept & moved
            # Two rounds (KIP-429): the moved partitions are withheld until their owner revoked them.
            assert group_a.generation >= first_generation + 2
            # a kept reading its partitions from where it was: every record of them read exactly once.
            a_kept = sorted(r for r in reads["a"] if r[0] in kept)
            assert a_kept == sorted((p, o) for p in kept for o in range(2 * per_partition))
            # It was told of its partitions once (the first generation): nothing was assigned to it again.
            assert [sorted(e.partitions) for e in told["a"]] == [list(range(partitions))]
            # b got the moved partitions from earliest (nothing committed) and read each record once.
            assert sorted(reads["b"]) == sorted((p, o) for p in moved for o in range(2 * per_partition))
            for consumer in consumers.values():
                await consumer.close()
        finally:
            await conn.close()

    asyncio.run(scenario())
