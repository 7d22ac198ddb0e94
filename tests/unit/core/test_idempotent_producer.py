"""The idempotent producer's send rules keep sequences, the in-flight window and retries as Kafka's client does.

Method: hightide.core.idempotent_producer driven step by step as its two drivers do (the async Producer and the
simulation), through the cases of Kafka's SenderTest and TransactionManagerTest: the sequence after a retry, several
batches in flight retried in order, out-of-order answers, DUPLICATE_SEQUENCE_NUMBER, expiry, the in-flight limit;
and the cases where Hightide deliberately differs (the window counts from the oldest unresolved batch, a failure
takes a new producer id).
"""

from __future__ import annotations

import pytest

from hightide.core.idempotent_producer import (
    Failed,
    IdempotentProducer,
    PartitionSends,
    ProducerBatchState,
    Resolved,
    Retry,
    SendConfig,
)
from hightide.protocol.errors import ErrorCode

PRODUCER_ID = 343434  # SenderTest's
T0 = 1_000.0


def _producer(
    **settings: int | bool,
) -> tuple[IdempotentProducer[ProducerBatchState], PartitionSends[ProducerBatchState]]:
    config = SendConfig(**{"linger_ms": 0, "delivery_timeout_ms": 120_000, **settings})  # type: ignore[arg-type]
    producer: IdempotentProducer[ProducerBatchState] = IdempotentProducer(config)
    producer.producer_id_assigned(PRODUCER_ID, 0)
    return producer, producer.partition("tp", 0)


def _append(sends: PartitionSends[ProducerBatchState], records: int = 1, now_ms: float = T0) -> ProducerBatchState:
    batch = ProducerBatchState(now_ms, sends.config.delivery_timeout_ms)
    batch.record_count = records
    batch.size = 100 * records
    sends.enqueue(batch)
    return batch


def _send(sends: PartitionSends[ProducerBatchState], now_ms: float = T0) -> ProducerBatchState:
    assert sends.next_step() == "send"
    return sends.take(now_ms)


def _answer(
    sends: PartitionSends[ProducerBatchState],
    batch: ProducerBatchState,
    error: ErrorCode,
    offset: int = -1,
    now_ms: float = T0,
) -> list[object]:
    sends.attempt_ended(batch, now_ms)
    return list(sends.on_answer(batch, error, offset, True, now_ms))


def _resend(sends: PartitionSends[ProducerBatchState], now_ms: float) -> ProducerBatchState:
    assert sends.next_step() == "retry"
    assert sends.retry_wait_ms(now_ms) == 0
    batch = sends.take_retry(now_ms)
    assert batch is not None
    return batch


def test_sequence_numbers_count_records_per_partition() -> None:
    """SenderTest.testSequenceNumberIncrement: each partition's sequence advances by the records of each batch."""
    producer, first = _producer()
    other = producer.partition("tp", 1)
    a = _append(first, records=3)
    b = _append(first, records=2)
    c = _append(other, records=4)
    assert [_send(first).sequence, _send(first).sequence, _send(other).sequence] == [0, 3, 0]
    assert (first.next_sequence, other.next_sequence) == (5, 4)
    assert (a.producer_id, a.producer_epoch, b.sequence, c.sequence) == (PRODUCER_ID, 0, 3, 0)


def test_several_in_flight_are_retried_one_at_a_time_in_order() -> None:
    """SenderTest.testIdempotenceWithMultipleInflightsRetriedInOrder: three batches in flight; the first is refused
    (LEADER_NOT_AVAILABLE), the two after it get OUT_OF_ORDER_SEQUENCE_NUMBER because of it, and all three go again
    one at a time in sequence order, with their sequences, before the fourth batch takes sequence 3."""
    _, sends = _producer()
    batches = [_send(sends) for _ in (_append(sends), _append(sends), _append(sends))]
    assert [b.sequence for b in batches] == [0, 1, 2]
    assert isinstance(_answer(sends, batches[0], ErrorCode.LEADER_NOT_AVAILABLE)[0], Retry)
    fourth = _append(sends)
    assert sends.next_step() == "wait"  # not drained while refused batches wait
    assert isinstance(_answer(sends, batches[1], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)[0], Retry)
    assert sends.next_step() == "wait"  # one still in flight
    assert isinstance(_answer(sends, batches[2], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)[0], Retry)
    assert sends.next_sequence == 3  # the fourth batch has not taken a sequence
    now = T0 + sends.config.retry_backoff_ms
    for expected, offset in ((batches[0], 0), (batches[1], 1), (batches[2], 2)):
        again = _resend(sends, now)
        assert again is expected and again.sequence == offset
        assert sends.next_step() == "wait"  # one in flight while retrying
        assert _answer(sends, again, ErrorCode.NONE, offset, now) == [Resolved(again, offset)]
    assert _send(sends, now) is fourth and fourth.sequence == 3
    assert _answer(sends, fourth, ErrorCode.NONE, 3, now) == [Resolved(fourth, 3)]
    assert sends.idle


def test_out_of_order_answers_requeue_in_sequence_order() -> None:
    """SenderTest.testCorrectHandlingOfOutOfOrderResponses: the second batch's refusal arrives first; once the first
    is refused too, the first goes again before the second."""
    _, sends = _producer()
    _append(sends)
    first = _send(sends)
    _append(sends)
    second = _send(sends)
    _answer(sends, second, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    _answer(sends, first, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert [b.sequence for b in sends.retry] == [0, 1]
    now = T0 + sends.config.retry_backoff_ms
    assert _resend(sends, now) is first


def test_a_later_success_resolves_at_once_and_the_earlier_batch_is_retried() -> None:
    """SenderTest.testCorrectHandlingOfOutOfOrderResponsesWhenSecondSucceeds: the second batch's success resolves
    it at once; the first, timed out, goes again with sequence 0 and resolves at its own offset."""
    _, sends = _producer()
    _append(sends)
    first = _send(sends)
    _append(sends)
    second = _send(sends)
    assert _answer(sends, second, ErrorCode.NONE, 1) == [Resolved(second, 1)]
    assert isinstance(_answer(sends, first, ErrorCode.REQUEST_TIMED_OUT)[0], Retry)
    assert first.maybe_written  # a timed-out attempt may have been appended
    again = _resend(sends, T0 + sends.config.retry_backoff_ms)
    assert again is first and again.sequence == 0
    assert _answer(sends, again, ErrorCode.NONE, 0) == [Resolved(first, 0)]


def test_a_duplicate_sequence_is_a_success_without_offset() -> None:
    """SenderTest.testCorrectHandlingOfDuplicateSequenceError: the leader no longer knows the batch's offsets."""
    _, sends = _producer()
    _append(sends)
    batch = _send(sends)
    assert _answer(sends, batch, ErrorCode.DUPLICATE_SEQUENCE_NUMBER, 7) == [Resolved(batch, -1)]


def test_at_most_five_in_flight_counted_from_the_oldest_unresolved_batch() -> None:
    """max.in.flight.requests.per.connection=5: a sixth batch waits; and (Hightide's window, issue 14) a batch five
    past the oldest unresolved one waits even when fewer are in flight, since the leader remembers five batches."""
    _, sends = _producer()
    for _ in range(6):
        _append(sends)
    sent = [_send(sends) for _ in range(5)]
    assert sends.in_flight == 5 and sends.next_step() == "wait"
    for index, batch in enumerate(sent[1:], start=1):  # the first one's answer is lost; the others come back
        _answer(sends, batch, ErrorCode.NONE, index)
    assert sends.in_flight == 1 and sends.past_dedup_window() and sends.next_step() == "wait"
    _answer(sends, sent[0], ErrorCode.NONE, 0)
    assert _send(sends).sequence == 5


def test_the_window_can_be_smaller() -> None:
    _, sends = _producer(max_in_flight_requests_per_connection=1)
    _append(sends)
    _append(sends)
    first = _send(sends)
    assert sends.next_step() == "wait"
    _answer(sends, first, ErrorCode.NONE, 0)
    assert sends.next_step() == "send"


def test_idempotence_allows_at_most_five_in_flight() -> None:
    with pytest.raises(ValueError, match="at most 5"):
        SendConfig(max_in_flight_requests_per_connection=6)
    assert SendConfig(enable_idempotence=False, max_in_flight_requests_per_connection=6)


def test_out_of_order_with_nothing_earlier_fails_and_takes_a_new_producer_id() -> None:
    """An OUT_OF_ORDER_SEQUENCE_NUMBER no earlier batch explains is a gap at the leader: the batch fails, and the
    producer id is abandoned once (Kafka bumps the epoch: see the module docstring); the next id starts every
    partition at sequence 0, while the batches already sent keep theirs."""
    producer, sends = _producer()
    _append(sends, records=2)
    _append(sends, records=2)
    _append(sends)
    first, second = _send(sends), _send(sends)
    (failed,) = _answer(sends, first, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert failed == Failed(first, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False, False, True)
    (second_failed,) = _answer(sends, second, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert isinstance(second_failed, Failed) and not second_failed.renew_producer_id  # once per producer id
    producer.producer_id_assigned(PRODUCER_ID + 1, 0)
    third = _send(sends)
    assert (third.producer_id, third.sequence, third.generation) == (PRODUCER_ID + 1, 0, 2)
    assert (first.producer_id, first.sequence) == (PRODUCER_ID, 0)


def test_out_of_order_is_retried_only_while_an_earlier_batch_of_the_same_producer_id_is_unresolved() -> None:
    producer, sends = _producer()
    _append(sends)
    _append(sends)
    old = _send(sends)
    producer.producer_id_assigned(PRODUCER_ID + 1, 0)
    new = _send(sends)
    assert new.sequence == 0 and old.sequence == 0
    (outcome,) = _answer(sends, new, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert isinstance(outcome, Failed)  # the unresolved batch is another producer id's


def test_a_non_retriable_error_fails_at_once() -> None:
    _, sends = _producer()
    _append(sends)
    batch = _send(sends)
    (outcome,) = _answer(sends, batch, ErrorCode.INVALID_RECORD)
    assert outcome == Failed(batch, ErrorCode.INVALID_RECORD, False, False, True)


def test_retries_and_the_delivery_timeout_bound_retrying() -> None:
    """Kafka's canRetry: no retry past `retries`, nor when the backoff would end past the delivery deadline."""
    _, sends = _producer(retries=1)
    _append(sends)
    batch = _send(sends)
    assert isinstance(_answer(sends, batch, ErrorCode.NOT_ENOUGH_REPLICAS)[0], Retry)
    again = _resend(sends, T0 + 100)
    (outcome,) = _answer(sends, again, ErrorCode.NOT_ENOUGH_REPLICAS, now_ms=T0 + 100)
    assert isinstance(outcome, Failed) and outcome.error is ErrorCode.NOT_ENOUGH_REPLICAS and not outcome.indefinite
    _, late = _producer(delivery_timeout_ms=1_000, retry_backoff_ms=100)
    _append(late)
    batch = _send(late)
    (outcome,) = _answer(late, batch, ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms=T0 + 950)
    assert isinstance(outcome, Failed) and outcome.indefinite  # NOT_LEADER_OR_FOLLOWER: maybe appended


def test_the_backoff_counts_from_each_batchs_last_attempt() -> None:
    _, sends = _producer(retry_backoff_ms=100)
    _append(sends)
    batch = _send(sends)
    _answer(sends, batch, ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms=T0 + 30)
    assert sends.retry_wait_ms(T0 + 50) == 80
    assert sends.retry_wait_ms(T0 + 200) == 0


def test_expiry_of_queued_and_refused_batches() -> None:
    """SenderTest.testExpiryOfUnsentBatchesShouldNotCauseUnresolvedSequences and testExpiredBatchDoesNotRetry: a
    queued batch expires as REQUEST_TIMED_OUT with no sequence spent (no new producer id); one waiting to be
    retried expires with its last error and abandons the producer id."""
    _, sends = _producer(delivery_timeout_ms=1_000)
    _append(sends)
    refused = _send(sends)
    _append(sends, now_ms=T0 + 10)
    _answer(sends, refused, ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms=T0 + 20)
    assert sends.expire(T0 + 999) == []
    queued = sends.queued[0]
    outcomes = sends.expire(T0 + 1_010)
    assert outcomes == [
        Failed(queued, ErrorCode.REQUEST_TIMED_OUT, False, True, False),
        Failed(refused, ErrorCode.NOT_LEADER_OR_FOLLOWER, True, True, True),
    ]
    assert sends.idle and sends.next_sequence == 1


def test_a_retry_whose_deadline_came_is_not_sent() -> None:
    _, sends = _producer(delivery_timeout_ms=1_000)
    _append(sends)
    batch = _send(sends)
    _answer(sends, batch, ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms=T0 + 10)
    assert sends.retry_wait_ms(T0 + 10) == 100
    assert sends.take_retry(T0 + 1_000) is None
    assert sends.in_flight == 0


def test_without_idempotence_no_sequence_and_no_new_producer_id() -> None:
    _, sends = _producer(enable_idempotence=False)
    _append(sends)
    batch = _send(sends)
    assert (batch.sequence, batch.producer_id) == (-1, -1)
    (outcome,) = _answer(sends, batch, ErrorCode.INVALID_RECORD)
    assert isinstance(outcome, Failed) and not outcome.renew_producer_id


def test_linger_and_readiness() -> None:
    """Kafka's ready: a batch goes once full, followed by another, or lingered linger.ms; `blocked` is a ready batch
    that may not go (partitioner.availability.timeout.ms)."""
    _, sends = _producer(linger_ms=5, batch_size=250, max_in_flight_requests_per_connection=1)
    _append(sends)
    assert sends.linger_left_ms(T0 + 2) == 3 and not sends.ready(T0 + 2)
    assert sends.ready(T0 + 5)
    sends.queued[0].size = 250
    assert sends.linger_left_ms(T0) == 0
    _send(sends)
    _append(sends, now_ms=T0)
    assert sends.blocked(T0 + 5) and not sends.blocked(T0 + 1)
