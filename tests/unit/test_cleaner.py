"""The log cleaner on real files: what a compacted log holds after cleaning, what it never touches, and a crash at
every step of the swap.

Method: logs in tmp dirs with small segments, written as a producer (leader appends) writes them, the HW moved to
the LEO as the replica layer would, then cleaned with `hightide.storage.cleaner.clean` at chosen wall-clock times.
Each test reads the log back from its start and compares records (offset, key, value) with what was written.
The crash test kills the swap (a BaseException from the n-th rename or unlink, as a process killed there leaves
its files) for every n, then reopens the log as after an unclean shutdown.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hightide.core.clock import WallMs
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import (
    DELETE_HORIZON_BIT,
    Record,
    decode_batches,
    delete_horizon_ms,
    encode_batch,
    read_batch_header,
)
from hightide.storage.cleaner import clean, commit_cleaning, prepare_cleaning
from hightide.storage.config import LogConfig
from hightide.storage.errors import StorageError
from hightide.storage.log import PartitionLog
from support.logs import TP

DAY_MS = 86_400_000
T0 = WallMs(1_700_000_000_000)


def compacted_log(directory: Path, **config: Any) -> PartitionLog:
    settings: dict[str, Any] = {"cleanup_policy": ("compact",), "segment_bytes": 300, "index_interval_bytes": 60}
    settings.update(config)
    return PartitionLog.open(directory / str(TP), TP, LogConfig(**settings), T0, clean_shutdown=True)


def produce(log: PartitionLog, pairs: list[tuple[bytes | None, bytes | None]], **batch: Any) -> int:
    """Append one batch of (key, value) records as a leader; returns its first offset."""
    keys = [key for key, _ in pairs]
    data = encode_batch([value for _, value in pairs], keys=keys, timestamps=int(T0), **batch)
    return log.append_as_leader(data, 0, T0).first_offset


def records(log: PartitionLog) -> list[Record]:
    """Every record, read as a consumer reads: fetch after fetch from the next offset (a read stops at the end
    of a segment)."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for header, batch_records in decode_batches(data):
            out += batch_records
            offset = header.next_offset
    return out


def triples(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in records(log)]


def commit_all(log: PartitionLog) -> None:
    """What the replica layer does once every replica holds the records: the HW reaches the LEO; then the active
    segment is rolled, so all but an empty active segment may be cleaned."""
    log.roll(T0)
    log.update_high_watermark(log.log_end_offset)


def written(log: PartitionLog, count: int = 30, keys: int = 4) -> list[tuple[int, bytes, bytes]]:
    out = []
    for i in range(count):
        key, value = f"k{i % keys}".encode(), f"v{i}".encode()
        out.append((produce(log, [(key, value)]), key, value))
    return out


def test_cleaning_keeps_the_latest_value_of_each_key_at_its_offset(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    history = written(log, count=30, keys=4)
    commit_all(log)
    end, segments_before = log.log_end_offset, len(log.segments)
    result = clean(log, T0)
    assert result is not None and result.stats.records_removed == 26
    latest = {key: (offset, value) for offset, key, value in history}
    assert triples(log) == sorted((offset, key, value) for key, (offset, value) in latest.items())
    # Offsets never move: the LEO, the log start offset and the HW are what they were; each segment ends where it
    # ended (its last batch is kept, empty if need be), and the next cleaning finds nothing dirty.
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, end, end)
    assert len(log.segments) == segments_before and log.cleaner_checkpoint == log.active_segment.base_offset
    assert clean(log, T0) is None


def test_small_cleaned_segments_are_merged_up_to_segment_bytes(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    written(log, count=30, keys=2)
    commit_all(log)
    assert clean(log, T0) is not None
    first_round = log.log_end_offset
    small = sum(1 for s in log.segments if s.base_offset < first_round)
    written(log, count=30, keys=2)
    commit_all(log)
    result = clean(log, T0)
    # groupSegmentsBySize merged the first round's cleaned segments (sizes are the uncleaned ones, as Kafka's).
    assert result is not None and sum(1 for s in log.segments if s.base_offset < first_round) < small
    assert all(s.size <= log.config.segment_bytes for s in log.segments)
    assert [(k, v) for _, k, v in triples(log)] == [(b"k0", b"v28"), (b"k1", b"v29")]


def test_a_reopened_log_and_its_rebuilt_indexes_read_the_same(tmp_path: Path) -> None:
    log = compacted_log(tmp_path, segment_bytes=1000)
    written(log, count=40, keys=3)
    commit_all(log)
    assert clean(log, T0) is not None
    before = triples(log)
    # Reads from every offset, gaps included, find the next record kept.
    for offset in range(log.log_end_offset):
        first = read_batch_header(log.read(offset, 1))
        assert first.last_offset >= offset
    log.close()
    reopened = PartitionLog.open(log.directory, TP, log.config, T0, clean_shutdown=False)
    assert triples(reopened) == before and not reopened.recovery_report.deleted_after_corruption
    reopened.close()


def test_nothing_at_or_above_the_high_watermark_or_in_the_active_segment_is_cleaned(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    written(log, count=12, keys=2)
    log.roll(T0)
    committed = log.log_end_offset
    written(log, count=12, keys=2)  # above the HW, in closed segments and the active one
    log.update_high_watermark(committed)
    above = [t for t in triples(log) if t[0] >= committed]
    assert clean(log, T0) is not None
    assert [t for t in triples(log) if t[0] >= committed] == above
    assert log.cleaner_checkpoint is not None and log.cleaner_checkpoint <= committed


def test_a_log_is_cleaned_only_above_the_dirty_ratio_or_past_the_max_compaction_lag(tmp_path: Path) -> None:
    log = compacted_log(tmp_path, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=DAY_MS)
    written(log, count=20, keys=20)  # all distinct keys: a first cleaning removes nothing but makes a clean section
    commit_all(log)
    assert clean(log, T0) is not None
    written(log, count=2, keys=2)
    commit_all(log)
    assert clean(log, T0) is None  # a small dirty section: its ratio is below 0.9
    # A day later the oldest dirty record has waited max.compaction.lag.ms: cleaned whatever the ratio.
    assert clean(log, WallMs(T0 + DAY_MS + 1)) is not None


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    log = compacted_log(tmp_path, min_compaction_lag_ms=60_000)
    written(log, count=20, keys=2)
    commit_all(log)
    assert clean(log, T0) is None  # every segment's records are younger than a minute
    assert clean(log, WallMs(T0 + 60_001)) is not None


def test_tombstones_stay_for_delete_retention_ms_after_the_cleaning_that_kept_them(tmp_path: Path) -> None:
    log = compacted_log(tmp_path, delete_retention_ms=DAY_MS, min_cleanable_dirty_ratio=0.01)
    produce(log, [(b"a", b"1"), (b"b", b"1")])
    deleted = produce(log, [(b"a", None)])
    commit_all(log)
    assert clean(log, T0) is not None
    assert triples(log) == [(1, b"b", b"1"), (deleted, b"a", None)]
    tombstone_batch = read_batch_header(log.read(deleted, 1))
    assert tombstone_batch.attributes & DELETE_HORIZON_BIT and delete_horizon_ms(tombstone_batch) == T0 + DAY_MS
    assert records(log)[-1].timestamp == T0  # the record keeps its timestamp under the horizon
    # More data makes the log dirty again; before the horizon the tombstone stays, after it it goes.
    produce(log, [(b"c", b"1")] * 3)
    commit_all(log)
    assert clean(log, WallMs(T0 + DAY_MS - 1)) is not None
    assert (deleted, b"a", None) in triples(log)
    produce(log, [(b"c", b"2")] * 6)
    commit_all(log)
    result = clean(log, WallMs(T0 + DAY_MS))
    assert result is not None and result.stats.tombstones_removed == 1
    assert [t for t in triples(log) if t[1] == b"a"] == []


def test_a_compacted_log_refuses_a_record_without_a_key(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    with pytest.raises(StorageError, match="Compacted topic cannot accept message without key") as refused:
        produce(log, [(b"x", b"1"), (None, b"no key")])
    assert refused.value.error_code is ErrorCode.INVALID_RECORD and log.log_end_offset == 0


def test_keyless_records_are_removed_and_a_batch_keeps_its_offsets_and_producer_fields(tmp_path: Path) -> None:
    log = compacted_log(tmp_path, cleanup_policy=("delete",))  # compacted later: its keyless records predate it
    first = produce(log, [(None, b"no key"), (b"x", b"1"), (b"y", b"1")], producer_id=7, producer_epoch=2)
    produce(log, [(b"x", b"2")], producer_id=8, producer_epoch=0)
    produce(log, [(b"y", b"2")], producer_id=8, producer_epoch=0, base_sequence=1)
    log.update_config(dataclasses.replace(log.config, cleanup_policy=("compact",)))
    commit_all(log)
    before = read_batch_header(log.read(first, 1))
    assert clean(log, T0) is not None
    assert triples(log) == [(3, b"x", b"2"), (4, b"y", b"2")]
    # The first batch lost all its records but is the last of producer 7: kept empty, offsets 0..2, so a new leader
    # still finds producer 7's last sequence (Kafka's RETAIN_EMPTY).
    headers = list(log.batch_headers())
    assert [(h.base_offset, h.last_offset, h.record_count) for h in headers] == [(0, 2, 0), (3, 3, 1), (4, 4, 1)]
    empty = headers[0]
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 2, before.base_sequence)


def test_a_follower_replicates_a_compacted_leaders_log_with_its_gaps(tmp_path: Path) -> None:
    leader = compacted_log(tmp_path / "leader")
    written(leader, count=30, keys=3)
    commit_all(leader)
    assert clean(leader, T0) is not None
    follower = compacted_log(tmp_path / "follower")
    while follower.log_end_offset < leader.active_segment.base_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 200), T0)
    assert triples(follower) == triples(leader)


def test_a_cleaning_gives_up_when_retention_or_truncation_changed_the_segments_it_read(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    written(log, count=30, keys=3)
    commit_all(log)
    job = prepare_cleaning(log, T0)
    assert job is not None
    job.build()
    before = triples(log)
    log.truncate_to(5, T0)  # an unclean leader election: the replica layer cut the log below the cleaned range
    assert commit_cleaning(log, job, T0) is None
    assert triples(log) == [t for t in before if t[0] < 5]
    assert not [p for p in log.directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]


# -- a crash during the swap ------------------------------------------------------------------------------------------


class Killed(BaseException):
    """The process dies here: nothing after runs, no handler tidies up."""


def _file_operations(monkeypatch: pytest.MonkeyPatch, die_at: int) -> Iterator[int]:
    """Make the `die_at`-th rename or unlink of the swap raise Killed (counted from 0)."""
    count = iter(range(1 << 30))

    def dying(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if next(count) == die_at:
                raise Killed
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(os, "replace", dying(os.replace))
    monkeypatch.setattr(os, "unlink", dying(os.unlink))
    return count


# The swap of one group is 12 renames and unlinks (3 to .swap, 3 + 3 deleting each old segment, 3 to the final
# names): every step of the first group, then steps spread over the later ones, then none (10_000).
@pytest.mark.parametrize("die_at", [*range(13), 20, 31, 45, 58, 70, 10_000])
def test_a_crash_anywhere_in_the_swap_leaves_the_old_segments_or_the_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, die_at: int
) -> None:
    log = compacted_log(tmp_path)
    written(log, count=30, keys=3)
    commit_all(log)
    old = triples(log)
    job = prepare_cleaning(log, T0)
    assert job is not None
    job.build()
    new_layout = compacted_log(tmp_path / "expected")  # the same log, cleaned without a crash
    written(new_layout, count=30, keys=3)
    commit_all(new_layout)
    clean(new_layout, T0)
    new = triples(new_layout)
    with monkeypatch.context() as patched:
        _file_operations(patched, die_at)
        try:
            commit_cleaning(log, job, T0)
            died = False
        except Killed:
            died = True
    log.abandon()
    reopened = PartitionLog.open(log.directory, TP, log.config, T0, clean_shutdown=False)
    after = triples(reopened)
    # Each group is swapped on its own (as in Kafka): within a group's offsets the log holds the old records or
    # the cleaned ones, never some of each; the groups before the crash are cleaned, those after are not.
    ends = [source[-1].next_offset for source in job.sources]
    starts = [source[0].segment.base_offset for source in job.sources]
    cleaned = []  # per group whose cleaning changes it: whether the log holds its cleaned records
    for start, end in zip(starts, ends, strict=True):
        part, was, will = ([t for t in ts if start <= t[0] < end] for ts in (after, old, new))
        assert part in (was, will), die_at
        if was != will:
            cleaned.append(part == will)
    assert cleaned == sorted(cleaned, reverse=True), cleaned
    assert [t for t in after if t[0] >= ends[-1]] == [t for t in old if t[0] >= ends[-1]]
    if not died:
        assert after == new
    assert not [p for p in reopened.directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    reopened.close()
    new_layout.close()


def test_what_is_appended_again_after_a_truncation_below_the_cleaned_offset_is_dirty(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    written(log, count=30, keys=3)
    commit_all(log)
    assert clean(log, T0) is not None and log.cleaner_checkpoint == 30
    log.truncate_to(20, T0)  # an unclean election cut the log below the cleaned offset
    assert log.cleaner_checkpoint is not None and log.cleaner_checkpoint <= 20
    again = written(log, count=10, keys=3)  # offsets 20..29 again: three keys, duplicated
    fresh = [(produce(log, [(f"z{i}".encode(), b"z")]), f"z{i}".encode(), b"z") for i in range(10)]  # 30..39
    commit_all(log)
    assert clean(log, T0) is not None
    # Offsets 20..29 were dirty again: their duplicates went, though no key of 30..39 supersedes them.
    latest = {key: (offset, key, value) for offset, key, value in again}
    assert [t for t in triples(log) if t[0] >= 20] == sorted(latest.values()) + fresh


def test_retention_ms_deletes_segments_of_a_compact_delete_log_and_never_of_a_compact_only_one(
    tmp_path: Path,
) -> None:
    for policy, deleted in ((("compact",), False), (("compact", "delete"), True)):
        log = compacted_log(tmp_path / "-".join(policy), cleanup_policy=policy, retention_ms=1_000)
        written(log, count=20, keys=20)
        commit_all(log)
        gone = log.delete_old_segments(WallMs(T0 + 60_000))
        assert bool(gone) is deleted, policy


def test_a_crash_while_the_cleaned_segments_are_written_leaves_the_old_log(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    written(log, count=30, keys=3)
    commit_all(log)
    old = triples(log)
    job = prepare_cleaning(log, T0)
    assert job is not None
    job.build()  # the .cleaned files are written; the process dies before the swap
    assert [p for p in log.directory.iterdir() if p.name.endswith(".cleaned")]
    job.close()
    log.abandon()
    reopened = PartitionLog.open(log.directory, TP, log.config, T0, clean_shutdown=False)
    assert triples(reopened) == old
    assert not [p for p in reopened.directory.iterdir() if p.name.endswith(".cleaned")]
    reopened.close()
