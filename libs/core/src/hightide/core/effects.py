"""Effects: what the pure core asks its shell to do, in order.

Room: libs/core. A core method returns a list of effects; the shell (the broker service, the simulator, a unit
test) carries them out in list order, and the order is the durability contract: persist, then announce. A core
method puts `Append`/`Truncate` before the `Emit` of the event that reports it, and before any answer that
depends on it.

Storage effects can fail (a full or broken disk, a refused append). A failure is an input, not a log line: the
shell stops at the failed effect and hands it, with the effects not yet carried out, to
`ReplicaManager.on_storage_error`, which takes that replica offline and returns what to carry out instead. No
effect after a failed one runs as if it had succeeded.

What the replica manager returns to a shell (Partition's own `CompleteProduce` and `ServeFetch` never leave the
manager: it turns them into answers):

| effect                  | the shell                                                                       |
| ----------------------- | ------------------------------------------------------------------------------- |
| CreateLog               | creates the partition's log (its directory, `partition.metadata` with the id) |
| DeleteLog               | deletes the partition's log                                                      |
| UpdateLogConfig         | gives the log its topic's configs (Kafka's names; broker defaults beneath)       |
| AppendAsLeader          | appends a producer's batches at `base_offset`, stamped with `leader_epoch`      |
| AppendAsFollower        | appends the leader's batches as they are                                         |
| Truncate                | removes the log's suffix from `offset` (whole batches)                           |
| TruncateFullyAndStartAt | empties the log and restarts it at `offset`                                      |
| AdvanceLogStartOffset   | moves the log start offset up to `offset` (deleting segments wholly below it)    |
| UpdateHighWatermark     | records the HW in the log (checkpointed by CheckpointHighWatermarks)            |
| WriteEpochCheckpoint    | rewrites `leader-epoch-checkpoint` with `entries`                                |
| EnforceRetention        | runs retention on the log at wall time `now_ms`, then reports the log start     |
| CheckpointHighWatermarks| writes every log's HW, recovery point and log start offset checkpoints          |
| Send                    | delivers `message` to `destination` (CONTROLLER: an AlterPartition)             |
| SendFetch               | sends a follower fetch to `leader`; its answer or failure comes back tagged     |
| AnswerProduce           | answers the produce request `request_id`                                         |
| AnswerFetch             | answers the fetch request `request_id`                                           |
| Emit                    | stores `event` in the event log                                                  |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hightide.core.clock import WallMs
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event, FetchServed
from hightide.protocol.records import BatchHeader

CONTROLLER = -1000


# -- storage ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateLog:
    topic: str
    partition: int
    topic_id: str
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeleteLog:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class UpdateLogConfig:
    topic: str
    partition: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class AppendAsLeader:
    """`headers` are what validation returned for these very bytes: storage parses nothing again."""

    topic: str
    partition: int
    records: bytes
    base_offset: int
    leader_epoch: int
    headers: tuple[BatchHeader, ...]


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    """`headers` are what validation returned for these very bytes: storage parses nothing again."""

    topic: str
    partition: int
    records: bytes
    headers: tuple[BatchHeader, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class AdvanceLogStartOffset:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class UpdateHighWatermark:
    topic: str
    partition: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class WriteEpochCheckpoint:
    topic: str
    partition: int
    entries: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class EnforceRetention:
    topic: str
    partition: int
    now_ms: WallMs


@dataclass(frozen=True, slots=True)
class CheckpointHighWatermarks:
    pass


# -- messages and answers --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: wire.AlterPartitionRequest


@dataclass(frozen=True, slots=True)
class SendFetch:
    leader: int
    fetch_id: int
    request: wire.FetchRequest


@dataclass(frozen=True, slots=True)
class AnswerProduce:
    request_id: int
    response: wire.ProduceResponse


@dataclass(frozen=True, slots=True)
class AnswerFetch:
    request_id: int
    response: wire.FetchResponse


@dataclass(frozen=True, slots=True)
class Emit:
    event: Event


# -- inside the replica manager ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServeFetch:
    """A Partition's answer to one partition of a fetch, before records are read: the manager reads the log's
    whole batches from `fetch_offset`, at most `max_bytes`, none reaching `max_offset` (the HW for consumers, the
    LEO for followers), and emits `event` when the answer is sent. A diverging or failed response carries no
    records (`max_offset` -1)."""

    destination: int
    response: wire.FetchPartitionResponse
    fetch_offset: int
    max_offset: int
    max_bytes: int
    event: FetchServed


@dataclass(frozen=True, slots=True)
class CompleteProduce:
    request_id: int
    topic: str
    partition: int
    error: ErrorCode
    base_offset: int
    last_offset: int
    message: str = ""


StorageEffect = (
    CreateLog
    | DeleteLog
    | UpdateLogConfig
    | AppendAsLeader
    | AppendAsFollower
    | Truncate
    | TruncateFullyAndStartAt
    | AdvanceLogStartOffset
    | UpdateHighWatermark
    | WriteEpochCheckpoint
    | EnforceRetention
)
"""The effects on one partition's log: the ones that can fail."""

Effect = (
    StorageEffect
    | CheckpointHighWatermarks
    | Send
    | SendFetch
    | AnswerProduce
    | AnswerFetch
    | Emit
    | ServeFetch
    | CompleteProduce
)

STORAGE_EFFECTS: tuple[type, ...] = (
    CreateLog,
    DeleteLog,
    UpdateLogConfig,
    AppendAsLeader,
    AppendAsFollower,
    Truncate,
    TruncateFullyAndStartAt,
    AdvanceLogStartOffset,
    UpdateHighWatermark,
    WriteEpochCheckpoint,
    EnforceRetention,
)
