"""The two audits run the same checks: the plain-Python registry and the Spark registry give the same names.

Method: both registries are built from `GROUPS`; the names must be equal, each group must give the same names on
both sides, and every check must have a docstring (its rule and source).
"""

from __future__ import annotations

import importlib

from hightide.audit.checks import registry as python_registry
from hightide.history.checks import registry as spark_registry


def test_the_python_and_spark_registries_name_the_same_checks() -> None:
    assert sorted(spark_registry.all_checks()) == sorted(python_registry.all_checks())
    for group in python_registry.GROUPS:
        python_group = importlib.import_module(f"hightide.audit.checks.{group}").CHECKS
        spark_group = importlib.import_module(f"hightide.history.checks.{group}").CHECKS
        assert sorted(python_group) == sorted(spark_group), group


def test_every_check_says_its_rule() -> None:
    for name, check in [*python_registry.all_checks().items(), *spark_registry.all_checks().items()]:
        assert check.__doc__ and check.__doc__.strip(), f"{name}: no docstring stating its rule and source"


def test_the_audit_covers_every_invariant_the_issue_names() -> None:
    """Issue 12's list of invariants, each by the check that holds it (a renamed or dropped check fails here)."""
    named = {
        "one_leader_per_epoch", "epochs_monotonic", "leader_in_isr", "isr_elr_well_formed",
        "election_from_isr_or_elr", "hw_within_log", "leader_hw_monotonic", "hw_advance_guarded",
        "committed_prefixes_agree", "truncation_only_uncommitted", "leader_completeness",
        "acks_all_acknowledged_committed", "acknowledged_records_lost", "definite_failure_invisible",
        "consumers_below_high_watermark", "consumers_in_order", "emitter_sequences_contiguous",
    }  # fmt: skip
    assert named <= set(python_registry.all_checks())
