"""The clients' invariants on Spark agree with the plain-Python specification, row for row.

Method: each history (a clean simulated run, healed and converged; runs of the core mutant that breaks these
invariants; the hand-written stories of tests/support/client_histories.py) is archived into a real lake, read once
(`read_lake`, cached), and audited by every check of `hightide.history.checks.clients`; the collected findings must
equal the sorted findings of `hightide.audit.checks.clients` on the same envelopes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hightide.audit.checks import clients as python_checks
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.history.checks import clients as spark_checks
from hightide.history.events import read_lake
from hightide.history.findings import collect_findings
from hightide.protocol.envelope import Envelope
from simulation.mutants import MUTANTS, Mutant
from simulation.simulator import Simulation
from support.client_histories import all_stories
from support.lake_history import write_lake

STEPS = 2_000
CLEAN_SEED = 7  # its acks=1 producer loses acknowledged records in leader changes: attributed D4 findings
# Mutant runs whose clients saw broken promises (found by auditing seeds 0..59 of each mutant, 0..129 of the last,
# with the simulated producers' five batches in flight), and whether the audit must call them violations: the first
# two also had a last-known-leader election, to which the audit attributes what the consumer saw (the mutants' own
# faults are caught by the replica and commit checks).
MUTANT_RUNS = (
    # offsets re-read with other values after the last-known-leader election (D4), attributed
    ("acknowledge_retries_at_once", 17, False),
    # KIP-101: the consumer reads offsets out of order (E3) and an acknowledged offset reads another value (D4),
    # both attributed to the last-known-leader election that followed
    ("truncate_to_local_high_watermark", 1, False),
    # without KIP-966 a replica that lost its tail leads: an offset read with one value later reads another (D4),
    # with no election or acks=1 loss to explain it, a violation
    ("no_eligible_leader_replicas", 129, True),
)


def simulated(seed: int, mutant: Mutant | None = None) -> list[Envelope]:
    simulation = Simulation(seed, mutant=mutant)
    simulation.history = []
    try:
        simulation.run(STEPS)
    except AssertionError:
        if mutant is None:
            raise  # a clean run must hold the simulator's invariants; a mutant's history ends where it was caught
    return simulation.history


def both_audits(spark: SparkSession, envelopes: Sequence[Envelope], lake: Path) -> tuple[list[Finding], list[Finding]]:
    history = History.of(envelopes)
    python = sorted(f for check in python_checks.CHECKS.values() for f in check(history))
    frame = read_lake(spark, write_lake(envelopes, lake)).cache()
    try:
        spark_findings = functools.reduce(
            lambda a, b: a.unionByName(b), [check(frame) for check in spark_checks.CHECKS.values()]
        )
        return python, collect_findings(spark_findings)
    finally:
        frame.unpersist()


def test_the_same_names_on_both_sides() -> None:
    assert list(spark_checks.CHECKS) == list(python_checks.CHECKS)


def test_a_clean_run_gives_no_violation_and_the_same_findings(spark: SparkSession, tmp_path: Path) -> None:
    python, on_spark = both_audits(spark, simulated(CLEAN_SEED), tmp_path / "lake")
    assert on_spark == python
    assert [f for f in python if f.is_violation] == []
    assert {f.cause for f in python} == {"acks1_leader_change"}  # the acks=1 losses, attributed


@pytest.mark.parametrize(("name", "seed", "violated"), MUTANT_RUNS, ids=[name for name, _, _ in MUTANT_RUNS])
def test_a_mutant_run_gives_the_same_findings(
    spark: SparkSession, tmp_path: Path, name: str, seed: int, violated: bool
) -> None:
    mutant = next(m for m in MUTANTS if m.name == name)
    python, on_spark = both_audits(spark, simulated(seed, mutant), tmp_path / "lake")
    assert on_spark == python
    assert any(f.invariant != "consistent_offsets" or f.cause != "acks1_leader_change" for f in python), name
    assert any(f.is_violation for f in python) == violated, f"{name} seed {seed}"


def test_the_hand_written_stories_give_the_same_findings(spark: SparkSession, tmp_path: Path) -> None:
    python, on_spark = both_audits(spark, all_stories(), tmp_path / "lake")
    assert on_spark == python
    assert {f.invariant for f in python if f.is_violation} == set(python_checks.CHECKS)


# -- issue 12 (gaps) ----------------------------------------------------------------------------------------------

RETAINED_AWAY_SEED = 212  # its producer's first batches are retried after retention removed the batches they duplicate


def test_a_duplicate_after_retention_removed_the_producer_state_is_attributed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Seed 212 (KIP-360's case): p1-0, the producer's first batch (sequence 0), is appended at offset 0 but its
    answer is lost; the producer retries it through leader changes while retention moves the log start to 22, so
    the leader elected last rebuilt its producer table from a log without that batch and appends the retry again at
    23 (and answers it there); p1-5, p1-6, p1-7 and p1-11, first at 5 to 8, are appended again at 24 to 29 the same
    way. Kafka's idempotence holds only while the producer's state is retained: each duplicate is attributed, not a
    violation, on both sides."""
    python, on_spark = both_audits(spark, simulated(RETAINED_AWAY_SEED), tmp_path / "lake")
    assert on_spark == python
    assert [f for f in python if f.is_violation] == []
    duplicates = sorted(
        (f.records, f.first_offset, f.last_offset, f.cause) for f in python if f.invariant == "no_duplicates"
    )
    assert duplicates == [
        (("p1-0",), 0, 23, "producer_state_retention"),
        (("p1-11",), 8, 29, "producer_state_retention"),
        (("p1-5",), 5, 24, "producer_state_retention"),
        (("p1-6",), 6, 25, "producer_state_retention"),
        (("p1-7",), 7, 26, "producer_state_retention"),
    ]
