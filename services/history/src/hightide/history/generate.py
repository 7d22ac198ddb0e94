"""Synthetic but valid histories, straight into a lake: the benchmark's input (`generate_lake`).

Room: services/history. A 3-broker cluster with one controller and a few topics replicates records for hours:
per round and partition, the leader appends a batch, serves each follower's fetch, the followers append it, the
leader's high watermark advances and the producer's acks=all request completes; every few rounds the controller
moves the leadership (PartitionChanged, LeaderElected) and the replicas start the new epoch. The history folds
without an anomaly under `hightide.audit.rebuild` (a test holds it to that), and it is written with pyarrow in the
lake's layout and format (`hightide.lake.schema`: its columns and each type's typed payload column), one file per
hour, so millions of events take seconds. It never goes through the envelope codec: the payloads are formatted as
`hightide.lake.schema.payload_json` would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from hightide.lake.layout import HOUR_MS, hour_of, part_name, partition_path
from hightide.lake.schema import SCHEMA, with_typed_payloads

CLUSTER_ID: Final = "bench"
BROKERS: Final = (1, 2, 3)
CONTROLLER: Final = 1
T0_MS: Final = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS  # an hour boundary
EVENTS_PER_MESSAGE: Final = 64
RECORDS_PER_BATCH: Final = 5
ROUNDS_PER_LEADER: Final = 40  # a partition's leader moves every this many rounds


@dataclass(slots=True)
class _Replica:
    log_end_offset: int = 0
    high_watermark: int = 0


@dataclass(slots=True)
class _Partition:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    rounds: int = 0
    logs: dict[int, _Replica] = field(default_factory=dict)


@dataclass(slots=True)
class _Columns:
    """The lake's columns for the events of the hour being written."""

    names: tuple[str, ...] = tuple(name for name in SCHEMA.names if name != "time")
    values: dict[str, list[object]] = field(default_factory=dict)
    payloads: list[dict[str, object]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = {name: [] for name in self.names}

    def __len__(self) -> int:
        return len(self.values["sequence"])


class _Writer:
    """Events in emitter order, each with its wall time, into one Parquet file per hour of the lake."""

    def __init__(self, lake: Path, events_per_hour: int) -> None:
        self.lake = lake
        self.step_ms = HOUR_MS / events_per_hour
        self.count = 0
        self.sequences: dict[tuple[str, int], int] = {}
        self.columns = _Columns()
        self.hour = hour_of(T0_MS)
        self.stream_sequence = 0
        self.first_stream_sequence = 1
        self.files = 0

    @property
    def wall_ms(self) -> int:
        return T0_MS + int(self.count * self.step_ms)

    def emit(self, service: str, emitter_id: int, event_type: str, payload: dict[str, object]) -> None:
        wall_ms = self.wall_ms
        if hour_of(wall_ms) != self.hour:
            self.flush()
            self.hour = hour_of(wall_ms)
        if len(self.columns) % EVENTS_PER_MESSAGE == 0:
            self.stream_sequence += 1
        key = (service, emitter_id)
        sequence = self.sequences.get(key, 0)
        self.sequences[key] = sequence + 1
        values = self.columns.values
        values["stream_sequence"].append(self.stream_sequence)
        values["cluster_id"].append(CLUSTER_ID)
        values["service"].append(service)
        values["emitter_id"].append(emitter_id)
        values["incarnation"].append(f"{service}-{emitter_id}-1")
        values["sequence"].append(sequence)
        values["wall_ms"].append(wall_ms)
        values["mono_ns"].append(self.count * 1_000)
        values["type"].append(event_type)
        values["version"].append(2 if event_type == "IsrChangeCompleted" else 1)
        values["topic"].append(payload.get("topic"))
        values["partition"].append(payload.get("partition"))
        values["replica"].append(payload.get("replica"))
        values["leader_epoch"].append(payload.get("leader_epoch"))
        values["payload"].append(json.dumps(payload, separators=(",", ":")))
        self.columns.payloads.append(payload)
        self.count += 1

    def flush(self) -> None:
        if not len(self.columns):
            return
        values = self.columns.values
        arrays = [
            pa.array(values["wall_ms"], pa.timestamp("ms", tz="UTC"))
            if name == "time"
            else pa.array(values[name], f.type)
            for name, f in zip(SCHEMA.names, SCHEMA, strict=True)
        ]
        table = with_typed_payloads(arrays, values["type"], self.columns.payloads)  # type: ignore[arg-type]
        directory = self.lake / partition_path(self.hour)
        directory.mkdir(parents=True, exist_ok=True)
        name = part_name(self.first_stream_sequence, self.stream_sequence, 1, 1)
        pq.write_table(table, directory / name, compression="zstd")
        self.files += 1
        self.first_stream_sequence = self.stream_sequence + 1
        self.stream_sequence = self.first_stream_sequence - 1
        self.columns = _Columns()


def generate_lake(lake: Path, events: int, topics: int = 3, partitions: int = 4, events_per_hour: int = 250_000) -> int:
    """Write a history of at least `events` events (whole rounds) into `lake`; returns how many were written."""
    assert events > 0 and topics > 0 and partitions > 0 and events_per_hour > 0
    writer = _Writer(lake, events_per_hour)
    cluster = _start(writer, topics, partitions)
    while writer.count < events:
        for state in cluster:
            if state.rounds and state.rounds % ROUNDS_PER_LEADER == 0:
                _move_leader(writer, state)
            _round(writer, state)
    writer.flush()
    return writer.count


def _start(writer: _Writer, topics: int, partitions: int) -> list[_Partition]:
    emit = writer.emit
    emit(
        "controller",
        CONTROLLER,
        "ControllerElected",
        {"controller": CONTROLLER, "controller_epoch": 1, "metadata_offset": 0},
    )
    offset = 1
    for broker in BROKERS:
        emit(
            "controller",
            CONTROLLER,
            "BrokerRegistered",
            {
                "broker": broker,
                "broker_epoch": offset,
                "previous_broker_epoch": -1,
                "fenced": False,
                "controller_epoch": 1,
                "metadata_offset": offset,
            },
        )
        offset += 1
    cluster = []
    for t in range(topics):
        topic = f"bench-{t}"
        emit(
            "controller",
            CONTROLLER,
            "TopicCreated",
            {
                "topic": topic,
                "topic_id": f"id-{t}",
                "partitions": partitions,
                "replication_factor": 3,
                "configs": [],
                "controller_epoch": 1,
                "metadata_offset": offset,
            },
        )
        for p in range(partitions):
            replicas = tuple(BROKERS[(p + t + i) % 3] for i in range(3))
            state = _Partition(topic, p, replicas, replicas[0], logs={b: _Replica() for b in replicas})
            _changed(writer, state, "created", offset)
            cluster.append(state)
        offset += 1
    for state in cluster:
        for broker in state.replicas:
            emit(
                "broker",
                broker,
                "LogOpened",
                {
                    "topic": state.topic,
                    "partition": state.partition,
                    "replica": broker,
                    "log_start_offset": 0,
                    "log_end_offset": 0,
                    "high_watermark": 0,
                    "leader_epochs": [],
                    "reason": "created",
                },
            )
        _become(writer, state)
    return cluster


def _changed(writer: _Writer, state: _Partition, reason: str, offset: int) -> None:
    isr = list(state.replicas)
    writer.emit(
        "controller",
        CONTROLLER,
        "PartitionChanged",
        {
            "topic": state.topic,
            "partition": state.partition,
            "replicas": list(state.replicas),
            "isr": isr,
            "elr": [],
            "last_known_elr": [],
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "partition_epoch": state.partition_epoch,
            "reason": reason,
            "controller_epoch": 1,
            "metadata_offset": offset,
        },
    )


def _become(writer: _Writer, state: _Partition) -> None:
    """The replicas take the new epoch: the leader starts it at its LEO (every replica is caught up here)."""
    leader = state.logs[state.leader]
    common = {"topic": state.topic, "partition": state.partition}
    writer.emit(
        "broker",
        state.leader,
        "BecameLeader",
        {
            **common,
            "replica": state.leader,
            "leader_epoch": state.leader_epoch,
            "partition_epoch": state.partition_epoch,
            "replicas": list(state.replicas),
            "isr": list(state.replicas),
            "log_end_offset": leader.log_end_offset,
            "high_watermark": leader.high_watermark,
        },
    )
    writer.emit(
        "broker",
        state.leader,
        "LeaderEpochStarted",
        {**common, "replica": state.leader, "leader_epoch": state.leader_epoch, "start_offset": leader.log_end_offset},
    )
    for broker in state.replicas:
        if broker != state.leader:
            log = state.logs[broker]
            writer.emit(
                "broker",
                broker,
                "BecameFollower",
                {
                    **common,
                    "replica": broker,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "partition_epoch": state.partition_epoch,
                    "log_end_offset": log.log_end_offset,
                    "high_watermark": log.high_watermark,
                },
            )


def _move_leader(writer: _Writer, state: _Partition) -> None:
    previous = state.leader
    state.leader = state.replicas[(state.replicas.index(previous) + 1) % len(state.replicas)]
    state.leader_epoch += 1
    state.partition_epoch += 1
    offset = 100 + writer.count  # a metadata offset that only grows
    _changed(writer, state, "leader_moved", offset)
    writer.emit(
        "controller",
        CONTROLLER,
        "LeaderElected",
        {
            "topic": state.topic,
            "partition": state.partition,
            "previous_leader": previous,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "election": "preferred",
            "controller_epoch": 1,
            "metadata_offset": offset,
        },
    )
    _become(writer, state)


def _round(writer: _Writer, state: _Partition) -> None:
    """One acks=all produce: append, replicate, advance the high watermark everywhere, acknowledge."""
    common = {"topic": state.topic, "partition": state.partition}
    leader = state.logs[state.leader]
    base, end = leader.log_end_offset, leader.log_end_offset + RECORDS_PER_BATCH
    epoch = state.leader_epoch
    writer.emit(
        "broker",
        state.leader,
        "RecordsAppended",
        {
            **common,
            "replica": state.leader,
            "leader_epoch": epoch,
            "base_offset": base,
            "last_offset": end - 1,
            "record_count": RECORDS_PER_BATCH,
            "size_bytes": 70 * RECORDS_PER_BATCH,
            "log_end_offset": end,
            "as_leader": True,
        },
    )
    leader.log_end_offset = end
    for broker in state.replicas:
        if broker == state.leader:
            continue
        follower = state.logs[broker]
        writer.emit(
            "broker",
            state.leader,
            "FetchServed",
            {
                **common,
                "leader": state.leader,
                "replica": broker,
                "leader_epoch": epoch,
                "fetch_offset": base,
                "last_fetched_epoch": epoch,
                "records_end_offset": end,
                "high_watermark": leader.high_watermark,
                "log_end_offset": end,
                "diverging_epoch": -1,
                "diverging_end_offset": -1,
                "error": "NONE",
            },
        )
        if base == 0 or state.rounds % ROUNDS_PER_LEADER == 0:
            writer.emit(
                "broker",
                broker,
                "LeaderEpochStarted",
                {**common, "replica": broker, "leader_epoch": epoch, "start_offset": base},
            )
        writer.emit(
            "broker",
            broker,
            "RecordsAppended",
            {
                **common,
                "replica": broker,
                "leader_epoch": epoch,
                "base_offset": base,
                "last_offset": end - 1,
                "record_count": RECORDS_PER_BATCH,
                "size_bytes": 70 * RECORDS_PER_BATCH,
                "log_end_offset": end,
                "as_leader": False,
            },
        )
        follower.log_end_offset = end
        # The follower's next fetch tells the leader its new LEO: what lets the leader advance the HW past it.
        writer.emit(
            "broker",
            state.leader,
            "FollowerStateUpdated",
            {
                **common,
                "leader": state.leader,
                "replica": broker,
                "log_end_offset": end,
                "last_caught_up_time_ms": writer.wall_ms,
            },
        )
    writer.emit(
        "broker",
        state.leader,
        "HighWatermarkAdvanced",
        {
            **common,
            "replica": state.leader,
            "leader_epoch": epoch,
            "previous": leader.high_watermark,
            "high_watermark": end,
        },
    )
    leader.high_watermark = end
    writer.emit(
        "broker",
        state.leader,
        "ProduceCompleted",
        {
            **common,
            "leader": state.leader,
            "leader_epoch": epoch,
            "acks": -1,
            "base_offset": base,
            "last_offset": end - 1,
            "high_watermark": end,
            "error": "NONE",
        },
    )
    for broker in state.replicas:
        if broker != state.leader:
            follower = state.logs[broker]
            writer.emit(
                "broker",
                broker,
                "HighWatermarkAdvanced",
                {
                    **common,
                    "replica": broker,
                    "leader_epoch": epoch,
                    "previous": follower.high_watermark,
                    "high_watermark": end,
                },
            )
            follower.high_watermark = end
    state.rounds += 1
