"""The Spark `storage_refusal_takes_replica_offline` (`hightide.history.checks.storage`) finds exactly what the
plain-Python specification (`hightide.audit.checks.storage`) finds, row for row.

Method: the histories of `unit.audit.test_storage_refusal`: a real ReplicaManager and the ignore_storage_refusals
mutant over a disk that refuses an append, and the hand-written ones. Each is tagged (topic names and emitter
incarnations) and all go into one real lake, read back once with `read_lake`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hightide.audit.checks import storage as specification
from hightide.audit.history import History
from hightide.core.replica_manager import ReplicaManager
from hightide.history.checks import storage as spark_checks
from hightide.history.events import read_lake
from hightide.history.findings import collect_findings
from hightide.protocol.envelope import Envelope
from simulation.mutants import IgnoreStorageRefusals
from support.lake_history import write_lake
from unit.audit.test_storage_refusal import hand_written, refusal_history


def _tagged(tag: str, history: list[Envelope]) -> list[Envelope]:
    tagged = []
    for envelope in history:
        event = envelope.event
        if hasattr(event, "topic"):
            event = dataclasses.replace(event, topic=f"{tag}.{event.topic}")  # type: ignore[call-arg]
        emitter = dataclasses.replace(envelope.emitter, incarnation=f"{tag}.{envelope.emitter.incarnation}")
        tagged.append(dataclasses.replace(envelope, emitter=emitter, event=event))
    return tagged


def test_spark_finds_what_the_specification_finds(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    histories = {name: history for name, (history, _) in hand_written().items()}
    histories["real"] = refusal_history(tmp_path / "real", ReplicaManager, monkeypatch).history
    histories["mutant"] = refusal_history(tmp_path / "mutant", IgnoreStorageRefusals, monkeypatch).history
    everything = [envelope for name, history in histories.items() for envelope in _tagged(name, history)]

    python = sorted(specification.storage_refusal_takes_replica_offline(History.of(everything)))
    frame = read_lake(spark, write_lake(everything, tmp_path / "lake")).cache()
    try:
        on_spark = collect_findings(spark_checks.storage_refusal_takes_replica_offline(frame))
    finally:
        frame.unpersist()

    expected = {name: count for name, (_, count) in hand_written().items()} | {"real": 0, "mutant": 1}
    found = {name: sum(f.topic.startswith(f"{name}.") for f in python) for name in histories}
    assert found == expected
    assert on_spark == python
