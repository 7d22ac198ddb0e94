"""Security on the Kafka listener (issue 15): confluent-kafka, kafka-python and aiokafka (from PyPI, unchanged)
authenticate with SASL/PLAIN and SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL (TLS with a test CA), produce with
acks=all and idempotence, and read back what they wrote; wrong credentials fail with each client's own
authentication error; an unauthenticated client gets nothing but Kafka's refusal; the broker keeps serving.

Method: one real local cluster per security protocol (a controller and a broker, processes, as `hightide cluster
up` starts them). The brokers' listener keeps the local cluster's name, PLAINTEXT, mapped to the protocol under
test by `listener.security.protocol.map`, as Kafka allows any name for any protocol. PLAIN users come from the
listener's JAAS config, SCRAM users from a credentials file `hightide scram-credentials` wrote. Raw-socket checks
write requests with kio. Every wait is a client call with its own timeout or a polled condition.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiokafka
import kafka as kafka_python
import pytest
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from hightide.client.local_cluster import LocalCluster
from hightide.protocol import kafka
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, wait_for
from support.tls import Pki, make_pki

pytestmark = pytest.mark.slow

PLAIN_USER, PLAIN_PASSWORD = "pat", "pat-plain-secret"
SCRAM_USER, SCRAM_PASSWORD = "sam", "sam-scram-secret"
CLIENTS = ("confluent", "kafka-python", "aiokafka")
MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
RECORDS = 50


@dataclass(frozen=True)
class Secure:
    cluster: LocalCluster
    bootstrap: str
    protocol: str
    pki: Pki

    def credentials(self, mechanism: str) -> tuple[str, str]:
        return (PLAIN_USER, PLAIN_PASSWORD) if mechanism == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)


def _scram_file(path: Path) -> None:
    subprocess.run(
        [
            sys.executable, "-m", "hightide.client.cli", "scram-credentials", "--file", str(path),
            "--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD},iterations=8192]",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module", params=["SASL_PLAINTEXT", "SASL_SSL"])
def secure(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    protocol: str = request.param
    root = tmp_path_factory.mktemp(f"secure-{protocol.lower()}")
    pki = make_pki(root / "pki")
    _scram_file(root / "scram-credentials.txt")
    config = [
        "broker.heartbeat.interval.ms=300",
        f"listener.security.protocol.map=PLAINTEXT:{protocol}",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        "listener.name.plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required user_{PLAIN_USER}="{PLAIN_PASSWORD}";',
        f"sasl.scram.credentials.file={root / 'scram-credentials.txt'}",
    ]
    if protocol == "SASL_SSL":
        config += ["ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_pem}"]
    local = LocalCluster(root / "cluster")
    local.up(brokers=1, controllers=1, cluster_id=f"secure-{protocol.lower()}", config=config)
    try:
        wait_for(lambda: len(active_brokers(local)) == 1, 60, "an active broker")
        bootstrap = json.loads(Path(local.state_file).read_text())["kafka_listeners"]["1"]
        secure = Secure(local, bootstrap, protocol, pki)
        admin = AdminClient(_confluent_config(secure, "PLAIN"))
        topics = [NewTopic(_topic(c, m), 1, 1) for c in CLIENTS for m in MECHANISMS]
        for future in admin.create_topics(topics, operation_timeout=30).values():
            future.result(timeout=60)
        yield secure
    finally:
        local.down()
    assert_history_clean(local.lake)


def _topic(client: str, mechanism: str) -> str:
    return f"sec-{client}-{mechanism}".lower()


def _values(client: str, mechanism: str) -> list[bytes]:
    return [f"{client}/{mechanism}/{i}".encode() for i in range(RECORDS)]


# -- confluent-kafka ------------------------------------------------------------------------------------------------


def _confluent_config(secure: Secure, mechanism: str, password: str | None = None) -> dict[str, Any]:
    user, right = secure.credentials(mechanism)
    config: dict[str, Any] = {
        "bootstrap.servers": secure.bootstrap,
        "security.protocol": secure.protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": right if password is None else password,
    }
    if secure.protocol == "SASL_SSL":
        config["ssl.ca.location"] = str(secure.pki.ca_cert)
    return config


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_authenticates_produces_and_consumes(secure: Secure, mechanism: str) -> None:
    topic, values = _topic("confluent", mechanism), _values("confluent", mechanism)
    producer = Producer({**_confluent_config(secure, mechanism), "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    consumer = Consumer({**_confluent_config(secure, mechanism), "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read: list[bytes] = []
        wait_for(lambda: _poll_into(consumer, read) >= RECORDS, 60, "the records read back")
    finally:
        consumer.close()
    assert read == values


def _poll_into(consumer: Consumer, read: list[bytes]) -> int:
    message = consumer.poll(1.0)
    if message is not None and message.error() is None:
        read.append(message.value())
    return len(read)


def test_confluent_kafka_with_a_wrong_password_gets_its_authentication_error(secure: Secure) -> None:
    errors: list[KafkaError] = []
    config = {**_confluent_config(secure, "SCRAM-SHA-512", "not-the-password"), "error_cb": errors.append}
    producer = Producer(config)
    producer.produce("sec-confluent-scram-sha-512", value=b"never")
    wait_for(lambda: producer.poll(0.5) >= 0 and bool(errors), 30, "an error callback")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    assert producer.flush(1) == 1  # nothing was written


# -- kafka-python ---------------------------------------------------------------------------------------------------


def _kafka_python_config(secure: Secure, mechanism: str, password: str | None = None) -> dict[str, Any]:
    user, right = secure.credentials(mechanism)
    config: dict[str, Any] = {
        "bootstrap_servers": [secure.bootstrap],
        "security_protocol": secure.protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": right if password is None else password,
    }
    if secure.protocol == "SASL_SSL":
        config["ssl_cafile"] = str(secure.pki.ca_cert)
    return config


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_authenticates_produces_and_consumes(secure: Secure, mechanism: str) -> None:
    topic, values = _topic("kafka-python", mechanism), _values("kafka-python", mechanism)
    config = _kafka_python_config(secure, mechanism)
    producer = kafka_python.KafkaProducer(**config, acks="all", enable_idempotence=True)
    try:
        futures = [producer.send(topic, value=value) for value in values]
        producer.flush(timeout=30)
        assert [f.get(timeout=30).offset for f in futures] == list(range(RECORDS))
    finally:
        producer.close()
    consumer = kafka_python.KafkaConsumer(**config, group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([kafka_python.TopicPartition(topic, 0)])
        consumer.seek(kafka_python.TopicPartition(topic, 0), 0)
        read: list[bytes] = []
        wait_for(
            lambda: read.extend(r.value for rs in consumer.poll(1000).values() for r in rs) or len(read) >= RECORDS,
            60,
            "the records read back",
        )
    finally:
        consumer.close()
    assert read == values


def test_kafka_python_with_a_wrong_password_gets_its_authentication_error(
    secure: Secure, caplog: pytest.LogCaptureFixture
) -> None:
    # kafka-python 3 retries a failed bootstrap until its timeout; the broker's answer is in its own log records.
    config = _kafka_python_config(secure, "PLAIN", "not-the-password")
    with pytest.raises(kafka_python.errors.KafkaError):
        kafka_python.KafkaProducer(**config, bootstrap_timeout_ms=5_000)
    refusals = [r.getMessage() for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert refusals and "Authentication failed: Invalid username or password" in refusals[0]


# -- aiokafka -------------------------------------------------------------------------------------------------------


def _aiokafka_config(secure: Secure, mechanism: str, password: str | None = None) -> dict[str, Any]:
    user, right = secure.credentials(mechanism)
    config: dict[str, Any] = {
        "bootstrap_servers": secure.bootstrap,
        "security_protocol": secure.protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": right if password is None else password,
    }
    if secure.protocol == "SASL_SSL":
        config["ssl_context"] = create_ssl_context(cafile=str(secure.pki.ca_cert))
    return config


async def _aiokafka_round_trip(secure: Secure, mechanism: str) -> tuple[list[int], list[bytes]]:
    topic, values = _topic("aiokafka", mechanism), _values("aiokafka", mechanism)
    producer = aiokafka.AIOKafkaProducer(**_aiokafka_config(secure, mechanism), acks="all", enable_idempotence=True)
    await producer.start()
    try:
        offsets = [(await producer.send_and_wait(topic, value=value)).offset for value in values]
    finally:
        await producer.stop()
    consumer = aiokafka.AIOKafkaConsumer(**_aiokafka_config(secure, mechanism), group_id=None)
    await consumer.start()
    try:
        partition = aiokafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        read: list[bytes] = []
        async with asyncio.timeout(60):
            while len(read) < RECORDS:
                batches = await consumer.getmany(timeout_ms=1000)
                read.extend(record.value for records in batches.values() for record in records)
    finally:
        await consumer.stop()
    return offsets, read


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_authenticates_produces_and_consumes(secure: Secure, mechanism: str) -> None:
    offsets, read = asyncio.run(_aiokafka_round_trip(secure, mechanism))
    assert offsets == list(range(RECORDS))
    assert read == _values("aiokafka", mechanism)


async def _aiokafka_wrong_password(secure: Secure) -> None:
    producer = aiokafka.AIOKafkaProducer(**_aiokafka_config(secure, "SCRAM-SHA-512", "not-the-password"))
    try:
        await producer.start()
    finally:
        await producer.stop()


def test_aiokafka_with_a_wrong_password_gets_its_authentication_error(
    secure: Secure, caplog: pytest.LogCaptureFixture
) -> None:
    # aiokafka's start() fails with "Unable to bootstrap"; the broker's answer is in its log records.
    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        asyncio.run(_aiokafka_wrong_password(secure))
    refusals = [r.getMessage() for r in caplog.records if "SaslAuthenticationFailed" in r.getMessage()]
    assert refusals and "invalid credentials with SASL mechanism SCRAM-SHA-512" in refusals[0]


# -- raw sockets: what an unauthenticated client gets ----------------------------------------------------------------


def _connect(secure: Secure) -> socket.socket:
    host, port = secure.bootstrap.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=30)
    if secure.protocol != "SASL_SSL":
        return raw
    context = ssl.create_default_context(cafile=str(secure.pki.ca_cert))
    return context.wrap_socket(raw, server_hostname=host)


def _send(sock: socket.socket, api_key: int, version: int, body: Any) -> None:
    schema = load_request_schema(api_key, version)
    buffer = io.BytesIO()
    if schema.__flexible__:
        header: Any = HeaderV2(request_api_key=api_key, request_api_version=version, correlation_id=7, client_id="raw")
    else:
        header = HeaderV1(request_api_key=api_key, request_api_version=version, correlation_id=7, client_id="raw")
    entity_writer(type(header))(buffer, header)
    entity_writer(schema)(buffer, body)
    sock.sendall(struct.pack(">i", len(buffer.getvalue())) + buffer.getvalue())


def _receive(sock: socket.socket, api_key: int, version: int) -> Any:
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    data = memoryview(_exactly(sock, size))
    schema = load_response_schema(api_key, version)
    skip = 5 if schema.__flexible__ and api_key != kafka.API_VERSIONS else 4  # v1 headers end with a tag section
    body, _ = entity_reader(schema)(data[skip:], 0)
    return body


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def _closed_without_an_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_an_unauthenticated_request_is_refused_by_closing_and_the_broker_serves_on(secure: Secure) -> None:
    metadata = load_request_schema(kafka.METADATA, 12)
    with _connect(secure) as sock:
        _send(sock, kafka.METADATA, 12, metadata(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))  # fmt: skip
        assert _closed_without_an_answer(sock)
    # ApiVersions is answered before authentication, and lists the SASL APIs; a mechanism not enabled is
    # UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the connection closes.
    with _connect(secure) as sock:
        versions = load_request_schema(kafka.API_VERSIONS, 3)
        _send(sock, kafka.API_VERSIONS, 3, versions(client_software_name="raw", client_software_version="1"))
        answer = _receive(sock, kafka.API_VERSIONS, 3)
        assert {k.api_key for k in answer.api_keys} >= {kafka.SASL_HANDSHAKE, kafka.SASL_AUTHENTICATE}
        _send(sock, kafka.SASL_HANDSHAKE, 1, load_request_schema(kafka.SASL_HANDSHAKE, 1)(mechanism="GSSAPI"))
        handshake = _receive(sock, kafka.SASL_HANDSHAKE, 1)
        assert int(handshake.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
        assert tuple(handshake.mechanisms) == ("PLAIN", "SCRAM-SHA-512")
        assert _closed_without_an_answer(sock)
    # After a handshake, a request other than SaslAuthenticate is ILLEGAL_SASL_STATE, then the connection closes.
    with _connect(secure) as sock:
        _send(sock, kafka.SASL_HANDSHAKE, 1, load_request_schema(kafka.SASL_HANDSHAKE, 1)(mechanism="PLAIN"))
        assert int(_receive(sock, kafka.SASL_HANDSHAKE, 1).error_code) == 0
        _send(sock, kafka.SASL_HANDSHAKE, 1, load_request_schema(kafka.SASL_HANDSHAKE, 1)(mechanism="PLAIN"))
        assert int(_receive(sock, kafka.SASL_HANDSHAKE, 1).error_code) == 34  # ILLEGAL_SASL_STATE
        assert _closed_without_an_answer(sock)
    # A wrong PLAIN password: SASL_AUTHENTICATION_FAILED with Kafka's message.
    with _connect(secure) as sock:
        _send(sock, kafka.SASL_HANDSHAKE, 1, load_request_schema(kafka.SASL_HANDSHAKE, 1)(mechanism="PLAIN"))
        _receive(sock, kafka.SASL_HANDSHAKE, 1)
        token = f"\x00{PLAIN_USER}\x00wrong".encode()
        _send(sock, kafka.SASL_AUTHENTICATE, 2, load_request_schema(kafka.SASL_AUTHENTICATE, 2)(auth_bytes=token))
        failed = _receive(sock, kafka.SASL_AUTHENTICATE, 2)
        assert int(failed.error_code) == 58  # SASL_AUTHENTICATION_FAILED
        assert failed.error_message == "Authentication failed: Invalid username or password"
        assert _closed_without_an_answer(sock)
    # The broker serves on: an authenticated client still lists the topics.
    listed = AdminClient(_confluent_config(secure, "PLAIN")).list_topics(timeout=30)
    assert "sec-confluent-plain" in listed.topics
    log = (secure.cluster.data_dir / "logs" / "broker-1.log").read_text()
    assert "kafka_authentication_failed" in log and "wrong" not in log and SCRAM_PASSWORD not in log
