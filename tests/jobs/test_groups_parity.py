"""The group invariants on Spark agree with the plain-Python specification, row for row.

Method: each history (the group simulation's clean runs and its run with a coordinator that accepts stale commits,
every coordinator's events in its own envelopes; the hand-written stories of tests/support/group_histories.py, all
in one lake; a clean replication run, which has no group events) is archived into a real lake, read once
(`read_lake`, cached), and audited by every check of `hightide.history.checks.groups`; the collected findings must
equal the sorted findings of `hightide.audit.checks.groups` on the same envelopes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hightide.audit.checks import groups as python_checks
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.history.checks import groups as spark_checks
from hightide.history.events import read_lake
from hightide.history.findings import collect_findings
from hightide.protocol.envelope import Envelope
from support import group_histories, simulated
from support.lake_history import write_lake

CLEAN_SEEDS = (0, 1, 2)


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


@pytest.mark.parametrize("seed", CLEAN_SEEDS)
def test_a_simulated_group_run_is_clean_on_both_sides(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    envelopes, found = group_histories.simulated_group_history(seed)
    assert found == []
    python, on_spark = both_audits(spark, envelopes, tmp_path / "lake")
    assert on_spark == python == []


def test_a_coordinator_that_accepts_stale_commits_gives_the_same_findings(spark: SparkSession, tmp_path: Path) -> None:
    envelopes, _ = group_histories.simulated_group_history(group_histories.BAD_COMMIT_SEED, bad_commit_check=True)
    python, on_spark = both_audits(spark, envelopes, tmp_path / "lake")
    assert on_spark == python
    assert python and {f.invariant for f in python} == {"no_stale_commit"}


def test_the_hand_written_stories_give_the_same_findings(spark: SparkSession, tmp_path: Path) -> None:
    python, on_spark = both_audits(spark, group_histories.all_stories(), tmp_path / "lake")
    assert on_spark == python
    assert {f.invariant for f in python if f.is_violation} == set(python_checks.CHECKS)
    assert len(python) == sum(bool(make()[1]) for make in group_histories.STORIES.values())


def test_a_history_without_groups_gives_nothing_on_either_side(spark: SparkSession, tmp_path: Path) -> None:
    python, on_spark = both_audits(spark, simulated.clean_history(1), tmp_path / "lake")
    assert on_spark == python == []
