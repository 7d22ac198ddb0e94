"""A client's view of a cluster: the NATS connection, request helpers, and the metadata cache.

Room: services/client. Producers, consumers and the admin client share this. Metadata comes from any broker
(the `brokers.metadata` subject is served by a queue group), so a client needs no bootstrap list: only NATS and
the cluster id. Admin requests go to the active controller's subjects.

The metadata cache follows Kafka's client (`Metadata.updateLatestMetadata`, KIP-320): any broker may answer, and
a broker that has just restarted may be behind the metadata log, so an answer never takes the cache backwards. A
partition's entry is replaced only by one with the same or a newer (leader epoch, partition epoch); a topic the
cache knows is dropped, or its topic id replaced, only by an answer from a metadata log at least as far along
(`metadata_offset`) as the one the cache learned it from; the broker table likewise.

Over NATS nothing tells a client that a broker died: a request already sent to it simply never gets an answer.
Kafka's client sees the closed connection and fails the request at once (NETWORK_EXCEPTION), so `broker_watched`
gives a request the same end: while it waits longer than expected, the metadata is refreshed (at most once per
`watch_every_s` for the whole connection, however many requests wait) and once it shows the request's broker
fenced, restarted (a new broker epoch), or no longer the leader of a partition the request is for (another
leader, or a newer leader epoch), the request ends as NETWORK_EXCEPTION. A request to a broker with no
subscription left (a dead broker's subscriptions go with its connection) fails at once by NATS's no-responders.
And when the client's own NATS connection is lost (its node of a NATS cluster dies) and nats-py reconnects to
another node, a request sent before ends as NETWORK_EXCEPTION at the next watch: it or its answer may have been
lost with the connection, as Kafka's client fails the requests of a closed connection (issue 14).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from nats.aio.client import Client

from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.subjects import BrokerApi, ControllerApi, any_broker_metadata, broker_api, controller_api
from hightide.runtime.nats import NatsSettings, connect
from hightide.runtime.rpc import RequestFailed, request

R = TypeVar("R", bound=wire.Response)
DEFAULT_REQUEST_TIMEOUT_S: Final = 30.0
METADATA_TRY_TIMEOUT_S: Final = 1.0
METADATA_RETRY_BACKOFF_S: Final = 0.1  # Kafka's retry.backoff.ms default


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
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    broker_epoch: int
    fenced: bool
    in_controlled_shutdown: bool


@dataclass(frozen=True, slots=True)
class Leadership:
    """Whom a request for a partition went to, as the metadata said when it was sent: the leader, its leader
    epoch, and the leader's broker epoch (-1 when the broker table did not list it)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    broker_epoch: int


@dataclass(slots=True)
class _TopicEntry:
    topic_id: str
    metadata_offset: int  # of the newest answer that confirmed this topic id


class ClusterConnection:
    def __init__(self, nc: Client, cluster_id: str, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        self.nc = nc
        self.cluster_id = cluster_id
        self.request_timeout_s = request_timeout_s
        self.partitions: dict[str, list[PartitionInfo]] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, _TopicEntry] = {}
        self._brokers_offset = -1
        # One refresh at a time per set of topics, shared by every request that waits on it.
        self._refreshing: dict[tuple[str, ...], asyncio.Future[None]] = {}
        self._refreshed_at: dict[tuple[str, ...], float] = {}

    @classmethod
    async def open(
        cls,
        nats_url: str,
        cluster_id: str,
        *,
        credentials_file: Path | None = None,
        settings: NatsSettings | None = None,
        **kwargs: Any,
    ) -> ClusterConnection:
        """Connect to NATS at `nats_url`, as the user of `credentials_file` (`nats.credentials.file`) when given, or
        with every `nats.*` setting of `settings` (its url and credentials then win over the arguments)."""
        # Reconnect for as long as the caller waits (as a Kafka client does): every request has its own timeout and
        # the producer its delivery.timeout.ms, so a client outlives a NATS restart instead of closing for good after
        # a few refused attempts, and its event relay can still deliver afterwards.
        if settings is None:
            settings = NatsSettings(url=nats_url, credentials_file=credentials_file, name="hightide-client")
        nc = await connect(dataclasses.replace(settings, max_reconnect_attempts=-1))
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

    async def broker_watched(
        self,
        sent: Sequence[Leadership],
        api: BrokerApi,
        body: wire.Wire,
        kind: type[R],
        *,
        timeout_s: float,
        watch_after_s: float,
        watch_every_s: float,
    ) -> R:
        """A request to the leader of `sent` (all the same broker) that ends as NETWORK_EXCEPTION once the
        metadata shows that leader gone from any of them (Kafka's disconnect). The metadata is watched only after
        the request has waited `watch_after_s`, then refreshed at most every `watch_every_s`."""
        assert sent and len({s.leader for s in sent}) == 1, "one request goes to one broker"
        assert watch_every_s > 0
        topics = tuple(sorted({s.topic for s in sent}))
        reconnects = self._reconnects()
        answer = asyncio.ensure_future(self.broker(sent[0].leader, api, body, kind, timeout_s=timeout_s))
        try:
            # The request ends by itself at its timeout (REQUEST_TIMED_OUT); the watch only ends it sooner.
            done, _ = await asyncio.wait({answer}, timeout=watch_after_s)
            while not done:
                if self._reconnects() != reconnects:
                    # Issue 14 (clustered NATS): the NATS connection the request went out on died (its node was
                    # killed) and the client reconnected to another node. The request or its answer may have been
                    # lost with it, and nothing else would end the wait before request.timeout.ms, while later
                    # requests go through and push this one's sequence out of the leader's five-batch
                    # deduplication window: Kafka's client fails the requests of a closed connection at once.
                    raise RequestFailed(
                        f"the NATS connection the request to broker {sent[0].leader} went out on was lost",
                        ErrorCode.NETWORK_EXCEPTION,
                    )
                await self.refresh(topics, max_age_s=watch_every_s)
                if answer.done():
                    break  # the real answer, if it came meanwhile, wins
                gone = next((s for s in sent if self.leadership_moved(s)), None)
                if gone is not None:
                    raise RequestFailed(
                        f"broker {gone.leader} is no longer the leader of {gone.topic}-{gone.partition} "
                        f"(leader epoch {gone.leader_epoch}) or has left the cluster",
                        ErrorCode.NETWORK_EXCEPTION,
                    )
                done, _ = await asyncio.wait({answer}, timeout=watch_every_s)
            return answer.result()
        finally:
            if not answer.done():
                answer.cancel()
                with contextlib.suppress(asyncio.CancelledError, RequestFailed):
                    await answer

    def _reconnects(self) -> int:
        """How many times the NATS connection has been re-established (nats-py's own count)."""
        return int(self.nc.stats.get("reconnects", 0))

    # -- metadata ----------------------------------------------------------------------------------------------

    async def metadata(
        self, topics: tuple[str, ...] | None = None, timeout_s: float | None = None
    ) -> wire.MetadataResponse:
        """The cluster metadata from any broker; the cache takes what in it is not older than what it has."""
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
            except RequestFailed as error:
                if time.monotonic() >= deadline:
                    raise
                if error.error_code is ErrorCode.BROKER_NOT_AVAILABLE:
                    # No broker listens at all (NATS answered at once): retry.backoff.ms, not a busy loop.
                    await asyncio.sleep(min(METADATA_RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0)))
        if answer.error_code is ErrorCode.NONE:
            self.update_metadata(answer)
        return answer

    async def refresh(self, topics: tuple[str, ...], *, max_age_s: float = 0.0) -> None:
        """Fresh metadata for `topics` (one short try; a failure leaves the cache as it is). Callers that ask
        while a refresh of the same topics is under way share it, and one finished less than `max_age_s` ago is
        fresh enough: however many requests wait, the brokers see one metadata request per interval."""
        key = tuple(sorted(topics))
        running = self._refreshing.get(key)
        if running is None:
            if time.monotonic() - self._refreshed_at.get(key, -1e9) < max_age_s:
                return
            running = self._refreshing[key] = asyncio.ensure_future(self._refresh_once(key))
        await asyncio.shield(running)

    async def _refresh_once(self, key: tuple[str, ...]) -> None:
        try:
            with contextlib.suppress(RequestFailed):
                await self.metadata(key, timeout_s=METADATA_TRY_TIMEOUT_S)
        finally:
            self._refreshed_at[key] = time.monotonic()
            del self._refreshing[key]

    async def partitions_for(self, topic: str) -> list[PartitionInfo]:
        if topic not in self.partitions:
            await self.metadata((topic,))
        found = self.partitions.get(topic)
        if not found:
            raise ClientError(f"unknown topic {topic}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return found

    async def wait_for_partitions(
        self, topic: str, timeout_s: float, retry_backoff_s: float, partition: int | None = None
    ) -> list[PartitionInfo]:
        """Kafka's waitOnMetadata: the topic's partitions (and `partition` among them), asking again every
        `retry_backoff_s` while the metadata does not have them, for at most `timeout_s`. A broker that has just
        restarted may call a live topic unknown, so an unknown topic is an answer to wait past, not a failure."""
        deadline = time.monotonic() + timeout_s
        error = ErrorCode.REQUEST_TIMED_OUT  # what to report if no broker answers at all
        while True:
            known = self.partitions.get(topic)
            if known and (partition is None or partition < len(known)):
                return known
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = f"Topic {topic}" if partition is None or not known else f"Partition {partition} of topic {topic}"
                raise ClientError(f"{what} not present in metadata after {timeout_s * 1000:.0f} ms.", error)
            try:
                answer = await self.metadata((topic,), timeout_s=min(remaining, METADATA_TRY_TIMEOUT_S))
                answered = next((t for t in answer.topics if t.name == topic), None)
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if answered is not None and answered.error:
                    error = wire.error_code_of(answered.error)
            except RequestFailed as failed:
                error = failed.error_code
            known = self.partitions.get(topic)
            if not (known and (partition is None or partition < len(known))):
                await asyncio.sleep(min(retry_backoff_s, max(deadline - time.monotonic(), 0)))  # retry.backoff.ms

    def leader_of(self, topic: str, partition: int) -> PartitionInfo | None:
        infos = self.partitions.get(topic)
        if infos is None or partition >= len(infos):
            return None
        return infos[partition]

    def leadership(self, topic: str, partition: int) -> Leadership | None:
        """The partition's leader as the cache has it now, or None when it has no leader."""
        info = self.leader_of(topic, partition)
        if info is None or info.leader < 0:
            return None
        broker = self.brokers.get(info.leader)
        broker_epoch = -1 if broker is None else broker.broker_epoch
        return Leadership(topic, partition, info.leader, info.leader_epoch, broker_epoch)

    def leadership_moved(self, sent: Leadership) -> bool:
        """Whether the cache now says `sent.leader` can no longer answer for the partition as its leader: another
        leader or a newer leader epoch, the broker fenced, or registered again (a new broker epoch)."""
        now = self.leader_of(sent.topic, sent.partition)
        if now is None or now.leader != sent.leader or now.leader_epoch > sent.leader_epoch:
            return True
        broker = self.brokers.get(sent.leader)
        if broker is None:
            return sent.broker_epoch >= 0  # listed when sent, gone now: unregistered
        return broker.fenced or (sent.broker_epoch >= 0 and broker.broker_epoch != sent.broker_epoch)

    def update_metadata(self, answer: wire.MetadataResponse) -> None:
        """Take an answer into the cache, keeping whatever in the cache is newer (the module docstring)."""
        offset = answer.metadata_offset
        if answer.brokers and offset >= self._brokers_offset:
            self.brokers = {
                b.broker_id: BrokerInfo(b.broker_id, b.broker_epoch, b.fenced, b.in_controlled_shutdown)
                for b in answer.brokers
            }
            self._brokers_offset = offset
        for topic in answer.topics:
            self._apply_topic(topic, offset)

    def _apply_topic(self, topic: wire.TopicMetadata, offset: int) -> None:
        known = self._topics.get(topic.name)
        if topic.error:
            # Unknown to this broker: believe it only from a metadata log at least as far along as ours.
            if known is not None and offset >= known.metadata_offset:
                del self._topics[topic.name]
                self.partitions.pop(topic.name, None)
            return
        fresh = [
            PartitionInfo(topic.name, p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.partition_epoch)
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        ]
        if known is None or known.topic_id != topic.topic_id:
            if known is not None and offset < known.metadata_offset:
                return  # a broker behind the log still has the deleted topic of that name
            self._topics[topic.name] = _TopicEntry(topic.topic_id, offset)
            self.partitions[topic.name] = fresh
            return
        known.metadata_offset = max(known.metadata_offset, offset)
        self.partitions[topic.name] = _merge(self.partitions.get(topic.name, []), fresh)


def _merge(old: list[PartitionInfo], new: list[PartitionInfo]) -> list[PartitionInfo]:
    """Per partition the newer entry by (leader epoch, partition epoch), as Kafka's client keeps the newer leader
    epoch; partitions are only ever added, so the longer list's tail is kept."""
    merged = []
    for index in range(max(len(old), len(new))):
        before = old[index] if index < len(old) else None
        after = new[index] if index < len(new) else None
        if before is None or (
            after is not None
            and (after.leader_epoch, after.partition_epoch) >= (before.leader_epoch, before.partition_epoch)
        ):
            assert after is not None
            merged.append(after)
        else:
            merged.append(before)
    return merged
