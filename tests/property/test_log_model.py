"""The partition log against an in-memory model, under random leader and follower appends, reads, rolls,
retention, log start offset moves, truncation, crashes (with and without a torn unflushed tail) and a failing
disk (torn writes, a cut-back that fails, an fsync that fails).

Method: hypothesis stateful testing. The model is a list of batches (offsets, values, size); after every step
the whole log, read batch by batch from the log start offset, must equal the model from the same offset, and
the offsets the log reports must equal the model's. A refused append (the disk failed) must leave the model
as it was; when the log went offline instead, an unclean restart must bring back exactly the model.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hightide.core.clock import WallMs
from hightide.protocol.records import decode_batches, encode_batch
from hightide.storage.config import LogConfig
from hightide.storage.errors import DiskError, LogOffline
from hightide.storage.log import PartitionLog
from support.failing_disk import FailingDisk
from support.logs import TP

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=150, segment_ms=5_000, retention_ms=20_000)
START = 1_700_000_000_000  # wall-clock milliseconds: the records' timestamps and `now` share this clock


@dataclass(frozen=True)
class ModelBatch:
    base_offset: int
    values: tuple[bytes, ...]
    timestamp: int
    size: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="hightide-model-"))
        self.now = WallMs(START)
        self.disk = FailingDisk()
        self.log = PartitionLog.open(self.root / str(TP), TP, CONFIG, self.now, clean_shutdown=True, disk=self.disk)
        self.batches: list[ModelBatch] = []
        self.log_start_offset = 0
        self.counter = 0

    def teardown(self) -> None:
        self.log.abandon()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.log_start_offset

    def _batch(self, count: int, value_size: int, base_offset: int = 0, epoch: int = -1) -> tuple[bytes, ModelBatch]:
        values = tuple(f"{self.counter}.{i}".encode().ljust(value_size, b"v") for i in range(count))
        self.counter += 1
        data = encode_batch(list(values), timestamps=self.now, base_offset=base_offset, partition_leader_epoch=epoch)
        return data, ModelBatch(base_offset, values, self.now, len(data))

    # -- rules -----------------------------------------------------------------------------------------

    @rule(count=st.integers(1, 6), value_size=st.integers(0, 60), advance_ms=st.integers(0, 3_000))
    def append(self, count: int, value_size: int, advance_ms: int) -> None:
        self.now = WallMs(self.now + advance_ms)
        data, model = self._batch(count, value_size)
        info = self.log.append_as_leader(data, leader_epoch=self.counter % 3, now=self.now)
        assert info.first_offset == self.log_end_offset
        self.batches.append(ModelBatch(info.first_offset, model.values, model.timestamp, model.size))

    @rule(
        shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 60)), min_size=1, max_size=5),
        advance_ms=st.integers(0, 3_000),
    )
    def append_as_follower(self, shapes: list[tuple[int, int]], advance_ms: int) -> None:
        """A leader's fetched batches, often more than segment.bytes together: the log rolls between them."""
        self.now = WallMs(self.now + advance_ms)
        fetched, models = self._fetched(shapes)
        info = self.log.append_as_follower(fetched, now=self.now)
        assert (info.first_offset, info.last_offset + 1) == (models[0].base_offset, models[-1].next_offset)
        self.batches += models
        assert all(s.size <= CONFIG.segment_bytes for s in self.log.segments)

    def _fetched(self, shapes: list[tuple[int, int]]) -> tuple[bytes, list[ModelBatch]]:
        parts, models, offset = [], [], self.log_end_offset
        for count, value_size in shapes:
            data, model = self._batch(count, value_size, base_offset=offset, epoch=self.counter % 3)
            parts.append(data)
            models.append(model)
            offset = model.next_offset
        return b"".join(parts), models

    @rule(
        shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 60)), min_size=1, max_size=5),
        after_writes=st.integers(0, 2),
        written=st.integers(0, 700),
        short=st.booleans(),
        cut_back_fails=st.booleans(),
    )
    def append_on_a_failing_disk(
        self, shapes: list[tuple[int, int]], after_writes: int, written: int, short: bool, cut_back_fails: bool
    ) -> None:
        """The disk fills up during a follower's append (at one of its writes, one per run of segment.bytes).

        Either the append is undone and the log is as before, or, when cutting back fails too, the log is offline
        and an unclean restart recovers it: the torn batch is cut, and whole batches of the failed append that
        reached the segment it started in (its first run) may survive, as after a crash."""
        fetched, models = self._fetched(shapes)
        self.disk.fail_next_write(errno.ENOSPC, written=written, short=short, after_writes=after_writes)
        self.disk.ftruncate_error = errno.EIO if cut_back_fails else None
        try:
            self.log.append_as_follower(fetched, now=self.now)
        except DiskError as error:
            assert error.offline == cut_back_fails, error
        else:
            assert self.disk.next_write is not None, "the armed write was never reached: the append succeeded"
            self.batches += models
        finally:
            self.disk.heal()
        if self.log.offline:
            with pytest.raises(LogOffline):
                self.log.read(self.log_start_offset, 100)
            before = self.log_end_offset
            self._reopen(clean=False, tear_fraction=0.0)
            survived = [m for m in models if m.next_offset <= self.log.log_end_offset]
            assert self.log.log_end_offset == (survived[-1].next_offset if survived else before)
            self.batches += survived

    @precondition(lambda self: self.batches)
    @rule()
    def flush_on_a_failing_disk(self) -> None:
        """An fsync fails: the log goes offline, and an unclean restart finds everything that was written."""
        nothing_to_flush = self.log.recovery_point == self.log.log_end_offset
        self.disk.fsync_error = errno.EIO
        try:
            self.log.flush()
            assert nothing_to_flush
        except DiskError as error:
            assert error.offline and not nothing_to_flush
        finally:
            self.disk.heal()
        if self.log.offline:
            self._reopen(clean=False, tear_fraction=0.0)

    @rule(offset_fraction=st.floats(0, 1), max_bytes=st.integers(0, 2_000))
    def read_somewhere(self, offset_fraction: float, max_bytes: int) -> None:
        start = self.log_start_offset + int(offset_fraction * (self.log_end_offset - self.log_start_offset))
        data = self.log.read(start, max_bytes)
        expected = [b for b in self.batches if b.next_offset > start]
        got = decode_batches(data)
        if start < self.log_end_offset:
            assert got, "a read below the LEO returns at least one batch"
        assert len(data) <= max_bytes or len(got) == 1
        for (header, records), model in zip(got, expected, strict=False):
            assert header.base_offset == model.base_offset
            assert tuple(r.value for r in records) == model.values

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now)

    @rule(fraction=st.floats(0, 1))
    def advance_high_watermark(self, fraction: float) -> None:
        span = self.log_end_offset - self.log_start_offset
        self.log.update_high_watermark(self.log_start_offset + int(fraction * span))

    @rule(advance_ms=st.integers(0, 30_000))
    def retention(self, advance_ms: int) -> None:
        self.now = WallMs(self.now + advance_ms)
        high_watermark = self.log.high_watermark
        deleted = self.log.delete_old_segments(self.now)
        assert self.log.log_start_offset <= max(high_watermark, self.log_start_offset)
        for segment in deleted:
            assert segment.next_offset <= high_watermark
        self._drop_below(self.log.log_start_offset)

    @rule(fraction=st.floats(0, 1))
    def advance_log_start_offset(self, fraction: float) -> None:
        """A follower following its leader's log start offset (or DeleteRecords), never past the HW."""
        span = self.log.high_watermark - self.log_start_offset
        target = self.log_start_offset + int(fraction * span)
        update = self.log.advance_log_start_offset(target, self.now)
        assert update.log_start_offset == max(target, self.log_start_offset)
        assert all(d.next_offset <= update.log_start_offset for d in update.deleted)
        self._drop_below(target)

    @precondition(lambda self: self.batches)
    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction: float) -> None:
        target = self.log_start_offset + int(fraction * (self.log_end_offset - self.log_start_offset))
        self.log.truncate_to(target, self.now)
        self.batches = [b for b in self.batches if b.next_offset <= target]
        if self.log.log_start_offset < self.log_start_offset:  # truncated below the start: starts over
            self.log_start_offset = self.log.log_start_offset
            self.batches = []

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.log_end_offset

    @rule(clean=st.booleans(), tear_fraction=st.floats(0, 1))
    def restart(self, clean: bool, tear_fraction: float) -> None:
        """A clean restart, or a crash that may tear the unflushed tail of the active segment."""
        self._reopen(clean, tear_fraction)

    def _reopen(self, clean: bool, tear_fraction: float) -> None:
        recovery_point = self.log.recovery_point
        high_watermark = self.log.high_watermark
        if clean:
            self.log.close()
        else:
            self.log.abandon()
            self._tear_unflushed_tail(recovery_point, tear_fraction)
        self.log = PartitionLog.open(
            self.root / str(TP),
            TP,
            CONFIG,
            self.now,
            recovery_point=recovery_point,
            log_start_offset=self.log_start_offset,
            clean_shutdown=clean,
            disk=self.disk,
        )
        self.log.update_high_watermark(high_watermark)

    def _tear_unflushed_tail(self, recovery_point: int, fraction: float) -> None:
        active = self.log.active_segment
        unflushed = [b for b in self.batches if b.base_offset >= max(recovery_point, active.base_offset)]
        tearable = sum(b.size for b in unflushed)
        cut = int(fraction * tearable)
        if cut == 0:
            return
        with open(active.log_path, "r+b") as f:
            f.truncate(active.size - cut)
        kept, remaining = [], tearable - cut
        for model_batch in unflushed:
            if model_batch.size <= remaining:
                kept.append(model_batch)
                remaining -= model_batch.size
            else:
                break
        lost = unflushed[len(kept) :]
        self.batches = self.batches[: len(self.batches) - len(lost)]

    def _drop_below(self, offset: int) -> None:
        self.log_start_offset = max(self.log_start_offset, offset)
        self.batches = [b for b in self.batches if b.next_offset > self.log_start_offset]

    # -- invariants ------------------------------------------------------------------------------------

    @invariant()
    def offsets_match_the_model(self) -> None:
        assert self.log.log_start_offset == self.log_start_offset
        assert self.log.log_end_offset == self.log_end_offset
        assert self.log.log_start_offset <= self.log.high_watermark <= self.log.log_end_offset
        assert self.log.recovery_point <= self.log.log_end_offset

    @invariant()
    def the_whole_log_equals_the_model(self) -> None:
        offset, seen = self.log_start_offset, []
        while offset < self.log.log_end_offset:
            chunk = decode_batches(self.log.read(offset, 1_000))
            assert chunk
            seen.extend(chunk)
            offset = chunk[-1][0].next_offset
        assert [(h.base_offset, tuple(r.value for r in records)) for h, records in seen] == [
            (b.base_offset, b.values) for b in self.batches
        ]

    @invariant()
    def segments_are_contiguous(self) -> None:
        segments = self.log.segments
        for earlier, later in pairwise(segments):
            assert earlier.next_offset <= later.base_offset


LogMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
TestLogAgainstModel = LogMachine.TestCase
