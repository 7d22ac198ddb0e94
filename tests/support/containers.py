"""The test fixtures' container mode (issue 14, room: infra): NATS and every Hightide service on Docker, from our
own images, chosen by `HIGHTIDE_CONTAINERS=1`; local processes otherwise (the default).

What runs where:
- `NatsContainer` is `support.nats.NatsServer` on the `hightide-nats` image (JetStream, the store bind-mounted
  from the test's directory, the same loopback port across a stop and a start), so an integration suite that
  takes NATS away and brings it back does the same to a container.
- `ContainerCluster` is `LocalCluster` with each process a container of the `hightide` image (and nats-server of
  `hightide-nats`): the same arguments, the data directory bind-mounted at its own path (the tests read the
  brokers' logs and the lake from it), each service's output appended to the same `logs/<name>.log`. Containers
  share the host's network, so the CLI the tests run reaches NATS and the Kafka listeners at 127.0.0.1 as before.
  A service's pid in the cluster state is its container's main process as the host sees it, so a test's
  `kill -9` or SIGSTOP is a kill or a pause of that container; restarting a service replaces its container.

Images are never pulled: a missing image fails the fixture with "run `make images`". Ryuk (testcontainers'
reaper, an image we do not have) is off; every container is removed by the fixture that made it, and each is
labelled `hightide.test=<run>` so `make test-containers` can remove strays.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from hightide.client.local_cluster import ClusterError, LocalCluster, free_port, nats_node_config

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

from testcontainers.core.container import DockerContainer

ENV_FLAG = "HIGHTIDE_CONTAINERS"
IMAGE_TAG = os.environ.get("HIGHTIDE_TAG", "dev")
HIGHTIDE_IMAGE = f"hightide:{IMAGE_TAG}"
NATS_IMAGE = f"hightide-nats:{IMAGE_TAG}"
VENV_PYTHON = "/opt/hightide/venv/bin/python"  # the image's locked environment (infra/Dockerfile)
NATS_BINARY = "/usr/local/bin/nats-server"
LABEL = "hightide.test"
RUN_ID = uuid.uuid4().hex[:8]
READY_TIMEOUT_S = 30.0


def containers_enabled() -> bool:
    """Whether the fixtures run on containers: `HIGHTIDE_CONTAINERS=1` asks for it (and then a missing engine or
    image fails the test rather than quietly falling back to processes)."""
    return os.environ.get(ENV_FLAG, "") not in ("", "0")


def mode() -> str:
    return "containers" if containers_enabled() else "processes"


def _require_image(image: str) -> None:
    import docker  # noqa: PLC0415 (only in container mode)

    client = docker.from_env()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise AssertionError(f"image {image} is missing: run `make images` (images are built, never pulled)") from None
    finally:
        client.close()


def _service(image: str, name: str, entrypoint: list[str], command: list[str], mounts: Sequence[Path]) -> Any:
    """A container on the host's network, as this test's user, with `mounts` bound at their own paths."""
    container = (
        DockerContainer(image)
        .with_name(f"hightide-test-{RUN_ID}-{name}-{uuid.uuid4().hex[:6]}")
        .with_command(command)
        .with_kwargs(
            network="host",
            entrypoint=entrypoint,
            user=f"{os.getuid()}:{os.getgid()}",
            labels={LABEL: RUN_ID},
            # The images' HEALTHCHECKs probe a fixed port (9404, 8222) that a test's service does not open: the
            # fixtures wait on their own conditions instead.
            healthcheck={"test": ["NONE"]},
            working_dir="/tmp",
        )
        .with_env("HOME", "/tmp")
    )
    for mount in mounts:
        container = container.with_volume_mapping(str(mount), str(mount), "rw")
    return container


def _host_pid(container: Any) -> int:
    wrapped = container.get_wrapped_container()
    wrapped.reload()
    return int(wrapped.attrs["State"]["Pid"])


def _wait_port(port: int, alive: Any, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        assert alive(), f"{what} exited before opening port {port}"
        assert time.monotonic() < deadline, f"{what} did not open port {port} in time"
        time.sleep(0.05)  # polling for the port, bounded by the deadline above


class NatsLike(Protocol):
    """What the integration suites use of a nats-server: its URL, and stop/start keeping port and store."""

    directory: Path
    port: int

    @property
    def url(self) -> str: ...

    def start(self) -> NatsLike: ...

    def stop(self) -> None: ...


class NatsContainer:
    """nats-server with JetStream in a `hightide-nats` container: `support.nats.NatsServer`'s interface."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.container: Any = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsContainer:
        assert self.container is None, "already running"
        _require_image(NATS_IMAGE)
        store = self.directory / "js"
        store.mkdir(parents=True, exist_ok=True)
        command = ["-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store)]
        self.container = _service(NATS_IMAGE, "nats", [NATS_BINARY], command, [self.directory]).start()
        _wait_port(self.port, self._running, "the nats container")
        return self

    def _running(self) -> bool:
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        return bool(wrapped.status == "running")

    def stop(self) -> None:
        """SIGTERM (nats-server's clean shutdown) and wait for the exit; the container is removed, the store
        stays in the test's directory for the next start."""
        if self.container is None:
            return
        wrapped = self.container.get_wrapped_container()
        with contextlib.suppress(Exception):
            wrapped.stop(timeout=10)
        (self.directory / "nats-server.log").write_bytes(wrapped.logs())
        self.container.stop()
        self.container = None


def nats_server(directory: Path, port: int | None = None) -> NatsLike:
    """The integration suites' nats-server: a container in container mode, a local process otherwise."""
    if containers_enabled():
        return NatsContainer(directory, port)
    from support.nats import NatsServer  # noqa: PLC0415

    return NatsServer(directory, port)


class ContainerCluster(LocalCluster):
    """`LocalCluster` whose nats-server and services are containers of our images (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.containers: dict[str, Any] = {}

    def up(self, **kwargs: Any) -> Any:
        _require_image(HIGHTIDE_IMAGE)
        _require_image(NATS_IMAGE)
        return super().up(**kwargs)

    def _start_nats(self, nodes: int, authorization: str, admin: Path) -> tuple[str, dict[str, int]]:
        """One nats-server container with the cluster's users (`authorization`, as LocalCluster writes it); the
        container suites run one NATS node (`--nats-nodes` is the process suites')."""
        del admin  # the single node is ready once its port answers: no cluster to ask about
        if nodes != 1:
            raise ClusterError("the container suites run one NATS node")
        port = free_port()
        store = self.data_dir / "nats"
        store.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "nats.conf"  # as LocalCluster writes it
        conf.write_text(
            nats_node_config(node=1, client_ports=(port,), route_ports=(), store=store, authorization=authorization)
        )
        conf.chmod(0o600)
        pid = self._run(NATS_IMAGE, "nats-server", [NATS_BINARY, "-c", str(conf)])
        try:
            _wait_port(port, lambda: _host_pid(self.containers["nats-server"]) > 0, "the nats container")
        except AssertionError as error:
            raise ClusterError(str(error)) from None
        return f"nats://127.0.0.1:{port}", {"1": pid}

    def restart_nats(self) -> None:
        """nats-server again in a new container with the cluster's own config: the same port, the same store."""
        state = self._require_state()
        state.nats_pid = self._run(NATS_IMAGE, "nats-server", [NATS_BINARY, "-c", str(self.data_dir / "nats.conf")])
        self.write_state(state)

    def _spawn(self, name: str, argv: list[str]) -> int:
        return self._run(HIGHTIDE_IMAGE, name, [VENV_PYTHON, *argv])

    def _run(self, image: str, name: str, argv: list[str]) -> int:
        """Start `argv` in a new container named for the service (an exited one of the same service is removed),
        its output appended to logs/<name>.log; its host pid."""
        old = self.containers.pop(name, None)
        if old is not None:
            with contextlib.suppress(Exception):
                old.stop()
        log = self.data_dir / "logs" / f"{name}.log"
        script = f"exec {shlex.join(argv)} >>{shlex.quote(str(log))} 2>&1"
        container = _service(image, name, ["/bin/sh", "-c"], [script], [self.data_dir]).start()
        self.containers[name] = container
        return _host_pid(container)

    def down(self) -> Any:
        try:
            return super().down()
        finally:
            for container in self.containers.values():
                with contextlib.suppress(Exception):
                    container.stop()
            self.containers.clear()


def local_cluster(data_dir: Path) -> LocalCluster:
    """The e2e suites' cluster: containers in container mode, local processes otherwise."""
    return ContainerCluster(data_dir) if containers_enabled() else LocalCluster(data_dir)
