"""SASL on the Kafka listener: PLAIN and SCRAM-SHA-256/512 as Kafka's broker serves them (issue 15).

Room: libs/core (rules; pure). This module owns the SCRAM arithmetic (RFC 5802 / RFC 7677, as Kafka's
`ScramFormatter`), the stored credentials (`ScramCredential`, Kafka's `salt=...,stored_key=...,server_key=...,
iterations=...` text), the credentials file's lines, the two mechanisms' servers (Kafka's `PlainSaslServer` and
`ScramSaslServer`, with Kafka's failure messages) and one connection's authentication state machine (Kafka's
`SaslServerAuthenticator`). It never reads a socket, a file or a clock, and never draws a random number: the
SCRAM server nonce and a new credential's salt are passed in.

One connection's states (Kafka's `SaslState`), what each accepts, and where it goes:

| state                   | accepts                                   | then                                        |
| ----------------------- | ----------------------------------------- | ------------------------------------------- |
| HANDSHAKE_OR_VERSIONS   | ApiVersions (answered)                    | HANDSHAKE                                   |
|                         | SaslHandshake, mechanism enabled          | AUTHENTICATE                                |
| HANDSHAKE               | SaslHandshake, mechanism enabled          | AUTHENTICATE                                |
| either of the two above | SaslHandshake, mechanism not enabled      | FAILED (UNSUPPORTED_SASL_MECHANISM, closed) |
|                         | any other request                         | FAILED (closed, no answer)                  |
| AUTHENTICATE            | a token (SaslAuthenticate, or a raw token | AUTHENTICATE, COMPLETE, or FAILED           |
|                         | after a v0 handshake)                     | (SASL_AUTHENTICATION_FAILED, closed)        |
|                         | any other request                         | FAILED (ILLEGAL_SASL_STATE, closed)         |
| COMPLETE                | every request, served as usual            |                                             |

Passwords are never part of an exception's message, so nothing that logs a failure can log a secret.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
SCRAM_MECHANISMS: Final = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS: Final = (PLAIN, *SCRAM_MECHANISMS)
SCRAM_ITERATIONS_MIN: Final = 4096  # Kafka's ScramMechanism.minIterations, for both hashes
SCRAM_ITERATIONS_MAX: Final = 16384  # Kafka's ScramMechanism.maxIterations (kafka-configs refuses more)
_HASH: Final = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}

# Kafka's ScramMessages patterns: a SASL name is printable ASCII but ',' and '=' (those are escaped as =2C, =3D).
_SASLNAME: Final = r"(?:[\x21-\x2B\x2D-\x3C\x3E-\x7E]|=2C|=3D)+"
_PRINTABLE: Final = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64: Final = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS: Final = r"(?:,[A-Za-z]+=[\x01-\x2B\x2D-\x7F]*)*"
_CLIENT_FIRST: Final = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"{_EXTENSIONS})"
)
_CLIENT_FINAL: Final = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})"
)
_SERVER_FIRST: Final = re.compile(rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+)")


class AuthenticationFailed(Exception):
    """A client's credentials or SASL messages were refused: SASL_AUTHENTICATION_FAILED with Kafka's message."""


class IllegalSaslState(Exception):
    """A request the connection's SASL state does not accept (Kafka's IllegalSaslStateException)."""


# -- SCRAM arithmetic (Kafka's ScramFormatter) --------------------------------------------------------------------


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _HASH[mechanism]).digest()


def _hash(mechanism: str, message: bytes) -> bytes:
    return hashlib.new(_HASH[mechanism], message).digest()


def _xor(first: bytes, second: bytes) -> bytes:
    assert len(first) == len(second), "SCRAM XORs values of one hash's length"
    return bytes(a ^ b for a, b in zip(first, second, strict=True))


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, i): PBKDF2 with the mechanism's HMAC. Kafka normalizes a password as its
    UTF-8 bytes (no SASLprep)."""
    return hashlib.pbkdf2_hmac(_HASH[mechanism], password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a broker stores for a SCRAM user: never the password, only what verifies a proof of it."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's `ScramCredentialUtils.credentialToString` format."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """The credential from Kafka's text (ValueError naming what is wrong, never echoing the text)."""
        fields: dict[str, str] = {}
        for item in text.strip().split(","):
            name, sep, value = item.partition("=")
            if not sep:
                raise ValueError("a SCRAM credential is salt=...,stored_key=...,server_key=...,iterations=N")
            fields[name] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("a SCRAM credential has exactly salt, stored_key, server_key and iterations")
        try:
            decoded = {k: base64.b64decode(fields[k], validate=True) for k in ("salt", "stored_key", "server_key")}
        except binascii.Error:
            raise ValueError("a SCRAM credential's salt and keys are base64") from None
        if not fields["iterations"].isdigit():
            raise ValueError("a SCRAM credential's iterations is a number")
        return cls(decoded["salt"], decoded["stored_key"], decoded["server_key"], int(fields["iterations"]))


def scram_credential(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    """Kafka's `ScramFormatter.generateCredential`: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key")."""
    if mechanism not in _HASH:
        raise ValueError(f"unknown SCRAM mechanism {mechanism}")
    if not SCRAM_ITERATIONS_MIN <= iterations <= SCRAM_ITERATIONS_MAX:
        raise ValueError(f"iterations must be between {SCRAM_ITERATIONS_MIN} and {SCRAM_ITERATIONS_MAX}")
    if not salt:
        raise ValueError("a SCRAM salt is not empty")
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, _hash(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)


def scram_client_final(mechanism: str, password: str, client_first: str, server_first: str) -> tuple[str, bytes]:
    """A client's side of the exchange (for tests and tools): the client-final message answering `server_first`
    for `client_first`, and the server signature the client must then receive."""
    first = _CLIENT_FIRST.fullmatch(client_first)
    server = _SERVER_FIRST.fullmatch(server_first)
    assert first is not None and server is not None, "well-formed SCRAM messages"
    salted = salted_password(mechanism, password, base64.b64decode(server["salt"]), int(server["iterations"]))
    client_key = _hmac(mechanism, salted, b"Client Key")
    without_proof = f"c={base64.b64encode(first['gs2'].encode()).decode()},r={server['nonce']}"
    auth_message = f"{first['bare']},{server_first},{without_proof}".encode()
    signature = _hmac(mechanism, _hash(mechanism, client_key), auth_message)
    proof = base64.b64encode(_xor(client_key, signature)).decode()
    server_signature = _hmac(mechanism, _hmac(mechanism, salted, b"Server Key"), auth_message)
    return f"{without_proof},p={proof}", server_signature


# -- the users a listener knows -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Credentials:
    """PLAIN users (JAAS `user_<name>="<password>"` entries) and SCRAM credentials by (mechanism, user). A PLAIN
    user not in `plain` is checked against the user's SCRAM credentials, so one credentials file (hashes only)
    serves both mechanisms."""

    plain: Mapping[str, str] = field(default_factory=dict)
    scram: Mapping[tuple[str, str], ScramCredential] = field(default_factory=dict)

    def verify_plain(self, username: str, password: str) -> bool:
        if username in self.plain:
            return hmac.compare_digest(self.plain[username].encode(), password.encode())
        for mechanism in SCRAM_MECHANISMS:
            stored = self.scram.get((mechanism, username))
            if stored is not None:
                computed = scram_credential(mechanism, password, stored.salt, stored.iterations)
                return hmac.compare_digest(computed.stored_key, stored.stored_key)
        return False


def parse_credentials_file(text: str) -> dict[tuple[str, str], ScramCredential]:
    """A credentials file: one `<mechanism> <user> <credential>` line per SCRAM credential, `#` comments. Errors
    name the line number, never its content (it is secret-adjacent)."""
    found: dict[tuple[str, str], ScramCredential] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or parts[0] not in SCRAM_MECHANISMS:
            raise ValueError(f"line {number}: expected '<SCRAM-SHA-256|SCRAM-SHA-512> <user> <credential>'")
        try:
            found[(parts[0], parts[1])] = ScramCredential.from_text(parts[2])
        except ValueError as error:
            raise ValueError(f"line {number}: {error}") from None
    return found


def credentials_file_text(credentials: Mapping[tuple[str, str], ScramCredential]) -> str:
    lines = [
        f"{mechanism} {user} {credential.to_text()}" for (mechanism, user), credential in sorted(credentials.items())
    ]
    return "".join(line + "\n" for line in lines)


# -- the mechanisms' servers --------------------------------------------------------------------------------------


class PlainServer:
    """Kafka's PlainSaslServer: one token `[authzid] NUL authcid NUL passwd`, Kafka's messages on failure."""

    mechanism = PLAIN

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.complete = False
        self.username = ""

    def evaluate(self, token: bytes) -> bytes:
        tokens = token.decode("utf-8", errors="replace").split("\x00", 3)
        if len(tokens) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}")
        authzid, username, password = tokens
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if not self.credentials.verify_plain(username, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.username, self.complete = username, True
        return b""


class ScramServer:
    """Kafka's ScramSaslServer: client-first -> server-first -> client-final -> server-final. Every refusal but a
    foreign authorization id is Kafka's one message for a SaslException, so a client cannot tell an unknown
    user from a wrong password."""

    def __init__(self, mechanism: str, credentials: Credentials, server_nonce: str) -> None:
        assert mechanism in SCRAM_MECHANISMS and re.fullmatch(_PRINTABLE, server_nonce), "a SCRAM server's setup"
        self.mechanism = mechanism
        self.credentials = credentials
        self.server_nonce = server_nonce
        self.complete = False
        self.username = ""
        self._first: re.Match[str] | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None

    def _refused(self) -> AuthenticationFailed:
        return AuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            + self.mechanism
        )

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._refused() from None
        if self._first is None:
            return self._on_client_first(text)
        if not self.complete and self._credential is not None:
            return self._on_client_final(text)
        raise self._refused()

    def _on_client_first(self, text: str) -> bytes:
        first = _CLIENT_FIRST.fullmatch(text)
        if first is None:
            raise self._refused()
        username = first["saslname"].replace("=2C", ",").replace("=3D", "=")
        credential = self.credentials.scram.get((self.mechanism, username))
        if credential is None or credential.iterations < SCRAM_ITERATIONS_MIN:
            raise self._refused()
        if first["authzid"] and first["authzid"] != first["saslname"]:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._first, self._credential, self.username = first, credential, username
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={first['nonce']}{self.server_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _on_client_final(self, text: str) -> bytes:
        assert self._first is not None and self._credential is not None
        final = _CLIENT_FINAL.fullmatch(text)
        if final is None or final["nonce"] != self._first["nonce"] + self.server_nonce:
            raise self._refused()
        if base64.b64decode(final["channel"]) != self._first["gs2"].encode():
            raise self._refused()  # no channel binding: the client must echo its gs2 header
        auth_message = f"{self._first['bare']},{self._server_first},{final['without_proof']}".encode()
        signature = _hmac(self.mechanism, self._credential.stored_key, auth_message)
        proof = base64.b64decode(final["proof"])
        if len(proof) != len(signature):
            raise self._refused()
        if not hmac.compare_digest(_hash(self.mechanism, _xor(proof, signature)), self._credential.stored_key):
            raise self._refused()
        self.complete = True
        server_signature = _hmac(self.mechanism, self._credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


# -- one connection (Kafka's SaslServerAuthenticator) -------------------------------------------------------------


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class SaslAuthenticator:
    """One connection's authentication, as the table in this module's docstring. The caller decodes requests and
    encodes answers; this object decides. Every refusal leaves it FAILED: the caller answers (where Kafka does)
    and closes the connection."""

    def __init__(self, enabled_mechanisms: tuple[str, ...], credentials: Credentials) -> None:
        assert enabled_mechanisms and set(enabled_mechanisms) <= set(MECHANISMS), "served mechanisms only"
        self.enabled_mechanisms = enabled_mechanisms
        self.credentials = credentials
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.raw_tokens = False  # a v0 handshake: tokens follow as bare size-prefixed frames, no Kafka header
        self.mechanism = ""
        self._server: PlainServer | ScramServer | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def username(self) -> str:
        return "" if self._server is None else self._server.username

    def _illegal(self, message: str) -> IllegalSaslState:
        self.state = SaslState.FAILED
        return IllegalSaslState(message)

    def on_api_versions(self) -> None:
        """An ApiVersions the caller answers (a served version): allowed once, before the handshake."""
        if self.state is not SaslState.HANDSHAKE_OR_VERSIONS:
            raise self._illegal(
                f"Unexpected ApiVersions request received during SASL authentication state {self.state.value}"
            )
        self.state = SaslState.HANDSHAKE

    def on_other_request(self, api_name: str) -> None:
        """A request that is neither ApiVersions, SaslHandshake nor a token, before authentication completed."""
        assert self.state is not SaslState.COMPLETE, "a complete connection serves every request"
        during = "authentication" if self.state is SaslState.AUTHENTICATE else "handshake"
        raise self._illegal(f"Unexpected Kafka request of type {api_name} during SASL {during}.")

    def on_handshake(self, mechanism: str, version: int, server_nonce: str) -> bool:
        """SaslHandshake: True when the mechanism is enabled (answer NONE); False: UNSUPPORTED_SASL_MECHANISM,
        then close."""
        if self.state is SaslState.AUTHENTICATE:
            self.on_other_request("SASL_HANDSHAKE")  # Kafka: only SaslAuthenticate during the token exchange
        if self.state not in (SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE):
            raise self._illegal(f"Unexpected SaslHandshake request during SASL state {self.state.value}")
        if mechanism not in self.enabled_mechanisms:
            self.state = SaslState.FAILED
            return False
        self.mechanism = mechanism
        self._server = (
            PlainServer(self.credentials)
            if mechanism == PLAIN
            else ScramServer(mechanism, self.credentials, server_nonce)
        )
        self.raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATE
        return True

    def on_token(self, token: bytes) -> bytes:
        """One SASL token from the client: the server's answer (AuthenticationFailed: answer
        SASL_AUTHENTICATION_FAILED with its message, then close)."""
        if self.state is not SaslState.AUTHENTICATE or self._server is None:
            raise self._illegal(f"Unexpected SASL token during SASL state {self.state.value}")
        try:
            answer = self._server.evaluate(token)
        except AuthenticationFailed:
            self.state = SaslState.FAILED
            raise
        if self._server.complete:
            self.state = SaslState.COMPLETE
        return answer
