"""Messages between brokers and the controller that the replication core reads and writes.

Room: libs/protocol (vocabulary). These are Kafka's Fetch (v12+: `current_leader_epoch`, `last_fetched_epoch`,
`diverging_epoch`), OffsetsForLeaderEpoch and AlterPartition, reduced to the fields the protocol uses. They are
frozen values; the services encode them for NATS, the simulator passes them as they are.

`-1` means "absent" wherever Kafka uses it so (epochs, offsets, broker epochs).
"""

from __future__ import annotations

from dataclasses import dataclass

from hightide.protocol.errors import ErrorCode

NO_EPOCH = -1
NO_OFFSET = -1
CONSUMER_REPLICA_ID = -1


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a fetch: where to read from, and what the fetcher believes about leadership."""

    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    log_start_offset: int = NO_OFFSET
    max_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's (replica_id >= 0) or a consumer's (replica_id -1) fetch of many partitions."""

    replica_id: int
    broker_epoch: int
    partitions: tuple[FetchPartition, ...]
    max_wait_ms: int = 500
    min_bytes: int = 1


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """What a follower needs of each fetched batch without decoding it: offsets and leader epoch."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponsePartition:
    """The leader's answer for one partition. `records` are raw whole batches; `batches` summarise them."""

    topic: str
    partition: int
    error: ErrorCode
    high_watermark: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    log_end_offset: int = NO_OFFSET
    diverging_epoch: int = NO_EPOCH
    diverging_end_offset: int = NO_OFFSET
    records: bytes = b""
    batches: tuple[BatchSummary, ...] = ()
