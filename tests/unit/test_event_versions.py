"""Old versions of an event type read as the current one, wherever events are read: the envelope, the lake.

Method: version 1 controller events written out as a version-1 writer wrote them (the same fields less the ones
version 2 added), decoded by `from_plain` and read back from a Parquet table made with version-1 rows; each comes
back as the current version with the added fields at their defaults (-1: not known). A version this reader does
not know is refused. The catalogue's own rule (a field added later has a default and its version) is checked.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import ClassVar

import pyarrow as pa
import pytest

from hightide.lake.schema import SCHEMA, from_table, to_table
from hightide.protocol.envelope import Emitter, Envelope, from_plain, to_plain
from hightide.protocol.events import (
    CATALOGUE,
    NO_CONTROLLER_EPOCH,
    NO_METADATA_OFFSET,
    ControllerElected,
    Event,
    InvalidEvent,
    PartitionChanged,
    catalogued,
    decision_stamp,
    stamped,
)

CONTROLLER = Emitter("controller", 1, "c-1")
CHANGED = PartitionChanged(
    topic="orders",
    partition=0,
    replicas=(1, 2, 3),
    isr=(1, 2),
    elr=(),
    last_known_elr=(),
    leader=1,
    leader_epoch=4,
    partition_epoch=9,
    reason="isr_shrink",
    controller_epoch=2,
    metadata_offset=17,
)


def version_1(envelope: Envelope) -> dict[str, object]:
    """The envelope as a version-1 writer wrote it: without the fields version 2 added."""
    plain = to_plain(envelope)
    added = {name for names in type(envelope.event).FIELDS_ADDED.values() for name in names}
    plain["event"] = {k: v for k, v in plain["event"].items() if k not in added}
    plain["version"] = 1
    return plain


def test_a_version_1_decision_reads_as_version_2_with_its_stamp_unknown() -> None:
    old = version_1(Envelope("c", CONTROLLER, 0, 1_000, 5, CHANGED))
    event = from_plain(old).event
    assert type(event).VERSION == 2
    assert event == dataclasses.replace(
        CHANGED, controller_epoch=NO_CONTROLLER_EPOCH, metadata_offset=NO_METADATA_OFFSET
    )
    assert decision_stamp(event) == (-1, -1)


def test_a_version_1_controller_elected_has_no_takeover_offset() -> None:
    elected = ControllerElected(controller=1, controller_epoch=3, metadata_offset=40)
    event = from_plain(version_1(Envelope("c", CONTROLLER, 0, 1_000, 5, elected))).event
    assert event == ControllerElected(controller=1, controller_epoch=3, metadata_offset=-1)


@pytest.mark.parametrize("version", [0, 3, True, "2"])
def test_a_version_this_reader_does_not_know_is_refused(version: object) -> None:
    plain = to_plain(Envelope("c", CONTROLLER, 0, 1_000, 5, CHANGED))
    plain["version"] = version
    with pytest.raises(InvalidEvent):
        from_plain(plain)


def test_a_version_1_event_carrying_a_field_version_1_did_not_have_is_refused() -> None:
    """Upcasting fills in what was missing; it does not excuse a field that is neither old nor new."""
    plain = version_1(Envelope("c", CONTROLLER, 0, 1_000, 5, CHANGED))
    plain["event"] = {**plain["event"], "colour": "red"}  # type: ignore[dict-item]
    with pytest.raises(InvalidEvent):
        from_plain(plain)


def test_the_lake_reads_version_1_rows_as_current_events() -> None:
    envelope = Envelope("c", CONTROLLER, 0, 1_000, 5, CHANGED)
    table = to_table([(7, envelope)])
    rows = table.to_pylist()
    old_fields = version_1(envelope)["event"]
    rows[0] = {**rows[0], "version": 1, "payload": json.dumps(old_fields, separators=(",", ":"))}
    old_table = pa.Table.from_pylist(rows, schema=SCHEMA)
    ((sequence, read),) = from_table(old_table)
    assert sequence == 7
    assert read.event == dataclasses.replace(CHANGED, controller_epoch=-1, metadata_offset=-1)


def test_stamping_touches_decisions_only() -> None:
    assert stamped(CHANGED, 5, 6) == dataclasses.replace(CHANGED, controller_epoch=5, metadata_offset=6)
    elected = ControllerElected(controller=1, controller_epoch=3, metadata_offset=40)
    assert stamped(elected, 5, 6) is elected
    decided = [name for name, cls in CATALOGUE.items() if "metadata_offset" in cls.__dataclass_fields__]
    assert set(decided) == {
        "BrokerRegistered", "BrokerFenced", "BrokerUnfenced", "ControlledShutdownStarted", "ReplicaMarkedOffline",
        "TopicCreated", "TopicConfigsAltered", "TopicDeleted", "PartitionChanged", "LeaderElected",
        "ControllerElected", "ControllerDeposed", "ProducerIdsAllocated", "AlterPartitionAnswered",
        # partition reassignment (issue 13)
        "PartitionReassignmentStarted", "PartitionReassignmentCompleted", "PartitionReassignmentCancelled",
        # a replaced log directory (branch i13-elr)
        "LogDirReplaced",
    }  # fmt: skip


def test_the_catalogue_refuses_an_added_field_without_a_default() -> None:
    with pytest.raises(AssertionError, match="need defaults"):

        @catalogued
        @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
        class Broken(Event):
            """Version 2 added `new` without a default."""

            VERSION: ClassVar[int] = 2
            FIELDS_ADDED: ClassVar[Mapping[int, tuple[str, ...]]] = {2: ("new",)}

            old: int
            new: int

    assert "Broken" not in CATALOGUE
