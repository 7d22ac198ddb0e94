"""A throwaway certificate authority for TLS tests, made with the `openssl` command (no Python crypto package is in
the lockfile): a CA, a server certificate for 127.0.0.1 and localhost signed by it, and a client certificate."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    server_pem: Path  # key and chain in one file: ssl.keystore.location with ssl.keystore.type=PEM
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(directory: Path, name: str, subject: str, extensions: str) -> None:
    _openssl("req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=directory,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=hightide-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    _signed(directory, "server", "/CN=localhost", server_ext)
    _signed(directory, "client", "/CN=hightide-test-client", "extendedKeyUsage=clientAuth\n")
    server_pem = directory / "server.pem"
    server_pem.write_text((directory / "server.key").read_text() + (directory / "server.crt").read_text())
    return Pki(
        ca_cert=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        server_pem=server_pem,
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
    )
