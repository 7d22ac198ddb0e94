"""A whole Hightide cluster in one process, from one seed: brokers, a controller with a standby, the network,
the clock, disks that lose their unflushed tail, producers (acks=all and acks=1) and a consumer.

Every step does exactly one thing (deliver a message, or tick one node, or inject one fault), then checks the
invariants of tests/simulation/invariants.py. The same seed gives the same run, step for step:
`HIGHTIDE_SEED=n make simulate` replays a failure. Faults happen during the first part of a run; then the
network heals, crashed nodes restart, and the run must converge: one leader per partition, full ISRs,
identical logs, every acks=all acknowledgement present.

The protocol code is the real one (hightide.core): the simulator only carries out its effects.

With `history` set to a list, every event is also kept in its envelope, as the shells would store it: emitter
(broker N with one incarnation per process start, or controller 1 or 2), a gap-free sequence per incarnation,
and the simulated clock as wall time. `replica_states()` and `partition_states()` give what the cluster holds
now, in the shapes `hightide.audit.rebuild` rebuilds from that history.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from dataclasses import dataclass, field

from hightide.audit.rebuild import PartitionKey, PartitionState, ReplicaKey, ReplicaState
from hightide.core.effects import CONTROLLER
from hightide.core.partition import Partition, PartitionConfig
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event, LogTruncated
from hightide.protocol.messages import CONSUMER_REPLICA_ID, FetchPartition, FetchRequest
from hightide.protocol.records import decode_batches
from simulation.broker import FetchResponse, ProduceRequest, ProduceResponse, SimBroker
from simulation.controller import SimController
from simulation.invariants import (
    ControllerView,
    PartitionHistory,
    ReplicaSnapshot,
    check_acknowledged,
    check_acknowledged_never_lost,
    check_consumer_read,
    check_converged,
    check_step,
    check_truncation,
)
from simulation.mutants import Mutant
from simulation.network import Network, NetworkFaults

T0 = 1_700_000_000_000
ACKS_ALL_PRODUCER = -1
ACKS_ONE_PRODUCER = -2
CONSUMER = -3
HEALED_STEPS_MAX = 50_000  # the healed phase stops as soon as the cluster has converged
CLUSTER_ID = "sim"


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
    # Retention: each tick, each replica deletes a committed prefix of its log with this probability. Off in the
    # invariant runs (their end checks compare whole logs); the rebuild tests turn it on to move log start offsets.
    retention_probability: float = 0.0


@dataclass
class Producer:
    node: int
    acks: int
    next_value: int = 0
    inflight: dict[int, tuple[tuple[str, int], tuple[bytes, ...], int]] = field(default_factory=dict)


class Simulation:
    def __init__(self, seed: int, config: SimConfig | None = None, mutant: Mutant | None = None) -> None:
        self.seed = seed
        self.mutant = mutant
        base = config or SimConfig()
        self.config = dataclasses.replace(base, **mutant.sim_settings) if mutant else base  # type: ignore[arg-type]
        self.rng = random.Random(seed)
        self.now_ms = T0
        self.step_count = 0
        self.network = Network(random.Random(self.rng.random()), self.config.network)
        core_config = PartitionConfig(
            min_insync_replicas=self.config.min_insync_replicas,
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            alter_partition_timeout_ms=300,
            legacy_truncate_to_high_watermark=self.config.legacy_truncate_to_high_watermark,
        )
        partition_class = mutant.partition_class if mutant else Partition
        self.brokers = {
            b: SimBroker(
                b,
                core_config,
                random.Random(self.rng.random()),
                partition_class=partition_class,
                retention_probability=self.config.retention_probability,
            )
            for b in range(1, self.config.brokers + 1)
        }
        overrides = mutant.controller_settings if mutant else {}
        self.controller = SimController(self.config, list(self.brokers), self.now_ms, overrides)
        self.producers = [Producer(ACKS_ALL_PRODUCER, -1), Producer(ACKS_ONE_PRODUCER, 1)]
        self.consumer_positions: dict[tuple[str, int], int] = {}
        self.consumer_inflight_deadline = 0
        self.histories = {
            (self.config.topic, p): PartitionHistory(f"{self.config.topic}-{p}") for p in range(self.config.partitions)
        }
        self.restarts: list[tuple[int, int]] = []  # (at ms, broker)
        self.lossy_losers: dict[tuple[str, int], set[int]] = {tp: set() for tp in self.histories}
        self.request_ids = 0
        self.emitted: list[Event] | None = None  # set to a list to keep every event the cores emit
        self.history: list[Envelope] | None = None  # set to a list to keep every event in its envelope
        self._sequences: dict[Emitter, int] = {}
        self.timers: list[tuple[int, int, str, int]] = []
        self._timer_sequence = 0
        for node in [*self.brokers, CONTROLLER, ACKS_ALL_PRODUCER, ACKS_ONE_PRODUCER, CONSUMER]:
            self._schedule(self.now_ms + self.rng.randint(1, self.config.tick_ms), "tick", node)
        self.controller.start(self.now_ms)
        self._sync_metadata()

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
                if not broker.registered and reachable:
                    broker.registered = self.controller.register(node, self.now_ms)
                if broker.registered:
                    self.controller.heartbeat(node, broker.broker_epoch, self.now_ms, reachable=reachable)
                    broker.tick(self.now_ms)
        elif node == CONTROLLER:
            self.controller.tick(self.now_ms)
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
            if self.brokers[destination].alive:
                self.brokers[destination].handle(source, message, self.now_ms)
        elif destination == CONTROLLER:
            answer = self.controller.handle(source, message, self.now_ms)
            if answer is not None:
                self.network.send(self.now_ms, CONTROLLER, source, answer)
            self._sync_metadata()
        elif destination == CONSUMER:
            self._on_consumed(source, message)
        else:
            self._on_produce_response(destination, message)

    def _route(self) -> None:
        for broker in self.brokers.values():
            for destination, message in broker.outbox:
                self.network.send(self.now_ms, broker.broker_id, destination, message)
            broker.outbox.clear()
            for tp, completion in broker.completions:
                acks_all = completion.request_id in self.producers[0].inflight
                if completion.error is ErrorCode.NONE and acks_all:
                    self._check_acknowledgement(broker, tp, completion.base_offset, completion.last_offset)
            broker.completions.clear()
            for incarnation, event in broker.events:
                if self.emitted is not None:
                    self.emitted.append(event)
                self._record(Emitter("broker", broker.broker_id, f"broker-{broker.broker_id}-{incarnation}"), event)
                if isinstance(event, LogTruncated):
                    history = self.histories[(event.topic, event.partition)]
                    check_truncation(history, broker.broker_id, event.truncated_to, event.high_watermark_before)
            broker.events.clear()
        for controller_id, event in self.controller.emissions:
            self._record(Emitter("controller", controller_id, f"controller-{controller_id}-0"), event)
        self.controller.emissions.clear()

    def _record(self, emitter: Emitter, event: Event) -> None:
        if self.history is None:
            return
        sequence = self._sequences.get(emitter, 0)
        self._sequences[emitter] = sequence + 1
        mono_ns = (self.now_ms - T0) * 1_000_000
        self.history.append(Envelope(CLUSTER_ID, emitter, sequence, self.now_ms, mono_ns, event))

    def _sync_metadata(self) -> None:
        """Brokers follow the committed metadata (they read the metadata log as a JetStream consumer would)."""
        epochs = self.controller.broker_epochs()
        views = self.controller.views()
        for broker in self.brokers.values():
            if not (broker.alive and broker.registered):
                continue
            broker.broker_epoch = self.controller.registered_epoch(broker.broker_id)
            broker.set_broker_epochs(epochs)
            for tp, view in views.items():
                broker.apply_view(tp, view, self.now_ms)
            for tp in [tp for tp in broker.replicas if tp not in views]:
                broker.delete_replica(tp)

    # -- clients -------------------------------------------------------------------------------------------

    def _produce(self, producer: Producer) -> None:
        expired = [rid for rid, (_, _, deadline) in producer.inflight.items() if deadline <= self.now_ms]
        for rid in expired:
            del producer.inflight[rid]
        if producer.inflight or producer.next_value >= self.config.records_max:
            return
        tp = (self.config.topic, self.rng.randrange(self.config.partitions))
        view = self.controller.views().get(tp)  # none while the topic is deleted
        leader = -1 if view is None else view.leader
        if leader < 0:
            return
        count = self.rng.randint(1, 3)
        values = tuple(f"p{-producer.node}-{producer.next_value + i}".encode() for i in range(count))
        producer.next_value += count
        self.request_ids += 1
        producer.inflight[self.request_ids] = (tp, values, self.now_ms + 1_000)
        request = ProduceRequest(self.request_ids, tp[0], tp[1], values, producer.acks, 800)
        self.network.send(self.now_ms, producer.node, leader, request)

    def _on_produce_response(self, node: int, response: object) -> None:
        assert isinstance(response, ProduceResponse)
        producer = next(p for p in self.producers if p.node == node)
        producer.inflight.pop(response.request_id, None)

    def _check_acknowledgement(self, broker: SimBroker, tp: tuple[str, int], base: int, last: int) -> None:
        snapshot = self._snapshot(broker, tp)
        held = {offset: value for offset, value, _ in snapshot.records}
        for offset in range(base, last + 1):
            check_acknowledged(self.histories[tp], held.get(offset, b""), offset, snapshot)

    def _consume(self) -> None:
        if self.now_ms < self.consumer_inflight_deadline:
            return
        tp = (self.config.topic, self.rng.randrange(self.config.partitions))
        view = self.controller.views().get(tp)  # none while the topic is deleted
        leader = -1 if view is None else view.leader
        if leader < 0:
            return
        position = self.consumer_positions.get(tp, 0)
        request = FetchRequest(CONSUMER_REPLICA_ID, -1, (FetchPartition(tp[0], tp[1], position, max_bytes=2048),))
        self.network.send(self.now_ms, CONSUMER, leader, request)
        self.consumer_inflight_deadline = self.now_ms + 300

    def _on_consumed(self, source: int, message: object) -> None:
        self.consumer_inflight_deadline = 0
        assert isinstance(message, FetchResponse)
        for answer in message.partitions:
            tp = (answer.topic, answer.partition)
            if answer.error is not ErrorCode.NONE or not answer.records:
                continue
            records = [r for _, batch in decode_batches(answer.records) for r in batch]
            for record in records:
                check_consumer_read(self.histories[tp].name, record.offset, answer.high_watermark)
            self.consumer_positions[tp] = records[-1].offset + 1

    # -- faults --------------------------------------------------------------------------------------------

    def _inject_fault(self) -> None:
        """One fault: a crash (maybe lossy), a broker cut off from everyone, one broker-to-broker link cut (a
        follower alive for the controller but unable to fetch), healing, or a controller failover."""
        choice = self.rng.random()
        alive = [b for b in self.brokers.values() if b.alive]
        if choice < 0.3 and len(alive) > 1:
            self._crash(self.rng.choice(alive))
        elif choice < 0.5:
            victim = self.rng.choice(list(self.brokers))
            self.network.isolate(victim, [*self.brokers, CONTROLLER])
        elif choice < 0.75:
            a, b = self.rng.sample(list(self.brokers), 2)
            self.network.cut(a, b)
        elif choice < 0.9:
            self.network.heal()
        else:
            # The standby takes over at once: the lease's expiry gap is not modelled.
            self.controller.failover(self.now_ms)

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
            broker = self.brokers[entry[1]]
            broker.restart()
            self.controller.restarted(broker.broker_id)

    def heal(self) -> None:
        self.network.heal()
        self.network.faults = NetworkFaults(self.config.network.delay_ms_max, 0.0, 0.0)
        for at_ms, broker in list(self.restarts):
            self.restarts.remove((at_ms, broker))
            self.brokers[broker].restart()
            self.controller.restarted(broker)
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
            producer.inflight.clear()

    # -- what the cluster holds now -------------------------------------------------------------------------

    def replica_states(self) -> dict[ReplicaKey, ReplicaState]:
        """Every replica's offsets and epoch cache as its core holds them (a crashed broker's as they were
        when it crashed: its next incarnation announces what recovery left)."""
        states = {}
        for broker in self.brokers.values():
            for (topic, partition), replica in broker.replicas.items():
                core = replica.partition
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

    # -- invariants ----------------------------------------------------------------------------------------

    def _snapshot(self, broker: SimBroker, tp: tuple[str, int]) -> ReplicaSnapshot:
        replica = broker.replicas[tp]
        core = replica.partition
        return ReplicaSnapshot(
            broker=broker.broker_id,
            alive=broker.alive,
            is_leader=core.is_leader,
            leader_epoch=core.leader_epoch,
            log_start_offset=core.log_start_offset,
            log_end_offset=core.log_end_offset,
            high_watermark=core.high_watermark,
            records=tuple(replica.log.entries),
            isr_log_end_offsets=tuple(
                (remote.broker_id, remote.log_end_offset)
                for remote in core.remotes.values()
                if core.is_leader and remote.broker_id in core.isr_state.maximal_isr and remote.log_end_offset >= 0
            ),
        )

    def check_invariants(self) -> None:
        views = self.controller.views()
        for tp, history in self.histories.items():
            replicas = [self._snapshot(b, tp) for b in self.brokers.values() if tp in b.replicas]
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
            logs = {tuple(b.replicas[tp].log.entries) for b in self.brokers.values() if tp in b.replicas}
            if len(logs) != 1:
                return False
        return all(not p.inflight for p in self.producers)

    def check_end(self) -> None:
        views = self.controller.views()
        for tp, history in self.histories.items():
            view = views[tp]
            replicas = [self._snapshot(b, tp) for b in self.brokers.values() if tp in b.replicas]
            controller = ControllerView(view.leader, view.leader_epoch, view.partition_epoch, view.replicas, view.isr)
            check_converged(history.name, replicas, controller)
            leader_log = {offset: value for offset, value, _ in self.brokers[view.leader].replicas[tp].log.entries}
            check_acknowledged_never_lost(history, leader_log)
