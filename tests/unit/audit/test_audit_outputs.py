"""What the audit shows a person and writes for a script (`hightide.history.outputs`), on hand-made findings.

Method: given findings as the checks return them (violations and attributed losses of several causes), when the
summary is made and the files written, then the summary counts each invariant (zero included), lists each violation
with its partition, offsets, records, events and detail, groups the losses by cause, and the Parquet and JSON files
read back as the same findings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hightide.audit.findings import finding, from_row
from hightide.history.generate import generate_lake
from hightide.history.outputs import (
    AUDITED_RECORD,
    FindingsError,
    audited_lake,
    lake_files,
    read_findings,
    summary_text,
    write_outputs,
)

LOST = finding(
    "acks_all_durable",
    topic="orders",
    partition=0,
    first_offset=3,
    last_offset=5,
    records=["v3", "v4", "v5"],
    events=["broker:2:b:17"],
    detail="acknowledged records 3..5 are not in the final log of replica 2",
)
ACKS1 = finding(
    "acks_all_durable",
    topic="orders",
    partition=1,
    first_offset=7,
    last_offset=7,
    records=["v7"],
    cause="acks1_leader_change",
    detail="acks=1 record 7 lost when epoch 3 began",
)
UNCLEAN = finding(
    "acks_all_durable",
    topic="orders",
    partition=1,
    first_offset=9,
    last_offset=9,
    records=["v9"],
    cause="unclean_election",
    detail="record 9 lost in an unclean election",
)
FINDINGS = sorted([LOST, ACKS1, UNCLEAN])


def test_the_summary_lists_violations_then_losses_by_cause() -> None:
    text = summary_text(FINDINGS, ["acks_all_durable", "one_leader_per_epoch"], Path("lake"), 1234)

    assert text.startswith("audit of lake: 1234 events, 2 invariants checked, 1 violations, 2 attributed losses")
    counts = text.split("findings per invariant:\n")[1].split("\n\n")[0]
    assert [line.split() for line in counts.splitlines()] == [["acks_all_durable", "3"], ["one_leader_per_epoch", "0"]]
    violations = text.index("violations (1):")
    losses = text.index("attributed losses (2), by cause:")
    assert violations < text.index("orders-0  offsets 3..5") < losses
    assert "records: v3, v4, v5" in text and "events: broker:2:b:17" in text
    assert losses < text.index("acks1_leader_change (1):") < text.index("unclean_election (1):")
    assert text.rstrip().endswith("result: VIOLATED")


def test_only_attributed_losses_is_a_clean_result() -> None:
    text = summary_text([ACKS1], ["acks_all_durable"], Path("lake"), 10)

    assert "0 violations" in text and text.rstrip().endswith("result: clean (no invariant violated)")


def test_the_files_read_back_as_the_findings(tmp_path: Path) -> None:
    written = write_outputs(FINDINGS, "summary\n", tmp_path / "out")

    assert sorted(p.name for p in written) == ["findings.json", "findings.parquet", "summary.txt"]
    assert [from_row(row) for row in json.loads((tmp_path / "out" / "findings.json").read_text())] == FINDINGS
    assert [from_row(row) for row in pq.read_table(tmp_path / "out" / "findings.parquet").to_pylist()] == FINDINGS
    assert (tmp_path / "out" / "summary.txt").read_text() == "summary\n"


# -- the audit's record of its lake, and the findings handed to `history report --findings` -----------------------


def _audited(tmp_path: Path) -> tuple[Path, Path]:
    """A small generated lake and an audit's outputs for it, with the record of the files it read."""
    lake = tmp_path / "lake"
    generate_lake(lake, 600, events_per_hour=200)
    out = tmp_path / "out"
    listing = lake_files(lake)
    write_outputs(FINDINGS, "summary\n", out, audited_lake(lake, 600, listing, listing))
    return lake, out


def test_the_findings_of_the_lake_as_it_is_are_handed_back(tmp_path: Path) -> None:
    lake, out = _audited(tmp_path)

    assert read_findings(out, lake) == FINDINGS
    assert sorted(p.name for p in out.glob("*.json*")) == ["findings.json"]  # the record is not one of them


def test_findings_of_another_state_of_the_lake_are_refused(tmp_path: Path) -> None:
    lake, out = _audited(tmp_path)
    later = lake / "date=2030-01-01" / "hour=00"
    later.mkdir(parents=True)
    first = sorted(lake.rglob("*.parquet"))[0]
    (later / first.name).write_bytes(first.read_bytes())  # a batch archived after the audit

    with pytest.raises(FindingsError, match="audit it again"):
        read_findings(out, lake)


def test_a_grown_file_is_another_state_of_the_lake(tmp_path: Path) -> None:
    lake, out = _audited(tmp_path)
    grown = sorted(lake.rglob("*.parquet"))[0]
    grown.write_bytes(grown.read_bytes() + b"\0")

    with pytest.raises(FindingsError, match="audit it again"):
        read_findings(out, lake)


def test_an_audit_during_which_the_lake_changed_vouches_for_nothing(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    generate_lake(lake, 600, events_per_hour=200)
    listing = lake_files(lake)
    out = tmp_path / "out"
    write_outputs(FINDINGS, "summary\n", out, audited_lake(lake, 600, listing[:-1], listing))

    with pytest.raises(FindingsError, match="changed while that audit ran"):
        read_findings(out, lake)


def test_a_directory_without_an_audits_record_is_refused(tmp_path: Path) -> None:
    lake, out = _audited(tmp_path)
    write_outputs(FINDINGS, "summary\n", out)  # rewritten without a record: the old one goes first

    with pytest.raises(FindingsError, match="no audit's findings there"):
        read_findings(out, lake)
    with pytest.raises(FindingsError, match="no audit's findings there"):
        read_findings(tmp_path / "nowhere", lake)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ("{not json", "is not an audit's record"),
        ('{"format": 2, "files": []}', "has format 2"),
        ('{"format": 1, "files": "x"}', "is not an audit's record"),
        ("[]", "is not an audit's record"),
    ],
)
def test_a_damaged_record_is_refused_in_one_line(tmp_path: Path, record: str, message: str) -> None:
    lake, out = _audited(tmp_path)
    (out / AUDITED_RECORD).write_text(record)

    with pytest.raises(FindingsError, match=message) as caught:
        read_findings(out, lake)
    assert "\n" not in str(caught.value)
