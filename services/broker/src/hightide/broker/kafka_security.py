"""Security on the broker's Kafka listener: TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), configured by Kafka's
names (issue 15, security).

Room: services/broker (wiring). This module owns reading the listener's security settings (ConfigError, one line,
on a bad one), loading the TLS keys and the credentials files, and one connection's authentication step before
the listener dispatches requests (`ConnectionAuthenticator`): it decodes frames, asks `hightide.core.sasl`'s state
machine, and encodes Kafka's answers. What is accepted and the SCRAM arithmetic are `hightide.core.sasl`'s.

Settings (Kafka's names; `listener.name.<listener>.<name>` overrides `<name>` as in Kafka):
- `listener.security.protocol.map` (default PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,
  SASL_SSL:SASL_SSL) maps the listener's name to its security protocol.
- `sasl.enabled.mechanisms`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI, Kafka's default, is not served, so a
  SASL listener must name its mechanisms). `sasl.server.max.receive.size` (default 524288) bounds a frame before
  authentication; `connection.failed.authentication.delay.ms` (default 100) delays the close after a failure.
- PLAIN users: `listener.name.<listener>.plain.sasl.jaas.config` with PlainLoginModule `user_<name>="<password>"`.
- SCRAM credentials (and PLAIN users by their SCRAM credential): `sasl.scram.credentials.file` (Hightide's name;
  Kafka keeps them in its metadata log), lines `<mechanism> <user> salt=...,stored_key=...,server_key=...,
  iterations=N` as `hightide scram-credentials` writes them. Read once, at start.
- TLS (SSL and SASL_SSL): `ssl.keystore.type=PEM` (the only type served) with `ssl.keystore.location` (a PEM file
  holding the certificate chain and the private key, `ssl.key.password` if the key is encrypted) or the PEM text
  in `ssl.keystore.certificate.chain` and `ssl.keystore.key`; `ssl.client.auth` none|requested|required with
  `ssl.truststore.location` or `ssl.truststore.certificates` (PEM); `ssl.enabled.protocols` (default
  TLSv1.2,TLSv1.3); `ssl.cipher.suites` (TLS 1.2's, OpenSSL names).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from hightide.core import sasl
from hightide.protocol import kafka, kafka_sasl
from hightide.protocol.errors import ErrorCode
from hightide.runtime.config import ConfigError, get_int

PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SASL_PLAINTEXT: Final = "SASL_PLAINTEXT"
SASL_SSL: Final = "SASL_SSL"
SECURITY_PROTOCOLS: Final = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT: Final = 524_288  # Kafka's sasl.server.max.receive.size
FAILED_AUTHENTICATION_DELAY_MS_DEFAULT: Final = 100  # Kafka's connection.failed.authentication.delay.ms
_TLS_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_JAAS_OPTION: Final = re.compile(r'([A-Za-z_][\w.-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """A Kafka listener's security: its name, protocol, SASL mechanisms and users, and TLS context."""

    listener_name: str
    security_protocol: str
    enabled_mechanisms: tuple[str, ...] = ()
    credentials: sasl.Credentials = field(default_factory=sasl.Credentials)
    ssl_context: ssl.SSLContext | None = None
    sasl_server_max_receive_size: int = SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT
    failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS_DEFAULT

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)


def security_protocol(props: dict[str, str], listener_name: str) -> str:
    """The security protocol of a listener name, by `listener.security.protocol.map` (Kafka's default map)."""
    mapping = {p: p for p in SECURITY_PROTOCOLS}
    text = props.get("listener.security.protocol.map", "").strip()
    if text:
        mapping = {}
        for item in text.split(","):
            name, sep, protocol = item.strip().partition(":")
            if not sep or protocol.upper() not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"Invalid value {text} for configuration listener.security.protocol.map: "
                    f"expected NAME:PROTOCOL pairs, PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}"
                )
            mapping[name.upper()] = protocol.upper()
    if listener_name.upper() not in mapping:
        raise ConfigError(
            f"listeners names {listener_name}, which listener.security.protocol.map does not map to a protocol"
        )
    return mapping[listener_name.upper()]


def _get(props: dict[str, str], listener_name: str, name: str) -> str | None:
    """`listener.name.<listener>.<name>`, else `<name>` (Kafka's listener-prefixed configs)."""
    scoped = props.get(f"listener.name.{listener_name.lower()}.{name}")
    return scoped if scoped is not None else props.get(name)


def listener_security(props: dict[str, str], listener_name: str) -> ListenerSecurity:
    protocol = security_protocol(props, listener_name)
    security = ListenerSecurity(listener_name, protocol)
    if protocol in (SSL, SASL_SSL):
        security = _replace(security, ssl_context=_ssl_context(props, listener_name, protocol))
    if protocol in (SASL_PLAINTEXT, SASL_SSL):
        mechanisms = _enabled_mechanisms(props, listener_name)
        security = _replace(
            security,
            enabled_mechanisms=mechanisms,
            credentials=sasl.Credentials(
                plain=_plain_users(props, listener_name) if sasl.PLAIN in mechanisms else {},
                scram=_scram_credentials(props, listener_name),
            ),
            sasl_server_max_receive_size=get_int(
                props, "sasl.server.max.receive.size", SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT, minimum=64
            ),
            failed_authentication_delay_ms=get_int(
                props, "connection.failed.authentication.delay.ms", FAILED_AUTHENTICATION_DELAY_MS_DEFAULT, minimum=0
            ),
        )
    return security


def _replace(security: ListenerSecurity, **changes: Any) -> ListenerSecurity:
    values = {name: getattr(security, name) for name in ListenerSecurity.__dataclass_fields__}
    return ListenerSecurity(**(values | changes))


def _enabled_mechanisms(props: dict[str, str], listener_name: str) -> tuple[str, ...]:
    text = (_get(props, listener_name, "sasl.enabled.mechanisms") or "").strip()
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    if not mechanisms:
        raise ConfigError(
            f"a {listener_name} listener needs sasl.enabled.mechanisms (served: {', '.join(sasl.MECHANISMS)}; "
            "GSSAPI, Kafka's default, is not)"
        )
    unknown = [m for m in mechanisms if m not in sasl.MECHANISMS]
    if unknown:
        raise ConfigError(
            f"Invalid value {text} for configuration sasl.enabled.mechanisms: {', '.join(unknown)} is not served "
            f"(served: {', '.join(sasl.MECHANISMS)})"
        )
    return mechanisms


def _plain_users(props: dict[str, str], listener_name: str) -> dict[str, str]:
    """PlainLoginModule's `user_<name>="<password>"` options (Kafka's broker-side PLAIN users)."""
    name = f"listener.name.{listener_name.lower()}.plain.sasl.jaas.config"
    text = props.get(name, "").strip()
    if not text:
        return {}
    if not text.startswith("org.apache.kafka.common.security.plain.PlainLoginModule") or not text.endswith(";"):
        raise ConfigError(
            f"{name} must be 'org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_<name>="<password>" ...;\''
        )
    users: dict[str, str] = {}
    for option in _JAAS_OPTION.finditer(text):
        key, quoted, bare = option.group(1), option.group(2), option.group(3)
        if key.startswith("user_"):
            value = quoted if quoted is not None else bare
            users[key.removeprefix("user_")] = re.sub(r"\\(.)", r"\1", value)
    return users


def _scram_credentials(props: dict[str, str], listener_name: str) -> dict[tuple[str, str], sasl.ScramCredential]:
    location = _get(props, listener_name, "sasl.scram.credentials.file")
    if not location:
        return {}
    try:
        return sasl.parse_credentials_file(Path(location).read_text())
    except OSError as error:
        raise ConfigError(f"sasl.scram.credentials.file {location}: {error.strerror}") from None
    except ValueError as error:
        raise ConfigError(f"sasl.scram.credentials.file {location}: {error}") from None


def _ssl_context(props: dict[str, str], listener_name: str, protocol: str) -> ssl.SSLContext:
    def get(name: str) -> str | None:
        return _get(props, listener_name, name)

    keystore_type = (get("ssl.keystore.type") or "PEM").upper()
    if keystore_type != "PEM":
        raise ConfigError(f"ssl.keystore.type {keystore_type} is not served: use ssl.keystore.type=PEM")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v.strip() for v in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if v.strip()]
    if not versions or any(v not in _TLS_VERSIONS for v in versions):
        raise ConfigError("ssl.enabled.protocols: served are TLSv1.2 and TLSv1.3")
    context.minimum_version = min(_TLS_VERSIONS[v] for v in versions)
    context.maximum_version = max(_TLS_VERSIONS[v] for v in versions)
    try:
        _load_keystore(context, get, listener_name, protocol)
        _load_truststore(context, get)
        if get("ssl.cipher.suites"):
            context.set_ciphers(":".join(c.strip() for c in (get("ssl.cipher.suites") or "").split(",")))
    except ssl.SSLError as error:
        raise ConfigError(f"the {listener_name} listener's TLS settings: {error.reason or error}") from None
    except OSError as error:
        raise ConfigError(f"the {listener_name} listener's TLS settings: {error.filename}: {error.strerror}") from None
    client_auth = (get("ssl.client.auth") or "none").lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"Invalid value {client_auth} for configuration ssl.client.auth: none|requested|required")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def _load_keystore(context: ssl.SSLContext, get: Any, listener_name: str, protocol: str) -> None:
    password = get("ssl.key.password")
    location, chain, key = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location:
        if not Path(location).is_file():
            raise ConfigError(f"ssl.keystore.location {location}: no such file")
        context.load_cert_chain(location, password=password)
        return
    if not (chain and key):
        raise ConfigError(
            f"listeners: a {protocol} listener ({listener_name}) needs ssl.keystore.location, or "
            "ssl.keystore.certificate.chain and ssl.keystore.key (ssl.keystore.type=PEM)"
        )
    # Python's ssl loads a key only from a file: the PEM text goes to a private temporary file, removed at once.
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "keystore.pem"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as pem:
            pem.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)


def _load_truststore(context: ssl.SSLContext, get: Any) -> None:
    truststore_type = (get("ssl.truststore.type") or "PEM").upper()
    if truststore_type != "PEM":
        raise ConfigError(f"ssl.truststore.type {truststore_type} is not served: use ssl.truststore.type=PEM")
    if get("ssl.truststore.location"):
        if not Path(get("ssl.truststore.location")).is_file():
            raise ConfigError(f"ssl.truststore.location {get('ssl.truststore.location')}: no such file")
        context.load_verify_locations(cafile=get("ssl.truststore.location"))
    elif get("ssl.truststore.certificates"):
        context.load_verify_locations(cadata=get("ssl.truststore.certificates"))
    elif (get("ssl.client.auth") or "none").lower() != "none":
        raise ConfigError("ssl.client.auth needs ssl.truststore.location or ssl.truststore.certificates")


class ConnectionAuthenticator:
    """One connection's SASL step before dispatch: each frame until authentication completes comes here."""

    def __init__(self, security: ListenerSecurity, log: Any, peer: str) -> None:
        assert security.uses_sasl, "a SASL listener's connection"
        self.security = security
        self.log = log
        self.peer = peer
        self.state = sasl.SaslAuthenticator(security.enabled_mechanisms, security.credentials)

    @property
    def complete(self) -> bool:
        return self.state.complete

    @property
    def max_receive_size(self) -> int:
        return self.security.sasl_server_max_receive_size

    async def failed(self) -> None:
        """Kafka delays closing a connection whose authentication failed (a brute-force guesser's cost)."""
        await asyncio.sleep(self.security.failed_authentication_delay_ms / 1000)

    def receive(self, frame: bytes) -> tuple[bytes | None, bool]:
        """One frame before authentication completed: (the answer's bytes or None, whether to close)."""
        if self.state.raw_tokens:
            return self._raw_token(frame)
        try:
            request = kafka.parse_request(frame)
        except kafka.UnservedRequest as error:
            self.log.warning("kafka_request_refused", peer=self.peer, error=str(error)[:512], head=frame[:64].hex())
            return None, True
        exchanging = self.state.state is sasl.SaslState.AUTHENTICATE
        try:
            body, close = self._request(request)
        except sasl.IllegalSaslState as error:
            self.log.warning("kafka_sasl_illegal_state", peer=self.peer, error=str(error))
            return (self._illegal_answer(request, str(error)) if exchanging else None), True
        return kafka.encode_response(request, body), close

    def _request(self, request: kafka.Request) -> tuple[Any, bool]:
        key = request.api_key
        if key == kafka.API_VERSIONS:
            if request.body is not None:  # an unserved version is answered and changes nothing, as in Kafka
                self.state.on_api_versions()
            elif self.state.state is not sasl.SaslState.HANDSHAKE_OR_VERSIONS:
                self.state.on_other_request("API_VERSIONS")
            return kafka.api_versions_response(request), False
        if key == kafka.SASL_HANDSHAKE:
            mechanism = kafka_sasl.handshake_mechanism(request)
            accepted = self.state.on_handshake(mechanism, request.api_version, secrets.token_urlsafe(24))
            if not accepted:
                self.log.warning(
                    "kafka_authentication_failed",
                    peer=self.peer,
                    mechanism=mechanism[:64],
                    error=f"Unsupported SASL mechanism {mechanism[:64]}",
                )
            error = ErrorCode.NONE if accepted else ErrorCode.UNSUPPORTED_SASL_MECHANISM
            return kafka_sasl.handshake_response(request, error, self.state.enabled_mechanisms), not accepted
        if key == kafka.SASL_AUTHENTICATE and self.state.state is sasl.SaslState.AUTHENTICATE:
            try:
                answer = self.state.on_token(kafka_sasl.authenticate_token(request))
            except sasl.AuthenticationFailed as error:
                self._log_failure(error)
                failed = ErrorCode.SASL_AUTHENTICATION_FAILED
                return kafka_sasl.authenticate_response(request, failed, str(error)), True
            self._log_success()
            return kafka_sasl.authenticate_response(request, ErrorCode.NONE, None, answer), False
        self.state.on_other_request(kafka_sasl.api_name(key, request.api_version))
        raise AssertionError("on_other_request always refuses")

    def _raw_token(self, token: bytes) -> tuple[bytes | None, bool]:
        """After a v0 handshake: a bare token in, a bare token out; a failure can only close (Kafka does too)."""
        try:
            answer = self.state.on_token(token)
        except sasl.AuthenticationFailed as error:
            self._log_failure(error)
            return None, True
        self._log_success()
        return kafka_sasl.token_frame(answer), False

    def _illegal_answer(self, request: kafka.Request, message: str) -> bytes | None:
        """During the token exchange Kafka answers a stray request with its error response (ILLEGAL_SASL_STATE)
        before closing (before the exchange, the connection just closes)."""
        with contextlib.suppress(KeyError):  # an API this listener answers only by closing
            return kafka.encode_response(request, kafka.error_response(request, ErrorCode.ILLEGAL_SASL_STATE, message))
        return None

    def _log_failure(self, error: sasl.AuthenticationFailed) -> None:
        # Kafka's message only: it never holds a password (hightide.core.sasl keeps secrets out of its exceptions).
        self.log.warning(
            "kafka_authentication_failed", peer=self.peer, mechanism=self.state.mechanism, error=str(error)
        )

    def _log_success(self) -> None:
        if self.state.complete:
            self.log.info(
                "kafka_authenticated", peer=self.peer, mechanism=self.state.mechanism, user=self.state.username
            )
