"""`hightide cluster up` starts the archiver; `cluster down` stops it only after the services' last events are in.

Method: a real local cluster (`LocalCluster`, as `hightide cluster up` runs it: nats-server, a controller, a broker,
the archiver, each a process). After `down`, the lake at `<data-dir>/lake` is read back: every emitter's events are
there with sequences 0, 1, 2, ... and no gap or repeat, including those emitted while the services stopped (the
controller's record of the broker's controlled shutdown), which only the archiver's catch-up before its own stop
can have archived.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from hightide.client.local_cluster import LocalCluster, pid_alive
from hightide.lake import read_envelopes
from hightide.protocol.envelope import Emitter
from support.cli_process import run_cli

pytestmark = pytest.mark.slow


def hightide(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli([*args, "--data-dir", str(data_dir)], timeout=30)


def status(data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return hightide(data_dir, "cluster", "status", *flags)


def test_cluster_up_runs_the_archiver_and_down_archives_the_services_final_events(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    state = cluster.up(brokers=1, controllers=1, cluster_id="lakee2e", config=[])
    try:
        assert state.archiver is not None and pid_alive(state.archiver)
        end = time.monotonic() + 60
        while '"fenced": false' not in (result := status(cluster.data_dir, "--json")).stdout:
            assert time.monotonic() < end, f"no active broker: {result.stderr}"
            time.sleep(0.2)  # polling the cluster's status with a deadline
        assert json.loads(result.stdout)["archiver"] == state.archiver
        assert f"Archiver: {cluster.lake}\tPid: {state.archiver}" in status(cluster.data_dir).stdout
        # a partition, so that the broker has events of its own (a replica's)
        created = hightide(cluster.data_dir, "topic", "create", "t", "--partitions", "1", "--replication-factor", "1")
        assert created.returncode == 0, created.stderr
    finally:
        cluster.down()
    assert not pid_alive(state.archiver)
    sequences: dict[Emitter, list[int]] = defaultdict(list)
    for _, envelope in read_envelopes(cluster.lake):
        sequences[envelope.emitter].append(envelope.sequence)
    assert {e.service for e in sequences} == {"broker", "controller"}
    for emitter, seen in sequences.items():
        assert seen == list(range(len(seen))), f"{emitter}: a gap or a repeat"
    types = {envelope.type for _, envelope in read_envelopes(cluster.lake)}
    assert "ControlledShutdownStarted" in types, "the events of the shutdown itself were not archived"
