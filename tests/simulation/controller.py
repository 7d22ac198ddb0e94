"""The simulated controller: the real ReplicationControl over a metadata log every node can read.

The metadata log stands for the JetStream stream of metadata records: appending is the commit point, brokers
read it to follow partition state, and a standby controller that takes over after the active one dies builds
its image by replaying it, with a higher controller epoch (as a new holder of the NATS KV lease would).
Brokers' sessions with the new controller start at the takeover, as KRaft's do. Two controller processes (ids 1
and 2) take turns: each takeover is announced with ControllerElected, as the real controller's shell does, and
every event is kept with the id of the controller that emitted it (`emissions`). Like the shell, each takeover
counts as a batch of the log and every decision's events carry the controller epoch and the batch offset it
lands at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from hightide.core.controller import ControllerConfig, ControllerResult, ReplicationControl
from hightide.core.metadata_image import MetadataImage, TopicPartition
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import ControllerElected, Event, LeaderElected
from hightide.protocol.metadata import MetadataRecord
from hightide.protocol.wire import AlterPartitionRequest, AlterPartitionResponse

if TYPE_CHECKING:
    from simulation.simulator import SimConfig

R = TypeVar("R")


@dataclass(frozen=True)
class PartitionView:
    """A partition's committed state as the metadata log says it."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


HEARTBEAT_INTERVAL_MS = 50


class SimController:
    def __init__(
        self, config: SimConfig, brokers: list[int], now_ms: int, overrides: Mapping[str, object] | None = None
    ) -> None:
        self.sim_config = config
        self.brokers = brokers
        self.controller_config = ControllerConfig(
            broker_session_timeout_ms=config.session_timeout_ms,
            min_insync_replicas=config.min_insync_replicas,
            unclean_leader_election_enable=config.unclean_leader_election_enable,
            eligible_leader_replicas_enable=config.eligible_leader_replicas_enable,
            auto_leader_rebalance_enable=False,
        )
        if overrides:
            self.controller_config = dataclasses.replace(self.controller_config, **overrides)  # type: ignore[arg-type]
        self.log: list[MetadataRecord] = []
        self.metadata_batches = 0  # the metadata log's offset of its last batch (the stream sequence, as the shell's)
        self.events: list[Event] = []
        self.emissions: list[tuple[int, Event]] = []  # (emitting controller, event), drained by the simulator
        self.control = ReplicationControl(self.controller_config)
        self.controller_epoch = 1
        self.active_controller = 1
        self.topics_created = 0
        self.incarnations = dict.fromkeys(brokers, 0)
        self.last_heartbeat_ms: dict[int, int] = {}
        self._unclean: set[tuple[str, int]] = set()
        self._recovered: set[tuple[str, int]] = set()
        self._views: dict[tuple[str, int], PartitionView] | None = None

    def _commit(self, result: ControllerResult[R]) -> R:
        """Store the decision's events as its intent, append its records to the metadata log (one batch), then
        apply them (the shell's contract)."""
        stamped = result.events_at(self.controller_epoch, self.metadata_batches + 1)
        if result.records:
            self.log.extend(result.records)
            self.metadata_batches += 1
            self.control.apply(result.records)
            self._views = None
        for event in stamped:
            self._emit(event)
            if isinstance(event, LeaderElected) and event.election == "unclean":
                self._unclean.add((event.topic, event.partition))
            if isinstance(event, LeaderElected) and event.election == "last_known_leader":
                self._recovered.add((event.topic, event.partition))
        return result.response

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        self.emissions.append((self.active_controller, event))

    def _takeover(self) -> ControllerElected:
        """The takeover batch (an empty one, as the shell appends), and the ControllerElected that names it."""
        self.metadata_batches += 1
        return self.control.elected(self.active_controller, self.controller_epoch, self.metadata_batches)

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, now_ms: int, directory_ids: Mapping[int, str] | None = None) -> None:
        """Take the lease, register and unfence every broker (on its log dir), then create the topic."""
        self._emit(self._takeover())
        for broker in self.brokers:
            self.restarted(broker)
            assert self.register(broker, now_ms, (directory_ids or {}).get(broker, ""))
            self._heartbeat(broker, now_ms)
        self.create_topic()

    def create_topic(self) -> None:
        """Create the simulation's topic with its configs (again, after a deletion: a new topic id, partition epochs
        from 0)."""
        config = self.sim_config
        reply = self._commit(
            self.control.create_topic(
                config.topic,
                topic_id=f"sim-topic-{self.topics_created:016d}",
                partitions=config.partitions,
                replication_factor=config.replication_factor,
                configs=config.topic_configs(),
            )
        )
        assert reply.error.name == "NONE", reply
        self.topics_created += 1

    def delete_topic(self) -> None:
        reply = self._commit(self.control.delete_topic(self.sim_config.topic))
        assert reply.error.name == "NONE", reply

    def restarted(self, broker: int) -> None:
        """A broker process started again: a new incarnation, which must register before it may act."""
        self.incarnations[broker] += 1

    def register(self, broker: int, now_ms: int, directory_id: str = "") -> bool:
        """Register the broker's current incarnation (a killed broker left no clean-shutdown marker). Refused
        (DUPLICATE_BROKER_REGISTRATION) while the previous incarnation's session is still valid: the broker
        retries, and by the time it succeeds the controller has fenced the old incarnation."""
        incarnation = f"broker-{broker}-incarnation-{self.incarnations[broker]}"
        reply = self._commit(self.control.register_broker(broker, incarnation, -1, now_ms, directory_id=directory_id))
        assert reply.error.name in ("NONE", "DUPLICATE_BROKER_REGISTRATION"), reply
        return reply.error.name == "NONE"

    def failover(self, now_ms: int) -> None:
        """The standby wins the lease: a new controller epoch, an image replayed from the metadata log."""
        self.controller_epoch += 1
        self.active_controller = 3 - self.active_controller  # the standby process of the pair
        image = MetadataImage().apply_all(self.log)
        self.control = ReplicationControl(self.controller_config, image)
        self.last_heartbeat_ms.clear()
        self._views = None
        self._emit(self._takeover())

    # -- requests ------------------------------------------------------------------------------------------

    def heartbeat(
        self,
        broker: int,
        broker_epoch: int,
        now_ms: int,
        *,
        reachable: bool,
        offline_replicas: tuple[TopicPartition, ...] = (),
    ) -> None:
        if not reachable or now_ms - self.last_heartbeat_ms.get(broker, 0) < HEARTBEAT_INTERVAL_MS:
            return
        self._heartbeat(broker, now_ms, offline_replicas)

    def _heartbeat(self, broker: int, now_ms: int, offline_replicas: tuple[TopicPartition, ...] = ()) -> None:
        self.last_heartbeat_ms[broker] = now_ms
        epoch = self.registered_epoch(broker)
        offset = len(self.log)
        heartbeat = self.control.heartbeat(
            broker, epoch, now_ms, metadata_offset=offset, offline_replicas=offline_replicas
        )
        self._commit(heartbeat)

    def tick(self, now_ms: int) -> None:
        self._commit(self.control.tick(now_ms))

    def handle(self, source: int, message: object, now_ms: int) -> AlterPartitionResponse | None:
        if isinstance(message, AlterPartitionRequest):
            response: AlterPartitionResponse = self._commit(self.control.alter_partition(message))
            return response
        return None

    # -- what nodes read from the metadata log --------------------------------------------------------------

    def views(self) -> dict[tuple[str, int], PartitionView]:
        if self._views is None:
            self._views = {
                (topic.name, index): PartitionView(p.leader, p.leader_epoch, p.partition_epoch, p.replicas, p.isr)
                for topic in self.control.image.topics.values()
                for index, p in enumerate(topic.partitions)
            }
        return self._views

    def broker_epochs(self) -> dict[int, int]:
        return {b.broker_id: b.broker_epoch for b in self.control.image.brokers.values() if b.active}

    def registered_epoch(self, broker: int) -> int:
        registration = self.control.image.broker(broker)
        return -1 if registration is None else registration.broker_epoch

    def unclean_elected(self, tp: tuple[str, int]) -> bool:
        return tp in self._unclean

    def last_known_leader_elected(self, tp: tuple[str, int]) -> bool:
        """KIP-966's balanced recovery happened: Kafka's default, and a sanctioned (attributed) risk of loss."""
        return tp in self._recovered

    # -- partition reassignment (issue 13) -----------------------------------------------------------------------

    def reassign(self, targets: list[tuple[str, int, tuple[int, ...] | None]]) -> list[ErrorCode]:
        """An admin's AlterPartitionReassignments (None cancels): each partition's answer."""
        replies = self._commit(self.control.alter_partition_reassignments(targets))
        return [reply.error for reply in replies]
