"""The sparse offset and time indexes: Kafka's entry bytes, lookups, truncation and fullness rules.

Method: drive OffsetIndex and TimeIndex directly against files in a temporary directory and check both the
answers and the bytes on disk.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hightide.storage.errors import CorruptIndex
from hightide.storage.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset


def test_offset_index_entry_is_relative_offset_and_position_big_endian(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", base_offset=100, max_entries=10)
    index.append(159, 5000)
    index.append(209, 10000)
    assert (tmp_path / "00000000000000000100.index").read_bytes() == b""  # entries wait for a flush
    index.flush()
    assert (tmp_path / "00000000000000000100.index").read_bytes() == (
        struct.pack(">ii", 59, 5000) + struct.pack(">ii", 109, 10000)
    )
    assert (tmp_path / "00000000000000000100.index").read_bytes()[:8] == bytes.fromhex("0000003b00001388")


def test_offset_index_lookup_returns_greatest_entry_at_or_below_target(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", base_offset=100, max_entries=10)
    index.append(159, 5000)
    index.append(209, 10000)
    assert index.lookup(50) == OffsetPosition(100, 0)
    assert index.lookup(158) == OffsetPosition(100, 0)
    assert index.lookup(159) == OffsetPosition(159, 5000)
    assert index.lookup(208) == OffsetPosition(159, 5000)
    assert index.lookup(10**9) == OffsetPosition(209, 10000)


def test_offset_index_truncate_removes_entries_at_or_above_offset_on_disk_too(tmp_path: Path) -> None:
    path = tmp_path / "i.index"
    index = OffsetIndex(path, base_offset=0, max_entries=10)
    for offset, position in [(9, 100), (19, 200), (29, 300)]:
        index.append(offset, position)
    index.truncate_to(19)
    assert index.entries == 1 and path.stat().st_size == 8
    reloaded = OffsetIndex(path, base_offset=0, max_entries=10)
    reloaded.load(log_size=1000)
    assert reloaded.last_entry() == OffsetPosition(9, 100)


def test_offset_index_is_full_at_max_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "i.index", base_offset=0, max_entries=2)
    index.append(1, 10)
    assert not index.is_full()
    index.append(2, 20)
    assert index.is_full()


@pytest.mark.parametrize(
    ("data", "log_size", "problem"),
    [
        (b"\x00" * 7, 100, "not a multiple"),
        (struct.pack(">ii", 5, 50) + struct.pack(">ii", 4, 60), 100, "not increasing"),
        (struct.pack(">ii", 5, 50) + struct.pack(">ii", 6, 50), 100, "not increasing"),
        (struct.pack(">ii", 5, 100), 100, "outside the segment"),
        (struct.pack(">ii", -1, 10), 100, "outside the segment"),
    ],
)
def test_offset_index_that_fails_its_sanity_check_is_corrupt(
    tmp_path: Path, data: bytes, log_size: int, problem: str
) -> None:
    path = tmp_path / "i.index"
    path.write_bytes(data)
    with pytest.raises(CorruptIndex, match=problem):
        OffsetIndex(path, base_offset=0, max_entries=10).load(log_size)


def test_time_index_entry_is_timestamp_and_relative_offset(tmp_path: Path) -> None:
    path = tmp_path / "t.timeindex"
    index = TimeIndex(path, base_offset=10, max_entries=10)
    index.maybe_append(1_700_000_000_000, 15)
    index.flush()
    assert path.read_bytes() == struct.pack(">qi", 1_700_000_000_000, 5)
    assert len(path.read_bytes()) == 12


def test_time_index_appends_only_newer_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", base_offset=0, max_entries=10)
    index.maybe_append(100, 5)
    index.maybe_append(100, 9)
    index.maybe_append(90, 12)
    assert index.entries == 1
    index.maybe_append(101, 12)
    assert index.last_entry() == TimestampOffset(101, 12)


def test_time_index_lookup_and_truncate(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", base_offset=0, max_entries=10)
    for timestamp, offset in [(100, 5), (200, 9), (300, 20)]:
        index.maybe_append(timestamp, offset)
    assert index.lookup(50) == TimestampOffset(-1, 0)
    assert index.lookup(250) == TimestampOffset(200, 9)
    index.truncate_to(9)
    assert index.last_entry() == TimestampOffset(100, 5)


def test_time_index_keeps_one_slot_for_the_entry_written_when_the_segment_becomes_inactive(
    tmp_path: Path,
) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", base_offset=0, max_entries=3)
    index.maybe_append(100, 1)
    index.maybe_append(200, 2)
    assert index.is_full()
    index.maybe_append(300, 3, skip_full_check=True)
    assert index.entries == 3
