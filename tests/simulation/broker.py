"""A simulated broker: the real ReplicaManager over a simulated disk, wired to the simulated network.

Every protocol decision is the replica manager's (hightide.core.replica_manager), the very object the broker
service drives. What is fake here is only what the simulator fakes: the disk (`MemoryDisk`), the network (messages
in the simulator's queue), and the clocks (the simulator's time as this process's monotonic clock from an origin
of its own, and a wall clock of this broker's own that may be skewed and jump). This module is the shell: it hands
the manager its inputs and carries out the effects in order, as the broker service does, and feeds a refused
storage effect back as an input.

A crash ends the process (the manager and everything in memory go; the disk stays, maybe cut back); a restart
builds a new manager from what the disk holds, as a new incarnation that must register again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.effects import (
    CONTROLLER,
    AnswerFetch,
    AnswerProduce,
    Effect,
    Emit,
    Send,
    SendFetch,
)
from hightide.core.metadata_image import MetadataImage, TopicPartition
from hightide.core.partition import Partition
from hightide.core.replica_manager import ReplicaManager, ReplicaManagerConfig, carry_out
from hightide.protocol import wire
from hightide.protocol.events import Event
from support.memory_disk import MemoryDisk


@dataclass(frozen=True)
class Request:
    """A client's or follower's request to a broker; `tag` is the sender's, echoed in the answer."""

    tag: int
    body: wire.ProduceRequest | wire.FetchRequest


@dataclass(frozen=True)
class Answer:
    tag: int
    body: wire.ProduceResponse | wire.FetchResponse


@dataclass(frozen=True)
class ControllerAnswer:
    """The controller's answer to a broker's AlterPartition, with the request it answers (as an RPC pairs them)."""

    request: wire.AlterPartitionRequest
    response: wire.AlterPartitionResponse


@dataclass
class SimBroker:
    broker_id: int
    config: ReplicaManagerConfig
    rng: random.Random
    disk: MemoryDisk
    partition_class: type[Partition] = Partition  # a mutant's variant of the protocol, or the real one
    manager_class: type[ReplicaManager] = ReplicaManager
    manager: ReplicaManager | None = None  # None while the process is down
    crashed_replicas: dict[TopicPartition, Partition] = field(default_factory=dict)  # the cores as they were
    alive: bool = False
    incarnation: int = -1  # the process: a restart is a new one
    mono_origin_ms: int = 0  # this process's monotonic clock reads sim time + origin (an uptime, far from the wall)
    wall_skew_ms: int = 0  # this broker's wall clock reads sim time + skew (it may jump)
    outbox: list[tuple[int, object]] = field(default_factory=list)
    events: list[tuple[int, Event]] = field(default_factory=list)  # (incarnation, event) in emission order
    answered: list[tuple[int, int, wire.ProduceResponse]] = field(default_factory=list)  # (client, tag, answer)
    _requests: dict[int, tuple[int, int]] = field(default_factory=dict)  # request id -> (source, tag)
    _request_ids: int = 0

    # -- the process ---------------------------------------------------------------------------------------------

    def start(self, sim_now_ms: int) -> None:
        """A new process: a new manager built from the disk, announcing each log it recovered."""
        assert not self.alive
        self.incarnation += 1
        # A monotonic clock counts from an origin of its own (the machine's boot, 15 minutes to 3 hours ago here):
        # unrelated to any other process's, and nowhere near the wall clock that record timestamps are in. (Read as
        # a wall-clock time, it makes retention compare timestamps of 2023 with a time of 1970: issue 11's defect 3.)
        self.mono_origin_ms = self.rng.randrange(1_000_000, 10_000_000) - sim_now_ms
        self.manager = self.manager_class(self.config, self.disk, self.partition_class)
        self.crashed_replicas = {}
        self.alive = True
        now = self.now(sim_now_ms)
        for state in self.disk.log_states():
            self._carry_out(self.manager.open_log(state, "recovered", now), now)

    def crash(self, lossy: bool) -> dict[TopicPartition, int]:
        """Stop; a lossy crash cuts each log back (see MemoryDisk.crash). Returns the records each log lost."""
        self.alive = False
        if self.manager is not None:
            self.crashed_replicas = dict(self.manager.replicas)
        self.manager = None
        self.outbox.clear()
        self._requests.clear()
        return self.disk.crash(lossy)

    def now(self, sim_now_ms: int) -> Now:
        return Now(MonoMs(sim_now_ms + self.mono_origin_ms), WallMs(sim_now_ms + self.wall_skew_ms))

    @property
    def registered(self) -> bool:
        return self.manager is not None and self.manager.broker_epoch >= 0

    # -- inputs --------------------------------------------------------------------------------------------------

    def registered_as(self, broker_epoch: int, sim_now_ms: int) -> None:
        manager = self._manager()
        self._carry_out(manager.on_registered(broker_epoch, self.now(sim_now_ms)), self.now(sim_now_ms))

    def follow_metadata(self, image: MetadataImage, sim_now_ms: int) -> None:
        manager = self._manager()
        if manager.image is image:
            return
        self._input(manager.on_metadata(image, self.now(sim_now_ms)), sim_now_ms)

    def handle(self, source: int, message: object, sim_now_ms: int) -> None:
        manager = self._manager()
        now = self.now(sim_now_ms)
        if isinstance(message, Request):
            self._request_ids += 1
            self._requests[self._request_ids] = (source, message.tag)
            if isinstance(message.body, wire.ProduceRequest):
                self._input(manager.on_produce(self._request_ids, message.body, now), sim_now_ms)
            else:
                self._input(manager.on_fetch(self._request_ids, message.body, now), sim_now_ms)
        elif isinstance(message, Answer):
            assert isinstance(message.body, wire.FetchResponse)
            self._input(manager.on_fetch_response(source, message.tag, message.body, now), sim_now_ms)
        elif isinstance(message, ControllerAnswer):
            self._input(manager.on_alter_partition_response(message.request, message.response, now), sim_now_ms)

    def tick(self, sim_now_ms: int) -> None:
        self._input(self._manager().tick(self.now(sim_now_ms)), sim_now_ms)

    def _input(self, effects: list[Effect], sim_now_ms: int) -> None:
        """Carry out an input's effects (`carry_out` ends it with the poll: woken fetches, follower fetches due)."""
        self._carry_out(effects, self.now(sim_now_ms))

    def _manager(self) -> ReplicaManager:
        assert self.manager is not None, f"broker {self.broker_id} is down"
        return self.manager

    # -- effects -------------------------------------------------------------------------------------------------

    def _carry_out(self, effects: list[Effect], now: Now) -> None:
        """Each effect in order, as the broker service does (`carry_out`: a refused storage effect goes back to
        the manager), on the memory disk and the simulated network."""
        carry_out(
            self._manager(),
            effects,
            now,
            storage=lambda effect: self.disk.apply(effect, now.wall_ms),
            deliver=self._deliver,
        )

    def _deliver(self, effect: Effect) -> None:
        match effect:
            case Emit(event=event):
                self.events.append((self.incarnation, event))
            case Send(destination=destination, message=message):
                assert destination == CONTROLLER
                self.outbox.append((CONTROLLER, message))
            case SendFetch(leader=leader, fetch_id=fetch_id, request=request):
                self.outbox.append((leader, Request(fetch_id, request)))
            case AnswerProduce(request_id=request_id, response=response):
                source, tag = self._requests.pop(request_id)
                self.answered.append((source, tag, response))
                self.outbox.append((source, Answer(tag, response)))
            case AnswerFetch(request_id=request_id, response=response):
                source, tag = self._requests.pop(request_id)
                self.outbox.append((source, Answer(tag, response)))
            case _:
                raise AssertionError(f"an effect the shell does not know: {effect!r}")

    def flush(self) -> None:
        self.disk.flush()
