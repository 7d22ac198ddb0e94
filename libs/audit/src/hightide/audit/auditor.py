"""The whole plain-Python audit: `audit(envelopes)` runs every check of the registry over one `History`.

Room: libs/audit (pure). This is the specification the Spark audit (`hightide.history.audit.run_audit`) must match
row for row; its result is sorted, the order both sides compare in.
"""

from __future__ import annotations

from collections.abc import Iterable

from hightide.audit.checks.registry import all_checks
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.protocol.envelope import Envelope


def audit(envelopes: Iterable[Envelope]) -> list[Finding]:
    """Every finding of every check over the history (in any order: History puts it in emitter order), sorted."""
    history = History.of(envelopes)
    return sorted(found for check in all_checks().values() for found in check(history))
