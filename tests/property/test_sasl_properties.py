"""SASL before authentication against arbitrary input (hypothesis): whatever bytes an unauthenticated client sends,
the listener's authentication step answers or refuses (closing), never raises, never authenticates without the
password, and never echoes a secret; SCRAM servers refuse every token that is not a proof of the password.

Method: `ConnectionAuthenticator.receive` (services/broker, no socket needed) and `hightide.core.sasl`'s servers
are fed generated frames: pure garbage, valid request headers with garbage bodies, and token mutations.
"""

from __future__ import annotations

import base64
import contextlib
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.broker.kafka_security import ConnectionAuthenticator, ListenerSecurity
from hightide.core import sasl
from hightide.protocol import kafka

SECRET = "correct horse battery staple"
CREDENTIAL = sasl.scram_credential(sasl.SCRAM_SHA_512, SECRET, b"salt-for-tests", 4096)
CREDENTIALS = sasl.Credentials(plain={"alice": SECRET}, scram={(sasl.SCRAM_SHA_512, "alice"): CREDENTIAL})
SECURITY = ListenerSecurity(
    "SASL_PLAINTEXT", "SASL_PLAINTEXT", (sasl.PLAIN, sasl.SCRAM_SHA_512), CREDENTIALS, None, 1024, 0
)


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def _record(self, event: str, **fields: Any) -> None:
        self.lines.append(f"{event} {fields}")

    warning = info = error = _record


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 3) + b"raw"
    return head + (b"\x00" if flexible else b"")


frames = st.one_of(
    st.binary(max_size=256),
    st.builds(
        lambda key, version, flexible, body: _header(key, version, flexible) + body,
        st.sampled_from([kafka.API_VERSIONS, kafka.SASL_HANDSHAKE, kafka.SASL_AUTHENTICATE, kafka.METADATA, 99]),
        st.integers(-1, 4),
        st.booleans(),
        st.binary(max_size=128),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, min_size=1, max_size=6))
def test_garbage_before_authentication_is_answered_or_closed_never_raised(sequence: list[bytes]) -> None:
    log = _Log()
    auth = ConnectionAuthenticator(SECURITY, log, "peer")
    for frame in sequence:
        answer, close = auth.receive(frame)
        assert answer is None or answer[:4] == struct.pack(">i", len(answer) - 4)
        assert not auth.complete, "no password was sent"
        if close:
            break
    assert all(SECRET not in line for line in log.lines)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_a_scram_server_refuses_any_tokens_that_are_not_a_proof(first: bytes, final: bytes) -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, CREDENTIALS, "server-nonce")
    try:
        server.evaluate(first)
        server.evaluate(final)
    except sasl.AuthenticationFailed as refused:
        assert SECRET not in str(refused)
    assert not server.complete


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 63), st.integers(1, 255))
def test_a_proof_with_any_one_byte_changed_is_refused(position: int, flip: int) -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, CREDENTIALS, "server-nonce")
    first = "n,,n=alice,r=client-nonce"
    server_first = server.evaluate(first.encode()).decode()
    final, _ = sasl.scram_client_final(sasl.SCRAM_SHA_512, SECRET, first, server_first)
    without_proof, proof_text = final.rsplit(",p=", 1)
    proof = bytearray(base64.b64decode(proof_text))
    proof[position] ^= flip
    with contextlib.suppress(sasl.AuthenticationFailed):
        server.evaluate(f"{without_proof},p={base64.b64encode(bytes(proof)).decode()}".encode())
    assert not server.complete
