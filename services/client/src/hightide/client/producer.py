"""The async producer: records batched per partition, sent to each partition's leader, retried until acknowledged.

Room: services/client. Kafka's KafkaProducer, reduced to what Hightide serves today:

- partition: explicit, else murmur2 of the key (Kafka's), else Kafka's uniform sticky partitioner (KIP-794,
  `hightide.core.partitioner.BuiltInPartitioner`): one partition per topic until `batch.size` bytes have gone to it
  (up to twice that while its last batch is not full), then another, weighted by the inverse of the partitions'
  queued batches (`partitioner.adaptive.partitioning.enable`, default true), leaving out partitions whose leader
  has had batches ready but taken none for `partitioner.availability.timeout.ms` (default 0: never);
  `partitioner.ignore.keys` (default false) makes keyed records sticky too;
- `compression.type` none (the default), gzip, snappy, lz4 or zstd, in each codec's framing as Kafka's Java producer
  writes it; `batch.size` counts the records' bytes before compression;
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

The send rules (sequences, the window, which answers are retried and in what order, expiry, outcomes) are
`hightide.core.idempotent_producer`'s, which the simulation drives too; this module is their wiring: one task per
partition that waits (linger, backoff, answers) and carries out what the rules say, the connection, the futures.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hightide.client.connection import ClientError, ClusterConnection, PartitionInfo
from hightide.core.idempotent_producer import (
    INDEFINITE_ERRORS,
    Failed,
    IdempotentProducer,
    Outcome,
    PartitionSends,
    ProducerBatchState,
    Resolved,
    SendConfig,
)
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
from hightide.protocol.records import Compression, encode_batch
from hightide.protocol.subjects import BrokerApi, ControllerApi, broker_api
from hightide.protocol.wire import encode
from hightide.runtime.rpc import RequestFailed

RECORD_OVERHEAD_BYTES: Final = 24
_ACKS: Final = {"all": -1, "-1": -1, "1": 1, "0": 0}
COMPRESSION_TYPES: Final = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                            "lz4": Compression.LZ4, "zstd": Compression.ZSTD}  # fmt: skip
"""Kafka's compression.type values for a producer, and the codec each writes a batch's records in."""
_BOOLEANS: Final = frozenset(
    {"enable_idempotence", "partitioner_adaptive_partitioning_enable", "partitioner_ignore_keys"}
)


__all__ = ["INDEFINITE_ERRORS", "ProduceFailed", "Producer", "ProducerConfig", "RecordFuture", "RecordMetadata"]


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
    compression_type: str = "none"

    def __post_init__(self) -> None:
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(
                f"Invalid value {self.compression_type} for configuration compression.type: "
                f"String must be one of: {', '.join(COMPRESSION_TYPES)}"
            )
        if self.partitioner_availability_timeout_ms < 0:
            raise ValueError(
                f"Invalid value {self.partitioner_availability_timeout_ms} for configuration "
                "partitioner.availability.timeout.ms: Value must be at least 0"
            )
        self.send_config()  # the send rules' own checks (max.in.flight.requests.per.connection)

    def send_config(self) -> SendConfig:
        """The configs the send rules (hightide.core.idempotent_producer) read."""
        return SendConfig(
            enable_idempotence=self.enable_idempotence,
            max_in_flight_requests_per_connection=self.max_in_flight_requests_per_connection,
            retries=self.retries,
            retry_backoff_ms=self.retry_backoff_ms,
            delivery_timeout_ms=self.delivery_timeout_ms,
            batch_size=self.batch_size,
            linger_ms=self.linger_ms,
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
            elif attribute == "compression_type":
                values[attribute] = text.strip()
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


class _Batch(ProducerBatchState):
    """Records of one partition sent together (Kafka's ProducerBatch): filled by `send` until it is full or taken,
    then delivered whole. Its one future carries the base offset, so a record's outcome costs no future of its
    own (the per-record futures and their callbacks were the producer's bottleneck). The send rules' part of it
    (sequence, attempts, deadline: `ProducerBatchState`) is in milliseconds of the monotonic clock."""

    __slots__ = ("encoded", "future", "keys", "timestamps", "values")

    def __init__(self, created_ms: float, delivery_timeout_ms: int, future: asyncio.Future[int]) -> None:
        super().__init__(created_ms, delivery_timeout_ms)
        self.values: list[bytes] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.future = future
        self.encoded = b""  # the batch as sent: encoded once, with its sequence, and sent again as is on a retry


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
    sends: PartitionSends[_Batch]  # the partition's batches, queued to resolved, under the send rules
    wake: asyncio.Event = field(default_factory=asyncio.Event)


def _now_ms() -> float:
    return time.monotonic() * 1000


class Producer:
    """Use as `async with Producer(connection, config) as producer: await producer.send(...)`."""

    def __init__(self, connection: ClusterConnection, config: ProducerConfig | None = None) -> None:
        self.conn = connection
        self.config = config or ProducerConfig()
        self._rules: IdempotentProducer[_Batch] = IdempotentProducer(self.config.send_config())
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

    @property
    def producer_id(self) -> int:
        return self._rules.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._rules.producer_epoch

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
                self._rules.producer_id_assigned(answer.producer_id, answer.producer_epoch)
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
        queued = queue.sends.queued
        batch = queued[-1] if queued else None
        if batch is None or (batch.size + size > self.config.batch_size and batch.values):
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            batch = _Batch(_now_ms(), self.config.delivery_timeout_ms, future)
            queue.sends.enqueue(batch)
            self._unfinished.add(future)
            future.add_done_callback(self._unfinished.discard)
            if len(queued) == 1:
                queue.wake.set()  # the sender lingers from this batch's creation
        index = len(batch.values)
        batch.record_count += 1
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
        now_ms = _now_ms()
        loads = []
        for number, queue in queues.items():
            leader = partitions[number].leader if number < len(partitions) else -1
            if timeout_ms > 0 and leader >= 0 and queue.sends.blocked(now_ms):
                self._node_ready(leader, int(now_ms), can_drain=False)
            loads.append(PartitionLoad(number, leader, len(queue.sends.queued) + len(queue.sends.retry)))
        queue_sizes, partition_ids, length = load_stats_input(
            loads,
            len(partitions),
            adaptive=adaptive,
            availability_timeout_ms=timeout_ms,
            node_stats=self._node_stats,
        )
        partitioner.update_partition_load_stats(queue_sizes, partition_ids, length)

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
            queue = self._queues[(topic, partition)] = _PartitionQueue(
                topic, partition, self._rules.partition(topic, partition)
            )
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
        """One partition's sender (Kafka's Sender for one partition): it does what the send rules say next (send the
        first queued batch once it has lingered, send a refused one again after its backoff, or wait), and every
        wait ends by the next delivery deadline of a batch that waits, which then expires."""
        sends = queue.sends
        while True:
            self._carry_out(queue, sends.expire(_now_ms()))
            step = sends.next_step()
            if step == "retry":
                await self._retry_first(queue)
                continue
            if step == "wait":
                if self._closing and sends.idle:
                    return
                await self._wait(queue)
                continue
            if not self._closing and not self._flushing:
                remaining_ms = sends.linger_left_ms(_now_ms())
                if remaining_ms > 0:
                    queue.wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(queue.wake.wait(), remaining_ms / 1000)
                    continue
            if self.config.partitioner_availability_timeout_ms > 0:
                self._leader_took(queue)
            batch = sends.take(_now_ms())
            self._encode(batch)
            assert self._group is not None
            self._group.create_task(self._send_once(queue, batch))

    @staticmethod
    async def _wait(queue: _PartitionQueue) -> None:
        """Until something changes for the queue (checked by the caller with no await since, so no wake is lost),
        or the delivery deadline of a batch that waits (queued or to retry) comes."""
        queue.wake.clear()
        deadlines = [b.deadline_ms for b in queue.sends.waiting()]
        if not deadlines:
            await queue.wake.wait()
            return
        # A timer that wakes the sender (cheaper than wait_for's task, and this is once per batch).
        delay_s = max(min(deadlines) - _now_ms(), 0) / 1000
        timer = asyncio.get_running_loop().call_later(delay_s, queue.wake.set)
        try:
            await queue.wake.wait()
        finally:
            timer.cancel()

    def _carry_out(self, queue: _PartitionQueue, outcomes: list[Outcome[_Batch]]) -> None:
        """What the send rules decided: resolve a batch's future, fail it (taking a new producer id if asked)."""
        for outcome in outcomes:
            batch = outcome.batch
            if isinstance(outcome, Resolved):
                self._resolve(batch)
                if not batch.future.done():
                    batch.future.set_result(outcome.base_offset)
            elif isinstance(outcome, Failed):
                message = self._expiry_message(queue, batch) if outcome.expired else f"{queue.topic}-{queue.partition}"
                self._resolve(batch)
                if not batch.future.done():
                    failure = ProduceFailed(message, outcome.error)
                    failure.indefinite = outcome.indefinite
                    batch.future.set_exception(failure)
                if outcome.renew_producer_id:
                    assert self._group is not None
                    self._group.create_task(self._init_producer_id())

    def _expiry_message(self, queue: _PartitionQueue, batch: _Batch) -> str:
        return (
            f"Expiring {len(batch.values)} record(s) for {queue.topic}-{queue.partition}: "
            f"{self.config.delivery_timeout_ms} ms has passed since batch creation"
        )

    def _encode(self, batch: _Batch) -> None:
        batch.encoded = encode_batch(
            batch.values,
            keys=batch.keys,
            timestamps=batch.timestamps,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.sequence,
            compression=COMPRESSION_TYPES[self.config.compression_type],
        )

    async def _send_once(self, queue: _PartitionQueue, batch: _Batch) -> None:
        try:
            error, base_offset, reached = await self._attempt(queue, batch)
        finally:
            queue.sends.attempt_ended(batch, _now_ms())
            queue.wake.set()
        self._carry_out(queue, queue.sends.on_answer(batch, error, base_offset, reached, _now_ms()))

    async def _retry_first(self, queue: _PartitionQueue) -> None:
        """Send the first batch to retry after its backoff, to the leader fresh metadata names."""
        wait_ms = queue.sends.retry_wait_ms(_now_ms())
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000)  # Kafka's retry.backoff.ms between attempts
        await self.conn.refresh((queue.topic,), max_age_s=self.config.retry_backoff_ms / 1000)
        batch = queue.sends.take_retry(_now_ms())
        if batch is None:
            return  # its deadline has come: the sender's next expire fails it
        await self._send_once(queue, batch)

    def _resolve(self, batch: _Batch) -> None:
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
        timeout_s = min(self.config.request_timeout_ms / 1000 + 1, (batch.deadline_ms - _now_ms()) / 1000)
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
    return queue is None or not queue.sends.queued or queue.sends.queued[-1].size >= batch_size


def _available(partitions: list[PartitionInfo]) -> list[int]:
    """The partitions with a leader (Kafka's Cluster.availablePartitionsForTopic)."""
    return [info.partition for info in partitions if info.leader >= 0]
