"""Every check of the plain-Python audit, by name: the groups' `CHECKS` put together.

Room: libs/audit (pure). `GROUPS` names the modules of `hightide.audit.checks` (one per group of invariants); the
Spark registry (`hightide.history.checks.registry`) lists the same groups and must give the same names, which a
test asserts. Every group must be there: an audit that silently ran fewer checks would call a history clean that is
not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Final

from hightide.audit.findings import Finding
from hightide.audit.history import History

Check = Callable[[History], Iterable[Finding]]
PACKAGE: Final = "hightide.audit.checks"
GROUPS: Final = ("sequences", "metadata", "high_watermark", "commits", "clients", "groups", "storage")


def all_checks() -> dict[str, Check]:
    """Every group's checks, in `GROUPS` order then each group's own; a name in two groups is an error."""
    return gather(PACKAGE)


def gather(package: str) -> dict[str, Any]:
    """The `CHECKS` of `package.<group>` for every group of `GROUPS`, put together (the Spark registry gathers its
    own package the same way)."""
    checks: dict[str, Any] = {}
    for group in GROUPS:
        group_checks: dict[str, Any] = importlib.import_module(f"{package}.{group}").CHECKS
        clashing = sorted(set(checks) & set(group_checks))
        assert not clashing, f"check names in two groups: {clashing}"
        checks.update(group_checks)
    return checks
