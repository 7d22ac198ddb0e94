"""The idempotent producer's send rules per partition: sequences, the in-flight window, retries, expiry, outcomes.

Room: libs/core (rules as pure objects). Owns the decisions Kafka's client spreads over `TransactionManager`
(sequence numbers, `canRetry`), `RecordAccumulator` (`ready`, `drain`, `expiredBatches`), `Sender`
(`completeBatch`, `failBatch`) and `ProducerBatch`; it holds no records, no connection and no clock. The async
Producer (services/client producer.py) and the simulated producer (tests/simulation/simulator.py) drive the same
object: each keeps its batches (subclasses of `ProducerBatchState`, with the records and a future or a request tag),
passes `now_ms` in, carries out what it is told, and reports each attempt's answer back.

Per partition (`PartitionSends`):

- a batch is queued (`enqueue`) in creation order; it may go once it is full or has lingered `linger.ms`
  (`linger_left_ms`, Kafka's `ready`); `next_step` says what the partition's sender does now: `retry` the first
  refused batch, `send` the next queued one, or `wait`;
- a batch takes its base sequence when it is first sent (`take`, as Kafka's drain), with the producer id, epoch and
  generation of that moment, and keeps them on every retry: the leader drops a retry it already holds (KIP-98);
- up to `max.in.flight.requests.per.connection` (at most 5 with idempotence) batches in flight, and no new batch
  five or more past the oldest one of its partition that has no outcome (`past_dedup_window`);
- a batch refused retriably stops new sends: once nothing is in flight, the refused batches go again one at a time
  in (generation, sequence) order, each `retry.backoff.ms` after its own last attempt (`retry_wait_ms`,
  `take_retry`), and new batches go only once the last of them is answered (SenderTest's
  testIdempotenceWithMultipleInflightsRetriedInOrder);
- an answer (`on_answer`) resolves the batch, sends it again, or fails it: every error Kafka's clients retry
  (`ErrorCode.retriable`), and OUT_OF_ORDER_SEQUENCE_NUMBER while an earlier batch of the same producer id is itself
  unresolved (the refusal is that batch's doing, as Kafka's `canRetry`), are retried while `retries` and
  `delivery.timeout.ms` allow; DUPLICATE_SEQUENCE_NUMBER is a success without an offset (Kafka's Sender);
- a success resolves its batch at once, even while an earlier batch of the partition still waits for its outcome
  (an earlier answer lost, or refused and retried): Kafka's Sender does the same
  (SenderTest.testCorrectHandlingOfOutOfOrderResponsesWhenSecondSucceeds); the offsets still follow the send
  order, since the leader appends a producer's batches in sequence order only;
- `expire(now_ms)` fails the queued batches and those waiting to be retried whose `delivery.timeout.ms` has passed
  (Kafka's `expiredBatches`); a batch in flight expires when its attempt ends (the driver bounds each attempt by
  the batch's deadline);
- a failed batch that was sent with a sequence leaves the leader's sequence for that producer id unknown: the
  `Failed` outcome says `renew_producer_id` (once per producer id), and the driver takes a new one and tells
  `IdempotentProducer.producer_id_assigned`, which starts every partition's sequence at 0 again.

Where Hightide deliberately differs from Kafka's client:

- the window counts from the oldest unresolved batch, not the requests in flight (issue 14). Over TCP a lost answer
  closes the connection and fails every request on it; over NATS one answer can be lost alone while later ones come
  back, and a retry of a batch more than five behind would find the leader's dedup cache (five batches) past it;
- a failure for good takes a new producer id (from the controller) instead of bumping the epoch locally and
  renumbering the in-flight batches (KIP-360's `bumpIdempotentEpochAndResetIdIfNeeded`): the batches already
  encoded keep their producer id and sequence, so a retry of one is still deduplicated by the leader, and no batch is
  ever sent twice under two sequences;
- an OUT_OF_ORDER_SEQUENCE_NUMBER that no earlier unresolved batch explains (a real gap at the leader: an earlier
  batch failed for good, or an acks=1 batch was lost in a failover) fails the batch, where Kafka's idempotent
  producer bumps the epoch and sends it again at sequence 0. Renumbering a batch whose earlier attempt may have been
  appended could write it twice; failing it tells the application (`indefinite` when it may be in the log), which
  may send it again knowingly. The simulation counts about one such failure per 70 acknowledged batches;
- UNKNOWN_PRODUCER_ID fails the batch (and renews the producer id): Hightide's leader never answers it (it refuses
  an unknown producer's non-zero sequence as OUT_OF_ORDER_SEQUENCE_NUMBER, producer_state.py), so Kafka's
  log-start-offset reasoning has nothing to act on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar

from hightide.protocol.errors import ErrorCode

SEQUENCE_MODULUS: Final = 2**31  # Kafka's sequences are non-negative Int32s: 2**31 - 1 is followed by 0
# Kafka's ConfigException: the leader keeps only the last five batches of each producer (NUM_BATCHES_TO_RETAIN).
IDEMPOTENT_IN_FLIGHT_MAX: Final = 5

# Answers after which the records may be in the log all the same. NOT_LEADER_OR_FOLLOWER is one: a leader that loses
# its leadership answers the produces it appended and still waits on with it (Kafka's DelayedProduce does the same),
# and the new leader may hold those records.
INDEFINITE_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class SendConfig:
    """The producer configs these rules read, by Kafka's names and defaults."""

    enable_idempotence: bool = True
    max_in_flight_requests_per_connection: int = 5
    retries: int = 2_147_483_647
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    batch_size: int = 16_384
    linger_ms: int = 5

    def __post_init__(self) -> None:
        if self.max_in_flight_requests_per_connection < 1:
            raise ValueError("max.in.flight.requests.per.connection must be at least 1")
        if self.enable_idempotence and self.max_in_flight_requests_per_connection > IDEMPOTENT_IN_FLIGHT_MAX:
            raise ValueError(
                "Must set max.in.flight.requests.per.connection to at most 5 to use the idempotent producer."
            )


class ProducerBatchState:
    """What the rules know of one batch (Kafka's ProducerBatch without its records). The driver subclasses it to
    keep the records and whatever tells the caller the outcome; it counts `record_count` and `size` (bytes) as it
    fills the batch, and the rules stamp the rest."""

    __slots__ = (
        "attempts",
        "created_ms",
        "deadline_ms",
        "generation",
        "last_attempt_end_ms",
        "last_error",
        "maybe_written",
        "producer_epoch",
        "producer_id",
        "record_count",
        "sent_index",
        "sequence",
        "size",
    )

    def __init__(self, created_ms: float, delivery_timeout_ms: float) -> None:
        self.created_ms = created_ms
        self.deadline_ms = created_ms + delivery_timeout_ms
        self.record_count = 0
        self.size = 0
        self.sequence = -1  # the base sequence, once sent (-1: not sent, or not idempotent)
        self.producer_id = -1
        self.producer_epoch = -1
        self.generation = 0  # which producer id of this producer it was sent with (0, 1, ...: in order)
        self.attempts = 0  # attempts that ended in an error
        self.last_attempt_end_ms = 0.0  # retry.backoff.ms counts from here
        self.last_error = ErrorCode.REQUEST_TIMED_OUT  # of the last attempt (the error a failure reports)
        self.maybe_written = False  # some attempt ended without a definite answer
        self.sent_index = 0  # the partition's count of batches sent when this one was first sent


B = TypeVar("B", bound=ProducerBatchState)


@dataclass(frozen=True, slots=True)
class Resolved(Generic[B]):
    """The batch is acknowledged at `base_offset` (-1: none known, as acks=0 or DUPLICATE_SEQUENCE_NUMBER)."""

    batch: B
    base_offset: int


@dataclass(frozen=True, slots=True)
class Retry(Generic[B]):
    """The batch waits to go again (`next_step` says when)."""

    batch: B


@dataclass(frozen=True, slots=True)
class Failed(Generic[B]):
    """The batch's records fail for good with `error`; `indefinite`: some attempt may have been appended all the same;
    `expired`: delivery.timeout.ms ran out; `renew_producer_id`: the driver must take a new producer id."""

    batch: B
    error: ErrorCode
    indefinite: bool
    expired: bool
    renew_producer_id: bool


Outcome = Resolved[B] | Retry[B] | Failed[B]
Step = Literal["send", "retry", "wait"]


class IdempotentProducer(Generic[B]):
    """One producer's identity and its partitions' send rules."""

    def __init__(self, config: SendConfig) -> None:
        self.config = config
        self.producer_id = -1
        self.producer_epoch = -1
        self.generation = 0  # bumped with each producer id
        self.abandoned: set[int] = set()  # producer ids being replaced after a batch of theirs failed
        self.partitions: dict[tuple[str, int], PartitionSends[B]] = {}

    def partition(self, topic: str, partition: int) -> PartitionSends[B]:
        sends = self.partitions.get((topic, partition))
        if sends is None:
            sends = self.partitions[(topic, partition)] = self._new_partition(topic, partition)
        return sends

    def _new_partition(self, topic: str, partition: int) -> PartitionSends[B]:
        return PartitionSends(self, topic, partition)

    def producer_id_assigned(self, producer_id: int, producer_epoch: int) -> None:
        """A producer id (and epoch) from InitProducerId: the batches sent from now on start at sequence 0 on every
        partition; those already sent keep the id and sequence they went with."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.generation += 1
        for sends in self.partitions.values():
            sends.next_sequence = 0


class PartitionSends(Generic[B]):
    """One partition's batches from queued to resolved (see the module docstring for the rules)."""

    def __init__(self, producer: IdempotentProducer[B], topic: str, partition: int) -> None:
        self.producer = producer
        self.config = producer.config
        self.topic, self.partition = topic, partition
        self.queued: deque[B] = deque()  # filling, or waiting to be sent for the first time
        self.next_sequence = 0  # the next batch's base sequence
        self.in_flight = 0
        self.unresolved: list[B] = []  # sent, without an outcome yet (in flight or to retry)
        self.retry: list[B] = []  # refused retriably: sent again one by one, in (generation, sequence) order
        self.retrying: B | None = None  # the refused batch in flight again: nothing else goes until it is answered
        self.sent = 0  # batches sent so far (first sends)

    # -- queued batches ----------------------------------------------------------------------------------------

    def enqueue(self, batch: B) -> None:
        self.queued.append(batch)

    def ready(self, now_ms: float) -> bool:
        """Kafka's `ready` for the first queued batch: full (or followed by another), or lingered `linger.ms`."""
        return bool(self.queued) and self.linger_left_ms(now_ms) <= 0

    def linger_left_ms(self, now_ms: float) -> float:
        """How long the first queued batch may still linger: 0 once it is full or followed by another."""
        first = self.queued[0]
        if len(self.queued) > 1 or first.size >= self.config.batch_size:
            return 0.0
        return max(first.created_ms + self.config.linger_ms - now_ms, 0.0)

    def blocked(self, now_ms: float) -> bool:
        """Whether the first queued batch is ready but may not go (the window is full, or a refused batch waits to go
        again): the partition's leader has data ready and is not taking it (Kafka's partitionReady)."""
        window_full = self.in_flight >= self.config.max_in_flight_requests_per_connection
        return self.ready(now_ms) and (window_full or bool(self.retry))

    # -- what to do now ----------------------------------------------------------------------------------------

    def next_step(self) -> Step:
        """`retry` the first refused batch (once nothing is in flight), `send` the first queued one (once it is ready:
        `linger_left_ms`), or `wait` for an answer, a new batch or a deadline."""
        if self.retry or self.retrying is not None:
            return "wait" if self.in_flight else "retry"
        window = self.config.max_in_flight_requests_per_connection
        if not self.queued or self.in_flight >= window or self.past_dedup_window():
            return "wait"
        return "send"

    def past_dedup_window(self) -> bool:
        """Whether the next batch would be `max.in.flight.requests.per.connection` (at most 5) or more batches past
        the oldest one still unresolved: a retry of that one must come before five later batches are written, or the
        leader, which remembers five, refuses it as OUT_OF_ORDER_SEQUENCE_NUMBER."""
        if not self.unresolved:
            return False
        oldest = min(batch.sent_index for batch in self.unresolved)
        return self.sent + 1 - oldest >= self.config.max_in_flight_requests_per_connection

    def take(self, now_ms: float) -> B:
        """The first queued batch goes now: it takes its base sequence and the producer's id, epoch and generation."""
        batch = self.queued.popleft()
        producer = self.producer
        if self.config.enable_idempotence:
            batch.sequence = self.next_sequence
            batch.producer_id, batch.producer_epoch = producer.producer_id, producer.producer_epoch
            self.next_sequence = (self.next_sequence + batch.record_count) % SEQUENCE_MODULUS
        batch.generation = producer.generation
        self.sent += 1
        batch.sent_index = self.sent
        self.unresolved.append(batch)
        self.in_flight += 1
        return batch

    def retry_wait_ms(self, now_ms: float) -> float:
        """How long until the first refused batch may go again: `retry.backoff.ms` after its last attempt (Kafka
        counts the backoff per batch), never past its delivery deadline."""
        batch = self.retry[0]
        return max(min(batch.last_attempt_end_ms + self.config.retry_backoff_ms, batch.deadline_ms) - now_ms, 0.0)

    def take_retry(self, now_ms: float) -> B | None:
        """The first refused batch goes again, unchanged; None once its deadline has come (`expire` fails it)."""
        batch = self.retry[0]
        if now_ms >= batch.deadline_ms:
            return None
        self.retry.remove(batch)
        self.retrying = batch
        self.in_flight += 1
        return batch

    def attempt_ended(self, batch: B, now_ms: float) -> None:
        """An attempt of `batch` has its answer (or none will come): call before `on_answer`."""
        self.in_flight -= 1
        batch.last_attempt_end_ms = now_ms
        if self.retrying is batch:
            self.retrying = None

    # -- outcomes ----------------------------------------------------------------------------------------------

    def on_answer(self, batch: B, error: ErrorCode, base_offset: int, reached: bool, now_ms: float) -> list[Outcome[B]]:
        """The attempt's answer: `error` (NONE on success) and `base_offset`; `reached` is False when the request
        certainly reached no broker. Returns what happens to the batch."""
        if error is ErrorCode.NONE or error is ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            offset = base_offset if error is ErrorCode.NONE else -1
            return self._succeeded(batch, offset)
        batch.attempts += 1
        batch.last_error = error
        if reached and error in INDEFINITE_ERRORS:
            batch.maybe_written = True
        if self.retriable(batch, error, now_ms):
            self.retry.append(batch)
            self.retry.sort(key=lambda b: (b.generation, b.sequence))
            return [Retry(batch)]
        return self.fail(batch, error, expired=False)

    def retriable(self, batch: B, error: ErrorCode, now_ms: float) -> bool:
        """Kafka's canRetry: attempts and delivery.timeout.ms left, and a retriable error, or an out-of-order
        sequence caused by an earlier batch of the partition (same producer id) that is itself still unresolved."""
        if batch.attempts > self.config.retries:
            return False
        if now_ms + self.config.retry_backoff_ms > batch.deadline_ms:
            return False
        if error.retriable:
            return True
        earlier = any(
            b.sequence < batch.sequence and b.generation == batch.generation for b in self.unresolved if b is not batch
        )
        return error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and earlier

    def expire(self, now_ms: float) -> list[Outcome[B]]:
        """Kafka's expiredBatches: fail the waiting batches whose delivery.timeout.ms has passed. A queued batch was
        never sent (a definite failure, no sequence spent); one waiting to be retried fails with its last error."""
        outcomes: list[Outcome[B]] = []
        while self.queued and self.queued[0].deadline_ms <= now_ms:
            outcomes += self.fail(self.queued.popleft(), ErrorCode.REQUEST_TIMED_OUT, expired=True)
        for batch in [b for b in self.retry if b.deadline_ms <= now_ms]:
            self.retry.remove(batch)
            outcomes += self.fail(batch, batch.last_error, expired=True)
        return outcomes

    def fail(self, batch: B, error: ErrorCode, *, expired: bool) -> list[Outcome[B]]:
        """The batch fails for good. If it was sent with a sequence, the leader may hold it or not, so that producer
        id's sequence space is abandoned: the outcome asks for a new producer id (once per id)."""
        producer = self.producer
        if batch in self.unresolved:
            self.unresolved.remove(batch)
        renew = (
            batch.sequence >= 0
            and batch.producer_id == producer.producer_id
            and batch.producer_id not in producer.abandoned
        )
        if renew:
            producer.abandoned.add(batch.producer_id)
        failed = Failed(batch, error, batch.maybe_written, expired, renew)
        return [failed]

    def _succeeded(self, batch: B, base_offset: int) -> list[Outcome[B]]:
        self.unresolved.remove(batch)
        return [Resolved(batch, base_offset)]

    def waiting(self) -> Iterator[B]:
        """The batches that wait for a deadline rather than an answer: queued, or to retry."""
        yield from self.queued
        yield from self.retry

    @property
    def idle(self) -> bool:
        """Nothing queued, in flight or to retry."""
        return not self.queued and not self.unresolved
