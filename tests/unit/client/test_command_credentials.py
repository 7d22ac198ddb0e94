"""Which NATS credentials a `hightide` command uses against a local cluster (issue 14): the admin's for the
commands that change the cluster (Kafka's admin tools), the client's for the rest, HIGHTIDE_NATS_CREDENTIALS over
both, and none for a NATS that is not the local cluster's.

Method: the real argument parser and a `cluster.json` written as `cluster up` writes it; no process is started.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.client.cli import build_parser
from hightide.client.commands import nats_credentials
from hightide.client.local_cluster import ClusterState, LocalCluster
from hightide.protocol.permissions import Role

URL = "nats://127.0.0.1:4999"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HIGHTIDE_NATS_CREDENTIALS", raising=False)
    monkeypatch.delenv("HIGHTIDE_NATS_URL", raising=False)
    credentials = {role.value: str(tmp_path / f"{role.value}.creds") for role in Role}
    LocalCluster(tmp_path).write_state(ClusterState(nats_url=URL, cluster_id="c", nats_pid=-1, credentials=credentials))
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (["topic", "create", "t", "--partitions", "1", "--replication-factor", "1"], Role.ADMIN),
        (["topic", "alter", "t", "--partitions", "2"], Role.ADMIN),
        (["topic", "delete", "t"], Role.ADMIN),
        (["leader-election", "--election-type", "preferred", "--all-topic-partitions"], Role.ADMIN),
        (["group", "delete", "g"], Role.ADMIN),
        (["topic", "describe"], Role.CLIENT),
        (["topic", "list"], Role.CLIENT),
        (["produce", "t"], Role.CLIENT),
        (["consume", "t"], Role.CLIENT),
        (["group", "list"], Role.CLIENT),
        (["events", "tail"], Role.CLIENT),
    ],
)
def test_a_command_uses_the_role_it_needs(data_dir: Path, argv: list[str], role: Role) -> None:
    args = build_parser().parse_args([*argv, "--data-dir", str(data_dir)])
    assert nats_credentials(args) == data_dir / f"{role.value}.creds"


def test_the_environment_wins(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGHTIDE_NATS_CREDENTIALS", "/elsewhere/mine.creds")
    args = build_parser().parse_args(["topic", "delete", "t", "--data-dir", str(data_dir)])
    assert nats_credentials(args) == Path("/elsewhere/mine.creds")


def test_another_nats_gets_none_of_the_local_clusters_credentials(data_dir: Path) -> None:
    args = build_parser().parse_args(
        ["topic", "list", "--nats-url", "nats://10.0.0.9:4222", "--data-dir", str(data_dir)]
    )
    assert nats_credentials(args) is None
