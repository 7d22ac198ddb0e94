"""The two audits run the same checks: the plain-Python registry and the Spark registry give the same names.

Method: both registries are built from the groups present (`GROUPS`); the names must be equal, every group must be
present on both sides or on neither, and every check must have a docstring (its rule and source).
"""

from __future__ import annotations

from hightide.audit.checks import registry as python_registry
from hightide.history.checks import registry as spark_registry


def test_the_python_and_spark_registries_name_the_same_checks() -> None:
    assert sorted(spark_registry.all_checks()) == sorted(python_registry.all_checks())
    assert spark_registry.present_groups() == python_registry.present_groups()


def test_every_check_says_its_rule() -> None:
    for name, check in [*python_registry.all_checks().items(), *spark_registry.all_checks().items()]:
        assert check.__doc__ and check.__doc__.strip(), f"{name}: no docstring stating its rule and source"


def test_the_sequences_group_is_there() -> None:
    """The registries skip groups whose module is missing; this branch's own group must never be one of them."""
    assert "emitter_sequences_contiguous" in python_registry.all_checks()
    assert "sequences" not in python_registry.missing_groups()
