"""Every check of the Spark audit, by name: the groups' `CHECKS` put together, as the plain-Python registry does.

Room: services/history. The groups are `hightide.audit.checks.registry.GROUPS`, looked up under
`hightide.history.checks`; a test asserts both registries give the same names. A group whose module is not there
is skipped (`present_groups`), as on the Python side.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Final

from pyspark.sql import DataFrame

from hightide.audit.checks.registry import GROUPS

Check = Callable[[DataFrame], DataFrame]
PACKAGE: Final = "hightide.history.checks"


def all_checks() -> dict[str, Check]:
    """Every present group's checks, in `GROUPS` order then each group's own; a name in two groups is an error."""
    checks: dict[str, Check] = {}
    for group in present_groups():
        module = importlib.import_module(f"{PACKAGE}.{group}")
        group_checks: dict[str, Check] = module.CHECKS
        clashing = sorted(set(checks) & set(group_checks))
        assert not clashing, f"check names in two groups: {clashing}"
        checks.update(group_checks)
    return checks


def present_groups() -> tuple[str, ...]:
    return tuple(group for group in GROUPS if importlib.util.find_spec(f"{PACKAGE}.{group}") is not None)
