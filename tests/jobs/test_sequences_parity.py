"""`emitter_sequences_contiguous` on Spark agrees with the plain-Python specification, row for row.

Method: each history (clean simulated runs, a mutant's run, a simulated run damaged on its way to the lake, and the
hand-made ones of the unit tests) is archived into a real lake; the Python check runs over `History.of(envelopes)`
and the Spark check over `read_lake`'s DataFrame (built once per history, cached), and the sorted findings must be
equal. The damaged and hand-made histories must give findings, the clean ones none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hightide.audit.checks import sequences as python_sequences
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.history.checks import sequences as spark_sequences
from hightide.history.events import read_lake
from hightide.history.findings import collect_findings
from hightide.protocol.envelope import Envelope
from support import sequence_histories, simulated
from support.lake_history import write_lake

HISTORIES: dict[str, Callable[[], list[Envelope]]] = {
    "clean-seed-1": lambda: simulated.clean_history(1),
    "clean-seed-2": lambda: simulated.clean_history(2),
    "mutant-no_divergence_check": lambda: simulated.mutant_history(simulated.mutant("no_divergence_check"), 0),
    "damaged-seed-3": lambda: simulated.damaged(simulated.clean_history(3)),
    **{f"hand-made-{name}": make for name, make in sequence_histories.HAND_MADE.items()},
}
VIOLATING = {"damaged-seed-3", "hand-made-gap_inside", "hand-made-gap_at_start", "hand-made-clash"}


def both(spark: SparkSession, envelopes: list[Envelope], lake: Path) -> tuple[list[Finding], list[Finding]]:
    python = sorted(python_sequences.emitter_sequences_contiguous(History.of(envelopes)))
    frame = read_lake(spark, write_lake(envelopes, lake)).cache()
    try:
        on_spark = collect_findings(spark_sequences.emitter_sequences_contiguous(frame))
    finally:
        frame.unpersist()
    return python, on_spark


@pytest.mark.parametrize("name", HISTORIES)
def test_spark_finds_what_the_specification_finds(spark: SparkSession, tmp_path: Path, name: str) -> None:
    python, on_spark = both(spark, HISTORIES[name](), tmp_path / "lake")
    assert on_spark == python
    assert bool(python) == (name in VIOLATING), python


def test_the_damaged_run_shows_each_kind_of_break(spark: SparkSession, tmp_path: Path) -> None:
    """The damage is two runs of lost events and a clash; each is a finding of its own."""
    python, _ = both(spark, simulated.damaged(simulated.clean_history(3)), tmp_path / "lake")
    details = [f.detail for f in python]
    assert sum("are missing" in d for d in details) == 2
    assert sum("stored different events" in d for d in details) == 1
