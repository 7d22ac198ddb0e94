"""What the audit hands a person and a script: the readable summary, and the findings table as files.

Room: services/history. `summary_text` is what `hightide history audit` prints (and writes as summary.txt): how
many findings each invariant has, then every violation with its partition, offsets, records, events and detail,
then the attributed losses grouped by cause. `write_outputs` writes `findings.parquet` (explicit schema, the
columns of `hightide.audit.findings.Finding`), `findings.json` (a JSON array, one object per finding, the same
columns) and `summary.txt`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from hightide.audit.findings import COLUMNS, NO_OFFSET, NO_PARTITION, NO_REPLICA, Finding

FINDINGS_PARQUET: Final = "findings.parquet"
FINDINGS_JSON: Final = "findings.json"
SUMMARY_TXT: Final = "summary.txt"
ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("invariant", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("replica", pa.int32(), nullable=False),
        pa.field("first_offset", pa.int64(), nullable=False),
        pa.field("last_offset", pa.int64(), nullable=False),
        pa.field("records", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False),
        pa.field("events", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False),
        pa.field("cause", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
    ]
)
assert tuple(ARROW_SCHEMA.names) == COLUMNS
RECORDS_SHOWN_MAX: Final = 20  # a loss of thousands of records names the first ones; the files hold them all


def write_outputs(findings: Sequence[Finding], summary: str, out: Path) -> list[Path]:
    """Write the findings table (Parquet and JSON) and the summary into `out` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [finding.as_row() for finding in findings]
    table = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    pq.write_table(table, out / FINDINGS_PARQUET)
    (out / FINDINGS_JSON).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    (out / SUMMARY_TXT).write_text(summary, encoding="utf-8")
    return [out / FINDINGS_PARQUET, out / FINDINGS_JSON, out / SUMMARY_TXT]


def summary_text(findings: Sequence[Finding], invariants: Iterable[str], lake: Path, events: int) -> str:
    """The readable summary of an audit that ran `invariants` over `events` events of `lake`."""
    violations = [f for f in findings if f.is_violation]
    losses = [f for f in findings if not f.is_violation]
    counts = Counter(f.invariant for f in findings)
    names = sorted({*invariants, *counts})
    width = max((len(name) for name in names), default=0)
    lines = [
        f"audit of {lake}: {events} events, {len(names)} invariants checked, "
        f"{len(violations)} violations, {len(losses)} attributed losses",
        "",
        "findings per invariant:",
        *(f"  {name:<{width}}  {counts[name]}" for name in names),
    ]
    if violations:
        lines += ["", f"violations ({len(violations)}):"]
        for found in violations:
            lines += _described(found)
    if losses:
        lines += ["", f"attributed losses ({len(losses)}), by cause:"]
        for cause in sorted({f.cause for f in losses}):
            caused = [f for f in losses if f.cause == cause]
            lines.append(f"  {cause} ({len(caused)}):")
            for found in caused:
                lines += ["  " + line for line in _described(found)]
    lines += ["", "result: " + ("VIOLATED" if violations else "clean (no invariant violated)")]
    return "\n".join(lines) + "\n"


def _described(found: Finding) -> list[str]:
    where = [found.invariant]
    if found.partition != NO_PARTITION:
        where.append(f"{found.topic}-{found.partition}" if found.topic else f"partition {found.partition}")
    if found.replica != NO_REPLICA:
        where.append(f"replica {found.replica}")
    if found.first_offset != NO_OFFSET:
        last = "" if found.last_offset in (NO_OFFSET, found.first_offset) else f"..{found.last_offset}"
        where.append(f"offsets {found.first_offset}{last}")
    lines = ["  - " + "  ".join(where), f"      {found.detail}"]
    if found.records:
        shown = ", ".join(found.records[:RECORDS_SHOWN_MAX])
        more = f" (and {len(found.records) - RECORDS_SHOWN_MAX} more)" if len(found.records) > RECORDS_SHOWN_MAX else ""
        lines.append(f"      records: {shown}{more}")
    if found.events:
        lines.append(f"      events: {', '.join(found.events)}")
    return lines
