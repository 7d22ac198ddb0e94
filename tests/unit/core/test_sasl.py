"""SASL's rules on the Kafka listener (hightide.core.sasl): the SCRAM arithmetic against RFC 7677's SCRAM-SHA-256
test vector, Kafka's stored-credential text, PLAIN's and SCRAM's servers with Kafka's failure messages, and one
connection's state machine (Kafka's SaslServerAuthenticator). Method: given credentials and a client's messages,
when the server evaluates them, then its answer or its refusal is Kafka's."""

from __future__ import annotations

import base64

import pytest

from hightide.core import sasl

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SCRAM_REFUSED = "Authentication failed during authentication due to invalid credentials with SASL mechanism "


def rfc_credentials() -> sasl.Credentials:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_256, "pencil", RFC_SALT, 4096)
    return sasl.Credentials(scram={(sasl.SCRAM_SHA_256, "user"): credential})


def test_the_rfc_7677_exchange_is_served_byte_for_byte() -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, rfc_credentials(), RFC_SERVER_NONCE)
    assert server.evaluate(RFC_CLIENT_FIRST.encode()).decode() == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL.encode()).decode() == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_the_client_side_computes_the_rfc_7677_proof_and_server_signature() -> None:
    final, signature = sasl.scram_client_final(sasl.SCRAM_SHA_256, "pencil", RFC_CLIENT_FIRST, RFC_SERVER_FIRST)
    assert final == RFC_CLIENT_FINAL
    assert b"v=" + base64.b64encode(signature) == RFC_SERVER_FINAL.encode()


def test_a_wrong_proof_is_kafkas_one_scram_refusal() -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, rfc_credentials(), RFC_SERVER_NONCE)
    server.evaluate(RFC_CLIENT_FIRST.encode())
    final, _ = sasl.scram_client_final(sasl.SCRAM_SHA_256, "pencil!", RFC_CLIENT_FIRST, RFC_SERVER_FIRST)
    with pytest.raises(sasl.AuthenticationFailed) as refused:
        server.evaluate(final.encode())
    assert str(refused.value) == SCRAM_REFUSED + "SCRAM-SHA-256"
    assert "pencil" not in str(refused.value)
    assert not server.complete


def test_an_unknown_user_is_refused_at_the_first_message_with_the_same_words() -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, rfc_credentials(), RFC_SERVER_NONCE)
    with pytest.raises(sasl.AuthenticationFailed, match="^" + SCRAM_REFUSED + "SCRAM-SHA-256$"):
        server.evaluate(b"n,,n=mallory,r=abc")


def test_a_credential_of_the_other_hash_does_not_serve_this_mechanism() -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, rfc_credentials(), RFC_SERVER_NONCE)
    with pytest.raises(sasl.AuthenticationFailed):
        server.evaluate(RFC_CLIENT_FIRST.encode())


def test_a_replayed_nonce_or_a_channel_binding_not_echoed_is_refused() -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, rfc_credentials(), "another-server-nonce")
    server.evaluate(RFC_CLIENT_FIRST.encode())
    with pytest.raises(sasl.AuthenticationFailed):
        server.evaluate(RFC_CLIENT_FINAL.encode())  # the RFC's server nonce, not this exchange's
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, rfc_credentials(), RFC_SERVER_NONCE)
    server.evaluate(RFC_CLIENT_FIRST.encode())
    with pytest.raises(sasl.AuthenticationFailed):
        server.evaluate(RFC_CLIENT_FINAL.replace("c=biws", "c=eSws").encode())


@pytest.mark.parametrize("garbage", [b"", b"y,,n=user,r=abc", b"n,,n=user", b"\xff\xfe", b"n,,n=us,er,r=x"])
def test_a_malformed_client_first_message_is_refused(garbage: bytes) -> None:
    server = sasl.ScramServer(sasl.SCRAM_SHA_256, rfc_credentials(), RFC_SERVER_NONCE)
    with pytest.raises(sasl.AuthenticationFailed):
        server.evaluate(garbage)


def test_an_escaped_sasl_name_names_the_user_with_comma_and_equals() -> None:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_512, "pw", b"salt", 4096)
    credentials = sasl.Credentials(scram={(sasl.SCRAM_SHA_512, "a,b=c"): credential})
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, credentials, "srv")
    first = "n,,n=a=2Cb=3Dc,r=cli"
    server_first = server.evaluate(first.encode()).decode()
    final, signature = sasl.scram_client_final(sasl.SCRAM_SHA_512, "pw", first, server_first)
    assert server.evaluate(final.encode()) == b"v=" + base64.b64encode(signature)
    assert server.username == "a,b=c"


def test_a_credential_round_trips_through_kafkas_text() -> None:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_512, "secret", b"0123456789abcdef", 8192)
    text = credential.to_text()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=") and text.endswith(",iterations=8192")
    assert sasl.ScramCredential.from_text(text) == credential
    assert len(credential.stored_key) == len(credential.server_key) == 64


def test_iterations_below_kafkas_minimum_are_refused_when_generating() -> None:
    with pytest.raises(ValueError, match="between 4096 and 16384"):
        sasl.scram_credential(sasl.SCRAM_SHA_256, "pw", b"salt", 4095)


def test_a_credentials_file_round_trips_and_names_a_bad_line_without_echoing_it() -> None:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_256, "pw", b"salt", 4096)
    table = {(sasl.SCRAM_SHA_256, "alice"): credential}
    text = "# users\n\n" + sasl.credentials_file_text(table)
    assert sasl.parse_credentials_file(text) == table
    with pytest.raises(ValueError, match=r"^line 2: ") as bad:
        sasl.parse_credentials_file(text.splitlines()[2] + "\nSCRAM-SHA-256 bob hunter2\n")
    assert "hunter2" not in str(bad.value)


# -- PLAIN ----------------------------------------------------------------------------------------------------------


def plain(*, users: dict[str, str] | None = None) -> sasl.PlainServer:
    scram = {(sasl.SCRAM_SHA_512, "carol"): sasl.scram_credential(sasl.SCRAM_SHA_512, "carol-pw", b"s", 4096)}
    return sasl.PlainServer(sasl.Credentials(plain=users or {"alice": "alice-pw"}, scram=scram))


def test_plain_accepts_a_jaas_user_and_a_scram_user_by_password() -> None:
    server = plain()
    assert server.evaluate(b"\x00alice\x00alice-pw") == b"" and server.complete and server.username == "alice"
    server = plain()
    server.evaluate(b"carol\x00carol\x00carol-pw")  # an authorization id equal to the user is allowed
    assert server.complete and server.username == "carol"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00nobody\x00x", "Authentication failed: Invalid username or password"),
        (b"\x00carol\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00\x00pw", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"alice-pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (
            b"bob\x00alice\x00alice-pw",
            "Authentication failed: Client requested an authorization id that is different from username",
        ),
    ],
)
def test_plain_refuses_with_kafkas_messages(token: bytes, message: str) -> None:
    server = plain()
    with pytest.raises(sasl.AuthenticationFailed) as refused:
        server.evaluate(token)
    assert str(refused.value) == message and not server.complete


# -- one connection -------------------------------------------------------------------------------------------------


def authenticator(*mechanisms: str) -> sasl.SaslAuthenticator:
    return sasl.SaslAuthenticator(mechanisms or (sasl.PLAIN,), sasl.Credentials(plain={"alice": "alice-pw"}))


def test_api_versions_then_handshake_then_token_completes() -> None:
    auth = authenticator()
    auth.on_api_versions()
    assert auth.on_handshake("PLAIN", 1, "n") and auth.state is sasl.SaslState.AUTHENTICATE and not auth.raw_tokens
    assert auth.on_token(b"\x00alice\x00alice-pw") == b""
    assert auth.complete and auth.username == "alice"


def test_a_v0_handshake_switches_to_raw_tokens() -> None:
    auth = authenticator()
    assert auth.on_handshake("PLAIN", 0, "n") and auth.raw_tokens


def test_a_request_before_authentication_is_illegal_and_fails_the_connection() -> None:
    auth = authenticator()
    with pytest.raises(
        sasl.IllegalSaslState, match=r"^Unexpected Kafka request of type METADATA during SASL handshake"
    ):
        auth.on_other_request("METADATA")
    assert auth.state is sasl.SaslState.FAILED
    auth = authenticator()
    auth.on_handshake("PLAIN", 1, "n")
    with pytest.raises(sasl.IllegalSaslState, match="during SASL authentication"):
        auth.on_other_request("PRODUCE")


def test_a_second_api_versions_or_a_token_before_the_handshake_is_illegal() -> None:
    auth = authenticator()
    auth.on_api_versions()
    with pytest.raises(sasl.IllegalSaslState):
        auth.on_api_versions()
    with pytest.raises(sasl.IllegalSaslState):
        authenticator().on_token(b"\x00alice\x00alice-pw")


def test_a_mechanism_not_enabled_fails_the_connection() -> None:
    auth = authenticator(sasl.SCRAM_SHA_512)
    assert not auth.on_handshake("PLAIN", 1, "n")
    assert auth.state is sasl.SaslState.FAILED


def test_a_wrong_password_fails_the_connection_and_a_further_token_is_illegal() -> None:
    auth = authenticator()
    auth.on_handshake("PLAIN", 1, "n")
    with pytest.raises(sasl.AuthenticationFailed):
        auth.on_token(b"\x00alice\x00nope")
    assert auth.state is sasl.SaslState.FAILED
    with pytest.raises(sasl.IllegalSaslState):
        auth.on_token(b"\x00alice\x00alice-pw")


def test_scram_through_the_connection_state_machine() -> None:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_512, "bob-pw", b"pepper", 4096)
    auth = sasl.SaslAuthenticator(
        (sasl.PLAIN, sasl.SCRAM_SHA_512), sasl.Credentials(scram={(sasl.SCRAM_SHA_512, "bob"): credential})
    )
    assert auth.on_handshake(sasl.SCRAM_SHA_512, 1, "server-nonce")
    first = "n,,n=bob,r=client-nonce"
    server_first = auth.on_token(first.encode()).decode()
    assert server_first.startswith("r=client-nonceserver-nonce,s=") and not auth.complete
    final, signature = sasl.scram_client_final(sasl.SCRAM_SHA_512, "bob-pw", first, server_first)
    assert auth.on_token(final.encode()) == b"v=" + base64.b64encode(signature)
    assert auth.complete and auth.username == "bob"
