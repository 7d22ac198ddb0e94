"""What the audit hands a person and a script: the readable summary, and the findings table as files.

Room: services/history. `summary_text` is what `hightide history audit` prints (and writes as summary.txt): how
many findings each invariant has, then every violation with its partition, offsets, records, events and detail,
then the attributed losses grouped by cause. `write_outputs` writes `findings.parquet` (explicit schema, the
columns of `hightide.audit.findings.Finding`), `findings.json` (a JSON array, one object per finding, the same
columns), `summary.txt` and `_audited_lake`: which lake the findings are of (its event files, by path and size, as
the audit read them; none when the lake changed while the audit ran). `read_findings` gives the findings back to
`hightide history report --findings DIR` only while the lake still holds exactly those files, so a report never
shows the verdict of another history than the one it draws.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from hightide.audit.findings import COLUMNS, NO_OFFSET, NO_PARTITION, NO_REPLICA, Finding, from_row
from hightide.lake import scan_lake

FINDINGS_PARQUET: Final = "findings.parquet"
FINDINGS_JSON: Final = "findings.json"
SUMMARY_TXT: Final = "summary.txt"
AUDITED_RECORD: Final = "_audited_lake"  # not *.json: readers of the findings glob those
AUDITED_FORMAT: Final = 1
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


def write_outputs(
    findings: Sequence[Finding], summary: str, out: Path, audited: dict[str, object] | None = None
) -> list[Path]:
    """Write the findings table (Parquet and JSON) and the summary into `out` (created if missing), and `audited`
    (`audited_lake`'s record of the lake audited) as _audited_lake when given. That record is written last and
    removed first: a directory whose other files are half rewritten never vouches for them."""
    out.mkdir(parents=True, exist_ok=True)
    (out / AUDITED_RECORD).unlink(missing_ok=True)
    rows = [finding.as_row() for finding in findings]
    table = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    pq.write_table(table, out / FINDINGS_PARQUET)
    (out / FINDINGS_JSON).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    (out / SUMMARY_TXT).write_text(summary, encoding="utf-8")
    written = [out / FINDINGS_PARQUET, out / FINDINGS_JSON, out / SUMMARY_TXT]
    if audited is not None:
        (out / AUDITED_RECORD).write_text(json.dumps(audited, indent=1) + "\n", encoding="utf-8")
        written.append(out / AUDITED_RECORD)
    return written


def lake_files(lake: Path) -> list[dict[str, object]]:
    """The lake's event files as the audit reads them (`scan_lake`'s complete batches): relative path and size."""
    return [
        {"path": part.path.relative_to(lake).as_posix(), "bytes": part.path.stat().st_size}
        for part in sorted(scan_lake(lake).files, key=lambda part: part.path)
    ]


def audited_lake(
    lake: Path, events: int, before: list[dict[str, object]], after: list[dict[str, object]]
) -> dict[str, object]:
    """the audit record: the lake's files listed before and after the audit read them, kept only when equal
    (an archiver still writing to the lake may add a batch while the audit runs: which files it read is unknown)."""
    return {
        "format": AUDITED_FORMAT,
        "lake": str(lake.resolve()),
        "events": events,
        "files": before if before == after else None,
    }


class FindingsError(ValueError):
    """The findings directory cannot stand for the lake's audit; the message is one line saying why."""


def read_findings(directory: Path, lake: Path) -> list[Finding]:
    """The findings an audit of `lake` wrote into `directory`, provided the lake holds exactly the files that audit
    read (else FindingsError)."""
    record = directory / AUDITED_RECORD
    if not (directory / FINDINGS_PARQUET).is_file() or not record.is_file():
        raise FindingsError(
            f"--findings {directory}: no audit's findings there ({FINDINGS_PARQUET} and {AUDITED_RECORD} are "
            f"written by `hightide history audit --out {directory}`)"
        )
    try:
        audited = json.loads(record.read_text(encoding="utf-8"))
        form, files = audited.get("format"), audited["files"]
    except (ValueError, KeyError, AttributeError) as error:
        raise FindingsError(f"--findings {directory}: {AUDITED_RECORD} is not an audit's record ({error})") from None
    if form != AUDITED_FORMAT:
        raise FindingsError(f"--findings {directory}: {AUDITED_RECORD} has format {form!r}, not {AUDITED_FORMAT}")
    if files is not None and not isinstance(files, list):
        raise FindingsError(f"--findings {directory}: {AUDITED_RECORD} is not an audit's record (files: {files!r})")
    if files is None:
        raise FindingsError(f"--findings {directory}: the lake changed while that audit ran; audit it again")
    now = lake_files(lake)
    if files != now:
        raise FindingsError(
            f"--findings {directory}: those findings are of {len(files)} event files, the lake {lake} now holds "
            f"{len(now)} (or other ones); audit it again or leave --findings out"
        )
    try:
        return [from_row(row) for row in pq.read_table(directory / FINDINGS_PARQUET).to_pylist()]
    except (OSError, pa.ArrowException, KeyError, TypeError, AssertionError) as error:
        raise FindingsError(f"--findings {directory}: {FINDINGS_PARQUET} cannot be read ({error})") from None


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
