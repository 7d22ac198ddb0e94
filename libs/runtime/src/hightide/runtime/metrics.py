"""Prometheus metrics with Kafka's names, one registry per service.

Room: libs/runtime. It owns the metric objects and their names. Names are what Prometheus' JMX exporter makes of
Kafka's MBeans, lowercased `kafka_<domain>_<type>_<name>` (kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions -> `kafka_server_replicamanager_underreplicatedpartitions`), so dashboards and
alerts written for Kafka work unchanged. Kafka's `...PerSec` meters are counters here (`..._total`): Prometheus
derives the rate. It must never use prometheus_client's global registry, so that several services (and tests)
can live in one process without colliding.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Kafka's request latencies span sub-millisecond metadata requests to produce requests waiting on acks=all.
REQUEST_TIME_MS_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)


class RequestMetrics:
    """kafka.network:type=RequestMetrics: per request type, the count (by error code) and total time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests handled, by request type and error code (NONE on success).",
            ["request", "error"],
            registry=registry,
        )
        self.total_time_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from receiving a request to sending its response, in milliseconds.",
            ["request"],
            buckets=REQUEST_TIME_MS_BUCKETS,
            registry=registry,
        )

    def observe(self, request: str, error: str, total_time_ms: float) -> None:
        """Count one handled request of type `request` (e.g. Fetch) with Kafka error name `error` (e.g. NONE)."""
        assert total_time_ms >= 0, total_time_ms
        self.requests.labels(request=request, error=error).inc()
        self.total_time_ms.labels(request=request).observe(total_time_ms)


class BrokerMetrics:
    """A broker's metrics: kafka.server ReplicaManager and BrokerTopicMetrics, and its request metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.under_replicated_partitions = self._gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led by this broker whose ISR is smaller than their replica set.",
        )
        self.leader_count = self._gauge("kafka_server_replicamanager_leadercount", "Partitions led by this broker.")
        self.partition_count = self._gauge(
            "kafka_server_replicamanager_partitioncount", "Partitions with a replica on this broker."
        )
        self.isr_shrinks = self._counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks (IsrShrinksPerSec).")
        self.isr_expands = self._counter("kafka_server_replicamanager_isrexpands", "ISR expands (IsrExpandsPerSec).")
        self.bytes_in = self._counter("kafka_server_brokertopicmetrics_bytesin", "Bytes appended from producers.")
        self.bytes_out = self._counter("kafka_server_brokertopicmetrics_bytesout", "Bytes sent to consumers.")
        self.messages_in = self._counter("kafka_server_brokertopicmetrics_messagesin", "Records from producers.")
        self.requests = RequestMetrics(self.registry)

    def _gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(name, documentation, registry=self.registry)

    def _counter(self, name: str, documentation: str) -> Counter:
        # prometheus_client appends `_total` to a counter's name in the exposition.
        return Counter(name, documentation, registry=self.registry)


class ControllerMetrics:
    """A controller's metrics: kafka.controller KafkaController and ControllerStats, and its request metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.active_controller_count = self._gauge(
            "kafka_controller_kafkacontroller_activecontrollercount", "1 on the active controller, 0 elsewhere."
        )
        self.offline_partitions_count = self._gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a live leader."
        )
        self.global_partition_count = self._gauge(
            "kafka_controller_kafkacontroller_globalpartitioncount", "Partitions in the cluster."
        )
        self.fenced_broker_count = self._gauge(
            "kafka_controller_kafkacontroller_fencedbrokercount", "Registered brokers that are fenced."
        )
        self.active_broker_count = self._gauge(
            "kafka_controller_kafkacontroller_activebrokercount", "Registered brokers that are unfenced."
        )
        self.unclean_leader_elections = self._counter(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "Leaders elected from outside the ISR (UncleanLeaderElectionsPerSec).",
        )
        self.leader_elections = self._counter(
            "kafka_controller_controllerstats_leaderelections", "Leader elections (LeaderElectionRateAndTimeMs)."
        )
        self.requests = RequestMetrics(self.registry)

    def _gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(name, documentation, registry=self.registry)

    def _counter(self, name: str, documentation: str) -> Counter:
        return Counter(name, documentation, registry=self.registry)


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The registry in Prometheus' text exposition format: (body, content type)."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
