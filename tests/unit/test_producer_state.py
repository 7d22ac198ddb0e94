"""The producer state table answers produced batches as Kafka's leader does (KIP-98's deduplication).

Method: given a table that recorded some appends through `update` (or rebuilt them from batch headers), when a
batch is checked, then the verdict is the row of the module docstring's table that Kafka's
ProducerAppendInfo/ProducerStateEntry would pick: append, duplicate with the original offsets, or an error code.
"""

from __future__ import annotations

import pytest

from hightide.core.producer_state import (
    APPEND,
    BATCHES_PER_PRODUCER_MAX,
    INT32_MAX,
    BatchMetadata,
    ProducerEntry,
    ProducerStateTable,
    Verdict,
    last_sequence,
    next_sequence,
)
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import encode_batch, read_batch_header

PID = 1000


def appended(table: ProducerStateTable, *batches: tuple[int, int, int, int], pid: int = PID, epoch: int = 0) -> None:
    """Record (first_seq, last_seq, first_offset, last_offset) batches of one producer and epoch."""
    for first_seq, last_seq, first_offset, last_offset in batches:
        assert table.check(pid, epoch, first_seq, last_seq).kind == "append"
        table.update(pid, epoch, first_seq, last_seq, first_offset, last_offset)


def error(verdict: Verdict) -> ErrorCode:
    assert verdict.kind == "error", verdict
    assert verdict.reason
    return verdict.error


# -- sequences ------------------------------------------------------------------------------------------------


def test_sequences_wrap_from_int32_max_to_zero_like_kafkas_increment_sequence() -> None:
    assert next_sequence(0) == 1
    assert next_sequence(INT32_MAX) == 0
    assert next_sequence(INT32_MAX - 1, 3) == 1
    assert last_sequence(INT32_MAX - 2, 4) == 1
    assert last_sequence(7, 0) == 7


# -- non-idempotent and invalid batches ------------------------------------------------------------------------


def test_a_batch_without_a_producer_id_is_always_appended_and_leaves_no_state() -> None:
    table = ProducerStateTable()
    assert table.check(-1, -1, -1, -1) is APPEND
    table.update(-1, -1, -1, -1, 0, 4)
    assert len(table) == 0


@pytest.mark.parametrize(("epoch", "first_seq", "last_seq"), [(-1, 0, 0), (0, -1, 2), (0, 0, -1), (0, 0, 2**31)])
def test_an_idempotent_batch_with_a_negative_epoch_or_sequence_is_an_invalid_record(
    epoch: int, first_seq: int, last_seq: int
) -> None:
    table = ProducerStateTable()
    assert error(table.check(PID, epoch, first_seq, last_seq)) is ErrorCode.INVALID_RECORD


# -- unknown producers ---------------------------------------------------------------------------------------


def test_an_unknown_producer_starting_at_sequence_0_is_appended() -> None:
    table = ProducerStateTable()
    assert table.check(PID, 3, 0, 9) is APPEND


def test_an_unknown_producer_starting_past_sequence_0_is_out_of_order() -> None:
    # Kafka >= 2.5 would accept it (KIP-360); we refuse, as Kafka 4 does for transactions-v2 producers.
    table = ProducerStateTable()
    appended(table, (0, 4, 0, 4), pid=PID + 1)
    assert error(table.check(PID, 0, 5, 9)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# -- the same epoch ---------------------------------------------------------------------------------------------


def test_the_next_sequence_is_appended_and_a_gap_or_an_overlap_is_out_of_order() -> None:
    table = ProducerStateTable()
    appended(table, (0, 4, 0, 4))
    assert table.check(PID, 0, 5, 7) is APPEND
    assert error(table.check(PID, 0, 6, 7)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error(table.check(PID, 0, 3, 7)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error(table.check(PID, 0, 0, 3)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_the_original_offsets() -> None:
    # Given a producer that appended six batches of two records, each landing 10 offsets after the previous one
    table = ProducerStateTable()
    batches = [(2 * i, 2 * i + 1, 10 * i, 10 * i + 1) for i in range(6)]
    appended(table, *batches)
    # When it retries each of the last five, then each is a duplicate carrying where the batch first landed
    for first_seq, last_seq, first_offset, last_offset in batches[1:]:
        verdict = table.check(PID, 0, first_seq, last_seq)
        assert verdict.kind == "duplicate" and verdict.error is ErrorCode.NONE
        assert verdict.duplicate_of == BatchMetadata(first_seq, last_seq, first_offset, last_offset)
    # And the sixth-last has left the window: out of order, as in Kafka
    assert error(table.check(PID, 0, 0, 1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    entry = table.producer(PID)
    assert entry is not None and len(entry.batches) == BATCHES_PER_PRODUCER_MAX


def test_a_retry_with_a_different_sequence_range_than_the_cached_batch_is_not_a_duplicate() -> None:
    table = ProducerStateTable()
    appended(table, (0, 4, 0, 4), (5, 9, 5, 9))
    assert error(table.check(PID, 0, 5, 8)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error(table.check(PID, 0, 0, 9)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequences_continue_across_the_int32_wrap_and_the_wrapping_batch_is_deduplicated() -> None:
    # Given a producer whose batch ends at 2**31 - 1 and whose next batch wraps to 0
    table = ProducerStateTable()
    table.update(PID, 0, INT32_MAX - 9, INT32_MAX - 2, 100, 107)
    assert table.check(PID, 0, INT32_MAX - 1, 1) is APPEND
    table.update(PID, 0, INT32_MAX - 1, 1, 108, 111)
    # Then the sequence after it is 2, and retrying the wrapping batch is a duplicate
    assert table.check(PID, 0, 2, 2) is APPEND
    assert table.check(PID, 0, INT32_MAX - 1, 1).duplicate_of == BatchMetadata(INT32_MAX - 1, 1, 108, 111)
    # And a batch ending exactly at 2**31 - 1 is followed by sequence 0
    table.update(PID + 1, 0, INT32_MAX - 4, INT32_MAX, 112, 116)
    assert table.check(PID + 1, 0, 0, 3) is APPEND
    assert error(table.check(PID + 1, 0, INT32_MAX, 3)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# -- epochs ---------------------------------------------------------------------------------------------------


def test_an_older_epoch_is_refused_as_an_invalid_producer_epoch_even_for_a_cached_range() -> None:
    table = ProducerStateTable()
    appended(table, (0, 4, 0, 4), epoch=2)
    assert error(table.check(PID, 1, 0, 4)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert error(table.check(PID, 1, 5, 9)) is ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_newer_epoch_must_start_at_sequence_0_and_then_forgets_the_old_epochs_batches() -> None:
    # Given a producer at epoch 0 with two batches
    table = ProducerStateTable()
    appended(table, (0, 4, 0, 4), (5, 9, 5, 9))
    # When it comes back with epoch 1, then only sequence 0 is accepted, not the old epoch's next sequence
    assert error(table.check(PID, 1, 10, 12)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(PID, 1, 0, 4) is APPEND
    table.update(PID, 1, 0, 4, 10, 14)
    # And after the append the epoch-0 batches are gone: the same range in epoch 1 is the new batch's duplicate
    assert table.producer(PID) == ProducerEntry(1, (BatchMetadata(0, 4, 10, 14),))
    assert table.check(PID, 1, 0, 4).duplicate_of == BatchMetadata(0, 4, 10, 14)
    assert error(table.check(PID, 0, 5, 9)) is ErrorCode.INVALID_PRODUCER_EPOCH


# -- the bound on producers -------------------------------------------------------------------------------------


def test_past_producers_max_the_least_recently_updated_producer_is_forgotten() -> None:
    # Given a table for two producers that recorded producers 1 and 2, then 1 again
    table = ProducerStateTable(producers_max=2)
    appended(table, (0, 0, 0, 0), pid=1)
    appended(table, (0, 0, 1, 1), pid=2)
    appended(table, (1, 1, 2, 2), pid=1)
    # When producer 3 appends
    appended(table, (0, 0, 3, 3), pid=3)
    # Then producer 2 is unknown again, so its next batch is refused rather than risk a second append
    assert len(table) == 2 and table.producer(2) is None
    assert list(table.snapshot()) == [1, 3]
    assert error(table.check(2, 0, 1, 1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_update_refuses_a_batch_below_the_producers_last_offset() -> None:
    table = ProducerStateTable()
    appended(table, (0, 4, 10, 14))
    with pytest.raises(AssertionError):
        table.update(PID, 0, 5, 9, 14, 18)


# -- rebuilding from the log --------------------------------------------------------------------------------------


def header(base_offset: int, count: int, pid: int, epoch: int, base_sequence: int) -> bytes:
    return encode_batch(
        [b"v"] * count, base_offset=base_offset, producer_id=pid, producer_epoch=epoch, base_sequence=base_sequence
    )


def test_rebuild_from_batch_headers_equals_the_table_built_by_updates() -> None:
    # Given a log of batches from two producers (one bumping its epoch, one wrapping), and a non-idempotent one
    specs = [(PID, 0, 0, 3), (-1, -1, -1, 2), (PID + 1, 4, INT32_MAX - 1, 3)]
    specs += [(PID, 0, 3 * i + 3, 3) for i in range(6)] + [(PID, 1, 0, 2), (PID + 1, 4, 1, 1)]
    data, offset = [], 0
    by_updates = ProducerStateTable()
    for pid, epoch, base_sequence, count in specs:
        data.append(header(offset, count, pid, epoch, base_sequence))
        last_seq = last_sequence(base_sequence, count - 1) if pid >= 0 else -1
        by_updates.update(pid, epoch, base_sequence, last_seq, offset, offset + count - 1)
        offset += count
    # When a table is rebuilt from their headers (over a table holding something else)
    rebuilt = ProducerStateTable()
    rebuilt.update(7, 0, 0, 0, 0, 0)
    rebuilt.rebuild(read_batch_header(batch) for batch in data)
    # Then it equals the table the updates built, recency order included
    assert rebuilt.snapshot() == by_updates.snapshot()
    assert list(rebuilt.snapshot()) == [PID, PID + 1]
    assert rebuilt.producer(PID + 1) == ProducerEntry(
        4, (BatchMetadata(INT32_MAX - 1, 0, 5, 7), BatchMetadata(1, 1, offset - 1, offset - 1))
    )


def test_after_a_rebuild_a_retried_batch_is_answered_with_the_offsets_it_first_got() -> None:
    # Given a leader that appended a producer's batch at offsets 40..44 and then failed
    batch = header(40, 5, PID, 2, 10)
    # When the new leader rebuilds its table from its log and the producer retries the batch
    table = ProducerStateTable()
    table.rebuild([read_batch_header(batch)])
    verdict = table.check(PID, 2, 10, 14)
    # Then the retry is a duplicate answered with the original offsets, and the next batch is appended
    assert verdict == Verdict("duplicate", duplicate_of=BatchMetadata(10, 14, 40, 44))
    assert table.check(PID, 2, 15, 15) is APPEND
