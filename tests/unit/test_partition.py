"""The partition state machine, leader and follower, step by step as the seeds and Kafka's PartitionTest walk it.

Method: replicas whose disks are memory (tests/support/memory_replica.py) exchange fetches by hand, so every
step of a walkthrough is one call; each test states the table the seed or Kafka's test gives and checks it.
Times start at a large epoch-millisecond value, as Kafka's MockTime does, so "never caught up" (time 0) is
far in the past.
"""

from __future__ import annotations

from hightide.core.effects import CONTROLLER
from hightide.core.epoch_cache import EpochEntry, LeaderEpochCache
from hightide.core.partition import CONSUMER_REPLICA_ID, Partition, PartitionConfig
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import IsrChangeProposed, LogTruncated
from hightide.protocol.records import decode_batches, encode_batch, iter_batch_headers
from hightide.protocol.wire import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchPartitionRequest,
    FetchPartitionResponse,
)
from support.memory_replica import MemoryReplica, _stamp, deliver, produce, replicate

T0 = 1_700_000_000_000
LAG_MS = 10_000


def cluster(
    replicas: tuple[int, ...] = (1, 2, 3),
    isr: tuple[int, ...] | None = None,
    leader_epoch: int = 0,
    **config: object,
) -> dict[int, MemoryReplica]:
    """Replicas of one partition; the first leads. Every broker is registered and unfenced."""
    settings = PartitionConfig(**{"replica_lag_time_max_ms": LAG_MS, **config})  # type: ignore[arg-type]
    isr = replicas if isr is None else isr
    nodes = {broker: MemoryReplica.create(broker, settings) for broker in replicas}
    for node in nodes.values():
        node.partition.broker_epochs = {broker: 100 + broker for broker in replicas}
    leader, *followers = replicas
    nodes[leader].apply(nodes[leader].partition.make_leader(leader_epoch, 0, replicas, isr, T0))
    for follower in followers:
        nodes[follower].apply(nodes[follower].partition.make_follower(leader, leader_epoch, 0, replicas, isr))
    return nodes


def at(offset: int, **fields: int) -> FetchPartitionRequest:
    """A fetch of orders-0 from `offset`."""
    return FetchPartitionRequest(topic="orders", partition=0, fetch_offset=offset, **fields)


def last_proposal(node: MemoryReplica) -> AlterPartitionRequest:
    requests = [s.message for s in node.sent if s.destination == CONTROLLER]
    assert requests and isinstance(requests[-1], AlterPartitionRequest)
    return requests[-1]


def commit(node: MemoryReplica, now_ms: int) -> None:
    """The controller accepts the leader's last proposal (partition epoch + 1)."""
    request = last_proposal(node)
    response = AlterPartitionResponse(
        topic=request.topic,
        partition=request.partition,
        error=ErrorCode.NONE,
        leader=request.broker_id,
        leader_epoch=request.leader_epoch,
        isr=request.new_isr,
        partition_epoch=request.partition_epoch + 1,
    )
    node.apply(node.partition.on_alter_partition_response(request, response, now_ms))


# -- the seeds' walkthroughs --------------------------------------------------------------------------------


def test_seed_003_high_watermark_table_with_two_followers() -> None:
    nodes = cluster()
    leader, f1, f2 = nodes[1], nodes[2], nodes[3]
    # The producer sends A and B: leader LEO 2, HW 0.
    produce(leader, [b"A"], T0, acks=1)
    produce(leader, [b"B"], T0, acks=1)
    assert (leader.leo, leader.hw) == (2, 0)
    # Both followers fetch from offset 0; Follower-1 takes both records, Follower-2 (a smaller fetch) only one.
    replicate(leader, f1, T0 + 1)
    replicate(leader, f2, T0 + 1, max_bytes=1)
    assert leader.hw == 0  # max(HW, min(2, 0, 0))
    assert (f1.leo, f1.hw, f2.leo, f2.hw) == (2, 0, 1, 0)
    # The producer sends C: leader LEO 3.
    produce(leader, [b"C"], T0 + 2, acks=1)
    assert leader.leo == 3
    # Both fetch again, carrying their LEOs (Follower-2's fetch is taken first): the leader's HW becomes
    # max(0, min(3, 2, 1)) = 1, and it sends that HW with the data.
    replicate(leader, f2, T0 + 3, max_bytes=1)
    replicate(leader, f1, T0 + 3)
    assert leader.hw == 1
    assert (f1.leo, f1.hw) == (3, 1)
    # Follower-2's answer left before Follower-1's fetch moved the HW (the seed draws both answers leaving
    # together, so both show HW 1 there); Follower-2 learns the HW on its next fetch, as the seed's "repeat"
    # says, and that fetch (offset 2) moves the leader's HW on to min(3, 2, 2) = 2.
    assert (f2.leo, f2.hw) == (2, 0)
    replicate(leader, f2, T0 + 4)
    assert (leader.hw, f2.leo, f2.hw) == (2, 3, 2)
    # ... and repeating brings every replica to the same data and offsets.
    replicate(leader, f1, T0 + 5)
    replicate(leader, f2, T0 + 5)
    replicate(leader, f1, T0 + 6)
    assert leader.hw == 3 and (f1.leo, f1.hw, f2.leo, f2.hw) == (3, 3, 3, 3)
    assert f1.log.records() == f2.log.records() == leader.log.records() == [(0, b"A"), (1, b"B"), (2, b"C")]


def test_seed_000_a_followers_high_watermark_takes_a_second_fetch() -> None:
    nodes = cluster(replicas=(1, 2))
    leader, follower = nodes[1], nodes[2]
    produce(leader, [b"m0"], T0, acks=1)
    # First fetch (offset 0): the follower gets the record; both LEOs are 1, both HWs still 0.
    replicate(leader, follower, T0 + 1)
    assert (leader.leo, leader.hw, follower.leo, follower.hw) == (1, 0, 1, 0)
    # Second fetch (offset 1): the leader records the remote LEO 1, moves its HW to 1, and sends it.
    replicate(leader, follower, T0 + 2)
    assert (leader.hw, follower.hw) == (1, 1)


def test_only_the_leader_in_the_isr_moves_the_high_watermark_at_once() -> None:
    nodes = cluster(replicas=(1, 2, 3), isr=(1,))
    produce(nodes[1], [b"x", b"y"], T0, acks=1)
    assert nodes[1].hw == 2


# -- Kafka's PartitionTest ------------------------------------------------------------------------------------


def test_follower_does_not_join_isr_until_caught_up_to_offset_within_current_leader_epoch() -> None:
    nodes = cluster(replicas=(1, 2, 3), isr=(1, 3), leader_epoch=8)
    leader = nodes[1]
    produce(leader, [b"a", b"b"], T0, acks=1)
    produce(leader, [b"c", b"d", b"e"], T0, acks=1)
    assert leader.hw == 0
    fetch = leader.partition.on_fetch
    leader.apply(fetch(3, -1, at(0), T0 + 1))
    leader.apply(fetch(3, -1, at(1), T0 + 2))
    assert leader.hw == 1
    # Re-elected in epoch 10; the epoch starts at offset 5.
    leader.apply(leader.partition.make_leader(10, 1, (1, 2, 3), (1, 3), T0 + 3))
    produce(leader, [b"f"], T0 + 4, acks=1)
    assert leader.partition.leader_epoch_start_offset == 5
    for offset in (0, 1):
        leader.apply(fetch(2, -1, at(offset), T0 + 5))
        assert not leader.partition.isr_state.inflight
    leader.apply(fetch(2, -1, at(5), T0 + 6))
    assert last_proposal(leader).new_isr == (1, 2, 3)
    assert leader.partition.isr == {1, 3} and leader.partition.isr_state.maximal_isr == {1, 2, 3}


def test_maybe_shrink_isr_then_the_high_watermark_moves_once_the_controller_commits() -> None:
    nodes = cluster(replicas=(1, 2, 3))
    leader = nodes[1]
    produce(leader, [b"r%d" % i for i in range(10)], T0, acks=1)
    leader.apply(leader.partition.on_fetch(2, -1, at(10), T0 + 1))
    leader.apply(leader.partition.maybe_shrink_isr(T0 + 1))
    assert not leader.partition.isr_state.inflight  # replica 3 was caught up when the epoch started
    leader.apply(leader.partition.maybe_shrink_isr(T0 + LAG_MS + 1))
    assert last_proposal(leader).new_isr == (1, 2)
    assert leader.hw == 0  # pending shrink: the maximal ISR still holds replica 3, whose LEO is unknown
    commit(leader, T0 + LAG_MS + 2)
    assert leader.partition.isr == {1, 2} and leader.partition.partition_epoch == 1
    assert leader.hw == 10


def test_high_watermark_does_not_advance_under_min_isr() -> None:
    nodes = cluster(replicas=(1, 2, 3), isr=(1, 2), min_insync_replicas=3)
    leader = nodes[1]
    produce(leader, [b"r%d" % i for i in range(10)], T0, acks=1)
    leader.apply(leader.partition.on_fetch(2, -1, at(10), T0 + 1))
    assert leader.hw == 0
    leader.apply(leader.partition.on_fetch(3, -1, at(10), T0 + 2))
    assert leader.hw == 0
    assert len(leader.partition.isr_state.maximal_isr) == 3 and leader.partition.isr_state.inflight
    commit(leader, T0 + 3)
    assert leader.hw == 10


def test_should_not_shrink_isr_if_previous_fetch_is_caught_up() -> None:
    nodes = cluster(replicas=(1, 2))
    leader = nodes[1]
    produce(leader, [b"r%d" % i for i in range(10)], T0, acks=1)
    leader.apply(leader.partition.on_fetch(2, -1, at(5), T0 + 5_000))
    assert leader.hw == 5
    produce(leader, [b"s%d" % i for i in range(5)], T0 + 5_001, acks=1)
    leader.apply(leader.partition.on_fetch(2, -1, at(10), T0 + 10_001))
    assert leader.partition.remotes[2].last_caught_up_time_ms == T0 + 5_000
    assert leader.hw == 10
    leader.apply(leader.partition.maybe_shrink_isr(T0 + 10_001))
    assert not leader.partition.isr_state.inflight


def test_should_not_shrink_isr_if_follower_caught_up_to_log_end() -> None:
    nodes = cluster(replicas=(1, 2))
    leader = nodes[1]
    produce(leader, [b"r%d" % i for i in range(10)], T0, acks=1)
    leader.apply(leader.partition.on_fetch(2, -1, at(10), T0 + 1))
    assert leader.hw == 10
    leader.apply(leader.partition.maybe_shrink_isr(T0 + 30_001))
    assert not leader.partition.isr_state.inflight


def test_update_follower_fetch_state() -> None:
    nodes = cluster(replicas=(1, 2))
    leader = nodes[1]
    produce(leader, [b"r%d" % i for i in range(6)], T0, acks=1)
    remote = leader.partition.remotes[2]
    assert (remote.last_caught_up_time_ms, remote.log_end_offset) == (T0, -1)
    leader.apply(leader.partition.on_fetch(2, -1, at(3), T0 + 500))
    assert (remote.last_caught_up_time_ms, remote.log_end_offset) == (T0, 3)
    leader.apply(leader.partition.on_fetch(2, -1, at(6), T0 + 1_000))
    assert (remote.last_caught_up_time_ms, remote.log_end_offset) == (T0 + 1_000, 6)


# -- acks and min.insync.replicas ------------------------------------------------------------------------------


def test_acks_all_below_min_isr_is_refused_before_the_append() -> None:
    nodes = cluster(replicas=(1, 2, 3), isr=(1,), min_insync_replicas=2)
    leader = nodes[1]
    produce(leader, [b"x"], T0, acks=-1, request_id=7)
    assert leader.completed[-1].error is ErrorCode.NOT_ENOUGH_REPLICAS and leader.completed[-1].request_id == 7
    assert leader.leo == 0 and leader.log.batches == []
    # acks=1 is acknowledged but, under min ISR, never becomes visible to consumers.
    produce(leader, [b"y"], T0, acks=1, request_id=8)
    assert leader.completed[-1].error is ErrorCode.NONE and (leader.leo, leader.hw) == (1, 0)


def test_acks_all_completes_when_the_high_watermark_passes_the_last_offset() -> None:
    nodes = cluster(replicas=(1, 2), min_insync_replicas=2)
    leader, follower = nodes[1], nodes[2]
    produce(leader, [b"x", b"y"], T0, acks=-1, request_id=3)
    assert leader.completed == []
    replicate(leader, follower, T0 + 1)
    assert leader.completed == []  # the leader knows the follower's LEO only from its next fetch
    replicate(leader, follower, T0 + 2)
    assert [(c.request_id, c.error, c.base_offset, c.last_offset) for c in leader.completed] == [
        (3, ErrorCode.NONE, 0, 1)
    ]


def test_acks_all_with_a_maximal_isr_below_min_isr_is_not_enough_replicas_after_append() -> None:
    # RF 2 with min.insync.replicas 3: the HW moves (the effective minimum is 2), but the answer is an error.
    nodes = cluster(replicas=(1, 2), min_insync_replicas=3)
    leader, follower = nodes[1], nodes[2]
    produce(leader, [b"x"], T0, acks=-1, request_id=1)
    replicate(leader, follower, T0 + 1)
    replicate(leader, follower, T0 + 2)
    assert leader.completed[-1].error is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_acks_all_times_out_when_followers_do_not_fetch() -> None:
    nodes = cluster(replicas=(1, 2))
    leader = nodes[1]
    produce(leader, [b"x"], T0, acks=-1, request_id=5)
    leader.apply(leader.partition.tick(T0 + 29_999))
    assert leader.completed == []
    leader.apply(leader.partition.tick(T0 + 30_000))
    assert leader.completed[-1].error is ErrorCode.REQUEST_TIMED_OUT


def test_a_leader_that_becomes_follower_fails_its_waiting_produces() -> None:
    nodes = cluster(replicas=(1, 2))
    leader = nodes[1]
    produce(leader, [b"x"], T0, acks=-1, request_id=9)
    leader.apply(leader.partition.make_follower(2, 1, 1, (1, 2), (1, 2)))
    assert leader.completed[-1].error is ErrorCode.NOT_LEADER_OR_FOLLOWER


# -- AlterPartition answers ------------------------------------------------------------------------------------


def _pending_shrink() -> MemoryReplica:
    nodes = cluster(replicas=(1, 2, 3))
    leader = nodes[1]
    leader.apply(leader.partition.maybe_shrink_isr(T0 + LAG_MS + 1))
    assert leader.partition.isr_state.inflight
    return leader


def test_an_ineligible_replica_answer_reverts_to_the_committed_isr() -> None:
    leader = _pending_shrink()
    answer = AlterPartitionResponse(topic="orders", partition=0, error=ErrorCode.INELIGIBLE_REPLICA)
    leader.apply(leader.partition.on_alter_partition_response(last_proposal(leader), answer, T0 + LAG_MS + 2))
    assert not leader.partition.isr_state.inflight and leader.partition.isr == {1, 2, 3}


def test_a_fenced_answer_waits_for_new_metadata_and_other_errors_retry_after_the_backoff() -> None:
    leader = _pending_shrink()
    sent = len(leader.sent)
    fenced = AlterPartitionResponse(topic="orders", partition=0, error=ErrorCode.FENCED_LEADER_EPOCH)
    leader.apply(leader.partition.on_alter_partition_response(last_proposal(leader), fenced, T0 + LAG_MS + 2))
    assert leader.partition.isr_state.inflight and len(leader.sent) == sent
    backoff = leader.partition.config.alter_partition_retry_backoff_ms
    for error in (ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH):
        refused_at = T0 + LAG_MS + 3
        answer = AlterPartitionResponse(topic="orders", partition=0, error=error)
        leader.apply(leader.partition.on_alter_partition_response(last_proposal(leader), answer, refused_at))
        assert len(leader.sent) == sent, "a refusal is not answered by an immediate resend (no busy loop)"
        leader.apply(leader.partition.tick(refused_at + backoff - 1))
        assert len(leader.sent) == sent
        leader.apply(leader.partition.tick(refused_at + backoff))
        assert len(leader.sent) == sent + 1 and leader.sent[-1].message == leader.sent[-2].message
        sent += 1


def test_a_stale_commit_is_ignored() -> None:
    leader = _pending_shrink()
    stale = AlterPartitionResponse(
        topic="orders", partition=0, error=ErrorCode.NONE, leader=1, leader_epoch=0, isr=(1, 2), partition_epoch=-5
    )
    leader.apply(leader.partition.on_alter_partition_response(last_proposal(leader), stale, T0 + LAG_MS + 2))
    assert leader.partition.isr == {1, 2, 3}


def test_the_isr_proposal_event_names_the_change() -> None:
    leader = _pending_shrink()
    proposal = next(e for e in leader.events if isinstance(e, IsrChangeProposed))
    assert (proposal.isr, proposal.proposed_isr, proposal.change) == ((1, 2, 3), (1,), "shrink")


# -- fetch answers ----------------------------------------------------------------------------------------------


def test_fetches_are_fenced_by_leader_epoch_and_refused_by_non_leaders() -> None:
    nodes = cluster(replicas=(1, 2), leader_epoch=5)
    leader, follower = nodes[1], nodes[2]

    def error(node: MemoryReplica, current_leader_epoch: int) -> ErrorCode:
        fetch = at(0, current_leader_epoch=current_leader_epoch)
        (answer,) = node.apply(node.partition.on_fetch(CONSUMER_REPLICA_ID, -1, fetch, T0))
        return ErrorCode(answer.error)

    assert error(leader, 4) is ErrorCode.FENCED_LEADER_EPOCH
    assert error(leader, 6) is ErrorCode.UNKNOWN_LEADER_EPOCH
    assert error(leader, 5) is ErrorCode.NONE
    assert error(follower, 5) is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_consumers_never_read_at_or_above_the_high_watermark() -> None:
    nodes = cluster(replicas=(1, 2))
    leader, follower = nodes[1], nodes[2]
    produce(leader, [b"a"], T0, acks=1)
    replicate(leader, follower, T0 + 1)
    replicate(leader, follower, T0 + 2)
    produce(leader, [b"b"], T0 + 3, acks=1)
    assert (leader.leo, leader.hw) == (2, 1)
    (answer,) = leader.apply(leader.partition.on_fetch(CONSUMER_REPLICA_ID, -1, at(0), T0))
    assert [offset for offset, _ in _records(answer.records)] == [0]


def _records(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for _, records in decode_batches(data) for r in records]


# -- leader epochs: KIP-101 ------------------------------------------------------------------------------------


def _restart(node: MemoryReplica) -> MemoryReplica:
    """A broker restart: the core is rebuilt from what its disk holds (log, HW checkpoint, epoch checkpoint)."""
    cache = LeaderEpochCache(EpochEntry(e, o) for e, o in node.epoch_checkpoint)
    partition = Partition(
        "orders",
        0,
        node.broker_id,
        node.partition.config,
        log_end_offset=node.leo,
        high_watermark=node.checkpointed_high_watermark,
        epoch_cache=cache,
    )
    partition.broker_epochs = node.partition.broker_epochs
    return MemoryReplica(node.broker_id, partition, node.log, epoch_checkpoint=node.epoch_checkpoint)


def _kip101_message_loss(legacy: bool) -> tuple[MemoryReplica, MemoryReplica]:
    """Seed 000/002, scenario 1: A leads, B follows, min.insync.replicas=1. Both hold m0 and m1 and A's HW is 2,
    but B crashes before the answer that carries HW 2 reaches it; B restarts; then A crashes and B leads."""
    nodes = cluster(replicas=(1, 2), legacy_truncate_to_high_watermark=legacy)
    a, b = nodes[1], nodes[2]
    produce(a, [b"m0"], T0, acks=1)
    produce(a, [b"m1"], T0, acks=1)
    replicate(a, b, T0 + 1, max_bytes=1)  # B: m0
    replicate(a, b, T0 + 2, max_bytes=1)  # B: m1, HW 1
    a.apply(a.partition.on_fetch(2, -1, b.partition.fetch_partition(), T0 + 3))  # A: HW 2; the answer is lost
    assert (a.hw, b.leo, b.hw) == (2, 2, 1)
    b = _restart(b)
    b.apply(b.partition.make_follower(1, 0, 0, (1, 2), (1, 2)))
    # Before B fetches again, A crashes; the controller elects B (the ISR is {A, B}) in epoch 1;
    # A comes back and follows B.
    b.apply(b.partition.make_leader(1, 1, (1, 2), (2,), T0 + 5))
    a = _restart(a)
    a.apply(a.partition.make_follower(2, 1, 1, (1, 2), (2,)))
    for step in range(3):
        replicate(b, a, T0 + 6 + step)
    return a, b


def test_kip101_message_loss_is_reproduced_by_the_legacy_high_watermark_truncation() -> None:
    a, b = _kip101_message_loss(legacy=True)
    assert b.log.records() == a.log.records() == [(0, b"m0")]  # m1 was committed (HW 2) and is gone
    assert any(isinstance(e, LogTruncated) and e.reason == "high_watermark" for e in b.events)


def test_kip101_message_loss_does_not_happen_with_leader_epochs() -> None:
    a, b = _kip101_message_loss(legacy=False)
    assert b.log.records() == a.log.records() == [(0, b"m0"), (1, b"m1")]
    assert not any(isinstance(e, LogTruncated) for e in a.events + b.events)


def test_kip101_divergent_logs_are_reconciled_by_leader_epochs() -> None:
    """Seed 002, scenario 2: A (leader) has m0, m1; B has only m0 (it lost m1 in a power failure); both crash.
    B restarts first and leads (epoch 1), takes m2 at offset 1. A returns as B's follower: its m1 at offset 1
    must go, and its log must become B's. B is not a clean choice (it lacks a committed record): only an
    unclean election, or a lossy crash of the ISR, lets it lead; the logs converge all the same."""
    nodes = cluster(replicas=(1, 2), isr=(1,))
    a, b = nodes[1], nodes[2]
    produce(a, [b"m0"], T0, acks=1)
    replicate(a, b, T0 + 1)
    produce(a, [b"m1"], T0 + 2, acks=1)
    b = _restart(b)
    b.apply(b.partition.make_leader(1, 1, (1, 2), (2,), T0 + 3))
    produce(b, [b"m2"], T0 + 4, acks=1)
    a = _restart(a)
    a.apply(a.partition.make_follower(2, 1, 1, (1, 2), (2,)))
    for step in range(3):
        replicate(b, a, T0 + 5 + step)
    assert a.log.records() == b.log.records() == [(0, b"m0"), (1, b"m2")]
    assert a.log.epochs() == b.log.epochs() == [(0, 0), (1, 1)]
    truncation = next(e for e in a.events if isinstance(e, LogTruncated))
    assert (truncation.truncated_to, truncation.reason) == (1, "divergence")


def test_a_follower_whose_leader_lost_a_committed_record_follows_it_and_reports_the_loss() -> None:
    # The same history without unclean.leader.election.enable: a clean configuration, yet B (which the test
    # made leader by hand, as a lossy double crash can) lacks m1. A follows B, and its event names the loss:
    # it cut at 1 below its high watermark 2. The simulator and the audit judge whether a fault excuses it.
    nodes = cluster(replicas=(1, 2), isr=(1,))
    a, b = nodes[1], nodes[2]
    produce(a, [b"m0"], T0, acks=1)
    replicate(a, b, T0 + 1)
    produce(a, [b"m1"], T0 + 2, acks=1)
    b.apply(b.partition.make_leader(1, 1, (1, 2), (2,), T0 + 3))
    produce(b, [b"m2"], T0 + 4, acks=1)
    a.apply(a.partition.make_follower(2, 1, 1, (1, 2), (2,)))
    for step in range(3):
        replicate(b, a, T0 + 5 + step)
    assert a.log.records() == b.log.records() == [(0, b"m0"), (1, b"m2")]
    truncation = next(e for e in a.events if isinstance(e, LogTruncated))
    assert (truncation.truncated_to, truncation.high_watermark_before, truncation.high_watermark) == (1, 2, 1)


def test_an_unanswered_alter_partition_is_sent_again_after_its_timeout() -> None:
    nodes = cluster(replicas=(1, 2, 3), alter_partition_timeout_ms=500)
    leader = nodes[1]
    leader.apply(leader.partition.maybe_shrink_isr(T0 + LAG_MS + 1))
    sent = len(leader.sent)
    leader.apply(leader.partition.tick(T0 + LAG_MS + 400))
    assert len(leader.sent) == sent
    leader.apply(leader.partition.tick(T0 + LAG_MS + 501))
    assert len(leader.sent) == sent + 1 and leader.sent[-1].message == leader.sent[-2].message


def test_a_follower_that_led_an_epoch_without_writing_drops_that_epoch_and_rejoins() -> None:
    """Found by the simulator (seed 22): broker 3 led epoch 1 but wrote nothing, so its epoch cache ends with
    (1, 2) at its LEO. Following the epoch-2 leader it is told it diverges at (0, 2); "truncating" to its own
    LEO must still drop (1, 2), as Kafka's truncateTo does, or every later fetch diverges again."""
    nodes = cluster(replicas=(1, 2, 3))
    leader, b3 = nodes[1], nodes[3]
    produce(leader, [b"a", b"b"], T0, acks=1)
    replicate(leader, b3, T0 + 1)
    b3.apply(b3.partition.make_leader(1, 1, (1, 2, 3), (1, 2, 3), T0 + 2))  # leads epoch 1, writes nothing
    assert b3.partition.epoch_cache.entries[-1] == EpochEntry(1, 2)
    leader.apply(leader.partition.make_leader(2, 2, (1, 2, 3), (1, 2, 3), T0 + 3))
    produce(leader, [b"c"], T0 + 4, acks=1)
    b3.apply(b3.partition.make_follower(1, 2, 2, (1, 2, 3), (1, 2, 3)))
    for step in range(3):
        replicate(leader, b3, T0 + 5 + step)
    assert b3.log.records() == leader.log.records() == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert b3.partition.epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(2, 2))


def test_an_answer_to_an_earlier_proposal_does_not_drop_the_pending_one() -> None:
    """Given a leader whose expansion to {1, 3} the metadata committed before the controller's answer came, and
    that has since proposed {1, 2, 3}, when the late answer to the first proposal arrives, then it is ignored: the
    pending proposal stays in flight and keeps 2 in the maximal ISR (Kafka: `partitionState != proposedIsrState`),
    so the HW cannot pass 2's LEO before the controller commits 2."""
    nodes = cluster(replicas=(1, 2, 3), isr=(1,))
    leader = nodes[1]
    produce(leader, [b"a", b"b"], T0, acks=1)
    replicate(leader, nodes[3], T0 + 1)
    replicate(leader, nodes[3], T0 + 2)
    first = last_proposal(leader)
    assert first.new_isr == (1, 3)
    leader.apply(leader.partition.make_leader(0, first.partition_epoch + 1, (1, 2, 3), (1, 3), T0 + 3))
    replicate(leader, nodes[2], T0 + 4)
    replicate(leader, nodes[2], T0 + 5)
    pending = last_proposal(leader)
    assert pending.new_isr == (1, 2, 3) and leader.partition.isr_state.inflight
    late = AlterPartitionResponse(
        topic="orders", partition=0, error=ErrorCode.NONE, leader=1, leader_epoch=0, isr=(1, 3), partition_epoch=1
    )
    leader.apply(leader.partition.on_alter_partition_response(first, late, T0 + 6))
    assert leader.partition.isr_state.inflight and leader.partition.isr_state.maximal_isr == {1, 2, 3}


def test_a_follower_whose_log_ends_inside_the_leaders_batch_cuts_back_to_it_and_rejoins() -> None:
    """Given a follower whose log ends at 3 inside the leader's batch [2..4] (its own batches were [0..1] and
    [2..2]: a legacy truncation to its HW left it there), when the leader answers its fetch from 3 with that batch,
    then the follower cuts its log back to the batch's start (whole batches: to 2) instead of dropping the answer
    round after round, and its next fetch from 2 takes the batch whole."""
    leader, follower = MemoryReplica.create(1), MemoryReplica.create(2)
    for node in (leader, follower):
        node.partition.broker_epochs = {1: 101, 2: 102}
    leader.apply(leader.partition.make_leader(0, 0, (1, 2), (1,), T0))
    follower.apply(follower.partition.make_follower(1, 0, 0, (1, 2), (1,)))
    produce(leader, [b"a", b"b"], T0, acks=1)
    produce(leader, [b"c", b"d", b"e"], T0, acks=1)
    replicate(leader, follower, T0 + 1, max_bytes=1)  # one batch: [0..1]
    assert follower.leo == 2
    # The follower's own log gains a batch [2..2] the leader never had (a divergent, legacy-truncated tail).
    stray = encode_batch([b"stray"], timestamps=T0)
    follower.log.append(_stamp(stray, 2, 0))
    follower.partition.log_end_offset = 3
    fetch = follower.partition.fetch_partition()
    (answer,) = leader.apply(leader.partition.on_fetch(2, -1, fetch, T0 + 2))
    assert [h.base_offset for _, h in iter_batch_headers(answer.records)] == [2]
    deliver(follower, 1, answer, T0 + 2)
    assert follower.leo == 2 and follower.log.records() == [(0, b"a"), (1, b"b")]
    truncated = [e for e in follower.events if isinstance(e, LogTruncated)]
    assert truncated[-1].reason == "realignment" and truncated[-1].truncated_to == 2
    replicate(leader, follower, T0 + 3)
    assert follower.log.records() == leader.log.records()


def test_an_empty_follower_starting_inside_the_leaders_batch_restarts_at_it() -> None:
    """Kafka's appendRecordsToFollowerOrFutureReplica: an empty log whose start falls inside the leader's first
    batch (the leader's log start offset was inside a batch) restarts at the batch's base and appends it whole."""
    leader, follower = MemoryReplica.create(1), MemoryReplica.create(2)
    for node in (leader, follower):
        node.partition.broker_epochs = {1: 101, 2: 102}
    leader.apply(leader.partition.make_leader(0, 0, (1, 2), (1,), T0))
    produce(leader, [b"a", b"b", b"c"], T0, acks=1)
    follower.partition.log_start_offset = follower.partition.log_end_offset = follower.partition.high_watermark = 1
    follower.log = type(follower.log)(start_offset=1)
    follower.apply(follower.partition.make_follower(1, 0, 0, (1, 2), (1,)))
    replicate(leader, follower, T0 + 1)
    assert follower.partition.log_start_offset == 0 and follower.log.records() == leader.log.records()


def test_a_follower_that_stopped_fetching_stops_holding_the_high_watermark_after_the_lag() -> None:
    """Given follower 3 outside the ISR but caught up a moment ago (so it holds the HW, Kafka's
    shouldWaitForReplicaToJoinIsr), when it stops fetching, then once replica.lag.time.max.ms has passed the
    leader's periodic check moves the HW past it: a waiting acks=all produce is not held for good."""
    nodes = cluster(replicas=(1, 2, 3), isr=(1, 2))
    leader = nodes[1]
    replicate(leader, nodes[3], T0 + 1)  # caught up (LEO 0 == leader LEO 0) at T0 + 1: proposed to join
    refused = AlterPartitionResponse(topic="orders", partition=0, error=ErrorCode.INELIGIBLE_REPLICA)
    leader.apply(leader.partition.on_alter_partition_response(last_proposal(leader), refused, T0 + 1))
    assert not leader.partition.isr_state.inflight and leader.partition.isr == {1, 2}
    produce(leader, [b"a"], T0 + 2, acks=-1)
    replicate(leader, nodes[2], T0 + 3)
    replicate(leader, nodes[2], T0 + 4)
    assert leader.hw == 0, "follower 3 was caught up a moment ago: it holds the HW"
    leader.apply(leader.partition.tick(T0 + LAG_MS + 2))
    assert leader.hw == 1
    assert [c.error for c in leader.completed] == [ErrorCode.NONE]


# -- log compaction (issue 13) -------------------------------------------------------------------------------------


def test_a_follower_takes_a_compacted_leaders_gap_only_in_the_answer_to_a_fetch_from_its_log_end_offset() -> None:
    """Given a follower at LEO 0 whose leader compacted offsets 0..4 away, when it fetches from 0 and the answer
    starts at offset 5, then it appends the batch (LEO 7): the gap is compaction's, not a stale answer. A later
    answer beyond its LEO to a fetch from another offset (an older fetch) is dropped, as before."""
    nodes = cluster((1, 2))
    follower = nodes[2]
    compacted = encode_batch([b"a", b"b"], keys=[b"k", b"j"], base_offset=5, partition_leader_epoch=0, timestamps=T0)

    def answer(records: bytes) -> FetchPartitionResponse:
        return FetchPartitionResponse(
            topic="orders", partition=0, error=0, high_watermark=7, log_start_offset=0, log_end_offset=7,
            records=records,
        )  # fmt: skip

    assert follower.partition.fetch_partition().fetch_offset == 0
    deliver(follower, 1, answer(compacted), T0)
    assert follower.partition.log_end_offset == 7
    assert follower.log.records() == [(5, b"a"), (6, b"b")]
    stale = encode_batch([b"c"], keys=[b"k"], base_offset=9, partition_leader_epoch=0, timestamps=T0)
    deliver(follower, 1, answer(stale), T0)  # its last fetch was from 0, not from 7
    assert follower.partition.log_end_offset == 7
