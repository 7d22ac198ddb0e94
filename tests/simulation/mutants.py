"""Known-bad variants of the protocol, each of which the simulator must catch: proof that its checks can fail.

Each mutant changes one rule, the way a plausible bug or an old Kafka version would, by overriding one small
method of the real Partition or ReplicaManager (or one controller or simulation setting, or the producers' send
rules). None of them is used
outside the mutant tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.effects import Effect, Emit, EnforceRetention
from hightide.core.idempotent_producer import SEQUENCE_MODULUS, B, IdempotentProducer, PartitionSends
from hightide.core.partition import NO_EPOCH, IsrState, Partition, RemoteReplica
from hightide.core.producer_state import BatchMetadata
from hightide.core.replica_manager import ReplicaManager
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.wire import FetchPartitionRequest


class HighWatermarkOverCommittedIsr(Partition):
    """The HW waits only for the committed ISR: a replica whose expansion is pending (or that is caught up and
    about to join) does not hold it back, so it can join the ISR without records below the HW."""

    def _counts_for_high_watermark(self, remote: RemoteReplica, now_ms: int) -> bool:
        return remote.broker_id in self.isr


class LeaderShrinksIsrAlone(Partition):
    """The leader drops lagging followers from the ISR by itself and moves the HW on the smaller ISR, while the
    controller still holds the old ISR and may elect a follower that lacks committed records."""

    def _propose_isr(self, proposed: frozenset[int], change: str, now_ms: int) -> list[Effect]:
        if change != "shrink":
            return super()._propose_isr(proposed, change, now_ms)
        self.isr_state = IsrState(proposed)
        event = events.IsrChangeCompleted(
            topic=self.topic,
            partition=self.partition,
            leader=self.local_id,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.ordered(proposed),
            error="NONE",
        )
        return [Emit(event), *self._maybe_increment_high_watermark(now_ms)]


class NoDivergenceCheck(Partition):
    """The leader ignores the follower's last fetched epoch: a follower with a divergent suffix keeps it."""

    def on_fetch(
        self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest, now_ms: MonoMs
    ) -> list[Effect]:
        blind = fetch.model_copy(update={"last_fetched_epoch": NO_EPOCH})
        return super().on_fetch(replica_id, broker_epoch, blind, now_ms)


class AcknowledgeRetriesAtOnce(Partition):
    """Issue 11's acknowledgement before commit: a retried acks=all batch that the log already holds is answered at
    once with its original offsets, committed or not (and whatever the ISR)."""

    def _acknowledge_retry(
        self, request_id: int, original: BatchMetadata, acks: int, now_ms: MonoMs, timeout_ms: int
    ) -> list[Effect]:
        return self._answer(request_id, ErrorCode.NONE, original.first_offset, original.last_offset, acks)


class IgnoreStorageRefusals(ReplicaManager):
    """Issue 11's silent hole: a refused append is logged and forgotten (the rest of that input's effects with it),
    while the core has already counted the records."""

    def on_storage_error(
        self, failed: Effect, error: ErrorCode, detail: str, unapplied: Sequence[Effect], now: Now
    ) -> list[Effect]:
        return []


class RetentionOnTheMonotonicClock(ReplicaManager):
    """Issue 11's retention that never fires: the retention check runs at the monotonic clock's milliseconds taken for
    wall-clock time, as the old broker passed them, so `retention.ms` is measured from record timestamps (wall clock,
    about 1.7e12) to a time since boot (about 1e7): nothing is ever old enough."""

    def tick(self, now: Now) -> list[Effect]:
        return [
            EnforceRetention(e.topic, e.partition, WallMs(now.mono_ms)) if isinstance(e, EnforceRetention) else e
            for e in super().tick(now)
        ]


@dataclass(frozen=True)
class Mutant:
    name: str
    partition_class: type[Partition] = Partition
    manager_class: type[ReplicaManager] = ReplicaManager
    sim_settings: dict[str, object] = field(default_factory=dict)
    controller_settings: dict[str, object] = field(default_factory=dict)
    producer_class: type[IdempotentProducer[Any]] = IdempotentProducer  # the simulated producers' send rules


MUTANTS = (
    Mutant("truncate_to_local_high_watermark", sim_settings={"legacy_truncate_to_high_watermark": True}),
    Mutant("high_watermark_over_committed_isr_only", HighWatermarkOverCommittedIsr),
    Mutant("leader_shrinks_isr_on_its_own", LeaderShrinksIsrAlone),
    Mutant("no_divergence_check", NoDivergenceCheck),
    # The controller elects out-of-sync replicas although the cluster's configuration forbids it.
    Mutant("unclean_election", controller_settings={"unclean_leader_election_enable": True}),
    # KIP-966's motivation: a replica that lost its tail in a crash stays the last ISR member and leads.
    Mutant("no_eligible_leader_replicas", sim_settings={"eligible_leader_replicas_enable": False}),
    Mutant("acknowledge_retries_at_once", AcknowledgeRetriesAtOnce),
    Mutant("ignore_storage_refusals", manager_class=IgnoreStorageRefusals),
    Mutant("retention_on_the_monotonic_clock", manager_class=RetentionOnTheMonotonicClock),
)


# -- the idempotent producer's rules (hightide.core.idempotent_producer), driven by the simulated producers ----------


class _FreshSequenceOnRetry(PartitionSends[B]):
    def take_retry(self, now_ms: float) -> B | None:
        batch = super().take_retry(now_ms)
        if batch is not None and batch.producer_id == self.producer.producer_id:
            batch.sequence = self.next_sequence
            self.next_sequence = (self.next_sequence + batch.record_count) % SEQUENCE_MODULUS
        return batch


class RetryTakesANewSequence(IdempotentProducer[B]):
    """A refused batch is drained again as a new one: it takes the partition's next sequence instead of keeping its
    own (Kafka's rule that a batch keeps its sequence across retries, broken), so a leader that appended the first
    attempt, whose answer was lost, cannot tell the retry from new records and appends them twice."""

    def _new_partition(self, topic: str, partition: int) -> PartitionSends[B]:
        return _FreshSequenceOnRetry(self, topic, partition)


PRODUCER_MUTANTS = (Mutant("retry_takes_a_new_sequence", producer_class=RetryTakesANewSequence),)
MUTANTS = (*MUTANTS, *PRODUCER_MUTANTS)
