"""A replica on a real disk: its events rebuild exactly what the stopped broker's files say, across segment rolls,
retention, a divergence truncation, a clean restart, and a crash that tears the log's tail.

Method: the broker's replica layer is driven the way the broker service drives it: the real ReplicaManager over
`hightide.broker.storage.DiskStorage` (the log directory), its effects carried out by `carry_out`, the metadata
written as records by hand. Every event is kept in its envelope (a new incarnation per "process"), the broker is
stopped cleanly, and `rebuild(history)` is compared with `tests/support/disk_state.read_disk_state` of the
directory.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hightide.audit.rebuild import ReplicaState, rebuild
from hightide.broker.storage import DiskStorage
from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.effects import AnswerProduce, Effect, Emit, SendFetch
from hightide.core.metadata_image import MetadataImage, TopicPartition
from hightide.core.replica_manager import ReplicaManager, ReplicaManagerConfig, carry_out
from hightide.protocol import events, wire
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event
from hightide.protocol.metadata import (
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from hightide.protocol.records import encode_batch
from hightide.storage.config import LogConfig
from support.disk_state import DiskStateError, read_disk_state

BROKER = 1
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's topic id text: 16 bytes in URL-safe base64
# Small segments, so appends roll them; retention by bytes, so it deletes some.
LOG_CONFIG = LogConfig(segment_bytes=600, retention_bytes=1_500, index_interval_bytes=64)


class Broker:
    """The broker service's replica layer in miniature: open the log dir and announce every log, register, follow
    the metadata, produce, run retention, stop cleanly or be killed, with every event kept in an envelope."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.history: list[Envelope] = []
        self.incarnations = itertools.count()
        self.mono_ms, self.wall_ms = 1_000, 1_700_000_000_000
        self.request_ids = itertools.count(1)
        self.image = MetadataImage()
        self.manager: ReplicaManager | None = None
        self.fetches: list[SendFetch] = []
        self.metadata(
            RegisterBrokerRecord(
                broker_id=1, broker_epoch=0, incarnation_id="b1", previous_broker_epoch=-1, fenced=False
            ),
            RegisterBrokerRecord(
                broker_id=2, broker_epoch=1, incarnation_id="b2", previous_broker_epoch=-1, fenced=False
            ),
            TopicRecord(name="orders", topic_id=TOPIC_ID),
            PartitionRecord(topic_id=TOPIC_ID, partition=0, replicas=(1, 2), isr=(1,), leader=1),
        )

    def now(self) -> Now:
        self.mono_ms += 10
        self.wall_ms += 10
        return Now(MonoMs(self.mono_ms), WallMs(self.wall_ms))

    def start(self) -> ReplicaManager:
        self.emitter = Emitter("broker", BROKER, f"broker-{BROKER}-{next(self.incarnations)}")
        self.sequence = itertools.count()
        self.storage = DiskStorage(BROKER, self.data_dir, LOG_CONFIG)
        config = ReplicaManagerConfig(broker_id=BROKER, log_retention_check_interval_ms=10**9)
        manager = self.manager = ReplicaManager(config, self.storage)
        now = self.now()
        reason, states = self.storage.open(now.wall_ms)
        for state in states:
            self.carry(manager.open_log(state, reason, now))
        self.carry(manager.on_metadata(self.image, now))
        self.carry(manager.on_registered(0, now))
        return manager

    def metadata(self, *records: MetadataRecord) -> None:
        self.image = self.image.apply_all(records)
        if self.manager is not None:
            self.carry(self.manager.on_metadata(self.image, self.now()))

    def carry(self, effects: list[Effect]) -> None:
        assert self.manager is not None
        now = Now(MonoMs(self.mono_ms), WallMs(self.wall_ms))
        carry_out(
            self.manager,
            effects,
            now,
            storage=lambda effect: self.storage.apply(effect, now.wall_ms),
            deliver=self._deliver,
        )

    def _deliver(self, effect: Effect) -> None:
        if isinstance(effect, Emit):
            envelope = Envelope("test", self.emitter, next(self.sequence), self.wall_ms, self.mono_ms, effect.event)
            self.history.append(envelope)
        elif isinstance(effect, AnswerProduce):
            assert all(p.error == 0 for p in effect.response.partitions), effect
        elif isinstance(effect, SendFetch):
            self.fetches.append(effect)

    def produce(self, batches: int, records_per_batch: int = 3) -> None:
        assert self.manager is not None
        for _ in range(batches):
            records = encode_batch([b"v" * 40] * records_per_batch, timestamps=self.wall_ms)
            data = wire.ProducePartitionData(topic="orders", partition=0, records=records)
            request = wire.ProduceRequest(acks=1, timeout_ms=1, partitions=(data,))
            self.carry(self.manager.on_produce(next(self.request_ids), request, self.now()))

    def run_retention(self) -> None:
        """The manager's first tick runs retention (its interval is long: no other tick does)."""
        assert self.manager is not None
        self.carry(self.manager.tick(self.now()))

    def stop_cleanly(self) -> None:
        self.storage.close(broker_epoch=7, clean=True)
        self.manager = None

    def kill(self) -> None:
        """kill -9: nothing flushed or checkpointed after the last periodic checkpoint."""
        assert self.storage.logs is not None
        self.storage.logs.abandon()
        self.manager = None


def _registered(broker_id: int, broker_epoch: int) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        incarnation_id=f"b{broker_id}",
        previous_broker_epoch=-1,
        fenced=False,
    )


def _events(history: list[Envelope], kind: type[Event]) -> list[Event]:
    return [e.event for e in history if isinstance(e.event, kind)]


def test_rolls_retention_and_a_divergence_truncation_rebuild_what_the_disk_holds(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    manager = broker.start()
    broker.produce(12)
    broker.metadata(PartitionChangeRecord(topic_id=TOPIC_ID, partition=0, leader=1))  # leader epoch 1, still 1
    broker.produce(6)
    broker.run_retention()
    # Then broker 2 leads epoch 2 and its log diverged from ours at offset 45 (inside epoch 1).
    broker.metadata(PartitionChangeRecord(topic_id=TOPIC_ID, partition=0, leader=2, isr=(2,)))
    (fetch,) = broker.fetches
    diverging = wire.FetchPartitionResponse(
        topic="orders", partition=0, error=0, high_watermark=45, diverging_epoch=1, diverging_end_offset=45
    )
    broker.carry(
        manager.on_fetch_response(2, fetch.fetch_id, wire.FetchResponse(partitions=(diverging,)), broker.now())
    )
    broker.stop_cleanly()

    history = broker.history
    assert len(_events(history, events.SegmentRolled)) >= 4
    deleted = _events(history, events.SegmentDeleted)
    assert {e.reason for e in deleted} == {"retention_bytes", "truncation"}  # type: ignore[attr-defined]
    (advanced,) = _events(history, events.LogStartOffsetAdvanced)
    assert advanced.log_start_offset > 0  # type: ignore[attr-defined]
    (truncated,) = _events(history, events.LogTruncated)
    assert truncated.truncated_to == 45  # type: ignore[attr-defined]
    rebuilt = rebuild(history)
    assert rebuilt.anomalies == ()
    disk = read_disk_state(tmp_path, BROKER)
    assert rebuilt.replicas == disk
    state = disk[("orders", 0, BROKER)]
    assert state.log_end_offset == 45 and state.log_start_offset == advanced.log_start_offset  # type: ignore[attr-defined]
    assert state.epoch_entries == ((0, advanced.log_start_offset), (1, 36))  # type: ignore[attr-defined]


def test_a_restart_after_kill_9_is_announced_with_what_recovery_and_the_checkpoints_left(tmp_path: Path) -> None:
    """Given a leader whose HW was checkpointed at 15 and whose log then grew to 30, when it is killed with its
    last batch torn and started again, then LogOpened says recovered with the cut LEO and the checkpointed HW, and
    the whole history (three incarnations) still rebuilds what the disk holds after a clean stop."""
    broker = Broker(tmp_path)
    broker.start()
    broker.produce(5)
    broker.stop_cleanly()

    manager = broker.start()
    broker.metadata(PartitionChangeRecord(topic_id=TOPIC_ID, partition=0, leader=1))  # leader epoch 1
    broker.produce(5)
    core = manager.replica(TopicPartition("orders", 0))
    assert core is not None and core.high_watermark == 30
    broker.kill()
    active = max(p for p in (tmp_path / "orders-0").glob("*.log"))
    with open(active, "r+b") as f:  # the last batch was only partly written when the process died
        f.truncate(active.stat().st_size - 10)
    with pytest.raises(DiskStateError):
        read_disk_state(tmp_path, BROKER)

    broker.start()
    opened = _events(broker.history, events.LogOpened)
    assert [e.reason for e in opened] == ["created", "clean_shutdown", "recovered"]  # type: ignore[attr-defined]
    assert opened[-1] == events.LogOpened(
        topic="orders",
        partition=0,
        replica=BROKER,
        log_start_offset=0,
        log_end_offset=27,
        high_watermark=15,
        leader_epochs=((0, 0), (1, 15)),
        reason="recovered",
    )
    broker.metadata(PartitionChangeRecord(topic_id=TOPIC_ID, partition=0, leader=1))  # leader epoch 2
    broker.produce(1)
    broker.stop_cleanly()

    rebuilt = rebuild(broker.history)
    assert rebuilt.anomalies == ()
    assert rebuilt.replicas == read_disk_state(tmp_path, BROKER)
    assert rebuilt.replicas[("orders", 0, BROKER)] == ReplicaState(30, 30, 0, ((0, 0), (1, 15), (2, 27)))


def test_a_running_brokers_directory_is_refused(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    broker.start()
    with pytest.raises(DiskStateError, match="did not stop cleanly"):
        read_disk_state(tmp_path, BROKER)
    broker.stop_cleanly()
    assert read_disk_state(tmp_path, BROKER) == {("orders", 0, BROKER): ReplicaState(0, 0, 0, ((0, 0),))}
