"""SaslHandshake (key 17) and SaslAuthenticate (key 36) as the Kafka listener speaks them (issue 15, security).

Room: libs/protocol (vocabulary; no I/O, no rules). This module owns the two SASL messages' fields and answers
(kio's schemas, as `hightide.protocol.kafka` uses them) and the bare token frames that follow a v0 handshake (a
4-byte size and the token, no Kafka header: Kafka's `enableKafkaSaslAuthenticateHeaders(false)`). What a token
means and which state accepts it is `hightide.core.sasl`'s.
"""

from __future__ import annotations

import re
from typing import Any

from kio.index import load_request_schema

from hightide.protocol import kafka
from hightide.protocol.errors import ErrorCode

AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"  # KafkaApis' words


def api_name(api_key: int, api_version: int) -> str:
    """Kafka's ApiKeys name of a request (METADATA, OFFSET_FOR_LEADER_EPOCH), for Kafka's SASL state messages."""
    try:
        schema = load_request_schema(api_key, api_version)
    except (KeyError, ValueError, ModuleNotFoundError):
        return f"api key {api_key}"
    stem = schema.__name__.removesuffix("Request")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", stem).upper()


def handshake_mechanism(request: kafka.Request) -> str:
    assert request.api_key == kafka.SASL_HANDSHAKE
    mechanism: str = request.body.mechanism
    return mechanism


def handshake_response(request: kafka.Request, error: ErrorCode, mechanisms: tuple[str, ...]) -> Any:
    """Kafka answers every handshake with the listener's enabled mechanisms, accepted or not."""
    return kafka.make(kafka.response_schema(request), error_code=error, mechanisms=mechanisms)


def authenticate_token(request: kafka.Request) -> bytes:
    assert request.api_key == kafka.SASL_AUTHENTICATE
    return bytes(request.body.auth_bytes)


def authenticate_response(
    request: kafka.Request, error: ErrorCode, message: str | None, auth_bytes: bytes = b"", session_lifetime_ms: int = 0
) -> Any:
    return kafka.make(
        kafka.response_schema(request),
        error_code=error,
        error_message=message,
        auth_bytes=auth_bytes,
        session_lifetime=session_lifetime_ms,
    )


def illegal_state_response(request: kafka.Request) -> Any:
    """A SASL request on a listener without SASL, or after authentication: ILLEGAL_SASL_STATE, as KafkaApis."""
    if request.api_key == kafka.SASL_HANDSHAKE:
        return handshake_response(request, ErrorCode.ILLEGAL_SASL_STATE, ())
    return authenticate_response(request, ErrorCode.ILLEGAL_SASL_STATE, AFTER_AUTHENTICATION)


def token_frame(token: bytes) -> bytes:
    """A bare SASL token as a v0 handshake's exchange sends it: its size, then the token."""
    return kafka.SIZE.pack(len(token)) + token
