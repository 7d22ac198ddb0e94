"""How many replicas Hightide's JetStream streams get: the configured count, at most the NATS cluster's size.

Room: libs/runtime (issue 14, clustered NATS). The metadata log, the controller's lease bucket and the event store
are Hightide's state; on a NATS cluster each is replicated `metadata.log.replicas` / `events.stream.replicas`
times (default 3, as Kafka's `offsets.topic.replication.factor` and KRaft's quorum are), so the loss of one NATS
node loses nothing acknowledged. The count is clamped to the cluster's size so that the same configuration runs on
one node (which refuses R>1: JetStream error 10074) and on three.

What the server tells a client about the cluster is its connect INFO: a standalone server has no `cluster` field;
a clustered one names the cluster and gossips `connect_urls`, the client URLs of every server routed to it (itself
included). JetStream's own account API (`$JS.API.INFO`) reports nothing about the cluster's size, and its meta
group's size (`/jsz`) is only for the system account. A stream is created with the nodes reachable then: `hightide
cluster up` waits until every node is routed before any service starts; elsewhere, start the services once NATS
is whole (compose and Kubernetes wait for every NATS node to be healthy). An existing stream keeps its replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

DEFAULT_STREAM_REPLICAS: Final = 3
MAX_STREAM_REPLICAS: Final = 5  # JetStream's own limit


def clamp_replicas(requested: int, server_info: Mapping[str, Any]) -> int:
    """`requested`, at most the size of the NATS cluster the connect INFO `server_info` describes: 1 on a
    standalone server; the number of servers it lists in `connect_urls` on a cluster (`requested` when it lists
    none, as a cluster with `no_advertise` does: JetStream then refuses a count it cannot place)."""
    if not 1 <= requested <= MAX_STREAM_REPLICAS:
        raise ValueError(f"stream replicas must be 1 to {MAX_STREAM_REPLICAS}, not {requested}")
    if not server_info.get("cluster"):
        return 1
    size = len(set(server_info.get("connect_urls") or ()))
    return min(requested, size) if size else requested


def cluster_replicas(connection: Any, requested: int) -> int:
    """`clamp_replicas` for a connected nats-py client (or a JetStream context of one). nats-py keeps the latest
    INFO in `_server_info` and offers no public accessor; a missing one counts as standalone."""
    client = getattr(connection, "_nc", connection)
    info = getattr(client, "_server_info", None)
    return clamp_replicas(requested, info if isinstance(info, Mapping) else {})
