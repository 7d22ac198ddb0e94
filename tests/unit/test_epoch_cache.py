"""The leader epoch cache answers and changes as Kafka's LeaderEpochFileCache does.

Method: Kafka's own vectors. Each test builds a cache with the `assign` calls of a test in Kafka's
LeaderEpochFileCacheTest (named in the test's docstring), or of LogSegmentTest.testRecoveryRebuildsEpochCache,
and asserts the values those tests assert (the VERIFIED-TEST rows of §3.1 of the reference). Then the parts Kafka
leaves to its checkpoint file: which calls report a change, and what a cache loaded from entries accepts.
"""

from __future__ import annotations

import pytest

from hightide.core.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_of(*assigns: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for epoch, start_offset in assigns:
        cache.assign(epoch, start_offset)
    return cache


def three_epochs() -> LeaderEpochCache:
    """{2:6, 3:8, 4:11}: the cache of Kafka's truncation tests."""
    return cache_of((2, 6), (3, 8), (4, 11))


# endOffsetFor


def test_the_latest_epoch_ends_at_the_log_end_offset() -> None:
    """shouldAddEpochAndMessageOffsetToCache: given assign(2, 10) and LEO 11, epoch 2 ends at 11."""
    cache = cache_of((2, 10))
    assert cache.latest_epoch == 2
    assert cache.entries == (EpochEntry(2, 10),)
    assert cache.end_offset_for(2, 11) == EpochEndOffset(2, 11)


def test_a_later_start_for_the_latest_epoch_changes_nothing() -> None:
    """shouldReturnLogEndOffsetIfLatestEpochRequested: assign(2, 11), assign(2, 12), LEO 14 -> (2, 14)."""
    cache = cache_of((2, 11), (2, 12))
    assert cache.end_offset_for(2, 14) == EpochEndOffset(2, 14)
    assert cache.entries == (EpochEntry(2, 11),)


def test_the_undefined_epoch_is_undefined_in_any_cache() -> None:
    """shouldReturnUndefinedOffsetIfUndefinedEpochRequested / ...IfNoEpochRecordedAndUndefinedEpochRequested."""
    assert cache_of((2, 11), (3, 12)).end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    assert UNDEFINED_EPOCH_END_OFFSET == UNDEFINED == (-1, -1)


def test_an_empty_cache_knows_no_epoch() -> None:
    """shouldReturnUnsupportedIfNoEpochRecorded / shouldFetchEndOffsetOfEmptyCache."""
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(7, 0) == UNDEFINED
    assert LeaderEpochCache().latest_epoch is None


def test_an_epoch_below_every_cached_one_ends_where_the_first_one_starts() -> None:
    """shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch: {5:11, 6:12, 7:13}, epoch 4 -> (4, 11).

    The requested epoch comes back, not a cached one: the follower then sees its own epoch and cuts there.
    """
    assert cache_of((5, 11), (6, 12), (7, 13)).end_offset_for(4, 0) == EpochEndOffset(4, 11)


def test_an_earlier_start_for_the_latest_epoch_drops_the_epochs_it_overlaps() -> None:
    """shouldTruncateIfMatchingEpochButEarlierStartingOffset: {5:11, 6:12, 7:13} then assign(7, 12)."""
    cache = cache_of((5, 11), (6, 12), (7, 13))
    assert cache.assign(7, 12) is True
    assert cache.entries == (EpochEntry(5, 11), EpochEntry(7, 12))
    assert cache.end_offset_for(5, 0) == EpochEndOffset(5, 12)
    assert cache.end_offset_for(6, 0) == EpochEndOffset(5, 12)


def test_an_earlier_epoch_ends_where_the_next_one_starts() -> None:
    """shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch: epoch 2 ends at 15."""
    cache = cache_of((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert cache.entries == (EpochEntry(1, 11), EpochEntry(2, 13), EpochEntry(3, 15))
    assert cache.end_offset_for(2, 17) == EpochEndOffset(2, 15)


def test_an_epoch_missing_between_two_cached_ones_answers_for_the_one_below() -> None:
    """shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested: {0:10, 2:13, 4:17}."""
    cache = cache_of((0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 20) == EpochEndOffset(0, 13)
    assert cache.end_offset_for(2, 20) == EpochEndOffset(2, 17)
    assert cache.end_offset_for(3, 20) == EpochEndOffset(2, 17)


def test_an_epoch_above_the_latest_is_undefined() -> None:
    """shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked: {2:100}, epoch 3, LEO 100."""
    assert cache_of((2, 100)).end_offset_for(3, 100) == UNDEFINED


def test_an_epoch_from_the_past_with_a_later_offset_drops_the_epochs_after_it() -> None:
    """shouldEnforceMonotonicallyIncreasingEpochs: {1:5, 2:6} then assign(1, 7), LEO 8."""
    cache = cache_of((1, 5), (2, 6))
    assert cache.assign(1, 7) is True
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == EpochEndOffset(1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert cache.entries == (EpochEntry(1, 7),)


def test_epochs_tracked_as_leaders_change_many_times() -> None:
    """shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes: elections at offsets 0, 0 and 5.

    Epochs 0 and 1 both start at 0 (no record in epoch 0), so epoch 1 replaces epoch 0, and epoch 0 then
    ends where epoch 1 starts: (0, 0), as Kafka asserts.
    """
    cache = cache_of((0, 0), (1, 0))
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 0) == EpochEndOffset(1, 0)
    assert cache.end_offset_for(0, 0) == EpochEndOffset(0, 0)
    assert cache.end_offset_for(1, 5) == EpochEndOffset(1, 5)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == EpochEndOffset(2, 10)
    assert cache.end_offset_for(1, 10) == EpochEndOffset(1, 5)
    assert cache.end_offset_for(0, 10) == EpochEndOffset(0, 0)


def test_epochs_tracked_as_a_follower_receives_many_messages() -> None:
    """shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages: one assign per appended record."""
    cache = LeaderEpochCache()
    for offset in range(9):
        cache.assign(offset // 3, offset)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(1, 3), EpochEntry(2, 6))
    assert cache.end_offset_for(2, 9) == EpochEndOffset(2, 9)
    assert cache.end_offset_for(0, 9) == EpochEndOffset(0, 3)
    assert cache.end_offset_for(1, 9) == EpochEndOffset(1, 6)


# assign


def test_an_epoch_is_assigned_once() -> None:
    """shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned / ...OffsetForALeaderEpoch...:
    (2, 9) then (2, 10) keeps (2, 9); (2, 6) then (2, 10) keeps (2, 6); and the caller is told nothing changed."""
    cache = cache_of((2, 9))
    assert cache.assign(2, 10) is False
    assert cache.entries == (EpochEntry(2, 9),)
    cache = cache_of((2, 6))
    assert cache.assign(2, 10) is False
    assert cache.assign(2, 6) is False
    assert cache.entries == (EpochEntry(2, 6),)


def test_a_new_epoch_at_the_same_offset_replaces_the_old_one() -> None:
    """shouldEnforceMonotonicallyIncreasingStartOffsets: (2, 9) then (3, 9) -> [(3, 9)]."""
    cache = cache_of((2, 9))
    assert cache.assign(3, 9) is True
    assert cache.entries == (EpochEntry(3, 9),)


def test_a_new_epoch_at_an_earlier_offset_wins() -> None:
    """shouldEnforceOffsetsIncreaseMonotonically: (2, 6) then (3, 5) -> [(3, 5)]."""
    cache = cache_of((2, 6))
    assert cache.assign(3, 5) is True
    assert cache.entries == (EpochEntry(3, 5),)


@pytest.mark.parametrize(("epoch", "start_offset"), [(-1, 0), (0, -1), (-5, -5)])
def test_a_negative_epoch_or_offset_is_refused(epoch: int, start_offset: int) -> None:
    cache = cache_of((2, 6))
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(epoch, start_offset)
    assert cache.entries == (EpochEntry(2, 6),)


def test_recovery_rebuilds_the_cache_from_the_batches() -> None:
    """LogSegmentTest.testRecoveryRebuildsEpochCache: batches at 104 (e0), 106 (e1), 108 (e1), 110 (e2).

    Recovery assigns each batch's epoch at its base offset; the second epoch-1 batch changes nothing.
    """
    cache = LeaderEpochCache()
    changed = [cache.assign(epoch, base_offset) for epoch, base_offset in [(0, 104), (1, 106), (1, 108), (2, 110)]]
    assert changed == [True, True, False, True]
    assert cache.entries == (EpochEntry(0, 104), EpochEntry(1, 106), EpochEntry(2, 110))


# truncateFromEnd


def test_truncating_from_the_end_on_an_epoch_boundary_drops_that_epoch() -> None:
    """shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries: {2:6, 3:8, 4:11}.truncateFromEnd(8)."""
    cache = three_epochs()
    assert cache.truncate_from_end(8) is True
    assert cache.entries == (EpochEntry(2, 6),)


def test_truncating_from_the_end_between_boundaries_keeps_the_epoch_it_falls_in() -> None:
    """shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest: truncateFromEnd(9) -> [(2, 6), (3, 8)]."""
    cache = three_epochs()
    assert cache.truncate_from_end(9) is True
    assert cache.latest_epoch == 3
    assert cache.entries == (EpochEntry(2, 6), EpochEntry(3, 8))


def test_truncating_from_the_end_past_every_epoch_changes_nothing() -> None:
    cache = three_epochs()
    assert cache.truncate_from_end(12) is False
    assert cache.entries == three_epochs().entries
    assert LeaderEpochCache().truncate_from_end(7) is False  # shouldClearLatestOnEmptyCache


def test_truncating_from_the_end_at_undefined_does_nothing() -> None:
    """shouldNotResetEpochHistoryTailIfUndefinedPassed."""
    cache = three_epochs()
    assert cache.truncate_from_end(UNDEFINED_EPOCH_OFFSET) is False
    assert len(cache.entries) == 3


def test_truncating_from_the_end_at_the_first_start_empties_the_cache() -> None:
    cache = three_epochs()
    assert cache.truncate_from_end(6) is True
    assert cache.entries == ()
    assert cache.latest_entry is None


# truncateFromStart


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (8, [(3, 8), (4, 11)]),  # shouldPreserveResetOffsetOnClearEarliestIfOneExists
        (9, [(3, 9), (4, 11)]),  # shouldUpdateSavedOffsetWhenOffsetToClearToIsBetweenEpochs
        (11, [(4, 11)]),  # shouldRetainLatestEpochOnClearAllEarliest
        (15, [(4, 15)]),  # shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset
    ],
)
def test_truncating_from_the_start_moves_the_epoch_it_falls_in(
    start_offset: int, expected: list[tuple[int, int]]
) -> None:
    cache = three_epochs()
    assert cache.truncate_from_start(start_offset) is True
    assert cache.entries == tuple(EpochEntry(*entry) for entry in expected)


@pytest.mark.parametrize(
    "start_offset",
    [
        1,  # shouldNotClearAnythingIfOffsetToEarly
        6,  # shouldNotClearAnythingIfOffsetToFirstOffset
        UNDEFINED_EPOCH_OFFSET,  # shouldNotResetEpochHistoryHeadIfUndefinedPassed
    ],
)
def test_truncating_from_the_start_at_or_before_the_first_start_changes_nothing(start_offset: int) -> None:
    cache = three_epochs()
    assert cache.truncate_from_start(start_offset) is False
    assert cache.entries == three_epochs().entries


def test_truncating_from_the_start_inside_the_first_epoch_moves_its_start() -> None:
    """shouldUpdateOffsetBetweenEpochBoundariesOnClearEarliest2: {0:0, 1:7, 2:10}.truncateFromStart(5)."""
    cache = cache_of((0, 0), (1, 7), (2, 10))
    assert cache.truncate_from_start(5) is True
    assert cache.entries == (EpochEntry(0, 5), EpochEntry(1, 7), EpochEntry(2, 10))
    assert LeaderEpochCache().truncate_from_start(7) is False  # shouldClearEarliestOnEmptyCache


# clear, lookups


def test_clear_empties_the_cache() -> None:
    """shouldClearAllEntries."""
    cache = three_epochs()
    cache.clear()
    assert cache.entries == ()
    assert cache.latest_epoch is None
    assert cache.end_offset_for(4, 20) == UNDEFINED


def test_lookups_by_epoch_and_by_offset() -> None:
    """Given {2:6, 3:8, 4:11}: offsets 6 and 7 were written in epoch 2, 8..10 in 3, 11 onwards in 4."""
    cache = three_epochs()
    assert cache.earliest_entry == EpochEntry(2, 6)
    assert cache.latest_entry == EpochEntry(4, 11)
    assert cache.epoch_entry(3) == EpochEntry(3, 8)
    assert cache.epoch_entry(1) is None
    assert cache.epoch_entry(5) is None
    assert [cache.epoch_for_offset(offset) for offset in range(5, 13)] == [None, 2, 2, 3, 3, 3, 4, 4]


# Loading entries (from the checkpoint the caller read)


def test_entries_load_as_they_were_written() -> None:
    cache = LeaderEpochCache([EpochEntry(0, 0), EpochEntry(1, 2)])
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(1, 2))
    assert LeaderEpochCache([(3, 9)]).entries == (EpochEntry(3, 9),)  # any (epoch, start_offset) pair


def test_loaded_entries_sharing_a_start_offset_keep_the_later_epoch() -> None:
    """As Kafka's constructor, which assigns each checkpointed entry: an old checkpoint's {0:0, 1:0}."""
    cache = LeaderEpochCache([EpochEntry(0, 0), EpochEntry(1, 0), EpochEntry(2, 5)])
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(2, 5))
    assert cache.end_offset_for(0, 10) == EpochEndOffset(0, 0)
    assert cache.end_offset_for(1, 10) == EpochEndOffset(1, 5)
    assert cache.end_offset_for(2, 10) == EpochEndOffset(2, 10)


@pytest.mark.parametrize(
    "entries",
    [
        [EpochEntry(1, 0), EpochEntry(1, 5)],  # epoch repeated
        [EpochEntry(2, 0), EpochEntry(1, 5)],  # epoch going back
        [EpochEntry(1, 5), EpochEntry(2, 4)],  # start offset going back
        [EpochEntry(-1, 0)],
        [EpochEntry(0, -1)],
    ],
)
def test_entries_out_of_order_or_negative_are_refused(entries: list[EpochEntry]) -> None:
    with pytest.raises(ValueError, match="leader epoch entr"):
        LeaderEpochCache(entries)


def test_the_repr_shows_the_entries() -> None:
    assert repr(cache_of((2, 6))) == "LeaderEpochCache([EpochEntry(epoch=2, start_offset=6)])"
