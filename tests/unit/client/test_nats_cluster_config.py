"""A local NATS cluster's node configuration, and `cluster up --nats-nodes` refusing what it cannot run (issue 14).

Method: `nats_node_config`'s text is checked by the installed nats-server itself (`nats-server -t`: parse the
configuration and exit) and read for what a cluster needs (a distinct name, its own store, routes to every node);
the CLI runs in a process of its own, as a user runs it, and must refuse on its arguments (exit 2, one line, no
traceback) before it starts anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hightide.client.local_cluster import find_nats_server, nats_node_config

CLIENT_PORTS = (14222, 14223, 14224)
ROUTE_PORTS = (16222, 16223, 16224)


def test_each_node_of_three_has_its_name_listener_store_and_routes_to_every_node(tmp_path: Path) -> None:
    configs = [
        nats_node_config(node=n, client_ports=CLIENT_PORTS, route_ports=ROUTE_PORTS, store=tmp_path / f"nats-{n}")
        for n in (1, 2, 3)
    ]
    for node, config in enumerate(configs, start=1):
        assert f"server_name: nats-{node}\n" in config  # JetStream's peers must have distinct names
        assert f"listen: 127.0.0.1:{CLIENT_PORTS[node - 1]}\n" in config
        assert f'store_dir: "{tmp_path / f"nats-{node}"}"' in config
        assert f"listen: 127.0.0.1:{ROUTE_PORTS[node - 1]}\n" in config
        assert all(f"nats-route://127.0.0.1:{port}" in config for port in ROUTE_PORTS)
        path = tmp_path / f"nats-{node}.conf"
        path.write_text(config)
        checked = subprocess.run(
            [find_nats_server(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30, check=False
        )
        assert checked.returncode == 0, checked.stderr


def test_a_single_node_has_no_cluster_block(tmp_path: Path) -> None:
    config = nats_node_config(node=1, client_ports=(14222,), route_ports=(), store=tmp_path / "nats")
    assert "cluster" not in config and "jetstream" in config


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (["--nats-nodes", "0"], "--nats-nodes must be 1 to 5, not 0"),
        (["--nats-nodes", "6"], "--nats-nodes must be 1 to 5, not 6"),
        (["--nats-nodes", "3", "--nats-url", "nats://127.0.0.1:1"], "cannot be combined with --nats-url"),
    ],
)
def test_cluster_up_refuses_a_node_count_it_cannot_run(tmp_path: Path, arguments: list[str], reason: str) -> None:
    command = [sys.executable, "-m", "hightide.client.cli", "cluster", "up", "--data-dir", str(tmp_path), *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert reason in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "cluster.json").exists(), "nothing was started"
