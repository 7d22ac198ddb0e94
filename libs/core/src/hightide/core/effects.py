"""Effects: what the pure core asks its shell to do, in order.

Room: libs/core. A core method returns a list of effects; the shell (a broker, the controller, the simulator)
carries them out in list order, and the order is the durability contract: persist, then announce. A core
method puts `Append`/`Truncate` before the `Emit` of the event that reports it, and before any `Send` or
`CompleteProduce` that depends on it.

| effect                  | the shell                                                                       |
| ----------------------- | ------------------------------------------------------------------------------- |
| AppendAsLeader          | appends a producer's batches at `base_offset`, stamped with `leader_epoch`      |
| AppendAsFollower        | appends the leader's batches as they are                                         |
| Truncate                | removes the log's suffix from `offset` (whole batches)                           |
| TruncateFullyAndStartAt | empties the log and restarts it at `offset`                                      |
| UpdateHighWatermark     | records the HW in the log (checkpointed later)                                   |
| WriteEpochCheckpoint    | rewrites `leader-epoch-checkpoint` with `entries`                                |
| ServeFetch              | reads `[fetch_offset, max_offset)` of the log and answers with `response`      |
| Send                    | delivers `message` to `destination` (a broker id, or CONTROLLER)                 |
| CompleteProduce         | answers the producer's request `request_id`                                      |
| Emit                    | stores `event` in the event log                                                  |
"""

from __future__ import annotations

from dataclasses import dataclass

from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.messages import FetchResponsePartition

CONTROLLER = -1000


@dataclass(frozen=True, slots=True)
class AppendAsLeader:
    topic: str
    partition: int
    records: bytes
    base_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    topic: str
    partition: int
    records: bytes


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
class ServeFetch:
    """Answer a fetch: the shell fills `response.records` (and `batches`) with the log's whole batches from
    `fetch_offset`, at most `max_bytes`, none reaching `max_offset` (the HW for consumers, the LEO for
    followers). A diverging or failed response carries no records and the shell sends it as it is."""

    destination: int
    response: FetchResponsePartition
    fetch_offset: int
    max_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: object


@dataclass(frozen=True, slots=True)
class CompleteProduce:
    request_id: int
    topic: str
    partition: int
    error: ErrorCode
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Emit:
    event: Event


Effect = (
    AppendAsLeader
    | AppendAsFollower
    | Truncate
    | TruncateFullyAndStartAt
    | UpdateHighWatermark
    | WriteEpochCheckpoint
    | ServeFetch
    | Send
    | CompleteProduce
    | Emit
)
