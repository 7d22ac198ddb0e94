"""A local cluster is locked down by default (issue 14): every process runs as its role, and it still works.

Method: `LocalCluster.up` as `hightide cluster up` runs it. The test reads what it made (the credentials files and
their modes, `cluster.json`, the nats-server config, each process's command line from /proc), drives the cluster
with the CLI (topic create as the admin, produce acks=all and consume as the client), and checks that the client's
credentials and a connection without any are refused a controller API and the metadata log (nats-server's
permissions violation, waited for with a deadline). The audit of the run is clean.

Second pass: each broker runs as its own user (`broker-<id>.creds`), a broker started later with a new id gets one
(the nats-servers reload their users) and joins; a command whose credentials are refused its request ends at once
with one line naming the subject and the user, exit 1.
"""

from __future__ import annotations

import asyncio
import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hightide.client.local_cluster import LocalCluster
from hightide.protocol.permissions import Role, broker_user
from hightide.protocol.subjects import ControllerApi, controller_api, metadata_subject
from hightide.runtime.nats import NatsSettings, PermissionRefused, connect
from support.audited import assert_history_clean
from support.cluster_cli import active_brokers, hightide, wait_for

pytestmark = pytest.mark.slow

CLUSTER_ID = "lockdown"
VIOLATION_DEADLINE_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster")
    local.up(brokers=3, controllers=1, cluster_id=CLUSTER_ID, config=[])
    try:
        wait_for(lambda: len(active_brokers(local)) == 3, 60, "three active brokers")
        yield local
    finally:
        local.down()
    assert_history_clean(local.lake)


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_each_process_runs_as_its_role_with_private_credentials(cluster: LocalCluster) -> None:
    state = cluster.read_state()
    assert state is not None
    body = json.loads(cluster.state_file.read_text())
    assert set(body["credentials"]) == {role.value for role in Role} | {broker_user(b) for b in (1, 2, 3)}
    for path in body["credentials"].values():
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600, path
    assert stat.S_IMODE((cluster.data_dir / "nats-auth").stat().st_mode) == 0o700
    seeds = [
        line for path in body["credentials"].values() for line in Path(path).read_text().split() if line[:2] == "SU"
    ]
    assert len(seeds) == len(set(seeds)) == len(Role) + 3
    server_config = (cluster.data_dir / "nats.conf").read_text()
    assert "authorization {" in server_config
    assert not any(seed in server_config for seed in seeds), "the server's config holds a secret"
    expected = {
        **{pid: Role.CONTROLLER.value for pid in state.controllers.values()},
        **{pid: broker_user(int(broker)) for broker, pid in state.brokers.items()},
        state.archiver: Role.ARCHIVER.value,
    }
    for pid, user in expected.items():
        assert pid is not None
        assert f"nats.credentials.file={state.credentials[user]}" in _cmdline(pid), (pid, user)
    # A fourth broker gets a user of its own: the nats-server reloads its users, and the broker joins.
    pid = cluster.start_broker(4)
    wait_for(lambda: len(active_brokers(cluster)) == 4, 60, "four active brokers")
    state = cluster.read_state()
    assert state is not None and broker_user(4) in state.credentials
    assert f"nats.credentials.file={state.credentials[broker_user(4)]}" in _cmdline(pid)
    assert state.credentials[broker_user(4)] != state.credentials[Role.BROKER.value]


def test_topic_create_produce_acks_all_and_consume_work_with_every_role_restricted(cluster: LocalCluster) -> None:
    created = hightide(cluster.data_dir, "topic", "create", "locked", "--partitions", "2", "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    produced = hightide(
        cluster.data_dir, "produce", "locked", "--acks", "all", "--print-acks", stdin="one\ntwo\nthree\n"
    )
    assert produced.returncode == 0, produced.stderr
    acks = [json.loads(line) for line in produced.stdout.splitlines()]
    assert [a["error"] for a in acks] == [None, None, None]
    consumed = hightide(
        cluster.data_dir, "consume", "locked", "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000"
    )
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["one", "three", "two"]


def test_a_refused_command_says_so_at_once_in_one_line(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    state = cluster.read_state()
    assert state is not None
    client = state.credentials_file(Role.CLIENT)
    monkeypatch.setenv("HIGHTIDE_NATS_CREDENTIALS", str(client))  # a topic create with a client's credentials
    refused = hightide(
        cluster.data_dir, "topic", "create", "not-mine", "--partitions", "1", "--replication-factor", "1"
    )
    subject = controller_api(CLUSTER_ID, ControllerApi.CREATE_TOPICS)
    assert refused.returncode == 1, refused
    assert refused.stderr.splitlines() == [
        f'hightide topic create: NATS refused to publish to "{subject}" (permissions violation), '
        f"as the NATS user of {client} (HIGHTIDE_NATS_CREDENTIALS)"
    ]


@pytest.mark.parametrize("role", [Role.CLIENT, None], ids=["client", "no-credentials"])
def test_a_client_cannot_create_topics_nor_append_to_the_metadata_log(cluster: LocalCluster, role: Role | None) -> None:
    state = cluster.read_state()
    assert state is not None

    async def scenario() -> list[str]:
        errors: list[str] = []

        async def on_error(error: Exception) -> None:
            errors.append(str(error).lower())

        credentials = None if role is None else state.credentials_file(role)
        nc = await connect(NatsSettings(url=state.nats_url, credentials_file=credentials, max_reconnect_attempts=0))
        nc._error_cb = on_error  # the test reads what nats-server said to this connection
        try:
            subjects = [controller_api(CLUSTER_ID, ControllerApi.CREATE_TOPICS), metadata_subject(CLUSTER_ID)]
            for subject in subjects:
                try:  # a waiting request hears of the refusal itself (the error callback does not)
                    await nc.request(subject, b"forged", timeout=60)
                except PermissionRefused as refused:
                    errors.append(f"permissions violation for publish to {refused.subject.lower()}")
            end = time.monotonic() + VIOLATION_DEADLINE_S
            while not all(any(s.lower() in e and "permissions violation" in e for e in errors) for s in subjects):
                assert time.monotonic() < end, f"not refused: {errors}"
                await asyncio.sleep(0.02)  # polling the error callback's list, bounded by the deadline
            return errors
        finally:
            await nc.close()

    assert asyncio.run(scenario())
