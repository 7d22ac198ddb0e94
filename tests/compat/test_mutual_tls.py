"""TLS with client certificates on the Kafka listener (issue 15): an SSL listener with `ssl.client.auth=required`
admits confluent-kafka (from PyPI, unchanged) with a certificate its truststore signed, which then creates a topic,
produces with acks=all and idempotence, and reads back with a consumer group; a client without a certificate, or
with one another CA signed, is refused at the handshake, as Kafka refuses it, and the broker serves on.

Method: one real local cluster (a controller and a broker, processes, as `hightide cluster up` starts them) whose
listener keeps the local cluster's name, PLAINTEXT, mapped to SSL by `listener.security.protocol.map`. The keystore
and truststore are PEM files of a throwaway CA (`support.tls`). One broker holds the offsets topic, so it is created
with one replica (`offsets.topic.replication.factor=1`, as Kafka's single-broker setups set it). Every wait is a
client call with its own timeout or a polled condition.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from hightide.client.local_cluster import LocalCluster
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, wait_for
from support.tls import Pki, make_pki

pytestmark = pytest.mark.slow

TOPIC = "mtls-orders"
RECORDS = 50


@dataclass(frozen=True)
class Mutual:
    bootstrap: str
    pki: Pki  # the CA the broker trusts, its server certificate and a client certificate it signed
    stranger: Pki  # another CA, and a client certificate it signed

    def client(self, pki: Pki | None = None) -> dict[str, Any]:
        """confluent-kafka's settings for the listener, with `pki`'s client certificate (none: without one)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca_cert),
        }
        if pki is not None:
            config |= {"ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
        return config


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mutual]:
    root = tmp_path_factory.mktemp("mutual-tls")
    pki, stranger = make_pki(root / "pki"), make_pki(root / "stranger")
    config = [
        "broker.heartbeat.interval.ms=300",
        "offsets.topic.replication.factor=1",
        "listener.security.protocol.map=PLAINTEXT:SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pki.server_pem}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki.ca_cert}",
        "ssl.client.auth=required",
    ]
    local = LocalCluster(root / "cluster")
    local.up(brokers=1, controllers=1, cluster_id="mutual-tls", config=config)
    try:
        wait_for(lambda: len(active_brokers(local)) == 1, 60, "an active broker")
        bootstrap = json.loads(Path(local.state_file).read_text())["kafka_listeners"]["1"]
        yield Mutual(bootstrap, pki, stranger)
    finally:
        local.down()
    assert_history_clean(local.lake)


def test_a_client_with_a_trusted_certificate_administers_produces_and_consumes_in_a_group(mutual: Mutual) -> None:
    admin = AdminClient(mutual.client(mutual.pki))
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)], operation_timeout=30).values():
        future.result(timeout=60)
    values = [f"order-{i}".encode() for i in range(RECORDS)]
    producer = Producer({**mutual.client(mutual.pki), "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(TOPIC, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {**mutual.client(mutual.pki), "group.id": "mtls-readers", "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    read: list[bytes] = []
    try:
        consumer.subscribe([TOPIC])
        wait_for(lambda: _poll_into(consumer, read) >= RECORDS, 60, "the records read back by the group")
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
    finally:
        consumer.close()
    assert read == values
    assert [(tp.topic, tp.offset, tp.error) for tp in committed] == [(TOPIC, RECORDS, None)]


def _poll_into(consumer: Consumer, read: list[bytes]) -> int:
    message = consumer.poll(1.0)
    if message is not None and message.error() is None:
        read.append(message.value())
    return len(read)


@pytest.mark.parametrize("certificate", ["none", "another CA's"])
def test_a_client_without_a_trusted_certificate_is_refused_and_the_broker_serves_on(
    mutual: Mutual, certificate: str
) -> None:
    pki = None if certificate == "none" else mutual.stranger
    refused = AdminClient(mutual.client(pki))
    with pytest.raises(KafkaException) as raised:
        refused.list_topics(timeout=5)
    assert raised.value.args[0].code() == KafkaError._TRANSPORT

    # Below the client: the handshake itself fails, before any Kafka request is read.
    host, port = mutual.bootstrap.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(mutual.pki.ca_cert))
    if pki is not None:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        assert not _handshake_and_read(context, raw, host), "a refused client got bytes from the broker"

    trusted = AdminClient(mutual.client(mutual.pki))
    assert mutual.bootstrap.rsplit(":", 1)[1] in {str(b.port) for b in trusted.list_topics(timeout=30).brokers.values()}


def _handshake_and_read(context: ssl.SSLContext, raw: socket.socket, host: str) -> bytes:
    """What a TLS client gets from the broker: nothing when the handshake or the first read fails. With TLS 1.3
    the server checks the client's certificate after the client's side of the handshake is done, so the refusal
    can come at the first read."""
    try:
        with context.wrap_socket(raw, server_hostname=host) as sock:
            sock.sendall(b"\x00\x00\x00\x00")  # any bytes: a refused connection never answers them
            return sock.recv(1)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return b""
