"""The simulator's disk is the storage engine's twin: the same storage effects at the same wall-clock times give the
same outcomes on `MemoryDisk` as on the broker's own storage shell (`hightide.broker.storage.DiskStorage`, the
storage engine over real files): the segments each append rolls, what truncation and retention delete (the
SegmentRolled and SegmentDeleted events, in order), the log start offset retention reports, the refusals, and what
reads return.

Method: hypothesis draws a sequence of storage effects (leader and follower appends, follower sets larger than
segment.bytes, HW moves, retention at later wall times, truncations, starting over, log start moves, config
changes); both disks carry out each one, and after each the outcomes, the logs' offsets and segments and the reads
must be equal. Time-based retention after a truncation is left to its own test below (a defect of the engine).
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.broker.storage import DiskStorage
from hightide.core.clock import WallMs
from hightide.core.effects import (
    AdvanceLogStartOffset,
    AppendAsFollower,
    AppendAsLeader,
    CreateLog,
    EnforceRetention,
    StorageEffect,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    UpdateLogConfig,
)
from hightide.core.metadata_image import TopicPartition
from hightide.core.replica_manager import StorageOutcome, StorageRefusal
from hightide.core.validation import validate_produce, validate_replicated
from hightide.protocol import events
from hightide.protocol.records import encode_batch
from hightide.storage import checkpoint
from hightide.storage.config import LogConfig
from hightide.storage.log import PartitionLog
from support.memory_disk import MemoryDisk

TP = TopicPartition("orders", 0)
TOPIC_ID = "AQIDBAUGBwgJCgsMDQ4PEA"
T0 = 1_700_000_000_000
# Appends, HW moves and retention runs are the common effects; truncations and the rest are rarer, as in a broker.
KINDS = (
    *("lead", "lead", "follow", "follow", "hw", "hw", "retain", "retain"),
    *("truncate", "start_over", "advance", "configs"),
)
GROWING = ("lead", "follow", "hw", "retain", "advance")

Outcome = StorageOutcome | str  # what an effect did, or the error code of its refusal


class Twins:
    """One partition on both disks, fed the same effects."""

    def __init__(self, directory: Path, configs: dict[str, str]) -> None:
        self.now = WallMs(T0)
        self.epoch = 0
        self.real = DiskStorage(1, directory, LogConfig())
        self.real.open(self.now)
        self.memory = MemoryDisk(1, random.Random(0))
        self.apply(CreateLog(TP.topic, TP.partition, TOPIC_ID, configs))

    def apply(self, effect: StorageEffect) -> Outcome:
        real = _outcome(lambda: self.real.apply(effect, self.now))
        memory = _outcome(lambda: self.memory.apply(effect, self.now))
        assert memory == real, f"{effect}: the memory disk did {memory}, the storage engine {real}"
        self.check_same_logs()
        return real

    def check_same_logs(self) -> None:
        real, memory = self.real_log(), self.memory.logs[TP].log
        assert (memory.start_offset, memory.high_watermark, memory.end_offset) == (
            real.log_start_offset,
            real.high_watermark,
            real.log_end_offset,
        )
        segments = [(s.base_offset, s.next_offset, s.size) for s in memory.segments]
        assert segments == [(s.base_offset, s.next_offset, s.size) for s in real.segments]
        assert list(self.memory.batch_headers(TP)) == list(self.real.batch_headers(TP))
        for offset in {memory.start_offset, (memory.start_offset + memory.end_offset) // 2}:
            for limit in (memory.high_watermark, memory.end_offset):
                for max_bytes in (1, 300, 100_000):
                    assert self.memory.read(TP, offset, max_bytes, limit, True) == self.real.read(
                        TP, offset, max_bytes, limit, True
                    ), (offset, limit, max_bytes)

    def real_log(self) -> PartitionLog:
        assert self.real.logs is not None
        log = self.real.logs.get_log(checkpoint.TopicPartition(TP.topic, TP.partition))
        assert log is not None
        return log

    # -- the effects a replica manager asks for ----------------------------------------------------------------

    def lead(self, sizes: list[int], timestamp: int) -> Outcome:
        records = encode_batch([b"v" * size for size in sizes], timestamps=timestamp)
        headers = validate_produce(records, max_message_bytes=1 << 20, segment_bytes=1 << 30)
        base = self.memory.logs[TP].log.end_offset
        return self.apply(AppendAsLeader(TP.topic, TP.partition, records, base, self.epoch, tuple(headers)))

    def follow(self, batches: list[list[int]], timestamp: int) -> Outcome:
        offset = self.memory.logs[TP].log.end_offset
        records = b""
        for sizes in batches:
            values = [b"f" * size for size in sizes]
            records += encode_batch(values, timestamps=timestamp, base_offset=offset, partition_leader_epoch=self.epoch)
            offset += len(values)
        headers = validate_replicated(records)
        return self.apply(AppendAsFollower(TP.topic, TP.partition, records, tuple(headers)))

    def step(self, kind: str, a: int, b: int) -> None:
        log = self.memory.logs[TP].log
        start, end, hw = log.start_offset, log.end_offset, log.high_watermark
        if kind == "lead":
            self.epoch += a % 5 == 0
            self.lead([1 + (a + i * b) % 40 for i in range(1 + b % 3)], self.now - 2_000 + a * 4)
        elif kind == "follow":
            self.follow([[1 + (a * i) % 50] * (1 + (b + i) % 3) for i in range(1 + b % 8)], self.now - a * 3)
        elif kind == "hw":
            self.apply(UpdateHighWatermark(TP.topic, TP.partition, max(end - a % 4, start)))
        elif kind == "retain":
            self.now = WallMs(self.now + a * 5)
            self.apply(EnforceRetention(TP.topic, TP.partition, self.now))
        elif kind == "truncate":
            self.apply(Truncate(TP.topic, TP.partition, (a * (end + 2)) // 1001))
        elif kind == "start_over":
            self.apply(TruncateFullyAndStartAt(TP.topic, TP.partition, end + a % 7))
        elif kind == "advance":
            self.apply(AdvanceLogStartOffset(TP.topic, TP.partition, start + (a * (hw - start + 2)) // 1001))
        else:
            configs = {"segment.bytes": str(150 + a), "retention.bytes": str(b * 2 - 1)}
            self.apply(UpdateLogConfig(TP.topic, TP.partition, configs))


def _outcome(apply: Callable[[], StorageOutcome]) -> Outcome:
    try:
        return apply()
    except StorageRefusal as refusal:
        return refusal.error_code.name


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(KINDS), st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=40
    ),
    segment_bytes=st.sampled_from([150, 400, 2_000]),
    segment_ms=st.sampled_from([100, 1_000, 100_000]),
    jitter_ms=st.sampled_from([0, 50]),
    retention_bytes=st.sampled_from([-1, 0, 500, 3_000]),
)
def test_the_memory_disk_does_what_the_storage_engine_does(
    steps: list[tuple[str, int, int]], segment_bytes: int, segment_ms: int, jitter_ms: int, retention_bytes: int
) -> None:
    configs = {
        "segment.bytes": str(segment_bytes),
        "segment.ms": str(segment_ms),
        "segment.jitter.ms": str(jitter_ms),
        "retention.bytes": str(retention_bytes),
        "retention.ms": "-1",  # by time: the test below (the engine's largest timestamp after a truncation differs)
    }
    with tempfile.TemporaryDirectory() as directory:
        twins = Twins(Path(directory), configs)
        for kind, a, b in steps:
            twins.step(kind, a, b)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(GROWING), st.integers(0, 1000), st.integers(0, 1000)),
        min_size=1,
        max_size=40,
    ),
    retention_ms=st.sampled_from([0, 500, 2_000]),
)
def test_time_based_retention_deletes_the_same_segments(steps: list[tuple[str, int, int]], retention_ms: int) -> None:
    configs = {"segment.bytes": "400", "segment.ms": "1000", "retention.ms": str(retention_ms)}
    with tempfile.TemporaryDirectory() as directory:
        twins = Twins(Path(directory), configs)
        for kind, a, b in steps:
            twins.step(kind, a, b)


def test_a_retention_run_reports_what_the_broker_reports() -> None:
    """Given three segments below the HW, the oldest two a second old and retention.ms 500, when retention runs, then
    both disks delete the two (SegmentDeleted retention_ms, oldest first) and report the log start offset moved."""
    with tempfile.TemporaryDirectory() as directory:
        twins = Twins(Path(directory), {"segment.bytes": "150", "retention.ms": "500"})
        for timestamp in (T0 - 1_000, T0 - 900, T0):
            twins.lead([60], timestamp)
        twins.apply(UpdateHighWatermark(TP.topic, TP.partition, 3))
        outcome = twins.apply(EnforceRetention(TP.topic, TP.partition, twins.now))
        assert isinstance(outcome, StorageOutcome)
        deleted = [(e.base_offset, e.reason) for e in outcome.events if isinstance(e, events.SegmentDeleted)]
        assert deleted == [(0, "retention_ms"), (1, "retention_ms")] and len(outcome.events) == 2
        assert outcome.log_start_offset == 2


def test_a_truncated_segment_keeps_its_largest_record_timestamp() -> None:
    """Given a segment of two batches stamped a minute ago (no time index entry yet: they are small), when its last
    batch is truncated and a new segment rolls, then retention.ms 10 s deletes it by its record timestamp, as
    Kafka's does (the storage engine once took the time index's last entry alone, and fell back to the file's
    modification time)."""
    with tempfile.TemporaryDirectory() as directory:
        twins = Twins(Path(directory), {"segment.bytes": "200", "retention.ms": "10000"})
        twins.lead([10], T0 - 60_000)
        twins.lead([10], T0 - 60_000)
        twins.apply(Truncate(TP.topic, TP.partition, 1))
        twins.lead([60], T0)  # does not fit beside the first: a new segment
        twins.apply(UpdateHighWatermark(TP.topic, TP.partition, 2))
        outcome = twins.apply(EnforceRetention(TP.topic, TP.partition, twins.now))
        assert isinstance(outcome, StorageOutcome)
        assert [e.base_offset for e in outcome.events if isinstance(e, events.SegmentDeleted)] == [0]
