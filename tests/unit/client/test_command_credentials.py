"""Which NATS credentials a `hightide` command uses against a local cluster (issue 14): the admin's for the
commands that change the cluster (Kafka's admin tools), the client's for the rest, HIGHTIDE_NATS_CREDENTIALS over
both, `--config nats.credentials.file=FILE` (CONTRACT.md) over all, and none for a NATS that is not the local
cluster's. A command's `--config` takes the `nats.*` settings; other keys only where the command has a use for them.

Method: the real argument parser and a `cluster.json` written as `cluster up` writes it; no process is started.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.client.cli import build_parser, main
from hightide.client.commands import command_nats_settings, nats_credentials, other_configs
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


def test_config_credentials_win_over_the_environment_and_the_cluster(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIGHTIDE_NATS_CREDENTIALS", "/elsewhere/mine.creds")
    mine = data_dir / "given.creds"
    argv = ["topic", "list", "--config", f"nats.credentials.file={mine}", "--data-dir", str(data_dir)]
    assert nats_credentials(build_parser().parse_args(argv)) == mine


def test_config_credentials_reach_a_nats_that_is_not_the_local_clusters(data_dir: Path) -> None:
    mine = data_dir / "admin.creds"
    mine.write_text(_CREDS)
    argv = ["topic", "delete", "t", "--nats-url", "nats://10.0.0.9:4222", "--config", f"nats.credentials.file={mine}"]
    settings = command_nats_settings(build_parser().parse_args([*argv, "--data-dir", str(data_dir)]))
    assert (settings.url, settings.credentials_file) == ("nats://10.0.0.9:4222", mine)


def test_a_user_and_password_replace_the_local_clusters_credentials(data_dir: Path) -> None:
    argv = ["topic", "list", "--config", "nats.user=ops", "--config", "nats.password=pw", "--data-dir", str(data_dir)]
    settings = command_nats_settings(build_parser().parse_args(argv))
    assert (settings.user, settings.password, settings.credentials_file) == ("ops", "pw", None)


def test_topic_configs_leave_out_the_nats_settings(data_dir: Path) -> None:
    argv = ["topic", "create", "t", "--config", "retention.ms=1000", "--config", "nats.credentials.file=/x.creds"]
    args = build_parser().parse_args([*argv, "--data-dir", str(data_dir)])
    assert other_configs(args) == {"retention.ms": "1000"}
    assert nats_credentials(args) == Path("/x.creds")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topic", "list", "--config", "retention.ms=1000"], "--config retention.ms: this command takes only"),
        (["consume", "t", "--config", "nats.credentials=/x.creds"], "unknown NATS setting nats.credentials "),
        (["group", "list", "--config", "nats.credentials.file"], "expected key=value"),
        (["topic", "alter", "t", "--config", "nats.user=ops"], "nothing to alter"),
    ],
)
def test_a_config_the_command_cannot_use_is_a_usage_error_before_anything_runs(
    data_dir: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--data-dir", str(data_dir)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


_CREDS = """-----BEGIN NATS USER JWT-----
eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.x
------END NATS USER JWT------

-----BEGIN USER NKEY SEED-----
SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4
------END USER NKEY SEED------
"""
