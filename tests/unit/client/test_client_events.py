"""The CLI clients' events: a send's outcome maps to Jepsen's ok / failed / unknown exactly as the producer knows
it (a definite refusal is `failed` only when no attempt could have been appended), and a poll's records become one
RecordsConsumed per partition with offsets in the order the client got them."""

from __future__ import annotations

import asyncio

from hightide.client.client_events import records_consumed, send_completed, send_invoked
from hightide.client.consumer import ConsumerRecord
from hightide.client.producer import ProduceFailed, RecordFuture, _Batch
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event, RecordsConsumed, SendCompleted, SendInvoked


class Collect:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass


def _future(outcome: int | ProduceFailed, index: int = 0) -> RecordFuture:
    loop = asyncio.new_event_loop()
    try:
        future: asyncio.Future[int] = loop.create_future()
        if isinstance(outcome, ProduceFailed):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        return RecordFuture(_Batch(0.0, 0.0, future), index, "t", 2)
    finally:
        loop.close()


def _failure(code: ErrorCode, *, indefinite: bool) -> ProduceFailed:
    failure = ProduceFailed("t-2", code)
    failure.indefinite = indefinite
    return failure


def test_an_acknowledged_send_is_ok_at_its_offset() -> None:
    sink = Collect()
    future = _future(100, index=3)
    send_invoked(sink, future, "k", "v-3")
    send_completed(sink, future, "v-3")
    assert sink.events == [
        SendInvoked(topic="t", partition=2, key="k", value="v-3"),
        SendCompleted(topic="t", partition=2, value="v-3", outcome="ok", offset=103, error="NONE"),
    ]


def test_a_definite_refusal_is_failed_and_an_indefinite_one_unknown() -> None:
    sink = Collect()
    send_completed(sink, _future(_failure(ErrorCode.NOT_ENOUGH_REPLICAS, indefinite=False)), "a")
    send_completed(sink, _future(_failure(ErrorCode.NOT_ENOUGH_REPLICAS, indefinite=True)), "b")
    send_completed(sink, _future(_failure(ErrorCode.REQUEST_TIMED_OUT, indefinite=True)), "c")
    assert [(e.value, e.outcome, e.offset, e.error) for e in sink.events if isinstance(e, SendCompleted)] == [
        ("a", "failed", -1, "NOT_ENOUGH_REPLICAS"),
        ("b", "unknown", -1, "NOT_ENOUGH_REPLICAS"),
        ("c", "unknown", -1, "REQUEST_TIMED_OUT"),
    ]


def test_a_poll_becomes_one_event_per_partition_in_the_order_read() -> None:
    def record(partition: int, offset: int) -> ConsumerRecord:
        return ConsumerRecord("t", partition, offset, 0, None, f"v{offset}".encode())

    sink = Collect()
    records_consumed(sink, [record(0, 5), record(1, 9), record(0, 6), record(1, 10), record(0, 7)])
    assert sink.events == [
        RecordsConsumed(topic="t", partition=0, offsets=(5, 6, 7), values=("v5", "v6", "v7")),
        RecordsConsumed(topic="t", partition=1, offsets=(9, 10), values=("v9", "v10")),
    ]


def test_a_long_value_is_named_by_its_last_64_characters_in_every_event() -> None:
    sink = Collect()
    value = "x" * 100 + "-record-42"
    future = _future(7)
    send_invoked(sink, future, None, value)
    send_completed(sink, future, value)
    records_consumed(sink, [ConsumerRecord("t", 2, 7, 0, None, value.encode())])
    named = {e.value for e in sink.events if isinstance(e, SendInvoked | SendCompleted)}
    named |= {v for e in sink.events if isinstance(e, RecordsConsumed) for v in e.values}
    assert named == {value[-64:]}, "a send and the read of it must name the record alike for the audit to match them"
