"""Incremental fetch sessions for follower fetches (KIP-227): the leader's cache, the follower's handler, and the
replica manager using both.

Method: the session rules as pure objects (`hightide.core.fetch_session`) for the cache's decisions, and three
brokers of the real ReplicaManager on memory disks (tests/unit/test_replica_manager.py's `Cluster`, every message
carried by hand) for the stories: what a follower sends, what its leader answers and announces, and how the two
recover from a leader that lost its sessions.
"""

from __future__ import annotations

import functools

import pytest

from hightide.core.clock import MonoMs
from hightide.core.fetch_session import EVICTION_MS, FetchSessionCache, FollowerSession
from hightide.core.metadata_image import TopicPartition
from hightide.core.replica_manager import ReplicaManagerConfig
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import encode_batch
from simulation.broker import Answer, Request
from unit import test_replica_manager
from unit.test_replica_manager import FETCH_TIMEOUT_MS, T0, TOPIC, Cluster

PARTITIONS = 4


class Recorded(Cluster):
    """The Cluster, remembering every message it carried."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.carried: list[tuple[int, int, object]] = []

    def _deliver(self, source: int, destination: int, message: object) -> None:
        self.carried.append((source, destination, message))
        super()._deliver(source, destination, message)


def spread(cluster: Recorded) -> Recorded:
    """`PARTITIONS` partitions of TOPIC, each led by broker 1 with followers 2 and 3 in its ISR, fetching in a
    session."""
    cluster.commit(cluster.control.create_topic(TOPIC, topic_id="t", assignments=[[1, 2, 3]] * PARTITIONS))
    cluster.sync()
    cluster.advance(1)
    cluster.route(rounds=4)
    # The followers' first (full) fetches find nothing to read and wait their replica.fetch.wait.max.ms at the
    # leader, as in Kafka since KAFKA-9952 (no answer for a HW alone); their answers open the sessions.
    cluster.advance(500)
    cluster.route(rounds=2)
    return cluster


def fetches_to(cluster: Cluster, follower: int, leader: int) -> list[Request]:
    """The fetches `follower` sent `leader` that are not carried yet."""
    return [m for d, m in cluster.brokers[follower].outbox if d == leader and isinstance(m, Request)]


def last_fetch(cluster: Recorded, follower: int, leader: int) -> wire.FetchRequest:
    """The last fetch carried from `follower` to `leader` (it may wait in the leader's purgatory)."""
    sent = [m.body for s, d, m in cluster.carried if (s, d) == (follower, leader) and isinstance(m, Request)]
    assert sent and isinstance(sent[-1], wire.FetchRequest)
    return sent[-1]


def produce(cluster: Cluster, partition: int, value: bytes) -> None:
    cluster.tags += 1
    data = wire.ProducePartitionData(topic=TOPIC, partition=partition, records=encode_batch([value], timestamps=T0))
    body = wire.ProduceRequest(acks=-1, timeout_ms=5_000, partitions=(data,))
    cluster.brokers[1].handle(-1, Request(cluster.tags, body), cluster.now_ms)


def served_to(cluster: Cluster, replica: int) -> list[events.FetchServed]:
    return [e for _, e in cluster.brokers[1].events if isinstance(e, events.FetchServed) and e.replica == replica]


# -- the replica manager's stories ---------------------------------------------------------------------------------


def test_after_the_first_fetch_a_follower_names_only_what_changed_and_is_answered_only_what_moved() -> None:
    """Given followers in a session with their leader, when one partition of four takes a record, then the fetches
    name only that partition once the follower has it, the leader answers only the partitions that moved (and
    announces FetchServed for those alone), and every partition's records reach the follower."""
    cluster = spread(Recorded())
    idle = last_fetch(cluster, 2, 1)
    assert idle.session_id > 0 and idle.session_epoch > 0 and idle.partitions == ()
    before, carried = len(served_to(cluster, 2)), len(cluster.carried)
    produce(cluster, 2, b"x")
    cluster.route(rounds=6)
    cluster.advance(500)  # the new HW alone answers no follower: it is told at its fetch's max wait (KAFKA-9952)
    cluster.route(rounds=2)
    core = cluster.brokers[2].manager.replica(TopicPartition(TOPIC, 2))  # type: ignore[union-attr]
    assert core is not None and (core.log_end_offset, core.high_watermark) == (1, 1)
    served = served_to(cluster, 2)[before:]
    assert served and {e.partition for e in served} == {2}, "only the partition that moved is answered"
    answered = {
        p.partition
        for s, d, m in cluster.carried[carried:]
        if (s, d) == (1, 2) and isinstance(m, Answer) and isinstance(m.body, wire.FetchResponse)
        for p in m.body.partitions
    }
    named = {
        p.partition
        for s, d, m in cluster.carried[carried:]
        if (s, d) == (2, 1) and isinstance(m, Request) and isinstance(m.body, wire.FetchRequest)
        for p in m.body.partitions
    }
    assert answered == named == {2}
    assert last_fetch(cluster, 2, 1).partitions == (), "the follower's state is what the leader holds: none named"


def test_a_high_watermark_that_moves_is_answered_to_a_fetch_that_does_not_name_the_partition() -> None:
    """Given follower 2 that has a record and follower 3 that does not yet, when 3 fetches it and the HW moves, then
    2 learns the new HW from the answer to a fetch that named no partition: the leader reads every partition of
    the session on each fetch (Kafka's IncrementalFetchContext), not just the ones named."""
    cluster = spread(Recorded())
    produce(cluster, 1, b"x")
    cluster.route(cut=frozenset({3}), rounds=4)
    cluster.advance(600)  # 2's fetch naming its new offset waited its replica.fetch.wait.max.ms: answered empty
    cluster.route(cut=frozenset({3}), rounds=2)
    follower = cluster.brokers[2].manager
    assert follower is not None
    core = follower.replica(TopicPartition(TOPIC, 1))
    assert core is not None and (core.log_end_offset, core.high_watermark) == (1, 0)
    waiting = last_fetch(cluster, 2, 1)
    assert waiting.partitions == (), "2's state is what the leader holds: its fetch names nothing, and waits"
    cluster.advance(FETCH_TIMEOUT_MS)  # 3 gives up its fetch lost in the cut and fetches again
    cluster.route(rounds=4)  # 3 fetches the record: the HW moves
    assert cluster.brokers[1].manager.replica(TopicPartition(TOPIC, 1)).high_watermark == 1  # type: ignore[union-attr]
    cluster.advance(500)  # 2's fetch is answered at its max wait, not for the HW alone (KAFKA-9952)
    cluster.route(rounds=2)
    assert core.high_watermark == 1


def test_a_follower_of_idle_partitions_stays_caught_up_though_the_leader_answers_them_from_its_session() -> None:
    """Given followers in a session, fetching partitions that take nothing for longer than replica.lag.time.max.ms
    (the leader answers those from what the session last read, without reading them again), when a partition
    takes a record while the followers are cut off, then the leader still counts them caught up until the lag
    time has passed since their last fetch, not since the last time it read the partition: every fetch moved
    their fetch and caught-up times, as Kafka's updateFollowerFetchState does."""
    lag_ms = 10_000
    cluster = spread(Recorded(lag_ms=lag_ms))
    leader = cluster.brokers[1].manager
    assert leader is not None
    served, fetched = len(served_to(cluster, 2)), len(cluster.carried)
    for _ in range(2 * lag_ms // 500):  # each idle fetch waits its replica.fetch.wait.max.ms, then the next goes
        cluster.advance(500)
        cluster.route(rounds=2)
    fetches = [m for s, d, m in cluster.carried[fetched:] if (s, d) == (2, 1) and isinstance(m, Request)]
    assert len(fetches) >= lag_ms // 500 and all(m.body.partitions == () for m in fetches), "idle: nothing named"
    assert len(served_to(cluster, 2)) == served, "nothing to say: no partition answered or announced"
    produce(cluster, 0, b"x")
    for _ in range(lag_ms // 1_000 - 1):  # the ISR check runs every lag/2; the followers fetch no more
        cluster.advance(1_000)
        cluster.route(cut=frozenset({2, 3}))
    core = leader.replica(TopicPartition(TOPIC, 0))
    assert core is not None and core.isr == frozenset({1, 2, 3})
    assert not [e for _, e in cluster.brokers[1].events if isinstance(e, events.IsrChangeProposed)]
    cluster.advance(2_000)  # now the lag time has passed since their last fetch: out of the ISR
    cluster.route(cut=frozenset({2, 3}))
    assert core.isr == frozenset({1})


def test_a_leader_that_lost_its_sessions_is_fetched_from_in_full_at_once() -> None:
    """Given a follower in a session, when its incremental fetch reaches a new incarnation of its leader (whose
    sessions are gone), then it is answered FETCH_SESSION_ID_NOT_FOUND with no partition, and the follower sends a
    full fetch at once: no backoff, a session error is no failure of the partitions (Kafka's fetcher)."""
    cluster = spread(Recorded())
    stale = [m for s, d, m in cluster.carried if (s, d) == (2, 1) and isinstance(m, Request)][-1]
    assert stale.body.session_epoch > 0
    leader = cluster.brokers[1]
    leader.crash(lossy=False)
    leader.start(cluster.now_ms)
    leader.handle(2, stale, cluster.now_ms)  # the follower's fetch reaches the new incarnation
    (answer,) = [m for d, m in leader.outbox if d == 2 and isinstance(m, Answer) and m.tag == stale.tag]
    assert answer.body.error_code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND and answer.body.partitions == ()
    cluster.brokers[2].outbox.clear()
    cluster.brokers[2].handle(1, answer, cluster.now_ms)
    (full,) = fetches_to(cluster, 2, 1)
    assert (full.body.session_id, full.body.session_epoch) == (0, 0)
    assert len(full.body.partitions) == PARTITIONS


def test_a_lost_fetch_makes_the_next_one_full_and_closes_the_old_session() -> None:
    cluster = spread(Recorded())
    lost = last_fetch(cluster, 2, 1)  # waiting in the leader's purgatory: say its answer never comes back
    cluster.advance(FETCH_TIMEOUT_MS + 1)
    (again,) = fetches_to(cluster, 2, 1)
    assert again.body.session_epoch == 0 and again.body.session_id == lost.session_id
    assert len(again.body.partitions) == PARTITIONS
    cluster.route(rounds=2)
    manager = cluster.brokers[1].manager
    assert manager is not None
    assert lost.session_id not in manager._fetch_sessions.sessions, "the old session was closed"


def test_no_session_slots_means_full_fetches_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """max.incremental.fetch.session.cache.slots=0: the leader opens no session (session id 0), and each follower
    fetch names every partition, as before sessions."""
    unsessioned = functools.partial(ReplicaManagerConfig, max_incremental_fetch_session_cache_slots=0)
    monkeypatch.setattr(test_replica_manager, "ReplicaManagerConfig", unsessioned)
    cluster = spread(Recorded())
    for _ in range(3):
        cluster.advance(100)
        cluster.route(rounds=2)
    sent = last_fetch(cluster, 2, 1)
    assert (sent.session_id, sent.session_epoch, len(sent.partitions)) == (0, 0, PARTITIONS)


# -- the cache's rules ---------------------------------------------------------------------------------------------


def fetch(
    replica: int, *partitions: int, session_id: int = 0, epoch: int = 0, forget: tuple[int, ...] = ()
) -> wire.FetchRequest:
    return wire.FetchRequest(
        replica_id=replica,
        partitions=tuple(wire.FetchPartitionRequest(topic=TOPIC, partition=p, fetch_offset=5) for p in partitions),
        session_id=session_id,
        session_epoch=epoch,
        forgotten=tuple(wire.TopicPartitionRef(topic=TOPIC, partition=p) for p in forget),
    )


def answer(partition: int, *, hw: int = 5, error: int = 0, records: bytes = b"") -> wire.FetchPartitionResponse:
    return wire.FetchPartitionResponse(
        topic=TOPIC, partition=partition, error=error, high_watermark=hw, log_start_offset=0, records=records
    )


def open_session(cache: FetchSessionCache, replica: int, now_ms: int = 0) -> int:
    context = cache.context(fetch(replica, 0, 1), MonoMs(now_ms))
    session_id, _ = cache.respond(context, [answer(0), answer(1)], MonoMs(now_ms))
    assert session_id > 0
    return session_id


def test_an_incremental_fetch_reads_the_whole_session_and_answers_what_has_something_to_say() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, 2)
    context = cache.context(fetch(2, session_id=session_id, epoch=1), MonoMs(1))
    assert [p.partition for p in context.request.partitions] == [0, 1], "every partition of the session is read"
    _, included = cache.respond(context, [answer(0), answer(1, hw=6)], MonoMs(1))
    assert included == [False, True], "only the moved HW is answered"
    context = cache.context(fetch(2, session_id=session_id, epoch=2), MonoMs(2))
    _, included = cache.respond(
        context, [answer(0, error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER)), answer(1, hw=6)], MonoMs(2)
    )
    assert included == [True, False], "an error is always answered"
    context = cache.context(fetch(2, session_id=session_id, epoch=3), MonoMs(3))
    _, included = cache.respond(context, [answer(0), answer(1, hw=6)], MonoMs(3))
    assert included == [True, False], "the partition is answered again once its error is gone"
    context = cache.context(fetch(2, session_id=session_id, epoch=4, forget=(0,)), MonoMs(4))
    assert [p.partition for p in context.request.partitions] == [1], "a forgotten partition leaves the session"


def test_session_errors() -> None:
    cache = FetchSessionCache()
    session_id = open_session(cache, 2)
    assert cache.context(fetch(2, session_id=session_id + 1, epoch=1), MonoMs(1)).error is (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )
    assert cache.context(fetch(3, session_id=session_id, epoch=1), MonoMs(1)).error is (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    ), "a session is its own follower's"
    assert cache.context(fetch(2, session_id=session_id, epoch=2), MonoMs(1)).error is (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH
    )
    assert cache.context(fetch(2, session_id=session_id, epoch=1), MonoMs(1)).error is ErrorCode.NONE
    copy = cache.context(fetch(2, session_id=session_id, epoch=1), MonoMs(1))  # the network delivered it twice
    assert copy.error is ErrorCode.NONE and copy.duplicate
    assert cache.respond(copy, [answer(0), answer(1)], MonoMs(1)) == (session_id, [True, True]), "answered in full"
    assert cache.sessions[session_id].epoch == 2, "the copy does not move the session"
    consumer = cache.context(fetch(-1, 0, epoch=0), MonoMs(1))
    assert cache.respond(consumer, [answer(0)], MonoMs(1))[0] == 0, "a consumer is answered without a session"


def test_a_full_cache_makes_room_only_by_evicting_a_session_idle_for_the_eviction_time() -> None:
    cache = FetchSessionCache(max_slots=1)
    first = open_session(cache, 2, now_ms=0)
    context = cache.context(fetch(3, 0, epoch=0), MonoMs(EVICTION_MS - 1))
    assert cache.respond(context, [answer(0)], MonoMs(EVICTION_MS - 1))[0] == 0, "full: no session"
    context = cache.context(fetch(3, 0, epoch=0), MonoMs(EVICTION_MS))
    second, _ = cache.respond(context, [answer(0)], MonoMs(EVICTION_MS))
    assert second > 0 and set(cache.sessions) == {second} and first != second


def test_the_follower_sends_what_changed_and_forgets_what_it_no_longer_follows() -> None:
    handler = FollowerSession()
    a, b = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)

    def request(tp: TopicPartition) -> wire.FetchPartitionRequest:
        return wire.FetchPartitionRequest(topic=tp.topic, partition=tp.partition, fetch_offset=0)

    partitions, forgotten, session_id, epoch = handler.build({a: (0, 0, 0, 0, 1), b: (0, 0, 0, 0, 1)}, request)
    assert (len(partitions), forgotten, session_id, epoch) == (2, (), 0, 0)
    assert handler.on_response(ErrorCode.NONE, 9)
    partitions, forgotten, session_id, epoch = handler.build({a: (1, 0, 0, 0, 1)}, request)
    assert [p.partition for p in partitions] == [0] and [f.partition for f in forgotten] == [1]
    assert (session_id, epoch) == (9, 1)
    assert not handler.on_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    partitions, _, session_id, epoch = handler.build({a: (1, 0, 0, 0, 1)}, request)
    assert (len(partitions), session_id, epoch) == (1, 9, 0), "a full fetch that closes the old session"
