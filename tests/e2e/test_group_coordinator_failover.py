"""The group coordinator on real brokers: a group forms, commits, and its coordinator is killed with kill -9.

Method: `LocalCluster` starts a nats-server, a controller and three brokers as processes (`offsets.topic.num.partitions`
3, so the offsets topic is small, and no initial rebalance delay); the test speaks the group APIs over NATS as a
consumer does (FindCoordinator, JoinGroup twice for MEMBER_ID_REQUIRED, SyncGroup, OffsetCommit), then kills the
coordinator's process with SIGKILL and asks FindCoordinator again until another broker leads the group's offsets
partition: that broker rebuilt the group from `__consumer_offsets` and serves the committed offsets. Every wait is a
poll of a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import nats
import pytest
from nats.aio.client import Client

from hightide.client.local_cluster import LocalCluster
from hightide.protocol import group_records, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi, broker_api
from hightide.runtime.rpc import RequestFailed, request
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, describe, hightide, wait_for

pytestmark = pytest.mark.slow

CLUSTER_ID = "groups"
CONFIG = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=1000",
    "controller.lease.ms=2000",
    "replica.fetch.backoff.ms=200",
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
]
GROUP = "billing"
DEADLINE_S = 60.0
R = TypeVar("R")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=1, cluster_id=CLUSTER_ID, config=CONFIG)
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        # The group's topic exists: a commit for a partition the brokers' metadata does not have is refused.
        created = hightide(
            local.data_dir, "topic", "create", "orders", "--partitions", "3", "--replication-factor", "3"
        )
        assert created.returncode == 0, created.stderr

        def led() -> bool:
            partitions = describe(local, "orders")
            return len(partitions) == 3 and all(p["Leader"] != "none" for p in partitions)

        wait_for(led, 30, "the topic's leaders")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


async def until(what: str, attempt: Callable[[], Awaitable[R | None]]) -> R:
    """The first non-None result of `attempt`, tried until the deadline."""
    end = time.monotonic() + DEADLINE_S
    while True:
        result = await attempt()
        if result is not None:
            return result
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)  # polling a condition with a deadline


async def call(nc: Client, broker: int, api: BrokerApi, body: wire.Wire, kind: type[R]) -> R | None:
    try:
        return await request(nc, broker_api(CLUSTER_ID, broker, api), body, kind, timeout_s=10)  # type: ignore[type-var]
    except RequestFailed:
        return None  # a broker that is not up (or was killed)


async def coordinator_of(nc: Client, brokers: list[int], not_on: int | None = None) -> int:
    async def find() -> int | None:
        for broker in brokers:
            answer = await call(
                nc,
                broker,
                BrokerApi.FIND_COORDINATOR,
                wire.FindCoordinatorRequest(key=GROUP),
                wire.FindCoordinatorResponse,
            )
            if answer is not None and answer.error_code is ErrorCode.NONE and answer.node_id != not_on:
                return answer.node_id
        return None

    return await until("a coordinator", find)


def join_request(member_id: str) -> wire.JoinGroupRequest:
    subscription = group_records.encode_subscription(group_records.ConsumerSubscription(("orders",)))
    return wire.JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        protocols=(wire.JoinGroupProtocol(name="range", metadata=subscription),),
        client_id="e2e",
    )


async def form_group_and_commit(nc: Client, coordinator: int) -> tuple[str, int]:
    first = await until(
        "a member id",
        lambda: call(nc, coordinator, BrokerApi.JOIN_GROUP, join_request(""), wire.JoinGroupResponse),
    )
    assert first.error_code is ErrorCode.MEMBER_ID_REQUIRED, first
    joined = await call(nc, coordinator, BrokerApi.JOIN_GROUP, join_request(first.member_id), wire.JoinGroupResponse)
    assert joined is not None and joined.error_code is ErrorCode.NONE, joined
    assert joined.leader == first.member_id and joined.generation_id == 1
    mine = group_records.encode_assignment(group_records.ConsumerAssignment((("orders", (0, 1, 2)),)))
    sync = wire.SyncGroupRequest(
        group_id=GROUP,
        generation_id=1,
        member_id=first.member_id,
        assignments=(wire.SyncGroupAssignment(member_id=first.member_id, assignment=mine),),
    )
    synced = await call(nc, coordinator, BrokerApi.SYNC_GROUP, sync, wire.SyncGroupResponse)
    assert synced is not None and synced.error_code is ErrorCode.NONE and synced.assignment == mine, synced
    commit = wire.OffsetCommitRequest(
        group_id=GROUP,
        generation_id=1,
        member_id=first.member_id,
        partitions=tuple(
            wire.OffsetCommitPartition(topic="orders", partition=p, committed_offset=100 + p) for p in range(3)
        ),
    )
    committed = await call(nc, coordinator, BrokerApi.OFFSET_COMMIT, commit, wire.OffsetCommitResponse)
    assert committed is not None and {p.error for p in committed.partitions} == {0}, committed
    return first.member_id, 1


async def committed_offsets(nc: Client, coordinator: int) -> dict[int, int]:
    async def fetch() -> dict[int, int] | None:
        answer = await call(
            nc, coordinator, BrokerApi.OFFSET_FETCH, wire.OffsetFetchRequest(group_id=GROUP), wire.OffsetFetchResponse
        )
        if answer is None or answer.error_code is not ErrorCode.NONE:
            return None  # COORDINATOR_LOAD_IN_PROGRESS while it reads the partition back
        return {p.partition: p.committed_offset for p in answer.partitions}

    return await until("the committed offsets", fetch)


def test_a_new_coordinator_serves_the_committed_offsets_after_kill_9(cluster: LocalCluster) -> None:
    state = cluster.read_state()
    assert state is not None

    async def scenario() -> None:
        nc = await nats.connect(state.nats_url)
        try:
            coordinator = await coordinator_of(nc, [1, 2, 3])
            member_id, generation = await form_group_and_commit(nc, coordinator)
            assert await committed_offsets(nc, coordinator) == {0: 100, 1: 101, 2: 102}
            cluster.stop_broker(coordinator, hard=True)  # kill -9
            survivors = [b for b in (1, 2, 3) if b != coordinator]
            successor = await coordinator_of(nc, survivors, not_on=coordinator)
            assert successor != coordinator
            assert await committed_offsets(nc, successor) == {0: 100, 1: 101, 2: 102}
            described = await call(
                nc,
                successor,
                BrokerApi.DESCRIBE_GROUPS,
                wire.DescribeGroupsRequest(groups=(GROUP,)),
                wire.DescribeGroupsResponse,
            )
            assert described is not None
            [group] = described.groups
            assert (group.group_state, group.generation_id) == ("Stable", generation)
            assert [m.member_id for m in group.members] == [member_id]
            heartbeat = wire.HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member_id)
            beat = await call(nc, successor, BrokerApi.HEARTBEAT, heartbeat, wire.HeartbeatResponse)
            assert beat is not None and beat.error_code is ErrorCode.NONE, beat
        finally:
            await nc.close()

    asyncio.run(scenario())
