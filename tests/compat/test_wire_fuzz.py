"""The Kafka listener's answers to what a well-behaved client never sends, over raw sockets to a real broker:
ApiVersions at a version not served, API keys not served, oversized and
negative frame sizes, truncated frames and random bytes (hypothesis). Each gets Kafka's answer — an ApiVersions v0
UNSUPPORTED_VERSION, or the connection closed without an answer (Kafka's InvalidRequestException /
InvalidReceiveException) — and the broker keeps serving: a new connection's ApiVersions is answered every time.

Method: blocking sockets with a timeout (a read that gets b"" is a close; one that times out fails the test).
"""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide.protocol import kafka

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


@pytest.mark.parametrize(("api_key", "version"), [(0, 0), (0, 2), (0, 99), (1, 3), (3, 0), (3, 13), (19, 99)])
def test_an_unserved_version_closes_the_connection(bootstrap: str, api_key: int, version: int) -> None:
    with connect(bootstrap) as sock:
        send_frame(sock, header(api_key, version, 1, flexible=False) + b"\x00" * 16)
        assert read_frame(sock) is None
    assert api_versions_v0(bootstrap) == kafka.SERVED


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
