"""A simulated broker: the pure Partition cores on a disk that can lose its unflushed tail, wired to the network.

It follows each partition's committed state (from the metadata log) by becoming leader or follower, runs one
fetch session per leader with every partition it follows from that leader in one request (as Kafka's replica
fetcher does), serves produce and fetch, and routes what the cores send (AlterPartition to the controller,
produce answers to clients). A crash may cut each log back anywhere between its last flush and its end; a
restart rebuilds every core from what the disk holds, as a broker's log recovery would, and is a new
incarnation of the broker process. Like the real broker's shell, it announces each replica it opens (created, or
recovered at a restart: LogOpened) and deletes (LogDeleted), and collects every event with the incarnation that
emitted it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hightide.core.effects import CompleteProduce
from hightide.core.epoch_cache import EpochEntry, LeaderEpochCache
from hightide.core.partition import Partition, PartitionConfig
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.messages import FetchPartition, FetchRequest, FetchResponsePartition
from hightide.protocol.records import encode_batch, iter_batch_headers
from hightide.protocol.wire import AlterPartitionResponse
from support.memory_replica import MemoryReplica

TopicPartition = tuple[str, int]
FETCH_TIMEOUT_MS = 200
FETCH_BACKOFF_MS = 20


@dataclass(frozen=True)
class PartitionView:
    """A partition's committed state as the metadata log says it."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class FetchResponse:
    partitions: tuple[FetchResponsePartition, ...]


@dataclass(frozen=True)
class ProduceRequest:
    request_id: int
    topic: str
    partition: int
    values: tuple[bytes, ...]
    acks: int
    timeout_ms: int


@dataclass(frozen=True)
class ProduceResponse:
    request_id: int
    topic: str
    partition: int
    error: ErrorCode
    base_offset: int
    last_offset: int


@dataclass
class SimBroker:
    broker_id: int
    config: PartitionConfig
    rng: random.Random
    replicas: dict[TopicPartition, MemoryReplica] = field(default_factory=dict)
    flushed_end: dict[TopicPartition, int] = field(default_factory=dict)
    views: dict[TopicPartition, PartitionView] = field(default_factory=dict)
    partition_class: type[Partition] = Partition
    alive: bool = True
    registered: bool = True  # a restarted broker acts on partition state only once it has registered again
    broker_epoch: int = -1
    broker_epochs: dict[int, int] = field(default_factory=dict)
    fetch_deadline_ms: dict[int, int] = field(default_factory=dict)
    producers: dict[int, int] = field(default_factory=dict)  # request id -> client node
    outbox: list[tuple[int, object]] = field(default_factory=list)
    completions: list[tuple[TopicPartition, CompleteProduce]] = field(default_factory=list)
    retention_probability: float = 0.0  # per tick and replica: delete a committed prefix of the log
    incarnation: int = 0  # the process: a restart is a new one
    events: list[tuple[int, Event]] = field(default_factory=list)  # (incarnation, event) in emission order

    # -- metadata ------------------------------------------------------------------------------------------

    def apply_view(self, tp: TopicPartition, view: PartitionView, now_ms: int) -> None:
        """Lead or follow as the committed partition state says (Kafka's makeLeader / makeFollower)."""
        if self.views.get(tp) == view or self.broker_id not in view.replicas:
            return
        self.views[tp] = view
        replica = self.replicas.get(tp)
        if replica is None:
            replica = MemoryReplica(self.broker_id, self.partition_class(tp[0], tp[1], self.broker_id, self.config))
            self.replicas[tp] = replica
            self.flushed_end[tp] = 0
            self._apply(tp, replica, replica.partition.log_opened("created"))
        replica.partition.broker_epochs = self.broker_epochs
        replica.partition.local_broker_epoch = self.broker_epoch
        core = replica.partition
        if view.leader == self.broker_id:
            effects = core.make_leader(view.leader_epoch, view.partition_epoch, view.replicas, view.isr, now_ms)
        else:
            effects = core.make_follower(view.leader, view.leader_epoch, view.partition_epoch, view.replicas, view.isr)
        self._apply(tp, replica, effects)

    def delete_replica(self, tp: TopicPartition) -> None:
        """The partition left the metadata (its topic was deleted): drop its log and core."""
        replica = self.replicas.pop(tp)
        self.views.pop(tp, None)
        self.flushed_end.pop(tp, None)
        self._apply(tp, replica, replica.partition.log_deleted("topic_deleted"))

    def set_broker_epochs(self, epochs: dict[int, int]) -> None:
        """The unfenced brokers and their epochs, as metadata says (ISR eligibility)."""
        self.broker_epochs.clear()
        self.broker_epochs.update(epochs)

    # -- messages ------------------------------------------------------------------------------------------

    def handle(self, source: int, message: object, now_ms: int) -> None:
        if isinstance(message, FetchRequest):
            self._on_fetch(source, message, now_ms)
        elif isinstance(message, FetchResponse):
            self._on_fetch_response(source, message, now_ms)
        elif isinstance(message, ProduceRequest):
            self._on_produce(source, message, now_ms)
        else:
            self._on_controller_message(message, now_ms)

    def _on_fetch(self, source: int, request: FetchRequest, now_ms: int) -> None:
        answers = []
        for fetch in request.partitions:
            tp = (fetch.topic, fetch.partition)
            replica = self.replicas.get(tp)
            if replica is None:
                answers.append(FetchResponsePartition(fetch.topic, fetch.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            effects = replica.partition.on_fetch(request.replica_id, request.broker_epoch, fetch, now_ms)
            answers += self._apply(tp, replica, effects)
        self.outbox.append((source, FetchResponse(tuple(answers))))

    def _on_fetch_response(self, source: int, response: FetchResponse, now_ms: int) -> None:
        self.fetch_deadline_ms[source] = now_ms + FETCH_BACKOFF_MS
        for answer in response.partitions:
            tp = (answer.topic, answer.partition)
            replica = self.replicas.get(tp)
            if replica is not None:
                self._apply(tp, replica, replica.partition.on_fetch_response(source, answer, now_ms))

    def _on_produce(self, source: int, request: ProduceRequest, now_ms: int) -> None:
        tp = (request.topic, request.partition)
        replica = self.replicas.get(tp)
        if replica is None:
            self.outbox.append(
                (source, ProduceResponse(request.request_id, tp[0], tp[1], ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1))
            )
            return
        self.producers[request.request_id] = source
        records = encode_batch(list(request.values), timestamps=now_ms)
        effects = replica.partition.append_as_leader(
            request.request_id, records, len(request.values), request.acks, now_ms, request.timeout_ms
        )
        self._apply(tp, replica, effects)

    def _on_controller_message(self, message: object, now_ms: int) -> None:
        if isinstance(message, AlterPartitionResponse):
            tp = (message.topic, message.partition)
            replica = self.replicas.get(tp)
            if replica is not None:
                self._apply(tp, replica, replica.partition.on_alter_partition_response(message, now_ms))

    # -- time ----------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        for tp, replica in self.replicas.items():
            self._apply(tp, replica, replica.partition.tick(now_ms))
            if self.retention_probability > 0 and self.rng.random() < self.retention_probability:
                self._delete_prefix(tp, replica)
        self._send_fetches(now_ms)

    def _delete_prefix(self, tp: TopicPartition, replica: MemoryReplica) -> None:
        """Retention as the storage engine does it: whole batches wholly below the HW go, the log start offset
        moves to the first one kept, and the core follows (cutting its epoch cache there)."""
        core = replica.partition
        boundaries = [b for b in _batch_ends(replica) if core.log_start_offset < b <= core.high_watermark]
        if not boundaries:
            return
        start = self.rng.choice(boundaries)
        log = replica.log
        log.batches = [b for b in log.batches if next(iter_batch_headers(b))[1].last_offset >= start]
        log.entries = [entry for entry in log.entries if entry[0] >= start]
        log.start_offset = start
        self._apply(tp, replica, core.advance_log_start_offset(start, "retention"))

    def _send_fetches(self, now_ms: int) -> None:
        """One fetch per leader, holding every partition followed from it, unless one is still in flight."""
        by_leader: dict[int, list[FetchPartition]] = {}
        for replica in self.replicas.values():
            core = replica.partition
            if core.leader >= 0 and core.leader != self.broker_id:
                by_leader.setdefault(core.leader, []).append(core.fetch_partition(max_bytes=4096))
        for leader, partitions in by_leader.items():
            if now_ms >= self.fetch_deadline_ms.get(leader, 0):
                request = FetchRequest(self.broker_id, self.broker_epoch, tuple(partitions))
                self.outbox.append((leader, request))
                self.fetch_deadline_ms[leader] = now_ms + FETCH_TIMEOUT_MS

    def flush(self) -> None:
        for tp, replica in self.replicas.items():
            self.flushed_end[tp] = replica.leo

    # -- crashes -------------------------------------------------------------------------------------------

    def crash(self, lossy: bool) -> dict[TopicPartition, int]:
        """Stop; a lossy crash cuts each log at a random batch boundary at or after its last flush. Returns
        how many records each partition lost."""
        self.alive = False
        self.outbox.clear()
        self.fetch_deadline_ms.clear()
        lost: dict[TopicPartition, int] = {}
        if not lossy:
            return lost
        for tp, replica in self.replicas.items():
            boundaries = [b for b in _batch_ends(replica) if b >= self.flushed_end[tp]]
            cut = self.rng.choice(boundaries) if boundaries else replica.leo
            if cut < replica.leo:
                lost[tp] = replica.leo - cut
                replica.log.truncate(cut)
        return lost

    def restart(self) -> None:
        """Rebuild every core from the disk: log, HW checkpoint and epoch checkpoint (truncated to the log), as a
        new incarnation that announces each replica it recovered."""
        self.incarnation += 1
        for tp, old in list(self.replicas.items()):
            end = _batch_ends(old)[-1]
            cache = LeaderEpochCache(EpochEntry(e, o) for e, o in old.epoch_checkpoint)
            cache.truncate_from_end(end)
            cache.truncate_from_start(old.log.start_offset)
            core = self.partition_class(
                tp[0],
                tp[1],
                self.broker_id,
                self.config,
                log_start_offset=old.log.start_offset,
                log_end_offset=end,
                high_watermark=max(min(old.checkpointed_high_watermark, end), old.log.start_offset),
                epoch_cache=cache,
            )
            checkpoint = tuple((e.epoch, e.start_offset) for e in cache.entries)
            replica = MemoryReplica(
                self.broker_id,
                core,
                old.log,
                epoch_checkpoint=checkpoint,
                checkpointed_high_watermark=core.high_watermark,
            )
            self.replicas[tp] = replica
            self.flushed_end[tp] = min(self.flushed_end[tp], end)
            self._apply(tp, replica, core.log_opened("recovered"))
        self.views.clear()
        self.alive = True
        self.registered = False

    # -- effects -------------------------------------------------------------------------------------------

    def _apply(self, tp: TopicPartition, replica: MemoryReplica, effects: list[object]) -> list[FetchResponsePartition]:
        answers = replica.apply(effects)  # type: ignore[arg-type]
        self.events += [(self.incarnation, event) for event in replica.events]
        replica.events.clear()
        for send in replica.sent:
            self.outbox.append((send.destination, send.message))
        replica.sent.clear()
        for completion in replica.completed:
            self.completions.append((tp, completion))
            client = self.producers.pop(completion.request_id, None)
            if client is not None:
                response = ProduceResponse(
                    completion.request_id,
                    tp[0],
                    tp[1],
                    completion.error,
                    completion.base_offset,
                    completion.last_offset,
                )
                self.outbox.append((client, response))
        replica.completed.clear()
        return answers


def _batch_ends(replica: MemoryReplica) -> list[int]:
    """Every offset at which the log could end after a cut: its start and each batch's end."""
    ends = [replica.log.start_offset]
    for batch in replica.log.batches:
        for _, header in iter_batch_headers(batch):
            ends.append(header.next_offset)
    return ends
