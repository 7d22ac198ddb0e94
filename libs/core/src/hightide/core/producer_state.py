"""The idempotent producer's state on one partition: the deduplicating half of Kafka's ProducerStateManager.

Room: libs/core (rules as pure objects). Owns, for one partition, each idempotent producer's epoch and the sequence
and offset ranges of its last five appended batches (Kafka's `ProducerStateEntry`, `NUM_BATCHES_TO_RETAIN = 5`),
and the verdict on a produced batch (Kafka's `ProducerAppendInfo.checkSequence` and `checkProducerEpoch`). It never
reads the log, writes snapshots or reads a clock: the broker rebuilds the table from the log's batch headers when it
becomes leader (`rebuild`), checks each produced batch before offsets are assigned (`check`) and records it once
appended (`update`).

Why it exists (KIP-98): a producer whose request timed out sends the same batch, with the same sequence numbers, to
the new leader after a failover. The new leader's table, rebuilt from a log that already holds the batch, answers
"duplicate" with the original offsets, as Kafka's leader does (error NONE, the first append's base offset), and the
batch is not appended twice.

`check(producer_id, producer_epoch, first_seq, last_seq)`, first matching row wins:

| case                                                          | verdict                                        |
| ------------------------------------------------------------- | ---------------------------------------------- |
| producer_id < 0 (not an idempotent batch)                     | append                                         |
| producer_epoch < 0, or a sequence outside [0, 2**31 - 1]      | error INVALID_RECORD (Kafka's LogValidator)    |
| producer unknown, first_seq == 0                              | append                                         |
| producer unknown, first_seq != 0                              | error OUT_OF_ORDER_SEQUENCE_NUMBER (see below) |
| producer_epoch < the producer's epoch                         | error INVALID_PRODUCER_EPOCH                   |
| producer_epoch > the producer's epoch, first_seq == 0         | append (`update` forgets the old epoch)        |
| producer_epoch > the producer's epoch, first_seq != 0         | error OUT_OF_ORDER_SEQUENCE_NUMBER             |
| same epoch, (first_seq, last_seq) is one of the cached batches | duplicate, carrying that batch's offsets       |
| same epoch, first_seq == last cached last_seq + 1             | append (2**31 - 1 is followed by 0)            |
| same epoch, otherwise                                         | error OUT_OF_ORDER_SEQUENCE_NUMBER             |

Kafka answers an older epoch with INVALID_PRODUCER_EPOCH since 2.7 (ProducerFenced before). For an unknown producer
Kafka has changed its mind: before 2.5 it answered UNKNOWN_PRODUCER_ID; from 2.5 (KIP-360) it accepts any sequence,
so a producer whose records retention removed is not stuck; Kafka 4's transactions-v2 producers (KIP-890) must
start at 0 again, as here. We refuse because accepting would turn a retry whose state this table lost (evicted past
`producers_max`, or never rebuilt) into a second append, the one thing this table exists to prevent; the producer
recovers by bumping its epoch, which starts again at sequence 0. A retry of a lost producer's *first* batch
(sequence 0) is still appended twice: no table can tell it from a new producer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import BatchHeader

INT32_MAX: Final = 2**31 - 1
# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: a producer has at most 5 requests in flight per partition
# (max.in.flight.requests.per.connection <= 5 with idempotence), so any retry it can send is among the last 5.
BATCHES_PER_PRODUCER_MAX: Final = 5
PRODUCERS_MAX_DEFAULT: Final = 100_000


def next_sequence(sequence: int, increment: int = 1) -> int:
    """Kafka's `DefaultRecordBatch.incrementSequence`: sequences are non-negative Int32s, 2**31 - 1 wraps to 0."""
    assert 0 <= sequence <= INT32_MAX and 0 <= increment <= INT32_MAX, (sequence, increment)
    return (sequence + increment) % (INT32_MAX + 1)


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record (Kafka's `RecordBatch.lastSequence`)."""
    return next_sequence(base_sequence, last_offset_delta)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its sequence range and where it landed in the log."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What the table knows of one producer: its epoch and its last appended batches, oldest first."""

    producer_epoch: int
    batches: tuple[BatchMetadata, ...]

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq


VerdictKind = Literal["append", "duplicate", "error"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a produced batch: append it, answer with the cached batch's offsets, or refuse it."""

    kind: VerdictKind
    error: ErrorCode = ErrorCode.NONE
    duplicate_of: BatchMetadata | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        assert (self.kind == "error") == (self.error is not ErrorCode.NONE), self
        assert (self.kind == "duplicate") == (self.duplicate_of is not None), self


APPEND: Final = Verdict("append")


def _refuse(error: ErrorCode, reason: str) -> Verdict:
    return Verdict("error", error, reason=reason)


class ProducerStateTable:
    """Per producer id, the producer epoch and the last `BATCHES_PER_PRODUCER_MAX` batches, for one partition.

    At most `producers_max` producers are tracked; past it the least recently updated is forgotten (Kafka expires
    producers after `producer.id.expiration.ms` instead; this room has no clock). A forgotten producer is unknown:
    see the module docstring for what that costs.
    """

    def __init__(self, producers_max: int = PRODUCERS_MAX_DEFAULT) -> None:
        assert producers_max > 0
        self.producers_max = producers_max
        # Insertion order is update order: `update` moves a producer to the end, eviction takes the first.
        self._entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def producer(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def snapshot(self) -> dict[int, ProducerEntry]:
        """Every tracked producer's entry, least recently updated first."""
        return dict(self._entries)

    def check(self, producer_id: int, producer_epoch: int, first_seq: int, last_seq: int) -> Verdict:
        """The verdict on a batch about to be appended (the module docstring's table). Changes nothing."""
        if producer_id < 0:
            return APPEND
        if producer_epoch < 0 or not (0 <= first_seq <= INT32_MAX and 0 <= last_seq <= INT32_MAX):
            return _refuse(
                ErrorCode.INVALID_RECORD,
                f"producer {producer_id}: invalid epoch {producer_epoch} or sequences {first_seq}..{last_seq}",
            )
        entry = self._entries.get(producer_id)
        if entry is None:
            if first_seq == 0:
                return APPEND
            return _refuse(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} is unknown here and its batch starts at sequence {first_seq}, not 0",
            )
        if producer_epoch != entry.producer_epoch:
            return self._check_other_epoch(producer_id, producer_epoch, first_seq, entry)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return Verdict("duplicate", duplicate_of=batch)
        if first_seq == next_sequence(entry.last_seq):
            return APPEND
        return _refuse(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {producer_id} epoch {producer_epoch}: batch starts at sequence {first_seq}, expected "
            f"{next_sequence(entry.last_seq)}",
        )

    @staticmethod
    def _check_other_epoch(producer_id: int, producer_epoch: int, first_seq: int, entry: ProducerEntry) -> Verdict:
        if producer_epoch < entry.producer_epoch:
            return _refuse(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id}: epoch {producer_epoch} is older than the last seen {entry.producer_epoch}",
            )
        if first_seq == 0:
            return APPEND
        return _refuse(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {producer_id}: new epoch {producer_epoch} must start at sequence 0, not {first_seq}",
        )

    def update(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
    ) -> None:
        """Record a batch appended at [first_offset, last_offset] (Kafka's `ProducerStateEntry.addBatch`). A
        different epoch replaces the cached batches; past `BATCHES_PER_PRODUCER_MAX` the oldest goes."""
        if producer_id < 0:
            return
        assert producer_epoch >= 0 and 0 <= first_seq <= INT32_MAX and 0 <= last_seq <= INT32_MAX
        assert 0 <= first_offset <= last_offset, (first_offset, last_offset)
        batch = BatchMetadata(first_seq, last_seq, first_offset, last_offset)
        entry = self._entries.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            batches: tuple[BatchMetadata, ...] = (batch,)
        else:
            batches = (*entry.batches[1 - BATCHES_PER_PRODUCER_MAX :], batch)
        if entry is not None:
            # A table fed out of offset order (a log truncated without a rebuild) would answer a retry with offsets
            # that are no longer the batch's.
            assert first_offset > entry.batches[-1].last_offset, (producer_id, first_offset, entry.batches[-1])
            del self._entries[producer_id]
        self._entries[producer_id] = ProducerEntry(producer_epoch, batches)
        if len(self._entries) > self.producers_max:
            del self._entries[next(iter(self._entries))]
        assert len(self._entries) <= self.producers_max
        assert 1 <= len(batches) <= BATCHES_PER_PRODUCER_MAX

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Replace the table with the one `update` builds from these batch headers, in offset order (a log's, from
        its start). Batches that carry no producer state are skipped: non-idempotent ones (producer id < 0),
        control batches (Hightide writes none: it has no transactions) and ones without a valid epoch and sequence
        (a leader's `check` refuses those, so no Hightide leader wrote them)."""
        self._entries.clear()
        for header in headers:
            if header.producer_id < 0 or header.is_control or header.producer_epoch < 0 or header.base_sequence < 0:
                continue
            self.update(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                last_sequence(header.base_sequence, header.last_offset_delta),
                header.base_offset,
                header.last_offset,
            )
