"""The consumer: reads assigned partitions from given offsets, from each partition's leader; with `group.id` and
`subscribe`, a member of a consumer group (`group_member.GroupMember` decides what it reads and commits).

Room: services/client. A fetch goes to the leader with `current_leader_epoch`, long-polls (`fetch.max.wait.ms`),
and the leader answers only records below its high watermark, so a consumer never sees an uncommitted record.
Every error Kafka's fetcher retries (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
KAFKA_STORAGE_ERROR, a broker that is gone, ...) refreshes the metadata and retries after `retry.backoff.ms`;
OFFSET_OUT_OF_RANGE resets the position by `auto.offset.reset` (earliest or latest) or fails (none); anything
else (CORRUPT_MESSAGE, ...) fails the poll.

A fetch that outlives `fetch.max.wait.ms` by `retry.backoff.ms` watches the metadata (connection.py,
`broker_watched`): once its leader is fenced, restarted or no longer leads one of its partitions, the fetch ends
at once and the consumer goes on with the new leader, instead of waiting out `request.timeout.ms` on a dead one.
ListOffsets likewise, retried until `default.api.timeout.ms`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from hightide.client.connection import ClientError, ClusterConnection, Leadership
from hightide.client.group_member import GroupMember
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.records import InvalidRecordBatch, decode_batch, iter_batch_headers
from hightide.protocol.subjects import BrokerApi
from hightide.runtime.rpc import RequestFailed

# Kafka's FetchCollector fails the poll on CORRUPT_MESSAGE (retriable for a producer, not for a reader); it
# refreshes and retries the rest of the retriable errors, and an unknown server error.
_FAILS_A_FETCH: Final = frozenset({ErrorCode.CORRUPT_MESSAGE})
_RETRIED_TOO: Final = frozenset({ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.UNKNOWN_SERVER_ERROR})


def refreshes_and_retries(error: ErrorCode) -> bool:
    """Whether a fetch or ListOffsets error makes the consumer refresh its metadata and try again."""
    return (error.retriable and error not in _FAILS_A_FETCH) or error in _RETRIED_TOO


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    max_partition_fetch_bytes: int = 1_048_576
    fetch_max_bytes: int = 52_428_800
    max_poll_records: int = 500
    auto_offset_reset: str = "latest"
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    default_api_timeout_ms: int = 60_000
    # consumer groups (issue 13), Kafka's names and defaults
    group_id: str | None = None
    group_instance_id: str | None = None
    client_id: str = "hightide-consumer"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: str = "range,cooperative-sticky"

    @property
    def strategies(self) -> tuple[str, ...]:
        """`partition.assignment.strategy` as assignor names, most preferred first."""
        return tuple(s.strip() for s in self.partition_assignment_strategy.split(",") if s.strip())

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ConsumerConfig:
        values: dict[str, object] = {}
        for name, text in props.items():
            attribute = name.replace(".", "_")
            if attribute in _TEXT_CONFIGS:
                values[attribute] = _text_config(name, text)
            elif attribute == "enable_auto_commit":
                if text not in ("true", "false"):
                    raise ValueError(f"Invalid value {text} for configuration {name}")
                values[attribute] = text == "true"
            elif attribute == "auto_offset_reset":
                if text not in ("earliest", "latest", "none"):
                    raise ValueError(f"Invalid value {text} for configuration {name}")
                values[attribute] = text
            elif attribute in cls.__dataclass_fields__:
                try:
                    values[attribute] = int(text)
                except ValueError:
                    raise ValueError(f"Invalid value {text} for configuration {name}") from None
            else:
                raise ValueError(f"Unknown consumer config name: {name}")
        return cls(**values)  # type: ignore[arg-type]


_TEXT_CONFIGS: Final = frozenset({"group_id", "group_instance_id", "client_id", "partition_assignment_strategy"})
_STRATEGY_ALIASES: Final = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def _text_config(name: str, text: str) -> str:
    if name != "partition.assignment.strategy":
        if not text:
            raise ValueError(f"Invalid value {text} for configuration {name}")
        return text
    names = [_STRATEGY_ALIASES.get(s.strip(), s.strip()) for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in ("range", "roundrobin", "sticky", "cooperative-sticky")]
    if not names or unknown:
        raise ValueError(f"Invalid value {text} for configuration {name}")
    return ",".join(names)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class ConsumeFailed(ClientError):
    pass


class Consumer:
    def __init__(self, connection: ClusterConnection, config: ConsumerConfig | None = None) -> None:
        self.conn = connection
        self.config = config or ConsumerConfig()
        self.positions: dict[tuple[str, int], int] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self._buffered: list[ConsumerRecord] = []
        self._fetches: dict[int, asyncio.Task[None]] = {}  # one fetch in flight per leader
        self._fetching: set[tuple[str, int]] = set()  # partitions in those fetches
        self._group: GroupMember | None = None
        self.on_event: Callable[[Event], None] | None = None
        """Where the consumer's own events go (a group member's PartitionsAssigned), if anywhere."""

    def subscribe(self, topics: Sequence[str]) -> None:
        """Read `topics` as a member of `group.id`: the group decides which partitions, from its committed offsets."""
        if not self.config.group_id:
            raise ConsumeFailed("subscribe needs group.id", ErrorCode.INVALID_GROUP_ID)
        self._group = GroupMember(self, topics)

    @property
    def group(self) -> GroupMember | None:
        return self._group

    async def commit(self) -> None:
        """Commit what `poll` returned so far (Kafka's commitSync)."""
        if self._group is None:
            raise ConsumeFailed("commit needs a group (subscribe with group.id)", ErrorCode.INVALID_GROUP_ID)
        await self._group.commit()

    async def reassign(self, positions: Mapping[tuple[str, int], int]) -> None:
        """Read exactly these partitions from these offsets: fetches in flight and records not yet returned are
        dropped (the group moved partitions)."""
        await self._cancel_fetches()
        self._buffered.clear()
        self.positions = dict(positions)

    async def close(self) -> None:
        """Leave the group (committing first when auto-commit is on), cancel the fetches in flight."""
        if self._group is not None:
            await self._group.close()
        await self._cancel_fetches()

    async def _cancel_fetches(self) -> None:
        """Cancel the fetches in flight (records they would bring are not taken)."""
        for task in self._fetches.values():
            task.cancel()
        await asyncio.gather(*self._fetches.values(), return_exceptions=True)
        self._fetches.clear()
        self._fetching.clear()

    def assign(self, positions: Mapping[tuple[str, int], int]) -> None:
        """Read these partitions from these offsets (-2: the log start, -1: the end, Kafka's ListOffsets codes)."""
        self.positions.update(positions)

    async def resolve_positions(self) -> None:
        """Turn -2/-1 positions into offsets (ListOffsets earliest/latest at each leader)."""
        for tp, position in list(self.positions.items()):
            if position < 0:
                self.positions[tp] = await self.list_offset(tp, position)

    async def list_offset(self, tp: tuple[str, int], timestamp: int) -> int:
        """The offset for `timestamp` (-2 earliest, -1 latest) from the partition's leader, retrying what Kafka
        retries until default.api.timeout.ms (then the last error)."""
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        error = ErrorCode.LEADER_NOT_AVAILABLE
        while True:
            leadership = self.conn.leadership(*tp)
            if leadership is None:
                await self._refresh(tp[0])
                leadership = self.conn.leadership(*tp)
            if leadership is not None:
                offset, error = await self._list_offset_once(leadership, timestamp, deadline)
                if error is ErrorCode.NONE:
                    return offset
                if not refreshes_and_retries(error):
                    raise ConsumeFailed(f"ListOffsets of {tp[0]}-{tp[1]} failed", error)
            if time.monotonic() + self.config.retry_backoff_ms / 1000 >= deadline:
                raise ConsumeFailed(f"no offset for {tp[0]}-{tp[1]} within default.api.timeout.ms", error)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # retry backoff before fresh metadata
            await self._refresh(tp[0])

    async def _list_offset_once(self, leadership: Leadership, timestamp: int, deadline: float) -> tuple[int, ErrorCode]:
        query = wire.ListOffsetsPartition(topic=leadership.topic, partition=leadership.partition, timestamp=timestamp)
        backoff_s = self.config.retry_backoff_ms / 1000
        try:
            answer = await self.conn.broker_watched(
                (leadership,),
                BrokerApi.LIST_OFFSETS,
                wire.ListOffsetsRequest(partitions=(query,)),
                wire.ListOffsetsResponse,
                timeout_s=max(min(self.config.request_timeout_ms / 1000, deadline - time.monotonic()), 0.001),
                watch_after_s=backoff_s,
                watch_every_s=backoff_s,
            )
        except RequestFailed as failed:
            return -1, failed.error_code
        if answer.error:
            return -1, answer.error_code
        (result,) = answer.partitions
        return result.offset, wire.error_code_of(result.error)

    async def _refresh(self, topic: str) -> None:
        await self.conn.refresh((topic,), max_age_s=self.config.retry_backoff_ms / 1000)

    async def poll(self, max_records: int | None = None) -> list[ConsumerRecord]:
        """The next records (up to max.poll.records, and `max_records`), waiting at most fetch.max.wait.ms for
        some. In a group, it first takes part in the group (joins, heartbeats, auto-commits)."""
        if self._group is not None:
            await self._group.before_poll()
        if not self._buffered:
            await self._fetch_all()
        count = self.config.max_poll_records if max_records is None else min(max_records, self.config.max_poll_records)
        records, self._buffered = self._buffered[:count], self._buffered[count:]
        if self._group is not None:
            self._group.took(records)
        return records

    async def _fetch_all(self) -> None:
        """Keep one fetch in flight per leader and return once any brings records, or after fetch.max.wait.ms: as
        in Kafka's fetcher, one leader's long poll never holds back another's records, and a leader that answers
        empty is asked again at once."""
        deadline = time.monotonic() + self.config.fetch_max_wait_ms / 1000
        while not self._buffered:
            await self._start_fetches()
            if not self._fetches:
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # no leader known yet: back off, retry
                for topic in {tp[0] for tp in self.positions}:
                    await self._refresh(topic)
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            done, _ = await asyncio.wait(self._fetches.values(), timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for leader, task in list(self._fetches.items()):
                if task in done:
                    del self._fetches[leader]
                    task.result()  # a fetch's ConsumeFailed reaches the caller of poll

    async def _start_fetches(self) -> None:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in self.positions:
            if tp in self._fetching:
                continue
            info = self.conn.leader_of(*tp)
            if info is None:
                await self._refresh(tp[0])
                info = self.conn.leader_of(*tp)
            if info is not None and info.leader >= 0:
                by_leader.setdefault(info.leader, []).append(tp)
        for leader, tps in by_leader.items():
            if leader not in self._fetches:  # else its other partitions go in the leader's next fetch
                self._fetching.update(tps)
                self._fetches[leader] = asyncio.create_task(self._fetch_from(leader, tps))

    async def _fetch_from(self, leader: int, tps: list[tuple[str, int]]) -> None:
        try:
            await self._fetch_partitions(leader, tps)
        finally:
            self._fetching.difference_update(tps)

    async def _fetch_partitions(self, leader: int, tps: list[tuple[str, int]]) -> None:
        partitions = tuple(
            wire.FetchPartitionRequest(
                topic=t,
                partition=p,
                fetch_offset=self.positions[(t, p)],
                current_leader_epoch=self._epoch(t, p),
                partition_max_bytes=self.config.max_partition_fetch_bytes,
            )
            for t, p in tps
        )
        body = wire.FetchRequest(
            replica_id=-1,
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes,
            partitions=partitions,
        )
        backoff_s = self.config.retry_backoff_ms / 1000
        try:
            answer = await self.conn.broker_watched(
                [self._sent_to(leader, t, p) for t, p in tps],
                BrokerApi.FETCH,
                body,
                wire.FetchResponse,
                timeout_s=(self.config.fetch_max_wait_ms + self.config.request_timeout_ms) / 1000,
                watch_after_s=self.config.fetch_max_wait_ms / 1000 + backoff_s,  # overdue: the long poll is over
                watch_every_s=backoff_s,
            )
        except RequestFailed:
            await self._backoff_and_refresh({t for t, _ in tps})
            return
        stale: set[str] = set()
        for result, asked in zip(answer.partitions, partitions, strict=False):
            tp = (result.topic, result.partition)
            if self.positions.get(tp) != asked.fetch_offset:
                continue  # assigned elsewhere while the fetch was in flight: its answer is out of date
            error = wire.error_code_of(result.error)
            if error is ErrorCode.NONE:
                self.high_watermarks[tp] = result.high_watermark
                self._take(tp, result.records)
            elif error is ErrorCode.OFFSET_OUT_OF_RANGE:
                await self._reset(tp)
            elif refreshes_and_retries(error):
                stale.add(result.topic)
            else:
                raise ConsumeFailed(f"fetch of {tp[0]}-{tp[1]} failed", error)
        if stale or answer.error:
            await self._backoff_and_refresh(stale or {t for t, _ in tps})

    def _sent_to(self, leader: int, topic: str, partition: int) -> Leadership:
        now = self.conn.leadership(topic, partition)
        if now is not None and now.leader == leader:
            return now
        return Leadership(topic, partition, leader, -1, -1)  # the cache has moved on: the watch's first look ends it

    async def _backoff_and_refresh(self, topics: set[str]) -> None:
        await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # Kafka's retry.backoff.ms before a retry
        for topic in topics:
            await self._refresh(topic)

    def _epoch(self, topic: str, partition: int) -> int:
        info = self.conn.leader_of(topic, partition)
        return -1 if info is None else info.leader_epoch

    async def _reset(self, tp: tuple[str, int]) -> None:
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise ConsumeFailed(
                f"offset {self.positions[tp]} of {tp[0]}-{tp[1]} is out of range", ErrorCode.OFFSET_OUT_OF_RANGE
            )
        self.positions[tp] = await self.list_offset(tp, -2 if policy == "earliest" else -1)

    def _take(self, tp: tuple[str, int], data: bytes) -> None:
        position = self.positions[tp]
        try:
            for pos, _ in iter_batch_headers(data):
                header, records = decode_batch(data, pos)
                for record in records:
                    if record.offset < position:
                        continue  # a batch is returned whole; skip what precedes the position
                    self._buffered.append(
                        ConsumerRecord(tp[0], tp[1], record.offset, record.timestamp, record.key, record.value)
                    )
                    position = record.offset + 1
                position = max(position, header.next_offset)
        except InvalidRecordBatch as error:
            raise ConsumeFailed(f"corrupt records from {tp[0]}-{tp[1]}: {error}", ErrorCode.CORRUPT_MESSAGE) from None
        self.positions[tp] = position
