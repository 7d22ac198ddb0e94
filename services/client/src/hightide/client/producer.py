"""The async producer: records batched per partition, sent to each partition's leader, retried until acknowledged.

Room: services/client. Kafka's KafkaProducer, reduced to what Hightide serves today:

- partition: explicit, else murmur2 of the key (Kafka's), else Kafka's uniform sticky partitioner (KIP-794,
  `hightide.core.partitioner.BuiltInPartitioner`): one partition per topic until `batch.size` bytes have gone to it
  (up to twice that while its last batch is not full), then another, weighted by the inverse of the partitions'
  queued batches (`partitioner.adaptive.partitioning.enable`, default true), leaving out partitions whose leader
  has had batches ready but taken none for `partitioner.availability.timeout.ms` (default 0: never);
  `partitioner.ignore.keys` (default false) makes keyed records sticky too;
- batching per partition by `batch.size` bytes and `linger.ms`; up to `max.in.flight.requests.per.connection`
  (5) batches in flight per partition. Sequence numbers keep them in order at the leader: after a retriable
  refusal no new batch goes until the window is back, then the refused ones go again one by one in sequence order
  (an out-of-order answer caused by an earlier refused batch is retried with it, as Kafka's Sender does);
- `acks` 0, 1 or all; every error Kafka's clients retry (`ErrorCode.retriable`: NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT, NETWORK_EXCEPTION, …) is
  retried `retry.backoff.ms` after the batch's last attempt, with fresh metadata;
- `delivery.timeout.ms` bounds every record, from the creation of its batch: an attempt waits at most what is left
  of it, and a batch still queued, waiting to be retried or in flight when it runs out fails then (Kafka's
  expiry), with the last attempt's error, or REQUEST_TIMED_OUT when it was never sent or its attempt timed out;
- failover (Kafka's disconnect, over NATS where nothing closes): an attempt that waits longer than
  `retry.backoff.ms` watches the metadata, and ends as NETWORK_EXCEPTION once it shows the leader it went to
  fenced, restarted or no longer leader (connection.py, `broker_watched`); a leader with no subscription left
  fails a request at once (NATS's no-responders). Either way the batch goes again, with the same producer id,
  epoch and sequence, to the leader the metadata names, so the new leader keeps it exactly once;
- idempotence (`enable.idempotence`, Kafka's default): a producer id from the controller and a sequence number per
  partition in every batch, so the leader drops a retried batch it already has (KIP-98). A batch keeps its
  sequence across retries; after a batch fails for good the producer takes a new producer id;
- `send` returns a RecordFuture that shares its batch's one future (Kafka's FutureRecordMetadata). It waits, for
  `max.block.ms` in all, while `buffer.memory` bytes are unacknowledged and until the metadata has the topic and
  partition (Kafka's waitOnMetadata: a broker that has just restarted may call a live topic unknown); a record
  over `max.request.size` is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hightide.client.connection import ClientError, ClusterConnection, PartitionInfo
from hightide.core.partitioner import (
    BuiltInPartitioner,
    NodeLatencyStats,
    PartitionLoad,
    StickyPartitionInfo,
    load_stats_input,
    partition_for_key,
)
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import encode_batch
from hightide.protocol.subjects import BrokerApi, ControllerApi, broker_api
from hightide.protocol.wire import encode
from hightide.runtime.rpc import RequestFailed

RECORD_OVERHEAD_BYTES: Final = 24
_ACKS: Final = {"all": -1, "-1": -1, "1": 1, "0": 0}
_BOOLEANS: Final = frozenset(
    {"enable_idempotence", "partitioner_adaptive_partitioning_enable", "partitioner_ignore_keys"}
)


# Errors after which a produce may have been appended all the same (the request may have reached the leader).
# Answers after which the records may be in the log all the same. NOT_LEADER_OR_FOLLOWER is one: a leader that loses
# its leadership answers the produces it appended and still waits on with it (Kafka's DelayedProduce does the same),
# and the new leader may hold those records.
INDEFINITE_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


class ProduceFailed(ClientError):
    """A record was not acknowledged: the error code is the last failure's. `indefinite` is True when some
    attempt ended without a definite answer, so the record may be in the log all the same."""

    indefinite: bool = False


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    acks: int = -1
    linger_ms: int = 5
    batch_size: int = 16_384
    retries: int = 2_147_483_647
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    enable_idempotence: bool = True
    max_request_size: int = 1_048_576
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    max_in_flight_requests_per_connection: int = 5
    partitioner_adaptive_partitioning_enable: bool = True
    partitioner_availability_timeout_ms: int = 0
    partitioner_ignore_keys: bool = False

    def __post_init__(self) -> None:
        if self.partitioner_availability_timeout_ms < 0:
            raise ValueError(
                f"Invalid value {self.partitioner_availability_timeout_ms} for configuration "
                "partitioner.availability.timeout.ms: Value must be at least 0"
            )
        if self.max_in_flight_requests_per_connection < 1:
            raise ValueError("max.in.flight.requests.per.connection must be at least 1")
        if self.enable_idempotence and self.max_in_flight_requests_per_connection > 5:
            # Kafka's ConfigException: the leader remembers only the last five batches of each producer.
            raise ValueError(
                "Must set max.in.flight.requests.per.connection to at most 5 to use the idempotent producer."
            )

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ProducerConfig:
        """Kafka's producer config names; an unknown name or bad value raises ValueError."""
        values: dict[str, object] = {}
        for name, text in props.items():
            attribute = name.replace(".", "_")
            if attribute == "acks":
                if text not in _ACKS:
                    raise ValueError(f"Invalid value {text} for configuration acks")
                values["acks"] = _ACKS[text]
            elif attribute in _BOOLEANS:
                if text.strip().lower() not in ("true", "false"):
                    raise ValueError(
                        f"Invalid value {text} for configuration {name}: Expected value to be either true or false"
                    )
                values[attribute] = text.strip().lower() == "true"
            elif attribute in cls.__dataclass_fields__:
                try:
                    values[attribute] = int(text)
                except ValueError:
                    raise ValueError(f"Invalid value {text} for configuration {name}") from None
            else:
                raise ValueError(f"Unknown producer config name: {name}")
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int


class _Batch:
    """Records of one partition sent together (Kafka's ProducerBatch): filled by `send` until it is full or taken,
    then delivered whole. Its one future carries the base offset, so a record's outcome costs no future of its
    own (the per-record futures and their callbacks were the producer's bottleneck)."""

    __slots__ = (
        "attempts",
        "created",
        "deadline",
        "encoded",
        "future",
        "generation",
        "keys",
        "last_attempt_end",
        "last_error",
        "maybe_written",
        "producer_id",
        "sent_index",
        "sequence",
        "size",
        "timestamps",
        "values",
    )

    def __init__(self, deadline: float, created: float, future: asyncio.Future[int]) -> None:
        self.values: list[bytes] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.size = 0
        self.deadline = deadline
        self.created = created
        self.future = future
        self.encoded = b""  # the batch as sent: encoded once, with its sequence, and sent again as is on a retry
        self.sequence = -1
        self.producer_id = -1
        self.generation = 0  # which producer id of this producer it was encoded with (0, 1, ...: in order)
        self.attempts = 0
        self.last_attempt_end = 0.0  # monotonic seconds: retry.backoff.ms counts from here
        self.last_error = ErrorCode.REQUEST_TIMED_OUT  # of the last attempt (the error a failure reports)
        self.maybe_written = False  # some attempt ended without a definite answer
        self.sent_index = 0  # the partition's count of batches sent when this one was first sent (issue 14)


class RecordFuture:
    """The outcome of one sent record (Kafka's FutureRecordMetadata): its batch's outcome at its place in the
    batch. Await it for the RecordMetadata, or ask `done()`, `result()` and `exception()` as of a Future."""

    __slots__ = ("_batch", "_index", "partition", "topic")

    def __init__(self, batch: _Batch, index: int, topic: str, partition: int) -> None:
        self._batch, self._index, self.topic, self.partition = batch, index, topic, partition

    def done(self) -> bool:
        return self._batch.future.done()

    def exception(self) -> BaseException | None:
        return self._batch.future.exception()

    def result(self) -> RecordMetadata:
        base_offset = self._batch.future.result()
        return RecordMetadata(self.topic, self.partition, base_offset + self._index if base_offset >= 0 else -1)

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        """Call `callback(self)` once the outcome is known (Kafka's send callback)."""
        self._batch.future.add_done_callback(lambda _future: callback(self))

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        yield from self._batch.future.__await__()
        return self.result()


@dataclass(slots=True)
class _PartitionQueue:
    topic: str
    partition: int
    batches: deque[_Batch] = field(default_factory=deque)  # filling, not yet sent
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sequence: int = 0  # the next batch's base sequence (assigned when it is sent, as Kafka's drain does)
    in_flight: int = 0
    unresolved: list[_Batch] = field(default_factory=list)  # sent, without an outcome yet (in flight or to retry)
    retry: list[_Batch] = field(default_factory=list)  # refused retriably: sent again one by one, in sequence order
    sent: int = 0  # batches sent so far (first sends), to bound how far past the oldest unresolved one they go


class Producer:
    """Use as `async with Producer(connection, config) as producer: await producer.send(...)`."""

    def __init__(self, connection: ClusterConnection, config: ProducerConfig | None = None) -> None:
        self.conn = connection
        self.config = config or ProducerConfig()
        self.producer_id = -1
        self.producer_epoch = -1
        self._generation = 0  # bumped with each new producer id
        self._abandoned: set[int] = set()  # producer ids being replaced after a batch of theirs failed
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._topic_queues: dict[str, dict[int, _PartitionQueue]] = {}  # the same queues, by topic and partition
        self._partitioners: dict[str, BuiltInPartitioner] = {}  # Kafka's TopicInfo.builtInPartitioner
        self._node_stats: dict[int, NodeLatencyStats] = {}  # by leader (partitioner.availability.timeout.ms)
        self._random = random.Random()  # the partitioner's draws (Kafka's ThreadLocalRandom)
        self._group: asyncio.TaskGroup | None = None
        self._closing = False
        self._flushing = 0
        self._unfinished: set[asyncio.Future[int]] = set()  # batches queued or in flight
        self._buffered = 0  # bytes of records not yet acknowledged or failed (buffer.memory)
        self._space = asyncio.Event()
        self._space.set()

    async def __aenter__(self) -> Producer:
        if self.config.enable_idempotence:
            await self._init_producer_id()
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        for queue in self._queues.values():
            queue.wake.set()
        assert self._group is not None
        await self._group.__aexit__(None, None, None)

    async def _init_producer_id(self) -> None:
        deadline = time.monotonic() + self.config.delivery_timeout_ms / 1000
        while True:
            try:
                answer = await self.conn.controller(
                    ControllerApi.INIT_PRODUCER_ID, wire.InitProducerIdRequest(), wire.InitProducerIdResponse
                )
            except RequestFailed as error:
                if time.monotonic() > deadline:
                    raise ProduceFailed("no producer id", error.error_code) from None
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # retry backoff, as Kafka's client
                continue
            if answer.error_code is ErrorCode.NONE:
                self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
                self._generation += 1
                for queue in self._queues.values():
                    queue.sequence = 0
                return
            if not answer.error_code.retriable or time.monotonic() > deadline:
                raise ProduceFailed(answer.message or "no producer id", answer.error_code)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- sending -------------------------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue one record; the returned RecordFuture resolves when it is acknowledged (or fails with
        ProduceFailed). Waits, at most `max.block.ms` in all, while `buffer.memory` bytes are unacknowledged and
        until the metadata has the topic and partition; then raises ProduceFailed."""
        assert self._group is not None, "use the producer inside `async with`"
        size = len(value) + (len(key) if key else 0) + RECORD_OVERHEAD_BYTES
        if size > self.config.max_request_size:
            raise ProduceFailed(
                f"the record is {size} bytes, more than max.request.size {self.config.max_request_size}",
                ErrorCode.RECORD_TOO_LARGE,
            )
        blocked_until = None  # max.block.ms runs from the first wait (the common send waits for nothing)
        if self._buffered + size > self.config.buffer_memory and self._buffered > 0:
            blocked_until = time.monotonic() + self.config.max_block_ms / 1000
            await self._wait_for_space(size, blocked_until)
        partitions = self.conn.partitions.get(topic)
        if not partitions or (partition is not None and not 0 <= partition < len(partitions)):
            if partition is not None and partition < 0:
                raise ProduceFailed(f"invalid partition {partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if blocked_until is None:
                blocked_until = time.monotonic() + self.config.max_block_ms / 1000
            partitions = await self._wait_on_metadata(topic, partition, blocked_until)
        sticky: BuiltInPartitioner | None = None
        if partition is None:
            partition, sticky = self._choose_partition(topic, key, partitions)
        queue = self._queue(topic, partition)
        batch = queue.batches[-1] if queue.batches else None
        if batch is None or (batch.size + size > self.config.batch_size and batch.values):
            now = time.monotonic()
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            batch = _Batch(now + self.config.delivery_timeout_ms / 1000, now, future)
            queue.batches.append(batch)
            self._unfinished.add(future)
            future.add_done_callback(self._unfinished.discard)
            if len(queue.batches) == 1:
                queue.wake.set()  # the sender lingers from this batch's creation
        index = len(batch.values)
        batch.values.append(value)
        batch.keys.append(key)
        batch.timestamps.append(int(time.time() * 1000) if timestamp_ms is None else timestamp_ms)
        batch.size += size
        self._buffered += size
        if batch.size >= self.config.batch_size:
            queue.wake.set()
        if sticky is not None:
            self._appended(sticky, size, batch, partitions)
        return RecordFuture(batch, index, topic, partition)

    async def _wait_on_metadata(self, topic: str, partition: int | None, deadline: float) -> list[PartitionInfo]:
        try:
            return await self.conn.wait_for_partitions(
                topic, max(deadline - time.monotonic(), 0), self.config.retry_backoff_ms / 1000, partition
            )
        except ClientError as error:
            raise ProduceFailed(str(error.args[0]), error.error_code) from None

    async def _wait_for_space(self, size: int, deadline: float) -> None:
        while self._buffered + size > self.config.buffer_memory and self._buffered > 0:
            self._space.clear()
            remaining = deadline - time.monotonic()
            try:
                await asyncio.wait_for(self._space.wait(), max(remaining, 0))
            except TimeoutError:
                raise ProduceFailed(
                    f"buffer.memory {self.config.buffer_memory} stayed full for max.block.ms",
                    ErrorCode.REQUEST_TIMED_OUT,
                ) from None

    def _release(self, batch: _Batch) -> None:
        self._buffered -= batch.size
        if self._buffered + self.config.batch_size <= self.config.buffer_memory:
            self._space.set()

    # -- partition choice (Kafka's KafkaProducer.partition and RecordAccumulator's use of BuiltInPartitioner) -------

    def _choose_partition(
        self, topic: str, key: bytes | None, partitions: list[PartitionInfo]
    ) -> tuple[int, BuiltInPartitioner | None]:
        """murmur2 of the key, unless partitioner.ignore.keys; else the topic's sticky partition, with the topic's
        partitioner to tell (`_appended`) once the record is in. As Kafka's append, a switch that was held back
        while the partition's last batch was filling happens here once that batch is full (or sent)."""
        count = len(partitions)
        if key is not None and not self.config.partitioner_ignore_keys:
            return partition_for_key(key, count), None
        partitioner = self._partitioners.get(topic)
        if partitioner is None:
            partitioner = self._partitioners[topic] = BuiltInPartitioner(topic, max(1, self.config.batch_size))
        info = partitioner.current
        if info is None or info.partition >= count:  # the first record, or metadata without that partition now
            return self._switch(topic, partitioner, partitions).partition, partitioner
        if info.produced_bytes >= partitioner.sticky_batch_size:  # a switch was held back: is the batch full now?
            queue = self._queues.get((topic, info.partition))
            if partitioner.update_partition_info(info, 0, _all_batches_full(queue, self.config.batch_size)):
                info = self._switch(topic, partitioner, partitions)
        return info.partition, partitioner

    def _appended(
        self, partitioner: BuiltInPartitioner, size: int, batch: _Batch, partitions: list[PartitionInfo]
    ) -> None:
        """Kafka's updatePartitionInfo after an append: count the record's bytes, and switch partition once
        batch.size bytes have gone to it, unless the batch it went into is still filling (then at twice that)."""
        if partitioner.update_partition_info(partitioner.current, size, batch.size >= self.config.batch_size):
            self._switch(partitioner.topic, partitioner, partitions)

    def _switch(
        self, topic: str, partitioner: BuiltInPartitioner, partitions: list[PartitionInfo]
    ) -> StickyPartitionInfo:
        self._refresh_load_stats(topic, partitioner, partitions)
        return partitioner.switch_partition(self._draw(), _available(partitions), len(partitions))

    def _draw(self) -> int:
        return self._random.getrandbits(31)  # Kafka's Utils.toPositive(ThreadLocalRandom.current().nextInt())

    def _refresh_load_stats(self, topic: str, partitioner: BuiltInPartitioner, partitions: list[PartitionInfo]) -> None:
        """Kafka's partitionReady for one topic, done when the partitioner is about to choose: each partition's
        queued batches (waiting to be sent or to be retried), with its leader; a leader with a partition whose
        ready batch cannot go (its window is full or a refused batch waits to go again) has data ready and is
        not taking it (`NodeLatencyStats`)."""
        timeout_ms = self.config.partitioner_availability_timeout_ms
        adaptive = self.config.partitioner_adaptive_partitioning_enable
        queues = self._topic_queues.get(topic, {})
        if not adaptive or len(queues) < len(partitions):
            partitioner.update_partition_load_stats(None, (), 0)
            return
        now = time.monotonic()
        loads = []
        for number, queue in queues.items():
            leader = partitions[number].leader if number < len(partitions) else -1
            if timeout_ms > 0 and leader >= 0 and self._blocked(queue, now):
                self._node_ready(leader, int(now * 1000), can_drain=False)
            loads.append(PartitionLoad(number, leader, len(queue.batches) + len(queue.retry)))
        queue_sizes, partition_ids, length = load_stats_input(
            loads,
            len(partitions),
            adaptive=adaptive,
            availability_timeout_ms=timeout_ms,
            node_stats=self._node_stats,
        )
        partitioner.update_partition_load_stats(queue_sizes, partition_ids, length)

    def _blocked(self, queue: _PartitionQueue, now: float) -> bool:
        """Whether the queue's first batch is ready to go (full, or lingered) but its sender may not send it."""
        if not queue.batches:
            return False
        first = queue.batches[0]
        ready = (
            len(queue.batches) > 1
            or first.size >= self.config.batch_size
            or now >= first.created + self.config.linger_ms / 1000
        )
        window_full = queue.in_flight >= self.config.max_in_flight_requests_per_connection
        return ready and (window_full or bool(queue.retry))

    def _node_ready(self, leader: int, now_ms: int, *, can_drain: bool) -> None:
        """Kafka's updateNodeLatencyStats (only kept with partitioner.availability.timeout.ms > 0)."""
        stats = self._node_stats.get(leader)
        if stats is None:
            stats = self._node_stats[leader] = NodeLatencyStats(now_ms, now_ms)
        stats.update(now_ms, can_drain)

    def _leader_took(self, queue: _PartitionQueue) -> None:
        """A new batch goes to the partition's leader: the leader drains (a batch sent again after a refusal does
        not count, as a broker Kafka cannot connect to drains nothing)."""
        info = self.conn.leader_of(queue.topic, queue.partition)
        if info is not None and info.leader >= 0:
            self._node_ready(info.leader, int(time.monotonic() * 1000), can_drain=True)

    def _queue(self, topic: str, partition: int) -> _PartitionQueue:
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = _PartitionQueue(topic, partition)
            self._topic_queues.setdefault(topic, {})[partition] = queue
            assert self._group is not None
            self._group.create_task(self._sender(queue))
        return queue

    async def flush(self) -> None:
        """Send everything queued now (no lingering) and wait until every record sent so far has an outcome,
        whether its batch is still queued or in flight."""
        futures = list(self._unfinished)
        self._flushing += 1
        try:
            for queue in self._queues.values():
                queue.wake.set()
            if futures:
                await asyncio.wait(futures)
        finally:
            self._flushing -= 1

    async def _sender(self, queue: _PartitionQueue) -> None:
        """One partition's sender (Kafka's Sender for one partition): linger from the oldest batch's creation
        until it is full, then send it, with up to max.in.flight.requests.per.connection batches in flight. A
        batch refused retriably stops new sends: once the window is back, the refused batches go again one at a
        time in sequence order, so the leader's sequence check keeps the partition's records in send order. Every
        wait ends by the next delivery deadline of a batch that waits, which then expires."""
        window = self.config.max_in_flight_requests_per_connection
        while True:
            self._expire(queue)
            if queue.retry:
                if queue.in_flight:
                    await self._wait(queue)
                    continue
                await self._retry_first(queue)
                continue
            if not queue.batches or queue.in_flight >= window or self._past_dedup_window(queue):
                if self._closing and not queue.batches and not queue.in_flight:
                    return
                await self._wait(queue)
                continue
            batch = queue.batches[0]
            full = len(queue.batches) > 1 or batch.size >= self.config.batch_size
            if not full and not self._closing and not self._flushing:
                remaining = batch.created + self.config.linger_ms / 1000 - time.monotonic()
                if remaining > 0:
                    queue.wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(queue.wake.wait(), remaining)
                    continue
            queue.batches.popleft()
            if self.config.partitioner_availability_timeout_ms > 0:
                self._leader_took(queue)
            self._encode(queue, batch)
            queue.sent += 1
            batch.sent_index = queue.sent
            queue.unresolved.append(batch)
            queue.in_flight += 1
            assert self._group is not None
            self._group.create_task(self._send_once(queue, batch))

    def _past_dedup_window(self, queue: _PartitionQueue) -> bool:
        """Whether the next batch would be `max.in.flight.requests.per.connection` (at most 5) or more batches past
        the oldest one still unresolved (issue 14). The leader remembers only its producer's last five batches, so
        a retry of that one must come before five later batches are written, or it is refused as
        OUT_OF_ORDER_SEQUENCE_NUMBER. Over TCP Kafka's window of requests in flight is enough, as a lost answer
        closes the connection and fails them all; over NATS one answer can be lost alone (the broker's NATS node
        died) while later ones come back, so the window must count from the oldest unresolved batch."""
        if not queue.unresolved:
            return False
        oldest = min(batch.sent_index for batch in queue.unresolved)
        return queue.sent + 1 - oldest >= self.config.max_in_flight_requests_per_connection

    @staticmethod
    async def _wait(queue: _PartitionQueue) -> None:
        """Until something changes for the queue (checked by the caller with no await since, so no wake is lost),
        or the delivery deadline of a batch that waits (queued or to retry) comes."""
        queue.wake.clear()
        deadlines = [b.deadline for b in queue.retry]
        if queue.batches:
            deadlines.append(queue.batches[0].deadline)  # batches are queued in creation order
        if not deadlines:
            await queue.wake.wait()
            return
        # A timer that wakes the sender (cheaper than wait_for's task, and this is once per batch).
        timer = asyncio.get_running_loop().call_later(max(min(deadlines) - time.monotonic(), 0), queue.wake.set)
        try:
            await queue.wake.wait()
        finally:
            timer.cancel()

    def _expire(self, queue: _PartitionQueue) -> None:
        """Kafka's RecordAccumulator.expiredBatches: fail the waiting batches whose delivery.timeout.ms has passed.
        A queued batch was never sent (a definite failure, no sequence spent); one waiting for its retry fails
        with its last attempt's error."""
        now = time.monotonic()
        while queue.batches and queue.batches[0].deadline <= now:
            batch = queue.batches.popleft()
            self._fail(queue, batch, ErrorCode.REQUEST_TIMED_OUT, self._expiry_message(queue, batch))
        for batch in [b for b in queue.retry if b.deadline <= now]:
            queue.retry.remove(batch)
            self._fail(queue, batch, batch.last_error, self._expiry_message(queue, batch))

    def _expiry_message(self, queue: _PartitionQueue, batch: _Batch) -> str:
        return (
            f"Expiring {len(batch.values)} record(s) for {queue.topic}-{queue.partition}: "
            f"{self.config.delivery_timeout_ms} ms has passed since batch creation"
        )

    def _encode(self, queue: _PartitionQueue, batch: _Batch) -> None:
        idempotent = self.config.enable_idempotence
        batch.sequence = queue.sequence if idempotent else -1
        batch.producer_id = self.producer_id if idempotent else -1
        batch.generation = self._generation
        batch.encoded = encode_batch(
            batch.values,
            keys=batch.keys,
            timestamps=batch.timestamps,
            producer_id=batch.producer_id,
            producer_epoch=self.producer_epoch if idempotent else -1,
            base_sequence=batch.sequence,
        )
        if idempotent:
            queue.sequence = (queue.sequence + len(batch.values)) % (2**31)

    async def _send_once(self, queue: _PartitionQueue, batch: _Batch) -> None:
        try:
            error, base_offset, reached = await self._attempt(queue, batch)
        finally:
            queue.in_flight -= 1
            batch.last_attempt_end = time.monotonic()
            queue.wake.set()
        if error is ErrorCode.NONE:
            self._resolve(queue, batch)
            if not batch.future.done():
                batch.future.set_result(base_offset)
            return
        batch.attempts += 1
        batch.last_error = error
        if reached and error in INDEFINITE_ERRORS:
            batch.maybe_written = True
        if self._retriable(queue, batch, error):
            queue.retry.append(batch)
            queue.retry.sort(key=lambda b: (b.generation, b.sequence))
            return
        self._fail(queue, batch, error, f"{queue.topic}-{queue.partition}")

    def _fail(self, queue: _PartitionQueue, batch: _Batch, error: ErrorCode, message: str) -> None:
        """The batch's records fail for good. If it was sent with a sequence, the leader may hold it or not, so
        that producer id's sequence space is abandoned: the producer takes a new id (once per id)."""
        sent = batch.sequence >= 0
        self._resolve(queue, batch)
        if not batch.future.done():
            failure = ProduceFailed(message, error)
            failure.indefinite = batch.maybe_written
            batch.future.set_exception(failure)
        if sent and batch.producer_id == self.producer_id and batch.producer_id not in self._abandoned:
            self._abandoned.add(batch.producer_id)
            assert self._group is not None
            self._group.create_task(self._init_producer_id())

    def _retriable(self, queue: _PartitionQueue, batch: _Batch, error: ErrorCode) -> bool:
        """Kafka's canRetry: attempts and delivery.timeout.ms left, and a retriable error, or an out-of-order
        sequence caused by an earlier batch of the partition (same producer id) that is itself still unresolved."""
        if batch.attempts > self.config.retries:
            return False
        if time.monotonic() + self.config.retry_backoff_ms / 1000 > batch.deadline:
            return False
        if error.retriable:
            return True
        earlier = any(
            b.sequence < batch.sequence and b.generation == batch.generation for b in queue.unresolved if b is not batch
        )
        return error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and earlier

    async def _retry_first(self, queue: _PartitionQueue) -> None:
        """Send the first batch to retry, `retry.backoff.ms` after its last attempt (Kafka counts the backoff per
        batch, so a refused window does not wait once per batch), to the leader fresh metadata names."""
        batch = queue.retry[0]
        backoff_s = self.config.retry_backoff_ms / 1000
        wait_s = min(batch.last_attempt_end + backoff_s, batch.deadline) - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)  # Kafka's retry.backoff.ms between attempts
        await self.conn.refresh((queue.topic,), max_age_s=backoff_s)
        if time.monotonic() >= batch.deadline:
            return  # the sender's next _expire fails it
        queue.retry.remove(batch)  # nothing else changes the retry list while nothing is in flight
        queue.in_flight += 1
        await self._send_once(queue, batch)

    def _resolve(self, queue: _PartitionQueue, batch: _Batch) -> None:
        if batch in queue.unresolved:
            queue.unresolved.remove(batch)
        self._release(batch)
        # Its RecordFutures need only the batch's future: drop the records, so a caller that keeps the futures
        # (as Kafka's FutureRecordMetadata, which holds only the result) does not keep the data twice over.
        batch.values, batch.keys, batch.timestamps, batch.encoded = [], [], [], b""

    async def _attempt(self, queue: _PartitionQueue, batch: _Batch) -> tuple[ErrorCode, int, bool]:
        """One attempt: (error, base offset, whether the request may have reached a broker)."""
        leadership = self.conn.leadership(queue.topic, queue.partition)
        if leadership is None:
            return ErrorCode.LEADER_NOT_AVAILABLE, -1, False
        body = wire.ProduceRequest(
            acks=self.config.acks,  # type: ignore[arg-type]
            timeout_ms=self.config.request_timeout_ms,
            partitions=(
                wire.ProducePartitionData(topic=queue.topic, partition=queue.partition, records=batch.encoded),
            ),
        )
        if self.config.acks == 0:
            subject = broker_api(self.conn.cluster_id, leadership.leader, BrokerApi.PRODUCE)
            await self.conn.nc.publish(subject, encode(body))
            return ErrorCode.NONE, -1, True
        # The leader answers by request.timeout.ms; the client waits a second longer for that answer, but never
        # past the batch's delivery deadline.
        timeout_s = min(self.config.request_timeout_ms / 1000 + 1, batch.deadline - time.monotonic())
        backoff_s = self.config.retry_backoff_ms / 1000
        try:
            answer = await self.conn.broker_watched(
                (leadership,),
                BrokerApi.PRODUCE,
                body,
                wire.ProduceResponse,
                timeout_s=max(timeout_s, 0.001),
                watch_after_s=backoff_s,
                watch_every_s=backoff_s,
            )
        except RequestFailed as error:
            if error.error_code is ErrorCode.BROKER_NOT_AVAILABLE:
                # Nobody listens on the leader's subject (NATS's no-responders): Kafka's refused connection, a
                # retriable NETWORK_EXCEPTION, and a definite one: no broker got the batch.
                return ErrorCode.NETWORK_EXCEPTION, -1, False
            return error.error_code, -1, True
        if answer.error_code is not ErrorCode.NONE:
            return answer.error_code, -1, True
        (result,) = answer.partitions
        return wire.error_code_of(result.error), result.base_offset, True


def _all_batches_full(queue: _PartitionQueue | None, batch_size: int) -> bool:
    """Kafka's allBatchesFull: only the last batch of a partition can still be filling."""
    return queue is None or not queue.batches or queue.batches[-1].size >= batch_size


def _available(partitions: list[PartitionInfo]) -> list[int]:
    """The partitions with a leader (Kafka's Cluster.availablePartitionsForTopic)."""
    return [info.partition for info in partitions if info.leader >= 0]
