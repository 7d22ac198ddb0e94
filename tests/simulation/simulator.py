"""A whole Hightide cluster in one process, from one seed: brokers, a controller with a standby, the network,
the clocks, disks that lose their unflushed tail and refuse writes, producers (acks=all and acks=1) and a consumer.

Every step does exactly one thing (deliver a message, or tick one node, or inject one fault), then checks the
invariants of tests/simulation/invariants.py. The same seed gives the same run, step for step:
`HIGHTIDE_SEED=n make simulate` replays a failure. Faults happen during the first part of a run; then the
network heals, crashed nodes restart, and the run must converge: one leader per partition, full ISRs,
identical logs (from the latest log start on), every acks=all acknowledgement present (unless retention deleted it).

The protocol code is the real one (hightide.core): the simulator only carries out its effects. The producers too
drive the client's own send rules (hightide.core.idempotent_producer) with up to five batches of a partition
outstanding, retried in order with their sequences across failovers and lost answers. Each broker has a
wall clock of its own (skewed from true time, and it jumps) and a monotonic clock counting from a random origin far
from it. The topic is created with small segments and a short retention (`SimConfig.topic_configs`), so each
broker's memory disk rolls segments and deletes them with the storage engine's rules at that broker's wall time,
and every retention run is held to Kafka's rule (`retention_honoured`).

With `history` set to a list, every event is also kept in its envelope, as the shells would store it: emitter
(broker N with one incarnation per process start, or controller 1 or 2), a gap-free sequence per incarnation,
and the simulated clock as wall time. The clients are emitters too, with the events the real client emits
(services/client client_events.py): each producer ("producer", its producer id) a SendInvoked per value and a
SendCompleted telling `ok` (with the offset), `failed` (a definite error) or `unknown` (some attempt may have been
appended), the consumer ("consumer", 1) a RecordsConsumed per answer, each offset once. `replica_states()` and
`partition_states()` give what the cluster holds now, in the shapes `hightide.audit.rebuild` rebuilds from that
history.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections import Counter
from dataclasses import dataclass, field

from hightide.audit.rebuild import PartitionKey, PartitionState, ReplicaKey, ReplicaState
from hightide.client.client_events import value_text
from hightide.core.effects import CONTROLLER
from hightide.core.idempotent_producer import (
    Failed,
    IdempotentProducer,
    Outcome,
    PartitionSends,
    ProducerBatchState,
    Resolved,
    SendConfig,
)
from hightide.core.metadata_image import TopicPartition
from hightide.core.partition import CONSUMER_REPLICA_ID, Partition, PartitionConfig
from hightide.core.replica_manager import ReplicaManagerConfig
from hightide.protocol import wire
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import (
    Event,
    LogTruncated,
    RecordsConsumed,
    SegmentDeleted,
    SegmentRolled,
    SendCompleted,
    SendInvoked,
)
from hightide.protocol.records import decode_batches, encode_batch
from simulation.broker import Answer, ControllerAnswer, Request, SimBroker
from simulation.controller import SimController
from simulation.invariants import (
    ControllerView,
    PartitionHistory,
    ReplicaSnapshot,
    RetentionCheck,
    SegmentFacts,
    check_acknowledged,
    check_acknowledged_never_lost,
    check_consumer_read,
    check_converged,
    check_retention_honoured,
    check_step,
    check_truncation,
)
from simulation.mutants import Mutant
from simulation.network import Network, NetworkFaults
from support.memory_disk import MemoryDisk, RetentionRun, SegmentImage

T0 = 1_700_000_000_000
ACKS_ALL_PRODUCER = -1
ACKS_ONE_PRODUCER = -2
CONSUMER = -3
HEALED_STEPS_MAX = 50_000  # the healed phase stops as soon as the cluster has converged
CLUSTER_ID = "sim"
DISK_FAULTS = ("full", "failing", "oversized")
CLOCK_SKEW_MS_MAX = 5_000  # each broker's wall clock starts this far from true time at most
CLOCK_JUMP_MS_MAX = 60_000  # a wall clock jump (NTP stepping it, an operator) moves it this far at most
RETENTION_BYTES_CHOICES = (-1, 1_536)  # unlimited, or about three segments
FIRST_RENEWED_PRODUCER_ID = 1_000  # the producer ids a simulated producer takes after a failure (the controller's)


@dataclass(frozen=True)
class SimConfig:
    brokers: int = 3
    topic: str = "orders"
    partitions: int = 2
    replication_factor: int = 3
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 600
    session_timeout_ms: int = 500
    tick_ms: int = 10
    fault_probability: float = 0.01
    lossy_crash_probability: float = 0.3
    flush_probability: float = 0.05
    faulty_fraction: float = 0.6
    records_max: int = 300
    network: NetworkFaults = field(default_factory=lambda: NetworkFaults(5, 0.02, 0.01))
    legacy_truncate_to_high_watermark: bool = False
    unclean_leader_election_enable: bool = False
    # KIP-966: without it, a replica that lost its tail in a crash can stay the last ISR member and be elected
    # with committed records missing (the simulator finds this; see the mutant tests). Hightide runs with it.
    eligible_leader_replicas_enable: bool = True
    # The topic's log configs (the controller creates the topic with them; the disks roll and retain by them with
    # the storage engine's rules): segments of a few batches, rolled by size and by time, and deleted once a second
    # old (a run lasts about 2.5 s of simulated time), so every run rolls and deletes under wall clocks that are
    # skewed and jump. retention.bytes None: each run draws it from RETENTION_BYTES_CHOICES (-1 is unlimited).
    segment_bytes: int = 512
    segment_ms: int = 500
    retention_ms: int = 1_000
    retention_bytes: int | None = None
    segment_jitter_ms: int = 100  # a broker default: not a config a topic is created with
    # The producers' request timeout (the leader's acks=all wait) and how long they retry a batch.
    produce_timeout_ms: int = 300
    delivery_timeout_ms: int = 3_000
    # The producers' window (max.in.flight.requests.per.connection) and retry.backoff.ms, on the simulation's clock.
    max_in_flight: int = 5
    retry_backoff_ms: int = 20

    def topic_configs(self) -> dict[str, str]:
        """The simulation topic's configs, as Kafka names them."""
        retention_bytes = -1 if self.retention_bytes is None else self.retention_bytes
        return {
            "segment.bytes": str(self.segment_bytes),
            "segment.ms": str(self.segment_ms),
            "retention.ms": str(self.retention_ms),
            "retention.bytes": str(retention_bytes),
            # Set on the topic as well as on the controller, so that the history says it and the audit reads it.
            "min.insync.replicas": str(self.min_insync_replicas),
        }


class SimBatch(ProducerBatchState):
    """A simulated producer's batch: the send rules' state (hightide.core.idempotent_producer), its values, and its
    attempt on the network. It is encoded at each send from the producer id, epoch and sequence the rules gave it."""

    __slots__ = ("answer_due_ms", "request_tag", "tp", "values")

    def __init__(self, tp: tuple[str, int], values: tuple[bytes, ...], now_ms: int, delivery_timeout_ms: int) -> None:
        super().__init__(now_ms, delivery_timeout_ms)
        self.tp = tp
        self.values = values
        self.record_count = len(values)
        self.size = sum(len(v) for v in values)
        self.request_tag = -1  # of the attempt in flight
        self.answer_due_ms = 0  # no answer by then: the attempt timed out (request.timeout.ms)


@dataclass
class Producer:
    """An idempotent producer (KIP-98) driving the real send rules: up to `max_in_flight` batches of a partition
    outstanding, retried in order with their producer id, epoch and sequence, so a leader that has a batch answers
    with its offsets instead of appending it twice; a batch failed for good takes the producer a new producer id."""

    node: int
    acks: int
    producer_id: int  # the producer as an emitter of client events (its first producer id)
    rules: IdempotentProducer[SimBatch]
    next_value: int = 0
    awaiting: dict[int, SimBatch] = field(default_factory=dict)  # request tag -> batch, attempts in flight
    sent: dict[int, SimBatch] = field(default_factory=dict)  # request tag -> batch, for the invariants

    def pending(self) -> bool:
        return any(not sends.idle for sends in self.rules.partitions.values())


class Simulation:
    def __init__(self, seed: int, config: SimConfig | None = None, mutant: Mutant | None = None) -> None:
        self.seed = seed
        self.mutant = mutant
        base = config or SimConfig()
        config = dataclasses.replace(base, **mutant.sim_settings) if mutant else base  # type: ignore[arg-type]
        self.rng = random.Random(seed)
        if config.retention_bytes is None:
            config = dataclasses.replace(config, retention_bytes=self.rng.choice(RETENTION_BYTES_CHOICES))
        self.config = config
        self.now_ms = T0
        self.step_count = 0
        self.network = Network(random.Random(self.rng.random()), self.config.network)
        core_config = PartitionConfig(
            min_insync_replicas=self.config.min_insync_replicas,
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            alter_partition_timeout_ms=300,
            legacy_truncate_to_high_watermark=self.config.legacy_truncate_to_high_watermark,
        )
        self.brokers = {
            b: SimBroker(
                b,
                self._manager_config(b, core_config),
                random.Random(self.rng.random()),
                MemoryDisk(
                    b,
                    random.Random(self.rng.random()),
                    defaults={"segment.jitter.ms": str(self.config.segment_jitter_ms)},
                    directory_id=f"broker-{b}-dir-0",
                ),
            )
            for b in range(1, self.config.brokers + 1)
        }
        if mutant is not None:
            for broker in self.brokers.values():
                broker.partition_class = mutant.partition_class
                broker.manager_class = mutant.manager_class
        overrides = mutant.controller_settings if mutant else {}
        self.controller = SimController(self.config, list(self.brokers), self.now_ms, overrides)
        self.producers = [self._new_producer(ACKS_ALL_PRODUCER, -1, 1), self._new_producer(ACKS_ONE_PRODUCER, 1, 2)]
        self.renewed_producer_ids = FIRST_RENEWED_PRODUCER_ID
        self.consumer_positions: dict[tuple[str, int], int] = {}
        self.consumer_fetches: dict[int, tuple[tuple[str, int], int]] = {}  # request tag -> (tp, fetch offset)
        self.consumer_inflight_deadline = 0
        self.histories = {
            (self.config.topic, p): PartitionHistory(f"{self.config.topic}-{p}") for p in range(self.config.partitions)
        }
        self.restarts: list[tuple[int, int]] = []  # (at ms, broker)
        self.segment_changes: Counter[str] = Counter()  # "SegmentRolled: append" and the like: what the disks did
        self.disk_repairs: list[tuple[int, int]] = []  # (at ms, broker)
        self.lossy_losers: dict[tuple[str, int], set[int]] = {tp: set() for tp in self.histories}
        self.request_tags = 0
        self.emitted: list[Event] | None = None  # set to a list to keep every event the cores emit
        self.history: list[Envelope] | None = None  # set to a list to keep every event in its envelope
        self._sequences: dict[Emitter, int] = {}
        self.timers: list[tuple[int, int, str, int]] = []
        self._timer_sequence = 0
        for node in [*self.brokers, CONTROLLER, ACKS_ALL_PRODUCER, ACKS_ONE_PRODUCER, CONSUMER]:
            self._schedule(self.now_ms + self.rng.randint(1, self.config.tick_ms), "tick", node)
        self.controller.start(self.now_ms, {b: broker.disk.directory_id for b, broker in self.brokers.items()})
        for broker in self.brokers.values():
            broker.wall_skew_ms = self.rng.randint(-CLOCK_SKEW_MS_MAX, CLOCK_SKEW_MS_MAX)
            broker.start(self.now_ms)
            broker.registered_as(self.controller.registered_epoch(broker.broker_id), self.now_ms)
        self._sync_metadata()

    def _new_producer(self, node: int, acks: int, producer_id: int) -> Producer:
        config = SendConfig(
            max_in_flight_requests_per_connection=self.config.max_in_flight,
            retry_backoff_ms=self.config.retry_backoff_ms,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
            linger_ms=0,
        )
        producer_class = self.mutant.producer_class if self.mutant else IdempotentProducer
        rules: IdempotentProducer[SimBatch] = producer_class(config)
        rules.producer_id_assigned(producer_id, 0)
        return Producer(node, acks, producer_id, rules)

    def _manager_config(self, broker_id: int, core_config: PartitionConfig) -> ReplicaManagerConfig:
        """The brokers' settings, scaled to the simulation's clock (a tick is 10 ms)."""
        return ReplicaManagerConfig(
            broker_id=broker_id,
            partition=core_config,
            replica_fetch_wait_max_ms=50,
            replica_fetch_max_bytes=4096,
            replica_fetch_backoff_ms=20,
            replica_fetch_timeout_ms=120,
            log_retention_check_interval_ms=100,
            replica_high_watermark_checkpoint_interval_ms=100,
        )

    # -- scheduling ----------------------------------------------------------------------------------------

    def _schedule(self, at_ms: int, kind: str, node: int) -> None:
        self._timer_sequence += 1
        heapq.heappush(self.timers, (at_ms, self._timer_sequence, kind, node))

    @property
    def faulty(self) -> bool:
        return self.step_count < self.total_steps * self.config.faulty_fraction

    def run(self, steps: int) -> None:
        self.total_steps = steps
        for _ in range(steps):
            self.step()
        self.heal()
        for _ in range(HEALED_STEPS_MAX):
            self.step()
            if self._converged():
                break
        self.check_end()

    def step(self) -> None:
        self.step_count += 1
        next_delivery = self.network.next_delivery_ms()
        if next_delivery is not None and next_delivery <= self.timers[0][0]:
            self.now_ms = max(self.now_ms, next_delivery)
            delivery = self.network.pop_due(self.now_ms)
            if delivery is not None:
                self._deliver(*delivery)
        else:
            at_ms, _, kind, node = heapq.heappop(self.timers)
            self.now_ms = max(self.now_ms, at_ms)
            self._timer(kind, node)
        # What the step's action sent, answered and emitted is routed (and an acknowledgement checked) before a fault
        # changes the cluster: a broker that answers and then crashes in one step answered before it crashed.
        self._route()
        if self.faulty and self.rng.random() < self.config.fault_probability:
            self._inject_fault()
            self._route()
        self.check_invariants()

    # -- nodes ---------------------------------------------------------------------------------------------

    def _timer(self, kind: str, node: int) -> None:
        self._schedule(self.now_ms + self.config.tick_ms, kind, node)
        if node in self.brokers:
            broker = self.brokers[node]
            if broker.alive:
                if self.rng.random() < self.config.flush_probability:
                    broker.flush()
                reachable = self._reaches_controller(node)
                directory = broker.disk.directory_id
                if not broker.registered and reachable and self.controller.register(node, self.now_ms, directory):
                    broker.registered_as(self.controller.registered_epoch(node), self.now_ms)
                if broker.registered:
                    epoch = self.controller.registered_epoch(node)
                    offline = broker.manager.offline_replicas if broker.manager is not None else ()
                    self.controller.heartbeat(node, epoch, self.now_ms, reachable=reachable, offline_replicas=offline)
                    broker.tick(self.now_ms)
        elif node == CONTROLLER:
            self.controller.tick(self.now_ms)
            self._repair_due_disks()
            self._restart_due_brokers()
        elif node == CONSUMER:
            self._consume()
        else:
            self._produce(next(p for p in self.producers if p.node == node))
        self._sync_metadata()

    def _reaches_controller(self, broker: int) -> bool:
        return not self.network.blocked(broker, CONTROLLER)

    def _deliver(self, source: int, destination: int, message: object) -> None:
        if destination in self.brokers:
            broker = self.brokers[destination]
            if broker.alive and broker.registered:
                broker.handle(source, message, self.now_ms)
        elif destination == CONTROLLER:
            answer = self.controller.handle(source, message, self.now_ms)
            if answer is not None:
                assert isinstance(message, wire.AlterPartitionRequest)
                self.network.send(self.now_ms, CONTROLLER, source, ControllerAnswer(message, answer))
            self._sync_metadata()
        elif destination == CONSUMER:
            self._on_consumed(message)
        else:
            self._on_produce_response(destination, message)

    def _route(self) -> None:
        for broker in self.brokers.values():
            for destination, message in broker.outbox:
                self.network.send(self.now_ms, broker.broker_id, destination, message)
            broker.outbox.clear()
            for client, tag, response in broker.answered:
                if client == ACKS_ALL_PRODUCER:
                    self._check_acknowledgement(broker, tag, response)
            broker.answered.clear()
            for incarnation, event in broker.events:
                if self.emitted is not None:
                    self.emitted.append(event)
                self._record(Emitter("broker", broker.broker_id, f"broker-{broker.broker_id}-{incarnation}"), event)
                if isinstance(event, LogTruncated):
                    history = self.histories[(event.topic, event.partition)]
                    check_truncation(history, broker.broker_id, event.truncated_to, event.high_watermark_before)
                elif isinstance(event, SegmentRolled | SegmentDeleted):
                    self.segment_changes[f"{event.TYPE}: {event.reason}"] += 1
            broker.events.clear()
            for run in broker.disk.retention_runs:
                check_retention_honoured(f"{run.tp.topic}-{run.tp.partition}", retention_check(broker.broker_id, run))
            broker.disk.retention_runs.clear()
        for controller_id, event in self.controller.emissions:
            self._record(Emitter("controller", controller_id, f"controller-{controller_id}-0"), event)
        self.controller.emissions.clear()

    def _record_client(self, node: int, event: Event) -> None:
        """A client's event, as `hightide produce` / `hightide consume` emit it (services/client client_events.py):
        each producer is emitter ("producer", its producer id), the consumer ("consumer", 1); one incarnation each,
        since the simulated clients never restart."""
        if node == CONSUMER:
            emitter = Emitter("consumer", 1, "consumer-1-0")
        else:
            producer_id = next(p.producer_id for p in self.producers if p.node == node)
            emitter = Emitter("producer", producer_id, f"producer-{producer_id}-0")
        self._record(emitter, event)

    def _record(self, emitter: Emitter, event: Event) -> None:
        if self.history is None:
            return
        sequence = self._sequences.get(emitter, 0)
        self._sequences[emitter] = sequence + 1
        mono_ns = (self.now_ms - T0) * 1_000_000
        self.history.append(Envelope(CLUSTER_ID, emitter, sequence, self.now_ms, mono_ns, event))

    def _sync_metadata(self) -> None:
        """Brokers follow the committed metadata (they read the metadata log as a JetStream consumer would)."""
        image = self.controller.control.image
        for broker in self.brokers.values():
            if broker.alive and broker.registered:
                broker.follow_metadata(image, self.now_ms)

    # -- clients -------------------------------------------------------------------------------------------

    def _leader_of(self, tp: tuple[str, int]) -> int:
        view = self.controller.views().get(tp)  # none while the topic is deleted
        return -1 if view is None else view.leader

    def _produce(self, producer: Producer) -> None:
        """One tick of a producer: attempts whose answer is overdue end as timed out (they may have been appended),
        a new batch is queued on a random partition (if its last one has gone), and each partition does what the
        send rules say: send the next batch, send a refused one again after its backoff, or wait; batches whose
        delivery timeout passed fail."""
        for tag, batch in sorted(producer.awaiting.items()):
            if self.now_ms >= batch.answer_due_ms:
                del producer.awaiting[tag]
                self._answered(producer, batch, ErrorCode.REQUEST_TIMED_OUT, -1, reached=True)
        if producer.next_value < self.config.records_max:
            tp = (self.config.topic, self.rng.randrange(self.config.partitions))
            sends = producer.rules.partition(*tp)
            if self._leader_of(tp) >= 0 and not sends.queued:
                count = self.rng.randint(1, 3)
                values = tuple(f"p{-producer.node}-{producer.next_value + i}".encode() for i in range(count))
                producer.next_value += count
                sends.enqueue(SimBatch(tp, values, self.now_ms, self.config.delivery_timeout_ms))
                if self.history is not None:
                    for value in values:
                        invoked = SendInvoked(topic=tp[0], partition=tp[1], key=None, value=value.decode())
                        self._record_client(producer.node, invoked)
        for sends in list(producer.rules.partitions.values()):
            self._drive(producer, sends)

    def _drive(self, producer: Producer, sends: PartitionSends[SimBatch]) -> None:
        while True:
            self._carry_out(producer, sends.expire(self.now_ms))
            step = sends.next_step()
            if step == "send":
                self._send(producer, sends, sends.take(self.now_ms))
            elif step == "retry" and sends.retry_wait_ms(self.now_ms) <= 0:
                batch = sends.take_retry(self.now_ms)
                if batch is not None:
                    self._send(producer, sends, batch)
            else:
                return

    def _send(self, producer: Producer, sends: PartitionSends[SimBatch], batch: SimBatch) -> None:
        leader = self._leader_of(batch.tp)
        if leader < 0:
            # The client has no leader to send to: a definite LEADER_NOT_AVAILABLE (the real client's).
            sends.attempt_ended(batch, self.now_ms)
            self._carry_out(producer, sends.on_answer(batch, ErrorCode.LEADER_NOT_AVAILABLE, -1, False, self.now_ms))
            return
        self.request_tags += 1
        batch.request_tag = self.request_tags
        # The client waits a little longer than the leader's request timeout, never past the delivery deadline.
        batch.answer_due_ms = min(self.now_ms + self.config.produce_timeout_ms + 200, int(batch.deadline_ms))
        producer.awaiting[self.request_tags] = batch
        producer.sent[self.request_tags] = batch
        records = encode_batch(
            list(batch.values),
            timestamps=int(batch.created_ms),
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.sequence,
        )
        partition = wire.ProducePartitionData(topic=batch.tp[0], partition=batch.tp[1], records=records)
        body = wire.ProduceRequest(
            acks=producer.acks, timeout_ms=self.config.produce_timeout_ms, partitions=(partition,)
        )  # type: ignore[arg-type]
        self.network.send(self.now_ms, producer.node, leader, Request(self.request_tags, body))

    def _answered(self, producer: Producer, batch: SimBatch, error: ErrorCode, base_offset: int, reached: bool) -> None:
        sends = producer.rules.partition(*batch.tp)
        sends.attempt_ended(batch, self.now_ms)
        self._carry_out(producer, sends.on_answer(batch, error, base_offset, reached, self.now_ms))

    def _carry_out(self, producer: Producer, outcomes: list[Outcome[SimBatch]]) -> None:
        """What the send rules decided: tell each resolved or failed batch's outcome, as the real client's events do,
        and take a new producer id when a failure asks for it."""
        for outcome in outcomes:
            batch = outcome.batch
            if isinstance(outcome, Resolved):
                self._tell(producer, batch, "ok", ErrorCode.NONE, outcome.base_offset)
            elif isinstance(outcome, Failed):
                self._tell(producer, batch, "unknown" if outcome.indefinite else "failed", outcome.error, -1)
                if outcome.renew_producer_id:
                    self.renewed_producer_ids += 1
                    producer.rules.producer_id_assigned(self.renewed_producer_ids, 0)

    def _tell(self, producer: Producer, batch: SimBatch, outcome: str, error: ErrorCode, base_offset: int) -> None:
        if self.history is None:
            return
        for index, value in enumerate(batch.values):
            completed = SendCompleted(
                topic=batch.tp[0],
                partition=batch.tp[1],
                value=value.decode(),
                outcome=outcome,
                offset=base_offset + index if base_offset >= 0 else -1,
                error=error.name,
            )
            self._record_client(producer.node, completed)

    def _fail_everything(self, producer: Producer, error: ErrorCode) -> None:
        """Every batch the producer has fails (its topic is gone): `unknown` if some attempt may have been appended
        (or is in flight), else `failed`; the producer starts again with a new producer id."""
        in_flight = {id(batch) for batch in producer.awaiting.values()}
        for sends in producer.rules.partitions.values():
            for batch in [*sends.queued, *sends.unresolved]:
                indefinite = batch.maybe_written or id(batch) in in_flight
                self._tell(producer, batch, "unknown" if indefinite else "failed", error, -1)
        producer.awaiting.clear()
        self.renewed_producer_ids += 1
        fresh = self._new_producer(producer.node, producer.acks, producer.producer_id)
        fresh.rules.producer_id_assigned(self.renewed_producer_ids, 0)
        producer.rules = fresh.rules

    def _on_produce_response(self, node: int, message: object) -> None:
        assert isinstance(message, Answer) and isinstance(message.body, wire.ProduceResponse)
        producer = next(p for p in self.producers if p.node == node)
        batch = producer.awaiting.pop(message.tag, None)
        if batch is None:
            return  # an answer to an attempt that timed out: the client has moved on
        (answer,) = message.body.partitions
        self._answered(producer, batch, ErrorCode(answer.error), answer.base_offset, reached=True)

    def _check_acknowledgement(self, broker: SimBroker, request_tag: int, response: wire.ProduceResponse) -> None:
        """acks=all's promise at the moment the leader answers: each acknowledged record is in its log below its
        HW (acknowledged_is_committed)."""
        producer = self.producers[0]
        batch = producer.sent.get(request_tag)
        assert batch is not None
        for answer in response.partitions:
            if answer.error != 0:
                continue
            tp = (answer.topic, answer.partition)
            snapshot = self._snapshot(broker, tp)
            for index, value in enumerate(batch.values):
                offset = answer.base_offset + index
                check_acknowledged(self.histories[tp], value, offset, snapshot)

    def _consume(self) -> None:
        if self.now_ms < self.consumer_inflight_deadline:
            return
        tp = (self.config.topic, self.rng.randrange(self.config.partitions))
        leader = self._leader_of(tp)
        if leader < 0:
            return
        position = self.consumer_positions.get(tp, 0)
        fetch = wire.FetchPartitionRequest(
            topic=tp[0], partition=tp[1], fetch_offset=position, partition_max_bytes=2048
        )
        request = wire.FetchRequest(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=100, partitions=(fetch,))
        self.request_tags += 1
        self.consumer_fetches[self.request_tags] = (tp, position)
        self.network.send(self.now_ms, CONSUMER, leader, Request(self.request_tags, request))
        self.consumer_inflight_deadline = self.now_ms + 300

    def _on_consumed(self, message: object) -> None:
        self.consumer_inflight_deadline = 0
        assert isinstance(message, Answer) and isinstance(message.body, wire.FetchResponse)
        asked = self.consumer_fetches.pop(message.tag, None)
        for answer in message.body.partitions:
            tp = (answer.topic, answer.partition)
            position = self.consumer_positions.get(tp, 0)
            if asked is None or asked != (tp, position):
                continue  # as the real consumer: an answer to a fetch from an older position is out of date
            if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE and answer.log_start_offset >= 0:
                self.consumer_positions[tp] = answer.log_start_offset  # auto.offset.reset=earliest
                continue
            if answer.error != 0 or not answer.records:
                continue
            # A batch comes whole: the records before the position are not handed to the client (the consumer's
            # _take), so each offset is consumed once.
            records = [r for _, batch in decode_batches(answer.records) for r in batch if r.offset >= position]
            for record in records:
                check_consumer_read(self.histories[tp].name, record.offset, answer.high_watermark)
            if not records:
                continue
            self.consumer_positions[tp] = records[-1].offset + 1
            if self.history is not None:
                consumed = RecordsConsumed(
                    topic=tp[0],
                    partition=tp[1],
                    offsets=tuple(r.offset for r in records),
                    values=tuple(value_text(r.value) for r in records),
                )
                self._record_client(CONSUMER, consumed)

    # -- faults --------------------------------------------------------------------------------------------

    def _inject_fault(self) -> None:
        """One fault: a crash (maybe lossy), a broker cut off from everyone, one broker-to-broker link cut (a
        follower alive for the controller but unable to fetch), healing, a controller failover, a disk that fails
        (until its broker restarts, as an operator replaces it), or a broker's wall clock that jumps."""
        choice = self.rng.random()
        alive = [b for b in self.brokers.values() if b.alive]
        if choice < 0.28 and len(alive) > 1:
            self._crash(self.rng.choice(alive))
        elif choice < 0.46:
            victim = self.rng.choice(list(self.brokers))
            self.network.isolate(victim, [*self.brokers, CONTROLLER])
        elif choice < 0.69:
            a, b = self.rng.sample(list(self.brokers), 2)
            self.network.cut(a, b)
        elif choice < 0.85:
            self.network.heal()
        elif choice < 0.94:
            # The standby takes over at once: the lease's expiry gap is not modelled.
            self.controller.failover(self.now_ms)
        elif choice < 0.98 and alive:
            self._break_disk(self.rng.choice(alive))
        else:
            broker = self.rng.choice(list(self.brokers.values()))
            broker.wall_skew_ms += self.rng.randint(-CLOCK_JUMP_MS_MAX, CLOCK_JUMP_MS_MAX)

    def _break_disk(self, broker: SimBroker) -> None:
        """The broker's disk fills up, starts failing, or refuses appends larger than it takes; the broker runs on
        with the replicas it could not write offline, until it is restarted with a working disk."""
        if broker.disk.fault is not None:
            return
        broker.disk.fault = self.rng.choice(DISK_FAULTS)
        self.disk_repairs.append((self.now_ms + self.rng.randint(300, 1_500), broker.broker_id))

    def _repair_due_disks(self) -> None:
        for entry in [r for r in self.disk_repairs if r[0] <= self.now_ms]:
            self.disk_repairs.remove(entry)
            self._repair(self.brokers[entry[1]])

    def _repair(self, broker: SimBroker) -> None:
        if broker.alive:
            broker.crash(lossy=False)
        broker.disk.fault = None
        self.restarts.append((self.now_ms + self.rng.randint(50, 300), broker.broker_id))

    def _crash(self, broker: SimBroker) -> None:
        lossy = self.rng.random() < self.config.lossy_crash_probability
        lost = broker.crash(lossy)
        for tp, count in lost.items():
            if count:
                self._note_lossy(tp, broker)
        self.restarts.append((self.now_ms + self.rng.randint(100, 1_500), broker.broker_id))

    def _note_lossy(self, tp: tuple[str, int], broker: SimBroker) -> None:
        """reliability.md's Exempt(p, t): once as many replicas as min ISR lost a tail in crashes, a committed
        record may be gone from every replica, and completeness is no longer promised."""
        losers = self.lossy_losers[tp]
        losers.add(broker.broker_id)
        if len(losers) >= self.config.min_insync_replicas:
            self.histories[tp].exempt = True

    def _restart_due_brokers(self) -> None:
        for entry in [r for r in self.restarts if r[0] <= self.now_ms]:
            self.restarts.remove(entry)
            self._restart(self.brokers[entry[1]])

    def _restart(self, broker: SimBroker) -> None:
        """A new process of a crashed broker: it recovers its logs and must register again before it acts."""
        if broker.alive:
            return  # restarted already (a crash and a disk repair both asked for it)
        broker.start(self.now_ms)
        self.controller.restarted(broker.broker_id)

    def heal(self) -> None:
        self.network.heal()
        self.network.faults = NetworkFaults(self.config.network.delay_ms_max, 0.0, 0.0)
        for _, broker in list(self.disk_repairs):
            self._repair(self.brokers[broker])
        self.disk_repairs.clear()
        for at_ms, broker in list(self.restarts):
            self.restarts.remove((at_ms, broker))
            self._restart(self.brokers[broker])
        self._sync_metadata()

    # -- the topic's life ----------------------------------------------------------------------------------

    def delete_topic(self) -> None:
        """Delete the topic: live brokers drop their replicas at once, a crashed one when it is back."""
        self.controller.delete_topic()
        self._forget_partitions()
        self._sync_metadata()

    def create_topic(self) -> None:
        """Create the topic again under its name (a new topic id; partition epochs start over)."""
        self.controller.create_topic()
        self._forget_partitions()
        self._sync_metadata()

    def _forget_partitions(self) -> None:
        """A new life of the topic: what was committed, acknowledged or read before belongs to the old one."""
        self.histories = {tp: PartitionHistory(history.name) for tp, history in self.histories.items()}
        self.lossy_losers = {tp: set() for tp in self.histories}
        self.consumer_positions.clear()
        for producer in self.producers:
            self._fail_everything(producer, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    # -- partition reassignment (issue 13) ------------------------------------------------------------------

    def reassign(self, targets: list[tuple[str, int, tuple[int, ...] | None]]) -> list[ErrorCode]:
        """An admin moves partitions (None: cancels); the brokers read the decision at once, as they do the
        metadata log."""
        errors = self.controller.reassign(targets)
        self._sync_metadata()
        return errors

    # -- what the cluster holds now -------------------------------------------------------------------------

    @staticmethod
    def cores(broker: SimBroker) -> dict[TopicPartition, Partition]:
        """A broker's replica cores: a live one's, or a crashed one's as they were when it crashed."""
        return broker.manager.replicas if broker.manager is not None else broker.crashed_replicas

    def replica_states(self) -> dict[ReplicaKey, ReplicaState]:
        """Every replica's offsets and epoch cache as its core holds them (a crashed broker's as they were
        when it crashed: its next incarnation announces what recovery left). An offline replica is out of the live
        set (the rebuild takes it out at its ReplicaOffline) until its broker restarts and opens it again."""
        states = {}
        for broker in self.brokers.values():
            for (topic, partition), core in self.cores(broker).items():
                entries = tuple((e.epoch, e.start_offset) for e in core.epoch_cache.entries)
                key = (topic, partition, broker.broker_id)
                states[key] = ReplicaState(core.log_end_offset, core.high_watermark, core.log_start_offset, entries)
        return dict(sorted(states.items()))

    def partition_states(self) -> dict[PartitionKey, PartitionState]:
        """Every partition as the controller's metadata holds it."""
        return {
            (topic, partition): PartitionState(
                p.replicas, p.isr, p.elr, p.last_known_elr, p.leader, p.leader_epoch, p.partition_epoch
            )
            for (topic, partition), p in self.controller.control.image.all_partitions()
        }

    def log_entries(self, broker: SimBroker, tp: tuple[str, int]) -> tuple[tuple[int, bytes, int], ...]:
        """(offset, value, leader epoch) of every record of a broker's log of `tp`, on its disk."""
        disk = broker.disk.logs.get(TopicPartition(*tp))
        return () if disk is None else tuple(disk.log.entries)

    # -- invariants ----------------------------------------------------------------------------------------

    def _hosting(self, tp: tuple[str, int]) -> list[SimBroker]:
        key = TopicPartition(*tp)
        return [b for b in self.brokers.values() if key in self.cores(b)]

    def _snapshot(self, broker: SimBroker, tp: tuple[str, int]) -> ReplicaSnapshot:
        core = self.cores(broker)[TopicPartition(*tp)]
        disk = broker.disk.logs.get(TopicPartition(*tp))
        return ReplicaSnapshot(
            broker=broker.broker_id,
            alive=broker.alive,
            is_leader=core.is_leader,
            leader_epoch=core.leader_epoch,
            log_start_offset=core.log_start_offset,
            log_end_offset=core.log_end_offset,
            high_watermark=core.high_watermark,
            records=self.log_entries(broker, tp),
            disk_log_start_offset=disk.log.start_offset if disk is not None else None,
            disk_log_end_offset=disk.log.end_offset if disk is not None else None,
            isr_log_end_offsets=tuple(
                (remote.broker_id, remote.log_end_offset)
                for remote in core.remotes.values()
                if core.is_leader and remote.broker_id in core.isr_state.maximal_isr and remote.log_end_offset >= 0
            ),
        )

    def check_invariants(self) -> None:
        views = self.controller.views()
        for tp, history in self.histories.items():
            replicas = [self._snapshot(b, tp) for b in self._hosting(tp)]
            view = views.get(tp)
            controller = (
                None
                if view is None
                else ControllerView(view.leader, view.leader_epoch, view.partition_epoch, view.replicas, view.isr)
            )
            unclean = self.config.unclean_leader_election_enable and self.controller.unclean_elected(tp)
            if unclean or self.controller.last_known_leader_elected(tp):
                history.exempt = True
            check_step(history, replicas, controller)

    def _converged(self) -> bool:
        views = self.controller.views()
        for tp in self.histories:
            view = views[tp]
            if view.leader < 0 or set(view.isr) != set(view.replicas):
                return False
            if not self._logs_agree(tp):
                return False
        return not any(p.pending() for p in self.producers)

    def _logs_agree(self, tp: tuple[str, int]) -> bool:
        """Every replica's log ends at the same offset and holds the same records from the latest log start on
        (below it, some replica's retention deleted them)."""
        disks = [b.disk.logs.get(TopicPartition(*tp)) for b in self._hosting(tp)]
        logs = [d.log for d in disks if d is not None]
        if len(logs) != len(disks):
            return False
        start = max(log.start_offset for log in logs)
        return len({(log.end_offset, tuple(e for e in log.entries if e[0] >= start)) for log in logs}) == 1

    def check_end(self) -> None:
        views = self.controller.views()
        for tp, history in self.histories.items():
            view = views[tp]
            replicas = [self._snapshot(b, tp) for b in self._hosting(tp)]
            controller = ControllerView(view.leader, view.leader_epoch, view.partition_epoch, view.replicas, view.isr)
            check_converged(history.name, replicas, controller)
            leader = self.brokers[view.leader]
            leader_log = {offset: value for offset, value, _ in self.log_entries(leader, tp)}
            disk = leader.disk.logs.get(TopicPartition(*tp))
            check_acknowledged_never_lost(history, leader_log, 0 if disk is None else disk.log.start_offset)


def retention_check(broker: int, run: RetentionRun) -> RetentionCheck:
    """A disk's retention run as the retention_honoured invariant reads it: each segment's size and largest
    timestamp worked out again from its batches' headers, not taken from the disk's own bookkeeping."""
    return RetentionCheck(
        broker,
        run.wall_ms,
        run.high_watermark,
        run.log_start_offset_before,
        run.log_start_offset_after,
        run.retention_ms,
        run.retention_bytes,
        tuple(_segment_facts(image) for image in run.before),
        tuple(_segment_facts(image) for image in run.after),
    )


def _segment_facts(image: SegmentImage) -> SegmentFacts:
    headers = image.headers
    timestamps = [header.max_timestamp for header in headers if header.max_timestamp >= 0]
    return SegmentFacts(
        image.base_offset,
        headers[-1].next_offset if headers else image.base_offset,
        sum(header.size for header in headers),
        max(timestamps) if timestamps else image.modified_ms,
    )
