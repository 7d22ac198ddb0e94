"""Prometheus metrics with Kafka's JMX-exporter names, one registry per service.

Method: build the service's metrics, move each one, render the registry, and look for the exact series names a
Kafka dashboard queries; two instances in one process must not collide (no global registry).
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from hightide.runtime.metrics import BrokerMetrics, ControllerMetrics, render


def test_broker_metrics_render_with_kafka_names() -> None:
    metrics = BrokerMetrics()
    metrics.under_replicated_partitions.set(2)
    metrics.leader_count.set(5)
    metrics.partition_count.set(9)
    metrics.isr_shrinks.inc()
    metrics.isr_expands.inc(3)
    metrics.bytes_in.inc(100)
    metrics.bytes_out.inc(40)
    metrics.messages_in.inc(4)
    metrics.requests.observe("Fetch", "NONE", 12.5)
    metrics.requests.observe("Produce", "NOT_ENOUGH_REPLICAS", 3.0)

    body, content_type = render(metrics.registry)
    text = body.decode()

    assert content_type.startswith("text/plain")
    for line in (
        "kafka_server_replicamanager_underreplicatedpartitions 2.0",
        "kafka_server_replicamanager_leadercount 5.0",
        "kafka_server_replicamanager_partitioncount 9.0",
        "kafka_server_replicamanager_isrshrinks_total 1.0",
        "kafka_server_replicamanager_isrexpands_total 3.0",
        "kafka_server_brokertopicmetrics_bytesin_total 100.0",
        "kafka_server_brokertopicmetrics_bytesout_total 40.0",
        "kafka_server_brokertopicmetrics_messagesin_total 4.0",
        'kafka_network_requestmetrics_requests_total{error="NONE",request="Fetch"} 1.0',
        'kafka_network_requestmetrics_requests_total{error="NOT_ENOUGH_REPLICAS",request="Produce"} 1.0',
        'kafka_network_requestmetrics_totaltimems_bucket{le="25.0",request="Fetch"} 1.0',
        'kafka_network_requestmetrics_totaltimems_sum{request="Fetch"} 12.5',
    ):
        assert line in text.splitlines(), line


def test_controller_metrics_render_with_kafka_names() -> None:
    metrics = ControllerMetrics()
    metrics.active_controller_count.set(1)
    metrics.offline_partitions_count.set(1)
    metrics.global_partition_count.set(12)
    metrics.fenced_broker_count.set(1)
    metrics.active_broker_count.set(2)
    metrics.unclean_leader_elections.inc()
    metrics.leader_elections.inc(4)
    metrics.requests.observe("BrokerHeartbeat", "NONE", 0.2)

    text = render(metrics.registry)[0].decode()

    for line in (
        "kafka_controller_kafkacontroller_activecontrollercount 1.0",
        "kafka_controller_kafkacontroller_offlinepartitionscount 1.0",
        "kafka_controller_kafkacontroller_globalpartitioncount 12.0",
        "kafka_controller_kafkacontroller_fencedbrokercount 1.0",
        "kafka_controller_kafkacontroller_activebrokercount 2.0",
        "kafka_controller_controllerstats_uncleanleaderelections_total 1.0",
        "kafka_controller_controllerstats_leaderelections_total 4.0",
        'kafka_network_requestmetrics_requests_total{error="NONE",request="BrokerHeartbeat"} 1.0',
    ):
        assert line in text.splitlines(), line


def test_each_service_owns_its_registry_and_the_global_one_stays_clean() -> None:
    first, second = BrokerMetrics(), BrokerMetrics()
    first.leader_count.set(1)
    second.leader_count.set(2)
    assert "kafka_server_replicamanager_leadercount 1.0" in render(first.registry)[0].decode()
    assert "kafka_server_replicamanager_leadercount 2.0" in render(second.registry)[0].decode()
    ControllerMetrics()
    assert REGISTRY.get_sample_value("kafka_server_replicamanager_leadercount") is None
    assert b"kafka_" not in render(REGISTRY)[0]
