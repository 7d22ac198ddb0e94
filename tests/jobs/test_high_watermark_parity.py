"""The Spark high-watermark checks (`hightide.history.checks.high_watermark`) find exactly what the plain-Python
specification (`hightide.audit.checks.high_watermark`) finds, row for row.

Method: each history is archived into a real lake and read back with `read_lake` (cached: the three checks share
one read); the Spark findings of every check are collected and compared with the sorted Python findings of the
same check over `History.of` the same envelopes. The histories: clean simulated runs (healed and converged), the
runs of the two core mutants that break these invariants, with the seeds that show it, and the hand-written
violating and clean scenarios of `support.hw_histories` stored together in one lake.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from hightide.audit.checks import high_watermark as specification
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.history.checks import high_watermark as spark_checks
from hightide.history.events import read_lake
from hightide.history.findings import collect_findings
from hightide.protocol.envelope import Envelope
from simulation.invariants import InvariantViolation
from simulation.mutants import MUTANTS
from simulation.simulator import Simulation
from support import hw_histories
from support.lake_history import write_lake

STEPS = 2_000
MUTANT = {mutant.name: mutant for mutant in MUTANTS}


def _simulated(seed: int, mutant: str | None = None) -> list[Envelope]:
    """A run's history: a clean run heals and converges (or the test fails); a mutant's run ends where the
    simulator's own invariants catch it, if they do."""
    simulation = Simulation(seed, mutant=MUTANT[mutant] if mutant else None)
    simulation.history = []
    try:
        simulation.run(STEPS)
    except InvariantViolation:
        if mutant is None:
            raise
    return simulation.history


# name -> (the history, what the Python specification must find in it: invariant -> number of findings)
HISTORIES: dict[str, tuple[Callable[[], list[Envelope]], dict[str, int]]] = {
    "clean-seed-0": (lambda: _simulated(0), {}),
    "clean-seed-3": (lambda: _simulated(3), {}),
    # The HW passes a member whose expansion is pending; the simulator catches it as hw_within_isr.
    "high_watermark_over_committed_isr_only-seed-5": (
        lambda: _simulated(5, "high_watermark_over_committed_isr_only"),
        {specification.HW_ADVANCE_GUARDED: 1},
    ),
    # The leader shrinks its ISR by itself and advances past the member it dropped; the simulator's own checks
    # first catch this mutant at seed 85.
    "leader_shrinks_isr_on_its_own-seed-5": (
        lambda: _simulated(5, "leader_shrinks_isr_on_its_own"),
        {specification.HW_ADVANCE_GUARDED: 1},
    ),
    "hand-written": (
        hw_histories.every_scenario,
        {specification.HW_WITHIN_LOG: 2, specification.LEADER_HW_MONOTONIC: 2, specification.HW_ADVANCE_GUARDED: 6},
    ),
}


@pytest.mark.parametrize("name", list(HISTORIES))
def test_spark_finds_what_the_specification_finds(spark: SparkSession, tmp_path: Path, name: str) -> None:
    make, expected = HISTORIES[name]
    history = make()
    python = {check: sorted(run(History.of(history))) for check, run in specification.CHECKS.items()}
    assert {check: len(found) for check, found in python.items() if found} == expected

    frame = read_lake(spark, write_lake(history, tmp_path / "lake")).cache()
    try:
        outputs: list[DataFrame] = [run(frame) for run in spark_checks.CHECKS.values()]
        collected = collect_findings(reduce(DataFrame.unionByName, outputs))
    finally:
        frame.unpersist()

    assert set(spark_checks.CHECKS) == set(specification.CHECKS)
    by_check: dict[str, list[Finding]] = {check: [] for check in specification.CHECKS}
    for found in collected:
        by_check[found.invariant].append(found)
    for check in specification.CHECKS:
        assert by_check[check] == python[check], f"{name}: {check} differs"
