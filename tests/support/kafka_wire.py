"""Hand-built Kafka requests for the compatibility tier: a kio request (header v1, or v2 when flexible) sent to one
listener over a socket, and its decoded response. For APIs none of the Python clients sends, and for exact checks
of what one broker answers."""

from __future__ import annotations

import io
import socket
import struct
import sys
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from hightide.protocol import kafka

TIMEOUT_S = 30


def nested(api_key: int, version: int, name: str) -> type[Any]:
    """A nested entity of a request schema (e.g. a topic of a request)."""
    found: type[Any] = getattr(sys.modules[load_request_schema(api_key, version).__module__], name)
    return found


def call(address: str, api_key: int, version: int, **fields: Any) -> Any:
    """Send one request built by `kafka.make` from `fields` to `address` (host:port); its decoded response."""
    schema = load_request_schema(api_key, version)
    flexible = bool(schema.__flexible__)
    buffer = io.BytesIO()
    header_type = RequestHeaderV2 if flexible else RequestHeaderV1
    head = header_type(request_api_key=api_key, request_api_version=version, correlation_id=9, client_id="hand")  # type: ignore[arg-type]
    entity_writer(header_type)(buffer, head)
    entity_writer(schema)(buffer, kafka.make(schema, **fields))
    data = buffer.getvalue()
    host, port = address.rsplit(":", maxsplit=1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(data)) + data)
        size = struct.unpack(">i", _read(sock, 4))[0]
        frame = memoryview(_read(sock, size))
    response_schema = load_response_schema(api_key, version)
    response_header = ResponseHeaderV1 if response_schema.__flexible__ else ResponseHeaderV0
    header, offset = entity_reader(response_header)(frame, 0)
    assert header.correlation_id == 9
    body, _ = entity_reader(response_schema)(frame[offset:], 0)
    return body


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data
