"""The broker's group coordinator wiring: `__consumer_offsets` leadership, appends and loads for the pure core.

Room: services/broker (wiring). Every rule of groups and offsets is `hightide.core.group_coordinator`; this module
only translates between it and the replica manager that hosts `__consumer_offsets`:

- leadership: after every input the partitions of `__consumer_offsets` this broker leads (and their leader epochs)
  are compared with what the coordinator was told; a new leadership is `on_become_leader`, a lost or changed one
  `on_resign`, as Kafka's `onElection` / `onResignation`;
- appends: the coordinator's records become one record batch, produced to the partition through the replica
  manager like a client's produce with acks=all (`offsets.commit.required.acks` -1); the produce's answer is the
  append's outcome;
- loads: the partition's log is read back from its start to its end (the new leader's log is the log: every record
  in it becomes committed) and the records handed to the coordinator;
- FindCoordinator: the leader of the group's partition, from the metadata image; the topic is created through
  the controller when it does not exist (`offsets.topic.num.partitions`, `offsets.topic.replication.factor`,
  `cleanup.policy=compact`), and COORDINATOR_NOT_AVAILABLE is the answer until it has a leader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hightide.core.clock import Now
from hightide.core.group_coordinator import (
    AppendGroupRecords,
    GroupCoordinator,
    GroupEffect,
    GroupRecord,
    group_partition,
)
from hightide.core.metadata_image import MetadataImage, TopicPartition
from hightide.core.replica_manager import LogReader, ReplicaManager
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import decode_batches, encode_batch

OFFSETS_TOPIC: Final = "__consumer_offsets"
LOAD_READ_BYTES: Final = 1024 * 1024
OFFSETS_COMMIT_TIMEOUT_MS: Final = 5_000  # Kafka's offsets.commit.timeout.ms


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Kafka's broker configs for the offsets topic (the coordinator's own are in `GroupCoordinatorConfig`)."""

    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_commit_timeout_ms: int = OFFSETS_COMMIT_TIMEOUT_MS

    def creatable_topic(self) -> wire.CreatableTopic:
        return wire.CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=self.offsets_topic_num_partitions,
            replication_factor=self.offsets_topic_replication_factor,
            configs={"cleanup.policy": "compact"},
        )


def led_offsets_partitions(manager: ReplicaManager) -> dict[int, int]:
    """The `__consumer_offsets` partitions this broker leads now, with their leader epochs."""
    return {
        tp.partition: core.leader_epoch
        for tp, core in manager.replicas.items()
        if tp.topic == OFFSETS_TOPIC and core.is_leader
    }


def leadership_changes(
    coordinator: GroupCoordinator, told: dict[int, int], led: dict[int, int], now: Now
) -> list[GroupEffect]:
    """What the coordinator must hear for `told` (what it knows) to become `led`: resignations first."""
    effects: list[GroupEffect] = []
    for partition, epoch in sorted(told.items()):
        if led.get(partition) != epoch:
            effects += coordinator.on_resign(partition, now)
    for partition, epoch in sorted(led.items()):
        if told.get(partition) != epoch and partition < coordinator.config.offsets_topic_num_partitions:
            effects += coordinator.on_become_leader(partition, epoch, now)
    return effects


def append_request(append: AppendGroupRecords, now: Now, timeout_ms: int) -> wire.ProduceRequest:
    """The produce (acks=all) that appends a coordinator's records: one batch, keyed, stamped with the wall
    clock; a tombstone is a record with a null value."""
    batch = encode_batch(
        [record.value for record in append.records],
        keys=[record.key for record in append.records],
        timestamps=now.wall_ms,
    )
    return wire.ProduceRequest(
        acks=-1,
        timeout_ms=timeout_ms,
        partitions=(wire.ProducePartitionData(topic=OFFSETS_TOPIC, partition=append.partition, records=batch),),
    )


def append_outcome(response: wire.ProduceResponse) -> ErrorCode:
    """The error of an append's produce (NONE: committed)."""
    if response.error_code is not ErrorCode.NONE:
        return response.error_code
    errors = [wire.error_code_of(p.error) for p in response.partitions]
    return next((e for e in errors if e is not ErrorCode.NONE), ErrorCode.NONE)


def read_partition(storage: LogReader, manager: ReplicaManager, partition: int) -> list[GroupRecord]:
    """Every record of `__consumer_offsets` partition `partition` in this broker's log, oldest first; none if
    it is not hosted here any more (the coordinator drops a load for an epoch it no longer leads)."""
    tp = TopicPartition(OFFSETS_TOPIC, partition)
    core = manager.replicas.get(tp)
    if core is None:
        return []
    offset, end = core.log_start_offset, core.log_end_offset
    out: list[GroupRecord] = []
    while offset < end:
        data = storage.read(tp, offset, LOAD_READ_BYTES, end, True)
        batches = decode_batches(data)
        if not batches:
            break
        for header, batch in batches:
            out.extend(GroupRecord(r.key, r.value) for r in batch if r.key is not None and r.offset >= offset)
            offset = header.base_offset + header.last_offset_delta + 1
    return out


def find_coordinator(
    image: MetadataImage, request: wire.FindCoordinatorRequest, settings: GroupSettings
) -> tuple[wire.FindCoordinatorResponse, bool]:
    """The answer to FindCoordinator, and whether `__consumer_offsets` must be created first."""
    partition = group_partition(request.key, settings.offsets_topic_num_partitions)
    topic = image.topic(OFFSETS_TOPIC)
    if topic is None:
        unavailable = wire.FindCoordinatorResponse(
            error=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), message=f"{OFFSETS_TOPIC} is being created"
        )
        return unavailable, True
    registration = topic.partition(partition)
    if registration is None or not registration.has_leader:
        message = f"{OFFSETS_TOPIC}-{partition} has no leader"
        return wire.FindCoordinatorResponse(error=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), message=message), False
    return wire.FindCoordinatorResponse(node_id=registration.leader, partition=partition), False
