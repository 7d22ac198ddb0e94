"""The whole cluster, simulated from seeds: the protocol holds every invariant under faults, every known-bad
variant is caught, and a seed replays exactly.

Method: tests/simulation/simulator.py runs brokers, controller, network, clock, lossy disks and clients from one
seed for `STEPS` steps with faults, then heals and requires convergence; the invariants are checked after
every step. `HIGHTIDE_SIM_SEEDS=n` runs more seeds (`make simulate SEEDS=n`), `HIGHTIDE_SEED=n` replays one.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from hightide.protocol.events import check_event
from simulation.invariants import InvariantViolation
from simulation.mutants import MUTANTS, Mutant
from simulation.simulator import Simulation

STEPS = 2_000
SEEDS = int(os.environ.get("HIGHTIDE_SIM_SEEDS", "200"))
CHUNK = 25
REPLAY_SEED = os.environ.get("HIGHTIDE_SEED")
# How many seeds each mutant may take to be caught (measured with retention on, the producers driving the core's send
# rules with five in flight, and no HW-only fetch answers to followers (KAFKA-9952): the slowest,
# no_eligible_leader_replicas, is caught at seed 63 (17 before KAFKA-9952); leader_shrinks_isr_on_its_own at 8 (72
# before); the others within the first 4).
MUTANT_SEEDS_MAX = 120


def _seed_chunks() -> list[range]:
    if REPLAY_SEED is not None:
        return [range(int(REPLAY_SEED), int(REPLAY_SEED) + 1)]
    return [range(start, min(start + CHUNK, SEEDS)) for start in range(0, SEEDS, CHUNK)]


@pytest.mark.parametrize("seeds", _seed_chunks(), ids=lambda r: f"seeds-{r.start}-{r.stop - 1}")
def test_every_invariant_holds_under_faults(seeds: range) -> None:
    rolled_and_retained = 0
    for seed in seeds:
        simulation = Simulation(seed)
        try:
            simulation.run(STEPS)
        except AssertionError as failure:
            raise AssertionError(f"seed {seed} (replay: HIGHTIDE_SEED={seed} make simulate): {failure}") from None
        acknowledged = sum(len(h.acknowledged) for h in simulation.histories.values())
        assert acknowledged > 0, f"seed {seed}: no acks=all acknowledgement at all, so the run proved nothing"
        changes = simulation.segment_changes
        by_retention = changes["SegmentDeleted: retention_ms"] + changes["SegmentDeleted: retention_bytes"]
        rolled_and_retained += changes["SegmentRolled: append"] > 0 and by_retention > 0
    # Retention must have run for real, or retention_honoured proved little (measured: 49 runs of 50 roll segments
    # and delete some by retention; a quiet run may do neither).
    assert rolled_and_retained >= 0.8 * len(seeds), f"only {rolled_and_retained} runs rolled and retained segments"


def _first_catching_seed(mutant: Mutant) -> tuple[int, InvariantViolation] | None:
    for seed in range(MUTANT_SEEDS_MAX):
        try:
            Simulation(seed, mutant=mutant).run(STEPS)
        except InvariantViolation as violation:
            return seed, violation
        except AssertionError:
            continue  # the harness noticed something first; only a named invariant counts here
    return None


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_a_known_bad_variant_is_caught(mutant: Mutant) -> None:
    caught = _first_catching_seed(mutant)
    assert caught is not None, f"{mutant.name} survived {MUTANT_SEEDS_MAX} seeds of {STEPS} steps"
    seed, violation = caught
    print(f"{mutant.name}: caught by {violation.invariant} at seed {seed}")


def _trace(seed: int) -> str:
    simulation = Simulation(seed)
    simulation.run(STEPS)
    logs = [
        (broker.broker_id, tp, simulation.log_entries(broker, tp), core.high_watermark)
        for broker in simulation.brokers.values()
        for tp, core in sorted(simulation.cores(broker).items())
    ]
    summary = (simulation.step_count, simulation.now_ms, simulation.network.sent, simulation.network.dropped, logs)
    return hashlib.sha256(repr(summary).encode()).hexdigest()


def test_a_seed_replays_exactly() -> None:
    assert _trace(11) == _trace(11)
    assert _trace(11) != _trace(12)


def test_every_emitted_event_fits_the_catalogue() -> None:
    seen: set[str] = set()
    for seed in range(3, 8):  # a few faulty runs: one may happen never to truncate
        simulation = Simulation(seed)
        simulation.emitted = []
        simulation.run(STEPS)
        emitted = simulation.emitted + simulation.controller.events
        for event in emitted:
            check_event(event)
        seen |= {type(event).TYPE for event in emitted}
    expected = {"RecordsAppended", "HighWatermarkAdvanced", "LeaderEpochStarted", "FetchServed", "BecameLeader",
                "BecameFollower", "IsrChangeProposed", "ProduceCompleted", "LogTruncated",
                "BrokerRegistered", "BrokerFenced", "BrokerUnfenced", "PartitionChanged", "LeaderElected",
                "TopicCreated", "AlterPartitionAnswered", "LogOpened", "ControllerElected",
                "IsrChangeCompleted", "FollowerStateUpdated"}  # fmt: skip
    # IsrChangeCompleted comes mostly from the metadata here: the simulator applies committed metadata at once,
    # so a leader learns its new ISR (BecameLeader, new partition epoch) before the AlterPartition answer
    # arrives, and then ignores the answer, as Kafka does when metadata wins that race.
    assert expected <= seen, f"never emitted in a faulty run: {sorted(expected - seen)}"
