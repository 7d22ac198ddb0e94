"""What a stopped broker's data directory says about each of its replicas, in `hightide.audit.rebuild`'s shape.

For the end-to-end check of the events issue: stop a cluster cleanly, rebuild its state from the archived events,
and compare with what each broker left on disk. Per partition directory `<topic>-<partition>/` of a log dir:

| field            | read from                                                                               |
| ---------------- | --------------------------------------------------------------------------------------- |
| log_end_offset   | the last segment: the next offset after its last whole batch (its base if it is empty)  |
| high_watermark   | `replication-offset-checkpoint` (as written at shutdown; 0 if the partition is absent)  |
| log_start_offset | `log-start-offset-checkpoint`, and never below the first segment's base (as the log     |
|                  | itself keeps it)                                                                        |
| epoch_entries    | `leader-epoch-checkpoint`, as written                                                   |

The values are the files' own, not what a broker would make of them when it starts (clamping the HW, cutting the
epochs at the LEO): on a clean stop the two agree, and reading the files raw lets a comparison find it when they
do not. Nothing is written, locked or recovered. A directory without the clean-shutdown marker is refused
(`DiskStateError`): after a crash the files hold what recovery will still cut, not what the broker will announce.
Directories of deleted partitions (`<topic>-<partition>.<id>-delete`) are not replicas and are skipped.
"""

from __future__ import annotations

from pathlib import Path

from hightide.audit.rebuild import ReplicaKey, ReplicaState
from hightide.protocol.records import BATCH_HEADER_SIZE, InvalidRecordBatch, read_batch_header
from hightide.storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    TopicPartition,
)
from hightide.storage.manager import CLEAN_SHUTDOWN_FILE, parse_partition_dir
from hightide.storage.segment import LOG_SUFFIX


class DiskStateError(Exception):
    """The data directory is not one a cleanly stopped broker leaves, or its files disagree with each other."""


def read_disk_state(
    data_dir: Path, broker_id: int, *, require_clean_shutdown: bool = True
) -> dict[ReplicaKey, ReplicaState]:
    """Every replica in the stopped broker's log dir `data_dir`, keyed (topic, partition, broker_id)."""
    if require_clean_shutdown and not (data_dir / CLEAN_SHUTDOWN_FILE).exists():
        raise DiskStateError(f"{data_dir}: no {CLEAN_SHUTDOWN_FILE}: the broker did not stop cleanly (or is running)")
    high_watermarks = OffsetCheckpointFile(data_dir / REPLICATION_OFFSET_CHECKPOINT).read()
    log_start_offsets = OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT).read()
    states: dict[ReplicaKey, ReplicaState] = {}
    for directory in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        tp = parse_partition_dir(directory.name)
        if tp is None:
            continue
        states[(tp.topic, tp.partition, broker_id)] = _replica_state(
            directory, tp, high_watermarks.get(tp, 0), log_start_offsets.get(tp, 0)
        )
    return states


def _replica_state(directory: Path, tp: TopicPartition, high_watermark: int, checkpointed_start: int) -> ReplicaState:
    bases = sorted(int(p.stem) for p in directory.glob(f"*{LOG_SUFFIX}") if p.stem.isdigit())
    if not bases:
        raise DiskStateError(f"{directory}: no segment (a log always keeps its active segment)")
    log_end_offset = _next_offset(directory / f"{bases[-1]:020d}{LOG_SUFFIX}", bases[-1])
    log_start_offset = max(checkpointed_start, bases[0])
    entries = tuple(
        (e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT).read()
    )
    state = ReplicaState(log_end_offset, high_watermark, log_start_offset, entries)
    if not log_start_offset <= high_watermark <= log_end_offset:
        raise DiskStateError(f"{tp}: log start <= HW <= LEO does not hold on disk: {state}")
    if any(not log_start_offset <= start <= log_end_offset for _, start in entries):
        raise DiskStateError(f"{tp}: a leader epoch starts outside [log start, LEO] on disk: {state}")
    return state


def _next_offset(segment: Path, base_offset: int) -> int:
    """The offset after the segment's last batch, reading headers only; the file must end at a batch boundary."""
    next_offset = base_offset
    size = segment.stat().st_size
    position = 0
    with open(segment, "rb") as f:
        while position < size:
            f.seek(position)
            try:
                header = read_batch_header(f.read(BATCH_HEADER_SIZE))
            except InvalidRecordBatch as error:
                raise DiskStateError(f"{segment}: unreadable batch at byte {position}: {error}") from None
            if position + header.size > size:
                raise DiskStateError(f"{segment}: torn batch at byte {position} (a clean stop leaves none)")
            next_offset = header.next_offset
            position += header.size
    return next_offset
