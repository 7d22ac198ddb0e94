"""hightide.audit: the history's rules as pure functions over events. Never does I/O.

`rebuild(envelopes)` folds a history into the replication state it leaves (`hightide.audit.rebuild`);
`hightide.audit.epochs` holds Kafka's leader epoch cache rules as values. `audit(envelopes)` runs every invariant
check (`hightide.audit.checks.registry`) and returns the sorted findings (`hightide.audit.findings.Finding`).
"""

from hightide.audit.auditor import audit
from hightide.audit.rebuild import Anomaly, ClusterState, PartitionState, ReplicaState, rebuild

__all__ = ["Anomaly", "ClusterState", "PartitionState", "ReplicaState", "audit", "rebuild"]
