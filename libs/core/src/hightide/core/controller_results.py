"""What the controller answers: a decision (`ControllerResult`) and the replies its requests get.

Room: libs/core (vocabulary of the controller's core, pure values). A `ControllerResult` carries the metadata
records that make a decision, the events that report it and the reply; the shell stores the events as the
decision's intent (`events_at`), appends the records, applies them and only then answers (see
`hightide.core.controller`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from hightide.core.effects import Emit
from hightide.core.metadata_image import TopicPartition
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event, stamped
from hightide.protocol.metadata import MetadataRecord

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """One decision: the records that make it (append, then `apply`), the events that report it, the reply."""

    records: tuple[MetadataRecord, ...]
    events: tuple[Event, ...]
    response: R

    @property
    def effects(self) -> tuple[Emit, ...]:
        """The events as effects, to publish once the records are committed."""
        return tuple(Emit(event) for event in self.events)

    def metadata_offset(self, next_offset: int) -> int:
        """Where this decision sits in the metadata log whose next batch lands at `next_offset`: there, if it has
        records; otherwise at the last batch, the state it was decided on (so it is never taken for a decision a
        later controller overtook)."""
        assert next_offset >= 1, next_offset
        return next_offset if self.records else next_offset - 1

    def events_at(self, controller_epoch: int, next_offset: int) -> tuple[Event, ...]:
        """The events stamped with the controller epoch that decided them and `metadata_offset(next_offset)`: the
        write-ahead intent a shell stores before it appends the records (hightide.protocol.events' rules)."""
        offset = self.metadata_offset(next_offset)
        return tuple(stamped(event, controller_epoch, offset) for event in self.events)


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to an admin request that has nothing else to say."""

    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    error: ErrorCode
    broker_epoch: int = -1
    message: str = ""


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    """Kafka's BrokerHeartbeatReply: what the broker must do next."""

    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    in_controlled_shutdown: bool = False
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopicReply:
    error: ErrorCode
    message: str = ""
    topic_id: str = ""
    partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class PartitionElectionReply:
    """One partition of an ElectLeaders answer."""

    topic: str
    partition: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class RebalanceReply:
    """What an auto leader rebalance did: the partitions moved back to their preferred leader, and whether the
    cap on elections per run left some for the next run (run again at once, as Kafka reschedules)."""

    elected: tuple[TopicPartition, ...]
    more: bool


class ElectionType(StrEnum):
    """The elections an admin may ask for (Kafka's ElectionType)."""

    PREFERRED = "preferred"
    UNCLEAN = "unclean"


# -- partition reassignment (issue 13) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionReassignmentReply:
    """One partition of an AlterPartitionReassignments answer."""

    topic: str
    partition: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """One partition of a ListPartitionReassignments answer: its replicas (the target followed by the ones being
    removed), and the ones being added and removed."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]
