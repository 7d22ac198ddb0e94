"""The metadata invariants in Spark (hightide.history.checks.metadata) find exactly what the plain-Python
specification (hightide.audit.checks.metadata) finds, row for row.

Method: each history is archived into a real lake (tests/support/lake_history.py), read once with `read_lake` and
cached; every Spark check runs over it and the union is collected; the Python checks run over the same envelopes.
The histories: clean simulated runs (healed and converged), the runs of the two core mutants that change elections
(unclean_election, no_eligible_leader_replicas: both record what they do, so the metadata rules hold and neither
audit finds anything here; their losses are the loss attribution's), a simulated run damaged by hand (a committed
leader moved outside its ISR, a broker's epoch lowered), and every hand-written violating history.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hightide.audit.checks.metadata import CHECKS as PYTHON_CHECKS
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.history.checks.metadata import CHECKS as SPARK_CHECKS
from hightide.history.events import read_lake
from hightide.history.findings import collect_findings
from hightide.protocol import events
from hightide.protocol.envelope import Envelope
from simulation.mutants import MUTANTS
from simulation.simulator import Simulation
from support.lake_history import write_lake
from support.metadata_histories import VIOLATING, clean_lives, election_outside_isr, reassignment_election

STEPS = 2_000


def python_findings(history: list[Envelope]) -> list[Finding]:
    held = History.of(history)
    return sorted(f for check in PYTHON_CHECKS.values() for f in check(held))


def spark_findings(spark: SparkSession, history: list[Envelope], lake: Path) -> list[Finding]:
    frame = read_lake(spark, write_lake(history, lake)).cache()
    try:
        checks = iter(SPARK_CHECKS.values())
        union = next(checks)(frame)
        for check in checks:
            union = union.unionByName(check(frame))
        return collect_findings(union)
    finally:
        frame.unpersist()


def simulated(seed: int, mutant_name: str | None = None) -> list[Envelope]:
    mutant = next(m for m in MUTANTS if m.name == mutant_name) if mutant_name else None
    simulation = Simulation(seed, mutant=mutant)
    simulation.history = []
    # A mutant's run stops where the simulator caught it: its history so far is what the audits read.
    with contextlib.suppress(AssertionError):
        simulation.run(STEPS)
    assert simulation.history is not None
    return simulation.history


def damaged(history: list[Envelope]) -> list[Envelope]:
    """The run with its first elected leader moved to a broker outside the ISR, and the first BecameFollower of a
    leader epoch above 0 lowered to epoch 0 after a later one."""
    damaged_history = list(history)
    index = next(
        i
        for i, e in enumerate(history)
        if isinstance(e.event, events.PartitionChanged) and e.event.leader_epoch > 0 and e.event.leader != -1
    )
    change = history[index].event
    assert isinstance(change, events.PartitionChanged)
    outsider = next(b for b in (1, 2, 3, 4) if b not in change.isr)
    damaged_history[index] = dataclasses.replace(history[index], event=dataclasses.replace(change, leader=outsider))
    followers = [
        i for i, e in enumerate(history) if isinstance(e.event, events.BecameFollower) and e.event.leader_epoch > 0
    ]
    last = followers[-1]
    follower = history[last].event
    assert isinstance(follower, events.BecameFollower)
    damaged_history[last] = dataclasses.replace(history[last], event=dataclasses.replace(follower, leader_epoch=0))
    return damaged_history


def side_by_side(cases: dict[str, list[Envelope]]) -> list[Envelope]:
    """Several hand-written histories as one (one Spark run instead of many): each case's topic is renamed to the
    case's name and its emitters' incarnations suffixed with it. All but one have no ControllerElected, so they
    share the one controller term and no takeover; the one that has (a controller's own min.insync.replicas) is
    another controller's, whose term is its own. Every rule is per topic or per broker incarnation."""
    merged = []
    for name, history in cases.items():
        for envelope in history:
            event = envelope.event
            if hasattr(event, "topic"):
                event = dataclasses.replace(event, topic=name)  # type: ignore[call-arg]
            emitter = dataclasses.replace(envelope.emitter, incarnation=f"{envelope.emitter.incarnation}-{name}")
            merged.append(dataclasses.replace(envelope, emitter=emitter, event=event))
    return merged


def test_spark_finds_what_python_finds_on_hand_written_histories(spark: SparkSession, tmp_path: Path) -> None:
    """Every violating history is caught (by both, alike), and neither the clean ones (one with two controller
    terms, an abandoned intent and a topic's second life; one with a recorded unclean election) nor anything
    else."""
    cases = {name: build() for name, build in VIOLATING.items()}
    cases["recorded_unclean_election"] = election_outside_isr("unclean")
    cases["reassignment_election"] = reassignment_election(6)  # partition reassignment (issue 13): clean
    history = side_by_side(cases)
    expected = python_findings(history)
    assert {f.topic for f in expected} == set(VIOLATING)
    assert spark_findings(spark, history, tmp_path / "violating") == expected
    assert python_findings(clean_lives()) == []
    assert spark_findings(spark, clean_lives(), tmp_path / "clean") == []


@pytest.mark.parametrize("seed", [2, 3])
def test_spark_and_python_agree_and_find_nothing_on_a_clean_run(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    """Both seeds have ELR elections; seed 2 two controller failovers, seed 3 a last-known-leader election. Since
    KAFKA-9952 the first seeds that do (seeds 0 up, their LeaderElected and ControllerElected counted); seeds 4 and
    25 were pinned before, and by then neither had an ELR election (4 had three failovers)."""
    history = simulated(seed)
    assert python_findings(history) == []
    assert spark_findings(spark, history, tmp_path / "lake") == []


@pytest.mark.parametrize("mutant", ["unclean_election", "no_eligible_leader_replicas"])
def test_election_mutants_record_what_they_do(spark: SparkSession, tmp_path: Path, mutant: str) -> None:
    """unclean_election's out-of-sync leaders are recorded as unclean elections (the loss attribution's to
    report), and no_eligible_leader_replicas elects a tail-less last ISR member from the ISR, a clean election: no
    metadata rule is broken, and both audits agree on that."""
    history = simulated(0, mutant)
    elections = {e.election for _, e in History.of(history).of_type(events.LeaderElected)}
    assert ("unclean" in elections) == (mutant == "unclean_election")
    assert python_findings(history) == []
    assert spark_findings(spark, history, tmp_path / "lake") == []


def test_spark_and_python_agree_on_a_damaged_run(spark: SparkSession, tmp_path: Path) -> None:
    history = damaged(simulated(0))
    expected = python_findings(history)
    assert {f.invariant for f in expected} >= {"leader_in_isr", "one_leader_per_epoch", "epochs_monotonic"}
    assert spark_findings(spark, history, tmp_path / "lake") == expected
