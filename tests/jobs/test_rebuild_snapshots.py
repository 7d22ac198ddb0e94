"""Snapshots and `hightide history rebuild`: a snapshot is a full replay up to its hour, a rebuild from it is a
rebuild from scratch, and the command prints the state at an instant (or one line and exit 2 on bad input).

Method: a faulty simulated run (crashes, truncations, controller failover, retention, an offline replica) is
stretched in wall time so it spans several hours (order-preserving: the fold is the same), archived into a real
lake, and snapshotted by the job; each snapshot's replicas and each rebuild --at are compared with
`hightide.audit.rebuild.rebuild` of the same events. The generator's histories are read back through the lake's
own reader (every envelope checked) and must fold without an anomaly.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from hightide.audit.auditor import audit
from hightide.audit.findings import event_id
from hightide.audit.rebuild import ClusterState, rebuild
from hightide.history.generate import T0_MS, generate_lake
from hightide.history.rebuild_cli import add_parser, controller_lists, main, parse_instant, short_job
from hightide.history.snapshot import (
    REPLICAS_SCHEMA,
    SNAPSHOT_FORMAT,
    SNAPSHOTS_DIR,
    Segment,
    lake_files,
    latest_valid,
    rebuild_at,
    segment_after,
    snapshots,
    swap_in,
    write_snapshots,
)
from hightide.lake import count_events
from hightide.lake.layout import HOUR_MS, PartFile, part_name, scan_lake
from hightide.lake.reader import read_envelopes
from hightide.protocol import events as ev
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event
from simulation.simulator import Simulation
from support import metadata_histories as mh
from support.lake_history import write_lake

STRETCH = 3_000  # a simulated second becomes 50 minutes


def _stretched_faulty_run(seed: int) -> list[Envelope]:
    simulation = Simulation(seed)
    simulation.history = []
    simulation.total_steps = 2_000
    for _ in range(2_000):
        simulation.step()
    simulation.heal()
    for _ in range(300):
        simulation.step()
    assert simulation.history is not None
    start = min(e.wall_ms for e in simulation.history)
    return [dataclasses.replace(e, wall_ms=start + (e.wall_ms - start) * STRETCH) for e in simulation.history]


def _replicas(state: ClusterState) -> dict[tuple[str, int, int], tuple[int, int, int, tuple[tuple[int, int], ...]]]:
    return {
        key: (r.log_end_offset, r.high_watermark, r.log_start_offset, r.epoch_entries)
        for key, r in state.replicas.items()
    }


def _rows(rows: Sequence[Any]) -> dict[tuple[str, int, int], tuple[int, int, int, tuple[tuple[int, int], ...]]]:
    return {
        (r.topic, r.partition, r.replica): (
            r.log_end_offset,
            r.high_watermark,
            r.log_start_offset,
            tuple((int(a), int(b)) for a, b in r.epoch_entries),
        )
        for r in rows
    }


@pytest.fixture(scope="module")
def stretched(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Envelope], Path]:
    # Since KAFKA-9952 the first run from seed 100 whose stretched run spans three hours with a truncation, a
    # controller failover and a replica offline at some instant (102 was, before it; its run now spans two hours).
    history = _stretched_faulty_run(114)
    lake = write_lake(history, tmp_path_factory.mktemp("snapshots") / "lake")
    assert len(lake_files(lake)) >= 3, "the run spans several hours"
    return history, lake


def test_each_snapshot_is_the_full_replay_to_its_hour_and_the_job_is_idempotent(
    spark: SparkSession, stretched: tuple[list[Envelope], Path]
) -> None:
    history, lake = stretched
    written = write_snapshots(spark, lake)
    assert (written.hours, written.tail) == (list(lake_files(lake))[1:], True)
    assert scan_lake(lake).files, "the lake still scans with its snapshots in it"
    for snapshot in snapshots(lake):
        held = spark.read.schema(REPLICAS_SCHEMA).parquet(str(snapshot.directory / "replicas")).collect()
        expected = rebuild([e for e in history if e.wall_ms < snapshot.boundary_ms])
        assert _rows(held) == _replicas(expected), f"snapshot at hour {snapshot.hour}"
    tail = lake / SNAPSHOTS_DIR / "tail" / "_manifest.json"
    written_at = tail.stat().st_mtime_ns
    again = write_snapshots(spark, lake)
    assert (again.hours, again.tail) == ([], False), "up-to-date snapshots and tail are kept as they are"
    assert tail.stat().st_mtime_ns == written_at


def test_a_rebuild_from_a_snapshot_is_a_rebuild_from_scratch(
    spark: SparkSession, stretched: tuple[list[Envelope], Path]
) -> None:
    history, lake = stretched
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    at_ms = hours[-1] * HOUR_MS + 20 * 60_000  # into the last hour, after its snapshot
    from_snapshot = rebuild_at(spark, lake, at_ms)
    assert from_snapshot.snapshot_hour == hours[-1]
    expected = rebuild([e for e in history if e.wall_ms <= at_ms])
    assert _rows(from_snapshot.replicas) == _replicas(expected)
    partitions = {
        (p.topic, p.partition): (tuple(p.isr), p.leader, p.leader_epoch, p.partition_epoch)
        for p in from_snapshot.partitions
    }
    assert partitions == {
        key: (p.isr, p.leader, p.leader_epoch, p.partition_epoch) for key, p in expected.partitions.items()
    }


def _compared(spark: SparkSession, lake: Path, at_ms: int) -> tuple[dict[str, Any], bool, int | None]:
    """What `rebuild --at` shows at `at_ms` (state, offline replicas, abandoned intents), whether the controller side
    was the snapshot's continuation, and the snapshot's hour."""
    rebuilt = rebuild_at(spark, lake, at_ms)
    offline, abandoned = controller_lists(rebuilt)
    shown = {
        "replicas": _rows(rebuilt.replicas),
        "partitions": {
            (p.topic, p.partition): (
                tuple(p.replicas),
                tuple(p.isr),
                tuple(p.elr),
                tuple(p.last_known_elr),
                p.leader,
                p.leader_epoch,
                p.partition_epoch,
            )
            for p in rebuilt.partitions
        },
        "offline": {key: tuple(replicas) for key, replicas in offline.items()},
        "abandoned": [
            (a["event_id"], a["event_type"], a["controller_epoch"], a["metadata_offset"], a["committed_below"])
            for a in abandoned
        ],
    }
    return shown, rebuilt.continuation, rebuilt.snapshot_hour


def _replayed(history: Sequence[Envelope], at_ms: int) -> dict[str, Any]:
    """The same, from `hightide.audit.rebuild.rebuild` of every event up to `at_ms`."""
    state = rebuild([e for e in history if e.wall_ms <= at_ms])
    return {
        "replicas": _replicas(state),
        "partitions": {
            key: (p.replicas, p.isr, p.elr, p.last_known_elr, p.leader, p.leader_epoch, p.partition_epoch)
            for key, p in state.partitions.items()
        },
        "offline": dict(state.offline_replicas),
        "abandoned": [
            (
                event_id(a.emitter.service, a.emitter.emitter_id, a.emitter.incarnation, a.sequence),
                a.event_type,
                a.controller_epoch,
                a.metadata_offset,
                a.committed_below,
            )
            for a in state.abandoned
        ],
    }


def _around_boundaries(lake: Path) -> list[int]:
    """Instants just before, at and half an hour after each snapshot boundary."""
    return [
        at
        for hour in list(lake_files(lake))[1:]
        for at in (hour * HOUR_MS - 1, hour * HOUR_MS, hour * HOUR_MS + HOUR_MS // 2)
    ]


@pytest.mark.parametrize("seed", [102, 107])
def test_a_rebuild_from_a_snapshot_is_the_full_replay_around_every_boundary(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    """Given a faulty run (failovers, offline replicas) over several hours and its snapshots, the state, the offline
    replicas and the abandoned intents at instants before, at and after each boundary are the full replay's, and
    the controller side came from the snapshot's continuation (nothing after a boundary undid it)."""
    history = _stretched_faulty_run(seed)
    lake = write_lake(history, tmp_path / "lake")
    write_snapshots(spark, lake)
    for at_ms in _around_boundaries(lake):
        shown, continuation, hour = _compared(spark, lake, at_ms)
        assert shown == _replayed(history, at_ms), f"at {at_ms}"
        assert hour is not None and continuation, f"at {at_ms}: the continuation was not used"


def test_an_instant_between_two_snapshots_is_folded_from_the_later_ones_segment(
    spark: SparkSession, stretched: tuple[list[Envelope], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given snapshots at each hour, an instant inside an hour that has a snapshot at both ends shows the full
    replay's state and lists from the later snapshot's segment (the events since the earlier one, ordered and parsed
    when it was written): with that hour's lake files made unreadable (names kept, so both snapshots stay valid), the
    answer is still the replay's, so nothing of the hour was read again. The lake's last hour has no later snapshot:
    an instant in it reads the tail's segment (the events since the last snapshot) while the lake holds exactly the
    files it was written from, and the lake once another batch lands there, until the job writes the tail again."""
    history, original = stretched
    lake = tmp_path / "lake"
    shutil.copytree(original, lake)
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    middle = hours[1]
    for part in lake_files(lake)[middle]:
        part.path.write_bytes(b"not parquet: an instant between two snapshots reads the segment")
    for at_ms in (middle * HOUR_MS, middle * HOUR_MS + HOUR_MS // 2, (middle + 1) * HOUR_MS - 2):
        shown, continuation, hour = _compared(spark, lake, at_ms)
        assert shown == _replayed(history, at_ms), f"at {at_ms}"
        assert (hour, continuation) == (middle, True), f"at {at_ms}"
        assert rebuild_at(spark, lake, at_ms).segment == f"hour={hours[2]}", f"at {at_ms}"
    at_ms = hours[-1] * HOUR_MS + HOUR_MS // 2
    shown, _, _ = _compared(spark, lake, at_ms)
    assert shown == _replayed(history, at_ms)
    assert rebuild_at(spark, lake, at_ms).segment == "tail"
    # A copy of one of the hour's batches, under another batch's name: the same events (copies are dropped), but
    # files the tail was not written from.
    landed = lake_files(lake)[hours[-1]][0].path
    shutil.copy(landed, landed.parent / part_name(90_000, 90_001, 1, 1))
    shown, _, _ = _compared(spark, lake, at_ms)
    assert shown == _replayed(history, at_ms)
    assert rebuild_at(spark, lake, at_ms).segment is None
    capsys.readouterr()
    assert main(["snapshot", "--lake", str(lake)]) == 0
    assert capsys.readouterr().out == "the tail since the last snapshot written\n"
    assert rebuild_at(spark, lake, at_ms).segment == "tail"


def _moved_start_story() -> list[Envelope]:
    """Broker 1's replica opened in hour 0; in hour 1 two new incarnations append to it: "b" stamps its first event
    (by sequence) 1:30 and its second 1:10 (its clock went back), "c" starts at 1:20 and appends once more in hour 2.
    At 1:25 the instant's own order puts "b" (its events by then start at 1:10) before "c": the log end is c's 7. The
    whole hour's order puts "b" (starting at 1:30) after "c": folded in that order, 1:25 would end at b's 5."""

    def appended(log_end_offset: int) -> Event:
        return ev.RecordsAppended(
            topic=mh.T,
            partition=0,
            replica=1,
            leader_epoch=1,
            base_offset=log_end_offset - 1,
            last_offset=log_end_offset - 1,
            record_count=1,
            size_bytes=70,
            log_end_offset=log_end_offset,
            as_leader=True,
        )

    opened = ev.LogOpened(
        topic=mh.T,
        partition=0,
        replica=1,
        log_start_offset=0,
        log_end_offset=0,
        high_watermark=0,
        leader_epochs=(),
        reason="created",
    )
    at = functools.partial(_at_minute, T0_MS)
    return [
        Envelope("test", mh.broker(1, "a"), 0, at(0, 5), 0, opened),
        Envelope("test", mh.broker(1, "b"), 0, at(1, 30), 0, appended(3)),
        Envelope("test", mh.broker(1, "b"), 1, at(1, 10), 0, appended(5)),
        Envelope("test", mh.broker(1, "c"), 0, at(1, 20), 0, appended(7)),
        Envelope("test", mh.broker(1, "c"), 1, at(2, 5), 0, appended(8)),
    ]


def _produce_completed(offset: int) -> ev.ProduceCompleted:
    """An event of broker 1's about the partition that no fold reads."""
    return ev.ProduceCompleted(
        topic=mh.T,
        partition=0,
        leader=1,
        leader_epoch=1,
        acks=-1,
        base_offset=offset,
        last_offset=offset,
        high_watermark=0,
        error="NONE",
    )


def _late_fold_start_story() -> list[Envelope]:
    """Broker 1's replica opened in hour 0; in hour 1 incarnation "b" starts at 1:10 with an event no fold reads (a
    ProduceCompleted) and appends at 1:40 (log end 5), and "c" starts at 1:20 and appends then (log end 7). By their
    starts "b" comes first and the log end is c's 7; started at their first folded event, "c" would come first and
    the log end would be b's 5."""
    moved = _moved_start_story()
    opened, b_appends, c_appends = moved[0], moved[1].event, moved[3].event
    at = functools.partial(_at_minute, T0_MS)
    return [
        opened,
        Envelope("test", mh.broker(1, "b"), 0, at(1, 10), 0, _produce_completed(0)),
        Envelope("test", mh.broker(1, "b"), 1, at(1, 40), 0, b_appends),
        Envelope("test", mh.broker(1, "c"), 0, at(1, 20), 0, c_appends),
    ]


def _replayed_from_the_tail_and_without_it(
    spark: SparkSession, history: list[Envelope], lake: Path, at_ms: int
) -> tuple[tuple[int, int, int, tuple[tuple[int, int], ...]], ...]:
    """Snapshots written for `lake` (which holds `history`): the replicas' states at `at_ms` from the tail, and with
    the tail gone (a batch landed since the job ran) from the events since the snapshot, must both be the full
    replay's; returns the full replay's states, sorted by replica."""
    assert count_events(lake) == len(history), "every event is in the lake (none quarantined)"
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    expected = _replicas(rebuild([e for e in history if e.wall_ms <= at_ms]))
    from_tail = rebuild_at(spark, lake, at_ms)
    assert (from_tail.snapshot_hour, from_tail.segment) == (hours[1], "tail")
    assert _rows(from_tail.replicas) == expected
    shutil.rmtree(lake / SNAPSHOTS_DIR / "tail")
    folded = rebuild_at(spark, lake, at_ms)
    assert (folded.snapshot_hour, folded.segment) == (hours[1], None)
    assert _rows(folded.replicas) == expected
    return tuple(expected[key] for key in sorted(expected))


def test_the_events_since_a_snapshot_are_ordered_by_each_incarnations_first_event_of_any_type(
    spark: SparkSession, tmp_path: Path
) -> None:
    """From a snapshot an incarnation starts at its first event of any type, as the plain rebuild orders them (not
    at its first event of a type a fold reads): from the tail and from the events since the snapshot, the state is
    the full replay's."""
    history = _late_fold_start_story()
    lake = write_lake(history, tmp_path / "lake")
    replayed = _replayed_from_the_tail_and_without_it(spark, history, lake, _at_minute(T0_MS, 1, 50))
    assert [state[0] for state in replayed] == [7]


def _clashing_copy_story() -> list[Envelope]:
    """Broker 1's replica opened in hour 0; in hour 1 incarnation "b" appends at 1:10 (log end 3) and at 1:20 gives
    sequence 1 to a ProduceCompleted, archived first, and later to an append (log end 9): two events under one
    sequence. The rebuild keeps the first archived, as the plain reader does: the log end stays 3."""
    moved = _moved_start_story()
    opened, appends = moved[0], moved[1].event
    assert isinstance(appends, ev.RecordsAppended)
    at = functools.partial(_at_minute, T0_MS)
    clash = dataclasses.replace(appends, base_offset=8, last_offset=8, log_end_offset=9)
    return [
        opened,
        Envelope("test", mh.broker(1, "b"), 0, at(1, 10), 0, appends),
        Envelope("test", mh.broker(1, "b"), 1, at(1, 20), 0, _produce_completed(2)),
        Envelope("test", mh.broker(1, "b"), 1, at(1, 20), 0, clash),
    ]


def test_of_two_events_under_one_sequence_the_state_since_a_snapshot_keeps_the_first_archived(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Given an emitter that gave one sequence to an event no fold reads and then to an append, archived in that
    order: from the tail, from the events since the snapshot and from the whole history, the append is dropped as
    the full replay drops it (the events of every type are ordered, those no fold reads too)."""
    history = _clashing_copy_story()
    lake = write_lake(history, tmp_path / "lake", events_per_message=1)  # each its own stream sequence, in order
    at_ms = _at_minute(T0_MS, 1, 50)
    replayed = _replayed_from_the_tail_and_without_it(spark, history, lake, at_ms)
    assert [state[0] for state in replayed] == [3]
    whole = _rows(rebuild_at(spark, lake, at_ms, use_snapshots=False).replicas)
    assert tuple(whole[key] for key in sorted(whole)) == replayed


def _at_minute(start: int, hour: int, minute: int) -> int:
    return start + hour * HOUR_MS + minute * 60_000


def test_a_segment_is_not_used_where_an_incarnations_start_moves(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given an incarnation whose clock went back inside an hour, the segment's order (of the whole hour) is not the
    order of an instant between its stamps: there the rebuild orders the instant's own events, elsewhere it uses the
    segment, and both show the full replay's state. Forced to use the segment there, it shows another one."""
    history = _moved_start_story()
    lake = write_lake(history, tmp_path / "lake")
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    assert len(hours) == 3
    between, after = _at_minute(T0_MS, 1, 25), _at_minute(T0_MS, 1, 45)
    for at_ms, segment in ((between, None), (after, f"hour={hours[2]}")):
        rebuilt = rebuild_at(spark, lake, at_ms)
        assert (rebuilt.snapshot_hour, rebuilt.segment) == (hours[1], segment), f"at {at_ms}"
        assert _rows(rebuilt.replicas) == _replicas(rebuild([e for e in history if e.wall_ms <= at_ms]))
    assert _rows(rebuild_at(spark, lake, between).replicas)[(mh.T, 0, 1)][0] == 7
    monkeypatch.setattr(Segment, "serves", lambda _self, _at_ms: True)
    forced = rebuild_at(spark, lake, between)
    assert forced.segment == f"hour={hours[2]}"
    assert _rows(forced.replicas)[(mh.T, 0, 1)][0] == 5, "the guard is what keeps the segment's order out"


def _long_cache_story() -> list[Envelope]:
    """Broker 1's replica opened in hour 0 with twenty epochs in its cache (epoch e from offset 10e). In hour 1 an
    assign of an earlier epoch at a later offset cuts the cache at epoch 15 (offset 150), a truncation at offset 120
    cuts it again, and epoch 21 starts at 125; in hour 2 the log start moves to 35, which cuts the cache's head."""
    key = {"topic": mh.T, "partition": 0, "replica": 1}
    opened = ev.LogOpened(
        **key,
        log_start_offset=0,
        log_end_offset=200,
        high_watermark=190,
        leader_epochs=tuple((epoch, 10 * epoch) for epoch in range(20)),
        reason="clean_shutdown",
    )
    return _hours(
        mh.broker(1, "a"),
        (0, 5, opened),
        (1, 10, ev.LeaderEpochStarted(**key, leader_epoch=15, start_offset=195)),
        (1, 20, ev.LeaderEpochsTruncated(**key, end_offset=120)),
        (1, 30, ev.LeaderEpochStarted(**key, leader_epoch=21, start_offset=125)),
        (2, 10, ev.LogStartOffsetAdvanced(**key, log_start_offset=35, reason="delete_records")),
        (2, 20, ev.LeaderEpochStarted(**key, leader_epoch=22, start_offset=130)),
    )


def test_a_long_epoch_cache_folds_on_from_a_snapshot_as_it_replays(spark: SparkSession, tmp_path: Path) -> None:
    """The fold steps only the cache entries after those no operation since the snapshot can reach (a cache keeps an
    entry per leader epoch of the partition's history). Given a snapshot holding twenty entries and, after it,
    assigns and truncations that cut into the cache from its end, then a log start move that cuts its head, every
    instant shows the full replay's cache, from the later snapshot's segment and from the tail."""
    history = _long_cache_story()
    lake = write_lake(history, tmp_path / "lake")
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    assert len(hours) == 3
    for hour, minute, segment in (
        (1, 15, f"hour={hours[2]}"),
        (1, 25, f"hour={hours[2]}"),
        (1, 45, f"hour={hours[2]}"),
        (2, 15, "tail"),
        (2, 30, "tail"),
    ):
        at_ms = _at_minute(T0_MS, hour, minute)
        rebuilt = rebuild_at(spark, lake, at_ms)
        assert rebuilt.segment == segment, f"at {hour}:{minute}"
        expected = _replicas(rebuild([e for e in history if e.wall_ms <= at_ms]))
        assert _rows(rebuilt.replicas) == expected, f"at {hour}:{minute}"
    cache = ((3, 35), *((epoch, 10 * epoch) for epoch in range(4, 12)), (21, 125), (22, 130))
    assert _rows(rebuilt.replicas)[(mh.T, 0, 1)][3] == cache, (
        "the cuts at epoch 15 and offset 120, the head moved to 35"
    )


def test_a_segment_continues_only_the_snapshot_it_was_folded_from(spark: SparkSession, tmp_path: Path) -> None:
    """A segment names the snapshot it folded on from by its manifest's hash: once that snapshot is written again
    (here its manifest, reformatted), the segment serves no instant, and the job writes its snapshot again."""
    lake = tmp_path / "lake"
    generate_lake(lake, 2_000, events_per_hour=1_000)
    write_snapshots(spark, lake)
    by_hour = lake_files(lake)
    first, second = list(by_hour)[1:]
    at_ms = first * HOUR_MS + HOUR_MS // 2
    earlier = latest_valid(lake, at_ms, by_hour)
    assert earlier is not None and earlier.hour == first
    later = segment_after(lake, earlier, at_ms, by_hour)
    assert later is not None and later.name == f"hour={second}"
    manifest = earlier.directory / "_manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()), indent=1))
    rewritten = latest_valid(lake, at_ms, by_hour)
    assert rewritten is not None and rewritten.fingerprint != earlier.fingerprint
    assert segment_after(lake, rewritten, at_ms, by_hour) is None
    assert write_snapshots(spark, lake).hours == [second], "the snapshot folded on from it is written again"
    assert segment_after(lake, rewritten, at_ms, by_hour) is not None


def _hours(emitter: Emitter, *happened: tuple[int, int, Event]) -> list[Envelope]:
    """One incarnation's events, each at (hour, minute) of the story (hour 0 is an hour boundary)."""
    start = T0_MS
    return [
        Envelope("test", emitter, i, start + hour * HOUR_MS + minute * 60_000, i, event)
        for i, (hour, minute, event) in enumerate(happened)
    ]


def _controller_story() -> list[Envelope]:
    """A controller's story over six hours, each of whose pieces a snapshot's continuation must keep: a replica
    marked offline in a topic's first life (the topic's next life clears it), the topic deleted and created again,
    replica 2 marked offline and its broker registered again (cleared), replica 3 marked offline (it stays), an
    intent of controller epoch 1 at offset 9 in hour 2 that epoch 2's takeover at offset 9 abandons in hour 3, and in
    hour 5 an unstamped (version 1) registration of the deposed controller, which metadata order puts in epoch 1's
    term, before epoch 2's decisions."""
    a, b = mh.CONTROLLER, Emitter("controller", 101, "d")

    def marked(offset: int, replica: int, epoch: int = 1) -> Event:
        return ev.ReplicaMarkedOffline(
            topic=mh.T, partition=0, replica=replica, broker_epoch=1, controller_epoch=epoch, metadata_offset=offset
        )

    def registered(broker_id: int, epoch: int, offset: int) -> Event:
        return ev.BrokerRegistered(
            broker=broker_id,
            broker_epoch=2,
            previous_broker_epoch=-1,
            fenced=False,
            controller_epoch=epoch,
            metadata_offset=offset,
        )

    return [
        *_hours(
            a,
            (0, 0, mh.elected(1, 0)),
            (0, 5, mh.created(1)),
            (0, 10, mh.changed(1, 1, 0, 0, reason="created")),
            (0, 20, marked(2, 3)),
            (1, 0, mh.stamp(ev.TopicDeleted(topic=mh.T, topic_id="id-1"), 1, 3)),
            (1, 5, mh.created(4, topic_id="id-2")),
            (1, 10, mh.changed(4, 1, 0, 0, reason="created")),
            (1, 20, marked(5, 2)),
            (1, 30, registered(2, 1, 6)),
            (1, 40, marked(7, 3)),
            (2, 10, mh.changed(8, 2, 1, 1, isr=(2, 3))),
            (2, 50, mh.changed(9, 3, 2, 2, isr=(3,))),  # abandoned: epoch 2 takes over at offset 9
            (5, 10, registered(3, -1, -1)),  # the deposed controller, unstamped
        ),
        *_hours(
            b,
            (3, 10, mh.elected(2, 9)),
            (3, 20, mh.changed(9, 2, 2, 2, isr=(2, 3), controller_epoch=2)),
            (4, 10, mh.changed(10, 2, 3, 3, controller_epoch=2)),
            (5, 30, mh.changed(11, 2, 4, 4, controller_epoch=2)),
        ),
    ]


def test_a_snapshots_continuation_is_the_full_replay_or_is_not_used(spark: SparkSession, tmp_path: Path) -> None:
    """Given the controller story and a snapshot at each hour, every instant around each boundary shows the full
    replay's state and lists, and the continuation is used exactly where nothing after the boundary undoes it: not
    once epoch 2's takeover (hour 3) abandons the intent the snapshot at hour 3 holds as committed, nor once the
    deposed controller's late registration (hour 5) sorts before the snapshot's last decisions."""
    history = _controller_story()
    lake = write_lake(history, tmp_path / "lake")
    write_snapshots(spark, lake)
    hours = list(lake_files(lake))
    assert len(hours) == 6
    undone = {(hours[3], 10), (hours[5], 10)}  # (snapshot hour, minute): from that minute on, not continued
    for at_ms in _around_boundaries(lake):
        shown, continuation, hour = _compared(spark, lake, at_ms)
        assert shown == _replayed(history, at_ms), f"at {at_ms} (hour {hour})"
        assert hour is not None
        expected = not any(hour == h and at_ms >= h * HOUR_MS + minute * 60_000 for h, minute in undone)
        assert continuation == expected, f"at {at_ms} (hour {hour})"


def _lake_with_a_manifest(tmp_path: Path) -> tuple[Path, dict[int, list[PartFile]], int, int]:
    """A generated lake of three hours and a snapshot manifest at its second hour naming the first hour's files (a
    valid snapshot as far as the file names and the manifest say): the lake, its files by hour, and the two hours."""
    lake = tmp_path / "lake"
    generate_lake(lake, 3_000, events_per_hour=1_000)
    by_hour = lake_files(lake)
    first, second = list(by_hour)[:2]
    directory = lake / SNAPSHOTS_DIR / f"hour={second}"
    directory.mkdir(parents=True)
    names = sorted(p.path.relative_to(lake).as_posix() for p in by_hour[first])
    (directory / "_manifest.json").write_text(json.dumps({"hour": second, "format": SNAPSHOT_FORMAT, "files": names}))
    return lake, by_hour, first, second


def test_a_late_file_before_a_snapshots_hour_makes_it_stale(tmp_path: Path) -> None:
    """Given a snapshot whose manifest names the lake's files, when a batch lands later in an hour before it, the
    rebuild no longer takes that snapshot (it would miss those events)."""
    lake, by_hour, first, second = _lake_with_a_manifest(tmp_path)
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is not None
    late = by_hour[first][0].path.parent / part_name(90_000, 90_001, 1, 1)
    shutil.copy(by_hour[first][0].path, late)
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is None


def test_a_snapshot_written_again_keeps_the_one_it_replaces_for_a_reader_until_the_next(tmp_path: Path) -> None:
    """The hourly job writes the tail (and a stale snapshot) again while `rebuild --at` may be reading it: the new
    directory takes the name whole, and the replaced one stays readable aside, out of the listing, until the name is
    written once more (then the one before goes)."""
    lake, _, _, second = _lake_with_a_manifest(tmp_path)
    final = lake / SNAPSHOTS_DIR / f"hour={second}"
    old_manifest = (final / "_manifest.json").read_text()
    (final / "replicas").mkdir()
    (final / "replicas" / "part-0.parquet").write_bytes(b"the first")

    def written(content: bytes) -> Path:
        directory = lake / SNAPSHOTS_DIR / f".hour={second}.tmp"
        (directory / "replicas").mkdir(parents=True)
        (directory / "replicas" / "part-0.parquet").write_bytes(content)
        (directory / "_manifest.json").write_text(old_manifest)
        return directory

    swap_in(written(b"the second"), final)
    aside = lake / SNAPSHOTS_DIR / f".hour={second}.replaced"
    assert (final / "replicas" / "part-0.parquet").read_bytes() == b"the second"
    assert (aside / "replicas" / "part-0.parquet").read_bytes() == b"the first"  # a reader's listed file is there
    assert [s.directory for s in snapshots(lake)] == [final]
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is not None

    swap_in(written(b"the third"), final)
    assert (final / "replicas" / "part-0.parquet").read_bytes() == b"the third"
    assert (aside / "replicas" / "part-0.parquet").read_bytes() == b"the second"
    assert sorted(p.name for p in (lake / SNAPSHOTS_DIR).iterdir()) == [f".hour={second}.replaced", f"hour={second}"]


def test_a_snapshot_of_an_older_format_is_not_used(tmp_path: Path) -> None:
    """A manifest without this format (format 1 kept only the controller types' events, too few for the controller's
    lists) names the right files but is not taken: the rebuild would miss events it needs."""
    lake = tmp_path / "lake"
    generate_lake(lake, 3_000, events_per_hour=1_000)
    by_hour = lake_files(lake)
    first, second = list(by_hour)[:2]
    directory = lake / SNAPSHOTS_DIR / f"hour={second}"
    directory.mkdir(parents=True)
    names = sorted(p.path.relative_to(lake).as_posix() for p in by_hour[first])
    (directory / "_manifest.json").write_text(json.dumps({"hour": second, "files": names}))
    assert latest_valid(lake, second * HOUR_MS, lake_files(lake)) is None


def test_a_rebuild_from_a_snapshot_reads_no_hour_before_it(
    spark: SparkSession, stretched: tuple[list[Envelope], Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Given snapshots, when every lake file of the hours before the last snapshot is unreadable (names kept, so the
    snapshot is still valid), `rebuild --at` an instant after it still prints the full replay's state, offline
    replicas and abandoned intents: it read the snapshot and the hours since, not the history."""
    history, original = stretched
    lake = tmp_path / "lake"
    shutil.copytree(original, lake)
    assert main(["snapshot", "--lake", str(lake)]) == 0
    hours = list(lake_files(lake))
    for hour, parts in lake_files(lake).items():
        if hour < hours[-1]:
            for part in parts:
                part.path.write_bytes(b"not parquet: a rebuild from the snapshot never opens this file")
    capsys.readouterr()
    at_ms = hours[-1] * HOUR_MS + 20 * 60_000
    assert main(["rebuild", "--lake", str(lake), "--at", str(at_ms), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["snapshot_hour"] == hours[-1]
    expected = rebuild([e for e in history if e.wall_ms <= at_ms])
    got = {
        (p["topic"], p["partition"], r["replica"]): (
            r["log_end_offset"],
            r["high_watermark"],
            r["log_start_offset"],
            tuple(tuple(entry) for entry in r["epoch_entries"]),
        )
        for p in printed["partitions"]
        for r in p["replica_states"]
    }
    assert got == _replicas(expected)
    assert {(p["topic"], p["partition"]): p["leader"] for p in printed["partitions"] if "leader" in p} == {
        key: p.leader for key, p in expected.partitions.items()
    }
    offline = {
        (p["topic"], p["partition"]): tuple(p["offline_replicas"])
        for p in printed["partitions"]
        if "offline_replicas" in p
    }
    assert offline == dict(expected.offline_replicas)
    assert [(a["event_type"], a["metadata_offset"]) for a in printed["abandoned"]] == [
        (a.event_type, a.metadata_offset) for a in expected.abandoned
    ]
    # The query ran without adaptive execution; the process's session has its own setting back for what comes next.
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_only_a_rebuild_from_a_snapshot_is_a_short_job(tmp_path: Path) -> None:
    """`rebuild --at` starts its driver JVM for a job of seconds (the client compiler only) exactly when it will read
    a valid snapshot and write no timelines: a full replay, `--out` or `--no-snapshots` get the default JVM."""
    lake, _, _, second = _lake_with_a_manifest(tmp_path)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command", required=True))

    def short(*extra: str, at_ms: int = second * HOUR_MS + 1) -> bool:
        return short_job(parser.parse_args(["rebuild", "--lake", str(lake), "--at", str(at_ms), *extra]), at_ms)

    assert short()
    assert not short("--out", str(tmp_path / "timelines"))
    assert not short("--no-snapshots")
    assert not short(at_ms=second * HOUR_MS - 2), "before the only snapshot: a full replay"


def test_generated_histories_are_valid_and_fold_without_an_anomaly(tmp_path: Path) -> None:
    """The benchmark's histories are ones a correct cluster writes: they fold without an anomaly and the audit's
    specification finds nothing in them (else the benchmark would time the writing of findings)."""
    written = generate_lake(tmp_path / "lake", 8_000, events_per_hour=2_000)
    envelopes = [envelope for _, envelope in read_envelopes(tmp_path / "lake")]
    assert len(envelopes) == written >= 8_000
    state = rebuild(envelopes)
    assert state.anomalies == ()
    assert audit(envelopes) == []
    assert len(lake_files(tmp_path / "lake")) >= 3
    for (topic, partition), held in state.partitions.items():
        offsets = {state.replicas[(topic, partition, r)].log_end_offset for r in held.replicas}
        assert len(offsets) == 1 and held.leader_epoch > 0, "every replica caught up, leaders moved"


def test_the_rebuild_command_prints_the_state_at_an_instant(
    spark: SparkSession, stretched: tuple[list[Envelope], Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    history, lake = stretched
    at_ms = history[len(history) // 2].wall_ms
    out = tmp_path / "timelines"
    code = main(["rebuild", "--lake", str(lake), "--at", str(at_ms), "--format", "json", "--out", str(out)])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    expected = rebuild([e for e in history if e.wall_ms <= at_ms])
    got = {
        (p["topic"], p["partition"], r["replica"]): (
            r["log_end_offset"],
            r["high_watermark"],
            r["log_start_offset"],
            tuple(tuple(entry) for entry in r["epoch_entries"]),
        )
        for p in printed["partitions"]
        for r in p["replica_states"]
    }
    assert got == _replicas(expected)
    assert {(p["topic"], p["partition"]): p["leader"] for p in printed["partitions"] if "leader" in p} == {
        key: p.leader for key, p in expected.partitions.items()
    }
    replica_rows = spark.read.parquet(str(out / "replicas"))
    assert replica_rows.where(f"wall_ms > {at_ms}").count() == 0
    # The epoch timeline: the entries still held at the instant are each live replica's cache then.
    held: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for row in spark.read.parquet(str(out / "epochs")).where("until_event_id IS NULL").collect():
        held.setdefault((row.topic, row.partition, row.replica), []).append((row.leader_epoch, row.start_offset))
    for key, state in expected.replicas.items():
        assert tuple(sorted(held.get(key, []), key=lambda entry: entry[1])) == state.epoch_entries, key


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--lake", "/nonexistent/lake", "--at", "0"], "no lake at /nonexistent/lake"),
        (["--lake", ".", "--at", "yesterday"], "--at 'yesterday' is neither"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(arguments: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hightide.history.rebuild_cli", "rebuild", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {done.stderr.strip().removeprefix('error: ')}"]
    assert says in done.stderr


def test_an_instant_is_iso_8601_or_milliseconds() -> None:
    assert parse_instant("2023-11-14T22:00:00Z") == 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS
    assert parse_instant("2023-11-14T22:00:00") == parse_instant("2023-11-14T23:00:00+01:00")
    assert parse_instant("1700000000123") == 1_700_000_000_123
