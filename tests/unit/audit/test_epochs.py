"""The audit's leader epoch cache rules give Kafka's own test vectors (LeaderEpochFileCacheTest, as quoted in
../shared/reference/kafka_internals.md §3.1).

Method: given a cache built by `assign`, when a mutator runs, then the entries are Kafka's.
"""

from __future__ import annotations

import pytest

from hightide.audit.epochs import (
    EpochEntries,
    InvalidEpochEntry,
    assign,
    is_well_formed,
    truncate_from_end,
    truncate_from_start,
)


def _assigned(*entries: tuple[int, int]) -> EpochEntries:
    cache: EpochEntries = ()
    for epoch, start in entries:
        cache = assign(cache, epoch, start)
    return cache


@pytest.mark.parametrize(
    ("assigns", "expected"),
    [
        ([(2, 9), (3, 9)], ((3, 9),)),  # a later epoch at the same start replaces the earlier
        ([(2, 6), (3, 5)], ((3, 5),)),  # a later epoch at a smaller start drops what it overlaps
        ([(2, 6), (2, 10)], ((2, 6),)),  # an epoch is assigned once: not overwritten by a later start
        ([(1, 5), (2, 6), (1, 7)], ((1, 7),)),  # an older epoch again drops the newer ones (Kafka: latest 1)
        ([(5, 11), (6, 12), (7, 13), (7, 12)], ((5, 11), (7, 12))),
        ([(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)], ((1, 11), (2, 13), (3, 15))),
        ([(0, 0), (1, 0)], ((1, 0),)),
    ],
)
def test_assign_keeps_epochs_and_starts_increasing_as_kafka_does(
    assigns: list[tuple[int, int]], expected: EpochEntries
) -> None:
    assert _assigned(*assigns) == expected
    assert is_well_formed(expected)


def test_assign_refuses_a_negative_epoch_or_offset() -> None:
    for epoch, start in ((-1, 0), (0, -1)):
        with pytest.raises(InvalidEpochEntry):
            assign((), epoch, start)


@pytest.mark.parametrize(("end_offset", "expected"), [(8, ((2, 6),)), (9, ((2, 6), (3, 8))), (-1, None), (20, None)])
def test_truncate_from_end_drops_the_epochs_starting_at_or_after_it(
    end_offset: int, expected: EpochEntries | None
) -> None:
    cache = _assigned((2, 6), (3, 8), (4, 11))
    assert truncate_from_end(cache, end_offset) == (cache if expected is None else expected)


@pytest.mark.parametrize(
    ("start_offset", "expected"),
    [
        (9, ((3, 9), (4, 11))),
        (8, ((3, 8), (4, 11))),
        (15, ((4, 15),)),
        (6, ((2, 6), (3, 8), (4, 11))),
        (5, ((2, 6), (3, 8), (4, 11))),  # below every entry: unchanged
        (-1, ((2, 6), (3, 8), (4, 11))),
    ],
)
def test_truncate_from_start_moves_the_epoch_the_new_start_falls_in(start_offset: int, expected: EpochEntries) -> None:
    assert truncate_from_start(_assigned((2, 6), (3, 8), (4, 11)), start_offset) == expected


def test_is_well_formed_refuses_what_no_cache_holds() -> None:
    assert is_well_formed(())
    assert not is_well_formed(((1, 5), (1, 6)))
    assert not is_well_formed(((1, 5), (2, 5)))
    assert not is_well_formed(((2, 5), (1, 6)))
    assert not is_well_formed(((-1, 0),))
