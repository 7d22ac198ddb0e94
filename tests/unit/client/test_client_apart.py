"""`bench_kafka.client_apart` puts the benchmark's client and its cluster on CPUs of their own for a block, and gives
every thread of both its CPUs back afterwards (so the runs after it have the whole machine again).

Method: this process, with a thread of its own, and a child process with two threads stand for the client and the
cluster; each thread's CPUs are read from the kernel (`sched_getaffinity` of the thread id) inside the block and
after it. A thread started inside the block must come back too: librdkafka starts its threads while the client is
confined.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from hightide.client.bench_kafka import client_apart, client_apart_cpus
from hightide.client.local_cluster import ClusterState

CHILD = """
import sys, threading
threading.Thread(target=sys.stdin.read, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def _affinities(pid: int) -> dict[int, set[int]]:
    """Each live thread of `pid` and its CPUs (a thread that ends while it is read is left out)."""
    found = {}
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        try:
            found[tid] = os.sched_getaffinity(tid)
        except OSError:
            continue
    return found


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    try:
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


def test_the_client_and_the_cluster_get_cpus_of_their_own_and_every_thread_its_own_back(
    child: subprocess.Popen[str],
) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    client, cluster = {cpus[0]}, {cpus[-1]}  # one CPU for both where the machine has one
    release = threading.Event()
    own_thread = threading.Thread(target=release.wait)
    own_thread.start()
    started_inside = threading.Event()
    inside: list[threading.Thread] = []
    try:
        before_own, before_child = _affinities(os.getpid()), _affinities(child.pid)
        assert len(before_child) == 2
        with client_apart([child.pid], client, cluster):
            assert set(map(frozenset, _affinities(os.getpid()).values())) == {frozenset(client)}
            assert set(map(frozenset, _affinities(child.pid).values())) == {frozenset(cluster)}

            def wait_for_release() -> None:
                started_inside.set()
                release.wait()

            late = threading.Thread(target=wait_for_release)
            late.start()
            inside.append(late)
            assert started_inside.wait(30)
            assert os.sched_getaffinity(late.native_id or 0) == client  # a thread started here takes its starter's
        after_own = _affinities(os.getpid())
        assert os.sched_getaffinity(late.native_id or 0) == before_own[threading.main_thread().native_id or 0]
        # (a thread of the test runner's own may have ended meanwhile: those still running are compared)
        assert {tid: after_own[tid] for tid in before_own if tid in after_own} == {
            tid: cpus for tid, cpus in before_own.items() if tid in after_own
        }
        assert _affinities(child.pid) == before_child
    finally:
        release.set()
        own_thread.join(30)
        for thread in inside:
            thread.join(30)


def test_a_process_that_has_ended_is_passed_over_and_the_rest_get_their_cpus_back(
    child: subprocess.Popen[str],
) -> None:
    """A cluster process may be gone by the time the block starts or ends (one that crashed in the run): neither
    entering nor leaving fails on it."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait(timeout=30)
    cpus = sorted(os.sched_getaffinity(0))
    before = _affinities(child.pid)
    with client_apart([ended.pid, child.pid], {cpus[0]}, {cpus[-1]}):
        assert set(map(frozenset, _affinities(child.pid).values())) == {frozenset({cpus[-1]})}
    assert _affinities(child.pid) == before
    assert os.sched_getaffinity(0) == set(cpus)


def test_the_cpus_are_split_first_against_the_rest_or_not_at_all() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    split = client_apart_cpus()
    if len(cpus) < 2:
        assert split is None
    else:
        assert split == ({cpus[0]}, set(cpus[1:]))


def test_the_cluster_is_its_nats_servers_controllers_brokers_archiver_and_canary() -> None:
    """What `client_apart` confines (and the demo stops): `ClusterState.pids`."""
    state = ClusterState(
        nats_url="nats://127.0.0.1:4222",
        cluster_id="bench",
        nats_pid=10,
        nats_pids={"1": 10, "2": 11},
        controllers={"1": 20},
        brokers={"1": 30, "2": 31},
        archiver=40,
        canary=50,
    )
    assert state.pids() == [10, 11, 20, 30, 31, 40, 50]
    state.archiver = state.canary = None
    state.nats_pid, state.nats_pids = -1, {}  # a state written before nats-server started
    assert state.pids() == [20, 30, 31]
