"""The `hightide` subcommands that talk to a cluster: cluster, topic, broker list, leader-election, produce, consume.

Room: services/client. Each command finds the cluster (CONTRACT.md: `--nats-url`, HIGHTIDE_NATS_URL, the local
cluster's cluster.json, nats://127.0.0.1:4222), does one thing, prints its result, and returns the exit code:
0 success, 1 the operation failed (the message names the Kafka error), 2 usage or input error.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Final, TextIO, cast

from hightide.client.admin import Admin
from hightide.client.client_events import open_client_events, records_consumed, send_completed, send_invoked
from hightide.client.connection import ClusterConnection
from hightide.client.consumer import Consumer, ConsumerConfig
from hightide.client.local_cluster import MAX_NATS_NODES, ClusterError, LocalCluster, pid_alive
from hightide.client.producer import ProduceFailed, Producer, ProducerConfig, RecordFuture
from hightide.core import topic_configs
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode, HightideError
from hightide.protocol.permissions import Role
from hightide.runtime.events import EventSink
from hightide.runtime.logging import get_logger
from hightide.runtime.nats import NATS_CONFIG_NAMES, NatsSettings, NatsUnavailable, nats_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"

_LOG = get_logger("hightide.client")


class UsageError(Exception):
    pass


def cluster_address(args: argparse.Namespace) -> tuple[str, str]:
    """(nats url, cluster id) by CONTRACT.md's order of precedence."""
    state = None
    try:
        state = LocalCluster(args.data_dir).read_state()
    except ClusterError:
        state = None
    url = (
        args.nats_url
        or nats_config(args).get("nats.url")
        or os.environ.get("HIGHTIDE_NATS_URL")
        or (state.nats_url if state else DEFAULT_NATS_URL)
    )
    cluster_id = args.cluster_id or os.environ.get("HIGHTIDE_CLUSTER_ID") or (state.cluster_id if state else "local")
    return url, cluster_id


CREDENTIALS_ENV = "HIGHTIDE_NATS_CREDENTIALS"
# NATS permissions (issue 14): the commands that change the cluster connect as the admin, the others as a client.
ADMIN_COMMANDS: Final = frozenset(
    {"topic create", "topic alter", "topic delete", "leader-election", "reassign", "group delete"}
)


def command_role(args: argparse.Namespace) -> Role:
    """The role a command needs: admin for topic, election, reassignment and group deletion, else client."""
    command = " ".join(str(part) for part in (getattr(args, "command", None), getattr(args, "action", None)) if part)
    top = str(getattr(args, "command", ""))
    return Role.ADMIN if command in ADMIN_COMMANDS or top in ADMIN_COMMANDS else Role.CLIENT


# `--config KEY=VALUE` on a command: its `nats.*` keys are how the command reaches NATS (CONTRACT.md: "or takes
# --config nats.credentials.file=FILE"). Only these commands also take other keys: topic configs (topic create and
# alter, as kafka-topics.sh's --config) and the brokers' configs (cluster up).
TAKES_OTHER_CONFIGS: Final = frozenset({"cluster up", "topic create", "topic alter"})


def nats_config(args: argparse.Namespace) -> dict[str, str]:
    """The `nats.*` settings among the command's `--config` items (an unknown `nats.*` name is a usage error)."""
    settings = {key: value for key, value in _key_values(getattr(args, "config", None)).items() if _is_nats(key)}
    unknown = sorted(set(settings) - set(NATS_CONFIG_NAMES))
    if unknown:
        raise UsageError(f"unknown NATS setting {', '.join(unknown)} (known: {', '.join(NATS_CONFIG_NAMES)})")
    return settings


def other_configs(args: argparse.Namespace) -> dict[str, str]:
    """The `--config` items that are not `nats.*` settings: topic configs on topic create and alter."""
    return {key: value for key, value in _key_values(args.config).items() if not _is_nats(key)}


def check_configs(args: argparse.Namespace) -> None:
    """Refuse, before anything is done, a `--config` key the command has no use for."""
    nats_config(args)
    command = " ".join(str(part) for part in (getattr(args, "command", None), getattr(args, "action", None)) if part)
    if command not in TAKES_OTHER_CONFIGS:
        others = sorted(key for key in _key_values(getattr(args, "config", None)) if not _is_nats(key))
        if others:
            raise UsageError(
                f"--config {others[0]}: this command takes only the NATS settings ({', '.join(NATS_CONFIG_NAMES)})"
            )


def _is_nats(key: str) -> bool:
    return key.startswith("nats.")


def command_nats_settings(
    args: argparse.Namespace, role: Role | None = None, *, name: str = "hightide-client"
) -> NatsSettings:
    """How a command reaches NATS: the URL by CONTRACT.md's order, its `--config nats.*` settings (TLS, a user or a
    token), and the credentials `nats_credentials` finds, unless a user or token was given instead."""
    url, _ = cluster_address(args)
    props = nats_config(args)
    if "nats.credentials.file" not in props and not {"nats.user", "nats.token"} & set(props):
        credentials = nats_credentials(args, role)
        if credentials is not None:
            props["nats.credentials.file"] = str(credentials)
    return nats_settings(props, url=url, name=name)


def nats_credentials(args: argparse.Namespace, role: Role | None = None) -> Path | None:
    """The credentials file a command connects with: `--config nats.credentials.file=FILE`, else
    HIGHTIDE_NATS_CREDENTIALS, else, on the local cluster of `--data-dir` (when the command talks to its NATS), that
    cluster's file for the command's role."""
    given = nats_config(args).get("nats.credentials.file")
    if given:
        return Path(given)
    explicit = os.environ.get(CREDENTIALS_ENV)
    if explicit:
        return Path(explicit)
    try:
        state = LocalCluster(args.data_dir).read_state()
    except ClusterError:
        return None
    url, _ = cluster_address(args)
    if state is None or url != state.nats_url:
        return None
    return state.credentials_file(role or command_role(args))


async def _connect(args: argparse.Namespace, role: Role | None = None) -> ClusterConnection:
    url, cluster_id = cluster_address(args)
    return await ClusterConnection.open(url, cluster_id, settings=command_nats_settings(args, role))


def _key_values(items: Sequence[str] | None) -> dict[str, str]:
    result = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"expected key=value, got {item!r}")
        result[key] = value
    return result


def _failed(command: str, error: int | ErrorCode, message: str = "") -> int:
    code = error if isinstance(error, ErrorCode) else ErrorCode(error)
    print(f"hightide {command}: {code.name}{': ' + message if message else ''}", file=sys.stderr)
    return EXIT_FAILED


# -- cluster ---------------------------------------------------------------------------------------------------


def cluster_up(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.data_dir)
    _url, cluster_id = cluster_address(args)
    _key_values(args.config)
    if not 1 <= args.nats_nodes <= MAX_NATS_NODES:  # issue 14: clustered NATS
        raise UsageError(f"--nats-nodes must be 1 to {MAX_NATS_NODES}, not {args.nats_nodes}")
    if args.nats_url is not None and args.nats_nodes != 1:
        raise UsageError("--nats-nodes starts NATS here: it cannot be combined with --nats-url")
    state = cluster.up(
        brokers=args.brokers,
        controllers=args.controllers,
        cluster_id=cluster_id,
        config=args.config or [],
        nats_url=args.nats_url,
        canary=args.canary,
        nats_nodes=args.nats_nodes,
    )
    print(f"starting a local cluster: {state.nats_url}, {args.controllers} controller(s), {args.brokers} broker(s)")
    credentials = state.credentials_file(Role.CLIENT)
    status = asyncio.run(_wait_ready(state.nats_url, state.cluster_id, args.brokers, args.timeout, credentials))
    if status is None:
        print(
            f"hightide cluster up: the cluster did not become ready (logs: {args.data_dir / 'logs'})", file=sys.stderr
        )
        return EXIT_FAILED
    _print_status(cluster, status, sys.stdout)
    if args.detach:
        return EXIT_OK
    print("running; press Ctrl-C to stop")
    try:
        while True:
            time.sleep(1)  # the foreground view: nothing to synchronise, it waits for Ctrl-C
    except KeyboardInterrupt:
        cluster.down()
    return EXIT_OK


async def _wait_ready(
    url: str, cluster_id: str, brokers: int, timeout_s: float, credentials: Path | None = None
) -> wire.DescribeClusterResponse | None:
    deadline = time.monotonic() + timeout_s
    conn = None
    while conn is None:
        try:
            conn = await ClusterConnection.open(url, cluster_id, credentials_file=credentials)
        except NatsUnavailable:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.1)  # polling for readiness, bounded by the deadline
    try:
        admin = Admin(conn, timeout_s=2.0)
        while time.monotonic() < deadline:
            status = await admin.describe_cluster()
            unfenced = [b for b in status.brokers if not b.fenced]
            if status.error == 0 and len(unfenced) >= brokers:
                return status
            await asyncio.sleep(0.1)  # polling for readiness, bounded by the deadline
        return None
    finally:
        await conn.close()


def cluster_down(args: argparse.Namespace) -> int:
    state = LocalCluster(args.data_dir).down()
    print("no local cluster" if state is None else "stopped")
    return EXIT_OK


def cluster_status(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.data_dir)
    url, cluster_id = cluster_address(args)
    status = asyncio.run(_describe(url, cluster_id, settings=command_nats_settings(args, Role.CLIENT)))
    if args.json:
        state = cluster.read_state()
        body: dict[str, Any] = state.to_json() if state else {"nats_url": url, "cluster_id": cluster_id}
        body["active_controller"] = {"id": status.controller_id, "epoch": status.controller_epoch}
        body["broker_states"] = {
            str(b.broker_id): {"registered": True, "fenced": b.fenced, "broker_epoch": b.broker_epoch}
            for b in status.brokers
        }
        print(json.dumps(body, indent=2))
    else:
        _print_status(cluster, status, sys.stdout)
    return EXIT_OK if status.error == 0 else EXIT_FAILED


DESCRIBE_ATTEMPTS = 5
DESCRIBE_ATTEMPT_TIMEOUT_S = 1.0


async def _describe(
    url: str, cluster_id: str, credentials: Path | None = None, *, settings: NatsSettings | None = None
) -> wire.DescribeClusterResponse:
    """Ask the controllers' queue group, a few short tries: a paused or dying controller still in the group takes
    some requests and answers none, and must not cost the whole command (the next try reaches another member)."""
    conn = await ClusterConnection.open(url, cluster_id, credentials_file=credentials, settings=settings)
    try:
        for attempt in range(DESCRIBE_ATTEMPTS):
            try:
                return await Admin(conn, timeout_s=DESCRIBE_ATTEMPT_TIMEOUT_S).describe_cluster()
            except HightideError as error:
                if error.error_code is not ErrorCode.REQUEST_TIMED_OUT or attempt == DESCRIBE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")
    finally:
        await conn.close()


def _print_status(cluster: LocalCluster, status: wire.DescribeClusterResponse, out: TextIO) -> None:
    state = cluster.read_state()
    print(f"Controller: {status.controller_id}\tControllerEpoch: {status.controller_epoch}", file=out)
    for broker in status.brokers:
        pid = state.brokers.get(str(broker.broker_id)) if state else None
        running = "" if pid is None else f"\tPid: {pid}{'' if pid_alive(pid) else ' (exited)'}"
        fenced = "fenced" if broker.fenced else ("shutting-down" if broker.in_controlled_shutdown else "active")
        print(f"Broker: {broker.broker_id}\tEpoch: {broker.broker_epoch}\tState: {fenced}{running}", file=out)
    if state is not None and state.archiver is not None:
        exited = "" if pid_alive(state.archiver) else " (exited)"
        print(f"Archiver: {cluster.lake}\tPid: {state.archiver}{exited}", file=out)
    if state is not None and state.canary is not None:  # issue 13: `cluster up --canary`
        exited = "" if pid_alive(state.canary) else " (exited)"
        metrics = f"http://127.0.0.1:{state.canary_http_port}/metrics"
        print(f"Canary: {metrics}\tPid: {state.canary}{exited}", file=out)


def cluster_start_broker(args: argparse.Namespace) -> int:
    pid = LocalCluster(args.data_dir).start_broker(args.id)
    print(f"broker {args.id} started (pid {pid})")
    return EXIT_OK


def cluster_stop_broker(args: argparse.Namespace) -> int:
    LocalCluster(args.data_dir).stop_broker(args.id, hard=args.hard)
    print(f"broker {args.id} {'killed' if args.hard else 'stopped'}")
    return EXIT_OK


# -- topics ----------------------------------------------------------------------------------------------------


def describe_lines(
    topic: wire.TopicMetadata, *, under_replicated: bool = False, unavailable: bool = False
) -> list[str]:
    """kafka-topics.sh --describe, byte for byte (KRaft, ELR-aware). `Configs:` lists the configs set on the topic
    as Kafka's describeConfigs shows them (the table of topic configs formats each value)."""
    replication = _replication_factor(topic.partitions[0]) if topic.partitions else 0
    configs = topic_configs.describe(topic.configs)
    lines = [
        f"Topic: {topic.name}\tTopicId: {topic.topic_id}\tPartitionCount: {len(topic.partitions)}\t"
        f"ReplicationFactor: {replication}\tConfigs: {configs}"
    ]
    for p in topic.partitions:
        if under_replicated and len(p.isr) >= _replication_factor(p):
            continue
        if unavailable and p.leader >= 0:
            continue
        leader = "none" if p.leader < 0 else str(p.leader)
        moving = ""
        if p.adding_replicas or p.removing_replicas:
            moving = f"\tAdding Replicas: {_ids(p.adding_replicas)}\tRemoving Replicas: {_ids(p.removing_replicas)}"
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}{moving}\tElr: {_ids(p.elr)}\t"
            f"LastKnownElr: {_ids(p.last_known_elr)}"
        )
    return lines


def _replication_factor(partition: wire.PartitionMetadata) -> int:
    """TopicCommand's getReplicationFactor: during a reassignment, the replicas less the ones being added."""
    return len(partition.replicas) - len(partition.adding_replicas)


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


async def _admin_call(args: argparse.Namespace, action: Any) -> int:
    conn = await _connect(args)
    try:
        result: int = await action(Admin(conn), conn)
        return result
    finally:
        await conn.close()


def topic_create(args: argparse.Namespace) -> int:
    configs = other_configs(args)

    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        result = await admin.create_topic(args.name, args.partitions, args.replication_factor, configs)
        if result.error:
            return _failed("topic create", result.error, result.message)
        print(f"Created topic {args.name}.")
        return EXIT_OK

    return asyncio.run(_admin_call(args, action))


def topic_describe(args: argparse.Namespace) -> int:
    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        answer = await admin.describe_topics(tuple(args.names) if args.names else None)
        status = EXIT_OK
        for topic in answer.topics:
            if topic.error:
                status = _failed("topic describe", topic.error, topic.name)
                continue
            lines = describe_lines(
                topic, under_replicated=args.under_replicated_partitions, unavailable=args.unavailable_partitions
            )
            if args.under_replicated_partitions or args.unavailable_partitions:
                lines = lines[1:]
            for line in lines:
                print(line)
        return status

    return asyncio.run(_admin_call(args, action))


def topic_list(args: argparse.Namespace) -> int:
    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        for topic in (await admin.describe_topics()).topics:
            print(topic.name)
        return EXIT_OK

    return asyncio.run(_admin_call(args, action))


def topic_alter(args: argparse.Namespace) -> int:
    """--partitions P grows the topic; --config k=v sets a topic config and --config k= removes it (the broker
    default applies again), as kafka-configs.sh --add-config / --delete-config."""
    changes = other_configs(args)
    if args.partitions is None and not changes:
        raise UsageError("nothing to alter: give --partitions and/or --config key=value")
    set_configs = {k: v for k, v in changes.items() if v != ""}
    delete_configs = tuple(k for k, v in changes.items() if v == "")

    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        if changes:
            altered = await admin.alter_topic_configs(args.name, set_configs, delete_configs)
            if altered.error:
                return _failed("topic alter", altered.error, altered.message)
            print(f"Completed updating config for topic {args.name}.")
        if args.partitions is not None:
            answer = await admin.create_partitions(args.name, args.partitions)
            if answer.error:
                return _failed("topic alter", answer.error, answer.message)
            print(f"Topic {args.name} now has {args.partitions} partitions.")
        return EXIT_OK

    return asyncio.run(_admin_call(args, action))


def topic_delete(args: argparse.Namespace) -> int:
    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        result = await admin.delete_topic(args.name)
        if result.error:
            return _failed("topic delete", result.error, result.message)
        print(f"Deleted topic {args.name}.")
        return EXIT_OK

    return asyncio.run(_admin_call(args, action))


def broker_list(args: argparse.Namespace) -> int:
    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        status = await admin.describe_cluster()
        if status.error:
            return _failed("broker list", status.error, status.message)
        for b in status.brokers:
            state = "fenced" if b.fenced else ("shutting-down" if b.in_controlled_shutdown else "active")
            print(f"{b.broker_id}\tepoch={b.broker_epoch}\t{state}")
        return EXIT_OK

    return asyncio.run(_admin_call(args, action))


def leader_election(args: argparse.Namespace) -> int:
    if args.all_topic_partitions == (args.topic is not None):
        raise UsageError("give --all-topic-partitions, or --topic with --partition")
    targets = None if args.all_topic_partitions else ((args.topic, args.partition),)
    if targets is not None and args.partition is None:
        raise UsageError("--topic needs --partition")

    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        answer = await admin.elect_leaders(args.election_type, targets)
        if answer.error:
            return _failed("leader-election", answer.error, answer.message)
        status = EXIT_OK
        for r in answer.results:
            if r.error == 0:
                kind = args.election_type.upper()
                print(f"Successfully completed leader election ({kind}) for partitions {r.topic}-{r.partition}")
            elif r.error == ErrorCode.ELECTION_NOT_NEEDED:
                print(f"Valid replica already elected for partitions {r.topic}-{r.partition}")
            else:
                status = _failed("leader-election", r.error, f"{r.topic}-{r.partition} {r.message}")
        return status

    return asyncio.run(_admin_call(args, action))


# -- produce and consume ---------------------------------------------------------------------------------------


def produce(args: argparse.Namespace) -> int:
    props = _key_values(args.producer_property)
    props.setdefault("acks", args.acks)
    if args.linger_ms is not None:
        props["linger.ms"] = str(args.linger_ms)
    if args.batch_size is not None:
        props["batch.size"] = str(args.batch_size)
    if args.compression is not None:
        props["compression.type"] = args.compression
    try:
        config = ProducerConfig.from_properties(props)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return asyncio.run(_produce(args, config))


async def _produce(args: argparse.Namespace, config: ProducerConfig) -> int:
    """Send every record, emitting SendInvoked and SendCompleted for each (client_events.py) in send order.

    Every retriable error is the producer's to retry until delivery.timeout.ms; a record `send` itself refuses
    (no metadata for the topic within max.block.ms, a record too large) is reported as failed, and no later record
    is sent: what was sent before it still gets its outcome."""
    conn = await _connect(args)
    events = open_client_events(conn.nc, args.data_dir, conn.cluster_id, "producer", _LOG)
    failures = 0
    try:
        async with Producer(conn, config) as producer:
            pending: list[tuple[str, str | None, RecordFuture]] = []
            pacer = _Pacer(args.rate) if args.rate else None
            refused: tuple[str, str | None, ProduceFailed] | None = None
            async for key, value in _records(args):
                try:
                    future = await producer.send(
                        args.topic, value.encode(), key=None if key is None else key.encode(), partition=args.partition
                    )
                except ProduceFailed as error:
                    refused = (value, key, error)
                    break
                send_invoked(events.sink, future, key, value)
                pending.append((value, key, future))
                pending, done_failures = _complete_done(pending, events.sink, args.print_acks)
                failures += done_failures
                if pacer is not None:
                    await pacer.wait()
            await producer.flush()
            for value, key, future in pending:
                send_completed(events.sink, future, value)
                events.sink.flush()
                failures += _report(value, key, future, args.print_acks)
            if refused is not None:
                failures += _report_refused(*refused, args.print_acks)
    finally:
        await events.close()
        await conn.close()
    return EXIT_OK if failures == 0 else EXIT_FAILED


async def _records(args: argparse.Namespace) -> AsyncIterator[tuple[str | None, str]]:
    if args.count is not None:
        width = max(args.value_size or 0, 0)
        for i in range(args.count):
            value = str(i)
            yield (args.key, value.rjust(width, "0") if width else value)
        return
    async for line in _stdin_lines(cast(io.BufferedReader, sys.stdin.buffer)):
        if args.parse_key:
            key, sep, value = line.partition(args.key_separator)
            if not sep:
                raise UsageError(f"no key separator {args.key_separator!r} in line {line!r}")
            yield (key, value)
        else:
            yield (args.key, line)


STDIN_CHUNK_BYTES = 65_536


async def _stdin_lines(stream: io.BufferedReader) -> AsyncIterator[str]:
    """The input's lines, read on a thread: while no line comes (a person typing, a slow pipe) the event loop
    goes on taking acknowledgements, retrying and failing over, instead of blocking in a read."""
    loop = asyncio.get_running_loop()
    pending = b""
    while True:
        chunk = await loop.run_in_executor(None, stream.read1, STDIN_CHUNK_BYTES)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r").decode(errors="replace")
    if pending:
        yield pending.removesuffix(b"\r").decode(errors="replace")


class _Pacer:
    """Sends at `rate` per second against a monotonic schedule (record i is due at start + i / rate)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.sent = 0

    async def wait(self) -> None:
        self.sent += 1
        delay = self.start + self.sent / self.rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing to --rate, not synchronisation


def _complete_done(
    pending: list[tuple[str, str | None, RecordFuture]], events: EventSink, print_acks: bool
) -> tuple[list[tuple[str, str | None, RecordFuture]], int]:
    """Emit (and print) outcomes in send order as far as they are known; the rest, and how many failed."""
    index = failures = 0
    while index < len(pending) and pending[index][2].done():
        value, key, future = pending[index]
        send_completed(events, future, value)
        index += 1
    if index:
        events.flush()  # the outcome is in the outbox before the client is shown it
    for value, key, future in pending[:index]:
        failures += _report(value, key, future, print_acks)
    return pending[index:], failures


def _report(value: str, key: str | None, future: RecordFuture, print_acks: bool) -> int:
    error = future.exception()
    if print_acks:
        if error is None:
            meta = future.result()
            line = {"value": value, "key": key, "partition": meta.partition, "offset": meta.offset, "error": None}
        else:
            name = error.error_code.name if isinstance(error, ProduceFailed) else ErrorCode.UNKNOWN_SERVER_ERROR.name
            line = {"value": value, "key": key, "partition": None, "offset": None, "error": name}
        print(json.dumps(line), flush=True)
    return 0 if error is None else 1


def _report_refused(value: str, key: str | None, error: ProduceFailed, print_acks: bool) -> int:
    if print_acks:
        line = {"value": value, "key": key, "partition": None, "offset": None, "error": error.error_code.name}
        print(json.dumps(line), flush=True)
    print(f"hightide produce: {error}", file=sys.stderr)
    return 1


def consume(args: argparse.Namespace) -> int:
    props = _key_values(args.consumer_property)
    try:
        config = ConsumerConfig.from_properties(props)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.group:
        if args.partition is not None or args.offset is not None:
            raise UsageError("--group reads the partitions the group assigns: not with --partition/--offset")
        # Like kafka-console-consumer.sh: --from-beginning means auto.offset.reset=earliest for a group.
        reset = "earliest" if args.from_beginning else config.auto_offset_reset
        config = dataclasses.replace(config, group_id=args.group, auto_offset_reset=reset)
        return asyncio.run(_consume_group(args, config))
    return asyncio.run(_consume(args, config))


async def connect(args: argparse.Namespace) -> ClusterConnection:
    """The cluster connection every client command opens (cluster.json's NATS address and cluster id)."""
    return await _connect(args)


async def _consume_group(args: argparse.Namespace, config: ConsumerConfig) -> int:
    """`consume --group G`: a member of the group; what it printed is committed (auto-commit, and on exit)."""
    conn = await _connect(args)
    consumer = Consumer(conn, config)
    events = open_client_events(conn.nc, args.data_dir, conn.cluster_id, "consumer", _LOG)
    try:
        wait_ms = config.default_api_timeout_ms if args.timeout_ms is None else args.timeout_ms
        await conn.wait_for_partitions(args.topic, wait_ms / 1000, config.retry_backoff_ms / 1000)
        consumer.subscribe([args.topic])
        consumer.on_event = events.sink.emit
        seen = 0
        deadline = None if args.timeout_ms is None else time.monotonic() + args.timeout_ms / 1000
        while args.max_messages is None or seen < args.max_messages:
            if deadline is not None and time.monotonic() > deadline:
                break
            remaining = None if args.max_messages is None else args.max_messages - seen
            records = await consumer.poll(remaining)
            records_consumed(events.sink, records)
            events.sink.flush()
            for record in records:
                _print_record(record, args.format)
            seen += len(records)
    finally:
        await consumer.close()
        await events.close()
        await conn.close()
    return EXIT_OK


async def _consume(args: argparse.Namespace, config: ConsumerConfig) -> int:
    conn = await _connect(args)
    consumer = Consumer(conn, config)
    events = open_client_events(conn.nc, args.data_dir, conn.cluster_id, "consumer", _LOG)
    try:
        # Kafka's consumer waits for a topic's metadata (a broker that has just restarted may not know it yet).
        wait_ms = (
            config.default_api_timeout_ms
            if args.timeout_ms is None
            else min(args.timeout_ms, config.default_api_timeout_ms)
        )
        partitions = await conn.wait_for_partitions(args.topic, wait_ms / 1000, config.retry_backoff_ms / 1000)
        if args.partition is not None:
            start = args.offset if args.offset is not None else (-2 if args.from_beginning else -1)
            consumer.assign({(args.topic, args.partition): start})
        else:
            start = -2 if args.from_beginning else -1
            consumer.assign({(args.topic, p.partition): start for p in partitions})
        await consumer.resolve_positions()
        seen = 0
        deadline = None if args.timeout_ms is None else time.monotonic() + args.timeout_ms / 1000
        while args.max_messages is None or seen < args.max_messages:
            if deadline is not None and time.monotonic() > deadline:
                break
            records = await consumer.poll()
            if args.max_messages is not None:
                records = records[: args.max_messages - seen]
            records_consumed(events.sink, records)
            events.sink.flush()
            for record in records:
                _print_record(record, args.format)
            seen += len(records)
    finally:
        await events.close()
        await consumer.close()
        await conn.close()
    return EXIT_OK


def _print_record(record: Any, fmt: str) -> None:
    value = None if record.value is None else record.value.decode(errors="replace")
    key = None if record.key is None else record.key.decode(errors="replace")
    if fmt == "json":
        body = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": key,
            "value": value,
            "timestamp": record.timestamp,
        }
        print(json.dumps(body), flush=True)
    else:
        print(value, flush=True)


def exec_service(name: str, argv: Sequence[str]) -> None:
    """`hightide broker|controller ...`: become that service's process (services are not imported here)."""
    os.execv(sys.executable, [sys.executable, "-m", f"hightide.{name}", *argv])
