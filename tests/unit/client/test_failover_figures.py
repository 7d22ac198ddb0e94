"""The failover figure's arithmetic: the longest stall is the longest gap between consecutive acknowledgements, or
from the kill to the first acknowledgement after it when that is longer; with none after the kill, infinite.

Method: given acknowledgement times and a kill time, then the figures `bench_failover.stall_of` returns.
"""

from __future__ import annotations

import math

from hightide.client.bench_failover import stall_of


def test_the_stall_is_the_gap_around_the_kill_when_it_is_the_longest() -> None:
    assert stall_of([0.0, 1.0, 2.0, 12.0, 12.1], killed_at=2.5) == (10.0, 9.5)


def test_a_longer_gap_elsewhere_is_the_stall() -> None:
    stall, first_after = stall_of([0.0, 5.0, 6.0, 7.0], killed_at=6.5)
    assert (stall, first_after) == (5.0, 0.5)


def test_with_no_acknowledgement_before_the_kill_the_stall_runs_from_the_kill() -> None:
    assert stall_of([4.0, 4.1], killed_at=1.0) == (3.0, 3.0)


def test_with_no_acknowledgement_after_the_kill_the_stall_is_infinite() -> None:
    assert stall_of([0.0, 1.0], killed_at=2.0) == (math.inf, math.inf)


def test_acknowledgements_out_of_order_are_sorted_first() -> None:
    assert stall_of([12.0, 0.0, 2.0], killed_at=2.5) == (10.0, 9.5)
