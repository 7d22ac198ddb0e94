"""The replica manager: every replica one broker hosts, and the rules of serving them. Kafka's ReplicaManager, pure.

Room: libs/core. The broker service and the simulator drive this very object; they only decode requests, read the
clocks, carry out the effects on a disk (real or simulated) and a network, and feed back what happened. It owns:

- the hosted replicas: a `Partition` core per partition this broker is a replica of, created, led, followed and
  deleted as the metadata image says (once the broker has registered and read the metadata log past its own
  registration: before that it serves no client and leads nothing); a log whose topic id is not the topic's is
  deleted, not reused;
- produce admission: leadership, the batches validated once (`validation`), the idempotent producer's check
  (inside the `Partition`), min ISR; and the produce purgatory: a request is answered when every partition is;
- fetch serving and the fetch purgatory (Kafka's DelayedFetch): a fetch with nothing to return waits until it has
  data enough for its min bytes (a consumer's below the HW, so a HW move past its offset answers it; a follower's
  below the LEO), an error or a diverging epoch, or until `max_wait_ms`. A HW move alone answers no follower: as in
  Kafka since KAFKA-9952 (which undid KIP-392's immediate answers because they raised follower fetch rates,
  KAFKA-9731), a follower learns the new HW from its next answer that carries data, or at its max wait. A read from
  the purgatory does not update follower state again; what is known not to have changed is not read again (a
  parked fetch re-reads only the partitions touched since its last read; an incremental session answers an
  unchanged partition it does not name from its last read), by each partition's version (`_version`: moved
  whenever its core changes, for all partitions when the metadata moves);
- list offsets, OffsetsForLeaderEpoch and metadata answers;
- the follower fetch sessions (Kafka's ReplicaFetcherThread, one per leader): one fetch in flight per leader with
  every partition followed from it, the next one sent when the answer is applied, or after the backoff; each in an
  incremental fetch session (KIP-227, `fetch_session`): after the first, a fetch names only the partitions whose
  fetch state changed, and the leader (reading every partition of the session) answers only the partitions with
  something to say, and announces FetchServed only for those;
- retention and HW checkpoints on their intervals;
- storage refusals: the replica goes offline on this broker (Kafka's log-directory failure), reported to the
  controller through `offline_replicas` and the ReplicaOffline event, and nothing carried out after the refusal
  runs as if it had succeeded.

Inputs: decoded requests, the metadata image, storage outcomes and the time (`Now`: monotonic for timeouts and
lag, wall clock for retention). Reads of the log (fetched records, batch boundaries, the producer state's batch
headers, offsets by timestamp) go through the `LogReader` the shell gives: queries that change nothing.
Outputs: effects (`hightide.core.effects`), in order, which the shell carries out with `carry_out`: it ends every
input with `poll`, which answers the fetches the input woke and sends follower fetches that are due.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Protocol

from hightide.core import topic_configs
from hightide.core.clock import MonoMs, Now
from hightide.core.compaction import is_compacted
from hightide.core.effects import (
    AnswerFetch,
    AnswerProduce,
    AppendAsFollower,
    AppendAsLeader,
    CheckpointHighWatermarks,
    CompleteProduce,
    CreateLog,
    DeleteLog,
    Effect,
    Emit,
    EnforceRetention,
    SendFetch,
    ServeFetch,
    StorageEffect,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    UpdateLogConfig,
    WriteEpochCheckpoint,
)
from hightide.core.epoch_cache import EpochEntry, LeaderEpochCache
from hightide.core.fetch_session import (
    DEFAULT_CACHE_SLOTS,
    CachedPartition,
    FetchContext,
    FetchSessionCache,
    FollowerSession,
)
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicImage, TopicPartition
from hightide.core.partition import CONSUMER_REPLICA_ID, NEVER_MS, Partition, PartitionConfig
from hightide.core.truncation import offsets_for_leader_epoch
from hightide.core.validation import validate_produce, validate_replicated
from hightide.protocol import events, wire
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.events import Event
from hightide.protocol.records import BatchHeader, InvalidRecordBatch

MIB: Final = 1024 * 1024
# How soon a follower fetches again when its leader answered only that the two have not both applied the same
# metadata yet: the slower one catches up in milliseconds.
METADATA_LAG_BACKOFF_MS: Final = 50
_METADATA_LAG_ERRORS: Final = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH}
)
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
MAX_TIMESTAMP: Final = -3  # KIP-734 (ListOffsets v7): the record with the largest timestamp


class StorageRefusal(HightideError):
    """A shell's storage refused a storage effect (a full or failing disk, an append it must not make)."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


@dataclass(frozen=True, slots=True)
class StorageOutcome:
    """What carrying out a storage effect did beyond it: events of what the storage engine did on its own (a
    segment rolled or deleted), and for EnforceRetention the log start offset afterwards if it moved."""

    events: tuple[Event, ...] = ()
    log_start_offset: int | None = None


def carry_out(
    manager: ReplicaManager,
    effects: Iterable[Effect],
    now: Now,
    *,
    storage: Callable[[StorageEffect | CheckpointHighWatermarks], StorageOutcome],
    deliver: Callable[[Effect], None],
) -> None:
    """How every shell carries out an input's effects: in order; storage effects by `storage` (which raises
    StorageRefusal for a refusal), the rest by `deliver` (events, answers, sends). A refusal goes back to the
    manager with the effects not yet carried out, and what it returns is carried out instead; retention that
    moved a log's start is reported to it, and its answer carried out next. Then, with everything on the disk, the
    end of the input: `poll` answers the fetches it woke (they read what it appended) and sends follower fetches
    that are due."""
    _carry_out(manager, effects, now, storage, deliver)
    _carry_out(manager, manager.poll(now), now, storage, deliver)


def _carry_out(
    manager: ReplicaManager,
    effects: Iterable[Effect],
    now: Now,
    storage: Callable[[StorageEffect | CheckpointHighWatermarks], StorageOutcome],
    deliver: Callable[[Effect], None],
) -> None:
    queue = deque(effects)
    while queue:
        effect = queue.popleft()
        if not isinstance(effect, StorageEffect | CheckpointHighWatermarks):
            deliver(effect)
            continue
        try:
            outcome = storage(effect)
        except StorageRefusal as refusal:
            for refused in manager.storage_refused(effect, refusal.error_code, str(refusal)):
                deliver(Emit(refused))  # the fact first, whatever the manager then decides (an audit checks it)
            queue = deque(manager.on_storage_error(effect, refusal.error_code, str(refusal), list(queue), now))
            continue
        for event in outcome.events:
            deliver(Emit(event))
        if isinstance(effect, EnforceRetention) and outcome.log_start_offset is not None:
            tp = TopicPartition(effect.topic, effect.partition)
            queue.extendleft(reversed(manager.on_log_start_advanced(tp, outcome.log_start_offset, "retention", now)))


class LogReadError(HightideError):
    """A read of a hosted log failed (the shell's storage said why); the replica's disk is not to be trusted."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogReader(Protocol):
    """What the replica manager may ask of the logs: queries that change nothing. LogReadError on failure."""

    def read(
        self, tp: TopicPartition, fetch_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes:
        """Whole batches from the one holding `fetch_offset`, at most `max_bytes` (at least one batch when
        `min_one_batch`), none reaching `max_offset`."""
        ...

    def batch_start(self, tp: TopicPartition, offset: int) -> int:
        """The base offset of the batch holding `offset` (offset itself at a batch boundary or the LEO)."""
        ...

    def batch_headers(self, tp: TopicPartition) -> Iterable[BatchHeader]:
        """The header of every batch from the log start offset to the LEO, in offset order."""
        ...

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after the log start with a timestamp >= `timestamp`."""
        ...

    def max_timestamp_offset(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with the log's largest timestamp (KIP-734); None: no record."""
        ...


@dataclass(frozen=True, slots=True)
class LogState:
    """A log as the shell found it on disk at start (after recovery)."""

    tp: TopicPartition
    topic_id: str | None
    log_start_offset: int
    log_end_offset: int
    checkpointed_high_watermark: int
    leader_epochs: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ReplicaManagerConfig:
    broker_id: int
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    # The broker's own defaults of topic configs (Kafka's names): a topic's configs override them.
    log_defaults: Mapping[str, str] = field(default_factory=dict)
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = MIB
    replica_fetch_response_max_bytes: int = 10 * MIB
    replica_fetch_backoff_ms: int = 1_000
    # How long a follower fetch may go unanswered before it counts as lost and the next one is sent.
    replica_fetch_timeout_ms: int = 5_500
    # What one answer may carry at most (the transport's limit: NATS's max payload less the envelope).
    fetch_response_bytes_max: int = 64 * MIB
    log_retention_check_interval_ms: int = 300_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    # Incremental fetch sessions (KIP-227) this broker keeps as a leader for its followers (0: none).
    max_incremental_fetch_session_cache_slots: int = DEFAULT_CACHE_SLOTS

    def __post_init__(self) -> None:
        assert self.broker_id >= 0
        assert self.max_incremental_fetch_session_cache_slots >= 0
        assert self.replica_fetch_timeout_ms > self.replica_fetch_wait_max_ms >= 0
        assert self.fetch_response_bytes_max > 0


@dataclass(slots=True)
class _PendingProduceRequest:
    """A produce request collecting its partitions' answers (Kafka's DelayedProduce over many partitions)."""

    request_id: int
    answers: dict[TopicPartition, wire.ProducePartitionResponse] = field(default_factory=dict)
    waiting: set[TopicPartition] = field(default_factory=set)
    collecting: bool = True  # still reading the request's partitions: not complete even if none waits yet


@dataclass(slots=True)
class _ParkedFetch:
    """A fetch waiting for data (Kafka's DelayedFetch), with its last read: a re-read reads again only the
    partitions that changed since (`touched`), and takes the last read's answer for the others, which is what
    reading them again would give (a parked fetch's last read returned no records, no error and no divergence, and
    nothing about those partitions has changed). `whole`: read every partition again (the metadata moved on)."""

    request_id: int
    context: FetchContext  # its request (an incremental fetch's: every partition of its session) and session
    deadline_ms: MonoMs
    partitions: frozenset[TopicPartition]
    read: _Read
    woken: bool = False  # a partition of it appended or moved its HW since it was last read
    touched: set[TopicPartition] = field(default_factory=set)  # partitions whose core changed since the last read
    whole: bool = False


@dataclass(slots=True)
class _FetchSession:
    """This broker's fetching from one leader: at most one fetch in flight, in an incremental fetch session."""

    fetch_id: int = 0
    in_flight: bool = False
    sent_ms: MonoMs = NEVER_MS
    next_ms: MonoMs = NEVER_MS
    session: FollowerSession = field(default_factory=FollowerSession)


@dataclass(frozen=True, slots=True)
class _OfflineReplica:
    topic_id: str | None
    log_end_offset: int


@dataclass(slots=True)
class _Read:
    """One read of a fetch request: the answer, its events (one per answer, None for none), and whether it should
    go now."""

    effects: list[Effect] = field(default_factory=list)
    answers: list[wire.FetchPartitionResponse] = field(default_factory=list)
    served: list[events.FetchServed | None] = field(default_factory=list)
    ready: bool = False


class ReplicaManager:
    def __init__(
        self, config: ReplicaManagerConfig, reader: LogReader, partition_class: type[Partition] = Partition
    ) -> None:
        self.config = config
        self.partition_class = partition_class  # the simulator's known-bad variants subclass Partition
        self.id = config.broker_id
        self.reader = reader
        self.image = MetadataImage()
        self.broker_epoch = -1
        self.replicas: dict[TopicPartition, Partition] = {}
        self.offline: dict[TopicPartition, _OfflineReplica] = {}
        self._topic_ids: dict[TopicPartition, str | None] = {}
        self._views: dict[TopicPartition, PartitionRegistration] = {}
        self._applied_configs: dict[str, dict[str, str]] = {}
        self._broker_epochs: dict[int, int] = {}  # shared with every core: the active brokers and their epochs
        self._produces: dict[int, _PendingProduceRequest] = {}
        self._parked: dict[int, _ParkedFetch] = {}
        # The parked fetches naming each partition: an append or a core's change visits only its own fetches.
        self._parked_on: dict[TopicPartition, dict[int, _ParkedFetch]] = {}
        self._sessions: dict[int, _FetchSession] = {}
        self._fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        # What fetch answers were read at (`_version`): bumped for a partition whenever its core changes, for all
        # when the metadata does.
        self._versions: dict[TopicPartition, int] = {}
        self._metadata_version = 0
        self._followed: dict[int, list[Partition]] | None = None  # the followed replicas by leader (`_send_fetches`)
        self._fetch_ids = 0
        self._next_retention_ms = NEVER_MS
        self._next_checkpoint_ms = NEVER_MS

    # -- queries -------------------------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Registered and caught up with the metadata log past its own registration: only then does it serve
        clients, lead or follow (Kafka's broker starts serving after its initial metadata catch-up)."""
        return self.broker_epoch >= 0 and self.image.next_offset > self.broker_epoch

    @property
    def offline_replicas(self) -> tuple[TopicPartition, ...]:
        """The replicas whose storage failed, for the controller (every heartbeat carries them)."""
        return tuple(sorted(self.offline))

    def replica(self, tp: TopicPartition) -> Partition | None:
        return self.replicas.get(tp)

    # -- the broker's life ---------------------------------------------------------------------------------------

    def open_log(self, state: LogState, reason: str, now: Now) -> list[Effect]:
        """A log found on disk at start (`reason` recovered or clean_shutdown): its core starts from what the disk
        holds, as Kafka's LogManager and Partition do after recovery: the HW checkpoint clamped into [log start,
        LEO], the epoch checkpoint cut at both ends. Its producer state is read from the log before a produce."""
        tp = state.tp
        assert tp not in self.replicas, tp
        cache = LeaderEpochCache(EpochEntry(epoch, offset) for epoch, offset in state.leader_epochs)
        cache.truncate_from_end(state.log_end_offset)
        cache.truncate_from_start(state.log_start_offset)
        high_watermark = min(max(state.checkpointed_high_watermark, state.log_start_offset), state.log_end_offset)
        core = self._new_core(tp, self.config.partition)
        core.log_start_offset, core.log_end_offset = state.log_start_offset, state.log_end_offset
        core.high_watermark, core.epoch_cache = high_watermark, cache
        core.producers_stale = True
        self.replicas[tp] = core
        self._followed = None
        self._topic_ids[tp] = state.topic_id
        entries = tuple((e.epoch, e.start_offset) for e in cache.entries)
        effects: list[Effect] = [UpdateHighWatermark(tp.topic, tp.partition, high_watermark)]
        if entries != state.leader_epochs:
            effects.append(WriteEpochCheckpoint(tp.topic, tp.partition, entries))
        # What recovery left is announced before anything else happens to the replica: a history rebuilt from
        # events needs no disk.
        return effects + core.log_opened(reason)

    def on_registered(self, broker_epoch: int, now: Now) -> list[Effect]:
        """The controller registered this incarnation with `broker_epoch`."""
        assert broker_epoch >= 0
        self.broker_epoch = broker_epoch
        for core in self.replicas.values():
            core.local_broker_epoch = broker_epoch  # the leader's AlterPartition carries it
        self._read_parked_whole()
        return self._reconcile(now)

    def on_metadata(self, image: MetadataImage, now: Now) -> list[Effect]:
        """The metadata log moved on: lead, follow, create and delete replicas as the image now says."""
        assert image.next_offset >= self.image.next_offset, "the metadata log only grows"
        self.image = image
        self._read_parked_whole()
        return self._reconcile(now)

    # -- produce -------------------------------------------------------------------------------------------------

    def on_produce(self, request_id: int, request: wire.ProduceRequest, now: Now) -> list[Effect]:
        """Kafka's appendRecords: each partition refused, appended or recognised as a retry; the request is
        answered once every partition is (acks=all: once the HW passes its batches, or the timeout)."""
        assert request_id not in self._produces, request_id
        pending = _PendingProduceRequest(request_id)
        self._produces[request_id] = pending
        out: list[Effect] = []
        for data in request.partitions:
            tp = TopicPartition(data.topic, data.partition)
            if tp in pending.answers or tp in pending.waiting:
                self._refuse(pending, tp, ErrorCode.INVALID_REQUEST, "the partition appears twice in the request")
                continue
            out += self._produce_partition(pending, tp, data.records, request, now)
        pending.collecting = False
        return out + self._answer_produce_if_done(pending)

    def _produce_partition(
        self,
        pending: _PendingProduceRequest,
        tp: TopicPartition,
        records: bytes,
        request: wire.ProduceRequest,
        now: Now,
    ) -> list[Effect]:
        core = self.replicas.get(tp)
        if core is None or not self.ready:
            self._refuse(pending, tp, self._not_leader_error(tp))
            return []
        pending.waiting.add(tp)
        # Kafka checks leadership and min ISR before it reads the batches (Partition.appendRecordsToLeader).
        refusal = core.produce_refusal(request.acks)
        if refusal is not ErrorCode.NONE:
            return self._absorb(tp, core.refuse_produce(pending.request_id, refusal, request.acks))
        configs = self._log_configs(tp.topic)
        try:
            headers = validate_produce(
                records,
                max_message_bytes=_int_config(configs, "max.message.bytes"),
                segment_bytes=_int_config(configs, "segment.bytes"),
                compacted=_compacted(configs),
            )
        except InvalidRecordBatch as refused:
            message = f"{tp.topic}-{tp.partition}: {refused}"
            return self._absorb(tp, core.refuse_produce(pending.request_id, refused.error_code, request.acks, message))
        if core.producers_stale:
            core.rebuild_producers(tuple(self.reader.batch_headers(tp)))
        effects = core.append_as_leader(
            pending.request_id, records, headers, request.acks, now.mono_ms, request.timeout_ms
        )
        return self._absorb(tp, effects)

    def _refuse(self, pending: _PendingProduceRequest, tp: TopicPartition, error: ErrorCode, message: str = "") -> None:
        pending.answers[tp] = wire.ProducePartitionResponse(
            topic=tp.topic, partition=tp.partition, error=int(error), message=message[:4096]
        )

    def _complete(self, tp: TopicPartition, completion: CompleteProduce, out: list[Effect]) -> None:
        pending = self._produces.get(completion.request_id)
        if pending is None or tp not in pending.waiting:
            return
        core = self.replicas.get(tp)
        pending.waiting.discard(tp)
        pending.answers[tp] = wire.ProducePartitionResponse(
            topic=tp.topic,
            partition=tp.partition,
            error=int(completion.error),
            base_offset=completion.base_offset if completion.error is ErrorCode.NONE else -1,
            log_start_offset=-1 if core is None else core.log_start_offset,
            message=completion.message[:4096],
        )
        out += self._answer_produce_if_done(pending)

    def _answer_produce_if_done(self, pending: _PendingProduceRequest) -> list[Effect]:
        if pending.collecting or pending.waiting:
            return []
        del self._produces[pending.request_id]
        response = wire.ProduceResponse(partitions=tuple(pending.answers.values()))
        return [AnswerProduce(pending.request_id, response)]

    # -- fetch ---------------------------------------------------------------------------------------------------

    def on_fetch(self, request_id: int, request: wire.FetchRequest, now: Now) -> list[Effect]:
        """Kafka's fetchMessages: read every partition now (an incremental fetch: every partition of its session,
        `fetch_session`); answer at once if there is something to say (data enough for min_bytes, an error, a
        divergence) or max_wait_ms is 0; otherwise park the fetch until one of its partitions changes so that it
        has, or its wait is over (`poll` answers it then). A session error is answered at once. A HW that moved is
        no reason to answer a follower (Kafka's DelayedFetch since KAFKA-9952: its fetch completes on bytes past
        its offset, not on the HW); a consumer reads below the HW, so the HW passing its offset gives it data."""
        assert request_id not in self._parked, request_id
        context = self._fetch_sessions.context(request, now.mono_ms)
        if context.error is not ErrorCode.NONE:
            return [AnswerFetch(request_id, wire.FetchResponse(error=int(context.error)))]
        request = context.request
        read = self._read_fetch(request, now, first=True, context=context)
        if read.ready or request.max_wait_ms == 0:
            return read.effects + self._answer_fetch(request_id, read, context, now)
        partitions = frozenset(TopicPartition(p.topic, p.partition) for p in request.partitions)
        deadline = MonoMs(now.mono_ms + request.max_wait_ms)
        parked = _ParkedFetch(request_id, context, deadline, partitions, read)
        self._parked[request_id] = parked
        for tp in partitions:
            self._parked_on.setdefault(tp, {})[request_id] = parked
        return read.effects

    def _read_fetch(
        self,
        request: wire.FetchRequest,
        now: Now,
        *,
        first: bool,
        last: _ParkedFetch | None = None,
        context: FetchContext | None = None,
    ) -> _Read:
        """Read every partition of `request`, but for what is known not to have changed: re-reading the parked
        fetch `last`, the partitions not touched since its last read answer as they did then; in an incremental
        session (`context`), a partition the fetch does not name, unchanged since the session last read it at
        its LEO, answers as it did then, only the follower's state moving (`Partition.on_unchanged_fetch`).
        Either way the answer is the one a read would build, and no log is read for it."""
        budget = min(request.max_bytes, self.config.fetch_response_bytes_max)
        read = _Read()
        size = 0
        session = None if context is None else context.session
        whole = last is None or last.whole or any(answer.records for answer in last.read.answers)
        for index, fetch in enumerate(request.partitions):
            tp = TopicPartition(fetch.topic, fetch.partition)
            cached = None if session is None else session.partitions.get(tp)
            if not whole and last is not None and tp not in last.touched:
                answer, served = last.read.answers[index], last.read.served[index]
            elif first and cached is not None and self._unchanged(cached, tp, fetch, context):
                assert cached.answer is not None
                answer, served = cached.answer, cached.served  # type: ignore[assignment]
                core = self.replicas[tp]
                effects = core.on_unchanged_fetch(request.replica_id, request.broker_epoch, fetch, now.mono_ms)
                read.effects += self._absorb(tp, effects)
            else:
                answer, served = self._read_partition(request, fetch, tp, budget - size, size == 0, now, first, read)
            if cached is not None and fetch is cached.request:  # not an older copy of the session's request
                cached.answer, cached.served, cached.version = answer, served, self._version(tp)
            size += len(answer.records)
            read.answers.append(answer)
            read.served.append(served)
            read.ready = read.ready or answer.error != 0 or answer.diverging_epoch >= 0
        read.ready = read.ready or size >= max(request.min_bytes, 1)
        return read

    def _read_partition(
        self,
        request: wire.FetchRequest,
        fetch: wire.FetchPartitionRequest,
        tp: TopicPartition,
        budget: int,
        first_data: bool,
        now: Now,
        first: bool,
        read: _Read,
    ) -> tuple[wire.FetchPartitionResponse, events.FetchServed | None]:
        core = self.replicas.get(tp)
        if core is None or (request.replica_id == CONSUMER_REPLICA_ID and not self.ready):
            error = int(self._not_leader_error(tp))
            return wire.FetchPartitionResponse(topic=tp.topic, partition=tp.partition, error=error), None
        if first:
            effects = core.on_fetch(request.replica_id, request.broker_epoch, fetch, now.mono_ms)
        else:
            effects = core.read_fetch(request.replica_id, request.broker_epoch, fetch, now.mono_ms)
        serve = effects.pop()
        assert isinstance(serve, ServeFetch), serve
        read.effects += self._absorb(tp, effects)
        response = serve.response
        if serve.max_offset < 0 or serve.fetch_offset >= serve.max_offset or (budget <= 0 and not first_data):
            return response, serve.event  # nothing to read (the log would answer no bytes)
        max_bytes = max(min(serve.max_bytes, budget), 0)
        try:
            records = self.reader.read(tp, serve.fetch_offset, max_bytes, serve.max_offset, first_data)
        except LogReadError as failure:
            read.effects += self._take_offline(tp, failure.error_code, str(failure))
            return wire.FetchPartitionResponse(
                topic=tp.topic, partition=tp.partition, error=int(failure.error_code)
            ), None
        if records:
            response = response.model_copy(update={"records": records})
        return response, serve.event

    def _answer_fetch(self, request_id: int, read: _Read, context: FetchContext, now: Now) -> list[Effect]:
        """The answer of a read, and a FetchServed for each partition it answers: in an incremental fetch session
        only the partitions with something to say (`FetchSessionCache.respond`)."""
        session_id, included = self._fetch_sessions.respond(context, read.answers, now.mono_ms)
        answers: list[wire.FetchPartitionResponse] = []
        announced: list[Effect] = []
        for answer, served, keep in zip(read.answers, read.served, included, strict=True):
            if keep:
                answers.append(answer)
                if served is not None:
                    announced.append(Emit(served))
        return [
            *announced,
            AnswerFetch(request_id, wire.FetchResponse(partitions=tuple(answers), session_id=session_id)),
        ]

    def _wake(self, tp: TopicPartition) -> None:
        self._versions[tp] = self._versions.get(tp, 0) + 1
        for parked in self._parked_on.get(tp, {}).values():
            parked.woken = True  # read again at the end of this input, with everything it changed
            parked.touched.add(tp)

    def _read_parked_whole(self) -> None:
        """What a fetch's answer depends on beyond its partitions' cores may have changed (leadership, the
        brokers' epochs, readiness, topic configs): every fetch reads all its partitions again next time."""
        self._metadata_version += 1
        self._followed = None
        for parked in self._parked.values():
            parked.whole = True

    def _touch(self, tp: TopicPartition) -> None:
        """The core of `tp` changed (it returned effects): fetches read it again when they next read it."""
        self._versions[tp] = self._versions.get(tp, 0) + 1
        for parked in self._parked_on.get(tp, {}).values():
            parked.touched.add(tp)

    def _version(self, tp: TopicPartition) -> tuple[int, int]:
        """What a fetch's answer for `tp` was read at: it is the same while this is."""
        return self._metadata_version, self._versions.get(tp, 0)

    def _unchanged(
        self,
        cached: CachedPartition,
        tp: TopicPartition,
        fetch: wire.FetchPartitionRequest,
        context: FetchContext | None,
    ) -> bool:
        """Whether the session's last answer for `tp` is what reading it for this fetch would give: the fetch does
        not name it (the follower is where it was), the partition has not changed since that read, and that read
        was a plain answer at the LEO (no records, no error, no divergence: nothing more to read)."""
        answer = cached.answer
        return (
            answer is not None
            and context is not None
            and tp not in context.named
            and cached.version == self._version(tp)
            and answer.error == 0
            and answer.diverging_epoch < 0
            and not answer.records
            and answer.log_end_offset == fetch.fetch_offset
            and tp in self.replicas
        )

    def _answer_parked(self, now: Now) -> list[Effect]:
        """Answer the parked fetches that now have something (a consumer's only once the HW lets it read: an
        append alone does not answer it empty) or whose wait is over; the rest stay parked. A re-read never
        updates follower state, so it cannot wake another parked fetch: one pass is enough. A re-read reads only
        the partitions that changed since the fetch was last read (`_ParkedFetch`)."""
        out: list[Effect] = []
        for parked in [p for p in self._parked.values() if p.woken or p.deadline_ms <= now.mono_ms]:
            parked.woken = False
            read = self._read_fetch(parked.context.request, now, first=False, last=parked, context=parked.context)
            parked.read, parked.touched, parked.whole = read, set(), False
            out += read.effects
            if read.ready or parked.deadline_ms <= now.mono_ms:
                self._unpark(parked)
                out += self._answer_fetch(parked.request_id, read, parked.context, now)
        return out

    def _unpark(self, parked: _ParkedFetch) -> None:
        del self._parked[parked.request_id]
        for tp in parked.partitions:
            on = self._parked_on[tp]
            del on[parked.request_id]
            if not on:
                del self._parked_on[tp]

    def _answer_fetches_of(self, replicas: Iterable[int], now: Now) -> None:
        """A partition's new followers have fetches parked here that do not name it: answer them now, so their
        next fetch does (else its first records wait a whole replica.fetch.wait.max.ms for the followers)."""
        followers = set(replicas) - {self.id}
        for parked in self._parked.values():
            if parked.context.request.replica_id in followers:
                parked.deadline_ms = now.mono_ms

    # -- offsets and metadata ------------------------------------------------------------------------------------

    def list_offsets(self, request: wire.ListOffsetsRequest) -> wire.ListOffsetsResponse:
        return wire.ListOffsetsResponse(partitions=tuple(self._list_offset(query) for query in request.partitions))

    def _list_offset(self, query: wire.ListOffsetsPartition) -> wire.ListOffsetsPartitionResponse:
        """Kafka's fetchOffsetForTimestamp on the leader: earliest, latest (the HW: what consumers may read), the
        first record at or after a timestamp, or the record with the largest timestamp (KIP-734); the last two only
        below the HW (else no offset, as Kafka's lastFetchableOffset)."""
        tp = TopicPartition(query.topic, query.partition)
        core = self.replicas.get(tp)
        base: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition}
        if core is None or not core.is_leader or not self.ready:
            return wire.ListOffsetsPartitionResponse(**base, error=int(self._not_leader_error(tp)))
        if query.current_leader_epoch >= 0 and query.current_leader_epoch != core.leader_epoch:
            stale = query.current_leader_epoch < core.leader_epoch
            error = ErrorCode.FENCED_LEADER_EPOCH if stale else ErrorCode.UNKNOWN_LEADER_EPOCH
            return wire.ListOffsetsPartitionResponse(**base, error=int(error))
        if query.timestamp == EARLIEST_TIMESTAMP:
            offset, timestamp = core.log_start_offset, -1
        elif query.timestamp == LATEST_TIMESTAMP:
            offset, timestamp = core.high_watermark, -1
        elif query.timestamp < 0 and query.timestamp != MAX_TIMESTAMP:
            return wire.ListOffsetsPartitionResponse(**base, error=int(ErrorCode.INVALID_REQUEST))
        else:
            try:
                if query.timestamp == MAX_TIMESTAMP:
                    found = self.reader.max_timestamp_offset(tp)
                else:
                    found = self.reader.offset_for_timestamp(tp, query.timestamp)
            except LogReadError as failure:
                return wire.ListOffsetsPartitionResponse(**base, error=int(failure.error_code))
            if found is None or found[1] >= core.high_watermark:
                return wire.ListOffsetsPartitionResponse(**base, error=0)
            timestamp, offset = found
        epoch = core.epoch_cache.epoch_for_offset(offset) if offset < core.log_end_offset else core.leader_epoch
        return wire.ListOffsetsPartitionResponse(
            **base, error=0, timestamp=timestamp, offset=offset, leader_epoch=-1 if epoch is None else epoch
        )

    def offsets_for_leader_epoch(
        self, request: wire.OffsetsForLeaderEpochRequest
    ) -> wire.OffsetsForLeaderEpochResponse:
        answers = []
        for query in request.partitions:
            tp = TopicPartition(query.topic, query.partition)
            core = self.replicas.get(tp)
            base: dict[str, Any] = {"topic": query.topic, "partition": query.partition}
            if core is None or not core.is_leader or not self.ready:
                answers.append(wire.EpochEndOffsetResponse(**base, error=int(self._not_leader_error(tp))))
                continue
            error, answer = offsets_for_leader_epoch(
                core.epoch_cache, core.log_end_offset, core.leader_epoch, query.current_leader_epoch, query.leader_epoch
            )
            answers.append(
                wire.EpochEndOffsetResponse(
                    **base, error=int(error), leader_epoch=answer.epoch, end_offset=answer.end_offset
                )
            )
        return wire.OffsetsForLeaderEpochResponse(partitions=tuple(answers))

    def metadata(self, request: wire.MetadataRequest) -> wire.MetadataResponse:
        return metadata_response(self.image, request.topics)

    def _not_leader_error(self, tp: TopicPartition) -> ErrorCode:
        """Why this broker cannot answer for `tp` as its leader, as Kafka's getPartitionOrError says it."""
        if tp in self.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if not self.ready:
            # An image not yet caught up may not know a live topic: never call it unknown then.
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        known = self.image.partition(tp.topic, tp.partition) is not None
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # -- following: the fetch sessions ---------------------------------------------------------------------------

    def on_fetch_response(self, leader: int, fetch_id: int, response: wire.FetchResponse, now: Now) -> list[Effect]:
        """Apply a leader's answer to this broker's fetch `fetch_id` (a stale one is ignored), partition by
        partition; the next fetch goes at once, or after the backoff if anything failed. A leader and its follower
        learn a leadership from the metadata log each at its own pace: an error that only says the two have not
        both applied it yet (NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, FENCED_LEADER_EPOCH) is retried after
        `METADATA_LAG_BACKOFF_MS`, not the whole replica.fetch.backoff.ms, which after every failover would hold
        the new leader's first commits back by a second (Kafka's fetcher backs off the full time)."""
        session = self._sessions.get(leader)
        if session is None or not session.in_flight or session.fetch_id != fetch_id:
            return []
        session.in_flight = False
        if not session.session.on_response(wire.error_code_of(response.error), response.session_id):
            session.next_ms = now.mono_ms  # a session error: the next fetch, a full one, goes at once
            return []
        errors = {ErrorCode.UNKNOWN_SERVER_ERROR} if response.error != 0 else set()
        out: list[Effect] = []
        for answer in response.partitions:
            tp = TopicPartition(answer.topic, answer.partition)
            core = self.replicas.get(tp)
            if core is None:
                continue
            if answer.error != 0:
                errors.add(wire.error_code_of(answer.error))
            try:
                headers = validate_replicated(answer.records) if answer.error == 0 and answer.records else []
            except InvalidRecordBatch as rejected:
                errors.add(rejected.error_code)
                out.append(Emit(self._rejected(core, leader, rejected)))
                continue
            out += self._absorb(tp, core.on_fetch_response(leader, answer, headers, now.mono_ms))
        session.next_ms = MonoMs(now.mono_ms + self._fetch_backoff_ms(errors))
        return out

    def _fetch_backoff_ms(self, errors: set[ErrorCode]) -> int:
        if not errors:
            return 0
        if errors <= _METADATA_LAG_ERRORS:
            return min(self.config.replica_fetch_backoff_ms, METADATA_LAG_BACKOFF_MS)
        return self.config.replica_fetch_backoff_ms

    def on_fetch_failed(self, leader: int, fetch_id: int, now: Now) -> list[Effect]:
        """This broker's fetch `fetch_id` got no answer (timed out, nobody listens): try again after the backoff."""
        session = self._sessions.get(leader)
        if session is not None and session.in_flight and session.fetch_id == fetch_id:
            session.in_flight = False
            session.session.on_failure()
            session.next_ms = MonoMs(now.mono_ms + self.config.replica_fetch_backoff_ms)
        return []

    def _rejected(self, core: Partition, leader: int, rejected: InvalidRecordBatch) -> events.FetchResponseRejected:
        return events.FetchResponseRejected(
            topic=core.topic,
            partition=core.partition,
            replica=self.id,
            leader=leader,
            fetch_offset=core.log_end_offset,
            error=rejected.error_code.name,
            detail=str(rejected)[:256],
        )

    def _send_fetches(self, now: Now) -> list[Effect]:
        """One fetch per leader, holding every partition followed from it, unless one is in flight or the
        backoff runs (Kafka's AbstractFetcherThread)."""
        followed = self._followed
        if followed is None:  # leadership or the hosted replicas changed since the last poll
            followed = {}
            for core in self.replicas.values():
                if core.leader >= 0 and not core.is_leader:
                    followed.setdefault(core.leader, []).append(core)
            self._followed = followed
        for gone in set(self._sessions) - set(followed):
            del self._sessions[gone]
        out: list[Effect] = []
        max_bytes = self.config.replica_fetch_max_bytes

        def fetch(tp: TopicPartition) -> wire.FetchPartitionRequest:
            return self.replicas[tp].fetch_partition(max_bytes)

        for leader, cores in followed.items():
            session = self._sessions.setdefault(leader, _FetchSession())
            if session.in_flight and now.mono_ms - session.sent_ms >= self.config.replica_fetch_timeout_ms:
                session.in_flight = False  # lost: its answer, if it ever comes, is stale
                session.session.on_failure()
            if session.in_flight or now.mono_ms < session.next_ms:
                continue
            self._fetch_ids += 1
            session.fetch_id, session.in_flight, session.sent_ms = self._fetch_ids, True, now.mono_ms
            wanted = {TopicPartition(core.topic, core.partition): core.fetch_state(max_bytes) for core in cores}
            partitions, forgotten, session_id, session_epoch = session.session.build(wanted, fetch)
            request = wire.FetchRequest(
                replica_id=self.id,
                broker_epoch=self.broker_epoch,
                max_wait_ms=self.config.replica_fetch_wait_max_ms,
                min_bytes=1,
                max_bytes=self.config.replica_fetch_response_max_bytes,
                partitions=partitions,
                session_id=session_id,
                session_epoch=session_epoch,
                forgotten=forgotten,
            )
            out.append(SendFetch(leader, session.fetch_id, request))
        return out

    # -- the controller's answers --------------------------------------------------------------------------------

    def on_alter_partition_response(
        self, request: wire.AlterPartitionRequest, response: wire.AlterPartitionResponse, now: Now
    ) -> list[Effect]:
        """The controller's answer to this broker's AlterPartition `request` (an error, or the state after it)."""
        tp = TopicPartition(request.topic, request.partition)
        core = self.replicas.get(tp)
        if core is None:
            return []
        return self._absorb(tp, core.on_alter_partition_response(request, response, now.mono_ms))

    # -- time ----------------------------------------------------------------------------------------------------

    def tick(self, now: Now) -> list[Effect]:
        """Time passing: expire produces, resend AlterPartitions, check the ISR; checkpoints and retention on their
        intervals (retention compares record timestamps with the wall clock)."""
        out: list[Effect] = []
        for tp, core in list(self.replicas.items()):
            out += self._absorb(tp, core.tick(now.mono_ms))
        if now.mono_ms >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = MonoMs(now.mono_ms + self.config.replica_high_watermark_checkpoint_interval_ms)
            out.append(CheckpointHighWatermarks())
        if now.mono_ms >= self._next_retention_ms:
            self._next_retention_ms = MonoMs(now.mono_ms + self.config.log_retention_check_interval_ms)
            out += [EnforceRetention(tp.topic, tp.partition, now.wall_ms) for tp in self.replicas]
        return out

    def on_log_start_advanced(self, tp: TopicPartition, log_start_offset: int, reason: str, now: Now) -> list[Effect]:
        """Retention moved a log's start (the shell reports what EnforceRetention did): the core follows and cuts
        its epoch cache there."""
        core = self.replicas.get(tp)
        if core is None:
            return []
        return self._absorb(tp, core.advance_log_start_offset(log_start_offset, reason))

    def poll(self, now: Now) -> list[Effect]:
        """The end of every input: answer the fetches it woke (or whose wait is over), send fetches that are due."""
        return self._answer_parked(now) + self._send_fetches(now)

    # -- storage refusals ----------------------------------------------------------------------------------------

    def storage_refused(self, failed: Effect, error: ErrorCode, detail: str) -> list[events.StorageRefused]:
        """The refusal of `failed` as events, one per replica it concerns (a refused checkpoint of every log: every
        hosted replica), reported before `on_storage_error` decides what follows."""
        if isinstance(failed, CheckpointHighWatermarks):
            concerned = sorted(self.replicas)
        else:
            assert isinstance(failed, StorageEffect), failed
            concerned = [TopicPartition(failed.topic, failed.partition)]
        return [
            events.StorageRefused(
                topic=tp.topic,
                partition=tp.partition,
                replica=self.id,
                operation=type(failed).__name__,
                error=error.name,
                detail=detail[:256],
            )
            for tp in concerned
        ]

    def on_storage_error(
        self, failed: Effect, error: ErrorCode, detail: str, unapplied: Sequence[Effect], now: Now
    ) -> list[Effect]:
        """The shell's storage refused `failed` (and carried out none of `unapplied`, the effects after it): the
        replica goes offline, as Kafka handles a failed log directory. What follows is carried out instead:
        `unapplied` without that replica's effects, its answers turned into KAFKA_STORAGE_ERROR, then what going
        offline does (waiting produces answered, ReplicaOffline). A failed checkpoint of every log takes every
        replica offline: the log directory itself failed."""
        durable_end: int | None = None
        if isinstance(failed, CheckpointHighWatermarks):
            doomed = set(self.replicas)
        else:
            assert isinstance(failed, StorageEffect), failed
            doomed = {TopicPartition(failed.topic, failed.partition)}
            # The core counted the refused change already; the log ends where it did before it (a refused
            # truncation: as its LogTruncated, not carried out either, says it did).
            if isinstance(failed, AppendAsLeader):
                durable_end = failed.base_offset
            elif isinstance(failed, AppendAsFollower):
                durable_end = failed.headers[0].base_offset
            elif isinstance(failed, Truncate | TruncateFullyAndStartAt):
                reported = (
                    e.event
                    for e in unapplied
                    if isinstance(e, Emit)
                    and isinstance(e.event, events.LogTruncated)
                    and e.event.topic == failed.topic
                    and e.event.partition == failed.partition
                )
                durable_end = next((event.log_end_offset_before for event in reported), None)
        out = [kept for effect in unapplied if (kept := _without(effect, doomed)) is not None]
        for tp in sorted(doomed):
            out += self._take_offline(tp, error, detail, durable_end)
        return out

    def _take_offline(
        self, tp: TopicPartition, error: ErrorCode, detail: str, durable_end: int | None = None
    ) -> list[Effect]:
        core = self.replicas.pop(tp, None)
        if core is None:
            return []
        self._followed = None
        log_end_offset = core.log_end_offset if durable_end is None else durable_end
        self.offline[tp] = _OfflineReplica(self._topic_ids.get(tp), log_end_offset)
        self._views.pop(tp, None)
        out = self._absorb(tp, core.fail_pending_produces(ErrorCode.KAFKA_STORAGE_ERROR))
        for pending in self._produces.values():
            answered = pending.answers.get(tp)
            if answered is not None and answered.error == 0:
                pending.answers[tp] = answered.model_copy(
                    update={"error": int(ErrorCode.KAFKA_STORAGE_ERROR), "base_offset": -1}
                )
        self._wake(tp)
        offline = events.ReplicaOffline(
            topic=tp.topic,
            partition=tp.partition,
            replica=self.id,
            log_end_offset=log_end_offset,
            error=error.name,
            detail=detail[:256],
        )
        return [*out, Emit(offline)]

    # -- following the metadata ----------------------------------------------------------------------------------

    def _reconcile(self, now: Now) -> list[Effect]:
        """Lead or follow every hosted partition as the image says; create the replicas it assigns here and delete
        the ones it no longer does (once registered and caught up)."""
        if not self.ready:
            return []
        self._broker_epochs.clear()
        self._broker_epochs.update({b.broker_id: b.broker_epoch for b in self.image.brokers.values() if b.active})
        out: list[Effect] = []
        hosted: set[TopicPartition] = set()
        for tp, registration in self.image.all_partitions():
            if self.id not in registration.replicas:
                continue
            hosted.add(tp)
            if tp in self.offline:
                continue  # nothing happens to an offline replica until the broker restarts
            topic = self.image.topic(tp.topic)
            assert topic is not None
            out += self._host(tp, topic, registration, now)
        for tp in [tp for tp in (*self.replicas, *self.offline) if tp not in hosted]:
            out += self._delete(tp, "topic_deleted" if self.image.topic(tp.topic) is None else "not_a_replica")
        return out + self._apply_topic_configs()

    def _host(
        self, tp: TopicPartition, topic: TopicImage, registration: PartitionRegistration, now: Now
    ) -> list[Effect]:
        out: list[Effect] = []
        known_id = self._topic_ids.get(tp)
        if tp in self.replicas and known_id is not None and known_id != topic.topic_id:
            out += self._delete(tp, "topic_id_changed")  # an earlier topic of the same name: never reuse its log
        if tp not in self.replicas:
            out += self._create(tp, topic)
        elif known_id is None:
            # A log from before topic ids were stored: it takes the id of the topic it now serves.
            self._topic_ids[tp] = topic.topic_id
            out.append(CreateLog(tp.topic, tp.partition, topic.topic_id, dict(topic.configs)))
        # A broker's offline replicas change with its registration, not always with the partition's.
        self.replicas[tp].offline_replicas = frozenset(self.image.offline_replicas(tp.topic, tp.partition))
        if self._views.get(tp) == registration:
            return out
        self._views[tp] = registration
        return out + self._become(tp, registration, now)

    def _create(self, tp: TopicPartition, topic: TopicImage) -> list[Effect]:
        core = self._new_core(tp, self._partition_config(topic.name))
        self.replicas[tp] = core
        self._topic_ids[tp] = topic.topic_id
        return [CreateLog(tp.topic, tp.partition, topic.topic_id, dict(topic.configs)), *core.log_opened("created")]

    def _new_core(self, tp: TopicPartition, config: PartitionConfig) -> Partition:
        core = self.partition_class(tp.topic, tp.partition, self.id, config)
        core.broker_epochs = self._broker_epochs
        core.local_broker_epoch = self.broker_epoch
        core.batch_start = partial(self.reader.batch_start, tp)
        return core

    def _become(self, tp: TopicPartition, registration: PartitionRegistration, now: Now) -> list[Effect]:
        core = self.replicas[tp]
        if registration.leader == self.id:
            effects = core.make_leader(
                registration.leader_epoch,
                registration.partition_epoch,
                registration.replicas,
                registration.isr,
                now.mono_ms,
            )
            self._answer_fetches_of(registration.replicas, now)
        else:
            effects = core.make_follower(
                registration.leader,
                registration.leader_epoch,
                registration.partition_epoch,
                registration.replicas,
                registration.isr,
            )
        return self._absorb(tp, effects)

    def _delete(self, tp: TopicPartition, reason: str) -> list[Effect]:
        """Stop and delete a replica (Kafka's stopReplicas with delete): its waiting produces are answered as
        Kafka's DelayedProduce finds the partition gone, and fetches parked on it are woken."""
        core = self.replicas.pop(tp, None)
        offline = self.offline.pop(tp, None)
        self._views.pop(tp, None)
        self._topic_ids.pop(tp, None)
        out: list[Effect] = [DeleteLog(tp.topic, tp.partition)]
        if core is not None:
            gone = reason != "not_a_replica"
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if gone else ErrorCode.NOT_LEADER_OR_FOLLOWER
            out += self._absorb(tp, core.fail_pending_produces(error))
            out += core.log_deleted(reason)
        elif offline is not None:
            deleted = events.LogDeleted(
                topic=tp.topic,
                partition=tp.partition,
                replica=self.id,
                log_end_offset=offline.log_end_offset,
                reason=reason,
            )
            out.append(Emit(deleted))
        self._wake(tp)
        return out

    def _apply_topic_configs(self) -> list[Effect]:
        """Give hosted replicas the configs their topics have now: logs recovered at start opened with the broker's
        defaults, and a topic's configs may be altered while its replicas are open."""
        out: list[Effect] = []
        for name in {tp.topic for tp in self.replicas}:
            topic = self.image.topic(name)
            configs = dict(topic.configs) if topic is not None else {}
            if self._applied_configs.get(name) == configs:
                continue
            self._applied_configs[name] = configs
            partition_config = self._partition_config(name)
            for tp, core in self.replicas.items():
                if tp.topic == name:
                    core.config = partition_config
                    out.append(UpdateLogConfig(tp.topic, tp.partition, configs))
        return out

    def _log_configs(self, topic_name: str) -> dict[str, str]:
        """A topic's effective configs: the broker's defaults overridden by the topic's own, as in Kafka."""
        topic = self.image.topic(topic_name)
        return {**self.config.log_defaults, **(topic.configs if topic is not None else {})}

    def _partition_config(self, topic_name: str) -> PartitionConfig:
        topic = self.image.topic(topic_name)
        default = self.config.partition.min_insync_replicas  # the broker's own, beneath the topic's
        min_isr = topic_configs.min_insync_replicas(topic.configs if topic is not None else {}, default)
        return dataclasses.replace(self.config.partition, min_insync_replicas=min_isr)

    # -- effects of the cores ------------------------------------------------------------------------------------

    def _absorb(self, tp: TopicPartition, effects: list[Effect]) -> list[Effect]:
        """A core's effects as the shell sees them: produce completions become answers (when the whole request
        is done), and appends, truncations or a moved HW wake the fetches parked on the partition to be read again.
        A woken fetch is answered only if its re-read has something to say: a moved HW gives a consumer's fetch
        records to read, but no follower's (KAFKA-9952)."""
        out: list[Effect] = []
        for effect in effects:
            if isinstance(effect, CompleteProduce):
                self._complete(tp, effect, out)
                continue
            assert not isinstance(effect, ServeFetch), "fetch answers are read by the manager"
            if isinstance(
                effect, AppendAsLeader | AppendAsFollower | UpdateHighWatermark | Truncate | TruncateFullyAndStartAt
            ):
                self._wake(tp)
            out.append(effect)
        if effects:
            self._touch(tp)
        return out


def _without(effect: Effect, doomed: set[TopicPartition]) -> Effect | None:
    """An effect not yet carried out when the doomed replicas went offline: theirs are dropped (their storage
    effects, and the events reporting them), but a produce answered as done is answered as failed instead, with its
    ProduceCompleted saying so; answers of other replicas go as they are."""
    storage_error = int(ErrorCode.KAFKA_STORAGE_ERROR)
    if isinstance(effect, StorageEffect):
        return None if TopicPartition(effect.topic, effect.partition) in doomed else effect
    if isinstance(effect, Emit):
        event = effect.event
        topic, partition = getattr(event, "topic", None), getattr(event, "partition", None)
        if not (isinstance(topic, str) and isinstance(partition, int) and TopicPartition(topic, partition) in doomed):
            return effect
        if isinstance(event, events.ProduceCompleted) and event.error == "NONE":
            failed = dataclasses.replace(
                event, error=ErrorCode.KAFKA_STORAGE_ERROR.name, base_offset=-1, last_offset=-1
            )
            return Emit(failed)
        return None
    if isinstance(effect, AnswerProduce):
        produced = tuple(
            p.model_copy(update={"error": storage_error, "base_offset": -1})
            if TopicPartition(p.topic, p.partition) in doomed and p.error == 0
            else p
            for p in effect.response.partitions
        )
        return AnswerProduce(effect.request_id, wire.ProduceResponse(partitions=produced))
    if isinstance(effect, AnswerFetch):
        fetched = tuple(
            wire.FetchPartitionResponse(topic=p.topic, partition=p.partition, error=storage_error)
            if TopicPartition(p.topic, p.partition) in doomed
            else p
            for p in effect.response.partitions
        )
        return AnswerFetch(effect.request_id, effect.response.model_copy(update={"partitions": fetched}))
    return effect


def _compacted(configs: Mapping[str, str]) -> bool:
    """Whether a topic's effective cleanup.policy holds compact (log compaction, issue 13)."""
    policy = topic_configs.configured(configs, "cleanup.policy")
    return isinstance(policy, tuple) and is_compacted(policy)


def _int_config(configs: Mapping[str, str], name: str) -> int:
    """A topic's effective int config (the table of topic configs parses it; Kafka's default when unset)."""
    value = topic_configs.configured(configs, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else topic_configs.int_default(name)


def metadata_response(image: MetadataImage, topics: tuple[str, ...] | None) -> wire.MetadataResponse:
    """Kafka's Metadata answer from an image: every topic (or the ones asked), its partitions and the brokers."""
    names = sorted(image.topic_ids) if topics is None else list(topics)
    answers = []
    for name in names:
        topic = image.topic(name)
        if topic is None:
            answers.append(wire.TopicMetadata(name=name, error=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            continue
        partitions = tuple(
            wire.PartitionMetadata(
                partition=index,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                replicas=p.replicas,
                isr=p.isr,
                elr=p.elr,
                last_known_elr=p.last_known_elr,
                offline_replicas=image.offline_replicas(name, index),
                adding_replicas=p.adding_replicas,
                removing_replicas=p.removing_replicas,
            )
            for index, p in enumerate(topic.partitions)
        )
        answers.append(
            wire.TopicMetadata(name=name, topic_id=topic.topic_id, partitions=partitions, configs=dict(topic.configs))
        )
    return wire.MetadataResponse(
        brokers=broker_metadata(image), topics=tuple(answers), metadata_offset=image.next_offset
    )


def broker_metadata(image: MetadataImage) -> tuple[wire.BrokerMetadata, ...]:
    """Every registered broker, by id, as Metadata and DescribeCluster answer them."""
    return tuple(
        wire.BrokerMetadata(
            broker_id=b.broker_id,
            broker_epoch=b.broker_epoch,
            fenced=b.fenced,
            in_controlled_shutdown=b.in_controlled_shutdown,
            kafka_listener=b.kafka_listener,
        )
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
    )


__all__ = [
    "LogReadError",
    "StorageOutcome",
    "StorageRefusal",
    "carry_out",
    "LogReader",
    "LogState",
    "ReplicaManager",
    "ReplicaManagerConfig",
    "broker_metadata",
    "metadata_response",
]
