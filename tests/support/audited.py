"""The history audit as the e2e tier's last word: after a real cluster has gone down, the events its lake holds are
audited with the plain-Python specification (`hightide.audit.audit`), and no invariant may be violated. Losses the
audit attributes to a cause Kafka allows (an acks=1 record across a leader change, an unclean election) are
reported with the test's output but are not failures."""

from __future__ import annotations

from pathlib import Path

from hightide.audit import audit
from hightide.lake import read_envelopes


def assert_history_clean(lake: Path) -> None:
    envelopes = [envelope for _, envelope in read_envelopes(lake)]
    assert envelopes, f"the lake {lake} holds no event: the archiver did not run"
    findings = audit(envelopes)
    violations = [f for f in findings if f.is_violation]
    for attributed in (f for f in findings if not f.is_violation):
        print(f"attributed: {attributed.invariant} {attributed.topic}-{attributed.partition} {attributed.detail}")
    shown = "\n".join(
        f"{f.invariant} {f.topic}-{f.partition} replica {f.replica} offsets "
        f"{f.first_offset}..{f.last_offset}: {f.detail} (events {', '.join(f.events[:4])})"
        for f in violations[:10]
    )
    assert not violations, f"the audit of {len(envelopes)} events found {len(violations)} violations:\n{shown}"
