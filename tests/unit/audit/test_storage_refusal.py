"""`storage_refusal_takes_replica_offline`: a broker whose storage refuses an append reports it (StorageRefused)
and takes the replica offline before serving it again; one that swallows the refusal is found.

Method: the broker's replica layer as the service drives it (`unit.audit.test_disk_replica_history.Broker`: the real
ReplicaManager over `DiskStorage`, effects carried out by the core's `carry_out`), with a disk that refuses one
append. Once with the real ReplicaManager, once with the `ignore_storage_refusals` core mutant of the simulator
(`simulation.mutants.IgnoreStorageRefusals`, which drops what the refusal should lead to). The simulator catches
that mutant the moment its disk and its core disagree, so its own histories end before the mutant serves again;
here the broker goes on producing, as a real one would.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hightide.audit.checks import storage
from hightide.audit.checks.storage import NAME, storage_refusal_takes_replica_offline
from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.effects import AnswerProduce, AppendAsLeader, Effect, StorageEffect
from hightide.core.replica_manager import ReplicaManager, StorageRefusal, carry_out
from hightide.protocol import events, wire
from hightide.protocol.envelope import Emitter, Envelope
from simulation.mutants import IgnoreStorageRefusals
from unit.audit import test_disk_replica_history as disk


class RefusingBroker(disk.Broker):
    """The miniature broker with a disk that refuses the next leader append once told to, and that keeps every
    produce answer's error instead of requiring success."""

    def __init__(self, data_dir: Path) -> None:
        self.refuse_next_append = False
        self.produce_errors: list[int] = []
        super().__init__(data_dir)

    def carry(self, effects: list[Effect]) -> None:
        assert self.manager is not None
        now = Now(MonoMs(self.mono_ms), WallMs(self.wall_ms))
        carry_out(self.manager, effects, now, storage=lambda effect: self._store(effect, now), deliver=self._deliver)

    def _store(self, effect: StorageEffect | object, now: Now) -> object:
        if self.refuse_next_append and isinstance(effect, AppendAsLeader):
            self.refuse_next_append = False
            raise StorageRefusal("No space left on device (the test's disk)")
        return self.storage.apply(effect, now.wall_ms)  # type: ignore[arg-type]

    def _deliver(self, effect: Effect) -> None:
        if isinstance(effect, AnswerProduce):
            self.produce_errors += [p.error for p in effect.response.partitions]
        else:
            super()._deliver(effect)


def refusal_history(
    tmp_path: Path, manager_class: type[ReplicaManager], monkeypatch: pytest.MonkeyPatch
) -> RefusingBroker:
    """Two batches produced, the third refused by the disk, then follower 2 fetches from the start. (A broker that
    swallowed the refusal cannot append again here: the log on disk ends before where its core says, and DiskStorage
    refuses to carry that out, so it is the fetch that shows it still serving.)"""
    monkeypatch.setattr(disk, "ReplicaManager", manager_class)
    broker = RefusingBroker(tmp_path)
    manager = broker.start()
    broker.produce(2)
    broker.refuse_next_append = True
    broker.produce(1)
    fetch = wire.FetchRequest(
        replica_id=2,
        broker_epoch=1,
        max_wait_ms=0,
        partitions=(wire.FetchPartitionRequest(topic="orders", partition=0, fetch_offset=0, current_leader_epoch=0),),
    )
    broker.carry(manager.on_fetch(next(broker.request_ids), fetch, broker.now()))
    return broker


def ids(history: list[Envelope], event_class: type[events.Event]) -> list[str]:
    return [History.id(e) for e in history if isinstance(e.event, event_class)]


def test_the_real_broker_reports_the_refusal_and_takes_the_replica_offline_before_serving_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the real ReplicaManager, when the disk refuses the third append, then a StorageRefused names the
    append, the ReplicaOffline follows it, the refused produce fails, the follower's fetch is not served, and the
    check finds nothing."""
    broker = refusal_history(tmp_path, ReplicaManager, monkeypatch)
    history = broker.history

    (refused,) = [e.event for e in history if isinstance(e.event, events.StorageRefused)]
    assert (refused.topic, refused.partition, refused.replica, refused.operation, refused.error) == (
        "orders", 0, 1, "AppendAsLeader", "KAFKA_STORAGE_ERROR",
    )  # fmt: skip
    refused_at = [type(e.event) for e in history].index(events.StorageRefused)
    after = [(e.event.TYPE, getattr(e.event, "error", "")) for e in history[refused_at:]]
    # The refused produce is answered as failed, the replica goes offline, and the fetch after it serves nothing.
    assert after == [
        ("StorageRefused", "KAFKA_STORAGE_ERROR"),
        ("ProduceCompleted", "KAFKA_STORAGE_ERROR"),
        ("ReplicaOffline", "KAFKA_STORAGE_ERROR"),
    ]
    assert broker.produce_errors[:2] == [0, 0]
    assert broker.produce_errors[2] != 0
    assert list(storage_refusal_takes_replica_offline(History.of(history))) == []


def test_a_broker_that_swallows_the_refusal_is_found_serving_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the ignore_storage_refusals mutant, when the disk refuses the third append and the follower fetches,
    then the replica never goes offline, the fetch is served, and the check names the refusal and the first event
    that served past it."""
    broker = refusal_history(tmp_path, IgnoreStorageRefusals, monkeypatch)
    history = broker.history
    assert ids(history, events.ReplicaOffline) == []
    (refusal_id,) = ids(history, events.StorageRefused)
    refusal_at = [History.id(e) for e in history].index(refusal_id)
    served = next(e for e in history[refusal_at + 1 :] if isinstance(e.event, storage.SERVING))

    assert list(storage_refusal_takes_replica_offline(History.of(history))) == [
        finding(
            NAME,
            topic="orders",
            partition=0,
            replica=1,
            events=[refusal_id, History.id(served)],
            detail="broker 1's storage refused AppendAsLeader (KAFKA_STORAGE_ERROR); the replica stayed in service: "
            f"{served.event.TYPE}",
        )
    ]


EMITTER = Emitter("broker", 1, "b-1")


def _envelopes(*happened: events.Event, emitter: Emitter = EMITTER) -> list[Envelope]:
    return [Envelope("test", emitter, i, 1_000 + i, i, event) for i, event in enumerate(happened)]


def _refused() -> events.StorageRefused:
    return events.StorageRefused(
        topic="t", partition=0, replica=1, operation="AppendAsFollower", error="KAFKA_STORAGE_ERROR", detail="full"
    )


def _completed(error: str) -> events.ProduceCompleted:
    return events.ProduceCompleted(
        topic="t", partition=0, leader=1, leader_epoch=0, acks=-1, base_offset=0, last_offset=0, high_watermark=0,
        error=error,
    )  # fmt: skip


def _hw(previous: int, to: int) -> events.HighWatermarkAdvanced:
    return events.HighWatermarkAdvanced(
        topic="t", partition=0, replica=1, leader_epoch=0, previous=previous, high_watermark=to
    )


def hand_written() -> dict[str, tuple[list[Envelope], int]]:
    """Histories by name, each with the findings it must give: a failed produce answer is not service; two
    refusals before one serving event are two findings; a refusal in one incarnation says nothing of the next."""
    restarted = dataclasses.replace(EMITTER, incarnation="b-2")
    return {
        "offline-first": (_envelopes(_refused(), _completed("KAFKA_STORAGE_ERROR"), _offline(), _hw(0, 1)), 0),
        "served-past": (_envelopes(_refused(), _completed("KAFKA_STORAGE_ERROR"), _completed("NONE")), 1),
        "twice": (_envelopes(_refused(), _refused(), _hw(0, 1), _hw(1, 2)), 2),
        "restarted": (_envelopes(_refused()) + _envelopes(_hw(0, 1), emitter=restarted), 0),
    }


def _offline() -> events.ReplicaOffline:
    return events.ReplicaOffline(
        topic="t", partition=0, replica=1, log_end_offset=0, error="KAFKA_STORAGE_ERROR", detail="full"
    )


@pytest.mark.parametrize("name", ["offline-first", "served-past", "twice", "restarted"])
def test_hand_written_histories(name: str) -> None:
    history, expected = hand_written()[name]
    found: list[Finding] = list(storage_refusal_takes_replica_offline(History.of(history)))
    assert len(found) == expected
