"""The broker's ISR metrics (Kafka's IsrShrinksPerSec and IsrExpandsPerSec) count committed changes: the counters
were registered but never incremented before issue 11.

Method: a leader core proposes a shrink and an expansion, the controller's answer (or the metadata) commits each,
and the broker's counting of the emitted IsrChangeCompleted events moves the real Prometheus counters.
"""

from __future__ import annotations

from hightide.broker.service import count_isr_change
from hightide.protocol.errors import ErrorCode
from hightide.protocol.events import IsrChangeCompleted
from hightide.protocol.wire import AlterPartitionResponse
from hightide.runtime.metrics import BrokerMetrics
from support.memory_replica import MemoryReplica, produce, replicate

T0 = 1_700_000_000_000
LAG_MS = 1_000


def counted(metrics: BrokerMetrics) -> tuple[float, float]:
    registry = metrics.registry
    shrinks = registry.get_sample_value("kafka_server_replicamanager_isrshrinks_total")
    expands = registry.get_sample_value("kafka_server_replicamanager_isrexpands_total")
    return shrinks or 0.0, expands or 0.0


def completed(node: MemoryReplica) -> list[IsrChangeCompleted]:
    return [e for e in node.events if isinstance(e, IsrChangeCompleted)]


def test_a_committed_shrink_and_expansion_are_counted_and_a_refused_one_is_not() -> None:
    metrics = BrokerMetrics()
    leader, follower = MemoryReplica.create(1), MemoryReplica.create(2)
    for node in (leader, follower):
        node.partition.config = type(node.partition.config)(min_insync_replicas=1, replica_lag_time_max_ms=LAG_MS)
        node.partition.broker_epochs = {1: 101, 2: 102}
    leader.apply(leader.partition.make_leader(0, 0, (1, 2), (1, 2), T0))
    follower.apply(follower.partition.make_follower(1, 0, 0, (1, 2), (1, 2)))
    produce(leader, [b"a"], T0, acks=1)
    leader.apply(leader.partition.maybe_shrink_isr(T0 + LAG_MS + 1))  # the follower never fetched: shrink
    shrink = leader.sent[-1].message
    answer = AlterPartitionResponse(
        topic="orders", partition=0, error=0, leader=1, leader_epoch=0, isr=(1,), partition_epoch=1
    )
    leader.apply(leader.partition.on_alter_partition_response(shrink, answer, T0 + LAG_MS + 2))
    replicate(leader, follower, T0 + LAG_MS + 3)
    replicate(leader, follower, T0 + LAG_MS + 4)  # caught up: the leader proposes it back
    expand = leader.sent[-1].message
    assert expand.new_isr == (1, 2)
    refused = AlterPartitionResponse(topic="orders", partition=0, error=int(ErrorCode.INELIGIBLE_REPLICA))
    leader.apply(leader.partition.on_alter_partition_response(expand, refused, T0 + LAG_MS + 5))
    replicate(leader, follower, T0 + LAG_MS + 6)
    again = leader.sent[-1].message
    leader.apply(leader.partition.make_leader(0, 2, (1, 2), (1, 2), T0 + LAG_MS + 7))  # the metadata commits it
    assert again.new_isr == (1, 2)
    changes = [(e.change, e.error) for e in completed(leader)]
    assert changes == [("shrink", "NONE"), ("expand", "INELIGIBLE_REPLICA"), ("expand", "NONE")]
    for event in completed(leader):
        count_isr_change(metrics, event)
    assert counted(metrics) == (1.0, 1.0)
