"""NATS users for a Hightide deployment: a fresh nkey per role (and per broker), its credentials file, and the
nats-server `authorization` block that admits them.

Room: libs/runtime. The permissions themselves are data in `hightide.protocol.permissions`; this module owns the
secrets: it draws each user's nkey seed from the OS's random source and writes it to `<dir>/<user>.creds` (mode
0600, the directory 0700). The users are the roles (`controller.creds`, `broker.creds`, ...) and, for the broker
ids it is given, each broker's own (`broker-<id>.creds`: it answers only its own APIs and emits only its own
events). The server's configuration holds only the public keys, so it is no secret. A credentials file is what
`nats.credentials.file` takes. `hightide cluster up` calls `ensure_credentials` in its data dir; `hightide
nats-auth --out DIR [--broker-ids 1,2,3]` (docker-compose, Kubernetes) writes the same files plus `auth.conf`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import nkeys  # type: ignore[import-untyped]

from hightide.protocol.permissions import Role, authorization_block, broker_user
from hightide.runtime.config import ConfigError
from hightide.runtime.nats import credentials_seed

CREDENTIALS_DIR: Final = "nats-auth"
AUTH_CONF: Final = "auth.conf"
_SEED_BYTES: Final = 32


def credentials_path(directory: Path, user: str) -> Path:
    """The credentials file of `user` (a role, or `broker_user(id)`) in `directory`."""
    return directory / f"{user}.creds"


def ensure_credentials(directory: Path, broker_ids: Iterable[int] = ()) -> dict[str, Path]:
    """The credentials file of each role, and of each broker of `broker_ids`, in `directory` (keyed by user name:
    the `Role` for a role's user, `broker-<id>` for a broker's): kept when it is there (a restart keeps its users),
    made otherwise. To rotate, remove the files (or the directory) and start again."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    users: list[str] = [*Role, *(broker_user(broker_id) for broker_id in sorted(set(broker_ids)))]
    paths: dict[str, Path] = {}
    for user in users:
        path = credentials_path(directory, user)
        if not path.exists():
            _write_private(path, _credentials_text(user, _new_seed()))
        paths[user] = path
    return paths


def public_keys(paths: Mapping[str, Path]) -> dict[str, str]:
    """Each user's public nkey (`U...`), from its credentials file."""
    keys = {}
    for user, path in paths.items():
        seed = credentials_seed(path)
        if seed is None:
            raise ConfigError(f"{path} holds a JWT: Hightide's own users are nkey users (a seed alone)")
        keys[user] = nkeys.from_seed(bytearray(seed.encode())).public_key.decode()
    return keys


def server_authorization(cluster_id: str, paths: Mapping[str, Path], *, no_auth_user: Role | None = None) -> str:
    """The nats-server `authorization` block for the users whose credentials are `paths`."""
    return authorization_block(cluster_id, public_keys(paths), no_auth_user=no_auth_user)


def write_deployment(directory: Path, cluster_id: str, broker_ids: Iterable[int] = ()) -> dict[str, Path]:
    """Credentials for every role and each broker of `broker_ids`, and `auth.conf` (to `include` in nats.conf),
    in `directory`. The broker users already there are kept in `auth.conf` too."""
    existing = {int(path.stem.removeprefix("broker-")) for path in _broker_files(directory)}
    paths = ensure_credentials(directory, {*existing, *broker_ids})
    (directory / AUTH_CONF).write_text(
        f"# Hightide's NATS users for cluster {cluster_id!r} (made by hightide.runtime.nats_auth).\n"
        + server_authorization(cluster_id, paths)
    )
    return paths


def _broker_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.glob("broker-*.creds") if p.stem.removeprefix("broker-").isdigit()]


def _new_seed() -> str:
    seed: bytes = nkeys.encode_seed(os.urandom(_SEED_BYTES), nkeys.PREFIX_BYTE_USER)
    return seed.decode()


def _credentials_text(user: str, seed: str) -> str:
    return (
        f"# Hightide NATS credentials of the user {user!r}: an nkey user (the server knows its public key).\n"
        "# Keep it secret: whoever holds this file acts as that user.\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n"
    )


def _write_private(path: Path, text: str) -> None:
    """Write `text` to a new file readable by its owner only (never briefly readable by others)."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)  # a previous run's leftover: O_CREAT would keep its mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
