"""`hightide canary`: the continuously verifying client service, like LinkedIn's Xinfra Monitor (kafka-monitor).

Room: services/client (wiring; the rules are `hightide.core.canary`). A long-running process with Xinfra's three
parts over one connection:

- topic management: the monitor topic (`--topic`, default `__hightide_canary`) exists with a partition per live
  broker, RF min(3, brokers), min.insync.replicas 2, and every live broker the preferred leader (first replica) of
  at least one partition; a broker that joins gets a new partition it leads (CreatePartitions with an explicit
  assignment), and a partition whose preferred leader is back in its ISR gets a preferred election;
- produce: `--rate` records/s, acks=all and idempotent, to every partition in turn; each value names the canary's
  incarnation, the partition, a per-partition sequence number and the send time (`core.canary.CanaryValue`);
- consume: every partition, assigned (no group), from its end when the canary starts; each record read is
  classified by a `core.canary.PartitionTracker` (in order, lost, duplicated, reordered) and timed end to end.

It exports Prometheus metrics (`/metrics` on `--http-port`) in the spirit of Xinfra's names, prefixed
`hightide_canary_`: produce and consume availability per partition over a sliding window (acknowledged over
attempted; read over read plus lost), records produced, acknowledged, consumed, lost, duplicated and reordered,
produce errors by Kafka error name, and the end-to-end delay as a histogram and its recent 99th percentile. It
emits the clients' events (SendInvoked, SendCompleted, RecordsConsumed, as emitter `canary`) so that
`hightide history audit` holds its records to Kafka's promises, and a CanarySummary every summary interval and
when it stops. On SIGTERM or SIGINT it stops producing, waits for every send's outcome, reads on (at most
`DRAIN_TIMEOUT_S`) until it has read what was acknowledged, emits its last summary and exits 0.

The produce errors counted are those the producer reports after its retries: an outage shorter than the
producer's `delivery.timeout.ms` only shows as delay. The canary's default is shorter than Kafka's (10 s, not
120 s) so that an unavailable partition shows within seconds; `--producer-property` changes it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from nats.aio.client import Client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hightide.client.admin import Admin
from hightide.client.client_events import records_consumed, send_completed, send_invoked
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer, ConsumerConfig, ConsumerRecord
from hightide.client.local_cluster import ClusterError, LocalCluster
from hightide.client.producer import ProduceFailed, Producer, ProducerConfig, RecordFuture
from hightide.core.canary import (
    AvailabilityWindow,
    CanaryValue,
    DelayWindow,
    InvalidCanaryValue,
    PartitionTracker,
    Verdict,
    monitor_topic_shape,
    preferred_leader_gaps,
    replicas_led_by,
)
from hightide.core.clock import MonoMs, WallMs
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.events import CanarySummary
from hightide.protocol.permissions import Role
from hightide.runtime.config import ConfigError, parse_overrides
from hightide.runtime.event_store import EventPipeline, NullEventSink
from hightide.runtime.events import EventSink
from hightide.runtime.logging import Logger
from hightide.runtime.service import common_parser, parse_common, run_service

DEFAULT_TOPIC: Final = "__hightide_canary"
DEFAULT_RATE: Final = 10.0
CANARY_OUTBOX: Final = Path("events-outbox")
# The canary's producer: Kafka's defaults but for a delivery timeout short enough to show an outage (see above).
PRODUCER_DEFAULTS: Final = {"delivery.timeout.ms": "10000", "request.timeout.ms": "5000", "max.block.ms": "5000"}
CONSUMER_DEFAULTS: Final = {"auto.offset.reset": "earliest", "fetch.max.wait.ms": "200"}
DRAIN_TIMEOUT_S: Final = 5.0
RETRY_BACKOFF_S: Final = 1.0
GAUGE_REFRESH_S: Final = 1.0
# End-to-end delays span a local cluster's milliseconds to a failover's seconds.
DELAY_MS_BUCKETS: Final = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class CanaryMetrics:
    """The canary's Prometheus metrics, on a registry of its own (never prometheus_client's global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, p = self.registry, ["partition"]
        self.produced = Counter("hightide_canary_records_produced", "Records the canary sent.", p, registry=r)
        self.acknowledged = Counter(
            "hightide_canary_records_acknowledged", "Records acknowledged (acks=all).", p, registry=r
        )
        self.produce_errors = Counter(
            "hightide_canary_produce_error",
            "Sends that failed after the producer's retries, by Kafka error name.",
            ["partition", "error"],
            registry=r,
        )
        self.consumed = Counter("hightide_canary_records_consumed", "Canary records read back.", p, registry=r)
        self.lost = Counter(
            "hightide_canary_records_lost", "Acknowledged records the consumer passed over.", p, registry=r
        )
        self.duplicated = Counter("hightide_canary_records_duplicated", "Records read twice.", p, registry=r)
        self.reordered = Counter(
            "hightide_canary_records_reordered", "Records read after a later record of theirs.", p, registry=r
        )
        self.foreign = Counter(
            "hightide_canary_records_foreign", "Records read that are not this canary's (earlier runs).", registry=r
        )
        self.delay_ms = Histogram(
            "hightide_canary_records_delay_ms",
            "End-to-end delay from send to read, in milliseconds.",
            buckets=DELAY_MS_BUCKETS,
            registry=r,
        )
        self.delay_ms_99th = Gauge(
            "hightide_canary_records_delay_ms_99th", "99th percentile delay of the recent reads (-1: none).", registry=r
        )
        self.produce_availability = Gauge(
            "hightide_canary_produce_availability",
            "Acknowledged over attempted sends of the availability window, per partition.",
            p,
            registry=r,
        )
        self.consume_availability = Gauge(
            "hightide_canary_consume_availability",
            "Read over read-plus-lost records of the availability window, per partition.",
            p,
            registry=r,
        )
        self.partitions = Gauge("hightide_canary_partitions", "Partitions of the monitor topic checked.", registry=r)


class Canary:
    """The service (`runtime.service.Service`): `run` until `stopping` is set."""

    def __init__(
        self,
        conn: ClusterConnection,
        *,
        topic: str,
        rate: float,
        producer_config: ProducerConfig,
        consumer_config: ConsumerConfig,
        metrics: CanaryMetrics,
        events: EventSink,
        log: Logger,
        incarnation: str,
        availability_window_ms: int,
        summary_interval_ms: int,
        topic_management_interval_ms: int,
        record_events: bool = True,
    ) -> None:
        assert rate > 0, rate
        self.conn = conn
        self.admin = Admin(conn, timeout_s=10.0)
        self.topic = topic
        self.rate = rate
        self.producer_config = producer_config
        self.metrics = metrics
        self.events = events
        # Each record's SendInvoked, SendCompleted and RecordsConsumed, for the audit (or none: summaries only).
        self.record_events: EventSink = events if record_events else NullEventSink()
        self.log = log
        self.incarnation = incarnation
        self.stopping = asyncio.Event()
        self.consumer = Consumer(conn, consumer_config)
        self.availability_window_ms = availability_window_ms
        self.summary_interval_ms = summary_interval_ms
        self.topic_management_interval_ms = topic_management_interval_ms
        self.trackers: dict[int, PartitionTracker] = {}
        self.produce_windows: dict[int, AvailabilityWindow] = {}
        self.consume_windows: dict[int, AvailabilityWindow] = {}
        self.delays = DelayWindow()
        self._next_sequence: dict[int, int] = {}
        self._last_acknowledged: dict[int, int] = {}
        self._produced_all = asyncio.Event()
        self._ready = False
        self.totals = {"produced": 0, "acknowledged": 0, "errors": 0}

    @property
    def ready(self) -> bool:
        return self._ready

    # -- the service ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        self.log.info("canary_starting", topic=self.topic, rate=self.rate, incarnation=self.incarnation)
        try:
            while not self.stopping.is_set() and not await self._manage_topic():
                await self._pause(RETRY_BACKOFF_S)  # no live broker or controller yet: try again
            while not self.stopping.is_set():
                try:
                    await self._check()
                except* HightideError as failed:
                    # A producer that could not get a producer id within its delivery timeout (no controller), or
                    # a request no broker answered: start the clients again, as an operator would, and go on
                    # counting (the canary's sequences and trackers outlive its clients).
                    errors = [f"{type(e).__name__}: {e}" for e in failed.exceptions]
                    self.log.warning("canary_clients_restarting", errors=errors)
                    await self._pause(RETRY_BACKOFF_S)
        finally:
            self._ready = False
            await self.consumer.close()
            self._refresh_gauges()
            summary = self._summary()
            self.events.emit(summary)
            self.log.info("canary_stopped", **dataclasses.asdict(summary))

    async def _check(self) -> None:
        """Produce, consume, manage the topic and report, until asked to stop."""
        self._produced_all.clear()
        async with Producer(self.conn, self.producer_config) as producer:
            self._ready = True
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._produce(producer))
                    group.create_task(self._consume())
                    group.create_task(self._manage_topic_periodically())
                    group.create_task(self._report_periodically())
            finally:
                self._ready = False

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the canary is asked to stop (pacing and backoff, not synchronisation)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    # -- topic management ----------------------------------------------------------------------------------------

    async def _manage_topic_periodically(self) -> None:
        while not self.stopping.is_set():
            await self._pause(self.topic_management_interval_ms / 1000)
            if not self.stopping.is_set():
                await self._manage_topic()

    async def _manage_topic(self) -> bool:
        """Xinfra's topic-management, once: the topic exists, every live broker is some partition's preferred
        leader, preferred leaders lead where they can, and every partition is produced and read. Whether the topic
        is usable now (False: try again later)."""
        try:
            cluster = await self.admin.describe_cluster()
            live = [b.broker_id for b in cluster.brokers if not b.fenced and not b.in_controlled_shutdown]
            if cluster.error or not live:
                self.log.warning("canary_no_live_brokers", error=ErrorCode(cluster.error).name)
                return False
            partitions = await self._partitions_of_topic(live)
            if partitions is None:
                return False
            partitions = await self._lead_by_every_broker(live, partitions)
            await self._elect_preferred_leaders(live, partitions)
            await self._check_new_partitions(len(partitions))
            return True
        except HightideError as error:  # a ClientError, or a metadata request no broker answered
            self.log.warning("canary_topic_management_failed", error=error.error_code.name, message=str(error))
            return False

    async def _partitions_of_topic(self, live: list[int]) -> list[wire.PartitionMetadata] | None:
        answer = await self.conn.metadata((self.topic,))
        found = next((t for t in answer.topics if t.name == self.topic and not t.error), None)
        if found is not None and found.partitions:
            return sorted(found.partitions, key=lambda p: p.partition)
        count, replication_factor, min_insync = monitor_topic_shape(len(live))
        assignments = tuple(replicas_led_by(b, live, replication_factor) for b in sorted(live)[:count])
        result = await self.admin.create_topic(
            self.topic, configs={"min.insync.replicas": str(min_insync)}, assignments=assignments
        )
        error = ErrorCode(result.error)
        if error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            self.log.warning("canary_topic_create_failed", topic=self.topic, error=error.name, message=result.message)
            return None
        self.log.info("canary_topic_created", topic=self.topic, assignments=assignments, error=error.name)
        return None  # read it back on the next round, once brokers have it

    async def _lead_by_every_broker(
        self, live: list[int], partitions: list[wire.PartitionMetadata]
    ) -> list[wire.PartitionMetadata]:
        missing = preferred_leader_gaps(live, [p.replicas[0] for p in partitions if p.replicas])
        if not missing:
            return partitions
        replication_factor = min(len(partitions[0].replicas), len(live))
        assignments = tuple(replicas_led_by(b, live, replication_factor) for b in missing)
        answer = await self.admin.create_partitions(self.topic, len(partitions) + len(missing), assignments)
        self.log.info(
            "canary_partitions_added", topic=self.topic, assignments=assignments, error=answer.error_code.name
        )
        found = await self.conn.metadata((self.topic,))
        topic = next((t for t in found.topics if t.name == self.topic), None)
        return partitions if topic is None else sorted(topic.partitions, key=lambda p: p.partition)

    async def _elect_preferred_leaders(self, live: list[int], partitions: list[wire.PartitionMetadata]) -> None:
        """Like Xinfra's preferred leader election: a partition whose preferred leader is live and in its ISR but
        does not lead it gets one, so each broker's partition measures that broker."""
        off = tuple(
            (self.topic, p.partition)
            for p in partitions
            if p.replicas and p.leader != p.replicas[0] and p.replicas[0] in live and p.replicas[0] in p.isr
        )
        if off:
            answer = await self.admin.elect_leaders("preferred", off)
            self.log.info("canary_preferred_election", partitions=[p for _, p in off], error=answer.error_code.name)

    async def _check_new_partitions(self, count: int) -> None:
        """Start reading a partition new to the canary from its end, before the first send to it, so the first
        record of this incarnation read is its sequence 0."""
        new = [p for p in range(count) if p not in self.trackers]
        if not new:
            return
        await self.conn.wait_for_partitions(self.topic, 30.0, 0.1, count - 1)
        positions = {(self.topic, p): await self.consumer.list_offset((self.topic, p), -1) for p in new}
        self.consumer.assign(positions)
        window_ms, m = self.availability_window_ms, self.metrics
        for p in new:
            self.trackers[p] = PartitionTracker(self.incarnation, p)
            self.produce_windows[p] = AvailabilityWindow(window_ms)
            self.consume_windows[p] = AvailabilityWindow(window_ms)
            self._next_sequence[p] = 0
            for counter in (m.produced, m.acknowledged, m.consumed, m.lost, m.duplicated, m.reordered):
                counter.labels(partition=p)  # a zero from the start: "none lost" is a series, not its absence
        self.metrics.partitions.set(len(self.trackers))
        self.log.info("canary_partitions_checked", topic=self.topic, partitions=sorted(self.trackers))

    # -- produce -------------------------------------------------------------------------------------------------

    async def _produce(self, producer: Producer) -> None:
        """Send at `rate` records/s, partition after partition; on stop, wait for every send's outcome."""
        loop = asyncio.get_running_loop()
        interval_s = 1 / self.rate
        next_at = loop.time()
        turn = 0
        try:
            while not self.stopping.is_set():
                partitions = sorted(self.trackers)
                await self._send(producer, partitions[turn % len(partitions)])
                turn += 1
                next_at += interval_s
                behind_s = loop.time() - next_at
                if behind_s > 1.0:
                    next_at = loop.time()  # a blocked send: carry on at the rate, no burst to catch up
                elif behind_s < 0:
                    await self._pause(-behind_s)
            await producer.flush()
        finally:
            self._produced_all.set()

    async def _send(self, producer: Producer, partition: int) -> None:
        sequence = self._next_sequence[partition]
        self._next_sequence[partition] = sequence + 1
        value = CanaryValue(self.incarnation, partition, sequence, _wall_ms()).encode()
        self.metrics.produced.labels(partition=partition).inc()
        self.totals["produced"] += 1
        try:
            future = await producer.send(self.topic, value.encode(), partition=partition)
        except ProduceFailed as error:  # never sent (no metadata, or buffer.memory full for max.block.ms)
            self._failed(partition, sequence, error.error_code)
            return
        send_invoked(self.record_events, future, None, value)
        future.add_done_callback(lambda done: self._on_sent(done, sequence, value))

    def _on_sent(self, future: RecordFuture, sequence: int, value: str) -> None:
        send_completed(self.record_events, future, value)
        partition = future.partition
        error = future.exception()
        if error is not None:
            code = error.error_code if isinstance(error, ProduceFailed) else ErrorCode.UNKNOWN_SERVER_ERROR
            self._failed(partition, sequence, code)
            return
        self.metrics.acknowledged.labels(partition=partition).inc()
        self.totals["acknowledged"] += 1
        self.produce_windows[partition].record(_mono_ms(), True)
        self._last_acknowledged[partition] = max(sequence, self._last_acknowledged.get(partition, -1))
        lost = self.trackers[partition].acknowledged(sequence, future.result().offset)
        self._count_lost(partition, lost)

    def _failed(self, partition: int, sequence: int, code: ErrorCode) -> None:
        self.metrics.produce_errors.labels(partition=partition, error=code.name).inc()
        self.totals["errors"] += 1
        self.produce_windows[partition].record(_mono_ms(), False)
        self.trackers[partition].failed(sequence)

    # -- consume -------------------------------------------------------------------------------------------------

    async def _consume(self) -> None:
        """Read every partition until asked to stop and, after that, until what was acknowledged has been read (at
        most DRAIN_TIMEOUT_S after the last outcome)."""
        drain_deadline: float | None = None
        while True:
            if self._produced_all.is_set():
                drain_deadline = drain_deadline or time.monotonic() + DRAIN_TIMEOUT_S
                if self._read_all_acknowledged() or time.monotonic() > drain_deadline:
                    return
            try:
                records = await self.consumer.poll()
            except HightideError as error:
                self.log.warning("canary_consume_failed", error=error.error_code.name, message=str(error))
                await self._pause(RETRY_BACKOFF_S)
                continue
            if records:
                records_consumed(self.record_events, records)
                now_ms = _wall_ms()
                for record in records:
                    self._on_read(record, now_ms)

    def _read_all_acknowledged(self) -> bool:
        return all(self.trackers[p].next_sequence > last for p, last in self._last_acknowledged.items())

    def _on_read(self, record: ConsumerRecord, now_ms: WallMs) -> None:
        partition = record.partition
        tracker = self.trackers.get(partition)
        try:
            value: CanaryValue | None = CanaryValue.decode((record.value or b"").decode(errors="replace"))
        except InvalidCanaryValue:
            value = None
        if tracker is None:
            self.metrics.foreign.inc()
            return
        reading = tracker.read(value, now_ms, record.offset)
        self._count_lost(partition, reading.lost)  # a foreign record too may stand where an acknowledged one was
        if reading.verdict is Verdict.FOREIGN or value is None:
            self.metrics.foreign.inc()
            return
        self.metrics.consumed.labels(partition=partition).inc()
        self.consume_windows[partition].record(_mono_ms(), True)
        self.metrics.delay_ms.observe(reading.delay_ms)
        self.delays.record(reading.delay_ms)
        if reading.verdict is Verdict.DUPLICATE:
            self.metrics.duplicated.labels(partition=partition).inc()
            self.log.warning("canary_record_duplicated", partition=partition, sequence=value.sequence)
        elif reading.verdict is Verdict.LATE:
            self.metrics.reordered.labels(partition=partition).inc()
            self.log.warning("canary_record_reordered", partition=partition, sequence=value.sequence)

    def _count_lost(self, partition: int, lost: int) -> None:
        if lost == 0:
            return
        self.metrics.lost.labels(partition=partition).inc(lost)
        now_ms = _mono_ms()
        for _ in range(lost):
            self.consume_windows[partition].record(now_ms, False)
        self.log.error("canary_records_lost", partition=partition, lost=lost, total=self.trackers[partition].lost)

    # -- reporting -----------------------------------------------------------------------------------------------

    async def _report_periodically(self) -> None:
        last_summary = time.monotonic()
        while not self.stopping.is_set():
            await self._pause(GAUGE_REFRESH_S)
            self._refresh_gauges()
            if time.monotonic() - last_summary >= self.summary_interval_ms / 1000:
                last_summary = time.monotonic()
                self.events.emit(self._summary())

    def _refresh_gauges(self) -> None:
        now_ms = _mono_ms()
        for partition, window in self.produce_windows.items():
            self.metrics.produce_availability.labels(partition=partition).set(window.ratio(now_ms))
        for partition, window in self.consume_windows.items():
            self.metrics.consume_availability.labels(partition=partition).set(window.ratio(now_ms))
        self.metrics.delay_ms_99th.set(self.delays.percentile(0.99))

    def _summary(self) -> CanarySummary:
        trackers = self.trackers.values()
        return CanarySummary(
            topic=self.topic,
            partitions=len(self.trackers),
            records_produced=self.totals["produced"],
            records_acknowledged=self.totals["acknowledged"],
            produce_errors=self.totals["errors"],
            records_consumed=sum(t.consumed for t in trackers),
            records_lost=sum(t.lost for t in trackers),
            records_duplicated=sum(t.duplicated for t in trackers),
            records_reordered=sum(t.reordered for t in trackers),
            delay_ms_p99=self.delays.percentile(0.99),
        )


def _wall_ms() -> WallMs:
    """Wall-clock milliseconds: a record's send time is compared with its read time, maybe in another process."""
    return WallMs(int(time.time() * 1000))


def _mono_ms() -> MonoMs:
    """Monotonic milliseconds: the availability windows are durations on this process."""
    return MonoMs(int(time.monotonic() * 1000))


# -- the process -------------------------------------------------------------------------------------------------


class _WithEvents:
    """The canary and its own event pipeline (the clients' events, without the services' one log line per event):
    the pipeline drains after the canary has stopped, so its last summary reaches the event store."""

    def __init__(self, canary: Canary, pipeline: EventPipeline, log: Logger) -> None:
        self.canary = canary
        self.stopping = canary.stopping
        self._pipeline = pipeline
        self._log = log

    @property
    def ready(self) -> bool:
        return self.canary.ready

    async def run(self) -> None:
        try:
            await self.canary.run()
        finally:
            drained = await self._pipeline.close()
            self._log.info("events_closed", published=self._pipeline.relay.published, drained=drained)


def build_parser() -> argparse.ArgumentParser:
    parser = common_parser("hightide canary", "Produce to and consume from a monitor topic, verifying every record.")
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"the monitor topic (default {DEFAULT_TOPIC})")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="records per second, over all partitions")
    parser.add_argument("--id", type=int, default=1, help="this canary's id (names its events and outbox)")
    parser.add_argument("--data-dir", type=Path, default=Path(".hightide"), help="local data dir (./.hightide)")
    parser.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--availability-window-ms", type=int, default=10_000)
    parser.add_argument("--summary-interval-ms", type=int, default=10_000)
    parser.add_argument("--topic-management-interval-ms", type=int, default=30_000)
    parser.add_argument(
        "--events",
        choices=("records", "summary"),
        default="records",
        help="records: every send and read as the clients' events, for the audit (3 events per record); "
        "summary: only CanarySummary",
    )
    return parser


def _configs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[ProducerConfig, ConsumerConfig]:
    """The clients' configs: the canary's defaults, then `--producer-property`; acks=all and idempotence always."""
    try:
        producer_props = {**PRODUCER_DEFAULTS, **parse_overrides(args.producer_property)}
        for name, required in (("acks", "all"), ("enable.idempotence", "true")):
            if producer_props.setdefault(name, required) not in (required, "-1"):
                raise ValueError(f"the canary always produces with {name}={required}")
        consumer_props = {**CONSUMER_DEFAULTS, **parse_overrides(args.consumer_property)}
        return ProducerConfig.from_properties(producer_props), ConsumerConfig.from_properties(consumer_props)
    except (ValueError, ConfigError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")


def _check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.rate > 0:
        parser.exit(2, f"{parser.prog}: error: --rate must be positive, got {args.rate}\n")
    for name in ("availability_window_ms", "summary_interval_ms", "topic_management_interval_ms"):
        if getattr(args, name) <= 0:
            parser.exit(2, f"{parser.prog}: error: --{name.replace('_', '-')} must be positive\n")
    args.local_admin_credentials = None
    if args.nats_url is None and not os.environ.get("HIGHTIDE_NATS_URL"):
        # CONTRACT.md's order: --nats-url, HIGHTIDE_NATS_URL, then a local cluster's cluster.json.
        with contextlib.suppress(ClusterError):
            state = LocalCluster(args.data_dir).read_state()
            if state is not None:
                args.nats_url = state.nats_url
                args.cluster_id = args.cluster_id or os.environ.get("HIGHTIDE_CLUSTER_ID") or state.cluster_id
                args.local_admin_credentials = state.credentials_file(Role.ADMIN)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    common = parse_common(parser, argv)
    args = common.args
    _check_arguments(parser, args)
    if "nats.credentials.file" not in common.properties and args.local_admin_credentials is not None:
        # NATS permissions (issue 14): on a local cluster it connects as the admin, since it manages its topic
        common = dataclasses.replace(
            common, properties={**common.properties, "nats.credentials.file": str(args.local_admin_credentials)}
        )
    if args.cluster_id is not None and args.cluster_id != common.cluster_id:
        common = dataclasses.replace(common, cluster_id=args.cluster_id)  # the local cluster's, from cluster.json
    producer_config, consumer_config = _configs(parser, args)
    metrics = CanaryMetrics()
    incarnation = uuid.uuid4().hex[:16]

    def build(nc: Client, log: Logger) -> _WithEvents:
        pipeline = EventPipeline.open(
            nc,
            args.data_dir / CANARY_OUTBOX / f"canary-{args.id}",
            cluster_id=common.cluster_id,
            service="canary",
            emitter_id=args.id,
            log=log,
        )
        pipeline.start()
        canary = Canary(
            ClusterConnection(nc, common.cluster_id),
            topic=args.topic,
            rate=args.rate,
            producer_config=producer_config,
            consumer_config=consumer_config,
            metrics=metrics,
            events=pipeline.sink,
            log=log,
            incarnation=incarnation,
            availability_window_ms=args.availability_window_ms,
            summary_interval_ms=args.summary_interval_ms,
            topic_management_interval_ms=args.topic_management_interval_ms,
            record_events=args.events == "records",
        )
        return _WithEvents(canary, pipeline, log)

    return run_service(common, name="canary", service_id=args.id, build=build, registry=metrics.registry)
