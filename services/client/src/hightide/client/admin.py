"""The admin client: topics, partitions, elections and the cluster's description, through the active controller.

Room: services/client. Each call retries NOT_CONTROLLER and timeouts (a controller failover in progress) until
its deadline, then answers with the controller's per-topic or per-partition results, Kafka's error codes included.
"""

from __future__ import annotations

import asyncio
import time
from typing import TypeVar

from hightide.client.connection import ClusterConnection
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import ControllerApi
from hightide.runtime.rpc import RequestFailed

R = TypeVar("R", bound=wire.Response)
_RETRY_BACKOFF_S = 0.1


class Admin:
    def __init__(self, connection: ClusterConnection, *, timeout_s: float = 30.0) -> None:
        self.conn = connection
        self.timeout_s = timeout_s

    async def _call(self, api: ControllerApi, body: wire.Wire, kind: type[R]) -> R:
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                answer = await self.conn.controller(api, body, kind, timeout_s=min(remaining, 5.0))
            except RequestFailed as error:
                if time.monotonic() >= deadline:
                    return kind(error=int(error.error_code), message=str(error))
            else:
                if answer.error_code is not ErrorCode.NOT_CONTROLLER or time.monotonic() >= deadline:
                    return answer
            await asyncio.sleep(_RETRY_BACKOFF_S)  # a new controller takes over within its lease: retry soon

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        assignments: tuple[tuple[int, ...], ...] | None = None,
    ) -> wire.TopicResult:
        topic = wire.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            configs=configs or {},
            assignments=assignments,
        )
        answer = await self._call(
            ControllerApi.CREATE_TOPICS, wire.CreateTopicsRequest(topics=(topic,)), wire.CreateTopicsResponse
        )
        if answer.error:
            return wire.TopicResult(name=name, error=answer.error, message=answer.message)
        return answer.topics[0]

    async def delete_topic(self, name: str) -> wire.TopicResult:
        answer = await self._call(
            ControllerApi.DELETE_TOPICS, wire.DeleteTopicsRequest(topics=(name,)), wire.DeleteTopicsResponse
        )
        if answer.error:
            return wire.TopicResult(name=name, error=answer.error, message=answer.message)
        return answer.topics[0]

    async def create_partitions(
        self, name: str, count: int, assignments: tuple[tuple[int, ...], ...] | None = None
    ) -> wire.CreatePartitionsResponse:
        """Grow the topic to `count` partitions; `assignments` (one replica list per new partition) places them."""
        return await self._call(
            ControllerApi.CREATE_PARTITIONS,
            wire.CreatePartitionsRequest(topic=name, count=count, assignments=assignments),
            wire.CreatePartitionsResponse,
        )

    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: tuple[str, ...] = ()
    ) -> wire.AlterConfigsResponse:
        """Kafka's incrementalAlterConfigs on one topic: SET these configs and DELETE those (back to the default)."""
        body = wire.AlterConfigsRequest(topic=name, set_configs=set_configs, delete_configs=delete_configs)
        return await self._call(ControllerApi.ALTER_CONFIGS, body, wire.AlterConfigsResponse)

    async def elect_leaders(
        self, election_type: str, partitions: tuple[tuple[str, int], ...] | None
    ) -> wire.ElectLeadersResponse:
        refs = (
            None if partitions is None else tuple(wire.TopicPartitionRef(topic=t, partition=p) for t, p in partitions)
        )
        body = wire.ElectLeadersRequest(election_type=election_type, partitions=refs)  # type: ignore[arg-type]
        return await self._call(ControllerApi.ELECT_LEADERS, body, wire.ElectLeadersResponse)

    async def describe_cluster(self) -> wire.DescribeClusterResponse:
        return await self._call(
            ControllerApi.DESCRIBE_CLUSTER, wire.DescribeClusterRequest(), wire.DescribeClusterResponse
        )

    async def describe_topics(self, names: tuple[str, ...] | None = None) -> wire.MetadataResponse:
        return await self.conn.metadata(names)

    # -- partition reassignment (issue 13) -------------------------------------------------------------------------

    async def alter_partition_reassignments(
        self, targets: tuple[tuple[str, int, tuple[int, ...] | None], ...]
    ) -> wire.AlterPartitionReassignmentsResponse:
        """Kafka's alterPartitionReassignments: each (topic, partition, target replicas), None cancelling."""
        partitions = tuple(wire.ReassignablePartition(topic=t, partition=p, replicas=r) for t, p, r in targets)
        body = wire.AlterPartitionReassignmentsRequest(partitions=partitions)
        return await self._call(
            ControllerApi.ALTER_PARTITION_REASSIGNMENTS, body, wire.AlterPartitionReassignmentsResponse
        )

    async def list_partition_reassignments(
        self, partitions: tuple[tuple[str, int], ...] | None = None
    ) -> wire.ListPartitionReassignmentsResponse:
        refs = (
            None if partitions is None else tuple(wire.TopicPartitionRef(topic=t, partition=p) for t, p in partitions)
        )
        body = wire.ListPartitionReassignmentsRequest(partitions=refs)
        return await self._call(
            ControllerApi.LIST_PARTITION_REASSIGNMENTS, body, wire.ListPartitionReassignmentsResponse
        )
