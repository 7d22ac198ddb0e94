"""The replica core announces every change of its offsets and epoch cache, including those the shell drives.

Method: given a core over a memory log (tests/support/memory_replica.py), when it is opened, led, deleted, has
its log start moved, or drops an epoch it led without writing, then it emits the event the rebuild needs, and the
rebuild of everything it emitted is its state.
"""

from __future__ import annotations

from hightide.audit.rebuild import ReplicaState, rebuild
from hightide.core.effects import Emit, WriteEpochCheckpoint
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.errors import ErrorCode
from hightide.protocol.wire import FetchPartitionResponse
from support.memory_replica import MemoryReplica, produce

T0 = 1_000


def _history(replica: MemoryReplica) -> list[Envelope]:
    emitter = Emitter("broker", replica.broker_id, "one")
    return [Envelope("test", emitter, i, T0 + i, i, event) for i, event in enumerate(replica.events)]


def _state(replica: MemoryReplica) -> ReplicaState:
    core = replica.partition
    entries = tuple((e.epoch, e.start_offset) for e in core.epoch_cache.entries)
    return ReplicaState(core.log_end_offset, core.high_watermark, core.log_start_offset, entries)


def _leader_alone() -> MemoryReplica:
    leader = MemoryReplica.create(1)
    leader.apply(leader.partition.log_opened("created"))
    leader.apply(leader.partition.make_leader(0, 0, (1,), (1,), T0))
    return leader


def test_an_opened_replica_announces_what_it_starts_from() -> None:
    leader = _leader_alone()
    assert leader.events[0] == events.LogOpened(
        topic="orders",
        partition=0,
        replica=1,
        log_start_offset=0,
        log_end_offset=0,
        high_watermark=0,
        leader_epochs=(),
        reason="created",
    )


def test_a_moved_log_start_cuts_the_epoch_cache_and_is_announced_once() -> None:
    """Given a leader with epochs 0 at 0 and 1 at 4 and HW 7, when retention moves its log start to 5, then the
    cache holds (1, 5), the checkpoint is rewritten and LogStartOffsetAdvanced says 5; moving it to 5 again or
    lower says nothing."""
    leader = _leader_alone()
    produce(leader, [b"a"] * 4, T0)
    leader.apply(leader.partition.make_leader(1, 1, (1,), (1,), T0))
    produce(leader, [b"b"] * 3, T0)
    effects = leader.partition.advance_log_start_offset(5, "retention")
    assert effects == [
        WriteEpochCheckpoint("orders", 0, ((1, 5),)),
        Emit(
            events.LogStartOffsetAdvanced(
                topic="orders", partition=0, replica=1, log_start_offset=5, reason="retention"
            )
        ),
    ]
    leader.apply(effects)
    assert leader.partition.advance_log_start_offset(5, "retention") == []
    assert leader.partition.advance_log_start_offset(3, "retention") == []
    state = rebuild(_history(leader))
    assert state.replicas[("orders", 0, 1)] == _state(leader) == ReplicaState(7, 7, 5, ((1, 5),))
    assert state.anomalies == ()


def test_an_epoch_led_without_writing_is_dropped_with_an_event_when_the_leader_says_it_diverged() -> None:
    """Given broker 1 that led epoch 1 from LEO 3 without writing in it, when it follows broker 2 in epoch 2 and
    its fetch (last fetched epoch 1) is answered that the logs diverge after epoch 0, which ends at 3, then its log
    stays and (1, 3) leaves its cache, with LeaderEpochsTruncated saying so."""
    replica = _leader_alone()
    produce(replica, [b"a"] * 3, T0)
    replica.apply(replica.partition.make_leader(1, 1, (1, 2), (1,), T0))
    replica.apply(replica.partition.make_follower(2, 2, 2, (1, 2), (2,)))
    answer = FetchPartitionResponse(
        topic="orders", partition=0, error=ErrorCode.NONE, high_watermark=3, diverging_epoch=0, diverging_end_offset=3
    )
    replica.apply(replica.partition.on_fetch_response(2, answer, (), T0))
    assert replica.events[-1] == events.LeaderEpochsTruncated(topic="orders", partition=0, replica=1, end_offset=3)
    assert replica.partition.log_end_offset == 3
    state = rebuild(_history(replica))
    assert state.replicas[("orders", 0, 1)] == _state(replica) == ReplicaState(3, 3, 0, ((0, 0),))
    assert state.anomalies == ()


def test_a_deleted_replica_says_so_and_leaves_no_state() -> None:
    leader = _leader_alone()
    produce(leader, [b"a"] * 2, T0)
    leader.apply(leader.partition.log_deleted("topic_deleted"))
    assert leader.events[-1] == events.LogDeleted(
        topic="orders", partition=0, replica=1, log_end_offset=2, reason="topic_deleted"
    )
    assert rebuild(_history(leader)).replicas == {}
