"""One partition as one broker's replica sees it, as leader or follower: Kafka's Partition.scala, pure.

Room: libs/core. Inputs are decoded messages and the monotonic time (`now_ms`); outputs are effects
(`hightide.core.effects`) in durability order. It never reads a disk, a socket or a clock: the replica manager
(`hightide.core.replica_manager`) routes requests to it, and the shell appends, reads and sends.

The leader's rules (Kafka's names in brackets):

- produce [appendRecordsToLeader, UnifiedLog.analyzeAndValidateProducerState]: NOT_LEADER_OR_FOLLOWER unless
  leader; for acks=all NOT_ENOUGH_REPLICAS if |ISR| < min ISR, before anything else; then the idempotent
  producer's sequence check (`producer_state`): a refusal, a new batch to append, or a retry of a batch the log
  already holds, answered with that batch's offsets. Either way acks=all is answered only once the HW passes the
  batch [DelayedProduce]: a retried batch whose first attempt is not committed yet waits like a new one.
- HW [maybeIncrementLeaderHW]: no move while |committed ISR| < min(min.insync.replicas, RF); otherwise the least
  LEO over the leader and every remote that is in the maximal ISR, or caught up and ISR-eligible; only upward.
- caught up [isCaughtUp]: LEO == leader LEO, or now - last caught up <= replica.lag.time.max.ms.
- expand [maybeExpandIsr]: nothing in flight, ISR-eligible, LEO >= HW and >= this epoch's start offset.
- shrink [maybeShrinkIsr]: nothing in flight; ISR members no longer caught up, checked every lag / 2.
- ISR changes [AlterPartition]: one proposal in flight; maximal ISR = committed | proposed, so a shrink never
  raises the HW before the controller commits it, and an expansion counts the new member at once.
- acks=all: answered when the HW passes the last offset, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if |maximal ISR|
  < min.insync.replicas by then.
- fetch: a first read of a follower's fetch updates its state [updateFollowerFetchState]; a read of a fetch
  that waited in the purgatory does not [DelayedFetch.onComplete reads with the state already updated].

The follower's rules: fetch from the LEO with the latest epoch in the cache as `last_fetched_epoch`; on a
diverging-epoch answer truncate where the leader's epochs say (never by its own HW); HW = min(leader HW, LEO);
log start offset = the leader's, up to its own HW [maybeIncrementLogStartOffset, LeaderOffsetIncremented]. A
log that ends inside the leader's first batch is cut back to that batch (or, empty, restarted at it, as Kafka's
appendRecordsToFollowerOrFutureReplica does) so that the batch can be appended whole. Producer state is kept on
followers too, from the batches they append, so a new leader answers retries without reading its log; after a
truncation it no longer matches the log and is rebuilt from it before the next produce (`producers_stale`).

Truncation points are batch boundaries of this replica's log (a log drops whole batches): `batch_start` gives
the base offset of the batch holding an offset, and the replica manager sets it to a query of the log.

What only the shell sees, the core still announces, so a history rebuilt from events alone matches the disks:
`log_opened` when the shell builds a core from a log (created, or loaded at start), `log_deleted` when it deletes
one, and `advance_log_start_offset` after retention moved the log's start.

`legacy_truncate_to_high_watermark` restores the pre-KIP-101 rule (truncate to the own HW on becoming a
follower, and no epochs in fetches) so the seeds' data-loss scenario can be reproduced and caught.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from hightide.core.clock import MonoMs
from hightide.core.effects import (
    CONTROLLER,
    AdvanceLogStartOffset,
    AppendAsFollower,
    AppendAsLeader,
    CompleteProduce,
    Effect,
    Emit,
    Send,
    ServeFetch,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    WriteEpochCheckpoint,
)
from hightide.core.epoch_cache import EpochEndOffset, LeaderEpochCache
from hightide.core.producer_state import (
    APPEND,
    BatchMetadata,
    ProducerStateTable,
    Verdict,
    last_sequence,
    next_sequence,
)
from hightide.core.truncation import check_fetch_divergence, offset_truncation_state
from hightide.protocol import events
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import BatchHeader
from hightide.protocol.wire import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchPartitionRequest,
    FetchPartitionResponse,
    error_code_of,
)

CONSUMER_REPLICA_ID: Final = -1
NO_EPOCH: Final = -1
NO_OFFSET: Final = -1
# A monotonic time long past: never caught up, never fetched. Not 0: a monotonic clock counts from boot, and on a
# machine up for less than replica.lag.time.max.ms a follower "last caught up at 0" would count as caught up.
NEVER_MS: Final = MonoMs(-(2**62))
ACKS_ALL: Final = -1
NO_LEADER: Final = -1
# AlterPartition errors after which the leader waits for new metadata rather than retrying (Partition.scala).
_WAIT_FOR_METADATA: Final = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NEW_LEADER_ELECTED,
    }
)
_REVERT: Final = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    legacy_truncate_to_high_watermark: bool = False
    # How long an AlterPartition may go unanswered before the leader sends it again (Kafka's broker-to-controller
    # channel retries a request until it is answered; controller.socket.timeout.ms is 30 s).
    alter_partition_timeout_ms: int = 30_000
    # How long the leader waits before sending a refused-but-retriable AlterPartition again (retry.backoff.ms).
    alter_partition_retry_backoff_ms: int = 100


@dataclass(slots=True)
class RemoteReplica:
    """The leader's view of one follower (Kafka's ReplicaState)."""

    broker_id: int
    log_end_offset: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    last_caught_up_time_ms: MonoMs = NEVER_MS
    last_fetch_leader_log_end_offset: int = NO_OFFSET
    last_fetch_time_ms: MonoMs = NEVER_MS
    broker_epoch: int = -1

    def is_caught_up(self, leader_end_offset: int, now_ms: MonoMs, lag_max_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= lag_max_ms


@dataclass(frozen=True, slots=True)
class IsrState:
    """Committed ISR, and the proposed one while an AlterPartition is in flight (Kafka's Committed,
    PendingExpand and PendingShrink states). The maximal ISR is their union: an expansion counts the new
    member at once, a shrink keeps the old members until the controller commits it."""

    isr: frozenset[int]
    proposed: frozenset[int] | None = None
    change: str = ""

    @property
    def inflight(self) -> bool:
        return self.proposed is not None

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr if self.proposed is None else self.isr | self.proposed


@dataclass(slots=True)
class PendingProduce:
    """An acks=all produce waiting for the HW to pass `last_offset` (Kafka's DelayedProduce), until `deadline_ms`."""

    request_id: int
    base_offset: int
    last_offset: int
    deadline_ms: MonoMs


def _identity(offset: int) -> int:
    return offset


@dataclass(slots=True)
class Partition:
    """A replica of `topic`-`partition` on broker `local_id`, with its log's offsets and epoch cache."""

    topic: str
    partition: int
    local_id: int
    config: PartitionConfig
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    epoch_cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = NO_EPOCH
    partition_epoch: int = NO_EPOCH
    isr_state: IsrState = field(default_factory=lambda: IsrState(frozenset()))
    remotes: dict[int, RemoteReplica] = field(default_factory=dict)
    leader_epoch_start_offset: int | None = None
    broker_epochs: dict[int, int] = field(default_factory=dict)
    local_broker_epoch: int = -1
    pending_produces: list[PendingProduce] = field(default_factory=list)
    next_isr_check_ms: MonoMs = NEVER_MS
    alter_partition_deadline_ms: MonoMs = NEVER_MS
    # The idempotent producers' last batches, from this log (Kafka's ProducerStateManager). Stale after a
    # truncation or at start: the replica manager rebuilds it from the log before the next produce.
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    producers_stale: bool = False
    # Replicas of this partition whose broker reported their storage failed (from the metadata): not ISR-eligible.
    offline_replicas: frozenset[int] = frozenset()
    # The base offset of the batch holding an offset of this log (the offset itself at a boundary): a log drops
    # whole batches, so a truncation point is moved down to one. The replica manager gives a query of the log.
    batch_start: Callable[[int], int] = _identity
    # Log compaction (issue 13): the offset this follower last fetched from. A compacted leader answers a fetch
    # from a removed offset with the next batch it holds, beyond the LEO: a gap, and no stale answer, when the
    # fetch was from this very LEO.
    last_fetch_offset: int | None = None

    def __post_init__(self) -> None:
        assert 0 <= self.log_start_offset <= self.high_watermark <= self.log_end_offset, self

    # -- queries ---------------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    @property
    def isr(self) -> frozenset[int]:
        return self.isr_state.isr

    def ordered(self, members: frozenset[int]) -> tuple[int, ...]:
        """Members in replica order (how Kafka lists an ISR)."""
        return tuple(r for r in self.replicas if r in members)

    def effective_min_isr(self) -> int:
        return min(self.config.min_insync_replicas, len(self.replicas))

    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr()

    def is_isr_eligible(self, broker_id: int) -> bool:
        """Registered, unfenced and not shutting down (present in `broker_epochs`), its replica not offline (its
        broker reported its storage failed: the controller refuses it in the ISR), and its fetches carry the broker
        epoch the metadata knows (or -1)."""
        known = self.broker_epochs.get(broker_id)
        if known is None or broker_id in self.offline_replicas:
            return False
        remote = self.remotes.get(broker_id)
        return remote is None or remote.broker_epoch in (-1, known)

    # -- becoming leader or follower -----------------------------------------------------------------------

    def make_leader(
        self, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...], now_ms: MonoMs
    ) -> list[Effect]:
        """Lead from `leader_epoch` (Kafka's makeLeader). A state older than the one held is ignored."""
        if partition_epoch < self.partition_epoch:
            return []
        assert self.local_id in replicas and self.local_id in isr, (self.local_id, replicas, isr)
        effects: list[Effect] = []
        was_leader = self.is_leader
        new_epoch = leader_epoch > self.leader_epoch
        # The metadata may bring the committed ISR change before the AlterPartition answer does: it is the same
        # commit, and the late answer is then ignored (an older partition epoch).
        confirmed = was_leader and not new_epoch and self.isr_state.proposed == frozenset(isr)
        change = self.isr_state.change
        self.replicas, self.leader, self.partition_epoch = tuple(replicas), self.local_id, partition_epoch
        self.isr_state = IsrState(frozenset(isr))
        if confirmed:
            effects.append(Emit(self._isr_change_completed(ErrorCode.NONE, change)))
        self.remotes = {r: self.remotes.get(r, RemoteReplica(r)) for r in replicas if r != self.local_id}
        if new_epoch:
            self.leader_epoch = leader_epoch
            self._reset_remotes(was_leader, now_ms)
            self.leader_epoch_start_offset = self.log_end_offset
            effects += self._assign_epoch(leader_epoch, self.log_end_offset)
            self.next_isr_check_ms = MonoMs(now_ms + self.config.replica_lag_time_max_ms // 2)
        effects.append(Emit(self._became_leader_event()))
        effects += self._maybe_increment_high_watermark(now_ms)
        return effects

    def _reset_remotes(self, was_leader: bool, now_ms: MonoMs) -> None:
        """Kafka's resetReplicaState on a new leader epoch."""
        for remote in self.remotes.values():
            in_isr = remote.broker_id in self.isr
            remote.last_caught_up_time_ms = now_ms if in_isr else NEVER_MS
            if not was_leader:
                remote.log_end_offset = remote.log_start_offset = NO_OFFSET
                remote.last_fetch_leader_log_end_offset = NO_OFFSET
                remote.last_fetch_time_ms = NEVER_MS
            else:
                remote.last_fetch_leader_log_end_offset = self.log_end_offset
                remote.last_fetch_time_ms = now_ms if in_isr else NEVER_MS

    def make_follower(
        self, leader: int, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]
    ) -> list[Effect]:
        """Follow `leader` (-1: none yet) from `leader_epoch` (Kafka's makeFollower)."""
        if partition_epoch < self.partition_epoch:
            return []
        assert leader != self.local_id
        effects = self.fail_pending_produces(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        new_epoch = leader_epoch > self.leader_epoch
        self.replicas, self.leader, self.partition_epoch = tuple(replicas), leader, partition_epoch
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self.isr_state = IsrState(frozenset(isr))
        self.remotes = {}
        self.leader_epoch_start_offset = None
        if new_epoch and self.config.legacy_truncate_to_high_watermark:
            # Before KIP-101 a follower truncated to its own HW when it started following. This loses committed
            # records when its HW lagged the leader's; kept only to reproduce and catch that loss.
            effects += self._truncate(self.high_watermark, "high_watermark")
        effects.append(Emit(self._became_follower_event()))
        return effects

    # -- produce (leader) --------------------------------------------------------------------------------

    def produce_refusal(self, acks: int) -> ErrorCode:
        """Why a produce cannot be taken before its batches are even read (Kafka's appendRecordsToLeader): not the
        leader, or acks=all while the ISR is below min.insync.replicas (NOT_ENOUGH_REPLICAS)."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if acks == ACKS_ALL and len(self.isr) < self.effective_min_isr():
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def refuse_produce(self, request_id: int, error: ErrorCode, acks: int, message: str = "") -> list[Effect]:
        """Answer a produce with `error` (a refusal before anything is appended)."""
        assert error is not ErrorCode.NONE
        return self._answer(request_id, error, NO_OFFSET, NO_OFFSET, acks, message)

    def append_as_leader(
        self,
        request_id: int,
        records: bytes,
        headers: Sequence[BatchHeader],
        acks: int,
        now_ms: MonoMs,
        timeout_ms: int,
    ) -> list[Effect]:
        """A producer's batches, validated (`headers` from `hightide.core.validation.validate_produce`): refused,
        recognised as a retry of batches the log holds, or appended; answered now, or when the HW passes them."""
        assert headers and acks in (0, 1, ACKS_ALL), (len(headers), acks)
        assert not self.producers_stale, "the replica manager rebuilds the producer state first"
        refusal = self.produce_refusal(acks)
        if refusal is not ErrorCode.NONE:
            return self.refuse_produce(request_id, refusal, acks)
        verdict = self._check_sequences(headers)
        if verdict.kind == "error":
            return self._answer(request_id, verdict.error, NO_OFFSET, NO_OFFSET, acks, verdict.reason)
        if verdict.kind == "duplicate":
            # Kafka answers a retried batch the log already holds with its original offsets, and for acks=all
            # only once those are committed: a retry whose first attempt timed out before the followers had it
            # must not be acknowledged before its records are (the ack-before-commit bug of issue 11).
            assert verdict.duplicate_of is not None
            original = verdict.duplicate_of
            return self._acknowledge_retry(request_id, original, acks, now_ms, timeout_ms)
        base_offset = self.log_end_offset
        last_offset = base_offset + sum(h.record_count for h in headers) - 1
        effects: list[Effect] = [
            AppendAsLeader(self.topic, self.partition, records, base_offset, self.leader_epoch, tuple(headers))
        ]
        self._remember_producers(headers, base_offset)
        self.log_end_offset = last_offset + 1
        count = last_offset - base_offset + 1
        effects.append(Emit(self._appended_event(base_offset, last_offset, count, len(records), True)))
        effects += self._maybe_increment_high_watermark(now_ms)
        return effects + self._acknowledge(request_id, base_offset, last_offset, acks, now_ms, timeout_ms)

    def _acknowledge(
        self, request_id: int, base: int, last: int, acks: int, now_ms: MonoMs, timeout_ms: int
    ) -> list[Effect]:
        """acks 0 and 1 are answered now; acks=all waits in the produce purgatory until the HW passes `last`."""
        if acks != ACKS_ALL:
            return self._answer(request_id, ErrorCode.NONE, base, last, acks)
        self.pending_produces.append(PendingProduce(request_id, base, last, MonoMs(now_ms + timeout_ms)))
        return self._complete_delayed_produces()

    def _acknowledge_retry(
        self, request_id: int, original: BatchMetadata, acks: int, now_ms: MonoMs, timeout_ms: int
    ) -> list[Effect]:
        """A retried batch the log holds: answered with its original offsets, when its first append would be."""
        return self._acknowledge(request_id, original.first_offset, original.last_offset, acks, now_ms, timeout_ms)

    def _check_sequences(self, headers: Sequence[BatchHeader]) -> Verdict:
        """The idempotent producer's check (KIP-98): the first batch against the table, the rest must continue it."""
        first = headers[0]
        if first.producer_id < 0:
            return APPEND
        if first.base_sequence < 0:
            # Kafka's LogValidator: an idempotent batch needs a sequence (and next_sequence asserts it has one).
            return Verdict("error", ErrorCode.INVALID_RECORD, reason=f"invalid sequence {first.base_sequence}")
        last_seq = last_sequence(first.base_sequence, first.last_offset_delta)
        verdict = self.producers.check(first.producer_id, first.producer_epoch, first.base_sequence, last_seq)
        for header in headers[1:]:
            continues = header.producer_id == first.producer_id and header.base_sequence == next_sequence(last_seq)
            if verdict.kind != "append" or not continues:
                return Verdict("error", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, reason="batches of one request")
            last_seq = last_sequence(header.base_sequence, header.last_offset_delta)
        return verdict

    def _remember_producers(self, headers: Sequence[BatchHeader], base_offset: int) -> None:
        """Record appended idempotent batches (Kafka's ProducerStateEntry.addBatch), leader or follower."""
        offset = base_offset
        for header in headers:
            last = offset + header.last_offset_delta
            valid = header.producer_epoch >= 0 and header.base_sequence >= 0 and not header.is_control
            if header.producer_id >= 0 and valid:
                last_seq = last_sequence(header.base_sequence, header.last_offset_delta)
                self.producers.update(
                    header.producer_id, header.producer_epoch, header.base_sequence, last_seq, offset, last
                )
            offset = last + 1

    def rebuild_producers(self, headers: Sequence[BatchHeader]) -> None:
        """The producer state again, from the headers of every batch of this log (Kafka's reload after a
        truncation or at start; Kafka reads snapshots, Hightide scans the headers)."""
        self.producers.rebuild(headers)
        self.producers_stale = False

    def _answer(
        self, request_id: int, error: ErrorCode, base: int, last: int, acks: int, message: str = ""
    ) -> list[Effect]:
        event = events.ProduceCompleted(
            topic=self.topic,
            partition=self.partition,
            leader=self.local_id,
            leader_epoch=self.leader_epoch,
            acks=acks,
            base_offset=base,
            last_offset=last,
            high_watermark=self.high_watermark,
            error=error.name,
        )
        return [Emit(event), CompleteProduce(request_id, self.topic, self.partition, error, base, last, message)]

    def _complete_delayed_produces(self) -> list[Effect]:
        """Kafka's checkEnoughReplicasReachOffset for every waiting acks=all produce."""
        effects: list[Effect] = []
        waiting = []
        for pending in self.pending_produces:
            if self.high_watermark > pending.last_offset:
                enough = self.config.min_insync_replicas <= len(self.isr_state.maximal_isr)
                error = ErrorCode.NONE if enough else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                effects += self._answer(pending.request_id, error, pending.base_offset, pending.last_offset, ACKS_ALL)
            else:
                waiting.append(pending)
        self.pending_produces = waiting
        return effects

    def fail_pending_produces(self, error: ErrorCode) -> list[Effect]:
        """Answer every waiting acks=all produce with `error`: leadership moved, the replica was deleted or went
        offline (Kafka's DelayedProduce then finds the partition gone or no longer led)."""
        effects: list[Effect] = []
        for pending in self.pending_produces:
            effects += self._answer(pending.request_id, error, pending.base_offset, pending.last_offset, ACKS_ALL)
        self.pending_produces = []
        return effects

    # -- fetch (leader) ----------------------------------------------------------------------------------

    def on_fetch(
        self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest, now_ms: MonoMs
    ) -> list[Effect]:
        """Answer one partition of a fetch from a follower (`replica_id` >= 0) or a consumer (-1), as it arrives:
        a follower's fetch offset is its LEO, which moves its state and maybe the HW first."""
        return self._read(replica_id, broker_epoch, fetch, now_ms, update_follower=True)

    def read_fetch(
        self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest, now_ms: MonoMs
    ) -> list[Effect]:
        """Read one partition of a fetch that waited in the purgatory: the checks again (leadership may have
        moved), but the follower's state is not updated twice for one fetch, as in Kafka."""
        return self._read(replica_id, broker_epoch, fetch, now_ms, update_follower=False)

    def on_unchanged_fetch(
        self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest, now_ms: MonoMs
    ) -> list[Effect]:
        """A follower's fetch, at the very position it fetched from last time, of a partition whose answer to it
        has not changed since (nothing was appended, the HW, log start and leadership are where they were, and the
        last answer was at the LEO): what `on_fetch` would do but for building that same answer again, the
        follower's state moved (its fetch and caught-up times)."""
        return self._update_follower(replica_id, broker_epoch, fetch, now_ms)

    def _read(
        self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest, now_ms: MonoMs, *, update_follower: bool
    ) -> list[Effect]:
        error = self._fetch_error(replica_id, broker_epoch, fetch)
        if error is not ErrorCode.NONE:
            return [self._serve(replica_id, fetch, error)]
        if fetch.last_fetched_epoch != NO_EPOCH:
            check = check_fetch_divergence(
                self.epoch_cache,
                self.log_end_offset,
                self.log_start_offset,
                self.leader_epoch,
                fetch.current_leader_epoch,
                fetch.fetch_offset,
                fetch.last_fetched_epoch,
            )
            if check.error is not ErrorCode.NONE:
                return [self._serve(replica_id, fetch, check.error)]
            if check.diverging is not None:
                # A diverging follower's position is not recorded: its log is about to change.
                return [self._serve(replica_id, fetch, ErrorCode.NONE, diverging=check.diverging)]
        if not self.log_start_offset <= fetch.fetch_offset <= self.log_end_offset:
            return [self._serve(replica_id, fetch, ErrorCode.OFFSET_OUT_OF_RANGE)]
        # The follower's position moves the HW first, and the answer carries the HW it has just set (seeds 000
        # and 003). A follower still learns the HW that its data made one round after the data: the seeds' two
        # round trips. That answer is not hurried for the HW alone: with nothing to return, the fetch waits in the
        # replica manager's purgatory for data or its max wait (Kafka's DelayedFetch since KAFKA-9952), and then
        # carries the HW of that moment.
        effects: list[Effect] = []
        if replica_id != CONSUMER_REPLICA_ID and update_follower:
            effects += self._update_follower(replica_id, broker_epoch, fetch, now_ms)
        return [*effects, self._serve(replica_id, fetch, ErrorCode.NONE)]

    def _fetch_error(self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest) -> ErrorCode:
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if fetch.current_leader_epoch != NO_EPOCH:
            if fetch.current_leader_epoch < self.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if fetch.current_leader_epoch > self.leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
        if replica_id != CONSUMER_REPLICA_ID:
            if replica_id not in self.remotes:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            known = self.broker_epochs.get(replica_id, -1)
            if broker_epoch != -1 and known > broker_epoch:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER  # a restarted broker's old incarnation
        return ErrorCode.NONE

    def _serve(
        self, replica_id: int, fetch: FetchPartitionRequest, error: ErrorCode, diverging: EpochEndOffset | None = None
    ) -> ServeFetch:
        # Built for every partition of every fetch: the core's own values, not validated again.
        response = FetchPartitionResponse.model_construct(
            topic=self.topic,
            partition=self.partition,
            error=int(error),
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            diverging_epoch=NO_EPOCH if diverging is None else diverging.epoch,
            diverging_end_offset=NO_OFFSET if diverging is None else diverging.end_offset,
        )
        readable = error is ErrorCode.NONE and diverging is None
        max_offset = self.high_watermark if replica_id == CONSUMER_REPLICA_ID else self.log_end_offset
        event = events.FetchServed(
            topic=self.topic,
            partition=self.partition,
            leader=self.local_id,
            replica=replica_id,
            leader_epoch=self.leader_epoch,
            fetch_offset=fetch.fetch_offset,
            last_fetched_epoch=fetch.last_fetched_epoch,
            records_end_offset=max_offset if readable else fetch.fetch_offset,
            high_watermark=self.high_watermark,
            log_end_offset=self.log_end_offset,
            diverging_epoch=response.diverging_epoch,
            diverging_end_offset=response.diverging_end_offset,
            error=error.name,
        )
        return ServeFetch(
            replica_id, response, fetch.fetch_offset, max_offset if readable else -1, fetch.partition_max_bytes, event
        )

    def _update_follower(
        self, replica_id: int, broker_epoch: int, fetch: FetchPartitionRequest, now_ms: MonoMs
    ) -> list[Effect]:
        """Kafka's updateFollowerFetchState: the fetch offset is the follower's LEO."""
        remote = self.remotes[replica_id]
        previous_end = remote.log_end_offset
        leader_end = self.log_end_offset
        if fetch.fetch_offset >= leader_end:
            remote.last_caught_up_time_ms = max(remote.last_caught_up_time_ms, now_ms)
        elif fetch.fetch_offset >= remote.last_fetch_leader_log_end_offset:
            remote.last_caught_up_time_ms = max(remote.last_caught_up_time_ms, remote.last_fetch_time_ms)
        remote.log_end_offset = fetch.fetch_offset
        remote.log_start_offset = fetch.log_start_offset
        remote.last_fetch_leader_log_end_offset = max(leader_end, remote.last_fetch_leader_log_end_offset)
        remote.last_fetch_time_ms = now_ms
        remote.broker_epoch = broker_epoch
        effects: list[Effect] = []
        if previous_end != remote.log_end_offset:
            event = events.FollowerStateUpdated(
                topic=self.topic,
                partition=self.partition,
                leader=self.local_id,
                replica=replica_id,
                log_end_offset=remote.log_end_offset,
                last_caught_up_time_ms=remote.last_caught_up_time_ms,
            )
            effects.append(Emit(event))
        effects += self._maybe_expand_isr(remote, now_ms)
        if previous_end != remote.log_end_offset:
            effects += self._maybe_increment_high_watermark(now_ms)
        return effects

    # -- the high watermark (leader) -----------------------------------------------------------------------

    def _maybe_increment_high_watermark(self, now_ms: MonoMs) -> list[Effect]:
        """Kafka's maybeIncrementLeaderHW; then answer the acks=all produces it completes."""
        if not self.is_leader or self.is_under_min_isr():
            return []
        candidate = self.log_end_offset
        for remote in self.remotes.values():
            if remote.log_end_offset < candidate and self._counts_for_high_watermark(remote, now_ms):
                candidate = remote.log_end_offset
        if candidate <= self.high_watermark:
            return []
        return self._set_high_watermark(candidate) + self._complete_delayed_produces()

    def _counts_for_high_watermark(self, remote: RemoteReplica, now_ms: MonoMs) -> bool:
        """A remote holds the HW back if it is in the maximal ISR, or caught up and ISR-eligible (Kafka's
        shouldWaitForReplicaToJoinIsr: a replica about to join must not find the HW above its LEO)."""
        if remote.broker_id in self.isr_state.maximal_isr:
            return True
        caught_up = remote.is_caught_up(self.log_end_offset, now_ms, self.config.replica_lag_time_max_ms)
        return caught_up and self.is_isr_eligible(remote.broker_id)

    def _set_high_watermark(self, high_watermark: int) -> list[Effect]:
        assert self.log_start_offset <= high_watermark <= self.log_end_offset, (high_watermark, self)
        previous, self.high_watermark = self.high_watermark, high_watermark
        event = events.HighWatermarkAdvanced(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            leader_epoch=self.leader_epoch,
            previous=previous,
            high_watermark=high_watermark,
        )
        return [UpdateHighWatermark(self.topic, self.partition, high_watermark), Emit(event)]

    # -- the ISR (leader) ----------------------------------------------------------------------------------

    def _maybe_expand_isr(self, remote: RemoteReplica, now_ms: MonoMs) -> list[Effect]:
        state = self.isr_state
        if state.inflight or remote.broker_id in state.isr or not self.is_isr_eligible(remote.broker_id):
            return []
        start = self.leader_epoch_start_offset
        in_sync = remote.log_end_offset >= self.high_watermark and start is not None and remote.log_end_offset >= start
        if not in_sync:
            return []
        return self._propose_isr(state.isr | {remote.broker_id}, "expand", now_ms)

    def maybe_shrink_isr(self, now_ms: MonoMs) -> list[Effect]:
        """Kafka's isr-expiration task: propose removing ISR members that are no longer caught up."""
        if not self.is_leader or self.isr_state.inflight:
            return []
        lag = self.config.replica_lag_time_max_ms
        out_of_sync = {
            r
            for r in self.isr - {self.local_id}
            if r not in self.remotes or not self.remotes[r].is_caught_up(self.log_end_offset, now_ms, lag)
        }
        if not out_of_sync:
            return []
        return self._propose_isr(self.isr - out_of_sync, "shrink", now_ms)

    def _propose_isr(self, proposed: frozenset[int], change: str, now_ms: MonoMs) -> list[Effect]:
        assert self.local_id in proposed
        self.isr_state = IsrState(self.isr, proposed, change)
        self.alter_partition_deadline_ms = MonoMs(now_ms + self.config.alter_partition_timeout_ms)
        event = events.IsrChangeProposed(
            topic=self.topic,
            partition=self.partition,
            leader=self.local_id,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.ordered(self.isr),
            proposed_isr=self.ordered(proposed),
            change=change,
        )
        return [Emit(event), Send(CONTROLLER, self._alter_partition_request())]

    def _alter_partition_request(self) -> AlterPartitionRequest:
        assert self.isr_state.proposed is not None
        members = self.ordered(self.isr_state.proposed)
        epochs = tuple(self.local_broker_epoch if r == self.local_id else self.remotes[r].broker_epoch for r in members)
        return AlterPartitionRequest(
            broker_id=self.local_id,
            broker_epoch=self.local_broker_epoch,
            topic=self.topic,
            partition=self.partition,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            new_isr=members,
            new_isr_broker_epochs=epochs,
        )

    def on_alter_partition_response(
        self, request: AlterPartitionRequest, response: AlterPartitionResponse, now_ms: MonoMs
    ) -> list[Effect]:
        """Kafka's handleAlterPartitionUpdate / handleAlterPartitionError for the answer to `request`."""
        if not self.is_leader or not self.isr_state.inflight:
            return []
        current = self._alter_partition_request()
        proposal = (request.leader_epoch, request.partition_epoch, request.new_isr)
        if proposal != (current.leader_epoch, current.partition_epoch, current.new_isr):
            # The answer to an earlier proposal, whose commit the metadata brought first: the state has moved on
            # (maybe to a new proposal), and accepting it would drop the pending one from the maximal ISR while
            # the controller may still commit it (Kafka ignores it: `partitionState != proposedIsrState`).
            return []
        error, change = response.error_code, self.isr_state.change
        if error is ErrorCode.NONE:
            if response.leader_epoch != self.leader_epoch or response.partition_epoch < self.partition_epoch:
                return []
            self.isr_state = IsrState(frozenset(response.isr))
            self.partition_epoch = response.partition_epoch
            return [Emit(self._isr_change_completed(error, change)), *self._maybe_increment_high_watermark(now_ms)]
        if error in _REVERT:
            self.isr_state = IsrState(self.isr)
            return [Emit(self._isr_change_completed(error, change))]
        if error in _WAIT_FOR_METADATA:
            return [Emit(self._isr_change_completed(error, change))]
        # Any other error (NOT_CONTROLLER, STALE_BROKER_EPOCH, REQUEST_TIMED_OUT...) is retried by `tick` after
        # the backoff, never at once: an answer that comes back in microseconds must not become a busy loop.
        self.alter_partition_deadline_ms = MonoMs(now_ms + self.config.alter_partition_retry_backoff_ms)
        return []

    def _isr_change_completed(self, error: ErrorCode, change: str) -> events.IsrChangeCompleted:
        return events.IsrChangeCompleted(
            topic=self.topic,
            partition=self.partition,
            leader=self.local_id,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            isr=self.ordered(self.isr),
            error=error.name,
            change=change,
        )

    def tick(self, now_ms: MonoMs) -> list[Effect]:
        """Time passing: expire acks=all produces, send an unanswered AlterPartition again, and run the ISR
        check every replica.lag.time.max.ms / 2."""
        effects: list[Effect] = []
        expired = [p for p in self.pending_produces if p.deadline_ms <= now_ms]
        if expired:
            self.pending_produces = [p for p in self.pending_produces if p.deadline_ms > now_ms]
            for pending in expired:
                effects += self._answer(
                    pending.request_id, ErrorCode.REQUEST_TIMED_OUT, pending.base_offset, pending.last_offset, -1
                )
        if self.is_leader and self.isr_state.inflight and now_ms >= self.alter_partition_deadline_ms:
            self.alter_partition_deadline_ms = MonoMs(now_ms + self.config.alter_partition_timeout_ms)
            effects.append(Send(CONTROLLER, self._alter_partition_request()))
        if self.is_leader and now_ms >= self.next_isr_check_ms:
            self.next_isr_check_ms = MonoMs(now_ms + max(self.config.replica_lag_time_max_ms // 2, 1))
            effects += self.maybe_shrink_isr(now_ms)
            # A replica outside the ISR that was caught up holds the HW until it no longer is: one that stopped
            # fetching must not hold it for good (Kafka waits for the next fetch or produce to look again).
            effects += self._maybe_increment_high_watermark(now_ms)
        return effects

    # -- follower ----------------------------------------------------------------------------------------

    def fetch_partition(self, max_bytes: int = 1024 * 1024) -> FetchPartitionRequest:
        """What this follower fetches next: from its LEO, with the latest epoch it has (KIP-320 / Fetch v12)."""
        fetch_offset, current_leader_epoch, last_fetched_epoch, log_start_offset, _ = self.fetch_state(max_bytes)
        # The core's own values, not validated again.
        return FetchPartitionRequest.model_construct(
            topic=self.topic,
            partition=self.partition,
            fetch_offset=fetch_offset,
            current_leader_epoch=current_leader_epoch,
            last_fetched_epoch=last_fetched_epoch,
            log_start_offset=log_start_offset,
            partition_max_bytes=max_bytes,
        )

    def fetch_state(self, max_bytes: int) -> tuple[int, int, int, int, int]:
        """`fetch_partition`'s fields beyond the partition's name (fetch offset, current leader epoch, last fetched
        epoch, log start offset, max bytes): what an incremental fetch session compares with what the leader holds."""
        latest = self.epoch_cache.latest_epoch
        legacy = self.config.legacy_truncate_to_high_watermark
        self.last_fetch_offset = self.log_end_offset
        last_fetched = NO_EPOCH if legacy or latest is None else latest
        return self.log_end_offset, self.leader_epoch, last_fetched, self.log_start_offset, max_bytes

    def on_fetch_response(
        self, leader: int, response: FetchPartitionResponse, headers: Sequence[BatchHeader], now_ms: MonoMs
    ) -> list[Effect]:
        """Apply the leader's answer (`headers`: its records, validated by `validate_replicated`): append,
        truncate where the epochs diverge, or start over; then follow the leader's HW and log start offset."""
        if self.is_leader or leader != self.leader:
            return []
        error = error_code_of(response.error)
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            return self._handle_out_of_range(response)
        if error is not ErrorCode.NONE:
            return []  # fenced, unknown epoch, not leader: wait for new metadata
        if response.diverging_epoch != NO_EPOCH:
            diverging = EpochEndOffset(response.diverging_epoch, response.diverging_end_offset)
            decision = offset_truncation_state(diverging, self.epoch_cache, self.log_end_offset, self.high_watermark)
            return self._truncate(decision.truncate_to, "divergence")
        effects: list[Effect] = []
        if headers:
            first = headers[0]
            beyond = first.base_offset > self.log_end_offset
            compacted_gap = beyond and self.last_fetch_offset == self.log_end_offset
            if (beyond and not compacted_gap) or first.last_offset < self.log_end_offset:
                return []  # an answer to an older fetch: the log has moved since
            if first.base_offset < self.log_end_offset:
                return self._realign(response, headers)
            effects += self._append_as_follower(response.records, headers)
        return effects + self._follow_high_watermark(response.high_watermark) + self._follow_log_start_offset(response)

    def _realign(self, response: FetchPartitionResponse, headers: Sequence[BatchHeader]) -> list[Effect]:
        """The log ends inside the leader's first batch (its log start offset fell inside a batch, or a legacy
        truncation cut this log at its HW): an empty log restarts at the batch and appends it, as Kafka's
        appendRecordsToFollowerOrFutureReplica does on UnexpectedAppendOffsetException; a log with records is
        cut back to the batch, and the next fetch brings it whole (never its tail alone: a batch is one CRC)."""
        base = headers[0].base_offset
        if self.log_end_offset > self.log_start_offset:
            return self._truncate(base, "realignment")
        effects = self._start_over(base)
        return (
            effects
            + self._append_as_follower(response.records, headers)
            + self._follow_high_watermark(response.high_watermark)
        )

    def _append_as_follower(self, records: bytes, headers: Sequence[BatchHeader]) -> list[Effect]:
        assert headers[0].base_offset >= self.log_end_offset, (headers[0], self.log_end_offset)  # a gap: compacted
        effects: list[Effect] = [AppendAsFollower(self.topic, self.partition, records, tuple(headers))]
        for header in headers:
            latest = self.epoch_cache.latest_epoch
            if latest is None or header.partition_leader_epoch > latest:
                effects += self._assign_epoch(header.partition_leader_epoch, header.base_offset)
        base, last = headers[0].base_offset, headers[-1].last_offset
        if not self.producers_stale:
            self._remember_producers(headers, base)
        self.log_end_offset = last + 1
        effects.append(Emit(self._appended_event(base, last, last - base + 1, len(records), False)))
        return effects

    def _follow_high_watermark(self, leader_high_watermark: int) -> list[Effect]:
        """A follower's HW = min(leader HW, own LEO), never below its log start, and only upward."""
        candidate = max(min(leader_high_watermark, self.log_end_offset), self.log_start_offset)
        if candidate <= self.high_watermark:
            return []
        return self._set_high_watermark(candidate)

    def _follow_log_start_offset(self, response: FetchPartitionResponse) -> list[Effect]:
        """Kafka's follower moves its log start offset up to the leader's (LeaderOffsetIncremented), never past
        its own HW (the leader deleted only committed records)."""
        target = min(response.log_start_offset, self.high_watermark)
        if target <= self.log_start_offset:
            return []
        return [
            AdvanceLogStartOffset(self.topic, self.partition, target),
            *self.advance_log_start_offset(target, "leader"),
        ]

    def _handle_out_of_range(self, response: FetchPartitionResponse) -> list[Effect]:
        """Kafka's fetchOffsetAndTruncate: behind the leader's log start, start over there; past its end,
        truncate to it."""
        if response.log_end_offset != NO_OFFSET and response.log_end_offset < self.log_end_offset:
            return self._truncate(response.log_end_offset, "offset_out_of_range")
        if response.log_start_offset > self.log_end_offset:
            return self._start_over(response.log_start_offset)
        return []

    def _truncate(self, offset: int, reason: str) -> list[Effect]:
        if offset < self.log_end_offset:
            offset = self.batch_start(offset)
        if offset >= self.log_end_offset:
            # Kafka's UnifiedLog.truncateTo still trims the epoch cache at the LEO: a replica that led an epoch
            # without writing in it holds (epoch, LEO), and would otherwise claim that epoch in every fetch
            # and be told it diverges forever.
            if not self.epoch_cache.truncate_from_end(self.log_end_offset):
                return []
            event = events.LeaderEpochsTruncated(
                topic=self.topic, partition=self.partition, replica=self.local_id, end_offset=self.log_end_offset
            )
            return [self._epoch_checkpoint(), Emit(event)]
        # No "never below the HW" assertion here: after a lossy crash of the replicas that held a committed
        # tail (KIP-101's second scenario) the new leader no longer has it, and a follower must follow that log
        # all the same, as Kafka's does. The event carries the HW before the cut, so the simulator's invariants
        # and the audit can name every committed record lost and check that a fault excuses it.
        high_watermark_before = self.high_watermark
        before = self.log_end_offset
        self.log_end_offset = offset
        self.high_watermark = min(self.high_watermark, offset)
        self.log_start_offset = min(self.log_start_offset, offset)
        effects: list[Effect] = [Truncate(self.topic, self.partition, offset)]
        self.producers_stale = True  # batches it holds may be gone: rebuilt from the log before the next produce
        if self.epoch_cache.truncate_from_end(offset):
            effects.append(self._epoch_checkpoint())
        effects.append(Emit(self._truncated_event(before, offset, reason, high_watermark_before)))
        return effects

    def _start_over(self, offset: int) -> list[Effect]:
        before, high_watermark_before = self.log_end_offset, self.high_watermark
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.epoch_cache.clear()
        self.producers.rebuild(())  # an empty log holds no producer's batches
        self.producers_stale = False
        return [
            TruncateFullyAndStartAt(self.topic, self.partition, offset),
            self._epoch_checkpoint(),
            Emit(self._truncated_event(before, offset, "start_over", high_watermark_before)),
        ]

    # -- the log's life and its start (shell-driven) ------------------------------------------------------

    def log_opened(self, reason: str) -> list[Effect]:
        """The shell built this replica from its log (`reason` created, clean_shutdown or recovered): announce
        the state it starts from, so a history can be rebuilt across restarts without reading any disk."""
        assert reason in ("created", "clean_shutdown", "recovered"), reason
        event = events.LogOpened(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
            leader_epochs=tuple((e.epoch, e.start_offset) for e in self.epoch_cache.entries),
            reason=reason,
        )
        return [Emit(event)]

    def log_deleted(self, reason: str) -> list[Effect]:
        """The shell deleted this replica's log (the partition left the metadata); the core is dropped after."""
        event = events.LogDeleted(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            log_end_offset=self.log_end_offset,
            reason=reason,
        )
        return [Emit(event)]

    def advance_log_start_offset(self, log_start_offset: int, reason: str) -> list[Effect]:
        """The log's start moved up (retention deleted segments below the HW, or delete-records): follow it, and
        cut the epoch cache there as Kafka's UnifiedLog.maybeIncrementLogStartOffset does (truncateFromStart)."""
        if log_start_offset <= self.log_start_offset:
            return []
        assert log_start_offset <= self.high_watermark, (log_start_offset, self)  # only committed records go
        self.log_start_offset = log_start_offset
        effects: list[Effect] = []
        if self.epoch_cache.truncate_from_start(log_start_offset):
            effects.append(self._epoch_checkpoint())
        event = events.LogStartOffsetAdvanced(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            log_start_offset=log_start_offset,
            reason=reason,
        )
        return [*effects, Emit(event)]

    # -- shared helpers ----------------------------------------------------------------------------------

    def _assign_epoch(self, epoch: int, start_offset: int) -> list[Effect]:
        if not self.epoch_cache.assign(epoch, start_offset):
            return []
        event = events.LeaderEpochStarted(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            leader_epoch=epoch,
            start_offset=start_offset,
        )
        return [self._epoch_checkpoint(), Emit(event)]

    def _epoch_checkpoint(self) -> WriteEpochCheckpoint:
        entries = tuple((e.epoch, e.start_offset) for e in self.epoch_cache.entries)
        return WriteEpochCheckpoint(self.topic, self.partition, entries)

    def _appended_event(self, base: int, last: int, count: int, size: int, as_leader: bool) -> events.RecordsAppended:
        return events.RecordsAppended(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            leader_epoch=self.leader_epoch,
            base_offset=base,
            last_offset=last,
            record_count=count,
            size_bytes=size,
            log_end_offset=self.log_end_offset,
            as_leader=as_leader,
        )

    def _truncated_event(
        self, before: int, offset: int, reason: str, high_watermark_before: int
    ) -> events.LogTruncated:
        return events.LogTruncated(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            log_end_offset_before=before,
            truncated_to=offset,
            high_watermark_before=high_watermark_before,
            high_watermark=self.high_watermark,
            leader_epoch=self.leader_epoch,
            reason=reason,
        )

    def _became_leader_event(self) -> events.BecameLeader:
        return events.BecameLeader(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            replicas=self.replicas,
            isr=self.ordered(self.isr),
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )

    def _became_follower_event(self) -> events.BecameFollower:
        return events.BecameFollower(
            topic=self.topic,
            partition=self.partition,
            replica=self.local_id,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark,
        )


__all__ = ["IsrState", "Partition", "PartitionConfig", "PendingProduce", "RemoteReplica"]
