"""A replica whose disk is memory: the pure Partition plus a shell that carries out its effects.

The log holds real RecordBatch v2 bytes (stamped with offsets and leader epochs as a broker's log would), so
what followers fetch and consumers read is exactly what the protocol wrote. Used by the partition tests and
the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hightide.core.effects import (
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
from hightide.protocol.events import Event
from hightide.protocol.messages import BatchSummary, FetchResponsePartition
from hightide.protocol.records import decode_batches, encode_batch, iter_batch_headers, patch_batch

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
        self.batches = [b for b in self.batches if _last_offset(b) < offset]
        end = _last_offset(self.batches[-1]) + 1 if self.batches else self.start_offset
        while self.entries and self.entries[-1][0] >= end:
            self.entries.pop()

    @property
    def end_offset(self) -> int:
        return _last_offset(self.batches[-1]) + 1 if self.batches else self.start_offset

    def read(self, fetch_offset: int, max_offset: int, max_bytes: int) -> tuple[bytes, tuple[BatchSummary, ...]]:
        chosen: list[bytes] = []
        size = 0
        for batch in self.batches:
            if _last_offset(batch) < fetch_offset:
                continue
            if _last_offset(batch) >= max_offset or (chosen and size + len(batch) > max_bytes):
                break
            chosen.append(batch)
            size += len(batch)
        summaries = tuple(
            BatchSummary(h.base_offset, h.last_offset, h.partition_leader_epoch)
            for _, h in iter_batch_headers(b"".join(chosen))
        )
        return b"".join(chosen), summaries

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

    @classmethod
    def create(cls, broker_id: int, config: PartitionConfig | None = None) -> MemoryReplica:
        return cls(broker_id, Partition(TOPIC, 0, broker_id, config or PartitionConfig()))

    def apply(self, effects: list[Effect]) -> list[FetchResponsePartition]:
        """Carry out effects in order; return the fetch answers they produced."""
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
                case UpdateHighWatermark(high_watermark=high_watermark):
                    self.checkpointed_high_watermark = high_watermark
                case WriteEpochCheckpoint(entries=entries):
                    self.epoch_checkpoint = entries
                case ServeFetch(response=response, fetch_offset=fetch_offset, max_offset=max_offset, max_bytes=limit):
                    answers.append(self._fill(response, fetch_offset, max_offset, limit))
                case Send():
                    self.sent.append(effect)
                case CompleteProduce():
                    self.completed.append(effect)
                case Emit(event=event):
                    self.events.append(event)
        self._check_agrees_with_core()
        return answers

    def _fill(
        self, response: FetchResponsePartition, fetch_offset: int, max_offset: int, max_bytes: int
    ) -> FetchResponsePartition:
        if max_offset < 0:
            return response
        records, batches = self.log.read(fetch_offset, max_offset, max_bytes)
        return FetchResponsePartition(
            topic=response.topic,
            partition=response.partition,
            error=response.error,
            high_watermark=response.high_watermark,
            log_start_offset=response.log_start_offset,
            log_end_offset=response.log_end_offset,
            diverging_epoch=response.diverging_epoch,
            diverging_end_offset=response.diverging_end_offset,
            records=records,
            batches=batches,
        )

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
    leader.apply(leader.partition.append_as_leader(request_id, records, len(values), acks, now_ms, timeout_ms=30_000))


def replicate(leader: MemoryReplica, follower: MemoryReplica, now_ms: int, max_bytes: int = 1 << 20) -> None:
    """One fetch round trip: the follower asks, the leader answers, the follower applies the answer."""
    fetch = follower.partition.fetch_partition(max_bytes)
    (answer,) = leader.apply(leader.partition.on_fetch(follower.broker_id, -1, fetch, now_ms))
    follower.apply(follower.partition.on_fetch_response(leader.broker_id, answer, now_ms))
