"""The NATS bodies: what crosses a process boundary is exactly what was sent, and anything else is refused.

Method: round trips of valid bodies, then malformed inputs of every kind (not msgpack, not a map, a wrong type, an
unknown field, out-of-range numbers, an oversized list), each of which must raise the one boundary exception with
INVALID_REQUEST and a message naming the field.
"""

from __future__ import annotations

import msgpack
import pytest

from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi, ControllerApi


def _produce(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "acks": -1,
        "timeout_ms": 1000,
        "partitions": [{"topic": "orders", "partition": 0, "records": b"x"}],
    }
    body.update(overrides)
    return body


def test_a_valid_body_round_trips() -> None:
    request = wire.decode(wire.ProduceRequest, msgpack.packb(_produce()))
    assert wire.decode(wire.ProduceRequest, wire.encode(request)) == request
    assert request.partitions[0].records == b"x"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"\xc1", "msgpack"),
        (msgpack.packb([1, 2]), "map"),
        (msgpack.packb(_produce(acks="1")), "acks"),
        (msgpack.packb(_produce(acks=2)), "acks"),
        (msgpack.packb(_produce(timeout_ms=-1)), "timeout_ms"),
        (msgpack.packb(_produce(timeout_ms=2**31)), "timeout_ms"),
        (msgpack.packb(_produce(extra=1)), "extra"),
        (msgpack.packb(_produce(partitions=[])), "partitions"),
        (msgpack.packb(_produce(partitions=[{"topic": "a/b", "partition": 0, "records": b"x"}])), "topic"),
        (msgpack.packb(_produce(partitions=[{"topic": "t", "partition": -1, "records": b"x"}])), "partition"),
    ],
)
def test_a_malformed_body_is_one_invalid_request_naming_the_problem(data: bytes, field: str) -> None:
    with pytest.raises(wire.InvalidRequest) as caught:
        wire.decode(wire.ProduceRequest, data)
    assert caught.value.error_code is ErrorCode.INVALID_REQUEST
    assert field in str(caught.value)


def test_an_unknown_error_number_reads_as_unknown_server_error() -> None:
    assert wire.error_code_of(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert wire.error_code_of(31999) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_every_api_has_its_request_and_response_body() -> None:
    apis = {str(api) for api in BrokerApi} | {str(api) for api in ControllerApi}
    assert set(wire.REQUEST_OF) == set(wire.RESPONSE_OF) == apis
    assert all(issubclass(kind, wire.Response) for kind in wire.RESPONSE_OF.values())


# -- incremental fetch sessions (KIP-227, the follower fetch path) -------------------------------------------------


def test_a_fetch_names_a_partition_unless_it_is_incremental() -> None:
    """Only an incremental fetch (session epoch > 0) may name no partition: its session holds them."""
    for epoch in (-1, 0):
        with pytest.raises(wire.InvalidRequest) as caught:
            wire.decode(wire.FetchRequest, msgpack.packb({"replica_id": 2, "partitions": [], "session_epoch": epoch}))
        assert "names at least one partition" in str(caught.value)
    incremental = {"replica_id": 2, "partitions": [], "session_id": 7, "session_epoch": 3}
    assert wire.decode(wire.FetchRequest, msgpack.packb(incremental)).session_id == 7
