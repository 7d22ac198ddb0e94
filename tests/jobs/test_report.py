"""The postmortem page shows a history's story: what a person sees when they open it, not only that a file exists.

Method: a simulated run with unclean elections allowed (seed 1: two unclean elections, then followers truncated
below their high watermarks; since KAFKA-9952 the first seed that does, found by running seeds 0 up, where seed 21
did before) is archived into a real lake; the audit's findings for it are given (one loss
attributed to the unclean election, one violation), as the audit runner would hand them over. Spark collects the
page's data (`report_data`, with `hightide.history.rebuild.timelines`), the page is rendered, and Debian's headless
Chromium opens it with no network: the DOM after its scripts ran must hold the drawn plotly graphs (their SVG, each
replica's traces in the legends, the partition headings, the lost records' table rows with their cause), Chromium's
console must show no script error, the HTML must fetch nothing, and the
screenshot must not be blank (decoded here with a small PNG reader). The command's bad input exits 2 with one line.

Chromium: `make test` installs Debian's package when it is missing (the `system-deps` target); without it these
tests fail under CI=true and skip, saying why, elsewhere.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hightide.audit.findings import Finding, envelope_id, finding
from hightide.history import report_cli
from hightide.history.outputs import audited_lake, lake_files, write_outputs
from hightide.history.report import (
    MembershipChange,
    PartitionData,
    ReplicaPoint,
    ReportData,
    marked_elections,
    membership_spans,
    render_report,
    replica_step_points,
    report_data,
)
from hightide.protocol import events
from hightide.protocol.envelope import Envelope
from simulation.simulator import SimConfig, Simulation
from support.lake_history import write_lake

SEED = 1
STEPS = 3_000
CHROMIUM_TIMEOUT_S = 120
WINDOW = (1400, 2000)  # the screenshot's size in CSS pixels
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=15000",
)


def _chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        message = "headless Chromium is needed to check the report page: `make system-deps` installs Debian's chromium"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {message}, and /usr/bin/chromium is missing")
        pytest.skip(message)
    return found


@dataclass(frozen=True)
class Page:
    html: str
    dom: str
    console: list[str]
    screenshot: bytes
    data: ReportData
    findings: list[Finding]


def _history() -> list[Envelope]:
    simulation = Simulation(SEED, SimConfig(unclean_leader_election_enable=True, eligible_leader_replicas_enable=False))
    simulation.history = []
    simulation.run(STEPS)
    return simulation.history


def _findings(history: list[Envelope]) -> list[Finding]:
    """What the audit says of this history: the committed records a truncation removed after the unclean election
    are a loss with its cause, and (to show a violation's row) a leader outside the ISR on the other partition."""
    truncated = next(
        e
        for e in history
        if isinstance(e.event, events.LogTruncated) and e.event.truncated_to < e.event.high_watermark_before
    )
    cut = truncated.event
    assert isinstance(cut, events.LogTruncated)
    elected = next(
        e
        for e in history
        if isinstance(e.event, events.LeaderElected)
        and e.event.election == "unclean"
        and e.event.partition == cut.partition
    )
    lost = finding(
        "acknowledged_records_kept",
        topic=cut.topic,
        partition=cut.partition,
        replica=cut.replica,
        first_offset=cut.truncated_to,
        last_offset=cut.high_watermark_before - 1,
        records=["order-17", "order-18", "order-19"],
        events=[envelope_id(truncated), envelope_id(elected)],
        cause="unclean_election",
        detail=f"offsets {cut.truncated_to} to {cut.high_watermark_before - 1} were committed and are gone",
    )
    violation = finding(
        "leader_in_isr", topic=cut.topic, partition=1 - cut.partition, replica=2, detail="leader 2 is not in ISR [1, 3]"
    )
    return [lost, violation]


def _run_chromium(chromium: str, args: list[str], profile: Path) -> subprocess.CompletedProcess[bytes]:
    command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, timeout=CHROMIUM_TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def page(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Page:
    chromium = _chromium()
    work = tmp_path_factory.mktemp("report")
    history = _history()
    findings = _findings(history)
    write_lake(history, work / "lake")
    data = report_data(spark, work / "lake", findings)
    html_path = work / "report.html"
    html_path.write_text(render_report(data), encoding="utf-8")

    url = html_path.as_uri()
    dumped = _run_chromium(chromium, ["--dump-dom", url], work / "profile-dom")
    assert dumped.returncode == 0, dumped.stderr.decode(errors="replace")[-2000:]
    shot = work / "report.png"
    width, height = WINDOW
    taken = _run_chromium(
        chromium, [f"--window-size={width},{height}", f"--screenshot={shot}", url], work / "profile-png"
    )
    assert taken.returncode == 0 and shot.exists(), taken.stderr.decode(errors="replace")[-2000:]
    console = [
        line
        for line in (dumped.stderr + taken.stderr).decode(errors="replace").splitlines()
        if ":CONSOLE" in line  # Chromium's --enable-logging prints the page's console here
    ]
    return Page(html_path.read_text(), dumped.stdout.decode(), console, shot.read_bytes(), data, findings)


# -- what the page shows ---------------------------------------------------------------------------------------


def test_the_history_has_what_the_page_must_show(page: Page) -> None:
    """The premise: the collected data has the unclean elections and the truncations below the HW."""
    elections = [e.election for p in page.data.partitions for e in p.elections]
    assert "unclean" in elections
    assert any(t.removed_committed for p in page.data.partitions for t in p.truncations)
    assert [(p.topic, p.partition) for p in page.data.partitions] == [("orders", 0), ("orders", 1)]


def test_every_partition_is_drawn_with_each_replicas_lines_and_bands(page: Page) -> None:
    figures = 1 + len(page.data.partitions)  # the event counts, then one per partition
    assert len(re.findall(r'class="plotly-graph-div js-plotly-plot"', page.dom)) == figures, "a figure did not draw"
    assert len(re.findall(r'class="main-svg"', page.dom)) >= 2 * figures
    legend = set(re.findall(r'class="legendtext"[^>]*>([^<]+)<', page.dom))
    for replica in (1, 2, 3):
        assert {f"replica {replica} LEO", f"replica {replica} HW"} <= legend, legend
    assert {"leader", "in ISR", "out of ISR", "unclean election", "clean election", "truncated below HW"} <= legend
    for partition in page.data.partitions:
        heading = f"{partition.topic} · partition {partition.partition}"
        assert re.search(rf"<h2>{re.escape(heading)}", page.dom), f"no heading {heading!r}"
    # The membership bands are drawn as bars: each replica's row label is on the band chart.
    assert {"replica 1", "replica 2", "replica 3"} <= set(
        re.findall(r'class="y\d*tick"><text[^>]*data-unformatted="(replica \d)"', page.dom)
    )


def test_the_lost_records_table_names_each_loss_and_its_cause(page: Page) -> None:
    rows = re.findall(r"<tr class=[\"']finding (loss|violation)[\"']>(.*?)</tr>", page.dom, flags=re.S)
    cells = {kind: re.sub(r"<[^>]+>", "|", row) for kind, row in rows}
    lost = page.findings[0]
    assert "unclean election" in cells["loss"]
    assert f"{lost.first_offset}\u2013{lost.last_offset}" in cells["loss"]
    assert "order-17, order-18, order-19" in cells["loss"]
    assert "violation of leader_in_isr" in cells["violation"]
    assert "Audit: 1 violation of 1 invariant" in page.dom


def test_the_truncations_table_says_what_was_removed_below_the_hw(page: Page) -> None:
    below = [t for p in page.data.partitions for t in p.truncations if t.removed_committed]
    rows = re.findall(r"<tr class=[\"']bad[\"']>(.*?)</tr>", page.dom, flags=re.S)
    texts = [re.sub(r"<[^>]+>", "|", row) for row in rows]
    for truncation in below:
        removed = f"{truncation.truncated_to}\u2013{truncation.log_end_offset_before - 1}"
        assert any(removed in text and "committed records removed" in text for text in texts), (removed, texts)


def test_the_page_needs_no_network_and_its_scripts_ran_without_error(page: Page) -> None:
    sources = _external_sources(page.html) + _external_sources(page.dom)
    assert sources == [], f"the page fetches {sources}"
    errors = [line for line in page.console if "Uncaught" in line or "Error" in line or "Failed" in line]
    assert errors == [], errors


def test_the_screenshot_is_a_picture_not_a_blank_page(page: Page) -> None:
    width, height, pixels = _decode_png(page.screenshot)
    assert (width, height) == WINDOW
    samples = Counter(pixels[i : i + 3] for i in range(0, len(pixels), 3 * 7))  # every 7th pixel
    assert len(samples) > 200, f"only {len(samples)} distinct colours: the page looks blank"
    _, most = samples.most_common(1)[0]
    assert most < 0.8 * samples.total(), "four fifths of the screenshot is one colour"


# -- the pieces under the page ---------------------------------------------------------------------------------


def test_membership_bands_follow_the_partition_and_the_replicas_own_offline_state() -> None:
    """Given replica 3 in the ISR, then moved to the ELR, then its storage failing (offline) while leadership moves,
    then back: its band is in ISR, in ELR, offline (split where the partition changed), then out of the ISR."""

    def change(wall_ms: int, isr: tuple[int, ...], elr: tuple[int, ...], leader: int, epoch: int) -> MembershipChange:
        return MembershipChange(wall_ms, (1, 2, 3), isr, elr, leader, epoch, epoch, "PartitionChanged")

    def point(wall_ms: int, online: bool) -> ReplicaPoint:
        return ReplicaPoint(wall_ms, 0, 5, 5, online, "LogOpened" if online else "ReplicaOffline")

    partition = PartitionData(
        topic="orders",
        partition=0,
        replicas={3: (point(5, True), point(25, False), point(40, True))},
        membership=(change(10, (1, 2, 3), (), 1, 0), change(20, (1, 2), (3,), 1, 1), change(30, (2,), (), 2, 2)),
        elections=(),
        truncations=(),
    )
    spans = [(s.state, s.start_ms, s.end_ms) for s in membership_spans(partition, 50) if s.replica == 3]
    assert spans == [
        ("in ISR", 10, 20),
        ("in ELR", 20, 25),
        ("offline", 25, 30),
        ("offline", 30, 40),
        ("out of ISR", 40, 50),
    ]
    leader = [(s.state, s.start_ms, s.end_ms) for s in membership_spans(partition, 50) if s.replica == 2]
    assert leader == [("in ISR", 10, 20), ("in ISR", 20, 30), ("leader", 30, 50)]


def test_a_replicas_step_line_keeps_only_changes_and_is_capped(spark: SparkSession) -> None:
    """Given replica 1's states with a repeat and two states in one millisecond, its line keeps the changes and the
    millisecond's last state (by emitter position); given replica 2's 1,000 changes and a cap of 20 points, at most
    20 are kept, the first and the last among them, and the page is told how many were left out."""
    columns = "topic string, partition int, replica int, wall_ms bigint, position bigint, event_type string, "
    columns += "log_start_offset bigint, log_end_offset bigint, high_watermark bigint, online boolean"
    small = [(0, 0, 0), (10, 1, 1), (20, 2, 1), (30, 3, 2), (30, 4, 5)]  # (wall_ms, position, LEO)
    rows = [("orders", 0, 1, t, position, "RecordsAppended", 0, leo, 0, True) for t, position, leo in small]
    rows[2] = (*rows[2][:7], 1, 0, True)  # a repeat of the state before: not a change
    rows += [("orders", 0, 2, 1_000 + t, t, "RecordsAppended", 0, t, 0, True) for t in range(1_000)]
    timeline = spark.createDataFrame(rows, columns)

    points, cut = replica_step_points(timeline, timeline, points_max=20)

    assert [(p.wall_ms, p.log_end_offset) for p in points[(("orders", 0), 1)]] == [(0, 0), (10, 1), (30, 5)]
    capped = points[(("orders", 0), 2)]
    assert len(capped) <= 20
    assert (capped[0].log_end_offset, capped[-1].log_end_offset) == (0, 999)
    assert cut == {(("orders", 0), 2): 1_000 - len(capped)}


def test_an_election_whose_state_never_committed_is_marked_so(spark: SparkSession) -> None:
    """Given two LeaderElected of partition 0, only the first of which has a committed state with its leader and
    leader epoch (the second controller was fenced before appending), the second is marked never committed."""
    columns = "topic string, partition int, wall_ms bigint, event_id string, leader int, previous_leader int, "
    columns += "leader_epoch int, election string"
    elected = spark.createDataFrame(
        [
            ("orders", 0, 10, "controller:1:a:5", 2, 1, 3, "clean"),
            ("orders", 0, 20, "controller:2:b:9", 3, 2, 4, "unclean"),
        ],
        columns,
    )
    committed = spark.createDataFrame(
        [("orders", 0, 2, 3)], "topic string, partition int, leader int, leader_epoch int"
    )

    elections, cut = marked_elections(elected, committed)

    assert [(e.leader_epoch, e.election, e.committed) for e in elections[("orders", 0)]] == [
        (3, "clean", True),
        (4, "unclean", False),
    ]
    assert cut == {}


# -- the command ----------------------------------------------------------------------------------------------


def _report_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hightide history")
    report_cli.add_parser(parser.add_subparsers(dest="action", required=True))
    return parser.parse_args(["report", *argv])


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing-lake", "is not a directory"),
        ("empty-lake", "holds no event files"),
        ("no-out-dir", "does not exist"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, expected: str
) -> None:
    lake, out = tmp_path / "lake", tmp_path / "report.html"
    if setup != "missing-lake":
        lake.mkdir()
    if setup == "no-out-dir":
        write_lake(_history()[:50], lake)
        out = tmp_path / "nowhere" / "report.html"
    args = _report_args("--lake", str(lake), "--out", str(out))
    assert args.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err, err
    assert not out.exists()


def _audited_out(lake: Path, out: Path, findings: list[Finding]) -> None:
    """An audit's outputs for `lake` as it is now (`hightide history audit --out` writes the same)."""
    listing = lake_files(lake)
    write_outputs(findings, "summary\n", out, audited_lake(lake, 0, listing, listing))


def test_the_page_draws_the_findings_it_is_given_without_auditing_again(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = _history()
    lake, out, html = tmp_path / "lake", tmp_path / "audit", tmp_path / "report.html"
    write_lake(history, lake)
    # Not what an audit of this history finds (no leader 2 outside the ISR): the page can only have it from here.
    given = [finding("leader_in_isr", topic="orders", partition=0, replica=2, detail="leader 2 is not in ISR [7, 8]")]
    _audited_out(lake, out, given)

    args = _report_args("--lake", str(lake), "--out", str(html), "--findings", str(out))
    assert args.run(args) == 0, capsys.readouterr().err
    page = html.read_text()
    assert "leader 2 is not in ISR [7, 8]" in page and "1 violation" in page


def test_findings_of_another_state_of_the_lake_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = _history()
    lake, out, html = tmp_path / "lake", tmp_path / "audit", tmp_path / "report.html"
    write_lake(history[:50], lake)
    _audited_out(lake, out, [])
    write_lake(history, tmp_path / "later")  # the lake as a later export leaves it: other files
    args = _report_args("--lake", str(tmp_path / "later"), "--out", str(html), "--findings", str(out))
    assert args.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "audit it again" in err and "Traceback" not in err, err
    assert not html.exists()


# -- helpers ---------------------------------------------------------------------------------------------------


class _Sources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value and re.match(r"\s*(https?:)?//", value) and tag != "a":
                self.found.append(f"<{tag} {name}={value}>")


def _external_sources(html_text: str) -> list[str]:
    parser = _Sources()
    parser.feed(html_text)
    return parser.found


def _decode_png(data: bytes) -> tuple[int, int, bytes]:
    """A small PNG reader for Chromium's screenshots (8-bit RGB or RGBA, not interlaced): width, height and the
    RGB bytes, row by row."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, b"", b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type, interlace)
    channels = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, previous, channels)
        rows.append(line)
        previous = line
    rgb = bytearray()
    for line in rows:
        rgb += line if channels == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3)
    return width, height, bytes(rgb)


def _unfilter(kind: int, line: bytearray, previous: bytearray, channels: int) -> None:
    for i in range(len(line)):
        left = line[i - channels] if i >= channels else 0
        up, corner = previous[i], previous[i - channels] if i >= channels else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            estimate = left + up - corner
            pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
            line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
