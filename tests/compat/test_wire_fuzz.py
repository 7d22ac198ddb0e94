"""The Kafka listener's answers to what a well-behaved client never sends, over raw sockets to a real broker:
ApiVersions at a version not served, versions not served of served APIs, API keys not served, oversized and
negative frame sizes, truncated frames, random bytes and mutated valid requests of the group, config and
reassignment APIs (hypothesis). Each gets its answer — UNSUPPORTED_VERSION (ApiVersions' at v0; another API's at
its own version where that response has a top-level error), or the connection closed without an answer (Kafka's
InvalidRequestException / InvalidReceiveException), logged and a KafkaConnectionRefused event — and the broker
keeps serving: a new connection's ApiVersions is answered every time.

Method: blocking sockets with a timeout (a read that gets b"" is a close; one that times out fails the test).
"""

from __future__ import annotations

import dataclasses
import io
import json
import socket
import struct
import typing
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from hightide.client.local_cluster import LocalCluster
from hightide.protocol import kafka
from support.cluster_cli import hightide, wait_for

pytestmark = pytest.mark.slow

GROUP_API_KEYS = (8, 9, 10, 11, 12, 13, 14, 15, 16, 42)  # OffsetCommit/Fetch, FindCoordinator ... DeleteGroups
ADMIN_API_KEYS = (44, 45, 46)  # IncrementalAlterConfigs, Alter- and ListPartitionReassignments
UNSERVED_API_KEYS = (4, 57, 9999, -1)  # LeaderAndIsr (inter-broker), UpdateFeatures, and keys Kafka has not
TIMEOUT_S = 15


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.split(",", maxsplit=1)[0].split(":")
    return socket.create_connection((host, int(port)), timeout=TIMEOUT_S)


def header(api_key: int, version: int, correlation_id: int, *, flexible: bool) -> bytes:
    client_id = b"fuzz"
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return head + (b"\x00" if flexible else b"")


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    prefix = read_exactly(sock, 4)
    if prefix is None:
        return None
    return read_exactly(sock, struct.unpack(">i", prefix)[0])


def read_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def answerless(payload: bytes) -> bool:
    """A Produce with acks=0 that parses: Kafka sends no answer to it."""
    try:
        request = kafka.parse_request(payload)
    except kafka.UnservedRequest:
        return False
    return request.api_key == kafka.PRODUCE and request.body is not None and request.body.acks == 0


def api_versions_v0(bootstrap: str) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 on a new connection: {api key: (min, max)} (the broker is serving)."""
    with connect(bootstrap) as sock:
        send_frame(sock, header(18, 0, 7, flexible=False))
        frame = read_frame(sock)
    assert frame is not None
    correlation_id, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation_id, error) == (7, 0)
    return {key: (lo, hi) for key, lo, hi in (struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count))}


def test_api_versions_advertises_the_group_and_admin_apis(bootstrap: str) -> None:
    advertised = api_versions_v0(bootstrap)
    assert advertised == kafka.SERVED
    assert set(GROUP_API_KEYS) | set(ADMIN_API_KEYS) <= set(advertised)
    assert advertised[10] == (0, 4)  # FindCoordinator up to v4 (batched keys)
    assert advertised[9] == (1, 8)  # OffsetFetch up to v8 (batched groups)


def test_api_versions_at_an_unserved_version_is_unsupported_version_at_v0(bootstrap: str) -> None:
    with connect(bootstrap) as sock:
        send_frame(sock, header(18, 99, 41, flexible=True) + b"\x00garbage")
        frame = read_frame(sock)
        assert frame is not None
        # Response header v0 and an ApiVersions v0 body: UNSUPPORTED_VERSION (35) and the range served.
        assert struct.unpack(">ihihhh", frame) == (41, 35, 1, 18, 0, 3)
        send_frame(sock, header(18, 0, 42, flexible=False))  # the same connection goes on
        again = read_frame(sock)
    assert again is not None
    assert struct.unpack_from(">ih", again) == (42, 0)


@pytest.mark.parametrize("api_key", UNSERVED_API_KEYS)
def test_an_unserved_api_key_closes_the_connection_and_the_broker_serves(bootstrap: str, api_key: int) -> None:
    with connect(bootstrap) as sock:
        send_frame(sock, header(api_key, 0, 1, flexible=False))
        assert read_frame(sock) is None
    assert api_versions_v0(bootstrap) == kafka.SERVED


# Versions not served whose response has no top-level error (Produce, CreateTopics, OffsetFetch v9, FindCoordinator
# v5) or that no Kafka release defined (Heartbeat v5, Fetch v3 is before kio's first): closed without an answer.
@pytest.mark.parametrize(
    ("api_key", "version"), [(0, 0), (0, 2), (0, 99), (1, 3), (3, 0), (19, 99), (9, 9), (10, 5), (12, 5)]
)
def test_an_unserved_version_closes_the_connection(bootstrap: str, api_key: int, version: int) -> None:
    with connect(bootstrap) as sock:
        send_frame(sock, header(api_key, version, 1, flexible=False) + b"\x00" * 16)
        assert read_frame(sock) is None
    assert api_versions_v0(bootstrap) == kafka.SERVED


@pytest.mark.parametrize(("api_key", "version"), [(1, 13), (3, 13), (22, 5), (60, 2)])
def test_an_unserved_version_of_a_served_api_is_answered_unsupported_version(
    bootstrap: str, api_key: int, version: int
) -> None:
    """The lead's decision (issue 15): where the version's response has a top-level error, UNSUPPORTED_VERSION (35)
    at that version, and the connection goes on."""
    if kafka.SERVED[api_key][0] <= version <= kafka.SERVED[api_key][1]:
        pytest.skip(f"api key {api_key} version {version} is served now")
    schema = load_response_schema(api_key, version)
    flexible = bool(schema.__flexible__)
    with connect(bootstrap) as sock:
        send_frame(sock, header(api_key, version, 77, flexible=flexible) + b"\x00" * 16)
        frame = read_frame(sock)
        assert frame is not None
        assert struct.unpack_from(">i", frame)[0] == 77
        body, _ = entity_reader(schema)(memoryview(frame)[5 if flexible else 4 :], 0)
        assert int(body.error_code) == 35
        send_frame(sock, header(18, 0, 78, flexible=False))  # the same connection goes on
        again = read_frame(sock)
    assert again is not None
    assert struct.unpack_from(">ih", again) == (78, 0)


@pytest.mark.parametrize("size", [kafka.SOCKET_REQUEST_MAX_BYTES_DEFAULT + 1, 2**31 - 1, -1, -(2**31)])
def test_an_oversized_or_negative_frame_size_closes_the_connection(bootstrap: str, size: int) -> None:
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", size) + b"\x00" * 64)
        assert read_frame(sock) is None
    assert api_versions_v0(bootstrap) == kafka.SERVED


def test_a_malformed_metadata_body_closes_the_connection(bootstrap: str) -> None:
    with connect(bootstrap) as sock:
        # Metadata v12 whose topic array claims 1000 entries and holds none.
        send_frame(sock, header(3, 12, 5, flexible=True) + b"\xe9\x07")
        assert read_frame(sock) is None
    assert api_versions_v0(bootstrap) == kafka.SERVED


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    api_key=st.sampled_from([*kafka.SERVED, *UNSERVED_API_KEYS, 99]),
    version=st.integers(-2, 20),
    body=st.binary(max_size=200),
    cut=st.integers(0, 200),
    flexible=st.booleans(),
)
def test_fuzzed_and_truncated_frames_leave_the_broker_serving(
    bootstrap: str, api_key: int, version: int, body: bytes, cut: int, flexible: bool
) -> None:
    payload = header(api_key, version, 3, flexible=flexible) + body
    with connect(bootstrap) as sock:
        if cut < len(payload):  # truncated: the size promises more than is sent, then the client goes away
            sock.sendall(struct.pack(">i", len(payload)) + payload[:cut])
        elif not answerless(payload):
            send_frame(sock, payload)
            frame = read_frame(sock)
            # Either an answer to this request (its correlation id) or the connection closed: never anything else.
            assert frame is None or struct.unpack_from(">i", frame)[0] == 3
    assert api_versions_v0(bootstrap) == kafka.SERVED


# -- issue 15: templates of the group, config and reassignment APIs, every version served, mutated ------------------

NEW_API_KEYS = (*GROUP_API_KEYS, *ADMIN_API_KEYS)


def template(api_key: int, version: int, text: str = "t") -> bytes:
    """A valid request of `api_key` at `version` (header included): kio's schema, every field zero-valued but its
    strings, `text`."""
    schema = load_request_schema(api_key, version)
    strings = {
        f.name: text
        for f in dataclasses.fields(schema)
        if f.metadata.get("kafka_type") == "string" and "None" not in str(f.type)
    }
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, kafka.make(schema, **strings))
    return header(api_key, version, 3, flexible=bool(schema.__flexible__)) + buffer.getvalue()


VERSIONS = [(key, version) for key in NEW_API_KEYS for version in range(kafka.SERVED[key][0], kafka.SERVED[key][1] + 1)]
TEMPLATES = [template(key, version) for key, version in VERSIONS]


def test_every_template_is_answered(bootstrap: str) -> None:
    """Unmutated, each template parses and gets an answer with its correlation id (an error is fine: a zero-valued
    request names no group a coordinator holds)."""
    with connect(bootstrap) as sock:
        for payload in TEMPLATES:
            send_frame(sock, payload)
            frame = read_frame(sock)
            assert frame is not None, payload[:4].hex()
            assert struct.unpack_from(">i", frame)[0] == 3


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    index=st.integers(0, len(VERSIONS) - 1),
    edits=st.lists(st.tuples(st.integers(8, 400), st.integers(0, 255)), max_size=4),
    cut=st.integers(8, 400),
)
def test_mutated_templates_are_answered_or_closed_and_the_broker_serves(
    bootstrap: str, index: int, edits: list[tuple[int, int]], cut: int
) -> None:
    # Each example's strings (its group id) are its own: a mutated JoinGroup that joins does not make a later
    # example's join wait for its rebalance.
    payload = bytearray(template(*VERSIONS[index], text=uuid.uuid4().hex[:8]))
    for position, value in edits:
        if position < len(payload):
            payload[position] = value
    payload = payload[:cut]
    with connect(bootstrap) as sock:
        send_frame(sock, bytes(payload))
        frame = read_frame(sock)
        assert frame is None or struct.unpack_from(">i", frame)[0] == 3
    assert api_versions_v0(bootstrap) == kafka.SERVED


def filled(schema: type[Any], text: str) -> Any:
    """An entity of `schema` with content: one element in every array (entities filled likewise), `text` in every
    string (a topic name, a group id, ...), 1 in every number array, -1 in acks (so a Produce is answered)."""
    hints = typing.get_type_hints(schema)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(schema):
        kind, kafka_type = hints[field.name], field.metadata.get("kafka_type", "")
        if typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0]
            if dataclasses.is_dataclass(item):
                values[field.name] = (filled(item, text),)  # type: ignore[arg-type]
            elif kafka_type == "string":
                values[field.name] = (text,)
            elif kafka_type.startswith("int"):
                values[field.name] = (1,)
        elif kafka_type == "string":
            values[field.name] = text
        elif kafka_type == "bytes":
            values[field.name] = b""
        elif field.name == "acks":
            values[field.name] = -1
    return kafka.make(schema, **values)


def filled_request(api_key: int, version: int, text: str) -> bytes:
    schema = load_request_schema(api_key, version)
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, filled(schema, text))
    return header(api_key, version, 3, flexible=bool(schema.__flexible__)) + buffer.getvalue()


SASL_API_KEYS = (17, 36)
SERVED_VERSIONS = [
    (key, version)
    for key, (lo, hi) in sorted(kafka.SERVED.items())
    if key not in SASL_API_KEYS
    for version in range(lo, hi + 1)
]


@pytest.mark.parametrize("name", ["no spaces!", "x" * 250, ""])
def test_every_served_version_naming_an_illegal_topic_is_answered(bootstrap: str, name: str) -> None:
    """A request that parses is answered whatever it names: a topic name outside Kafka's legal characters or length
    (every string of the request is `name`: its topics, groups, members) gets Kafka's per-topic error, never a
    dropped connection (the listener used to close it when its internal request refused the name)."""
    closed = []
    for key, version in SERVED_VERSIONS:
        with connect(bootstrap) as sock:
            send_frame(sock, filled_request(key, version, name))
            frame = read_frame(sock)
        if frame is None:
            closed.append((key, version))
        else:
            assert struct.unpack_from(">i", frame)[0] == 3
    assert closed == []
    assert api_versions_v0(bootstrap) == kafka.SERVED


def test_a_refused_connection_is_a_broker_event(cluster: LocalCluster, bootstrap: str) -> None:
    with connect(bootstrap) as sock:
        send_frame(sock, header(9999, 0, 1, flexible=False))
        assert read_frame(sock) is None

    def refused() -> list[dict[str, Any]]:
        result = hightide(cluster.data_dir, "events", "tail", "--type", "KafkaConnectionRefused", "--format", "json")
        assert result.returncode == 0, result.stderr
        found = [json.loads(line)["event"] for line in result.stdout.splitlines() if line.strip()]
        return [e for e in found if e["api_key"] == 9999]

    found = wait_for(refused, 30, "a KafkaConnectionRefused event")
    assert found[0]["reason"] == "unknown_api"
    assert found[0]["peer"].startswith("('127.0.0.1'")
