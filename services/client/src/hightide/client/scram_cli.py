"""`hightide scram-credentials`: add and delete SCRAM users in a Kafka listener's credentials file (issue 15).

Room: services/client. Kafka adds SCRAM users with `kafka-configs --alter --add-config
'SCRAM-SHA-256=[password=...]' --entity-type users --entity-name alice` (or `kafka-storage format --add-scram
'SCRAM-SHA-256=[name=alice,password=...]'`) into its metadata log; Hightide's brokers read them from the file
`sasl.scram.credentials.file` names (a Kubernetes secret mounts as one). This command writes that file with
`kafka-storage`'s `--add-scram` syntax: the salt is drawn here, only the salted keys are written (never the
password), and the file is replaced atomically with mode 0600. Brokers read it when they start.

    hightide scram-credentials --file users.txt --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]'
    hightide scram-credentials --file users.txt --delete-scram 'SCRAM-SHA-512=[name=alice]'
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import re
import secrets
from pathlib import Path
from typing import Any

from hightide.client.commands import UsageError
from hightide.core import sasl

SALT_BYTES = 32
DEFAULT_ITERATIONS = 4096  # kafka-configs' and kafka-storage's default
_SPEC = re.compile(r"(?P<mechanism>[A-Z0-9-]+)=\[(?P<fields>.*)\]", re.DOTALL)


def add_scram_command(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "scram-credentials",
        parents=[common],
        help="add or delete SCRAM users in a Kafka listener's credentials file (sasl.scram.credentials.file)",
    )
    parser.add_argument("--file", type=Path, required=True, help="the credentials file (created if missing)")
    parser.add_argument(
        "--add-scram",
        action="append",
        default=[],
        metavar="SPEC",
        help="'SCRAM-SHA-256=[name=alice,password=secret]' (optional iterations=N, 4096..16384; salt=<base64>)",
    )
    parser.add_argument(
        "--delete-scram", action="append", default=[], metavar="SPEC", help="'SCRAM-SHA-256=[name=alice]'"
    )
    parser.set_defaults(run=run)


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """`MECHANISM=[key=value,...]` (kafka-storage's --add-scram syntax; a password may not hold a comma)."""
    match = _SPEC.fullmatch(spec.strip())
    if match is None or match["mechanism"] not in sasl.SCRAM_MECHANISMS:
        raise UsageError("expected SCRAM-SHA-256=[name=...,password=...] or SCRAM-SHA-512=[...]")
    fields: dict[str, str] = {}
    for item in match["fields"].split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in ("name", "password", "iterations", "salt"):
            raise UsageError(f"{match['mechanism']}: expected name=, password=, iterations= or salt= entries")
        fields[key.strip()] = value
    if not fields.get("name"):
        raise UsageError(f"{match['mechanism']}: name= is required")
    return match["mechanism"], fields


def _credential(mechanism: str, fields: dict[str, str]) -> sasl.ScramCredential:
    if not fields.get("password"):
        raise UsageError(f"{mechanism}: password= is required to add a user")
    iterations_text = fields.get("iterations", str(DEFAULT_ITERATIONS))
    if not iterations_text.isdigit():
        raise UsageError(f"{mechanism}: iterations must be a number")
    try:
        salt = secrets.token_bytes(SALT_BYTES) if "salt" not in fields else _b64(fields["salt"])
        return sasl.scram_credential(mechanism, fields["password"], salt, int(iterations_text))
    except ValueError as error:
        raise UsageError(f"{mechanism}: {error}") from None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("salt must be base64") from None


def run(args: argparse.Namespace) -> int:
    if not args.add_scram and not args.delete_scram:
        raise UsageError("give --add-scram or --delete-scram")
    path: Path = args.file
    try:
        table = sasl.parse_credentials_file(path.read_text()) if path.exists() else {}
    except ValueError as error:
        raise UsageError(f"{path}: {error}") from None
    for spec in args.delete_scram:
        mechanism, fields = parse_spec(spec)
        if table.pop((mechanism, fields["name"]), None) is None:
            raise UsageError(f"{path} has no {mechanism} credential for {fields['name']}")
    for spec in args.add_scram:
        mechanism, fields = parse_spec(spec)
        table[(mechanism, fields["name"])] = _credential(mechanism, fields)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(sasl.credentials_file_text(table))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    for mechanism, user in sorted(table):
        print(f"{mechanism} {user}")
    return 0
