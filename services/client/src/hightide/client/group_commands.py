"""`hightide group list | describe GROUP | delete GROUP`: kafka-consumer-groups.sh's --list, --describe, --delete.

Room: services/client (the CLI). `describe` prints Kafka's columns `GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID`, one row per partition the group has a committed offset for or a
member is assigned, `-` for what is missing (no member owns it; nothing committed). The coordinator answers
DescribeGroups, OffsetFetch and DeleteGroups; each partition's leader answers its log end offset.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable

from hightide.client.connection import ClientError, ClusterConnection
from hightide.client.consumer import Consumer
from hightide.protocol import group_records, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi
from hightide.runtime.rpc import RequestFailed

EXIT_OK = 0
EXIT_FAILED = 1
COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
ATTEMPTS_MAX = 50
RETRY_S = 0.2


def group_list(args: argparse.Namespace, connect: Callable[[argparse.Namespace], Awaitable[ClusterConnection]]) -> int:
    async def run() -> int:
        conn = await connect(args)
        try:
            await conn.metadata(())
            names: set[str] = set()
            for broker in sorted(conn.brokers):
                try:
                    answer = await conn.broker(
                        broker, BrokerApi.LIST_GROUPS, wire.ListGroupsRequest(), wire.ListGroupsResponse
                    )
                except RequestFailed:
                    continue  # a broker that is down coordinates nothing now
                names.update(g.group_id for g in answer.groups)
            for name in sorted(names):
                print(name)
            return EXIT_OK
        finally:
            await conn.close()

    return asyncio.run(run())


async def _coordinator(conn: ClusterConnection, group: str) -> int:
    """The group's coordinator (FindCoordinator to any broker, retried while it is not available)."""
    error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    for _ in range(ATTEMPTS_MAX):
        await conn.metadata(())
        for broker in sorted(conn.brokers):
            try:
                answer = await conn.broker(
                    broker,
                    BrokerApi.FIND_COORDINATOR,
                    wire.FindCoordinatorRequest(key=group),
                    wire.FindCoordinatorResponse,
                )
            except RequestFailed as failed:
                error = failed.error_code
                continue
            if answer.error_code is ErrorCode.NONE:
                return answer.node_id
            error = answer.error_code
            break
        await asyncio.sleep(RETRY_S)  # the offsets topic is being created, or its partition has no leader yet
    raise ClientError(f"no coordinator for group {group}", error)


async def _ask(
    conn: ClusterConnection, group: str, api: BrokerApi, body: wire.Wire, kind: type[wire.Response]
) -> wire.Response:
    """A request to the group's coordinator, retried while it loads or moves."""
    error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    for _ in range(ATTEMPTS_MAX):
        coordinator = await _coordinator(conn, group)
        try:
            answer = await conn.broker(coordinator, api, body, kind)
        except RequestFailed as failed:
            error = failed.error_code
        else:
            error = answer.error_code
            if error not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR):
                return answer
        await asyncio.sleep(RETRY_S)
    raise ClientError(f"group {group}: the coordinator did not answer", error)


def group_describe(
    args: argparse.Namespace, connect: Callable[[argparse.Namespace], Awaitable[ClusterConnection]]
) -> int:
    async def run() -> int:
        conn = await connect(args)
        try:
            described = await _ask(
                conn,
                args.group,
                BrokerApi.DESCRIBE_GROUPS,
                wire.DescribeGroupsRequest(groups=(args.group,)),
                wire.DescribeGroupsResponse,
            )
            fetched = await _ask(
                conn,
                args.group,
                BrokerApi.OFFSET_FETCH,
                wire.OffsetFetchRequest(group_id=args.group),
                wire.OffsetFetchResponse,
            )
            assert isinstance(described, wire.DescribeGroupsResponse) and isinstance(fetched, wire.OffsetFetchResponse)
            [group] = described.groups
            committed = {(p.topic, p.partition): p.committed_offset for p in fetched.partitions}
            if group.group_state == "Dead" and not committed:
                print(f"Error: Consumer group '{args.group}' does not exist.", file=sys.stderr)
                return EXIT_FAILED
            owners: dict[tuple[str, int], wire.DescribedGroupMember] = {}
            for member in group.members:
                for topic, partitions in group_records.decode_assignment(member.member_assignment).partitions:
                    for partition in partitions:
                        owners[(topic, partition)] = member
            if not group.members:
                print(f"Consumer group '{args.group}' has no active members.")
            consumer = Consumer(conn)
            rows = [COLUMNS]
            for tp in sorted(set(committed) | set(owners)):
                end = await consumer.list_offset(tp, -1)
                current = committed.get(tp, -1)
                owner = owners.get(tp)
                rows.append(
                    (
                        args.group,
                        tp[0],
                        str(tp[1]),
                        str(current) if current >= 0 else "-",
                        str(end),
                        str(end - current) if current >= 0 else "-",
                        owner.member_id if owner else "-",
                        (owner.client_host or "-") if owner else "-",
                        (owner.client_id or "-") if owner else "-",
                    )
                )
            widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
            for row in rows:
                print(" ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
            return EXIT_OK
        finally:
            await conn.close()

    return asyncio.run(run())


def group_delete(
    args: argparse.Namespace, connect: Callable[[argparse.Namespace], Awaitable[ClusterConnection]]
) -> int:
    async def run() -> int:
        conn = await connect(args)
        try:
            answer = await _ask(
                conn,
                args.group,
                BrokerApi.DELETE_GROUPS,
                wire.DeleteGroupsRequest(groups_names=(args.group,)),
                wire.DeleteGroupsResponse,
            )
            assert isinstance(answer, wire.DeleteGroupsResponse)
            failed = [r for r in answer.results if r.error]
            if answer.error or failed:
                error = answer.error_code if answer.error else wire.error_code_of(failed[0].error)
                print(
                    f"Error: Deletion of some consumer groups failed:\n* Group '{args.group}' could not be deleted "
                    f"due to: {error.name}",
                    file=sys.stderr,
                )
                return EXIT_FAILED
            print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
            return EXIT_OK
        finally:
            await conn.close()

    return asyncio.run(run())
