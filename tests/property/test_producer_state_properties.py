"""The producer state table agrees with a model that keeps the whole log, under random produce histories.

Method: hypothesis. The model keeps every appended batch (the log) and derives each verdict from it by scanning:
a producer is known unless `producers_max` others appended after its last batch, and then only its batches since
it was last forgotten count; its epoch is its last batch's; its cached batches are the last five of its trailing
run in that epoch. Random requests (retries of recent
batches, next sequences, gaps, epoch bumps and stale epochs, sequences near the Int32 wrap, non-idempotent
batches) go to both; the verdicts must agree, a duplicate must carry the offsets the batch was appended at, and a
table rebuilt from the log's headers must equal the one built by updates. The property the table exists for is
checked on its own: no known producer's batch is appended twice in one epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.core.producer_state import INT32_MAX, BatchMetadata, ProducerStateTable, Verdict, last_sequence
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import BatchHeader

PRODUCERS_MAX = 3
KEPT = 5


@dataclass(frozen=True)
class Appended:
    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


def header(batch: Appended) -> BatchHeader:
    count = batch.last_offset - batch.first_offset + 1
    return BatchHeader(
        batch.first_offset,
        0,
        0,
        2,
        0,
        0,
        count - 1,
        0,
        0,
        batch.producer_id,
        batch.producer_epoch,
        batch.first_seq,
        count,
    )


def remembered(log: list[Appended]) -> dict[int, list[Appended]]:
    """Each producer the table should still know, with its batches since it was last forgotten: replaying the log,
    a producer is forgotten when `PRODUCERS_MAX` others appended after its last batch."""
    recent: list[int] = []
    since: dict[int, list[Appended]] = {}
    for batch in log:
        pid = batch.producer_id
        if pid < 0:
            continue
        if pid not in recent:
            since[pid] = []
        else:
            recent.remove(pid)
        recent.append(pid)
        since[pid].append(batch)
        if len(recent) > PRODUCERS_MAX:
            del since[recent.pop(0)]
    return since


def model_verdict(log: list[Appended], pid: int, epoch: int, first_seq: int, last_seq: int) -> Verdict:
    if pid < 0:
        return Verdict("append")
    mine = remembered(log).get(pid, [])
    if not mine:
        return Verdict("append") if first_seq == 0 else Verdict("error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    current = mine[-1].producer_epoch
    if epoch < current:
        return Verdict("error", ErrorCode.INVALID_PRODUCER_EPOCH)
    if epoch > current:
        return Verdict("append") if first_seq == 0 else Verdict("error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    run: list[Appended] = []
    for batch in reversed(mine):
        if batch.producer_epoch != current:
            break
        run.insert(0, batch)
    for batch in run[-KEPT:]:
        if (batch.first_seq, batch.last_seq) == (first_seq, last_seq):
            cached = BatchMetadata(batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset)
            return Verdict("duplicate", duplicate_of=cached)
    if first_seq == (run[-1].last_seq + 1) % (INT32_MAX + 1):
        return Verdict("append")
    return Verdict("error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


requests = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 1, 1, 2, 3, -1]),  # producer id (-1: not idempotent)
        st.sampled_from(["same", "same", "same", "bump", "stale"]),
        st.one_of(st.sampled_from(["next", "next", "zero"]), st.integers(1, 7), st.integers(0, 40)),
        st.integers(1, 3),  # records
    ),
    min_size=10,
    max_size=80,
)


def request(log: list[Appended], op: tuple[int, str, object, int], start_seq: int) -> tuple[int, int, int, int, int]:
    """(producer id, epoch, first seq, last seq, records) of the request an op describes, given the log so far."""
    pid, epoch_choice, seq_choice, count = op
    if pid < 0:
        return pid, -1, -1, -1, count
    mine = [b for b in log if b.producer_id == pid]
    epoch = mine[-1].producer_epoch if mine else 0
    epoch = epoch + 1 if epoch_choice == "bump" else max(epoch - 1, 0) if epoch_choice == "stale" else epoch
    if seq_choice == "next":
        first_seq = (mine[-1].last_seq + 1) % (INT32_MAX + 1) if mine else 0
    elif seq_choice == "zero":
        first_seq = 0
    elif isinstance(seq_choice, int) and seq_choice <= 7 and mine:
        retried = mine[-min(seq_choice, len(mine))]  # a retry of a recent batch
        first_seq, count = retried.first_seq, retried.last_offset - retried.first_offset + 1
    else:
        assert isinstance(seq_choice, int)
        first_seq = (start_seq + seq_choice) % (INT32_MAX + 1)
    return pid, epoch, first_seq, last_sequence(first_seq, count - 1), count


@settings(max_examples=300)
@given(requests, st.sampled_from([0, INT32_MAX - 8]))
def test_the_table_agrees_with_the_whole_log_model(ops: list[tuple[int, str, object, int]], start_seq: int) -> None:
    # Given producers that appended one batch at `start_seq` (as a rebuild from a log would find them)
    table = ProducerStateTable(producers_max=PRODUCERS_MAX)
    log = [Appended(pid, 0, start_seq, start_seq, pid, pid) for pid in range(PRODUCERS_MAX)]
    table.rebuild(header(b) for b in log)
    for op in ops:
        pid, epoch, first_seq, last_seq, count = request(log, op, start_seq)
        verdict = table.check(pid, epoch, first_seq, last_seq)
        expected = model_verdict(log, pid, epoch, first_seq, last_seq)
        assert (verdict.kind, verdict.error, verdict.duplicate_of) == (
            expected.kind,
            expected.error,
            expected.duplicate_of,
        )
        if verdict.kind == "append":
            if table.producer(pid) is not None:  # a forgotten producer's sequence 0 may repeat (see the module)
                same_epoch = [b for b in remembered(log)[pid] if b.producer_epoch == epoch][-KEPT:]
                assert (first_seq, last_seq) not in [(b.first_seq, b.last_seq) for b in same_epoch]
            offset = log[-1].last_offset + 1 if log else 0
            table.update(pid, epoch, first_seq, last_seq, offset, offset + count - 1)
            log.append(Appended(pid, epoch, first_seq, last_seq, offset, offset + count - 1))
        rebuilt = ProducerStateTable(producers_max=PRODUCERS_MAX)
        rebuilt.rebuild(header(b) for b in log)
        assert rebuilt.snapshot() == table.snapshot()
        assert len(table) <= PRODUCERS_MAX
