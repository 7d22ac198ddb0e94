"""The event store: the JetStream stream `HT_<cluster>_EVENTS` every emitter's outbox relays into.

Room: libs/runtime. Each message is one outbox record: a msgpack array of envelopes (`protocol.envelope`) from
one emitter incarnation, published on `ht.<cluster>.events.<service>.<id>` with `Nats-Msg-Id` =
`<service>.<id>.<incarnation>.<first sequence>`, so a batch relayed twice (after a crash, or when an ack was
lost to a NATS outage) is stored once as long as the second copy comes within the duplicate window.

The stream keeps events for `events.retention.ms` (7 days by default): the archiver moves them to the Parquet
lake long before that, and `hightide events tail` reads what is still here.
"""

from __future__ import annotations

from typing import Final

from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError

from hightide.protocol.subjects import events_stream, events_subjects

DEFAULT_RETENTION_MS: Final = 7 * 24 * 3600 * 1000
# How long the stream remembers a message id. A relay that lost an ack republishes within seconds of NATS
# coming back; five minutes covers an outage that long with the copy still dropped.
DUPLICATE_WINDOW_S: Final = 300.0


def events_stream_config(
    cluster_id: str, *, replicas: int = 1, retention_ms: int = DEFAULT_RETENTION_MS
) -> api.StreamConfig:
    return api.StreamConfig(
        name=events_stream(cluster_id),
        subjects=[events_subjects(cluster_id)],
        storage=api.StorageType.FILE,
        num_replicas=replicas,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        max_msgs=-1,
        max_bytes=-1,
        max_age=retention_ms / 1000,
        duplicate_window=DUPLICATE_WINDOW_S,
    )


async def ensure_events_stream(
    js: JetStreamContext, cluster_id: str, *, replicas: int = 1, retention_ms: int = DEFAULT_RETENTION_MS
) -> None:
    """Create the stream if it does not exist (an existing one is left as it is configured)."""
    name = events_stream(cluster_id)
    try:
        await js.stream_info(name)
    except NotFoundError:
        try:
            await js.add_stream(events_stream_config(cluster_id, replicas=replicas, retention_ms=retention_ms))
        except APIError:
            await js.stream_info(name)  # created by another process meanwhile
