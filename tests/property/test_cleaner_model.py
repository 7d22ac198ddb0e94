"""The log cleaner against a dictionary model, under random keyed writes, tombstones, rolls and cleanings at
advancing times.

Method: hypothesis over sequences of operations on a real log in a tmp dir (one record per batch, tiny segments).
The model is every record written (offset, key, value) and, per tombstone, the delete horizon the first cleaning
that kept it stamped. After every cleaning that ran, reading the log from its start must give:
- records that were written, at their own offsets, in increasing order (nothing invented, nothing moved);
- above the cleaned-up-to offset, exactly what was written;
- below it, each key at most once: the key's latest record there, except a tombstone whose horizon a later
  cleaning passed (gone), and nothing else of that key.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.core.clock import WallMs
from hightide.protocol.records import decode_batches, encode_batch
from hightide.storage.cleaner import clean
from hightide.storage.config import LogConfig
from hightide.storage.log import PartitionLog
from support.logs import TP

RETENTION_MS = 1_000
START = 1_700_000_000_000

KEYS = st.sampled_from([b"a", b"b", b"c", b"d"])
WRITE = st.tuples(st.just("write"), KEYS, st.one_of(st.none(), st.binary(min_size=1, max_size=20)))
OPERATIONS = st.lists(
    st.one_of(WRITE, WRITE, WRITE, st.just(("roll",)), st.tuples(st.just("clean"), st.sampled_from([0, 400, 1_100]))),
    max_size=60,
)


def _read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for header, records in decode_batches(data):
            out += [(r.offset, r.key, r.value) for r in records]
            offset = header.next_offset
    return out


def _expected_below(
    written: list[tuple[int, bytes, bytes | None]], cleaned_to: int, gone: set[int]
) -> list[tuple[int, bytes, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes, bytes | None]] = {}
    for offset, key, value in written:
        if offset < cleaned_to:
            latest[key] = (offset, key, value)
    return sorted(t for t in latest.values() if t[0] not in gone)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_a_cleaned_log_reads_as_the_model_says(operations: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(
            cleanup_policy=("compact",),
            segment_bytes=250,
            index_interval_bytes=50,
            delete_retention_ms=RETENTION_MS,
            min_cleanable_dirty_ratio=0.0,
        )
        log = PartitionLog.open(Path(tmp) / str(TP), TP, config, WallMs(START), clean_shutdown=True)
        now = START
        written: list[tuple[int, bytes, bytes | None]] = []
        horizons: dict[int, int] = {}  # tombstone offset -> its delete horizon, once a cleaning kept it
        gone: set[int] = set()
        cleaned_to = 0
        for operation in operations:
            if operation[0] == "write":
                _, key, value = operation
                data = encode_batch([value], keys=[key], timestamps=now)
                written.append((log.append_as_leader(data, 0, WallMs(now)).first_offset, key, value))
            elif operation[0] == "roll":
                log.roll(WallMs(now))
            else:
                now += operation[1]
                log.roll(WallMs(now))
                log.update_high_watermark(log.log_end_offset)
                result = clean(log, WallMs(now))
                if result is None:
                    continue
                cleaned_to = result.first_uncleanable_offset
                latest_below = {t[1]: t for t in _expected_below(written, cleaned_to, set())}
                for offset, _, value in latest_below.values():
                    if value is not None:
                        continue
                    if offset in horizons and now >= horizons[offset]:
                        gone.add(offset)
                    horizons.setdefault(offset, now + RETENTION_MS)
            after = _read_all(log)
            assert after == sorted(after) and set(after) <= set(written)
            assert [t for t in after if t[0] >= cleaned_to] == [t for t in written if t[0] >= cleaned_to]
            assert [t for t in after if t[0] < cleaned_to] == _expected_below(written, cleaned_to, gone)
        log.close()
