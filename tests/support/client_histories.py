"""Hand-written histories of clients and brokers, each breaking one of the clients' invariants (or none), shared
by the unit tests of `hightide.audit.checks.clients` and the Python/Spark parity test.

Each story uses its own topic and its own emitter incarnations, so that all of them together are one valid
history too (the parity test audits them in one lake).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event


@dataclass
class Story:
    """Envelopes written in the order they happen, each emitter incarnation numbered from 0."""

    name: str
    envelopes: list[Envelope] = field(default_factory=list)
    _sequences: dict[Emitter, int] = field(default_factory=dict)

    def broker(self, broker_id: int = 1) -> Emitter:
        return Emitter("broker", broker_id, f"broker-{broker_id}-{self.name}")

    def controller(self) -> Emitter:
        return Emitter("controller", 100, f"controller-{self.name}")

    def consumer(self, consumer_id: int = 7) -> Emitter:
        return Emitter("consumer", consumer_id, f"consumer-{consumer_id}-{self.name}")

    def producer(self, producer_id: int = 5) -> Emitter:
        return Emitter("producer", producer_id, f"producer-{producer_id}-{self.name}")

    def at(self, wall_ms: int, emitter: Emitter, event: Event) -> Envelope:
        sequence = self._sequences.get(emitter, 0)
        self._sequences[emitter] = sequence + 1
        envelope = Envelope("test", emitter, sequence, wall_ms, wall_ms * 1_000_000, event)
        self.envelopes.append(envelope)
        return envelope

    # -- events, for partition 0 of the story's topic --------------------------------------------------------

    def leads(self, wall_ms: int, broker_id: int = 1, epoch: int = 0) -> Envelope:
        event = events.BecameLeader(
            topic=self.name,
            partition=0,
            replica=broker_id,
            leader_epoch=epoch,
            partition_epoch=epoch,
            replicas=(1, 2),
            isr=(1, 2),
            log_end_offset=0,
            high_watermark=0,
        )
        return self.at(wall_ms, self.broker(broker_id), event)

    def follows(self, wall_ms: int, broker_id: int = 2, leader: int = 1, epoch: int = 0) -> Envelope:
        event = events.BecameFollower(
            topic=self.name,
            partition=0,
            replica=broker_id,
            leader=leader,
            leader_epoch=epoch,
            partition_epoch=epoch,
            log_end_offset=0,
            high_watermark=0,
        )
        return self.at(wall_ms, self.broker(broker_id), event)

    def high_watermark(self, wall_ms: int, previous: int, hw: int, broker_id: int = 1) -> Envelope:
        event = events.HighWatermarkAdvanced(
            topic=self.name, partition=0, replica=broker_id, leader_epoch=0, previous=previous, high_watermark=hw
        )
        return self.at(wall_ms, self.broker(broker_id), event)

    def log_start(self, wall_ms: int, log_start_offset: int, broker_id: int = 1) -> Envelope:
        event = events.LogStartOffsetAdvanced(
            topic=self.name, partition=0, replica=broker_id, log_start_offset=log_start_offset, reason="retention"
        )
        return self.at(wall_ms, self.broker(broker_id), event)

    def consumed(self, wall_ms: int, *records: tuple[int, str], consumer_id: int = 7) -> Envelope:
        event = events.RecordsConsumed(
            topic=self.name,
            partition=0,
            offsets=tuple(offset for offset, _ in records),
            values=tuple(value for _, value in records),
        )
        return self.at(wall_ms, self.consumer(consumer_id), event)

    def invoked(self, wall_ms: int, value: str, producer_id: int = 5) -> Envelope:
        event = events.SendInvoked(topic=self.name, partition=0, key=None, value=value)
        return self.at(wall_ms, self.producer(producer_id), event)

    def sent(
        self,
        wall_ms: int,
        value: str,
        outcome: str = "ok",
        offset: int = -1,
        error: str = "NONE",
        producer_id: int = 5,
    ) -> Envelope:
        event = events.SendCompleted(
            topic=self.name, partition=0, value=value, outcome=outcome, offset=offset, error=error
        )
        return self.at(wall_ms, self.producer(producer_id), event)

    def answered(self, wall_ms: int, acks: int, base: int, last: int, hw: int, epoch: int = 0) -> Envelope:
        event = events.ProduceCompleted(
            topic=self.name,
            partition=0,
            leader=1,
            leader_epoch=epoch,
            acks=acks,
            base_offset=base,
            last_offset=last,
            high_watermark=hw,
            error="NONE",
        )
        return self.at(wall_ms, self.broker(1), event)

    def partition_changed(self, wall_ms: int, leader: int, epoch: int) -> Envelope:
        event = events.PartitionChanged(
            topic=self.name,
            partition=0,
            replicas=(1, 2),
            isr=(leader,),
            elr=(),
            last_known_elr=(),
            leader=leader,
            leader_epoch=epoch,
            partition_epoch=epoch,
            reason="election",
        )
        return self.at(wall_ms, self.controller(), event)

    def elected(self, wall_ms: int, leader: int, epoch: int, election: str) -> Envelope:
        event = events.LeaderElected(
            topic=self.name, partition=0, previous_leader=-1, leader=leader, leader_epoch=epoch, election=election
        )
        return self.at(wall_ms, self.controller(), event)

    def topic_deleted(self, wall_ms: int) -> Envelope:
        event = events.TopicDeleted(topic=self.name, topic_id=f"id-{self.name}")
        return self.at(wall_ms, self.controller(), event)


def read_above_high_watermark() -> tuple[Story, list[Envelope]]:
    """Leader 1 advances its HW to 2 at t=10 (follower 2's HW reaches 5, which does not count); the consumer reads
    offsets 0 and 1 at t=20, then 2 and 3 at t=30; the leader's HW reaches 4 only at t=40. Returns the story and
    the read at t=30, the violating one."""
    story = Story("e1")
    story.leads(1)
    story.follows(2)
    story.high_watermark(10, 0, 2)
    story.high_watermark(11, 0, 5, broker_id=2)
    story.consumed(20, (0, "v0"), (1, "v1"))
    bad = story.consumed(30, (2, "v2"), (3, "v3"))
    story.high_watermark(40, 2, 4)
    return story, [bad]


def reads_out_of_order() -> tuple[Story, list[Envelope]]:
    """The consumer reads 0, 1 then 3 (2 skipped, still in the log); then 3 again; then, after the leader's log
    start moved to 10 by retention, 10 (explained by the offset reset); then 20 (not explained: no log start 20).
    Returns the story and its four RecordsConsumed events."""
    story = Story("e3")
    first = story.consumed(10, (0, "a0"), (1, "a1"))
    skip = story.consumed(20, (3, "a3"))
    again = story.consumed(30, (3, "a3"))
    story.log_start(35, 10)
    reset = story.consumed(40, (10, "a10"))
    jump = story.consumed(50, (20, "a20"))
    return story, [first, skip, again, reset, jump]


def failed_then_read() -> tuple[Story, list[Envelope]]:
    """The producer was told `failed` (NOT_ENOUGH_REPLICAS) for value f9, and for f8 `unknown`; the consumer reads
    both, f9 at offset 4. Returns the story, the failed SendCompleted and the read."""
    story = Story("d8")
    failed = story.sent(10, "f9", outcome="failed", error="NOT_ENOUGH_REPLICAS")
    story.sent(11, "f8", outcome="unknown", error="REQUEST_TIMED_OUT")
    read = story.consumed(20, (3, "f8"), (4, "f9"))
    return story, [failed, read]


def inconsistent_offsets() -> tuple[Story, list[Envelope]]:
    """Offset 3 acknowledged with x1 under acks=all (HW already 4 when answered) but read as x2: a violation.
    Offset 5 acknowledged with y1 under acks=1 before commit in epoch 0, then epoch 1 began and the consumer read
    y2 at 5: the loss Kafka allows under acks=1 (attributed). Returns the story, the ack and read of offset 3, the
    ack and read of offset 5."""
    story = Story("d4")
    story.answered(9, acks=-1, base=3, last=3, hw=4)
    ack3 = story.sent(10, "x1", offset=3)
    story.answered(11, acks=1, base=5, last=5, hw=4)
    ack5 = story.sent(12, "y1", offset=5)
    story.partition_changed(15, leader=2, epoch=1)
    read3 = story.consumed(20, (3, "x2"))
    read5 = story.consumed(21, (5, "y2"), consumer_id=8)  # another consumer: no skip from 3 to 5
    return story, [ack3, read3, ack5, read5]


def duplicated_value() -> tuple[Story, list[Envelope]]:
    """Value d5 acknowledged at offset 4, read at 4 and again at 6 (a retried batch appended twice). Returns the
    story, the ack and both reads."""
    story = Story("d5")
    ack = story.sent(10, "d5", offset=4)
    read = story.consumed(20, (4, "d5"))
    again = story.consumed(30, (5, "d6"), (6, "d5"))
    return story, [ack, read, again]


def reread_after_a_last_known_leader_election() -> tuple[Story, list[Envelope]]:
    """The consumer reads offsets 0..2 (r0, r1, r2); then the partition, with ISR and ELR empty, gets its last
    leader back (last_known_leader) without r1 and r2; the consumer, reset to its log start, reads 1 again, now
    holding s1. Kafka allows that loss: E3's re-read and D4's two values at offset 1 are attributed to the election.
    Returns the story and the two reads."""
    story = Story("lkl")
    first = story.consumed(10, (0, "r0"), (1, "r1"), (2, "r2"))
    story.elected(20, leader=2, epoch=3, election="last_known_leader")
    again = story.consumed(30, (1, "s1"))
    return story, [first, again]


def clean_across_a_topic_life() -> Story:
    """Everything as promised: a leader's HW at 3, sends acknowledged and read once each in order; then the topic is
    deleted and created again, and offset 0 holds a new value in the new life (read from the start again)."""
    story = Story("clean")
    story.leads(1)
    story.answered(5, acks=-1, base=0, last=2, hw=3)
    story.high_watermark(6, 0, 3)
    for offset, value in enumerate(("c0", "c1", "c2")):
        story.sent(7, value, offset=offset)
    story.consumed(10, (0, "c0"), (1, "c1"))
    story.consumed(11, (2, "c2"))
    story.topic_deleted(20)
    story.leads(30, epoch=0)
    story.high_watermark(31, 0, 1)
    story.sent(32, "n0", offset=0)
    story.consumed(40, (0, "n0"))
    return story


def two_producers_count_alike() -> Story:
    """Two verifiable producers both send the values 0 and 1: producer 5's are refused (NOT_ENOUGH_REPLICAS, a
    definite failure), producer 6's are acknowledged at offsets 0 and 1 and read there; then producer 5, run again,
    sends 0 once more and it lands at offset 2. The values do not name one record each, so neither the read of a
    failed value nor a value at two offsets is a finding (the e2e test of paused followers does exactly this)."""
    story = Story("twins")
    story.leads(1)
    for value in ("0", "1"):
        story.invoked(2, value, producer_id=5)
        story.sent(3, value, outcome="failed", error="NOT_ENOUGH_REPLICAS", producer_id=5)
    story.answered(4, acks=-1, base=0, last=1, hw=2)
    story.high_watermark(4, 0, 2)
    for offset, value in enumerate(("0", "1")):
        story.invoked(5, value, producer_id=6)
        story.sent(6, value, offset=offset, producer_id=6)
    story.consumed(7, (0, "0"), (1, "1"))
    story.answered(8, acks=-1, base=2, last=2, hw=3)
    story.high_watermark(8, 2, 3)
    story.invoked(9, "0", producer_id=5)
    story.sent(10, "0", offset=2, producer_id=5)
    return story


STORIES = (
    read_above_high_watermark,
    reads_out_of_order,
    failed_then_read,
    inconsistent_offsets,
    duplicated_value,
    reread_after_a_last_known_leader_election,
)


def all_stories() -> list[Envelope]:
    """Every story above, clean one included, as one history."""
    envelopes = [e for story in STORIES for e in story()[0].envelopes]
    return envelopes + clean_across_a_topic_life().envelopes + two_producers_count_alike().envelopes
