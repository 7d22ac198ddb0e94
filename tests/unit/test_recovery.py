"""Crash recovery: a torn tail, a flipped bit, lost or damaged indexes, and the clean-shutdown shortcut.

Method: build a log, let go of it as a killed process would (`abandon`: no flush, no marker), damage the files
exactly as a crash or a bad disk would, reopen, and check what recovery kept, cut and reported.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hightide.core.clock import WallMs
from hightide.storage.config import LogConfig
from hightide.storage.log import PartitionLog
from support.logs import TP, batch, open_log, values


def _reopen(tmp_path: Path, recovery_point: int = 0, clean: bool = False, **config: int) -> PartitionLog:
    return PartitionLog.open(
        tmp_path / str(TP), TP, LogConfig(**config), WallMs(0), recovery_point=recovery_point, clean_shutdown=clean
    )


def test_a_torn_write_at_every_byte_of_the_last_batch_recovers_to_exactly_the_last_whole_batch(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, index_interval_bytes=64)
    for tag in range(4):
        log.append_as_leader(batch(3, tag=tag), leader_epoch=0, now=WallMs(0))
    whole = log.read(0, 10**6)
    last = batch(3, tag=4)
    log.append_as_leader(last, leader_epoch=0, now=WallMs(0))
    log.abandon()
    segment_file = tmp_path / "orders-3" / "00000000000000000000.log"
    full = segment_file.read_bytes()
    assert len(full) == len(whole) + len(last)
    for cut in range(len(whole), len(full)):
        segment_file.write_bytes(full[:cut])
        recovered = _reopen(tmp_path, index_interval_bytes=64)
        assert recovered.log_end_offset == 12, cut
        assert recovered.read(0, 10**6) == whole, cut
        assert segment_file.stat().st_size == len(whole)
        report = recovered.recovery_report.recovered
        assert sum(r.truncated_bytes for r in report) == cut - len(whole)
        recovered.abandon()


def test_a_flipped_bit_in_an_older_segment_is_detected_and_the_log_ends_before_it(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for tag in range(9):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    log.abandon()
    older = tmp_path / "orders-3" / f"{bases[1]:020d}.log"
    data = bytearray(older.read_bytes())
    data[len(data) // 2] ^= 0x10
    older.write_bytes(bytes(data))

    recovered = _reopen(tmp_path, segment_bytes=300)

    problems = [r for r in recovered.recovery_report.recovered if r.problem]
    assert len(problems) == 1 and problems[0].base_offset == bases[1]
    assert "CRC" in (problems[0].problem or "") or "corrupt" in (problems[0].problem or "")
    assert recovered.recovery_report.deleted_after_corruption == bases[2:]
    assert [s.base_offset for s in recovered.segments] == bases[:2]
    kept = [offset for offset, _ in values(recovered.read(0, 10**6))]
    kept += [offset for offset, _ in values(recovered.read(bases[1], 10**6))]
    assert kept == list(range(recovered.log_end_offset))
    assert bases[1] <= recovered.log_end_offset < bases[2]


def test_recovery_starts_at_the_recovery_point_and_trusts_what_was_flushed(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for tag in range(9):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
    log.flush()
    flushed = log.recovery_point
    log.append_as_leader(batch(2, tag=9), leader_epoch=0, now=WallMs(0))
    first_base = log.segments[0].base_offset
    log.abandon()
    # Damage below the recovery point goes unnoticed (it was flushed, so it is trusted, as in Kafka) ...
    first = tmp_path / "orders-3" / f"{first_base:020d}.log"
    data = bytearray(first.read_bytes())
    data[100] ^= 0x01
    first.write_bytes(bytes(data))
    recovered = _reopen(tmp_path, recovery_point=flushed, segment_bytes=300)
    assert recovered.log_end_offset == 20
    assert all(r.base_offset != first_base for r in recovered.recovery_report.recovered)
    # ... and only the batches from the recovery point on were validated.
    assert sum(r.validated_bytes for r in recovered.recovery_report.recovered) == len(batch(2, tag=9))


def test_rebuilt_indexes_are_byte_identical_to_the_ones_appends_wrote(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    for tag in range(30):
        log.append_as_leader(batch(2, timestamp=1000 + tag, tag=tag), leader_epoch=0, now=WallMs(0))
    log.close()
    directory = tmp_path / "orders-3"
    index = (directory / "00000000000000000000.index").read_bytes()
    timeindex = (directory / "00000000000000000000.timeindex").read_bytes()
    assert len(index) > 8 * 5
    for suffix in (".index", ".timeindex"):
        (directory / f"00000000000000000000{suffix}").unlink()
    recovered = _reopen(tmp_path, index_interval_bytes=100)
    recovered.close()
    assert (directory / "00000000000000000000.index").read_bytes() == index
    assert (directory / "00000000000000000000.timeindex").read_bytes() == timeindex


def test_a_corrupt_index_after_a_clean_shutdown_is_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=50)
    for tag in range(10):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
    log.close()
    index_file = tmp_path / "orders-3" / "00000000000000000000.index"
    good = index_file.read_bytes()
    index_file.write_bytes(good[:-3])
    recovered = _reopen(tmp_path, clean=True, index_interval_bytes=50)
    assert recovered.recovery_report.rebuilt_indexes == [0]
    assert recovered.log_end_offset == 20
    recovered.close()
    assert index_file.read_bytes() == good


def test_a_clean_shutdown_skips_the_scan(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for tag in range(5):
        log.append_as_leader(batch(2, tag=tag), leader_epoch=0, now=WallMs(0))
    log.close()
    recovered = _reopen(tmp_path, clean=True)
    assert recovered.recovery_report.recovered == []
    assert recovered.log_end_offset == 10


def test_an_empty_log_file_and_leftover_deletions_are_tidied(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=0, now=WallMs(0))
    log.abandon()
    directory = tmp_path / "orders-3"
    (directory / "00000000000000000009.index.deleted").write_bytes(b"x")
    (directory / "00000000000000000042.index").write_bytes(b"")  # its .log is gone
    recovered = _reopen(tmp_path)
    assert recovered.log_end_offset == 2
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]


@pytest.mark.parametrize("garbage", [b"\x00" * 5, b"\xff" * 80, os.urandom(200)])
def test_garbage_after_the_last_batch_is_cut(tmp_path: Path, garbage: bytes) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=0, now=WallMs(0))
    log.abandon()
    segment_file = tmp_path / "orders-3" / "00000000000000000000.log"
    with open(segment_file, "ab") as f:
        f.write(garbage)
    recovered = _reopen(tmp_path)
    assert recovered.log_end_offset == 2
    assert segment_file.stat().st_size == len(batch(2))
