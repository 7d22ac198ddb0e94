"""The broker's log cleaner round on its real storage shell (`DiskStorage`): prepared on the driving task, built on
a thread while the driving task goes on appending, committed back, reported as LogCompacted, and remembered across
a restart (cleaner-offset-checkpoint).

Method: a DiskStorage on a tmp dir, given the replica manager's storage effects as the broker gives them (CreateLog
with the topic's configs, AppendAsLeader with validated headers, UpdateHighWatermark); the cleaning round is the
one BrokerService runs (prepare_cleanings, CleaningJob.build on a thread, commit_cleanings). Every wait is a
thread join with a timeout.
"""

from __future__ import annotations

import threading
from pathlib import Path

from hightide.broker.storage import DiskStorage
from hightide.core.clock import WallMs
from hightide.core.effects import AppendAsLeader, CreateLog, UpdateHighWatermark
from hightide.core.metadata_image import TopicPartition
from hightide.core.validation import validate_produce
from hightide.protocol.events import LogCompacted
from hightide.protocol.records import decode_batches, encode_batch
from hightide.storage.config import LogConfig

T0 = WallMs(1_700_000_000_000)
TOPIC = "__consumer_offsets"
TP = TopicPartition(TOPIC, 0)
TOPIC_ID = "c2NvcmVfb2Zmc2V0c19pZA"
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "400", "min.cleanable.dirty.ratio": "0.1"}


def append(storage: DiskStorage, key: bytes, value: bytes) -> int:
    log = storage._log(TP)
    data = encode_batch([value], keys=[key], timestamps=int(T0))
    headers = validate_produce(data, max_message_bytes=1 << 20, segment_bytes=400)
    base = log.log_end_offset
    storage.apply(AppendAsLeader(TOPIC, 0, data, base, 0, tuple(headers)), T0)
    storage.apply(UpdateHighWatermark(TOPIC, 0, log.log_end_offset), T0)  # every replica has it
    return base


def latest_values(storage: DiskStorage) -> dict[bytes, tuple[int, bytes | None]]:
    log = storage._log(TP)
    seen: dict[bytes, tuple[int, bytes | None]] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = storage.read(TP, offset, 1 << 20, log.log_end_offset, True)
        for header, records in decode_batches(data):
            for record in records:
                assert record.key is not None
                assert record.key not in seen or seen[record.key][0] < record.offset
                seen[record.key] = (record.offset, record.value)
            offset = header.next_offset
    return seen


def test_a_cleaning_round_is_built_on_a_thread_while_appends_go_on_and_survives_a_restart(tmp_path: Path) -> None:
    storage = DiskStorage(1, tmp_path, LogConfig())
    storage.open(T0)
    storage.apply(CreateLog(TOPIC, 0, TOPIC_ID, CONFIGS), T0)
    expected: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(60):
        key, value = f"group-{i % 5}".encode(), f"offset {i}".encode()
        expected[key] = (append(storage, key, value), value)
    jobs = storage.prepare_cleanings(T0)
    assert [tp for tp, _ in jobs] == [TP]
    _, job = jobs[0]
    builder = threading.Thread(target=job.build)
    builder.start()
    for i in range(60, 70):  # the driving task goes on appending to the active segment meanwhile
        key, value = f"group-{i % 5}".encode(), f"offset {i}".encode()
        expected[key] = (append(storage, key, value), value)
    builder.join(timeout=30)
    assert not builder.is_alive()
    log = storage._log(TP)
    end, bytes_before = log.log_end_offset, log.size_bytes
    (event,) = storage.commit_cleanings(jobs, T0)
    assert isinstance(event, LogCompacted) and (event.topic, event.partition, event.replica) == (TOPIC, 0, 1)
    assert event.records_removed > 0 and event.bytes_after < event.bytes_before
    assert log.size_bytes < bytes_before and log.log_end_offset == end
    assert latest_values(storage) == expected
    # The first dirty offset is checkpointed: after a clean restart nothing is dirty, and the log reads the same.
    storage.close(broker_epoch=5, clean=True)
    reopened = DiskStorage(1, tmp_path, LogConfig())
    reopened.open(T0)
    reopened.apply(CreateLog(TOPIC, 0, TOPIC_ID, CONFIGS), T0)
    reopened.apply(UpdateHighWatermark(TOPIC, 0, end), T0)
    assert reopened.prepare_cleanings(T0) == []
    assert latest_values(reopened) == expected
    reopened.close(broker_epoch=5, clean=True)


def test_a_log_that_is_not_compacted_is_never_cleaned(tmp_path: Path) -> None:
    storage = DiskStorage(1, tmp_path, LogConfig())
    storage.open(T0)
    storage.apply(CreateLog(TOPIC, 0, TOPIC_ID, {"segment.bytes": "400"}), T0)
    for i in range(60):
        append(storage, f"group-{i % 5}".encode(), b"x")
    assert storage.prepare_cleanings(T0) == []
    storage.close(broker_epoch=5, clean=True)
