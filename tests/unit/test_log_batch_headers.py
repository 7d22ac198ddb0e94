"""`PartitionLog.batch_headers` walks the headers of the log's batches, as a new leader needs to rebuild its
producer state.

Method: given a real log in a temporary directory with small segments and a dense offset index, when idempotent
producers' batches are appended (and the log is truncated, has its start moved or is reopened), then the headers
walked from the start or from any offset are exactly those appended, with the offsets and leader epoch the log
assigned.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.core.clock import WallMs
from hightide.core.producer_state import BatchMetadata, ProducerStateTable, Verdict
from hightide.protocol.records import BatchHeader, encode_batch, read_batch_header
from hightide.storage.errors import OffsetOutOfRange
from hightide.storage.log import PartitionLog
from support.logs import TP, open_log

LEADER_EPOCH = 3


def produce(log: PartitionLog, count: int, producer_id: int, base_sequence: int, epoch: int = 0) -> BatchHeader:
    """Append one idempotent producer's batch as leader; return the header the log should now hold."""
    values = [f"{producer_id}:{base_sequence + i}".encode() for i in range(count)]
    data = encode_batch(values, producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence)
    info = log.append_as_leader(data, leader_epoch=LEADER_EPOCH, now=WallMs(0))
    return read_batch_header(data)._replace(base_offset=info.first_offset, partition_leader_epoch=LEADER_EPOCH)


def filled_log(tmp_path: Path) -> tuple[PartitionLog, list[BatchHeader]]:
    """A log of 30 batches from three producers (one not idempotent) over many segments."""
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=100)
    sequences = {7: 0, 8: 0}
    appended = []
    for i in range(30):
        count = 1 + i % 4
        if i % 5 == 4:
            data = encode_batch([b"plain"] * count)
            info = log.append_as_leader(data, leader_epoch=LEADER_EPOCH, now=WallMs(0))
            header = read_batch_header(data)._replace(base_offset=info.first_offset, partition_leader_epoch=3)
        else:
            producer_id = 7 + i % 2
            header = produce(log, count, producer_id, sequences[producer_id])
            sequences[producer_id] += count
        appended.append(header)
    assert len(log.segments) >= 4
    return log, appended


def test_from_the_start_the_headers_are_those_appended_across_every_segment(tmp_path: Path) -> None:
    log, appended = filled_log(tmp_path)
    assert list(log.batch_headers()) == appended
    assert list(log.batch_headers(0)) == appended


def test_from_a_middle_offset_the_walk_starts_at_the_batch_holding_it(tmp_path: Path) -> None:
    # Given a log over several segments, when walking from every offset, then the first header is the batch
    # holding it and the rest follow in order (whatever segment and index entry the offset falls on)
    log, appended = filled_log(tmp_path)
    for offset in range(log.log_end_offset):
        holding = next(i for i, h in enumerate(appended) if h.base_offset <= offset <= h.last_offset)
        assert list(log.batch_headers(offset)) == appended[holding:], offset


def test_from_the_log_end_nothing_and_outside_the_log_offset_out_of_range(tmp_path: Path) -> None:
    log, _ = filled_log(tmp_path)
    assert list(log.batch_headers(log.log_end_offset)) == []
    with pytest.raises(OffsetOutOfRange):
        log.batch_headers(log.log_end_offset + 1)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records(10, now=WallMs(0))
    with pytest.raises(OffsetOutOfRange):
        log.batch_headers(9)


def test_by_default_the_walk_starts_at_the_batch_holding_the_log_start_offset(tmp_path: Path) -> None:
    log, appended = filled_log(tmp_path)
    log.update_high_watermark(log.log_end_offset)
    assert appended[13].record_count > 1
    log.delete_records(appended[13].base_offset + 1, now=WallMs(0))
    assert list(log.batch_headers()) == appended[13:]


def test_after_truncation_the_removed_batches_are_gone(tmp_path: Path) -> None:
    log, appended = filled_log(tmp_path)
    cut = appended[17]
    log.truncate_to(cut.base_offset + 1, now=WallMs(0))  # a batch straddling the offset goes whole
    assert list(log.batch_headers()) == appended[:17]
    again = produce(log, 2, 9, 0)
    assert list(log.batch_headers(cut.base_offset)) == [again]


def test_a_reopened_log_walks_the_same_headers(tmp_path: Path) -> None:
    log, appended = filled_log(tmp_path)
    log.close()
    reopened = PartitionLog.open(tmp_path / str(TP), TP, log.config, now=WallMs(0), clean_shutdown=True)
    assert list(reopened.batch_headers()) == appended


def test_appends_during_the_walk_are_not_yielded_and_are_not_disturbed(tmp_path: Path) -> None:
    # Given a walk started over a log, when batches are appended between its steps (rolling segments too)
    log, appended = filled_log(tmp_path)
    walk = log.batch_headers(appended[20].base_offset)
    walked = [next(walk)]
    more = [produce(log, 3, 9, 3 * i) for i in range(10)]
    walked += list(walk)
    # Then the walk ends at the log end as of its start, and the log holds everything
    assert walked == appended[20:]
    assert list(log.batch_headers()) == appended + more


def test_a_new_leader_rebuilding_from_its_log_answers_a_retry_with_the_original_offsets(tmp_path: Path) -> None:
    # Given a follower's log holding a producer's batches, the last of which the old leader never acknowledged
    log, appended = filled_log(tmp_path)
    last = next(h for h in reversed(appended) if h.producer_id == 8)
    # When it becomes leader and rebuilds its producer state from the log
    table = ProducerStateTable()
    table.rebuild(log.batch_headers())
    # Then the producer's retry of that batch is a duplicate carrying the offsets it was appended at
    last_seq = last.base_sequence + last.last_offset_delta
    verdict = table.check(8, 0, last.base_sequence, last_seq)
    assert verdict == Verdict(
        "duplicate", duplicate_of=BatchMetadata(last.base_sequence, last_seq, last.base_offset, last.last_offset)
    )
