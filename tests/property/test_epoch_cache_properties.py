"""The leader epoch cache under random histories, against a line-by-line port of Kafka's.

Method: hypothesis. `KafkaModel` is LeaderEpochFileCache.java ported as directly as Python allows (a dict in
place of the TreeMap, linear scans in place of floorEntry/higherEntry, removal from either end while a predicate
holds), with none of the cache's bisect arithmetic. Random sequences of assign / truncate_from_end /
truncate_from_start / clear run on both; after every step the entries, the "changed" answers and
`end_offset_for` of every epoch near the cached ones must agree, and the invariants must hold: epochs and start
offsets strictly increasing (stronger than the non-decreasing offsets Kafka's checkpoint may hold: `assign`
drops an entry whose start the new one does not exceed), the latest epoch ending at the log end offset, each
cached epoch ending where the next starts. Then `end_offset_for` alone on random caches, loaded from random
entries as a checkpoint would load them.
"""

from __future__ import annotations

from itertools import accumulate, pairwise

from hypothesis import given
from hypothesis import strategies as st

from hightide.core.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
)

EPOCH_MAX = 12
OFFSET_MAX = 40
OPS_MAX = 40
ENTRIES_MAX = 12


class KafkaModel:
    """LeaderEpochFileCache.java over a dict; `changed` as Kafka decides whether to write the checkpoint."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}

    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(EpochEntry(e, self.epochs[e]) for e in sorted(self.epochs))

    def assign(self, epoch: int, start_offset: int) -> bool:
        if self.epochs:
            latest = max(self.epochs)
            if epoch == latest and start_offset >= self.epochs[latest]:
                return False  # isUpdateNeeded
        for e in sorted(self.epochs, reverse=True):  # maybeTruncateNonMonotonicEntries
            if e >= epoch or self.epochs[e] >= start_offset:
                del self.epochs[e]
            else:
                break
        self.epochs[epoch] = start_offset
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        if requested_epoch == UNDEFINED_EPOCH:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if self.epochs and max(self.epochs) == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = [e for e in sorted(self.epochs) if e > requested_epoch]
        if not higher:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        floor = [e for e in sorted(self.epochs) if e <= requested_epoch]
        if not floor:
            return EpochEndOffset(requested_epoch, self.epochs[higher[0]])
        return EpochEndOffset(floor[-1], self.epochs[higher[0]])

    def truncate_from_end(self, end_offset: int) -> bool:
        removed = []
        if end_offset >= 0 and self.epochs and self.epochs[max(self.epochs)] >= end_offset:
            for e in sorted(self.epochs, reverse=True):
                if self.epochs[e] >= end_offset:
                    removed.append(e)
                    del self.epochs[e]
                else:
                    break
        return bool(removed)

    def truncate_from_start(self, start_offset: int) -> bool:
        before = self.entries()
        removed = []
        for e in sorted(self.epochs):
            if self.epochs[e] <= start_offset:
                removed.append(e)
                del self.epochs[e]
            else:
                break
        if removed:
            self.epochs[removed[-1]] = start_offset
        # Kafka rewrites the checkpoint whenever something was removed, even if the same entry came back;
        # the cache reports only a real change.
        return self.entries() != before

    def clear(self) -> bool:
        self.epochs.clear()
        return True


def well_formed(entries: tuple[EpochEntry, ...]) -> bool:
    """Epochs and start offsets strictly increasing, none negative."""
    return all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in pairwise(entries)) and all(
        entry.epoch >= 0 and entry.start_offset >= 0 for entry in entries
    )


ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, EPOCH_MAX), st.integers(0, OFFSET_MAX)),
        st.tuples(st.just("truncate_from_end"), st.integers(-1, OFFSET_MAX + 2), st.just(0)),
        st.tuples(st.just("truncate_from_start"), st.integers(-1, OFFSET_MAX + 2), st.just(0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
    ),
    max_size=OPS_MAX,
)


def apply(cache: LeaderEpochCache, model: KafkaModel, op: tuple[str, int, int]) -> None:
    name, a, b = op
    if name == "assign":
        assert cache.assign(a, b) == model.assign(a, b), op
    elif name == "truncate_from_end":
        assert cache.truncate_from_end(a) == model.truncate_from_end(a), op
    elif name == "truncate_from_start":
        assert cache.truncate_from_start(a) == model.truncate_from_start(a), op
    else:
        cache.clear()
        model.clear()


def check_end_offsets(cache: LeaderEpochCache, log_end_offset: int) -> None:
    entries = cache.entries
    if entries:
        latest = entries[-1].epoch
        assert cache.latest_epoch == latest
        assert cache.end_offset_for(latest, log_end_offset) == (latest, log_end_offset)
    ends = [entry.start_offset for entry in entries[1:]] + [log_end_offset]
    for entry, end in zip(entries, ends, strict=False):  # an empty cache has no epoch to end
        assert cache.end_offset_for(entry.epoch, log_end_offset) == (entry.epoch, end)


@given(ops, st.integers(0, 5))
def test_random_histories_agree_with_kafkas_cache_and_keep_the_invariants(
    history: list[tuple[str, int, int]], leo_beyond_latest: int
) -> None:
    cache, model = LeaderEpochCache(), KafkaModel()
    for op in history:
        apply(cache, model, op)
        entries = cache.entries
        assert entries == model.entries(), op
        assert well_formed(entries), entries
        assert LeaderEpochCache(entries).entries == entries  # what the checkpoint holds loads back the same
        log_end_offset = (entries[-1].start_offset if entries else 0) + leo_beyond_latest
        check_end_offsets(cache, log_end_offset)
        for requested in range(UNDEFINED_EPOCH, EPOCH_MAX + 3):
            assert cache.end_offset_for(requested, log_end_offset) == model.end_offset_for(requested, log_end_offset)


@st.composite
def checkpoints(draw: st.DrawFn) -> list[EpochEntry]:
    """Entries as a checkpoint may hold them: epochs strictly increasing, start offsets never decreasing."""
    gaps = draw(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5)), max_size=ENTRIES_MAX))
    first_epoch, first_offset = draw(st.integers(0, 3)), draw(st.integers(0, 10))
    epochs = accumulate((gap for gap, _ in gaps), initial=first_epoch)
    offsets = accumulate((gap for _, gap in gaps), initial=first_offset)
    return [EpochEntry(e, s) for e, s in zip(epochs, offsets, strict=True)]


@given(checkpoints(), st.integers(0, 5), st.integers(-3, 3))
def test_end_offset_for_agrees_with_a_direct_reimplementation(
    checkpoint: list[EpochEntry], leo_beyond_latest: int, below_first: int
) -> None:
    cache, model = LeaderEpochCache(checkpoint), KafkaModel()
    for entry in checkpoint:
        model.assign(entry.epoch, entry.start_offset)  # Kafka's constructor: assign each checkpointed entry
    assert cache.entries == model.entries()
    assert well_formed(cache.entries)
    log_end_offset = (checkpoint[-1].start_offset if checkpoint else 0) + leo_beyond_latest
    check_end_offsets(cache, log_end_offset)
    first = checkpoint[0].epoch if checkpoint else 0
    for requested in [UNDEFINED_EPOCH, max(0, first + below_first), *range(first, first + 4 * ENTRIES_MAX + 2)]:
        assert cache.end_offset_for(requested, log_end_offset) == model.end_offset_for(requested, log_end_offset)


def test_the_invariant_check_can_fail() -> None:
    assert well_formed((EpochEntry(0, 0), EpochEntry(1, 5)))
    assert not well_formed((EpochEntry(1, 0), EpochEntry(1, 5)))  # epoch repeated
    assert not well_formed((EpochEntry(0, 5), EpochEntry(1, 5)))  # start offset repeated
    assert not well_formed((EpochEntry(0, 6), EpochEntry(1, 5)))  # start offset going back
    assert not well_formed((EpochEntry(-1, 0),))
