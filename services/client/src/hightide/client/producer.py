"""The async producer: records batched per partition, sent to each partition's leader, retried until acknowledged.

Room: services/client. Kafka's KafkaProducer, reduced to what Hightide serves today:

- partition: explicit, else murmur2 of the key (Kafka's), else sticky (one partition until its batch is sent);
- batching per partition by `batch.size` bytes and `linger.ms`; one batch in flight per partition, so records of a
  partition are acknowledged in the order they were sent;
- `acks` 0, 1 or all; retriable errors (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, …) are
  retried after `retry.backoff.ms` with fresh metadata, until `delivery.timeout.ms` since the record was sent;
- idempotence (`enable.idempotence`, Kafka's default): a producer id from the controller and a sequence number per
  partition in every batch, so the leader drops a retried batch it already has (KIP-98). A batch keeps its
  sequence across retries; after a batch fails for good the producer takes a new producer id.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from hightide.client.connection import ClientError, ClusterConnection
from hightide.core.partitioner import partition_for_key
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import encode_batch
from hightide.protocol.subjects import BrokerApi, ControllerApi, broker_api
from hightide.protocol.wire import encode
from hightide.runtime.rpc import RequestFailed

RECORD_OVERHEAD_BYTES: Final = 24
_ACKS: Final = {"all": -1, "-1": -1, "1": 1, "0": 0}


class ProduceFailed(ClientError):
    """A record was not acknowledged: the error code is the last failure's."""


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
            elif attribute == "enable_idempotence":
                if text.lower() not in ("true", "false"):
                    raise ValueError(f"Invalid value {text} for configuration {name}")
                values[attribute] = text.lower() == "true"
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


@dataclass(slots=True)
class _Pending:
    key: bytes | None
    value: bytes
    timestamp_ms: int
    deadline: float
    future: asyncio.Future[RecordMetadata]


@dataclass(slots=True)
class _PartitionQueue:
    topic: str
    partition: int
    records: deque[_Pending] = field(default_factory=deque)
    bytes: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sequence: int = 0


class Producer:
    """Use as `async with Producer(connection, config) as producer: await producer.send(...)`."""

    def __init__(self, connection: ClusterConnection, config: ProducerConfig | None = None) -> None:
        self.conn = connection
        self.config = config or ProducerConfig()
        self.producer_id = -1
        self.producer_epoch = -1
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._sticky: dict[str, int] = {}
        self._group: asyncio.TaskGroup | None = None
        self._closing = False
        self._flushing = 0
        self._unfinished: set[asyncio.Future[RecordMetadata]] = set()  # queued or in a batch in flight

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
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves when it is acknowledged (or fails with ProduceFailed)."""
        assert self._group is not None, "use the producer inside `async with`"
        partitions = await self.conn.partitions_for(topic)
        if partition is None:
            partition = self._choose_partition(topic, key, len(partitions))
        elif not 0 <= partition < len(partitions):
            raise ProduceFailed(f"{topic} has no partition {partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        queue = self._queue(topic, partition)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        now = time.time()
        record = _Pending(
            key,
            value,
            int(now * 1000) if timestamp_ms is None else timestamp_ms,
            time.monotonic() + self.config.delivery_timeout_ms / 1000,
            future,
        )
        self._unfinished.add(future)
        future.add_done_callback(self._unfinished.discard)
        queue.records.append(record)
        queue.bytes += len(value) + (len(key) if key else 0) + RECORD_OVERHEAD_BYTES
        if queue.bytes >= self.config.batch_size:
            queue.wake.set()
            self._sticky.pop(topic, None)
        elif len(queue.records) == 1:
            queue.wake.set()
        return future

    def _choose_partition(self, topic: str, key: bytes | None, count: int) -> int:
        if key is not None:
            return partition_for_key(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky >= count:
            sticky = self._sticky[topic] = (self._sticky.get(topic, -1) + 1) % count
        return sticky

    def _queue(self, topic: str, partition: int) -> _PartitionQueue:
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = _PartitionQueue(topic, partition)
            assert self._group is not None
            self._group.create_task(self._sender(queue))
        return queue

    async def flush(self) -> None:
        """Send everything queued now (no lingering) and wait until every record sent so far has an outcome,
        whether still queued or in a batch in flight."""
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
        """One partition's sender: linger, take a batch, deliver it (retrying), repeat."""
        while True:
            if not queue.records:
                if self._closing:
                    return
                queue.wake.clear()
                await queue.wake.wait()
                continue
            if queue.bytes < self.config.batch_size and not self._closing and not self._flushing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(queue.wake.wait(), self.config.linger_ms / 1000)
            batch = self._take_batch(queue)
            await self._deliver(queue, batch)

    def _take_batch(self, queue: _PartitionQueue) -> list[_Pending]:
        batch: list[_Pending] = []
        size = 0
        while queue.records:
            record = queue.records[0]
            record_size = len(record.value) + (len(record.key) if record.key else 0) + RECORD_OVERHEAD_BYTES
            if batch and size + record_size > self.config.batch_size:
                break
            queue.records.popleft()
            queue.bytes -= record_size
            size += record_size
            batch.append(record)
        return batch

    async def _deliver(self, queue: _PartitionQueue, batch: list[_Pending]) -> None:
        idempotent = self.config.enable_idempotence
        records = encode_batch(
            [r.value for r in batch],
            keys=[r.key for r in batch],
            timestamps=[r.timestamp_ms for r in batch],
            producer_id=self.producer_id if idempotent else -1,
            producer_epoch=self.producer_epoch if idempotent else -1,
            base_sequence=queue.sequence if idempotent else -1,
        )
        deadline = min(r.deadline for r in batch)
        attempts = 0
        last_error = ErrorCode.REQUEST_TIMED_OUT
        while True:
            error, base_offset = await self._attempt(queue, records)
            if error is ErrorCode.NONE:
                if idempotent:
                    queue.sequence = (queue.sequence + len(batch)) % (2**31)
                for i, record in enumerate(batch):
                    offset = base_offset + i if base_offset >= 0 else -1
                    if not record.future.done():
                        record.future.set_result(RecordMetadata(queue.topic, queue.partition, offset))
                return
            last_error = error
            attempts += 1
            retriable = error.retriable and attempts <= self.config.retries
            if not retriable or time.monotonic() + self.config.retry_backoff_ms / 1000 > deadline:
                break
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)  # Kafka's retry.backoff.ms between attempts
            with contextlib.suppress(RequestFailed):
                await self.conn.metadata((queue.topic,))
        for record in batch:
            if not record.future.done():
                record.future.set_exception(ProduceFailed(f"{queue.topic}-{queue.partition}", last_error))
        if idempotent:
            await self._init_producer_id()  # the outcome may be unknown: start a fresh sequence space

    async def _attempt(self, queue: _PartitionQueue, records: bytes) -> tuple[ErrorCode, int]:
        info = self.conn.leader_of(queue.topic, queue.partition)
        if info is None or info.leader < 0:
            return ErrorCode.LEADER_NOT_AVAILABLE, -1
        body = wire.ProduceRequest(
            acks=self.config.acks,  # type: ignore[arg-type]
            timeout_ms=self.config.request_timeout_ms,
            partitions=(wire.ProducePartitionData(topic=queue.topic, partition=queue.partition, records=records),),
        )
        if self.config.acks == 0:
            await self.conn.nc.publish(broker_api(self.conn.cluster_id, info.leader, BrokerApi.PRODUCE), encode(body))
            return ErrorCode.NONE, -1
        try:
            answer = await self.conn.broker(
                info.leader,
                BrokerApi.PRODUCE,
                body,
                wire.ProduceResponse,
                timeout_s=self.config.request_timeout_ms / 1000 + 1,
            )
        except RequestFailed as error:
            # Nobody listening on the leader's subject is Kafka's disconnect: a retriable NETWORK_EXCEPTION.
            code = error.error_code
            return (ErrorCode.NETWORK_EXCEPTION if code is ErrorCode.BROKER_NOT_AVAILABLE else code), -1
        if answer.error_code is not ErrorCode.NONE:
            return answer.error_code, -1
        (result,) = answer.partitions
        return wire.error_code_of(result.error), result.base_offset
