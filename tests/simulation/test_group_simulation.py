"""The consumer group under a seeded simulation: the real coordinator keeps the group invariants; a known-bad one
is caught.

Method: tests/simulation/groups.py runs one group of four consumers (two static), each membership the client's own
`hightide.core.group_member.GroupMembership` with the seed's assignor, against the real GroupCoordinator
with delayed, reordered and lost messages, failing and slow appends, coordinator failovers and consumer crashes and
restarts, checking `hightide.audit.groups` after every step. `HIGHTIDE_SEED=n` replays one seed.
"""

from __future__ import annotations

import os

import pytest

from hightide.protocol import events
from simulation.groups import GroupSimulation

SEEDS = [int(os.environ["HIGHTIDE_SEED"])] if "HIGHTIDE_SEED" in os.environ else list(range(12))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_real_coordinator_keeps_the_group_invariants(seed: int) -> None:
    simulation = GroupSimulation(seed)
    assert simulation.run() == [], f"HIGHTIDE_SEED={seed}"
    kinds = {type(e) for e in simulation.history}
    # The run did what it is for: generations, assignments and commits, not only failed joins.
    assert {events.GroupGenerationStarted, events.GroupAssignmentSynced, events.OffsetsCommitted} <= kinds


def test_a_coordinator_that_accepts_stale_commits_is_caught() -> None:
    found = []
    for seed in range(40):
        found = GroupSimulation(seed, bad_commit_check=True).run()
        if found:
            break
    assert found, "no seed of 40 caught a coordinator that ignores the commit's generation"
    assert {v.invariant for v in found} == {"no_stale_commit"}


def test_the_seeds_run_every_assignor() -> None:
    """The members assign with the strategy each seed draws; the default seeds cover all four of Kafka's."""
    assert {GroupSimulation(seed).strategy for seed in range(12)} == {
        "range",
        "roundrobin",
        "sticky",
        "cooperative-sticky",
    }
