"""The Kafka listener's security settings, by Kafka's names (hightide.broker.kafka_security), and the SCRAM
credentials file `hightide scram-credentials` writes. Method: given properties (and files in a temporary dir),
when the broker reads them, then it has the listener Kafka would have, or a one-line ConfigError naming the
setting; the command line exits 2 on bad input."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from hightide.broker.kafka_listener import listener_config
from hightide.broker.kafka_security import listener_security
from hightide.client import cli
from hightide.core import sasl
from hightide.runtime.config import ConfigError, load_properties
from hightide.runtime.names import SERVER_CONFIG_NAMES
from support.tls import Pki, make_pki

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a\\"quoted\\"pw";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_a_plaintext_listener_has_no_security() -> None:
    config = listener_config({"listeners": "PLAINTEXT://127.0.0.1:9092"}, 100)
    assert config is not None and config.security is None


def test_a_sasl_plaintext_listener_takes_its_mechanisms_and_jaas_users() -> None:
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    }
    config = listener_config(props, 100)
    assert config is not None and config.security is not None
    security = config.security
    assert (security.listener_name, security.security_protocol) == ("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    assert security.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-512") and security.ssl_context is None
    assert security.credentials.plain == {"admin": "admin-secret", "alice": 'a"quoted"pw'}
    assert (security.sasl_server_max_receive_size, security.failed_authentication_delay_ms) == (524_288, 100)


def test_a_named_listener_maps_to_sasl_ssl_and_reads_scram_credentials(pki: Pki, tmp_path: Path) -> None:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_256, "pw", b"salt", 4096)
    users = tmp_path / "users.txt"
    users.write_text(sasl.credentials_file_text({(sasl.SCRAM_SHA_256, "bob"): credential}))
    props = {
        "listeners": "EXTERNAL://0.0.0.0:9093",
        "advertised.listeners": "EXTERNAL://broker-1.example:9093",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.enabled.mechanisms": "PLAIN",  # the listener-scoped value wins, as in Kafka
        "sasl.scram.credentials.file": str(users),
        "ssl.keystore.type": "PEM",
        "listener.name.external.ssl.keystore.location": str(pki.server_pem),
        "ssl.client.auth": "required",
        "ssl.truststore.location": str(pki.ca_cert),
    }
    config = listener_config(props, 100)
    assert config is not None and config.security is not None
    security = config.security
    assert security.security_protocol == "SASL_SSL" and security.enabled_mechanisms == ("SCRAM-SHA-256",)
    assert security.credentials.scram == {(sasl.SCRAM_SHA_256, "bob"): credential}
    assert security.ssl_context is not None and security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert security.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_the_keystore_as_pem_text_in_the_config(pki: Pki) -> None:
    props = {
        "listeners": "SSL://127.0.0.1:9093",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": pki.server_cert.read_text(),
        "ssl.keystore.key": pki.server_key.read_text(),
        "ssl.enabled.protocols": "TLSv1.3",
    }
    security = listener_security(props, "SSL")
    assert security.ssl_context is not None and not security.uses_sasl
    assert security.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9092"}, "sasl.enabled.mechanisms"),
        ({"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
        ({"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "OAUTHBEARER"}, "OAUTHBEARER"),
        ({"listeners": "EXTERNAL://h:1"}, "listener.security.protocol.map"),
        ({"listeners": "A://h:1", "listener.security.protocol.map": "A:KERBEROS"}, "listener.security.protocol.map"),
        ({"listeners": "SSL://h:1"}, "ssl.keystore.location"),
        ({"listeners": "SSL://h:1", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.type"),
        ({"listeners": "SSL://h:1", "ssl.keystore.location": "/nonexistent.pem"}, "/nonexistent.pem"),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "PLAIN",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": 'user_a="b";'},
            "PlainLoginModule",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "PLAIN",
             "sasl.scram.credentials.file": "/nonexistent/users.txt"},
            "sasl.scram.credentials.file",
        ),
        ({"listeners": "SSL://h:1", "advertised.listeners": "PLAINTEXT://h:1"}, "advertised.listeners"),
    ],
)  # fmt: skip
def test_bad_security_settings_are_one_line_config_errors(props: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as error:
        listener_config(props, 100)
    assert named in str(error.value) and "\n" not in str(error.value)


def test_client_auth_without_a_truststore_is_refused(pki: Pki) -> None:
    props = {"ssl.keystore.location": str(pki.server_pem), "ssl.client.auth": "required"}
    with pytest.raises(ConfigError, match="truststore"):
        listener_security(props, "SSL")


def test_a_bad_credentials_file_names_the_line_and_not_its_content(tmp_path: Path) -> None:
    users = tmp_path / "users.txt"
    users.write_text("SCRAM-SHA-512 alice hunter2\n")
    props = {"sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.scram.credentials.file": str(users)}
    with pytest.raises(ConfigError, match="line 1") as error:
        listener_security(props, "SASL_PLAINTEXT")
    assert "hunter2" not in str(error.value)


def test_listener_scoped_security_names_are_known_and_a_typo_is_not() -> None:
    known = load_properties(
        known=SERVER_CONFIG_NAMES,
        overrides=[
            "listener.name.external.ssl.keystore.location=/k.pem",
            f"listener.name.x.plain.sasl.jaas.config={JAAS}",
        ],
        environ={},
    )
    assert known["listener.name.external.ssl.keystore.location"] == "/k.pem"
    with pytest.raises(ConfigError, match="Unknown config name"):
        load_properties(
            known=SERVER_CONFIG_NAMES, overrides=["listener.name.external.ssl.keystore.bogus=1"], environ={}
        )


# -- hightide scram-credentials -------------------------------------------------------------------------------------


def scram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hightide.client.cli", "scram-credentials", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_scram_credentials_adds_replaces_and_deletes_users(tmp_path: Path) -> None:
    users = tmp_path / "users.txt"
    added = scram("--file", str(users), "--add-scram", "SCRAM-SHA-512=[name=alice,password=a-secret,iterations=8192]",
                  "--add-scram", "SCRAM-SHA-256=[name=bob,password=b-secret]")  # fmt: skip
    assert added.returncode == 0 and added.stdout.splitlines() == ["SCRAM-SHA-256 bob", "SCRAM-SHA-512 alice"]
    assert users.stat().st_mode & 0o777 == 0o600
    assert "a-secret" not in users.read_text() and "b-secret" not in users.read_text()
    table = sasl.parse_credentials_file(users.read_text())
    assert table[(sasl.SCRAM_SHA_512, "alice")].iterations == 8192
    credentials = sasl.Credentials(scram=table)
    assert credentials.verify_plain("alice", "a-secret") and not credentials.verify_plain("alice", "b-secret")
    deleted = scram("--file", str(users), "--delete-scram", "SCRAM-SHA-256=[name=bob]")
    assert deleted.returncode == 0 and deleted.stdout.splitlines() == ["SCRAM-SHA-512 alice"]


@pytest.mark.parametrize(
    "spec",
    [
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-256=[name=a]",
        "SCRAM-SHA-256=[password=secret-pw]",
        "SCRAM-SHA-256=[name=a,password=secret-pw,iterations=100]",
        "SCRAM-SHA-256=name=a,password=secret-pw",
    ],
)
def test_scram_credentials_refuses_bad_input_with_exit_2_and_no_secret(
    tmp_path: Path, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["scram-credentials", "--file", str(tmp_path / "users.txt"), "--add-scram", spec]) == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and "Traceback" not in stderr and "secret-pw" not in stderr
    assert not (tmp_path / "users.txt").exists()


# -- the TLS context a listener serves with (a real TLS handshake on a local socket) ----------------------------------


async def _handshake(security_context: ssl.SSLContext, client: ssl.SSLContext) -> bytes:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=security_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=client), 30)
        data = await asyncio.wait_for(reader.read(2), 30)
        writer.close()
        return data
    finally:
        server.close()


def test_client_auth_required_admits_a_certificate_from_the_truststore_only(pki: Pki) -> None:
    props = {
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.client.auth": "required",
        "ssl.truststore.location": str(pki.ca_cert),
    }
    context = listener_security(props, "SSL").ssl_context
    assert context is not None
    with_certificate = ssl.create_default_context(cafile=str(pki.ca_cert))
    with_certificate.load_cert_chain(pki.client_cert, pki.client_key)
    assert asyncio.run(_handshake(context, with_certificate)) == b"ok"
    without = ssl.create_default_context(cafile=str(pki.ca_cert))
    try:  # TLS 1.3: the server refuses after the client's handshake ends, so the client sees an error or an EOF
        refused = asyncio.run(_handshake(context, without))
    except (ssl.SSLError, ConnectionError):
        refused = b""
    assert refused == b""


def test_a_client_that_does_not_trust_the_ca_is_refused_by_its_own_check(pki: Pki) -> None:
    context = listener_security({"ssl.keystore.location": str(pki.server_pem)}, "SSL").ssl_context
    assert context is not None
    assert asyncio.run(_handshake(context, ssl.create_default_context(cafile=str(pki.ca_cert)))) == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_handshake(context, ssl.create_default_context()))
