"""The replica manager, as the broker runs it: produce admission and the purgatories, follower fetch sessions,
the metadata's replicas, and storage refusals taking a replica offline.

Method: three brokers, each the real ReplicaManager on a memory disk (tests/simulation/broker.py's shell, the one
the simulator drives), and the real controller core; every message is carried by hand, so each step of a story
is one call and nothing moves unless the test moves it. Times are the brokers' monotonic milliseconds.
"""

from __future__ import annotations

import random

from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.controller import ControllerConfig, ControllerResult, ReplicationControl
from hightide.core.effects import CONTROLLER, EnforceRetention
from hightide.core.metadata_image import TopicPartition
from hightide.core.partition import PartitionConfig
from hightide.core.replica_manager import METADATA_LAG_BACKOFF_MS, ReplicaManagerConfig
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import decode_batches, encode_batch
from simulation.broker import Answer, ControllerAnswer, Request, SimBroker
from support.memory_disk import MemoryDisk

T0 = 1_000_000
PRODUCER = -1
CONSUMER = -2
TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
SESSION_MS = 3_000
FETCH_TIMEOUT_MS = 2_000  # a follower fetch lost on the way counts as lost after this long


class Cluster:
    """Brokers 1..3 and the controller's core; `route` carries what the brokers sent, as far as the test lets it."""

    def __init__(self, *, min_isr: int = 2, lag_ms: int = 10_000, brokers: tuple[int, ...] = (1, 2, 3)) -> None:
        self.now_ms = T0
        config = ControllerConfig(min_insync_replicas=min_isr, broker_session_timeout_ms=SESSION_MS)
        self.control = ReplicationControl(config)
        partition = PartitionConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)
        self.brokers: dict[int, SimBroker] = {}
        for broker_id in brokers:
            config = ReplicaManagerConfig(
                broker_id=broker_id,
                partition=partition,
                replica_fetch_wait_max_ms=500,
                replica_fetch_backoff_ms=100,
                replica_fetch_timeout_ms=FETCH_TIMEOUT_MS,
            )
            broker = SimBroker(broker_id, config, random.Random(broker_id), MemoryDisk(broker_id, random.Random(0)))
            broker.start(self.now_ms)
            self.brokers[broker_id] = broker
        for broker_id in brokers:
            self.register(broker_id)
        self.inbox: dict[int, list[Answer]] = {PRODUCER: [], CONSUMER: []}
        self.tags = 0

    # -- the controller --------------------------------------------------------------------------------------------

    def commit(self, result: ControllerResult[object]) -> object:
        self.control.apply(result.records)
        return result.response

    def register(self, broker_id: int) -> None:
        incarnation = f"broker-{broker_id}-{self.brokers[broker_id].incarnation}"
        epoch = self.control.image.next_offset
        registered = self.commit(self.control.register_broker(broker_id, incarnation, -1, self.now_ms))
        assert registered.error is ErrorCode.NONE, registered  # type: ignore[attr-defined]
        self.brokers[broker_id].registered_as(epoch, self.now_ms)
        self.heartbeat(broker_id)
        self.sync()

    def heartbeat(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        assert broker.manager is not None
        offset = self.control.image.next_offset
        offline = broker.manager.offline_replicas
        heartbeat = self.control.heartbeat(
            broker_id, broker.manager.broker_epoch, self.now_ms, metadata_offset=offset, offline_replicas=offline
        )
        self.commit(heartbeat)

    def create(self, assignment: tuple[int, ...] = (1, 2, 3), topic_id: str = "topic-id-1") -> None:
        self.commit(self.control.create_topic(TOPIC, topic_id=topic_id, assignments=[list(assignment)]))
        self.sync()

    def sync(self) -> None:
        for broker in self.brokers.values():
            if broker.alive and broker.registered:
                broker.follow_metadata(self.control.image, self.now_ms)

    def registration(self) -> tuple[int, tuple[int, ...]]:
        partition = self.control.image.partition(TOPIC, 0)
        assert partition is not None
        return partition.leader, partition.isr

    # -- time and messages -----------------------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Time passes: live brokers heartbeat (a dead one's session runs out), the controller and brokers tick."""
        self.now_ms += ms
        for broker_id, broker in self.brokers.items():
            if broker.alive and broker.registered:
                self.heartbeat(broker_id)
        self.commit(self.control.tick(self.now_ms))
        self.sync()
        for broker in self.brokers.values():
            if broker.alive and broker.registered:
                broker.tick(self.now_ms)

    def route(self, *, cut: frozenset[int] = frozenset(), rounds: int = 1) -> None:
        """Deliver everything the brokers sent, `rounds` times over; messages to or from a `cut` broker are lost."""
        for _ in range(rounds):
            for source, broker in self.brokers.items():
                outgoing, broker.outbox = broker.outbox, []
                for destination, message in outgoing:
                    if source in cut or destination in cut:
                        continue
                    self._deliver(source, destination, message)

    def _deliver(self, source: int, destination: int, message: object) -> None:
        if destination == CONTROLLER:
            assert isinstance(message, wire.AlterPartitionRequest)
            answer = self.commit(self.control.alter_partition(message))
            assert isinstance(answer, wire.AlterPartitionResponse)
            self.sync()
            self.brokers[source].handle(CONTROLLER, ControllerAnswer(message, answer), self.now_ms)
        elif destination in self.brokers:
            broker = self.brokers[destination]
            if broker.alive:
                broker.handle(source, message, self.now_ms)
        else:
            assert isinstance(message, Answer)
            self.inbox[destination].append(message)

    def produce(self, leader: int, records: bytes, *, acks: int = -1, timeout_ms: int = 1_000) -> int:
        self.tags += 1
        partition = wire.ProducePartitionData(topic=TOPIC, partition=0, records=records)
        body = wire.ProduceRequest(acks=acks, timeout_ms=timeout_ms, partitions=(partition,))  # type: ignore[arg-type]
        self.brokers[leader].handle(PRODUCER, Request(self.tags, body), self.now_ms)
        return self.tags

    def fetch(self, leader: int, offset: int, *, max_wait_ms: int = 0) -> int:
        self.tags += 1
        fetch = wire.FetchPartitionRequest(topic=TOPIC, partition=0, fetch_offset=offset)
        body = wire.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, partitions=(fetch,))
        self.brokers[leader].handle(CONSUMER, Request(self.tags, body), self.now_ms)
        return self.tags

    def answered(self, client: int, tag: int) -> wire.ProduceResponse | wire.FetchResponse | None:
        for broker in self.brokers.values():
            for destination, message in list(broker.outbox):
                if destination == client and isinstance(message, Answer) and message.tag == tag:
                    return message.body
        return next((a.body for a in self.inbox[client] if a.tag == tag), None)

    def events(self, broker_id: int, kind: type[events.Event]) -> list[events.Event]:
        return [e for _, e in self.brokers[broker_id].events if isinstance(e, kind)]

    def core(self, broker_id: int):  # type: ignore[no-untyped-def]
        manager = self.brokers[broker_id].manager
        assert manager is not None
        return manager.replica(TP)


def idempotent(values: list[bytes], sequence: int, producer_id: int = 7) -> bytes:
    return encode_batch(values, timestamps=T0, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)


def only_partition(answer: object) -> wire.ProducePartitionResponse:
    assert isinstance(answer, wire.ProduceResponse), answer
    (partition,) = answer.partitions
    return partition


def replicated(cluster: Cluster) -> Cluster:
    """A topic led by broker 1 with followers 2 and 3 in its ISR, fetching."""
    cluster.create()
    assert cluster.registration() == (1, (1, 2, 3))
    cluster.advance(1)
    return cluster


# -- acks=all: no acknowledgement before commit ------------------------------------------------------------------


def test_a_retried_batch_is_acknowledged_only_once_its_records_are_committed() -> None:
    """Given leader 1 whose followers cannot fetch, when an idempotent acks=all batch times out there and the
    producer sends it again, then the retry is recognised (no second append) but waits, like the first attempt,
    for the high watermark: it is acknowledged with the original offsets only once the followers have it."""
    cluster = replicated(Cluster())
    batch = idempotent([b"a", b"b"], sequence=0)
    first = cluster.produce(1, batch, timeout_ms=1_000)
    cluster.route(cut=frozenset({2, 3}))
    assert cluster.answered(PRODUCER, first) is None
    cluster.advance(1_001)
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, first)).error) is ErrorCode.REQUEST_TIMED_OUT
    retry = cluster.produce(1, batch, timeout_ms=5_000)
    cluster.route(cut=frozenset({2, 3}))
    assert cluster.answered(PRODUCER, retry) is None, "a retry of an uncommitted batch must wait for the HW"
    assert cluster.core(1).log_end_offset == 2, "the retry was not appended again"
    cluster.advance(FETCH_TIMEOUT_MS)  # the followers' lost fetches time out and they fetch again
    cluster.route(rounds=4)
    answer = only_partition(cluster.answered(PRODUCER, retry))
    assert (ErrorCode(answer.error), answer.base_offset) == (ErrorCode.NONE, 0)
    assert cluster.core(1).high_watermark == 2


def test_a_retried_batch_with_the_isr_below_min_isr_is_refused_like_a_new_one() -> None:
    """Given a committed batch and an ISR shrunk to the leader alone (min ISR 2), when the producer sends the batch
    again, then the answer is NOT_ENOUGH_REPLICAS, as for any acks=all produce there: Kafka checks min ISR before it
    looks at the batch."""
    cluster = replicated(Cluster(lag_ms=100))
    batch = idempotent([b"a"], sequence=0)
    first = cluster.produce(1, batch)
    cluster.route(rounds=4)
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, first)).error) is ErrorCode.NONE
    cluster.produce(1, encode_batch([b"later"], timestamps=T0), acks=1)  # the followers, cut off, fall behind
    for _ in range(4):
        cluster.advance(100)
        cluster.route(cut=frozenset({2, 3}))
        cluster.route()  # the leader's AlterPartition reaches the controller
    assert cluster.registration() == (1, (1,))
    retry = cluster.produce(1, batch)
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, retry)).error) is ErrorCode.NOT_ENOUGH_REPLICAS


def test_produce_admission_in_kafkas_order() -> None:
    cluster = replicated(Cluster())
    good = encode_batch([b"x"], timestamps=T0)
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, cluster.produce(2, good))).error) is (
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    )
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    refused = only_partition(cluster.answered(PRODUCER, cluster.produce(1, bytes(corrupt), acks=1)))
    assert ErrorCode(refused.error) is ErrorCode.CORRUPT_MESSAGE and "orders-0" in refused.message
    tags = cluster.tags + 1
    partition = wire.ProducePartitionData(topic="nope", partition=0, records=good)
    cluster.brokers[1].handle(
        PRODUCER, Request(tags, wire.ProduceRequest(acks=1, timeout_ms=1, partitions=(partition,))), T0
    )
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, tags)).error) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert cluster.core(1).log_end_offset == 0, "nothing refused was appended"


def test_a_broker_not_caught_up_calls_no_live_topic_unknown() -> None:
    """A restarted broker that has not yet read the metadata log past its registration answers a produce for a
    live topic NOT_LEADER_OR_FOLLOWER (retriable), never UNKNOWN_TOPIC_OR_PARTITION."""
    cluster = replicated(Cluster())
    broker = cluster.brokers[1]
    broker.crash(lossy=False)
    broker.start(cluster.now_ms)
    answer = only_partition(cluster.answered(PRODUCER, cluster.produce(1, encode_batch([b"x"], timestamps=T0))))
    assert ErrorCode(answer.error) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert broker.manager is not None and not broker.manager.ready


# -- the fetch purgatory ---------------------------------------------------------------------------------------


def test_a_consumer_fetch_waits_for_the_high_watermark_then_is_answered_once() -> None:
    cluster = replicated(Cluster(min_isr=1))
    waiting = cluster.fetch(1, 0, max_wait_ms=10_000)
    assert cluster.answered(CONSUMER, waiting) is None
    cluster.produce(1, encode_batch([b"a"], timestamps=T0), acks=1)
    assert cluster.answered(CONSUMER, waiting) is None, "an append below the HW answers no consumer"
    cluster.route(rounds=3)
    answer = cluster.answered(CONSUMER, waiting)
    assert isinstance(answer, wire.FetchResponse)
    (partition,) = answer.partitions
    assert [r.value for _, records in decode_batches(partition.records) for r in records] == [b"a"]
    assert partition.high_watermark == 1


def test_a_fetch_that_waited_is_answered_empty_at_its_deadline() -> None:
    cluster = replicated(Cluster())
    waiting = cluster.fetch(1, 0, max_wait_ms=300)
    cluster.advance(299)
    assert cluster.answered(CONSUMER, waiting) is None
    cluster.advance(1)
    answer = cluster.answered(CONSUMER, waiting)
    assert isinstance(answer, wire.FetchResponse) and answer.partitions[0].records == b""


def test_a_follower_fetch_read_again_from_the_purgatory_does_not_move_its_state_again() -> None:
    """Kafka's DelayedFetch reads with the follower's state already updated: the first read recorded its LEO; a
    re-read when data arrives returns the data without recording anything again."""
    cluster = replicated(Cluster())
    cluster.route(rounds=2)  # the followers' fetches are parked at the leader
    before = len(cluster.events(1, events.FollowerStateUpdated))
    cluster.produce(1, encode_batch([b"a"], timestamps=T0), acks=1)
    answers = [m for d, m in cluster.brokers[1].outbox if d == 2 and isinstance(m, Answer)]
    assert len(answers) == 1 and answers[0].body.partitions[0].records, "the parked fetch was answered with the data"
    assert len(cluster.events(1, events.FollowerStateUpdated)) == before
    assert cluster.core(1).remotes[2].log_end_offset == 0, "its LEO is recorded by its next fetch, not by a re-read"


# -- KAFKA-9952: a moved high watermark answers consumers, not followers -----------------------------------------

WAIT_MS = 500  # the Cluster's replica.fetch.wait.max.ms


def carry(cluster: Cluster, source: int, destination: int) -> None:
    """Deliver what `source` has sent `destination` so far, and nothing else: the rest waits in the outboxes."""
    broker = cluster.brokers[source]
    taken = [(d, m) for d, m in broker.outbox if d == destination]
    broker.outbox = [(d, m) for d, m in broker.outbox if d != destination]
    for _, message in taken:
        cluster._deliver(source, destination, message)


def fetch_answers(cluster: Cluster, follower: int) -> list[wire.FetchResponse]:
    """The leader's answers to `follower`'s fetches, not carried yet."""
    return [
        m.body
        for d, m in cluster.brokers[1].outbox
        if d == follower and isinstance(m, Answer) and isinstance(m.body, wire.FetchResponse)
    ]


def hw_moved_by_follower_2_while_3_waits(cluster: Cluster) -> int:
    """Given leader 1 with the followers' fetches parked (nothing to read), an acks=all record appended and carried
    to follower 3 first: 3 appends it and fetches again at the leader's LEO (1), where its fetch is parked (the HW
    is 0: follower 2 is still at 0). Then 2 gets the record and fetches at 1: the HW moves to 1 and the produce is
    acknowledged. Returns the produce's tag."""
    cluster.route(rounds=2)  # the followers' fetches are parked at the leader: nothing to read
    assert fetch_answers(cluster, 2) == fetch_answers(cluster, 3) == []
    tag = cluster.produce(1, encode_batch([b"a"], timestamps=T0))
    carry(cluster, 1, 3)  # the leader's answer to 3, with the record
    carry(cluster, 3, 1)  # 3's next fetch, at 1
    assert cluster.core(1).remotes[3].log_end_offset == 1 and cluster.core(1).high_watermark == 0
    assert fetch_answers(cluster, 3) == [], "3's fetch at the LEO waits: nothing to read"
    carry(cluster, 1, 2)  # the leader's answer to 2, with the record
    carry(cluster, 2, 1)  # 2's next fetch, at 1: the HW moves
    assert cluster.core(1).high_watermark == 1
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, tag)).error) is ErrorCode.NONE
    return tag


def test_a_parked_follower_fetch_is_not_answered_when_another_followers_fetch_moves_the_high_watermark() -> None:
    """Given leader 1 with follower 3's fetch parked at the LEO, when follower 2's fetch moves the HW from 0 to 1,
    then 3's fetch stays parked: a HW move alone answers no follower (Kafka's DelayedFetch since KAFKA-9952 completes
    a follower's fetch on bytes past its offset, an error, a divergence or its max wait). It is answered at its
    max wait (replica.fetch.wait.max.ms), empty and carrying the new HW, which 3 then takes."""
    cluster = replicated(Cluster())
    hw_moved_by_follower_2_while_3_waits(cluster)
    assert fetch_answers(cluster, 3) == [], "the HW moved, but 3's fetch has nothing to read: it stays parked"
    assert fetch_answers(cluster, 2) == [], "2's own fetch, which moved the HW, has nothing to read either"
    cluster.advance(WAIT_MS - 1)
    assert fetch_answers(cluster, 3) == []
    cluster.advance(1)  # 3's fetch was parked WAIT_MS ago
    (answer,) = fetch_answers(cluster, 3)
    (partition,) = answer.partitions
    assert (partition.records, partition.high_watermark) == (b"", 1)
    assert cluster.core(3).high_watermark == 0
    carry(cluster, 1, 3)
    assert cluster.core(3).high_watermark == 1


def test_a_parked_follower_fetch_is_answered_at_once_by_new_data_carrying_the_new_high_watermark() -> None:
    """Given follower 3's fetch parked at the LEO through a HW move (0 -> 1) that did not answer it, when the
    leader appends another record, then 3's fetch is answered at once with that record, and the answer carries the
    HW 1 that 3 had not been told yet: a follower learns the HW from its next answer that carries data."""
    cluster = replicated(Cluster())
    hw_moved_by_follower_2_while_3_waits(cluster)
    cluster.produce(1, encode_batch([b"b"], timestamps=T0))
    (answer,) = fetch_answers(cluster, 3)
    (partition,) = answer.partitions
    assert [r.value for _, records in decode_batches(partition.records) for r in records] == [b"b"]
    assert partition.high_watermark == 1
    carry(cluster, 1, 3)
    assert (cluster.core(3).log_end_offset, cluster.core(3).high_watermark) == (2, 1)


def test_a_consumer_fetch_parked_at_the_high_watermark_is_answered_when_the_high_watermark_passes_it() -> None:
    """Given leader 1 with HW 1 and a consumer's fetch parked at offset 1 (the HW: nothing it may read), when a
    record is appended at 1, then the consumer is not answered while only follower 3 has it (the HW stays 1); when
    follower 2's fetch moves the HW to 2, the consumer's fetch is answered in that same input, with the record and
    HW 2: the HW passing a consumer's offset gives it records to read (Kafka's DelayedFetch, HIGH_WATERMARK
    isolation), so consumers see a record as soon as it is committed, not at their max wait."""
    cluster = replicated(Cluster())
    cluster.produce(1, encode_batch([b"a"], timestamps=T0))
    cluster.route(rounds=4)
    assert cluster.core(1).high_watermark == 1
    cluster.advance(WAIT_MS)  # the followers' fetches at 1 are answered at their max wait, and park again
    cluster.route(rounds=2)
    waiting = cluster.fetch(1, 1, max_wait_ms=10_000)
    assert cluster.answered(CONSUMER, waiting) is None, "nothing below the HW past offset 1"
    cluster.produce(1, encode_batch([b"b"], timestamps=T0))
    assert cluster.answered(CONSUMER, waiting) is None, "an append above the HW answers no consumer"
    carry(cluster, 1, 3)
    carry(cluster, 3, 1)  # 3 has the record: the HW stays 1 (2 is at 1)
    assert cluster.core(1).high_watermark == 1 and cluster.answered(CONSUMER, waiting) is None
    carry(cluster, 1, 2)
    carry(cluster, 2, 1)  # 2 has it: the HW moves to 2
    assert cluster.core(1).high_watermark == 2
    answer = cluster.answered(CONSUMER, waiting)
    assert isinstance(answer, wire.FetchResponse)
    (partition,) = answer.partitions
    assert [r.value for _, records in decode_batches(partition.records) for r in records] == [b"b"]
    assert partition.high_watermark == 2


# -- follower sessions ------------------------------------------------------------------------------------------


def test_one_fetch_in_flight_per_leader_and_a_stale_answer_is_ignored() -> None:
    cluster = replicated(Cluster())
    broker = cluster.brokers[2]
    sent = [m for _, m in broker.outbox if isinstance(m, Request)]
    assert len(sent) == 1 and isinstance(sent[0].body, wire.FetchRequest)
    cluster.advance(10)
    assert [m for _, m in broker.outbox if isinstance(m, Request)] == sent, "still one in flight"
    stale = wire.FetchResponse(
        partitions=(wire.FetchPartitionResponse(topic=TOPIC, partition=0, error=0, high_watermark=9),)
    )
    broker.handle(1, Answer(sent[0].tag - 1, stale), cluster.now_ms)
    assert cluster.core(2).high_watermark == 0


def test_a_follower_follows_its_leaders_log_start_offset() -> None:
    cluster = replicated(Cluster(min_isr=1))
    cluster.produce(1, encode_batch([b"a"], timestamps=T0), acks=1)
    cluster.produce(1, encode_batch([b"b"], timestamps=T0), acks=1)
    cluster.route(rounds=4)
    cluster.advance(500)  # the followers learn the HW their fetches made at their max wait (KAFKA-9952)
    cluster.route(rounds=2)
    assert cluster.core(2).high_watermark == 2
    leader = cluster.brokers[1]
    assert leader.manager is not None
    leader.disk.logs[TP].log.advance_start(1)  # retention removed the first batch on the leader
    leader._carry_out(
        leader.manager.on_log_start_advanced(TP, 1, "retention", leader.now(cluster.now_ms)), leader.now(cluster.now_ms)
    )
    cluster.advance(1)
    cluster.produce(1, encode_batch([b"c"], timestamps=T0), acks=1)
    cluster.route(rounds=4)
    assert cluster.core(2).log_start_offset == 1
    assert cluster.brokers[2].disk.logs[TP].log.start_offset == 1
    moved = cluster.events(2, events.LogStartOffsetAdvanced)
    assert moved and moved[-1].reason == "leader"  # type: ignore[attr-defined]


# -- storage refusals ---------------------------------------------------------------------------------------------


def test_a_refused_follower_append_takes_the_replica_offline_and_nothing_runs_ahead_of_the_log() -> None:
    """Given follower 2 whose disk is full, when it fetches records, then its append is refused: the replica goes
    offline (ReplicaOffline, reported to the controller in its heartbeats), its core never claims the records, no
    RecordsAppended is emitted for them, and it fetches nothing more for the partition."""
    cluster = replicated(Cluster(min_isr=1))
    cluster.brokers[2].disk.fault = "full"
    cluster.produce(1, encode_batch([b"a", b"b"], timestamps=T0), acks=1)
    cluster.route(rounds=3)
    manager = cluster.brokers[2].manager
    assert manager is not None
    assert manager.offline_replicas == (TP,) and manager.replica(TP) is None
    (offline,) = cluster.events(2, events.ReplicaOffline)
    assert offline.error == "KAFKA_STORAGE_ERROR" and offline.log_end_offset == 0  # type: ignore[attr-defined]
    assert not [e for e in cluster.events(2, events.RecordsAppended)]
    assert cluster.brokers[2].disk.logs[TP].log.end_offset == 0
    cluster.advance(200)
    assert not [m for d, m in cluster.brokers[2].outbox if d == 1 and isinstance(m, Request)]


def test_a_refused_leader_append_is_answered_with_a_storage_error_not_an_acknowledgement() -> None:
    cluster = replicated(Cluster(min_isr=1))
    cluster.brokers[1].disk.fault = "failing"
    answer = only_partition(cluster.answered(PRODUCER, cluster.produce(1, encode_batch([b"a"], timestamps=T0), acks=1)))
    assert (ErrorCode(answer.error), answer.base_offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
    completed = cluster.events(1, events.ProduceCompleted)
    assert [e.error for e in completed] == ["KAFKA_STORAGE_ERROR"]  # type: ignore[attr-defined]
    again = only_partition(cluster.answered(PRODUCER, cluster.produce(1, encode_batch([b"b"], timestamps=T0), acks=1)))
    assert ErrorCode(again.error) is ErrorCode.KAFKA_STORAGE_ERROR


# -- the metadata's replicas ------------------------------------------------------------------------------------


def test_a_log_of_an_earlier_topic_of_the_same_name_is_deleted_not_reused() -> None:
    """Given broker 3 down while the topic is deleted and created again (a new topic id), when it is back, then it
    deletes the old log (LogDeleted topic_id_changed) and starts the new replica empty."""
    cluster = replicated(Cluster(min_isr=1))
    cluster.produce(1, encode_batch([b"old"], timestamps=T0), acks=1)
    cluster.route(rounds=4)
    assert cluster.brokers[3].disk.logs[TP].log.end_offset == 1
    cluster.brokers[3].crash(lossy=False)
    cluster.advance(SESSION_MS + 1)  # the controller fences the dead incarnation
    cluster.commit(cluster.control.delete_topic(TOPIC))
    cluster.sync()
    cluster.create(topic_id="topic-id-2")
    broker = cluster.brokers[3]
    broker.start(cluster.now_ms)
    cluster.register(3)
    deleted = cluster.events(3, events.LogDeleted)
    assert [e.reason for e in deleted] == ["topic_id_changed"]  # type: ignore[attr-defined]
    assert broker.disk.logs[TP].topic_id == "topic-id-2" and broker.disk.logs[TP].log.end_offset == 0


def test_a_waiting_produce_on_a_deleted_topic_is_answered() -> None:
    cluster = replicated(Cluster())
    tag = cluster.produce(1, encode_batch([b"a"], timestamps=T0))
    assert cluster.answered(PRODUCER, tag) is None
    cluster.commit(cluster.control.delete_topic(TOPIC))
    cluster.sync()
    assert ErrorCode(only_partition(cluster.answered(PRODUCER, tag)).error) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- time ---------------------------------------------------------------------------------------------------------


def test_retention_runs_on_its_interval_with_the_wall_clock() -> None:
    cluster = replicated(Cluster())
    manager = cluster.brokers[1].manager
    assert manager is not None
    wall = WallMs(1_700_000_000_000)
    first = manager.tick(Now(MonoMs(10_000_000), wall))
    retention = [e for e in first if isinstance(e, EnforceRetention)]
    assert retention and {e.now_ms for e in retention} == {wall}
    interval = manager.config.log_retention_check_interval_ms
    assert not [
        e for e in manager.tick(Now(MonoMs(10_000_000 + interval - 1), wall)) if isinstance(e, EnforceRetention)
    ]
    assert [e for e in manager.tick(Now(MonoMs(10_000_000 + interval), wall)) if isinstance(e, EnforceRetention)]


def test_an_offline_follower_is_taken_out_and_acks_all_goes_on_without_it() -> None:
    """Given follower 2 whose disk fills up under an acks=all produce (min ISR 2), when its replica goes offline and
    its heartbeat says so, then the controller takes it out of the ISR, the leader stops counting it (it is not
    ISR-eligible while offline, however recently it fetched), and the produce is acknowledged by 1 and 3."""
    cluster = replicated(Cluster())
    cluster.brokers[2].disk.fault = "full"
    tag = cluster.produce(1, encode_batch([b"a"], timestamps=T0), timeout_ms=30_000)
    cluster.route(rounds=3)
    assert cluster.answered(PRODUCER, tag) is None
    cluster.advance(1)  # broker 2's heartbeat names its offline replica
    assert cluster.registration() == (1, (1, 3))
    cluster.route(rounds=3)
    answer = only_partition(cluster.answered(PRODUCER, tag))
    assert (ErrorCode(answer.error), answer.base_offset) == (ErrorCode.NONE, 0)
    assert not cluster.core(1).is_isr_eligible(2)


def test_a_refused_truncation_reports_the_log_as_it_was() -> None:
    """Given follower 2 holding two records, when its leader says the logs diverge at 1 and its disk refuses the
    truncation, then ReplicaOffline reports the log end the disk still has (2), not the truncation point."""
    cluster = replicated(Cluster(min_isr=1))
    cluster.produce(1, encode_batch([b"a"], timestamps=T0), acks=1)
    cluster.produce(1, encode_batch([b"b"], timestamps=T0), acks=1)
    cluster.route(rounds=4)
    follower = cluster.brokers[2]
    assert cluster.core(2).log_end_offset == 2
    follower.outbox.clear()
    cluster.advance(FETCH_TIMEOUT_MS)  # its fetch parked at the leader is given up: it sends another
    (fetch,) = [m for d, m in follower.outbox if d == 1 and isinstance(m, Request)]
    diverging = wire.FetchPartitionResponse(
        topic=TOPIC, partition=0, error=0, high_watermark=1, diverging_epoch=0, diverging_end_offset=1
    )
    follower.disk.fault = "failing"
    follower.handle(1, Answer(fetch.tag, wire.FetchResponse(partitions=(diverging,))), cluster.now_ms)
    (offline,) = cluster.events(2, events.ReplicaOffline)
    assert offline.log_end_offset == 2  # type: ignore[attr-defined]
    assert not cluster.events(2, events.LogTruncated), "a truncation the disk refused is not reported as done"


def test_a_leader_behind_the_metadata_is_fetched_from_again_soon_and_a_broken_answer_after_the_backoff() -> None:
    """A follower that learned of its new leader before the leader did is answered NOT_LEADER_OR_FOLLOWER: it
    fetches again after METADATA_LAG_BACKOFF_MS, not replica.fetch.backoff.ms (else every failover's first commits
    wait a second). Records that are not whole, intact batches are a real failure: the full backoff."""
    cluster = replicated(Cluster())
    follower = cluster.brokers[2]
    for error, records, wait_ms in (
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, b"", METADATA_LAG_BACKOFF_MS),
        (ErrorCode.NONE, b"not a batch", 100),  # the Cluster's replica.fetch.backoff.ms
    ):
        follower.outbox.clear()
        cluster.advance(FETCH_TIMEOUT_MS + 100)  # the fetch in flight is given up: another goes
        (fetch,) = [m for d, m in follower.outbox if d == 1 and isinstance(m, Request)]
        follower.outbox.clear()
        answer = wire.FetchPartitionResponse(
            topic=TOPIC, partition=0, error=int(error), high_watermark=0, log_start_offset=0, records=records
        )
        follower.handle(1, Answer(fetch.tag, wire.FetchResponse(partitions=(answer,))), cluster.now_ms)
        follower.tick(cluster.now_ms + wait_ms - 1)
        assert not [m for d, m in follower.outbox if d == 1 and isinstance(m, Request)], error
        follower.tick(cluster.now_ms + wait_ms)
        assert [m for d, m in follower.outbox if d == 1 and isinstance(m, Request)], error


# -- ListOffsets ---------------------------------------------------------------------------------------------------


def test_the_max_timestamp_offset_is_answered_once_it_is_below_the_high_watermark() -> None:
    """KIP-734 on the leader: the first record with the largest timestamp, but only once committed (Kafka's
    lastFetchableOffset: at or above the HW it is no offset, as a lookup by timestamp is)."""
    cluster = replicated(Cluster())
    manager = cluster.brokers[1].manager
    assert manager is not None

    def max_timestamp() -> tuple[int, int, int]:
        query = wire.ListOffsetsPartition(topic=TOPIC, partition=0, timestamp=-3)
        (answer,) = manager.list_offsets(wire.ListOffsetsRequest(partitions=(query,))).partitions
        return answer.error, answer.offset, answer.timestamp

    cluster.produce(1, encode_batch([b"a", b"b", b"c"], timestamps=[T0 + 5, T0 + 9, T0 + 9]))
    cluster.route(cut=frozenset({2, 3}))
    assert max_timestamp() == (0, -1, -1)  # appended, not committed
    cluster.advance(FETCH_TIMEOUT_MS)
    cluster.route(rounds=4)
    assert cluster.core(1).high_watermark == 3
    assert max_timestamp() == (0, 1, T0 + 9)
