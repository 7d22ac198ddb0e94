"""NATS connection settings and the one way a Hightide process connects to NATS.

Room: libs/runtime. It owns the `nats.*` config names, their validation (a credentials file is read and checked
when the settings are made), the TLS context, and the connection's lifecycle callbacks (which only log). A failure
to connect at start-up is a `NatsUnavailable` with a one-line message; after start-up nats-py reconnects on its own
as configured. It must never print credentials: URLs are logged with their user info redacted.

NATS permissions (issue 14). An nkey user (Hightide's own users: `hightide.runtime.nats_auth`) gets its replies on
its own inbox prefix, `_INBOX_<public key>` (`hightide.protocol.permissions.user_inbox`), which is all of the inbox
space its permissions let it subscribe to. nats-server refuses a publish the user may not make asynchronously (a
`-ERR 'Permissions Violation for Publish to "<subject>"'` after the fact); the client `connect` returns fails every
request waiting on an answer from that subject at once with `PermissionRefused` (one line naming the subject),
instead of letting it run into its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import nats.errors
import nkeys  # type: ignore[import-untyped]
from nats.aio.client import Client

from hightide.protocol.permissions import user_inbox_prefix
from hightide.runtime.config import ConfigError
from hightide.runtime.logging import Logger, get_logger

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
NATS_CONFIG_NAMES: tuple[str, ...] = (
    "nats.url",
    "nats.credentials.file",
    "nats.user",
    "nats.password",
    "nats.token",
    "nats.tls.ca.file",
    "nats.tls.cert.file",
    "nats.tls.key.file",
)
_URL_SCHEMES = ("nats://", "tls://")
CLOSE_TIMEOUT_S = 1.0


class NatsUnavailable(Exception):
    """NATS could not be reached (or refused us) at start-up; the message is one line, fit for the CLI."""


@dataclass(frozen=True)
class NatsSettings:
    """How to reach NATS. `url` may list several servers separated by commas. Validated on construction."""

    url: str = DEFAULT_NATS_URL
    credentials_file: Path | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    connect_timeout_s: float = 2.0
    reconnect_wait_s: float = 0.5
    max_reconnect_attempts: int = -1  # -1 reconnects forever: a broker outlives any NATS restart
    name: str | None = None

    def __post_init__(self) -> None:
        for server in self.servers:
            if not server.startswith(_URL_SCHEMES):
                raise ConfigError(f"Invalid NATS URL {redact_url(server)}: it must start with nats:// or tls://")
        if self.user is not None and self.password is None:
            raise ConfigError("nats.user requires nats.password")
        if self.token is not None and self.user is not None:
            raise ConfigError("nats.token and nats.user are exclusive: give one way to authenticate")
        if self.tls_cert_file is not None and self.tls_key_file is None:
            raise ConfigError("nats.tls.cert.file requires nats.tls.key.file")
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise ConfigError("nats.tls.key.file requires nats.tls.cert.file")
        if self.credentials_file is not None:
            _check_credentials_file(self.credentials_file)
        self._check_timing()

    def _check_timing(self) -> None:
        if self.connect_timeout_s <= 0:
            raise ConfigError(f"The NATS connect timeout must be positive, not {self.connect_timeout_s}")
        if self.reconnect_wait_s < 0:
            raise ConfigError(f"The NATS reconnect wait must not be negative, not {self.reconnect_wait_s}")
        if self.max_reconnect_attempts < -1:
            raise ConfigError(f"max_reconnect_attempts must be -1 (forever) or more, not {self.max_reconnect_attempts}")

    @property
    def servers(self) -> list[str]:
        return [server.strip() for server in self.url.split(",") if server.strip()] or [self.url]

    @property
    def uses_tls(self) -> bool:
        tls_files = (self.tls_ca_file, self.tls_cert_file)
        return any(file is not None for file in tls_files) or any(s.startswith("tls://") for s in self.servers)


def nats_settings(props: Mapping[str, str], *, url: str | None, name: str) -> NatsSettings:
    """Settings from the `nats.*` properties; an explicit `url` (the `--nats-url` flag) wins over `nats.url`."""
    return NatsSettings(
        url=url if url is not None else props.get("nats.url", DEFAULT_NATS_URL),
        credentials_file=_path(props, "nats.credentials.file"),
        user=props.get("nats.user"),
        password=props.get("nats.password"),
        token=props.get("nats.token"),
        tls_ca_file=_path(props, "nats.tls.ca.file"),
        tls_cert_file=_path(props, "nats.tls.cert.file"),
        tls_key_file=_path(props, "nats.tls.key.file"),
        name=name,
    )


def _path(props: Mapping[str, str], name: str) -> Path | None:
    value = props.get(name)
    return Path(value) if value else None


_CREDS_JWT_MARKER = b"BEGIN NATS USER JWT"
_CREDS_SEED_MARKER = b"BEGIN USER NKEY SEED"


def _check_credentials_file(path: Path) -> None:
    """A ConfigError (one line, naming the file, never its contents) unless `path` is a readable NATS credentials
    file: a user credentials file (a user JWT and a user nkey seed, each on the line after its BEGIN marker, as
    nats-py reads them), or an nkey user's seed file (the seed alone, bare or after its BEGIN marker: what
    `hightide.runtime.nats_auth` writes for a role). Checked up front because nats-py reads the file only while
    connecting (nats-py 2.x), where a missing file passes for NATS being unavailable, a file without the JWT marker
    blocks the event loop forever, and one without a valid seed escapes as a raw TypeError or nkeys error."""
    name = f"nats.credentials.file {path}"
    lines = _read_credentials(path, name)
    seed = _user_seed(lines)
    if seed is None:
        raise ConfigError(f"{name} is not a NATS credentials file (it needs a user nkey seed, and may hold a user JWT)")
    try:
        prefix, _ = nkeys.decode_seed(seed)
    except (nkeys.NkeysError, ValueError):
        prefix = None
    if prefix != nkeys.PREFIX_BYTE_USER:
        raise ConfigError(f"{name} does not hold a valid user nkey seed")


def _read_credentials(path: Path, name: str) -> list[bytes]:
    try:
        return path.read_bytes().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{name} does not exist") from None
    except OSError as error:
        raise ConfigError(f"Cannot read {name}: {error.strerror or type(error).__name__}") from None


def _user_seed(lines: list[bytes]) -> bytes | None:
    return _line_after(lines, _CREDS_SEED_MARKER) or _bare_seed(lines)


def _bare_seed(lines: list[bytes]) -> bytes | None:
    """A line that is a user nkey seed by itself (`SU...`, as nsc's `.nk` files hold it)."""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(b"SU") and b" " not in stripped:
            return stripped
    return None


def credentials_seed(path: Path) -> str | None:
    """The seed of an nkey user's credentials file (no JWT in it); None for a JWT user credentials file. The file
    has been checked (`_check_credentials_file`)."""
    lines = _read_credentials(path, f"nats.credentials.file {path}")
    if _line_after(lines, _CREDS_JWT_MARKER) is not None:
        return None
    seed = _user_seed(lines)
    return None if seed is None else seed.decode()


def _line_after(lines: list[bytes], marker: bytes) -> bytes | None:
    """The stripped, non-blank line after the first line containing `marker`; None if there is none."""
    for index, line in enumerate(lines[:-1]):
        if marker in line:
            following = lines[index + 1].strip()
            return following or None
    return None


def build_tls_context(settings: NatsSettings) -> ssl.SSLContext | None:
    """A client TLS context verifying the server (against `tls_ca_file` when given, else the system's CAs),
    presenting `tls_cert_file` when given; None when the settings ask for no TLS at all."""
    if not settings.uses_tls:
        return None
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.tls_ca_file)
        if settings.tls_cert_file is not None:
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"Cannot load the NATS TLS files: {error}") from None
    return context


def redact_url(url: str) -> str:
    """`url` without its password or token: `nats://user:secret@host` -> `nats://user:***@host`, and
    `nats://token@host` -> `nats://***@host` (a lone user part is how NATS URLs carry a token)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    user_info, host = parts.netloc.rsplit("@", 1)
    user, has_password, _ = user_info.partition(":")
    redacted = f"{user}:***" if has_password else "***"
    return urlunsplit(parts._replace(netloc=f"{redacted}@{host}"))


async def connect(settings: NatsSettings, *, log: Logger | None = None) -> Client:
    """A connected client, or NatsUnavailable on the first failure at start-up (refused, timed out, not
    authorised). Once connected, nats-py reconnects as `settings` say and the callbacks log what happens."""
    url = ",".join(redact_url(server) for server in settings.servers)
    client = RefusalAwareClient()
    callbacks = _ConnectionCallbacks(log or get_logger(__name__), url, client)
    try:
        await client.connect(**_connect_options(settings, callbacks))
    except (_StartupFailed, OSError, nats.errors.Error, TimeoutError) as failure:
        callbacks.phase = "failed"
        await _close_half_open(client)
        error = failure.error if isinstance(failure, _StartupFailed) else failure
        raise NatsUnavailable(f"NATS is unavailable at {callbacks.url}: {_one_line(error)}") from None
    except asyncio.CancelledError:
        callbacks.phase = "failed"  # shut down while starting: leave no half-open client behind
        await client.close()
        raise
    callbacks.phase = "started"
    server = client.connected_url
    callbacks.log.info(
        "nats connected", nats_url=callbacks.url, server=f"{server.hostname}:{server.port}" if server else None
    )
    return client


async def _close_half_open(client: Client) -> None:
    """Close a client whose start failed, within CLOSE_TIMEOUT_S: after a failed TLS handshake nats-py's close()
    waits forever on the transport it upgraded (nats-py 2.x)."""
    with contextlib.suppress(TimeoutError, nats.errors.Error, OSError):
        await asyncio.wait_for(client.close(), CLOSE_TIMEOUT_S)


def _connect_options(settings: NatsSettings, callbacks: _ConnectionCallbacks) -> dict[str, Any]:
    # A dict, because nats-py annotates the timeouts as int although it passes them to asyncio as seconds.
    options: dict[str, Any] = {
        "servers": settings.servers,
        "name": settings.name,
        "allow_reconnect": True,
        "reconnect_time_wait": settings.reconnect_wait_s,
        "max_reconnect_attempts": settings.max_reconnect_attempts,
        "connect_timeout": settings.connect_timeout_s,
        "tls": build_tls_context(settings),
        "error_cb": callbacks.on_error,
        "disconnected_cb": callbacks.on_disconnected,
        "reconnected_cb": callbacks.on_reconnected,
        "closed_cb": callbacks.on_closed,
    }
    if settings.credentials_file is not None:
        seed = credentials_seed(settings.credentials_file)
        if seed is None:
            options["user_credentials"] = str(settings.credentials_file)
        else:  # an nkey user: the server knows its public key, the seed signs the server's nonce
            options["nkeys_seed_str"] = seed
            options["inbox_prefix"] = nkey_inbox_prefix(seed)
    if settings.user is not None:
        options["user"], options["password"] = settings.user, settings.password
    if settings.token is not None:
        options["token"] = settings.token
    return options


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if not isinstance(error, TimeoutError) else f"timed out ({text})"


class _StartupFailed(Exception):
    """Raised from the error callback during start-up to end nats-py's connect loop at the first failure.

    nats-py retries the initial connection forever when reconnecting is allowed and max_reconnect_attempts is
    -1, and with reconnecting disallowed it would never reconnect later. An exception from the error callback
    that is not one of the errors nats-py retries on (OSError, nats.errors.Error, TimeoutError) leaves its
    connect loop, so start-up fails fast while the steady state keeps reconnecting forever.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


assert not issubclass(_StartupFailed, OSError | nats.errors.Error | TimeoutError)


class _ConnectionCallbacks:
    """nats-py's lifecycle callbacks: log once started; while starting, turn the first error into _StartupFailed;
    after a failed start, stay quiet while the half-open client is closed (its errors are the failure's echo)."""

    def __init__(self, log: Logger, url: str, client: Client) -> None:
        self.log = log
        self.url = url
        self._client = client
        self.phase: Literal["starting", "started", "failed"] = "starting"

    async def on_error(self, error: Exception) -> None:
        if self.phase == "starting":
            raise _StartupFailed(error)
        if self.phase == "started":
            self.log.warning("nats error", nats_url=self.url, error=_one_line(error), error_type=type(error).__name__)

    async def on_disconnected(self) -> None:
        # A deliberate close() also calls this; only a lost connection (nats-py then reconnects) is a warning.
        if self.phase == "started" and not self._client.is_closed:
            self.log.warning("nats disconnected", nats_url=self.url)

    async def on_reconnected(self) -> None:
        self.log.info("nats reconnected", nats_url=self.url)

    async def on_closed(self) -> None:
        if self.phase == "started":
            self.log.info("nats closed", nats_url=self.url)


# -- NATS permissions (issue 14, second pass): each user's inbox, and refused requests failing at once -------------


def nkey_inbox_prefix(seed: str) -> str:
    """The inbox prefix of the nkey user whose seed is `seed`: `_INBOX_<its public key>`."""
    public_key: bytes = nkeys.from_seed(bytearray(seed.encode())).public_key
    return user_inbox_prefix(public_key.decode())


class PermissionRefused(nats.errors.Error):
    """NATS refused this connection's user a publish: the request to `subject` gets no answer. One line. A
    `nats.errors.Error` (not a timeout): services that retry NATS errors still do, and log this message."""

    def __init__(self, subject: str) -> None:
        super().__init__(f'NATS refused to publish to "{subject}" (permissions violation)')
        self.subject = subject


# nats-py lowercases the server's -ERR line before handing it on.
_PUBLISH_REFUSED = re.compile(r'permissions violation for publish to "([^"]+)"')


class RefusalAwareClient(Client):
    """nats-py's client, whose waiting requests fail with PermissionRefused as soon as nats-server reports a
    permissions violation for their subject (instead of timing out). It reads two of nats-py's private fields of
    the request multiplexer (`_resp_sub_prefix`, `_resp_map`; nats-py is pinned by uv.lock)."""

    def __init__(self) -> None:
        super().__init__()
        # lowercased subject -> the requests awaiting its answer: token -> subject as published
        self._waiting_by_subject: dict[str, dict[str, str]] = {}

    async def publish(
        self, subject: str, payload: bytes = b"", reply: str = "", headers: dict[str, str] | None = None
    ) -> None:
        prefix = self._resp_sub_prefix
        if reply and prefix is not None and reply.startswith(prefix.decode()):
            token = reply[len(prefix) :]
            future = self._resp_map.get(token)
            if future is not None and not future.done():
                key = subject.lower()
                self._waiting_by_subject.setdefault(key, {})[token] = subject
                future.add_done_callback(lambda _: self._forget(key, token))
        await super().publish(subject, payload, reply=reply, headers=headers)

    def _forget(self, key: str, token: str) -> None:
        tokens = self._waiting_by_subject.get(key)
        if tokens is not None:
            tokens.pop(token, None)
            if not tokens:
                del self._waiting_by_subject[key]

    async def _process_err(self, err_msg: str) -> None:
        """A refusal that fails waiting requests is theirs to report (the error callback does not hear of it);
        any other error goes on to nats-py (a permissions violation: to the error callback)."""
        refused = _PUBLISH_REFUSED.search(err_msg)
        failed = 0
        if refused is not None:
            for token, subject in list(self._waiting_by_subject.get(refused.group(1).lower(), {}).items()):
                future = self._resp_map.get(token)
                if future is not None and not future.done():
                    future.set_exception(PermissionRefused(subject))
                    failed += 1
        if failed:
            self._err = PermissionRefused(refused.group(1) if refused else "")
            return
        await super()._process_err(err_msg)
