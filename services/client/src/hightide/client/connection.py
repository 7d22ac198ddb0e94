"""A client's view of a cluster: the NATS connection, request helpers, and the metadata cache.

Room: services/client. Producers, consumers and the admin client share this. Metadata comes from any broker
(the `brokers.metadata` subject is served by a queue group), so a client needs no bootstrap list: only NATS and
the cluster id. Admin requests go to the active controller's subjects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client

from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.subjects import BrokerApi, ControllerApi, any_broker_metadata, broker_api, controller_api
from hightide.runtime.nats import NatsSettings, connect
from hightide.runtime.rpc import RequestFailed, request

R = TypeVar("R", bound=wire.Response)
DEFAULT_REQUEST_TIMEOUT_S = 30.0
METADATA_TRY_TIMEOUT_S = 1.0


class ClientError(HightideError):
    """An operation failed with a Kafka error code (the message says which)."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class ClusterConnection:
    def __init__(self, nc: Client, cluster_id: str, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        self.nc = nc
        self.cluster_id = cluster_id
        self.request_timeout_s = request_timeout_s
        self.partitions: dict[str, list[PartitionInfo]] = {}

    @classmethod
    async def open(cls, nats_url: str, cluster_id: str, **kwargs: Any) -> ClusterConnection:
        # Reconnect for as long as the caller waits (as a Kafka client does): every request has its own timeout and
        # the producer its delivery.timeout.ms, so a client outlives a NATS restart instead of closing for good after
        # a few refused attempts, and its event relay can still deliver afterwards.
        nc = await connect(NatsSettings(url=nats_url, name="hightide-client", max_reconnect_attempts=-1))
        return cls(nc, cluster_id, **kwargs)

    async def close(self) -> None:
        await self.nc.drain()

    async def controller(self, api: ControllerApi, body: wire.Wire, kind: type[R], timeout_s: float | None = None) -> R:
        return await request(
            self.nc,
            controller_api(self.cluster_id, api),
            body,
            kind,
            timeout_s=timeout_s or self.request_timeout_s,
            unavailable=ErrorCode.NOT_CONTROLLER,
        )

    async def broker(
        self, broker_id: int, api: BrokerApi, body: wire.Wire, kind: type[R], timeout_s: float | None = None
    ) -> R:
        return await request(
            self.nc,
            broker_api(self.cluster_id, broker_id, api),
            body,
            kind,
            timeout_s=timeout_s or self.request_timeout_s,
        )

    async def metadata(
        self, topics: tuple[str, ...] | None = None, timeout_s: float | None = None
    ) -> wire.MetadataResponse:
        """The cluster metadata from any broker; refreshes the partition cache for the topics answered."""
        # Any broker answers (a queue group), and NATS picks one at random: a paused or dying broker may get the
        # request, so each try is short and the next try likely reaches another member.
        deadline = time.monotonic() + (timeout_s or self.request_timeout_s)
        while True:
            try:
                answer = await request(
                    self.nc,
                    any_broker_metadata(self.cluster_id),
                    wire.MetadataRequest(topics=topics),
                    wire.MetadataResponse,
                    timeout_s=max(min(METADATA_TRY_TIMEOUT_S, deadline - time.monotonic()), 0.05),
                )
                break
            except RequestFailed:
                if time.monotonic() >= deadline:
                    raise
        for topic in answer.topics:
            if topic.error == 0:
                self.partitions[topic.name] = [
                    PartitionInfo(topic.name, p.partition, p.leader, p.leader_epoch, p.replicas, p.isr)
                    for p in topic.partitions
                ]
            else:
                self.partitions.pop(topic.name, None)
        return answer

    async def partitions_for(self, topic: str) -> list[PartitionInfo]:
        if topic not in self.partitions:
            await self.metadata((topic,))
        found = self.partitions.get(topic)
        if not found:
            raise ClientError(f"unknown topic {topic}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found

    def leader_of(self, topic: str, partition: int) -> PartitionInfo | None:
        infos = self.partitions.get(topic)
        if infos is None or partition >= len(infos):
            return None
        return infos[partition]
