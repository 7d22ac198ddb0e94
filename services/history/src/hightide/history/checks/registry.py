"""Every check of the Spark audit, by name: the groups' `CHECKS` put together, as the plain-Python registry does.

Room: services/history. The groups are `hightide.audit.checks.registry.GROUPS`, gathered by the same function under
`hightide.history.checks`; a test asserts both registries give the same names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pyspark.sql import DataFrame

from hightide.audit.checks.registry import gather

Check = Callable[[DataFrame], DataFrame]
PACKAGE: Final = "hightide.history.checks"


def all_checks() -> dict[str, Check]:
    """Every group's checks, in `GROUPS` order then each group's own; a name in two groups is an error."""
    return gather(PACKAGE)
