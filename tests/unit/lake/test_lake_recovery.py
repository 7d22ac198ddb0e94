"""The lake holds each stream sequence at most once: across crashes, redeliveries, bad messages and two writers.

Method: a real directory and the real `LakeWriter`. A crash between part renames is made by hand (a part of a
two-part batch removed, a temporary file left beside it), as the disk would be after kill -9 at that instant;
redeliveries are the same messages written again in different batches. Every check reads the lake back.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.lake import LakeError, LakeInUse, LakeWriter, NotOurFile, SequenceRanges, read_envelopes, scan_lake
from hightide.protocol.envelope import Emitter, Envelope, encode_envelopes
from hightide.protocol.events import BrokerFenced
from hightide.runtime.logging import get_logger

LOG = get_logger("test.lake")
HOUR_MS = 3_600_000
MARCH_1_MS = 1_772_323_200_000


def message(seq: int, *, hours: int = 1) -> tuple[int, bytes]:
    """Stream message `seq`: one event per hour for `hours` hours from March 1st, sequence numbers from seq*10."""
    emitter = Emitter("broker", 1, "inc-1")
    events = [
        Envelope(
            "lake-test",
            emitter,
            seq * 10 + h,
            MARCH_1_MS + h * HOUR_MS,
            0,
            BrokerFenced(broker=1, broker_epoch=h, reason="r"),
        )
        for h in range(hours)
    ]
    return seq, encode_envelopes(events)


def stream_sequences(lake: Path) -> list[int]:
    return [seq for seq, _ in read_envelopes(lake)]


def test_a_batch_cut_short_between_its_renames_is_deleted_on_open_and_archived_once_again(tmp_path: Path) -> None:
    # given a lake where the batch 1-3 (two hour partitions) had renamed only its first part, and a temp file
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        writer.write([message(1, hours=2), message(2), message(3)])
    first, second = scan_lake(lake).complete[0].parts
    second.path.rename(second.path.with_name(f".{second.path.name}.tmp"))
    assert [len(b.parts) for b in scan_lake(lake).incomplete] == [1]
    # when a writer opens the lake
    with LakeWriter(lake, LOG) as writer:
        # then the partial part and the temp file are gone, and nothing of 1-3 counts as archived
        assert not first.path.exists() and list(lake.rglob(".*.tmp")) == []
        assert 1 not in writer.archived and scan_lake(lake).incomplete == []
        # and the redelivered messages, batched differently, are archived once
        writer.write([message(2), message(1, hours=2)])
        writer.write([message(3), message(1, hours=2)])
    assert stream_sequences(lake) == [1, 1, 2, 3]


def test_redelivery_with_different_batch_boundaries_archives_no_event_twice(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        writer.write([message(s) for s in range(1, 11)])
        again = writer.write([message(s) for s in range(8, 16)])
        assert (again.skipped, again.messages) == (3, 5)
    with LakeWriter(lake, LOG) as writer:  # a restart: what is archived is known from the names
        again = writer.write([message(s) for s in range(1, 21)])
        assert (again.skipped, again.messages) == (15, 5)
    assert stream_sequences(lake) == list(range(1, 21))
    assert [(b.first, b.last) for b in scan_lake(lake).complete] == [(1, 10), (11, 15), (16, 20)]


def test_a_batch_never_claims_a_sequence_that_is_still_to_come(tmp_path: Path) -> None:
    # given a fetch that brings 1, 2, 5, 6 (3 and 4 were delivered elsewhere and are on their way again)
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        writer.write([message(s) for s in (6, 1, 5, 2)])
        # then two batches, and 3 and 4 still count as missing
        assert [(b.first, b.last) for b in scan_lake(lake).complete] == [(1, 2), (5, 6)]
        writer.write([message(4), message(3)])
    assert stream_sequences(lake) == [1, 2, 3, 4, 5, 6]


def test_a_message_that_does_not_decode_is_quarantined_as_raw_bytes_and_skipped_next_time(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    garbage = b"\x93not an array of envelopes"
    with LakeWriter(lake, LOG) as writer:
        result = writer.write([message(1), (2, garbage), message(3)])
        assert (result.messages, result.quarantined) == (2, 1)
        # a batch may bridge a quarantined sequence: 1-3 is one batch
        assert [(b.first, b.last) for b in scan_lake(lake).complete] == [(1, 3)]
    assert (lake / "quarantine" / "2.msgpack").read_bytes() == garbage
    with LakeWriter(lake, LOG) as writer:
        assert writer.write([(2, garbage)]).skipped == 1
    assert stream_sequences(lake) == [1, 3]


def test_a_wall_clock_past_year_9999_is_quarantined_not_crashed_on(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    far = Envelope(
        "lake-test", Emitter("broker", 1, "i"), 0, 2**62, 0, BrokerFenced(broker=1, broker_epoch=1, reason="r")
    )
    with LakeWriter(lake, LOG) as writer:
        assert writer.write([(1, encode_envelopes([far]))]).quarantined == 1
    assert scan_lake(lake).quarantined.keys() == {1}


def test_the_lock_refuses_a_second_writer_and_names_the_first(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG), pytest.raises(LakeInUse, match=f"in use by pid {os.getpid()}"):
        LakeWriter(lake, LOG).open()
    with LakeWriter(lake, LOG) as writer:  # released on close
        writer.write([message(1)])


def test_a_lake_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "lake").write_text("x")
    with pytest.raises(LakeError, match="is not a directory"):
        LakeWriter(tmp_path / "lake", LOG).open()


def test_files_that_are_not_ours_are_refused_with_their_path(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        writer.write([message(1)])
    hour = next(lake.glob("date=*/hour=*"))
    (hour / "_SUCCESS").write_text("")  # hidden names are Spark's and Hadoop's, and ignored
    assert stream_sequences(lake) == [1]
    # a Parquet file named like ours but of another schema
    pq.write_table(pa.table({"x": [1]}), hour / "events-5-5.1of1.parquet")
    with pytest.raises(NotOurFile, match=re.escape("events-5-5.1of1.parquet is not a Hightide event file")):
        read_envelopes(lake)
    # not Parquet at all
    (hour / "events-5-5.1of1.parquet").write_bytes(b"nope")
    with pytest.raises(NotOurFile, match="is not a Parquet file"):
        read_envelopes(lake)
    # a stranger's name
    (hour / "events-5-5.1of1.parquet").unlink()
    (hour / "mine.parquet").write_bytes(b"")
    with pytest.raises(NotOurFile, match=re.escape("mine.parquet is not a Hightide event file")):
        LakeWriter(lake, LOG).open()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 5)), max_size=12), st.integers(1, 70))
def test_sequence_ranges_behave_as_a_set_of_sequences(adds: list[tuple[int, int]], probe: int) -> None:
    ranges, model = SequenceRanges(), set()
    for first, length in adds:
        ranges.add(first, first + length)
        model |= set(range(first, first + length + 1))
    assert [s for s in range(0, 80) if s in ranges] == sorted(model)
    assert all(b + 1 < c for (_, b), (c, _) in zip(ranges.ranges, ranges.ranges[1:], strict=False))  # merged
    assert ranges.first_missing(probe) == min(s for s in range(probe, 200) if s not in model)
    assert ranges.covers(probe, probe + 3) == all(s in model for s in range(probe, probe + 4))
    assert ranges.count_within(probe, probe + 9) == len(model & set(range(probe, probe + 10)))


def test_a_lake_is_bound_to_the_first_stream_it_archives_and_refuses_another(tmp_path: Path) -> None:
    # Stream sequences start again at 1 in a stream created anew: that stream's messages would look archived.
    lake = tmp_path / "lake"
    with LakeWriter(lake, LOG) as writer:
        writer.bind_stream("HT_a_EVENTS", "2026-03-01T00:00:00+00:00")
        writer.bind_stream("HT_a_EVENTS", "2026-03-01T00:00:00+00:00")
    with LakeWriter(lake, LOG) as writer, pytest.raises(LakeError, match="give this stream a lake of its own"):
        writer.bind_stream("HT_a_EVENTS", "2026-03-02T00:00:00+00:00")
