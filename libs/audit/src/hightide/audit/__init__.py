"""hightide.audit: the history's rules as pure functions over events. Never does I/O.

`rebuild(envelopes)` folds a history into the replication state it leaves (`hightide.audit.rebuild`);
`hightide.audit.epochs` holds Kafka's leader epoch cache rules as values.
"""

from hightide.audit.rebuild import Anomaly, ClusterState, PartitionState, ReplicaState, rebuild

__all__ = ["Anomaly", "ClusterState", "PartitionState", "ReplicaState", "rebuild"]
