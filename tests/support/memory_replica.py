"""A replica whose disk is memory: the pure Partition plus a shell that carries out its effects.

The log holds real RecordBatch v2 bytes (stamped with offsets and leader epochs as a broker's log would), so
what followers fetch and consumers read is exactly what the protocol wrote. Used by the partition tests and
the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hightide.core.effects import (
    AdvanceLogStartOffset,
    AppendAsFollower,
    AppendAsLeader,
    CompleteProduce,
    Effect,
    Emit,
    Send,
    ServeFetch,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    WriteEpochCheckpoint,
)
from hightide.core.partition import Partition, PartitionConfig
from hightide.core.validation import validate_produce, validate_replicated
from hightide.protocol.events import Event
from hightide.protocol.records import decode_batches, encode_batch, iter_batch_headers, patch_batch
from hightide.protocol.wire import FetchPartitionResponse

TOPIC = "orders"


@dataclass
class MemoryLog:
    """Whole batches in offset order, as bytes, with their records decoded once as they arrive."""

    batches: list[bytes] = field(default_factory=list)
    start_offset: int = 0
    entries: list[tuple[int, bytes, int]] = field(default_factory=list)  # (offset, value, leader epoch)

    def append(self, records: bytes) -> None:
        for position, header in iter_batch_headers(records):
            batch = records[position : position + header.size]
            self.batches.append(batch)
            for _, decoded in decode_batches(batch):
                epoch = header.partition_leader_epoch
                self.entries.extend((r.offset, r.value or b"", epoch) for r in decoded)

    def truncate(self, offset: int) -> None:
        """Whole batches at or after `offset` go; below the log start, the log restarts empty at `offset` (Kafka's
        UnifiedLog.truncateTo: truncateFullyAndStartAt)."""
        if offset < self.start_offset:
            self.batches, self.entries, self.start_offset = [], [], offset
            return
        self.batches = [b for b in self.batches if _last_offset(b) < offset]
        end = _last_offset(self.batches[-1]) + 1 if self.batches else self.start_offset
        while self.entries and self.entries[-1][0] >= end:
            self.entries.pop()

    def advance_start(self, offset: int) -> None:
        """The log start offset moves up to `offset`: batches wholly below it go (a log deletes whole segments;
        here every batch is its own)."""
        assert self.start_offset <= offset <= self.end_offset, (self.start_offset, offset, self.end_offset)
        self.batches = [b for b in self.batches if _last_offset(b) >= offset]
        self.entries = [entry for entry in self.entries if entry[0] >= offset]
        self.start_offset = offset

    def batch_start(self, offset: int) -> int:
        """The base offset of the batch holding `offset` (the offset itself past the end)."""
        for _, header in iter_batch_headers(b"".join(self.batches)):
            if header.base_offset <= offset <= header.last_offset:
                return header.base_offset
        return offset

    @property
    def end_offset(self) -> int:
        return _last_offset(self.batches[-1]) + 1 if self.batches else self.start_offset

    def read(self, fetch_offset: int, max_offset: int, max_bytes: int, min_one_batch: bool = True) -> bytes:
        """Whole batches from the one holding `fetch_offset`, at most `max_bytes` (at least one batch when
        `min_one_batch`, Kafka's KIP-74), none reaching `max_offset`."""
        chosen: list[bytes] = []
        size = 0
        for batch in self.batches:
            if _last_offset(batch) < fetch_offset:
                continue
            too_big = size + len(batch) > max_bytes and (chosen or not min_one_batch)
            if _last_offset(batch) >= max_offset or too_big:
                break
            chosen.append(batch)
            size += len(batch)
        return b"".join(chosen)

    def records(self) -> list[tuple[int, bytes | None]]:
        """(offset, value) of every record."""
        return [(offset, value) for offset, value, _ in self.entries]

    def epochs(self) -> list[tuple[int, int]]:
        """(offset, leader epoch) of every batch."""
        return [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batch_headers(b"".join(self.batches))]


def _last_offset(batch: bytes) -> int:
    return next(iter(iter_batch_headers(batch)))[1].last_offset


@dataclass
class MemoryReplica:
    """A broker's replica of one partition: the core, its memory log, and what it said and answered."""

    broker_id: int
    partition: Partition
    log: MemoryLog = field(default_factory=MemoryLog)
    events: list[Event] = field(default_factory=list)
    sent: list[Send] = field(default_factory=list)
    completed: list[CompleteProduce] = field(default_factory=list)
    epoch_checkpoint: tuple[tuple[int, int], ...] = ()
    checkpointed_high_watermark: int = 0

    def __post_init__(self) -> None:
        self.partition.batch_start = self._batch_start  # truncation points are this log's batch boundaries

    def _batch_start(self, offset: int) -> int:
        return self.log.batch_start(offset)

    @classmethod
    def create(cls, broker_id: int, config: PartitionConfig | None = None) -> MemoryReplica:
        return cls(broker_id, Partition(TOPIC, 0, broker_id, config or PartitionConfig()))

    def apply(self, effects: list[Effect]) -> list[FetchPartitionResponse]:
        """Carry out effects in order; return the fetch answers they produced (each ServeFetch's event is
        emitted as the answer is made)."""
        answers = []
        for effect in effects:
            match effect:
                case AppendAsLeader(records=records, base_offset=base, leader_epoch=epoch):
                    self.log.append(_stamp(records, base, epoch))
                case AppendAsFollower(records=records):
                    self.log.append(records)
                case Truncate(offset=offset):
                    self.log.truncate(offset)
                case TruncateFullyAndStartAt(offset=offset):
                    self.log = MemoryLog(start_offset=offset)
                case AdvanceLogStartOffset(offset=offset):
                    self.log.advance_start(offset)
                case UpdateHighWatermark(high_watermark=high_watermark):
                    self.checkpointed_high_watermark = high_watermark
                case WriteEpochCheckpoint(entries=entries):
                    self.epoch_checkpoint = entries
                case ServeFetch(response=response, fetch_offset=fetch_offset, max_offset=max_offset, max_bytes=limit):
                    answers.append(self._fill(response, fetch_offset, max_offset, limit))
                    self.events.append(effect.event)
                case Send():
                    self.sent.append(effect)
                case CompleteProduce():
                    self.completed.append(effect)
                case Emit(event=event):
                    self.events.append(event)
        self._check_agrees_with_core()
        return answers

    def _fill(
        self, response: FetchPartitionResponse, fetch_offset: int, max_offset: int, max_bytes: int
    ) -> FetchPartitionResponse:
        if max_offset < 0:
            return response
        return response.model_copy(update={"records": self.log.read(fetch_offset, max_offset, max_bytes)})

    def _check_agrees_with_core(self) -> None:
        end = self.log.end_offset
        assert end == self.partition.log_end_offset, (self.broker_id, end, self.partition.log_end_offset)

    # -- what a test says --------------------------------------------------------------------------------

    @property
    def leo(self) -> int:
        return self.partition.log_end_offset

    @property
    def hw(self) -> int:
        return self.partition.high_watermark


def _stamp(records: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """What the storage engine's leader append does: patch base offset and leader epoch into each batch."""
    stamped = bytearray(records)
    offset = base_offset
    for position, header in iter_batch_headers(records):
        patch_batch(stamped, position, offset, leader_epoch)
        offset += header.last_offset_delta + 1
    return bytes(stamped)


def produce(leader: MemoryReplica, values: list[bytes], now_ms: int, acks: int = -1, request_id: int = 0) -> None:
    records = encode_batch(values, timestamps=now_ms)
    headers = validate_produce(records, max_message_bytes=1 << 30, segment_bytes=1 << 30)
    leader.apply(leader.partition.append_as_leader(request_id, records, headers, acks, now_ms, timeout_ms=30_000))


def deliver(follower: MemoryReplica, leader_id: int, answer: FetchPartitionResponse, now_ms: int) -> None:
    """The follower applies its leader's answer, its records validated as a replica manager does."""
    headers = validate_replicated(answer.records) if answer.records else []
    follower.apply(follower.partition.on_fetch_response(leader_id, answer, headers, now_ms))


def replicate(leader: MemoryReplica, follower: MemoryReplica, now_ms: int, max_bytes: int = 1 << 20) -> None:
    """One fetch round trip: the follower asks, the leader answers, the follower applies the answer."""
    fetch = follower.partition.fetch_partition(max_bytes)
    (answer,) = leader.apply(leader.partition.on_fetch(follower.broker_id, -1, fetch, now_ms))
    deliver(follower, leader.broker_id, answer, now_ms)
