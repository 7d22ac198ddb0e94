"""A follower cuts its log where it parted from the leader's, never later and never earlier.

Method: walkthroughs with two replicas. A test-only `Replica` is a log of (value, epoch) records plus its
`LeaderEpochCache`, stamped as Kafka's UnifiedLog stamps it (each append assigns the record's epoch at its
offset, a new leader assigns its epoch at its log end offset, a truncation cuts the cache from the end). The
leader answers with `check_fetch_divergence` (Fetch v12) or `offsets_for_leader_epoch`, the follower decides with
`offset_truncation_state` and cuts, round after round, until the leader reports no divergence; each test asserts
every cut and every `last_fetched_epoch` the reference's worked traces give (§3.3: trace 1 is Kafka's
AbstractFetcherThreadTest.testDivergingEpochs, trace 2 its testTruncation), and that the logs end up equal.
Then the two KIP-101 scenarios of the seed (message loss; divergent logs), each with the pre-KIP-101 rule
(`legacy_truncate_to_high_watermark`), which reproduces the bug, and with epochs, which does not. Last, each
branch of the decision and of the leader's checks on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pytest

from hightide.core.epoch_cache import UNDEFINED_EPOCH, EpochEndOffset, EpochEntry, LeaderEpochCache
from hightide.core.truncation import (
    DivergenceCheck,
    TruncationDecision,
    check_current_leader_epoch,
    check_fetch_divergence,
    legacy_truncate_to_high_watermark,
    offset_truncation_state,
    offsets_for_leader_epoch,
)
from hightide.protocol.errors import ErrorCode

ROUNDS_MAX = 8  # a cut per epoch at most: far more than any trace here needs


@dataclass
class Replica:
    """One replica's log, as far as truncation cares: records (value, leader epoch) and the epoch cache."""

    records: list[tuple[str, int]] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    high_watermark: int = 0

    @classmethod
    def with_log(cls, *records: tuple[str, int], high_watermark: int = 0) -> Replica:
        replica = cls(high_watermark=high_watermark)
        for value, epoch in records:
            replica.append(value, epoch)
        return replica

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def last_fetched_epoch(self) -> int:
        """What the next Fetch carries: the latest epoch in the log, or -1 for none (Kafka's latestEpoch)."""
        latest = self.cache.latest_epoch
        return UNDEFINED_EPOCH if latest is None else latest

    def append(self, value: str, epoch: int) -> None:
        """UnifiedLog.append: the batch's epoch is assigned at its base offset."""
        self.cache.assign(epoch, self.log_end_offset)
        self.records.append((value, epoch))

    def become_leader(self, epoch: int) -> None:
        """Partition.makeLeader: the new epoch starts at the log end offset, before any record is written."""
        self.cache.assign(epoch, self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        """UnifiedLog.truncateTo."""
        if offset >= self.log_end_offset:
            self.cache.truncate_from_end(self.log_end_offset)
            return
        del self.records[offset:]
        self.cache.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, offset)

    def fetch_from(self, leader: Replica) -> None:
        """Append what the leader has beyond our log end, as a fetch with no divergence would."""
        for value, epoch in leader.records[self.log_end_offset :]:
            self.append(value, epoch)


class Round(NamedTuple):
    """One fetch that the leader answered with a diverging epoch, and the follower's cut."""

    fetch_offset: int
    last_fetched_epoch: int
    diverging: EpochEndOffset
    decision: TruncationDecision
    last_fetched_epoch_after: int


def fetch_until_in_sync(leader: Replica, follower: Replica, leader_epoch: int) -> list[Round]:
    """Truncation on fetch (IBP >= 2.7): fetch at the log end with the latest epoch until nothing diverges."""
    rounds: list[Round] = []
    for _ in range(ROUNDS_MAX):
        fetch_offset, last_fetched_epoch = follower.log_end_offset, follower.last_fetched_epoch
        check = check_fetch_divergence(
            leader.cache,
            leader_log_end_offset=leader.log_end_offset,
            leader_log_start_offset=0,
            leader_epoch=leader_epoch,
            current_leader_epoch=leader_epoch,
            fetch_offset=fetch_offset,
            last_fetched_epoch=last_fetched_epoch,
        )
        assert check.error is ErrorCode.NONE
        if check.diverging is None:
            follower.fetch_from(leader)
            return rounds
        decision = offset_truncation_state(
            check.diverging, follower.cache, follower.log_end_offset, follower.high_watermark
        )
        follower.truncate_to(decision.truncate_to)
        rounds.append(Round(fetch_offset, last_fetched_epoch, check.diverging, decision, follower.last_fetched_epoch))
    pytest.fail(f"no agreement after {ROUNDS_MAX} fetches: {rounds}")


def truncate_via_offsets_for_leader_epoch(
    leader: Replica, follower: Replica, leader_epoch: int
) -> list[TruncationDecision]:
    """The Truncating state (IBP < 2.7): OffsetsForLeaderEpoch with the latest epoch until a decision completes."""
    decisions: list[TruncationDecision] = []
    for _ in range(ROUNDS_MAX):
        error, answer = offsets_for_leader_epoch(
            leader.cache,
            leader_log_end_offset=leader.log_end_offset,
            leader_epoch=leader_epoch,
            current_leader_epoch=leader_epoch,
            requested_epoch=follower.last_fetched_epoch,
        )
        assert error is ErrorCode.NONE
        decision = offset_truncation_state(answer, follower.cache, follower.log_end_offset, follower.high_watermark)
        follower.truncate_to(decision.truncate_to)
        decisions.append(decision)
        if decision.completed:
            return decisions
    pytest.fail(f"no completed truncation after {ROUNDS_MAX} requests: {decisions}")


# The reference's worked traces (§3.3)


def test_trace_1_the_follower_cuts_the_epoch_the_leader_never_had() -> None:
    """Given a follower with records in epochs 0, 2, 4 (cache {0:0, 2:1, 4:2}, LEO 3) and a leader at epoch 5
    whose offset 2 was written in epoch 5, when the follower fetches offset 3 with last fetched epoch 4, then the
    leader's epoch 4 ends at (2, 2), the follower cuts to 2 and its last fetched epoch becomes 2; the next fetch
    (2, epoch 2) does not diverge, and after it the last fetched epoch is 5."""
    follower = Replica.with_log(("m0", 0), ("m1", 2), ("f2", 4))
    leader = Replica.with_log(("m0", 0), ("m1", 2), ("l2", 5))
    assert follower.cache.entries == (EpochEntry(0, 0), EpochEntry(2, 1), EpochEntry(4, 2))
    assert follower.last_fetched_epoch == 4

    rounds = fetch_until_in_sync(leader, follower, leader_epoch=5)

    assert rounds == [Round(3, 4, EpochEndOffset(2, 2), TruncationDecision(2, completed=True), 2)]
    assert follower.last_fetched_epoch == 5
    assert follower.records == leader.records
    assert follower.cache.entries == leader.cache.entries


def test_trace_2_no_common_epoch_but_0_and_the_follower_walks_back_one_epoch_per_fetch() -> None:
    """Given a follower in epochs 0, 2, 4 and a leader in epochs 1, 3, 5 (LEO 3 each), the follower's cuts are
    2 (incomplete, epoch 3 unknown to it), 1 (incomplete, epoch 1 unknown), then 0 (complete: epoch 0 is
    shared but the leader has no record in it); its last fetched epoch goes 4, 2, 0, none, and the fetch from 0
    with no epoch replicates the leader's log."""
    follower = Replica.with_log(("f0", 0), ("f1", 2), ("f2", 4))
    leader = Replica.with_log(("l0", 1), ("l1", 3), ("l2", 5))

    rounds = fetch_until_in_sync(leader, follower, leader_epoch=5)

    assert rounds == [
        Round(3, 4, EpochEndOffset(3, 2), TruncationDecision(2, completed=False), 2),
        Round(2, 2, EpochEndOffset(1, 1), TruncationDecision(1, completed=False), 0),
        Round(1, 0, EpochEndOffset(0, 0), TruncationDecision(0, completed=True), UNDEFINED_EPOCH),
    ]
    assert follower.records == leader.records
    assert follower.cache.entries == (EpochEntry(1, 0), EpochEntry(3, 1), EpochEntry(5, 2))


def test_trace_2_through_offsets_for_leader_epoch_makes_the_same_cuts() -> None:
    """The same logs with the older protocol (KIP-279): OffsetsForLeaderEpoch for epochs 4, 2, 0 in turn."""
    follower = Replica.with_log(("f0", 0), ("f1", 2), ("f2", 4))
    leader = Replica.with_log(("l0", 1), ("l1", 3), ("l2", 5))

    decisions = truncate_via_offsets_for_leader_epoch(leader, follower, leader_epoch=5)

    assert decisions == [
        TruncationDecision(2, completed=False),
        TruncationDecision(1, completed=False),
        TruncationDecision(0, completed=True),
    ]
    follower.fetch_from(leader)
    assert follower.records == leader.records


# KIP-101, the seed's two scenarios


def scenario_1() -> tuple[Replica, Replica]:
    """Leader B and follower A in epoch 0 both hold m1, m2. A's fetch of m2 let B's high watermark reach 2 (m2 is
    committed), but A restarts before the next fetch would have told it so: its own high watermark is still 1."""
    leader_b = Replica.with_log(("m1", 0), ("m2", 0), high_watermark=2)
    follower_a = Replica.with_log(("m1", 0), ("m2", 0), high_watermark=1)
    return leader_b, follower_a


def test_kip_101_scenario_1_truncating_to_the_high_watermark_loses_a_committed_message() -> None:
    """When A restarts it cuts to its high watermark 1; then B dies and A is elected: committed m2 is gone."""
    leader_b, follower_a = scenario_1()
    committed = leader_b.high_watermark

    decision = legacy_truncate_to_high_watermark(follower_a.high_watermark, follower_a.log_end_offset)
    follower_a.truncate_to(decision.truncate_to)
    follower_a.become_leader(1)

    assert decision == TruncationDecision(1, completed=True)
    assert follower_a.log_end_offset < committed
    assert follower_a.records == [("m1", 0)]


def test_kip_101_scenario_1_with_epochs_the_follower_keeps_the_message() -> None:
    """When A restarts it asks B where epoch 0 ends: B's latest epoch, so its LEO 2; A keeps m2 and, elected
    after B dies, has every committed message."""
    leader_b, follower_a = scenario_1()

    error, answer = offsets_for_leader_epoch(
        leader_b.cache, leader_b.log_end_offset, leader_epoch=0, current_leader_epoch=0, requested_epoch=0
    )
    decision = offset_truncation_state(answer, follower_a.cache, follower_a.log_end_offset, follower_a.high_watermark)
    follower_a.truncate_to(decision.truncate_to)
    follower_a.become_leader(1)

    assert (error, answer) == (ErrorCode.NONE, EpochEndOffset(0, 2))
    assert decision == TruncationDecision(2, completed=True)
    assert follower_a.records == [("m1", 0), ("m2", 0)]
    assert follower_a.cache.entries == (EpochEntry(0, 0), EpochEntry(1, 2))


def scenario_2() -> tuple[Replica, Replica]:
    """A led epoch 0 with m1, m2 (high watermark 2) while B was fetching m2; power fails and both crash. B comes
    back first without m2 (flushes are asynchronous), is elected for epoch 1 and takes m3 at offset 1. A comes
    back as a follower with m1, m2 and high watermark 2."""
    replica_b = Replica.with_log(("m1", 0), high_watermark=1)
    replica_b.become_leader(1)
    replica_b.append("m3", 1)
    replica_b.high_watermark = 2
    replica_a = Replica.with_log(("m1", 0), ("m2", 0), high_watermark=2)
    return replica_b, replica_a


def test_kip_101_scenario_2_truncating_to_the_high_watermark_leaves_the_logs_divergent() -> None:
    """A's high watermark equals its LEO, so it cuts nothing and fetches from 2: offset 1 stays m2 on A and m3 on
    B, for good (B's next record lands after it on both)."""
    leader_b, follower_a = scenario_2()

    decision = legacy_truncate_to_high_watermark(follower_a.high_watermark, follower_a.log_end_offset)
    follower_a.truncate_to(decision.truncate_to)
    leader_b.append("m4", 1)
    follower_a.fetch_from(leader_b)

    assert decision == TruncationDecision(2, completed=True)
    assert follower_a.records == [("m1", 0), ("m2", 0), ("m4", 1)]
    assert leader_b.records == [("m1", 0), ("m3", 1), ("m4", 1)]
    assert follower_a.cache.epoch_for_offset(1) == 0
    assert leader_b.cache.epoch_for_offset(1) == 1


def test_kip_101_scenario_2_with_epochs_the_follower_drops_m2_and_takes_m3() -> None:
    """A fetches offset 2 with last fetched epoch 0; B's epoch 0 ended at 1 (where epoch 1 starts), so A cuts to 1
    (below its own high watermark: m2 was lost with B's unflushed tail) and then replicates m3."""
    leader_b, follower_a = scenario_2()

    rounds = fetch_until_in_sync(leader_b, follower_a, leader_epoch=1)

    assert rounds == [Round(2, 0, EpochEndOffset(0, 1), TruncationDecision(1, completed=True), 0)]
    assert follower_a.records == leader_b.records == [("m1", 0), ("m3", 1)]
    assert follower_a.cache.entries == leader_b.cache.entries == (EpochEntry(0, 0), EpochEntry(1, 1))


# offset_truncation_state, branch by branch (getOffsetTruncationState)


@pytest.mark.parametrize(
    ("leader", "follower_entries", "expected"),
    [
        # The leader does not know the epoch: fall back to the high watermark (1).
        (EpochEndOffset(-1, -1), [(0, 0), (2, 1), (4, 2)], TruncationDecision(1, completed=True)),
        # OffsetsForLeaderEpoch v0: an offset without an epoch, capped at the follower's LEO.
        (EpochEndOffset(-1, 2), [(0, 0), (2, 1), (4, 2)], TruncationDecision(2, completed=True)),
        (EpochEndOffset(-1, 5), [(0, 0), (2, 1), (4, 2)], TruncationDecision(3, completed=True)),
        # The follower knows no epoch at or below the leader's: cut to the leader's offset.
        (EpochEndOffset(6, 2), [(0, 0), (2, 1), (4, 2)], TruncationDecision(2, completed=True)),
        (EpochEndOffset(3, 2), [], TruncationDecision(2, completed=True)),
        # The follower's largest epoch <= 3 is 2: cut to its end and ask again (KIP-279).
        (EpochEndOffset(3, 2), [(0, 0), (2, 1), (4, 2)], TruncationDecision(2, completed=False)),
        (EpochEndOffset(1, 1), [(0, 0), (2, 1)], TruncationDecision(1, completed=False)),
        # Same epoch on both: the smaller end wins.
        (EpochEndOffset(2, 5), [(0, 0), (2, 1), (4, 2)], TruncationDecision(2, completed=True)),
        (EpochEndOffset(4, 2), [(0, 0), (2, 1), (4, 2)], TruncationDecision(2, completed=True)),
        (EpochEndOffset(4, 9), [(0, 0), (2, 1), (4, 2)], TruncationDecision(3, completed=True)),
        # An epoch older than the follower's first comes back as itself, ending where the first starts.
        (EpochEndOffset(1, 3), [(2, 1), (4, 2)], TruncationDecision(1, completed=True)),
    ],
)
def test_offset_truncation_state(
    leader: EpochEndOffset, follower_entries: list[tuple[int, int]], expected: TruncationDecision
) -> None:
    """Given a follower with LEO 3 and high watermark 1."""
    follower_cache = LeaderEpochCache(EpochEntry(*entry) for entry in follower_entries)
    assert offset_truncation_state(leader, follower_cache, follower_log_end_offset=3, follower_high_watermark=1) == (
        expected
    )


def test_legacy_truncation_is_always_to_the_high_watermark() -> None:
    assert legacy_truncate_to_high_watermark(follower_high_watermark=4, follower_log_end_offset=9) == (4, True)
    assert legacy_truncate_to_high_watermark(follower_high_watermark=9, follower_log_end_offset=9) == (9, True)


# The leader's checks


def leader_cache() -> LeaderEpochCache:
    """The leader of trace 1: epochs 0, 2, 5 starting at 0, 1, 2; its LEO is 3."""
    return LeaderEpochCache([EpochEntry(0, 0), EpochEntry(2, 1), EpochEntry(5, 2)])


def fetch(
    fetch_offset: int, last_fetched_epoch: int, current_leader_epoch: int = 5, log_start_offset: int = 0
) -> DivergenceCheck:
    return check_fetch_divergence(
        leader_cache(),
        leader_log_end_offset=3,
        leader_log_start_offset=log_start_offset,
        leader_epoch=5,
        current_leader_epoch=current_leader_epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
    )


@pytest.mark.parametrize(
    ("request_epoch", "expected"),
    [
        (4, ErrorCode.FENCED_LEADER_EPOCH),
        (6, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (5, ErrorCode.NONE),
        (-1, ErrorCode.NONE),
    ],
)
def test_the_current_leader_epoch_fence(request_epoch: int, expected: ErrorCode) -> None:
    assert check_current_leader_epoch(request_epoch, leader_epoch=5) is expected
    assert fetch(3, 5, current_leader_epoch=request_epoch).error is expected
    error, answer = offsets_for_leader_epoch(leader_cache(), 3, 5, request_epoch, requested_epoch=2)
    assert error is expected
    assert answer == (EpochEndOffset(2, 2) if expected is ErrorCode.NONE else EpochEndOffset(-1, -1))


def test_a_fetch_with_any_negative_current_leader_epoch_is_not_fenced() -> None:
    """FetchRequest reads every negative epoch as absent."""
    assert fetch(3, 5, current_leader_epoch=-2) == DivergenceCheck(None, ErrorCode.NONE)


def test_a_fetch_without_a_last_fetched_epoch_is_not_checked_for_divergence() -> None:
    """Given the leader at LEO 3: offsets 0..3 are readable; 4 is out of range, as UnifiedLog.read says."""
    assert [fetch(offset, UNDEFINED_EPOCH).error for offset in range(5)] == [ErrorCode.NONE] * 4 + [
        ErrorCode.OFFSET_OUT_OF_RANGE
    ]
    assert all(fetch(offset, UNDEFINED_EPOCH).diverging is None for offset in range(5))


@pytest.mark.parametrize(
    ("fetch_offset", "last_fetched_epoch", "expected"),
    [
        (3, 5, DivergenceCheck(None, ErrorCode.NONE)),  # caught up, in the leader's epoch
        (2, 2, DivergenceCheck(None, ErrorCode.NONE)),  # epoch 2 ends at 2 on the leader too
        (1, 0, DivergenceCheck(None, ErrorCode.NONE)),
        (2, 4, DivergenceCheck(EpochEndOffset(2, 2), ErrorCode.NONE)),  # epoch 4 unknown: 2 is the largest below
        (3, 4, DivergenceCheck(EpochEndOffset(2, 2), ErrorCode.NONE)),
        (2, 0, DivergenceCheck(EpochEndOffset(0, 1), ErrorCode.NONE)),  # epoch 0 ended before offset 2
        (4, 5, DivergenceCheck(EpochEndOffset(5, 3), ErrorCode.NONE)),  # a follower ahead of the leader's LEO
        (3, 6, DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)),  # an epoch above the leader's latest
    ],
)
def test_a_fetch_with_a_last_fetched_epoch(
    fetch_offset: int, last_fetched_epoch: int, expected: DivergenceCheck
) -> None:
    assert fetch(fetch_offset, last_fetched_epoch) == expected


def test_a_fetch_below_the_log_start_is_out_of_range_even_when_diverging() -> None:
    """Given the leader's log start at 2: offset 1 with epoch 4 would otherwise diverge (the leader answers (2, 2)
    for epoch 4) and offset 1 with epoch 0 would not; both are out of range, checked first."""
    assert fetch(1, 0, log_start_offset=2) == DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert fetch(1, 4, log_start_offset=2) == DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert fetch(1, UNDEFINED_EPOCH, log_start_offset=2) == DivergenceCheck(None, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert fetch(2, 2, log_start_offset=2) == DivergenceCheck(None, ErrorCode.NONE)


@pytest.mark.parametrize(
    ("requested_epoch", "expected"),
    [
        (5, EpochEndOffset(5, 3)),  # the leader's own epoch ends at its LEO
        (4, EpochEndOffset(2, 2)),
        (2, EpochEndOffset(2, 2)),
        (1, EpochEndOffset(0, 1)),
        (0, EpochEndOffset(0, 1)),
        (6, EpochEndOffset(-1, -1)),  # undefined: still error NONE
        (UNDEFINED_EPOCH, EpochEndOffset(-1, -1)),
    ],
)
def test_offsets_for_leader_epoch_answers(requested_epoch: int, expected: EpochEndOffset) -> None:
    assert offsets_for_leader_epoch(
        leader_cache(), leader_log_end_offset=3, leader_epoch=5, current_leader_epoch=5, requested_epoch=requested_epoch
    ) == (ErrorCode.NONE, expected)
