"""The partition log behaves like Kafka's: layout, index rule, rolls, reads, retention, truncation, flushing.

Method: given a log in a temporary directory with small segments, when batches are appended and maintenance
runs at explicit times (`now_ms`), then offsets, file names, bytes on disk and reads are exactly Kafka's.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest

from hightide.core.clock import WallMs
from hightide.core.validation import validate_replicated
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import encode_batch, iter_batch_headers, read_batch_header
from hightide.storage.config import LogConfig
from hightide.storage.errors import OffsetOutOfRange, StorageError
from hightide.storage.log import PartitionLog
from support.logs import TP, batch, batch_of_size, open_log, values

# -- layout and offsets --------------------------------------------------------------------------------------


def test_a_partition_is_a_directory_of_segments_named_by_20_digit_base_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(6):
        log.append_as_leader(batch(5, value_size=10), leader_epoch=0, now=WallMs(0))
    names = sorted(p.name for p in (tmp_path / "orders-3").iterdir())
    assert names[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    bases = [segment.base_offset for segment in log.segments]
    assert bases[0] == 0 and len(bases) > 1
    assert all(f"{base:020d}.log" in names for base in bases)


def test_leader_append_assigns_offsets_from_the_log_end_and_stamps_the_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append_as_leader(batch(3), leader_epoch=7, now=WallMs(0))
    second = log.append_as_leader(batch(2, tag=1), leader_epoch=8, now=WallMs(0))
    assert (first.first_offset, first.last_offset, second.first_offset, second.last_offset) == (0, 2, 3, 4)
    assert second.epoch_starts == ((8, 3),)
    assert log.log_end_offset == 5
    data = log.read(0, 10_000)
    headers = [read_batch_header(data, 0), read_batch_header(data, read_batch_header(data, 0).size)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (3, 8)]
    produced_values = [value for _, value in values(batch(3)) + values(batch(2, tag=1))]
    assert values(data) == list(enumerate(produced_values))


def test_leader_append_keeps_the_batch_bytes_after_the_patched_prefix(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produced = batch(4)
    log.append_as_leader(batch(1), leader_epoch=0, now=WallMs(0))
    log.append_as_leader(produced, leader_epoch=2, now=WallMs(0))
    stored = (tmp_path / "orders-3" / "00000000000000000000.log").read_bytes()[len(batch(1)) :]
    assert stored[:8] == struct.pack(">q", 1)
    assert stored[12:16] == struct.pack(">i", 2)
    assert stored[8:12] == produced[8:12] and stored[16:] == produced[16:]


# -- follower appends ----------------------------------------------------------------------------------------


def _leader(tmp_path: Path, batches: int = 6) -> PartitionLog:
    """A leader's log of `batches` 100-byte batches of 5 records, the leader epoch rising every two batches."""
    leader = open_log(tmp_path / "leader")
    for i in range(batches):
        leader.append_as_leader(batch_of_size(100, count=5, timestamp=1000 + i), leader_epoch=i // 2, now=WallMs(0))
    return leader


def _files(log: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())}


def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    follower = open_log(tmp_path / "follower")
    fetched = leader.read(0, 10_000)
    info = follower.append_as_follower(fetched, now=WallMs(0))
    assert (info.first_offset, info.last_offset, info.size_bytes) == (0, 29, 600)
    assert info.epoch_starts == ((0, 0), (1, 10), (2, 20))
    assert follower.read(0, 10_000) == fetched


def test_follower_append_must_not_start_below_the_log_end_offset(tmp_path: Path) -> None:
    leader = _leader(tmp_path)
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 300), now=WallMs(0))  # offsets 0..14
    before = _files(follower)
    with pytest.raises(StorageError, match="does not continue the log at offset 15 \\(an overlap\\)") as raised:
        follower.append_as_follower(leader.read(10, 10_000), now=WallMs(0))
    assert raised.value.error_code is ErrorCode.INVALID_RECORD
    assert follower.log_end_offset == 15 and _files(follower) == before


def test_follower_append_takes_a_compacted_leaders_gaps_and_refuses_overlaps(tmp_path: Path) -> None:
    # Offsets 2..4 and 7 were compacted away on the leader: Kafka's follower takes gaps, at the LEO or between
    # batches, as long as offsets increase; the reads skip them.
    holey = encode_batch([b"a", b"b"], base_offset=0, timestamps=0) + encode_batch([b"c"], base_offset=5, timestamps=0)
    follower = open_log(tmp_path)
    assert validate_replicated(holey)
    follower.append_as_follower(holey, now=WallMs(0))
    follower.append_as_follower(encode_batch([b"d"], base_offset=8, timestamps=0), now=WallMs(0))
    assert follower.log_end_offset == 9
    assert [h.base_offset for h in follower.batch_headers()] == [0, 5, 8]
    assert read_batch_header(follower.read(3, 10_000)).base_offset == 5
    overlapping = encode_batch([b"e", b"f"], base_offset=9, timestamps=0) + encode_batch([b"g"], base_offset=10)
    with pytest.raises(StorageError) as parsed:
        follower.append_as_follower(overlapping, now=WallMs(0))
    assert parsed.value.error_code is ErrorCode.CORRUPT_MESSAGE
    headers = [header for _, header in iter_batch_headers(overlapping)]
    with pytest.raises(StorageError, match="batch at offset 10 does not continue the log at offset 11") as given:
        follower.append_as_follower(overlapping, now=WallMs(0), validated=headers)
    assert given.value.error_code is ErrorCode.INVALID_RECORD
    assert follower.log_end_offset == 9


def test_a_fetched_set_larger_than_segment_bytes_rolls_between_batches(tmp_path: Path) -> None:
    # The leader's segments are large; the follower's segment.bytes (250) is below one fetch (600 bytes).
    leader = _leader(tmp_path)
    follower = open_log(tmp_path / "follower", segment_bytes=250)
    fetched = leader.read(0, 10_000)
    info = follower.append_as_follower(fetched, now=WallMs(0))
    assert info.rolled_to == (10, 20)
    assert [(s.base_offset, s.size) for s in follower.segments] == [(0, 200), (10, 200), (20, 200)]
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 29, 30)
    assert follower.read(0, 10_000, min_one_batch=True) == fetched[:200]  # a read stops at a segment's end
    assert b"".join(follower.read(o, 10_000) for o in (0, 10, 20)) == fetched


def test_a_single_batch_larger_than_segment_bytes_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    leader = _leader(tmp_path, batches=1)
    follower = open_log(tmp_path / "follower", segment_bytes=150)
    follower.append_as_follower(leader.read(0, 100), now=WallMs(0))
    before = _files(follower)
    bigger = encode_batch([b"x" * 200], base_offset=5, timestamps=0) + encode_batch([b"y"], base_offset=6, timestamps=0)
    with pytest.raises(StorageError, match="the batch at offset 5") as raised:
        follower.append_as_follower(bigger, now=WallMs(0))
    assert raised.value.error_code is ErrorCode.RECORD_LIST_TOO_LARGE
    assert follower.log_end_offset == 5 and _files(follower) == before


def test_a_follower_takes_batches_over_its_max_message_bytes(tmp_path: Path) -> None:
    # Kafka's appendAsFollower ignores the record size: the leader accepted the batch under its own limits.
    leader = _leader(tmp_path, batches=1)
    follower = open_log(tmp_path / "follower", max_message_bytes=50)
    assert follower.append_as_follower(leader.read(0, 10_000), now=WallMs(0)).last_offset == 4


def test_an_append_computes_each_batchs_crc_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    produced = [batch(3, tag=tag) for tag in range(4)]
    leader_bytes = b"".join(produced[:1])
    crcs: list[int] = []
    real = crc32c.crc32c

    def counting(data: bytes) -> int:
        crcs.append(len(data))
        return real(data)

    leader = open_log(tmp_path / "leader")
    monkeypatch.setattr(crc32c, "crc32c", counting)
    headers = leader.validate_client_batches(leader_bytes)
    leader.append_as_leader(leader_bytes, leader_epoch=0, now=WallMs(0), validated=headers)
    assert len(crcs) == 1, "validated headers are not checked again"
    for data in produced[1:]:
        leader.append_as_leader(data, leader_epoch=0, now=WallMs(0))
    assert len(crcs) == 4, "without headers, one CRC per batch (validate_produce's)"
    fetched = leader.read(0, 10_000)
    follower = open_log(tmp_path / "follower")
    crcs.clear()
    follower.append_as_follower(fetched, now=WallMs(0), validated=validate_replicated(fetched))
    assert len(crcs) == 4, "the caller's validate_replicated, and nothing in the log"
    crcs.clear()
    open_log(tmp_path / "other").append_as_follower(fetched, now=WallMs(0))
    assert len(crcs) == 4


# -- the index rule (worked example from Kafka's LogSegment.append) ------------------------------------------


def test_index_entry_added_when_more_than_index_interval_bytes_since_the_last(tmp_path: Path) -> None:
    # Eleven 1000-byte batches of ten records: entries at (59, 5000) and (109, 10000), none for the first append.
    log = open_log(tmp_path, index_interval_bytes=4096)
    produced = batch_of_size(1000, count=10)
    for _ in range(11):
        log.append_as_leader(produced, leader_epoch=0, now=WallMs(0))
    log.flush()
    index = (tmp_path / "orders-3" / "00000000000000000000.index").read_bytes()
    assert index == struct.pack(">ii", 59, 5000) + struct.pack(">ii", 109, 10000)
    # The time index points at the batch where the maximum timestamp (all are 1000) was first reached.
    timeindex = (tmp_path / "orders-3" / "00000000000000000000.timeindex").read_bytes()
    assert timeindex == struct.pack(">qi", 1000, 9)


# -- rolling --------------------------------------------------------------------------------------------------


def test_roll_when_the_next_batch_would_pass_segment_bytes(tmp_path: Path) -> None:
    produced = batch_of_size(100, count=1)
    log = open_log(tmp_path, segment_bytes=350)
    for _ in range(4):
        info = log.append_as_leader(produced, leader_epoch=0, now=WallMs(0))
    assert [(s.base_offset, s.size) for s in log.segments] == [(0, 300), (3, 100)]
    assert info.rolled_to == (3,)


def test_roll_when_the_segment_is_older_than_segment_ms_by_record_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(batch(1, timestamp=10_000), leader_epoch=0, now=WallMs(10_000))
    log.append_as_leader(batch(1, timestamp=11_000), leader_epoch=0, now=WallMs(11_000))
    assert len(log.segments) == 1
    info = log.append_as_leader(batch(1, timestamp=11_001), leader_epoch=0, now=WallMs(11_001))
    assert info.rolled_to == (2,) and [s.base_offset for s in log.segments] == [0, 2]


def test_an_empty_segment_never_rolls_for_age(tmp_path: Path) -> None:
    log = open_log(tmp_path, now=WallMs(0), segment_ms=10)
    info = log.append_as_leader(batch(1, timestamp=10**6), leader_epoch=0, now=WallMs(10**6))
    assert info.rolled_to == () and len(log.segments) == 1


def test_roll_when_the_offset_index_is_full(tmp_path: Path) -> None:
    # segment.index.bytes=36 holds 4 offset entries (and 3 time entries, but one timestamp needs just one);
    # with index.interval.bytes=0 every batch after the first adds an offset entry.
    log = open_log(tmp_path, segment_index_bytes=36, index_interval_bytes=0)
    for _ in range(7):
        log.append_as_leader(batch(1), leader_epoch=0, now=WallMs(0))
    assert log.segments[0].offset_index.entries == 4
    assert [s.base_offset for s in log.segments] == [0, 5]


def test_roll_when_offsets_no_longer_fit_a_relative_offset(tmp_path: Path) -> None:
    # A leader's batch at offset 1 whose last offset delta is 2^31 - 1 (a compacted batch keeps its deltas):
    # its last offset, 2^31, is too far from base 0 for an index entry, so the segment rolls at offset 1.
    log = open_log(tmp_path)
    log.append_as_leader(batch(1), leader_epoch=0, now=WallMs(0))
    far = _with_last_offset_delta(encode_batch([b"far"], base_offset=1, timestamps=1_000), 2**31 - 1)
    info = log.append_as_follower(far, now=WallMs(0))
    assert info.rolled_to == (1,)
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert log.log_end_offset == 2**31 + 1


def _with_last_offset_delta(data: bytes, delta: int) -> bytes:
    """The batch with another last offset delta (under the CRC: the batch is signed again)."""
    patched = bytearray(data)
    patched[23:27] = struct.pack(">i", delta)
    patched[17:21] = struct.pack(">I", crc32c.crc32c(bytes(patched[21:])))
    return bytes(patched)


# -- reading --------------------------------------------------------------------------------------------------


def test_read_returns_whole_batches_up_to_max_bytes_from_the_batch_holding_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    produced = batch_of_size(100, count=5)
    for _ in range(12):
        log.append_as_leader(produced, leader_epoch=0, now=WallMs(0))
    assert [offset for offset, _ in values(log.read(7, 250))] == list(range(5, 15))
    assert len(log.read(7, 99)) == 100  # at least one batch (KIP-74)
    assert log.read(7, 99, min_one_batch=False) == b""
    # Reads stop at the segment's end; the next read continues in the next segment.
    assert [offset for offset, _ in values(log.read(20, 10_000))] == list(range(20, 25))
    assert [offset for offset, _ in values(log.read(25, 100))] == list(range(25, 30))


def test_read_never_returns_a_batch_reaching_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for tag in range(3):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
    assert [o for o, _ in values(log.read(0, 10_000, max_offset=4))] == [0, 1, 2, 3]
    assert [o for o, _ in values(log.read(0, 10_000, max_offset=3))] == [0, 1]
    assert log.read(4, 10_000, max_offset=4) == b""


def _every_read(log: PartitionLog) -> list[bytes]:
    """The log read from every offset, with budgets that cut inside and between batches, and HW-like bounds."""
    end = log.log_end_offset
    return [
        log.read(start, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        for start in range(log.log_start_offset, end + 1)
        for max_bytes in (0, 99, 100, 250, 10_000)
        for max_offset in (None, start + 3, start + 8, end)
        for min_one in (True, False)
    ]


def test_reads_from_the_remembered_tail_equal_reads_that_scan_the_segment(tmp_path: Path) -> None:
    """A segment answers reads of its latest batches from what it appended; a log reopened from disk scans batch
    headers from the index. Both give the same bytes, after appends of both kinds and after truncations."""
    log = open_log(tmp_path / "a", segment_bytes=1_500, index_interval_bytes=150)
    for i in range(9):
        log.append_as_leader(batch_of_size(100, count=5, timestamp=1_000 + i), leader_epoch=0, now=WallMs(0))
    follower = open_log(tmp_path / "b", segment_bytes=1_500, index_interval_bytes=150)
    follower.append_as_follower(log.read(0, 10_000), now=WallMs(0))
    log.truncate_to(32, WallMs(0))  # inside the seventh batch: it goes, and the tail is read from disk again
    for _ in range(2):  # batches of another size: nothing after the cut lies where a batch before it did
        log.append_as_leader(batch_of_size(150, count=4), leader_epoch=1, now=WallMs(0))
    for written in (log, follower):
        answers = _every_read(written)
        written.close()
        reopened = PartitionLog.open(written.directory, TP, written.config, WallMs(0), clean_shutdown=True)
        assert _every_read(reopened) == answers
        reopened.close()


def test_read_outside_the_log_is_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=0, now=WallMs(0))
    assert log.read(2, 100) == b""
    for offset in (-1, 3):
        with pytest.raises(OffsetOutOfRange) as raised:
            log.read(offset, 100)
        assert raised.value.error_code is ErrorCode.OFFSET_OUT_OF_RANGE


def test_lookup_by_timestamp_finds_the_first_record_at_or_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, index_interval_bytes=50)
    for i in range(20):
        log.append_as_leader(
            encode_batch([b"a", b"b"], timestamps=[1000 + 10 * i, 1005 + 10 * i]), leader_epoch=0, now=WallMs(0)
        )
    assert log.offset_for_timestamp(0) == (1000, 0)
    assert log.offset_for_timestamp(1001) == (1005, 1)
    assert log.offset_for_timestamp(1006) == (1010, 2)
    assert log.offset_for_timestamp(1195) == (1195, 39)
    assert log.offset_for_timestamp(1196) is None


def test_the_max_timestamp_is_the_first_record_that_has_it_in_the_first_segment_and_batch_that_reached_it(
    tmp_path: Path,
) -> None:
    """KIP-734's ListOffsets MAX_TIMESTAMP, as Kafka's fetchOffsetByTimestamp: timestamps out of order across
    batches and within one; the largest (1500) is reached first by offset 5 (records 4..6 are one batch: 900, 1500,
    1500) and again in the next segment (a batch at 1500, offset 7), and the answer stays offset 5. It
    survives a reopen (the segments' max timestamps recovered from the time index)."""
    log = open_log(tmp_path, segment_bytes=250, index_interval_bytes=50)
    assert log.max_timestamp_offset() is None
    for timestamps in ([1000, 1100], [1050, 1010], [900, 1500, 1500], [1500], [1200], [1300, 1400]):
        log.append_as_leader(
            encode_batch([b"v"] * len(timestamps), timestamps=timestamps), leader_epoch=0, now=WallMs(0)
        )
    assert [s.base_offset for s in log.segments] == [0, 7]  # the second segment reaches 1500 too, at offset 7
    assert log.max_timestamp_offset() == (1500, 5)
    log.close()
    reopened = PartitionLog.open(log.directory, TP, log.config, WallMs(0), clean_shutdown=True)
    assert reopened.max_timestamp_offset() == (1500, 5)
    reopened.close()


# -- retention ------------------------------------------------------------------------------------------------


def _three_segments(tmp_path: Path, **config: int) -> PartitionLog:
    """Batches of 5 records, 100 bytes, timestamps 1000, 2000, ... 6000; two batches per segment."""
    log = open_log(tmp_path, segment_bytes=250, **config)
    for i in range(6):
        log.append_as_leader(batch_of_size(100, count=5, timestamp=1000 * (i + 1)), 0, now=WallMs(0))
    assert [s.base_offset for s in log.segments] == [0, 10, 20]
    return log


def test_retention_ms_deletes_old_segments_below_the_high_watermark_and_moves_log_start(
    tmp_path: Path,
) -> None:
    log = _three_segments(tmp_path, retention_ms=2500)
    assert log.delete_old_segments(now=WallMs(10_000)) == []  # HW 0: nothing is deletable yet
    log.update_high_watermark(30)
    deleted = log.delete_old_segments(now=WallMs(4_600))  # segment 0's newest record is 2000, segment 10's is 4000
    assert [(d.base_offset, d.reason) for d in deleted] == [(0, "retention_ms")]
    assert log.log_start_offset == 10
    assert not (tmp_path / "orders-3" / "00000000000000000000.log").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(9, 100)


def test_retention_ms_may_delete_everything_and_leaves_an_empty_active_segment(tmp_path: Path) -> None:
    log = _three_segments(tmp_path, retention_ms=10)
    log.update_high_watermark(30)
    deleted = log.delete_old_segments(now=WallMs(10**6))
    assert [d.base_offset for d in deleted] == [0, 10, 20]
    assert [(s.base_offset, s.size) for s in log.segments] == [(30, 0)]
    assert (log.log_start_offset, log.log_end_offset) == (30, 30)


def test_retention_bytes_deletes_oldest_segments_while_the_log_stays_above_the_limit(tmp_path: Path) -> None:
    log = _three_segments(tmp_path, retention_bytes=250)
    log.update_high_watermark(30)
    deleted = log.delete_old_segments(now=WallMs(0))
    assert [(d.base_offset, d.reason) for d in deleted] == [(0, "retention_bytes")]
    assert log.size_bytes == 400 and log.log_start_offset == 10


def test_retention_only_deletes_segments_wholly_below_the_high_watermark(tmp_path: Path) -> None:
    log = _three_segments(tmp_path, retention_bytes=0)
    log.update_high_watermark(15)
    assert [d.base_offset for d in log.delete_old_segments(now=WallMs(0))] == [0]


def test_delete_records_moves_log_start_to_the_offset_and_drops_segments_below_it(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(5, now=WallMs(0))  # above the HW (0)
    log.update_high_watermark(30)
    update = log.delete_records(23, now=WallMs(0))
    assert (update.log_start_offset_before, update.log_start_offset) == (0, 23)
    assert [(d.base_offset, d.next_offset, d.reason) for d in update.deleted] == [
        (0, 10, "log_start_offset"),
        (10, 20, "log_start_offset"),
    ]
    assert [s.base_offset for s in log.segments] == [20]
    assert next(o for o, _ in values(log.read(23, 10_000))) == 20  # whole batch; consumers skip below 23
    with pytest.raises(OffsetOutOfRange):
        log.read(22, 100)


def test_delete_records_to_minus_one_means_up_to_the_high_watermark(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.update_high_watermark(12)
    assert log.delete_records(-1, now=WallMs(0)).log_start_offset == 12
    assert [s.base_offset for s in log.segments] == [10, 20]
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(-2, now=WallMs(0))


def test_six_segments_an_hour_old_are_deleted_by_retention_ms_on_the_wall_clock(tmp_path: Path) -> None:
    # The scenario: records stamped an hour ago by the producer's wall clock, retention.ms=1000, and the
    # wall-clock time now. (A monotonic `now`, a few hours since boot, would have kept them: mypy now refuses it.)
    now = WallMs(1_700_000_000_000)
    log = open_log(tmp_path, segment_bytes=250, retention_ms=1000)
    for i in range(12):
        log.append_as_leader(batch_of_size(100, count=5, timestamp=now - 3_600_000 + i), 0, now=now)
    assert len(log.segments) == 6
    log.update_high_watermark(log.log_end_offset)
    deleted = log.delete_old_segments(now)
    assert [(d.base_offset, d.reason) for d in deleted] == [(10 * i, "retention_ms") for i in range(6)]
    assert [(s.base_offset, s.size) for s in log.segments] == [(60, 0)]
    assert log.log_start_offset == log.log_end_offset == 60


def test_segments_wholly_below_the_log_start_offset_go_first_and_say_so(tmp_path: Path) -> None:
    # Kafka's order: the log start offset pass, then retention.bytes, then retention.ms. A log reopened with a
    # checkpointed log start offset of 22 still holds segments 0 and 10, old enough for retention.ms too.
    _three_segments(tmp_path).close()
    log = PartitionLog.open(
        tmp_path / "orders-3",
        TP,
        LogConfig(segment_bytes=250, retention_ms=10),
        WallMs(0),
        log_start_offset=22,
        clean_shutdown=True,
    )
    log.update_high_watermark(30)
    deleted = log.delete_old_segments(now=WallMs(10**6))
    assert [(d.base_offset, d.reason) for d in deleted] == [
        (0, "log_start_offset"),
        (10, "log_start_offset"),
        (20, "retention_ms"),
    ]
    assert [(s.base_offset, s.size) for s in log.segments] == [(30, 0)]
    assert log.log_start_offset == 30


# -- the log start offset ---------------------------------------------------------------------------------------


def test_a_follower_follows_its_leaders_log_start_offset_and_deletes_the_segments_below_it(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.update_high_watermark(30)
    update = log.advance_log_start_offset(25, now=WallMs(0))
    assert (update.moved, update.log_start_offset_before, update.log_start_offset) == (True, 0, 25)
    assert [(d.base_offset, d.next_offset, d.size_bytes, d.reason) for d in update.deleted] == [
        (0, 10, 200, "log_start_offset"),
        (10, 20, 200, "log_start_offset"),
    ]
    assert [s.base_offset for s in log.segments] == [20]
    assert log.recovery_point >= 25
    with pytest.raises(OffsetOutOfRange):
        log.read(24, 100)
    assert not (tmp_path / "orders-3" / "00000000000000000010.log").exists()


def test_the_log_start_offset_never_passes_the_high_watermark(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.update_high_watermark(12)
    with pytest.raises(OffsetOutOfRange, match="the high watermark is 12"):
        log.advance_log_start_offset(13, now=WallMs(0))
    assert log.log_start_offset == 0 and [s.base_offset for s in log.segments] == [0, 10, 20]
    assert log.advance_log_start_offset(12, now=WallMs(0)).log_start_offset == 12


def test_the_log_start_offset_never_moves_back(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.update_high_watermark(30)
    log.advance_log_start_offset(15, now=WallMs(0))
    update = log.advance_log_start_offset(5, now=WallMs(0))
    assert (update.moved, update.log_start_offset, update.deleted) == (False, 15, ())
    assert log.log_start_offset == 15


# -- truncation -----------------------------------------------------------------------------------------------


def test_truncate_to_removes_later_segments_and_the_suffix_of_the_one_holding_the_offset(
    tmp_path: Path,
) -> None:
    log = _three_segments(tmp_path)
    log.update_high_watermark(30)
    log.truncate_to(15, now=WallMs(0))
    assert [s.base_offset for s in log.segments] == [0, 10]
    assert (log.log_end_offset, log.high_watermark) == (15, 15)
    assert not (tmp_path / "orders-3" / "00000000000000000020.log").exists()
    log.append_as_leader(batch(1), leader_epoch=1, now=WallMs(0))
    assert [o for o, _ in values(log.read(15, 10_000))] == [15]


def test_truncate_into_the_middle_of_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), leader_epoch=0, now=WallMs(0))
    log.append_as_leader(batch(3, tag=1), leader_epoch=0, now=WallMs(0))
    log.truncate_to(4, now=WallMs(0))
    assert log.log_end_offset == 3


def test_truncate_at_or_beyond_the_log_end_changes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), leader_epoch=0, now=WallMs(0))
    assert log.truncate_to(3, now=WallMs(0)) == 0 and log.log_end_offset == 3


def test_truncate_fully_and_start_at_an_offset(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.truncate_fully_and_start_at(100, now=WallMs(0))
    assert [(s.base_offset, s.size) for s in log.segments] == [(100, 0)]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert sorted(p.name for p in (tmp_path / "orders-3").glob("*.log")) == ["00000000000000000100.log"]
    info = log.append_as_follower(encode_batch([b"x"], base_offset=100, timestamps=0), now=WallMs(0))
    assert info.first_offset == 100


def test_truncate_below_the_first_segment_starts_over(tmp_path: Path) -> None:
    log = _three_segments(tmp_path)
    log.update_high_watermark(30)
    log.delete_records(20, now=WallMs(0))
    log.truncate_to(5, now=WallMs(0))
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)


# -- bad input changes nothing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda b: b[:-1], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:16] + b"\x01" + b[17:], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b"", ErrorCode.INVALID_RECORD),
        (lambda b: b + b"\x00" * 10, ErrorCode.CORRUPT_MESSAGE),
    ],
)
def test_a_bad_batch_is_rejected_with_a_kafka_error_and_the_log_is_unchanged(
    tmp_path: Path, mangle: object, code: ErrorCode
) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=0, now=WallMs(0))
    before = (tmp_path / "orders-3" / "00000000000000000000.log").read_bytes()
    assert callable(mangle)
    with pytest.raises(StorageError) as raised:
        log.append_as_leader(mangle(batch(3, tag=1)), leader_epoch=0, now=WallMs(0))
    assert raised.value.error_code is code
    assert log.log_end_offset == 2
    assert (tmp_path / "orders-3" / "00000000000000000000.log").read_bytes() == before


def test_a_batch_over_max_message_bytes_is_record_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=200)
    with pytest.raises(StorageError) as raised:
        log.append_as_leader(batch_of_size(201, count=1), leader_epoch=0, now=WallMs(0))
    assert raised.value.error_code is ErrorCode.RECORD_TOO_LARGE
    assert log.log_end_offset == 0
    log.append_as_leader(batch_of_size(200, count=1), leader_epoch=0, now=WallMs(0))
    assert log.log_end_offset == 1


def test_a_batch_whose_count_disagrees_with_its_offset_delta_is_invalid_record(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produced = bytearray(batch(3))
    produced[57:61] = struct.pack(">i", 4)  # the record count, under the CRC: sign the batch again
    produced[17:21] = struct.pack(">I", crc32c.crc32c(bytes(produced[21:])))
    with pytest.raises(StorageError) as raised:
        log.append_as_leader(bytes(produced), leader_epoch=0, now=WallMs(0))
    assert raised.value.error_code is ErrorCode.INVALID_RECORD


# -- durability -------------------------------------------------------------------------------------------------


def test_flush_messages_fsyncs_and_advances_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=5)
    log.append_as_leader(batch(3), leader_epoch=0, now=WallMs(0))
    assert log.recovery_point == 0
    log.append_as_leader(batch(3, tag=1), leader_epoch=0, now=WallMs(0))
    assert log.recovery_point == 6


def test_flush_ms_flushes_when_due(tmp_path: Path) -> None:
    log = open_log(tmp_path, now=WallMs(0), flush_ms=1000)
    log.append_as_leader(batch(3), leader_epoch=0, now=WallMs(10))
    assert not log.flush_if_due(now=WallMs(999)) and log.recovery_point == 0
    assert log.flush_if_due(now=WallMs(1000)) and log.recovery_point == 3


def test_by_default_only_a_roll_schedules_a_flush_of_the_finished_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=150)
    for _ in range(3):
        log.append_as_leader(batch_of_size(100, count=2), leader_epoch=0, now=WallMs(0))
    assert log.recovery_point == 0
    assert log.flush_if_due(now=WallMs(1))
    assert log.recovery_point == log.segments[-1].base_offset == 4
    assert not log.flush_if_due(now=WallMs(2))


def test_index_files_are_small_and_segment_files_hold_exactly_the_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produced = batch(4)
    log.append_as_leader(produced, leader_epoch=0, now=WallMs(0))
    directory = tmp_path / "orders-3"
    assert os.path.getsize(directory / "00000000000000000000.log") == len(produced)
    assert os.path.getsize(directory / "00000000000000000000.index") == 0
    assert log.topic_partition == TP


def test_roll_when_the_time_index_is_full(tmp_path: Path) -> None:
    # segment.index.bytes=48: 6 offset entries but 4 time entries, one kept free, so 3 rising timestamps fill it.
    log = open_log(tmp_path, segment_index_bytes=48, index_interval_bytes=0)
    for timestamp in range(1000, 1006):
        log.append_as_leader(batch(1, timestamp=timestamp), leader_epoch=0, now=WallMs(0))
    # Full at three entries; the entry written on becoming inactive is skipped: 1003 is already the last one.
    assert log.segments[0].time_index.entries == 3
    assert [s.base_offset for s in log.segments] == [0, 4]
