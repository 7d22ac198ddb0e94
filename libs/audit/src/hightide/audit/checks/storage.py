"""What a broker does once its storage refuses a change: the replica goes offline before it serves anything more
(`storage_refusal_takes_replica_offline`).

Room: libs/audit (pure). The PySpark twin is `hightide.history.checks.storage`. A broker reports each refusal as
StorageRefused the moment it happens (`hightide.core.replica_manager.carry_out`), before the replica manager
decides what follows; Kafka's answer to a failed log directory is to take its replicas offline (LogDirFailureChannel,
ReplicaManager.handleLogDirFailure), which Hightide reports as ReplicaOffline. A broker that swallowed the refusal
and went on leading or following the replica would serve records its disk does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final

from hightide.audit.findings import Finding, finding
from hightide.audit.history import History
from hightide.protocol import events

NAME: Final = "storage_refusal_takes_replica_offline"
# The events of a replica that is still in service: its log moved, it led, followed, served a fetch or acknowledged
# a produce (a FetchServed or ProduceCompleted with error NONE: a failed answer is how going offline answers).
SERVING: Final = (
    events.RecordsAppended,
    events.LogTruncated,
    events.HighWatermarkAdvanced,
    events.LeaderEpochStarted,
    events.LogStartOffsetAdvanced,
    events.SegmentRolled,
    events.LogCompacted,
    events.BecameLeader,
    events.BecameFollower,
    events.FetchServed,
    events.FollowerStateUpdated,
    events.IsrChangeProposed,
    events.ProduceCompleted,
)
SERVING_TYPES: Final = frozenset(event_class.TYPE for event_class in SERVING)


def serving(event: events.Event) -> bool:
    """Whether the event shows its replica still in service (see SERVING)."""
    return isinstance(event, SERVING) and getattr(event, "error", "NONE") == "NONE"


def storage_refusal_takes_replica_offline(history: History) -> Iterator[Finding]:
    """After a broker incarnation's StorageRefused for a replica, its ReplicaOffline comes before the next event of
    that incarnation that shows the replica in service (SERVING). One finding per refusal broken, naming the
    refusal and the first event that served past it.

    Source: Kafka's ReplicaManager.handleLogDirFailure (a log directory that failed an I/O takes its replicas
    offline: no more appends, fetches or leadership from it until the broker restarts); issue 11's silent hole,
    the `ignore_storage_refusals` core mutant."""
    for stream in history.streams.values():
        open_refusals: dict[tuple[str, str, int], list[tuple[str, events.StorageRefused]]] = {}
        for envelope in stream:
            event = envelope.event
            topic, partition = getattr(event, "topic", None), getattr(event, "partition", None)
            if topic is None or partition is None:
                continue
            key = (envelope.emitter.incarnation, topic, partition)
            if isinstance(event, events.StorageRefused):
                open_refusals.setdefault(key, []).append((History.id(envelope), event))
            elif isinstance(event, events.ReplicaOffline):
                open_refusals.pop(key, None)
            elif serving(event):
                for refusal_id, refusal in open_refusals.pop(key, []):
                    yield finding(
                        NAME,
                        topic=topic,
                        partition=partition,
                        replica=refusal.replica,
                        events=[refusal_id, History.id(envelope)],
                        detail=f"broker {refusal.replica}'s storage refused {refusal.operation} ({refusal.error}); "
                        f"the replica stayed in service: {event.TYPE}",
                    )


CHECKS: Final[dict[str, Callable[[History], Iterable[Finding]]]] = {NAME: storage_refusal_takes_replica_offline}
