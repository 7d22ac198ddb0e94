"""The rebuild's rules against the broker's own, and its order against the order a history arrives in.

Method: hypothesis. (1) Random sequences of assign / truncate_from_end / truncate_from_start run on the audit's
epoch rules (`hightide.audit.epochs`, written from Kafka's LeaderEpochFileCache) and on the broker's cache
(`hightide.core.epoch_cache.LeaderEpochCache`, written separately from the same source): after every step the
entries must agree. (2) Random operations on one replica's core (appends in new epochs, HW moves, truncations
with and without records, log start moves, restarts that cut the tail) emit their events; the rebuild of those
events must be the core's state. (3) A simulated history, shuffled, split across incarnations' arrival and
duplicated, rebuilds the same state as in its emitters' order.
"""

from __future__ import annotations

import random
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.audit import epochs
from hightide.audit.rebuild import ClusterState, ReplicaState, rebuild
from hightide.core.effects import Emit, Truncate
from hightide.core.epoch_cache import EpochEntry, LeaderEpochCache
from hightide.core.partition import Partition, PartitionConfig
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import BatchHeader
from hightide.protocol.wire import FetchPartitionResponse
from simulation.simulator import Simulation

EPOCH_MAX = 12
OFFSET_MAX = 40

epoch_op = st.one_of(
    st.tuples(st.just("assign"), st.integers(0, EPOCH_MAX), st.integers(0, OFFSET_MAX)),
    st.tuples(st.just("truncate_from_end"), st.integers(-1, OFFSET_MAX), st.just(0)),
    st.tuples(st.just("truncate_from_start"), st.integers(-1, OFFSET_MAX), st.just(0)),
)


@given(st.lists(epoch_op, max_size=40))
def test_the_audits_epoch_rules_agree_with_the_brokers_cache(ops: list[tuple[str, int, int]]) -> None:
    cache = LeaderEpochCache()
    entries: epochs.EpochEntries = ()
    for name, a, b in ops:
        if name == "assign":
            cache.assign(a, b)
            entries = epochs.assign(entries, a, b)
        elif name == "truncate_from_end":
            cache.truncate_from_end(a)
            entries = epochs.truncate_from_end(entries, a)
        else:
            cache.truncate_from_start(a)
            entries = epochs.truncate_from_start(entries, a)
        assert entries == tuple((e.epoch, e.start_offset) for e in cache.entries), (name, a, b)
        assert epochs.is_well_formed(entries)


# -- one replica's core, driven at random ------------------------------------------------------------------------

replica_op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.booleans()),  # records, in a new epoch?
    st.tuples(st.just("follow_hw"), st.integers(0, 60), st.just(False)),  # the leader's HW in a fetch answer
    st.tuples(st.just("diverge"), st.integers(0, EPOCH_MAX), st.integers(0, 60)),  # diverging epoch, end offset
    st.tuples(st.just("retain"), st.integers(0, 60), st.just(False)),  # retention up to (at most the HW)
    st.tuples(st.just("restart"), st.integers(0, 60), st.just(False)),  # kill -9: the tail cut to at most this
)


class RecordedReplica:
    """A follower core of broker 1 whose shell is only its events (the log is the core's offsets)."""

    def __init__(self) -> None:
        self.history: list[Envelope] = []
        self.incarnation = 0
        self.now_ms = 1_000
        self.leader_epoch = 0
        self.core = self._new_core(0, 0, 0, LeaderEpochCache(), "created")

    def _new_core(self, lso: int, leo: int, hw: int, cache: LeaderEpochCache, reason: str) -> Partition:
        core = Partition("t", 0, 1, PartitionConfig(), lso, leo, hw, cache)
        self.emitter = Emitter("broker", 1, f"i{self.incarnation:04d}")
        self.sequence = 0
        self.record(core.log_opened(reason))
        self.record(core.make_follower(2, self.leader_epoch, self.leader_epoch, (1, 2), (1, 2)))
        return core

    def record(self, effects: list[object]) -> None:
        self.now_ms += 1
        for effect in effects:
            if isinstance(effect, Emit):
                envelope = Envelope("p", self.emitter, self.sequence, self.now_ms, self.sequence, effect.event)
                self.history.append(envelope)
                self.sequence += 1

    def apply(self, name: str, a: int, b: int | bool) -> None:
        core = self.core
        if name == "append":
            if b or core.epoch_cache.latest_epoch is None:
                self.leader_epoch += 1
                self.record(core.make_follower(2, self.leader_epoch, self.leader_epoch, (1, 2), (1, 2)))
            base = core.log_end_offset
            batch = _header(base, base + a - 1, self.leader_epoch)
            self.record(core.on_fetch_response(2, self._answer(hw=0, records=True), (batch,), self.now_ms))
        elif name == "follow_hw":
            self.record(core.on_fetch_response(2, self._answer(hw=a), (), self.now_ms))
        elif name == "diverge" and isinstance(b, int):
            effects = core.on_fetch_response(2, self._answer(hw=0, diverging=(a, b)), (), self.now_ms)
            assert all(not isinstance(e, Truncate) or e.offset >= 0 for e in effects)
            self.record(effects)
        elif name == "retain":
            self.record(core.advance_log_start_offset(min(a, core.high_watermark), "retention"))
        elif name == "restart":
            self.incarnation += 1
            leo = max(min(a, core.log_end_offset), core.log_start_offset)
            cache = LeaderEpochCache(EpochEntry(*e) for e in core.epoch_cache.entries)
            cache.truncate_from_end(leo)
            hw = max(min(core.high_watermark, leo), core.log_start_offset)
            self.core = self._new_core(core.log_start_offset, leo, hw, cache, "recovered")

    def _answer(self, hw: int, records: bool = False, diverging: tuple[int, int] = (-1, -1)) -> FetchPartitionResponse:
        return FetchPartitionResponse(
            topic="t",
            partition=0,
            error=ErrorCode.NONE,
            high_watermark=hw,
            log_start_offset=0,
            log_end_offset=60,
            diverging_epoch=diverging[0],
            diverging_end_offset=diverging[1],
            records=b"x" if records else b"",
        )

    def state(self) -> ReplicaState:
        core = self.core
        entries = tuple((e.epoch, e.start_offset) for e in core.epoch_cache.entries)
        return ReplicaState(core.log_end_offset, core.high_watermark, core.log_start_offset, entries)


@given(st.lists(replica_op, max_size=30))
def test_a_replicas_events_rebuild_its_core_whatever_it_went_through(ops: list[tuple[str, int, int | bool]]) -> None:
    replica = RecordedReplica()
    for op in ops:
        replica.apply(*op)
        state = rebuild(replica.history)
        assert state.replicas == {("t", 0, 1): replica.state()}, op
        assert state.anomalies == (), op


# -- the order a history arrives in ---------------------------------------------------------------------------


@cache
def _history(seed: int) -> tuple[tuple[Envelope, ...], ClusterState]:
    simulation = Simulation(seed)
    simulation.history = []
    simulation.run(1_000)
    return tuple(simulation.history), rebuild(simulation.history)


@settings(max_examples=25)
@given(st.sampled_from([2, 4]), st.integers(0, 2**32), st.floats(0.0, 0.2))
def test_a_history_rebuilds_the_same_in_any_arrival_order_with_duplicates(
    seed: int, shuffle_seed: int, duplicated: float
) -> None:
    history, expected = _history(seed)
    shuffler = random.Random(shuffle_seed)
    arrived = list(history) + [e for e in history if shuffler.random() < duplicated]
    shuffler.shuffle(arrived)
    assert rebuild(arrived) == expected


def _header(base: int, last: int, leader_epoch: int) -> BatchHeader:
    """The header a follower's validation would return for a batch of offsets [base, last] (the core reads only
    the offsets, the leader epoch and the producer fields, none here)."""
    count = last - base + 1
    return BatchHeader(base, 49 + count, leader_epoch, 2, 0, 0, count - 1, 0, 0, -1, -1, -1, count)
