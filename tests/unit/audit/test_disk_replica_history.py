"""A replica on a real disk: its events rebuild exactly what the stopped broker's files say, across segment rolls,
retention, a divergence truncation, a clean restart, and a crash that tears the log's tail.

Method: the broker's replica layer (`hightide.broker.replica.DiskReplica` over `hightide.storage`) is driven the
way the broker service drives it: open the log dir, open each replica and announce it (LogOpened), then effects of
the real core. Every event is kept in its envelope (a new incarnation per "process"), the broker is stopped
cleanly, and `rebuild(history)` is compared with `tests/support/disk_state.read_disk_state` of the directory.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hightide.audit.rebuild import ReplicaState, rebuild
from hightide.broker.replica import DiskReplica
from hightide.core.clock import WallMs
from hightide.core.partition import PartitionConfig
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import Event
from hightide.protocol.messages import FetchResponsePartition
from hightide.protocol.records import encode_batch
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.manager import LogManager
from support.disk_state import DiskStateError, read_disk_state

BROKER = 1
TP = TopicPartition("orders", 0)
# Small segments, so appends roll them; retention by bytes, so it deletes some.
LOG_CONFIG = LogConfig(segment_bytes=600, retention_bytes=1_500, index_interval_bytes=64)


class Broker:
    """The broker service's replica layer in miniature: `_open_logs`, `_create_replica`, `_run_retention` and a
    clean or killed stop, with every event kept in an envelope."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.history: list[Envelope] = []
        self.incarnations = itertools.count()
        self.now_ms = 1_000
        self.request_ids = itertools.count(1)

    def start(self) -> DiskReplica:
        self.emitter = Emitter("broker", BROKER, f"broker-{BROKER}-{next(self.incarnations)}")
        self.sequence = itertools.count()
        self.logs = LogManager.open(self.data_dir, LOG_CONFIG, WallMs(self.now_ms))
        reason = "recovered" if self.logs.previous_clean_shutdown is None else "clean_shutdown"
        log = self.logs.get_log(TP)
        if log is None:
            log, reason = self.logs.get_or_create_log(TP, WallMs(self.now_ms)), "created"
        hw = self.logs.read_high_watermarks().get(TP, 0)
        self.replica = DiskReplica.open(log, BROKER, PartitionConfig(), hw)
        self.apply(self.replica.core.log_opened(reason))
        return self.replica

    def apply(self, effects: list[object]) -> None:
        self.now_ms += 10
        self.record(self.replica.apply(effects, self.now_ms).events)  # type: ignore[arg-type]

    def record(self, emitted: list[Event]) -> None:
        for event in emitted:
            self.history.append(Envelope("test", self.emitter, next(self.sequence), self.now_ms, self.now_ms, event))

    def produce(self, batches: int, records_per_batch: int = 3) -> None:
        for _ in range(batches):
            records = encode_batch([b"v" * 40] * records_per_batch, timestamps=self.now_ms)
            core = self.replica.core
            self.apply(core.append_as_leader(next(self.request_ids), records, records_per_batch, 1, self.now_ms, 1))

    def run_retention(self) -> None:
        self.now_ms += 10
        self.record(self.replica.run_retention(self.now_ms).events)

    def stop_cleanly(self) -> None:
        self.logs.checkpoint_high_watermarks()
        self.logs.shutdown(broker_epoch=7)

    def kill(self) -> None:
        """kill -9: nothing flushed or checkpointed after the last periodic checkpoint."""
        self.logs.abandon()


def _events(history: list[Envelope], kind: type[Event]) -> list[Event]:
    return [e.event for e in history if isinstance(e.event, kind)]


def test_rolls_retention_and_a_divergence_truncation_rebuild_what_the_disk_holds(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    replica = broker.start()
    broker.apply(replica.core.make_leader(0, 0, (BROKER,), (BROKER,), broker.now_ms))
    broker.produce(12)
    broker.apply(replica.core.make_leader(1, 1, (BROKER,), (BROKER,), broker.now_ms))
    broker.produce(6)
    broker.run_retention()
    # Then another broker leads epoch 2 and its log diverged from ours at offset 45 (inside epoch 1).
    broker.apply(replica.core.make_follower(2, 2, 2, (BROKER, 2), (2,)))
    diverging = FetchResponsePartition(
        "orders", 0, ErrorCode.NONE, high_watermark=45, diverging_epoch=1, diverging_end_offset=45
    )
    broker.apply(replica.core.on_fetch_response(2, diverging, broker.now_ms))
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
    replica = broker.start()
    broker.apply(replica.core.make_leader(0, 0, (BROKER,), (BROKER,), broker.now_ms))
    broker.produce(5)
    broker.stop_cleanly()

    replica = broker.start()
    broker.apply(replica.core.make_leader(1, 1, (BROKER,), (BROKER,), broker.now_ms))
    broker.produce(5)
    assert replica.core.high_watermark == 30
    broker.kill()
    active = max(p for p in (tmp_path / "orders-0").glob("*.log"))
    with open(active, "r+b") as f:  # the last batch was only partly written when the process died
        f.truncate(active.stat().st_size - 10)
    with pytest.raises(DiskStateError):
        read_disk_state(tmp_path, BROKER)

    replica = broker.start()
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
    broker.apply(replica.core.make_leader(2, 2, (BROKER,), (BROKER,), broker.now_ms))
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
    assert read_disk_state(tmp_path, BROKER) == {("orders", 0, BROKER): ReplicaState(0, 0, 0, ())}
