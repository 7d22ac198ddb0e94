"""One connection's SASL step on the Kafka listener (hightide.broker.kafka_security.ConnectionAuthenticator), frame
by frame as a client sends them: ApiVersions, SaslHandshake v1 and SaslAuthenticate (PLAIN, SCRAM-SHA-512), and a
v0 handshake followed by bare tokens, as old clients do. Method: requests written with kio, answers read back
with kio; no socket."""

from __future__ import annotations

import base64
import datetime
import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from hightide.broker.kafka_security import ConnectionAuthenticator, ListenerSecurity
from hightide.core import sasl
from hightide.protocol import kafka

CREDENTIAL = sasl.scram_credential(sasl.SCRAM_SHA_512, "sam-pw", b"salt", 4096)
SECURITY = ListenerSecurity(
    "SASL_PLAINTEXT",
    "SASL_PLAINTEXT",
    (sasl.PLAIN, sasl.SCRAM_SHA_512),
    sasl.Credentials(plain={"pat": "pat-pw"}, scram={(sasl.SCRAM_SHA_512, "sam"): CREDENTIAL}),
)


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _record(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    info = warning = error = _record


def request(api_key: int, version: int, **fields: Any) -> bytes:
    schema = load_request_schema(api_key, version)
    header: Any = (HeaderV2 if schema.__flexible__ else HeaderV1)(
        request_api_key=api_key, request_api_version=version, correlation_id=5, client_id="t"
    )
    buffer = io.BytesIO()
    entity_writer(type(header))(buffer, header)
    entity_writer(schema)(buffer, schema(**fields))
    return buffer.getvalue()


def answer(frame: bytes | None, api_key: int, version: int) -> Any:
    assert frame is not None
    schema = load_response_schema(api_key, version)
    skip = 4 + 4 + (1 if schema.__flexible__ and api_key != kafka.API_VERSIONS else 0)
    body, _ = entity_reader(schema)(memoryview(frame)[skip:], 0)
    return body


def test_api_versions_then_plain_over_saslauthenticate_v2() -> None:
    log = Log()
    auth = ConnectionAuthenticator(SECURITY, log, "p")
    frame, close = auth.receive(request(kafka.API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    assert not close and int(answer(frame, kafka.API_VERSIONS, 3).error_code) == 0
    frame, close = auth.receive(request(kafka.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    handshake = answer(frame, kafka.SASL_HANDSHAKE, 1)
    assert not close and int(handshake.error_code) == 0 and handshake.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    frame, close = auth.receive(request(kafka.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00pat\x00pat-pw"))
    assert not close and int(answer(frame, kafka.SASL_AUTHENTICATE, 2).error_code) == 0
    assert auth.complete
    assert ("kafka_authenticated", {"peer": "p", "mechanism": "PLAIN", "user": "pat"}) in log.events


def test_scram_sha_512_over_saslauthenticate_v1() -> None:
    auth = ConnectionAuthenticator(SECURITY, Log(), "p")
    auth.receive(request(kafka.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512"))
    first = "n,,n=sam,r=nonce-of-the-client"
    frame, close = auth.receive(request(kafka.SASL_AUTHENTICATE, 1, auth_bytes=first.encode()))
    server_first = answer(frame, kafka.SASL_AUTHENTICATE, 1).auth_bytes.decode()
    assert not close and not auth.complete
    final, signature = sasl.scram_client_final(sasl.SCRAM_SHA_512, "sam-pw", first, server_first)
    frame, close = auth.receive(request(kafka.SASL_AUTHENTICATE, 1, auth_bytes=final.encode()))
    last = answer(frame, kafka.SASL_AUTHENTICATE, 1)
    assert not close and int(last.error_code) == 0 and auth.complete
    assert last.auth_bytes == b"v=" + base64.b64encode(signature)  # the server proves it knew the credential


def test_a_v0_handshake_then_bare_tokens() -> None:
    auth = ConnectionAuthenticator(SECURITY, Log(), "p")
    frame, close = auth.receive(request(kafka.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
    assert not close and int(answer(frame, kafka.SASL_HANDSHAKE, 0).error_code) == 0
    frame, close = auth.receive(b"\x00pat\x00pat-pw")  # no Kafka header: the token itself
    assert (frame, close) == (struct.pack(">i", 0), False) and auth.complete


def test_a_wrong_bare_token_closes_without_an_answer() -> None:
    log = Log()
    auth = ConnectionAuthenticator(SECURITY, log, "p")
    auth.receive(request(kafka.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
    assert auth.receive(b"\x00pat\x00wrong") == (None, True)
    assert not auth.complete
    failures = [fields for event, fields in log.events if event == "kafka_authentication_failed"]
    assert failures == [
        {"peer": "p", "mechanism": "PLAIN", "error": "Authentication failed: Invalid username or password"}
    ]


def test_another_request_during_the_exchange_is_illegal_sasl_state_then_closed() -> None:
    auth = ConnectionAuthenticator(SECURITY, Log(), "p")
    auth.receive(request(kafka.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    stray = request(
        kafka.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(0),
        producer_id=-1, producer_epoch=-1,
    )  # fmt: skip
    frame, close = auth.receive(stray)
    assert close and int(answer(frame, kafka.INIT_PRODUCER_ID, 4).error_code) == 34  # ILLEGAL_SASL_STATE
    assert not auth.complete


def test_a_request_before_the_handshake_closes_without_an_answer() -> None:
    auth = ConnectionAuthenticator(SECURITY, Log(), "p")
    stray = request(
        kafka.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(0),
        producer_id=-1, producer_epoch=-1,
    )  # fmt: skip
    assert auth.receive(stray) == (None, True)
