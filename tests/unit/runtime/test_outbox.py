"""The outbox file: records come back as written; a torn or damaged tail stops the reader where it starts; the
lock tells a live incarnation's outbox from an ended one; the cursor survives and a damaged one means "from the
start" (the stream's dedup takes the copies)."""

from __future__ import annotations

import os
from pathlib import Path

import msgpack
import pytest

from hightide.runtime.outbox import (
    GroupsFile,
    OutboxError,
    OutboxHeader,
    OutboxReader,
    OutboxWriter,
    cursor_path,
    groups_path,
    merge_arrays,
    read_cursor,
    read_groups,
    remove,
    try_lock,
    write_cursor,
)

HEADER = OutboxHeader("local", "broker", 3, "inc0")


def _write(directory: Path, payloads: list[bytes]) -> OutboxWriter:
    writer = OutboxWriter.create(directory, HEADER)
    sequence = 0
    for payload in payloads:
        writer.append(sequence, 2, payload)
        sequence += 2
    return writer


def test_records_come_back_in_order_with_their_sequences_and_positions(tmp_path: Path) -> None:
    writer = _write(tmp_path, [b"a" * 10, b"b" * 3_000_000, b"c"])
    reader = OutboxReader(writer.path)
    records = list(reader.records(0))
    assert [(r.first_sequence, r.count, r.data[:1], len(r.data)) for r in records] == [
        (0, 2, b"a", 10),
        (2, 2, b"b", 3_000_000),
        (4, 2, b"c", 1),
    ]
    assert records[0].position == reader.records_start
    assert [r.end for r in records[:-1]] == [r.position for r in records[1:]]
    assert records[-1].end == writer.end == os.path.getsize(writer.path)
    assert reader.header == HEADER
    assert reader.damaged_at is None
    # From a record boundary, and up to an end: only those records.
    assert [r.data[:1] for r in reader.records(records[1].position, records[2].position)] == [b"b"]


@pytest.mark.parametrize("cut", [1, 10, 20, 25])
def test_a_torn_last_record_is_not_read_and_its_position_is_reported(tmp_path: Path, cut: int) -> None:
    writer = _write(tmp_path, [b"first", b"second-record-data"])
    writer.close()
    size = os.path.getsize(writer.path)
    os.truncate(writer.path, size - cut)
    reader = OutboxReader(writer.path)
    records = list(reader.records(0))
    assert [r.data for r in records] == [b"first"]
    assert reader.damaged_at == records[0].end == reader.valid_end


def test_a_record_failing_its_crc_stops_the_reader_there(tmp_path: Path) -> None:
    writer = _write(tmp_path, [b"first", b"second", b"third"])
    writer.close()
    reader = OutboxReader(writer.path)
    second = list(reader.records(0))[1]
    with open(writer.path, "r+b") as f:
        f.seek(second.end - 1)
        f.write(b"X")
    reader = OutboxReader(writer.path)
    assert [r.data for r in reader.records(0)] == [b"first"]
    assert reader.damaged_at == second.position


def test_a_file_that_is_not_an_outbox_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.outbox"
    path.write_bytes(b"not an outbox at all")
    with pytest.raises(OutboxError, match="not an event outbox"):
        OutboxReader(path)
    path.write_bytes(b"HTOUTBOX\x00\x00\x00\x03{x}")
    with pytest.raises(OutboxError, match="damaged outbox header"):
        OutboxReader(path)


def test_sequences_must_continue_without_a_gap(tmp_path: Path) -> None:
    writer = _write(tmp_path, [b"x"])  # sequences 0 and 1
    with pytest.raises(OutboxError, match="sequence 3 follows 1"):
        writer.append(3, 1, b"y")
    writer.append(2, 1, b"y")
    assert writer.next_sequence == 3


def test_a_second_writer_of_the_same_incarnation_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, [b"x"])
    with pytest.raises(OutboxError, match="cannot create"):
        OutboxWriter.create(tmp_path, HEADER)


def test_the_lock_tells_a_live_outbox_from_an_ended_one(tmp_path: Path) -> None:
    writer = _write(tmp_path, [b"x"])
    assert try_lock(writer.path) is None  # the writing process holds it
    writer.close()
    fd = try_lock(writer.path)
    assert fd is not None
    try:
        assert try_lock(writer.path) is None  # now the adopter holds it
    finally:
        os.close(fd)


def test_the_cursor_round_trips_and_a_damaged_one_reads_as_the_start(tmp_path: Path) -> None:
    writer = _write(tmp_path, [b"x"])
    assert read_cursor(writer.path) == 0
    write_cursor(writer.path, writer.end)
    assert read_cursor(writer.path) == writer.end
    cursor_path(writer.path).write_text("garbage")
    assert read_cursor(writer.path) == 0
    remove(writer.path)
    assert not writer.path.exists()
    assert not cursor_path(writer.path).exists()


def test_the_cursor_is_overwritten_in_place_whatever_was_there_before(tmp_path: Path) -> None:
    # One fixed-width write at offset 0, no temporary file: a shorter number covers a longer one, and a cursor
    # written by an earlier version (the bare number) is covered whole.
    writer = _write(tmp_path, [b"x"])
    cursor_path(writer.path).write_text("123456789012\n")
    write_cursor(writer.path, 7)
    assert read_cursor(writer.path) == 7
    write_cursor(writer.path, 2**63)
    write_cursor(writer.path, 42)
    assert read_cursor(writer.path) == 42
    assert sorted(p.name for p in tmp_path.iterdir() if ".published" in p.name) == [cursor_path(writer.path).name]


def test_merged_records_are_one_array_of_all_their_envelopes_in_order(tmp_path: Path) -> None:
    writer = OutboxWriter.create(tmp_path, HEADER)
    sizes = [1, 15, 16, 3, 70_000]  # array headers of each msgpack size class, and a total past 2**16
    sequence = 0
    for size in sizes:
        writer.append(sequence, size, msgpack.packb(list(range(sequence, sequence + size))))
        sequence += size
    records = list(OutboxReader(writer.path).records(0))
    assert msgpack.unpackb(merge_arrays(records)) == list(range(sequence))
    assert merge_arrays(records[:1]) == records[0].data
    assert msgpack.unpackb(merge_arrays(records[1:3])) == list(range(1, 32))


def test_the_plan_is_the_chain_of_extents_from_the_cursor(tmp_path: Path) -> None:
    outbox = tmp_path / "x.outbox"
    plan = GroupsFile(outbox)
    plan.append([(100, 180), (180, 260)])
    plan.append([(260, 300)])
    groups_path(outbox).open("a").write("300 3")  # a torn last line: never published by
    assert read_groups(outbox, 100) == [(100, 180), (180, 260), (260, 300)]
    assert read_groups(outbox, 180) == [(180, 260), (260, 300)]
    assert read_groups(outbox, 200) == []  # not a message boundary: no plan starts there
    plan.clear()
    assert read_groups(outbox, 100) == []
    plan.close()
