"""The metadata log on JetStream (KRaft's `__cluster_metadata`), and the controller lease in a NATS KV bucket.

Room: libs/runtime. Both services use it: the controller appends and replays, brokers follow.

- One JetStream message per controller decision (`MetadataBatch`), so a decision's records commit together.
- The active controller appends with `Nats-Expected-Last-Sequence`: the stream accepts the message only if the
  log still ends where the controller believes it does. A deposed controller (paused, partitioned, slow) that
  still thinks it leads therefore cannot write: its append fails with `NotActiveController`.
- The lease is the key `leader` of the bucket `HT_<cluster>_CONTROLLER`, created atomically (`create` fails when
  it exists) with a per-key TTL and renewed by a compare-and-set on its revision, like ZooKeeper's ephemeral
  `/controller` node. The key `epoch` (no TTL) holds the last controller epoch; a new holder bumps it by CAS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from hightide.protocol.metadata import MetadataBatch, decode_metadata_batch, encode_metadata_batch
from hightide.protocol.subjects import EPOCH_KEY, LEASE_KEY, controller_bucket, metadata_stream, metadata_subject
from hightide.runtime.stream_replicas import DEFAULT_STREAM_REPLICAS, cluster_replicas

WRONG_LAST_SEQUENCE: Final = 10071
STREAM_READ_TIMEOUT_S: Final = 5.0


class NotActiveController(Exception):
    """The metadata log moved on without us, or the lease is gone: this controller must stop deciding."""


@dataclass(frozen=True, slots=True)
class Lease:
    controller_id: int
    controller_epoch: int
    revision: int


class MetadataLog:
    def __init__(self, nc: Client, cluster_id: str, *, replicas: int = DEFAULT_STREAM_REPLICAS) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=STREAM_READ_TIMEOUT_S)
        self.cluster_id = cluster_id
        self.stream = metadata_stream(cluster_id)
        self.subject = metadata_subject(cluster_id)
        self.replicas = replicas

    async def ensure_stream(self) -> None:
        """Create the stream if it does not exist. It keeps every message: the log is the cluster's history. It is
        replicated `replicas` times, at most the NATS cluster's size (`stream_replicas`)."""
        try:
            await self.js.stream_info(self.stream)
        except NotFoundError:
            config = api.StreamConfig(
                name=self.stream,
                subjects=[self.subject],
                storage=api.StorageType.FILE,
                num_replicas=cluster_replicas(self.nc, self.replicas),
                retention=api.RetentionPolicy.LIMITS,
                discard=api.DiscardPolicy.NEW,
                max_msgs=-1,
                max_bytes=-1,
                max_age=0,
            )
            try:
                await self.js.add_stream(config)
            except APIError:
                await self.js.stream_info(self.stream)  # created by another process meanwhile

    async def stream_exists(self) -> bool:
        """Whether the stream is there. A broker waits on this rather than create the stream: only the controller
        role may (NATS permissions, `hightide.protocol.permissions`)."""
        try:
            await self.js.stream_info(self.stream)
        except NotFoundError:
            return False
        return True

    async def last_sequence(self) -> int:
        info = await self.js.stream_info(self.stream)
        return int(info.state.last_seq)

    async def append(self, batch: MetadataBatch, expected_last_sequence: int) -> int:
        """Append one decision; its stream sequence, or NotActiveController if the log moved on."""
        headers = {"Nats-Expected-Last-Sequence": str(expected_last_sequence)}
        try:
            ack = await self.js.publish(self.subject, encode_metadata_batch(batch), headers=headers)
        except APIError as error:
            if error.err_code == WRONG_LAST_SEQUENCE:
                raise NotActiveController(f"the metadata log is past sequence {expected_last_sequence}") from None
            raise
        return int(ack.seq)

    async def read(self, after: int, until: int | None = None) -> AsyncIterator[tuple[int, MetadataBatch]]:
        """Every message after sequence `after`: up to `until` (then stop), or forever (follow)."""
        if until is not None and until <= after:
            return
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue(maxsize=4096)

        async def on_message(msg: api.Msg) -> None:  # type: ignore[name-defined]
            await queue.put((int(msg.metadata.sequence.stream), msg.data))

        subscription = await self.js.subscribe(
            self.subject,
            cb=on_message,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            config=api.ConsumerConfig(opt_start_seq=after + 1),
        )
        try:
            while True:
                sequence, data = await queue.get()
                yield sequence, decode_metadata_batch(data)
                if until is not None and sequence >= until:
                    return
        finally:
            await subscription.unsubscribe()


class ControllerLease:
    """The lease and the controller epoch in one KV bucket."""

    def __init__(self, nc: Client, cluster_id: str, *, lease_ms: int, replicas: int = DEFAULT_STREAM_REPLICAS) -> None:
        assert lease_ms >= 1000, "JetStream per-message TTLs are whole seconds"
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=STREAM_READ_TIMEOUT_S)
        self.bucket_name = controller_bucket(cluster_id)
        self.ttl_s = math.ceil(lease_ms / 1000)
        self.replicas = replicas
        self._kv: KeyValue | None = None

    async def kv(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket_name)
            except BucketNotFoundError:
                try:
                    self._kv = await self.js.create_key_value(
                        bucket=self.bucket_name, history=1, replicas=cluster_replicas(self.nc, self.replicas)
                    )
                except APIError:
                    self._kv = await self.js.key_value(self.bucket_name)
        return self._kv

    async def try_acquire(self, controller_id: int) -> Lease | None:
        """Become the holder if nobody is; the new controller epoch is one more than the last one."""
        kv = await self.kv()
        try:
            revision = await kv.create(LEASE_KEY, _lease_value(controller_id, -1), msg_ttl=self.ttl_s)
        except KeyWrongLastSequenceError:
            return None
        epoch = await self._bump_epoch(kv)
        try:
            revision = await self._put_lease(_lease_value(controller_id, epoch), revision)
        except NotActiveController:
            return None
        return Lease(controller_id, epoch, revision)

    async def _put_lease(self, value: bytes, last_revision: int) -> int:
        """Compare-and-set of the lease key with a fresh TTL (KeyValue.update cannot set a TTL)."""
        headers = {"Nats-Expected-Last-Subject-Sequence": str(last_revision), "Nats-TTL": str(self.ttl_s)}
        try:
            ack = await self.js.publish(f"$KV.{self.bucket_name}.{LEASE_KEY}", value, headers=headers)
        except APIError as error:
            if error.err_code == WRONG_LAST_SEQUENCE:
                raise NotActiveController("the controller lease was lost") from None
            raise
        return int(ack.seq)

    async def _bump_epoch(self, kv: KeyValue) -> int:
        while True:
            try:
                entry = await kv.get(EPOCH_KEY)
            except KeyNotFoundError:
                try:
                    await kv.create(EPOCH_KEY, b"1")
                except KeyWrongLastSequenceError:
                    continue
                return 1
            assert entry.value is not None and entry.revision is not None
            epoch = int(entry.value) + 1
            try:
                await kv.update(EPOCH_KEY, str(epoch).encode(), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
            return epoch

    async def renew(self, lease: Lease) -> Lease:
        """Extend the lease; NotActiveController if somebody else holds it now (or it lapsed)."""
        revision = await self._put_lease(_lease_value(lease.controller_id, lease.controller_epoch), lease.revision)
        return Lease(lease.controller_id, lease.controller_epoch, revision)

    async def release(self, lease: Lease) -> None:
        kv = await self.kv()
        with contextlib.suppress(KeyWrongLastSequenceError, APIError):
            await kv.delete(LEASE_KEY, last=lease.revision)

    async def holder(self) -> tuple[int, int] | None:
        """(controller id, controller epoch) of the current holder, or None."""
        kv = await self.kv()
        try:
            entry = await kv.get(LEASE_KEY)
        except KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        body = json.loads(entry.value)
        return int(body["controller_id"]), int(body["controller_epoch"])


def _lease_value(controller_id: int, epoch: int) -> bytes:
    return json.dumps({"controller_id": controller_id, "controller_epoch": epoch}).encode()
