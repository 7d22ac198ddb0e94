"""Who may publish and subscribe what on NATS: one user per role, its permissions as data, and the nats-server
`authorization` block made from them.

Room: libs/protocol (vocabulary). It owns the roles, the table of which role may call which API, emit which events
and touch which stream, and the nats-server configuration text generated from it (`authorization_block`). Keys and
files are the runtime's (`hightide.runtime.nats_auth`); this module only names public keys.

Roles (a deployment gives each process the credentials of exactly one):

| role         | may                                                                                            |
| ------------ | ---------------------------------------------------------------------------------------------- |
| `controller` | answer the controller APIs; append to the metadata stream; hold the lease (its KV bucket); emit |
|              | events as `controller`                                                                         |
| `broker`     | answer its broker APIs and the any-broker metadata queue; call every controller API (it        |
|              | forwards Kafka admin requests) and other brokers (replication); read the metadata stream; emit   |
|              | events as `broker`                                                                             |
| `archiver`   | read the event store through its durable consumer `archiver` (and create the event stream)      |
| `client`     | call the client APIs of brokers and the controller (produce, fetch, groups, producer ids);     |
|              | read the event store; emit events as `producer`, `consumer` or `canary`                         |
| `admin`      | what a client may, plus topic, partition, config, election, reassignment and group deletion     |
|              | admin (Kafka's `kafka-topics.sh`, `kafka-reassign-partitions.sh`, ...); read (not write) the    |
|              | metadata stream and the lease bucket (their stream info: replicas and leader)                  |

Nobody may update, purge or delete a stream, or delete messages from one (that is the NATS operator's, with NATS's
own system credentials). The services that answer requests reply through `allow_responses` (only to the reply
subject of a request they received).

Users (issue 14, second pass). A user is a role's (`controller`, `broker`, ...) or one broker's, `broker-<id>`
(`broker_user`): a broker's own user answers only `ht.<cluster>.broker.<id>.*` and emits events only as
`ht.<cluster>.events.broker.<id>`, so broker 2's credentials can neither serve broker 1's APIs (replica fetches
included) nor forge its events; it still calls every broker (replication) and the controller. The role-wide
`broker` user stays for deployments that cannot hand each process its own file. Each user gets its replies on its
own inbox prefix, `_INBOX_<public key>` (`user_inbox`; `hightide.runtime.nats.connect` uses it for an nkey user),
and may subscribe to nothing else of the kind, so nobody reads another user's answers. The user that a connection
without credentials is bound to (`no_auth_user`, the local cluster's client) also keeps nats-py's default
`_INBOX.>`: other processes' inboxes are not under it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from hightide.protocol.subjects import (
    BrokerApi,
    ControllerApi,
    any_broker_metadata,
    broker_api_wildcard,
    check_cluster_id,
    controller_api,
    controller_bucket,
    events_stream,
    events_subject,
    metadata_stream,
    metadata_subject,
)

INBOX: Final = "_INBOX.>"
# The account's JetStream info and the stream names (nats-py looks a stream up by subject): names, no contents.
_JS_GENERAL: Final = ("$JS.API.INFO", "$JS.API.STREAM.NAMES")
ARCHIVER_DURABLE: Final = "archiver"  # the archiver's durable consumer (hightide.lake.archiver.ARCHIVER_CONSUMER)


class Role(StrEnum):
    CONTROLLER = "controller"
    BROKER = "broker"
    ARCHIVER = "archiver"
    CLIENT = "client"
    ADMIN = "admin"


# Which roles may call each broker API. REPLICA_FETCH is replication: brokers only.
BROKER_API_CALLERS: Final[Mapping[BrokerApi, frozenset[Role]]] = {
    api: frozenset({Role.BROKER, Role.CLIENT, Role.ADMIN}) for api in BrokerApi
} | {
    BrokerApi.REPLICA_FETCH: frozenset({Role.BROKER}),
    BrokerApi.DELETE_GROUPS: frozenset({Role.BROKER, Role.ADMIN}),
}

# Which roles may call each controller API. A broker calls them all: it registers, heartbeats and alters ISRs for
# itself, and forwards the admin requests of Kafka clients on its listener.
_BROKER_ONLY: Final = frozenset(
    {ControllerApi.REGISTER_BROKER, ControllerApi.BROKER_HEARTBEAT, ControllerApi.ALTER_PARTITION}
)
_CLIENT_CONTROLLER_APIS: Final = frozenset({ControllerApi.INIT_PRODUCER_ID, ControllerApi.DESCRIBE_CLUSTER})
CONTROLLER_API_CALLERS: Final[Mapping[ControllerApi, frozenset[Role]]] = {
    api: frozenset({Role.BROKER})
    if api in _BROKER_ONLY
    else frozenset({Role.BROKER, Role.CLIENT, Role.ADMIN})
    if api in _CLIENT_CONTROLLER_APIS
    else frozenset({Role.BROKER, Role.ADMIN})
    for api in ControllerApi
}

# The event emitters (`ht.<cluster>.events.<service>.<id>`) each role may publish as: events cannot be forged in
# another service's name.
EMITTERS: Final[Mapping[Role, tuple[str, ...]]] = {
    Role.CONTROLLER: ("controller",),
    Role.BROKER: ("broker",),
    Role.ARCHIVER: (),
    Role.CLIENT: ("producer", "consumer", "canary"),
    Role.ADMIN: ("producer", "consumer", "canary"),
}


@dataclass(frozen=True)
class Permissions:
    """One user's permissions, in nats-server's terms (subjects may hold `*` and `>` wildcards)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    deny_publish: tuple[str, ...] = ()
    allow_responses: bool = False

    def may_publish(self, subject: str) -> bool:
        return _allowed(subject, self.publish, self.deny_publish)

    def may_subscribe(self, subject: str) -> bool:
        return _allowed(subject, self.subscribe, ())


def role_permissions(cluster_id: str, inbox: str = INBOX) -> dict[Role, Permissions]:
    """Every role's permissions on the cluster `cluster_id`, each user getting its replies on `inbox` (a
    deployment gives each its own: `user_permissions`)."""
    c = check_cluster_id(cluster_id)
    metadata, events, bucket = metadata_stream(c), events_stream(c), controller_bucket(c)
    kv_stream = f"KV_{bucket}"
    not_the_archivers = _durable_consumer(events, ARCHIVER_DURABLE)
    events_reader = (*_stream_reader(events), *_consumer_user(events))

    def callers(role: Role) -> list[str]:
        subjects = [f"ht.{c}.broker.*.{api.value}" for api, roles in BROKER_API_CALLERS.items() if role in roles]
        subjects += [controller_api(c, api) for api, roles in CONTROLLER_API_CALLERS.items() if role in roles]
        subjects += [f"ht.{c}.events.{service}.*" for service in EMITTERS[role]]
        if role in (Role.BROKER, Role.CLIENT, Role.ADMIN):
            subjects.append(any_broker_metadata(c))
        if role is Role.BROKER:  # it calls every API of both (the tables say so); an unknown one is answered too
            subjects += [f"ht.{c}.broker.*.*", f"ht.{c}.controller.*"]
        return subjects

    emitter_stream = (*_stream_reader(events), f"$JS.API.STREAM.CREATE.{events}")
    return {
        Role.CONTROLLER: Permissions(
            publish=(
                *callers(Role.CONTROLLER),
                *_JS_GENERAL,
                metadata_subject(c),
                *_stream_reader(metadata),
                f"$JS.API.STREAM.CREATE.{metadata}",
                *_consumer_user(metadata),
                f"$KV.{bucket}.>",
                *_stream_reader(kv_stream),
                f"$JS.API.STREAM.CREATE.{kv_stream}",
                *emitter_stream,
            ),
            subscribe=(inbox, f"ht.{c}.controller.*"),
            allow_responses=True,
        ),
        Role.BROKER: Permissions(
            publish=(
                *callers(Role.BROKER),
                *_JS_GENERAL,
                *_stream_reader(metadata),
                *_consumer_user(metadata),
                *emitter_stream,
            ),
            subscribe=(inbox, f"ht.{c}.broker.*.*", any_broker_metadata(c)),
            allow_responses=True,
        ),
        Role.ARCHIVER: Permissions(
            publish=(
                *_JS_GENERAL,
                *emitter_stream,
                *_consumer_user(events),
                f"$JS.API.CONSUMER.DURABLE.CREATE.{events}.{ARCHIVER_DURABLE}",
            ),
            subscribe=(inbox,),
        ),
        Role.CLIENT: Permissions(
            publish=(*callers(Role.CLIENT), *_JS_GENERAL, *events_reader),
            subscribe=(inbox,),
            deny_publish=not_the_archivers,
        ),
        Role.ADMIN: Permissions(
            # An operator also reads (never writes) the metadata log and the lease bucket: their stream info shows
            # each one's replicas and leader on a NATS cluster.
            publish=(
                *callers(Role.ADMIN),
                *_JS_GENERAL,
                *events_reader,
                *_stream_reader(metadata),
                *_stream_reader(kv_stream),
            ),
            subscribe=(inbox,),
            deny_publish=not_the_archivers,
        ),
    }


def _stream_reader(stream: str) -> tuple[str, ...]:
    """Read a stream: its info, and single messages by sequence or subject (a KV get)."""
    return (
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
    )


def _consumer_user(stream: str) -> tuple[str, ...]:
    """Make, read from, acknowledge and remove consumers of a stream (ephemeral or ordered ones; a durable one
    only where granted by name)."""
    return (
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.INFO.{stream}.*",
        f"$JS.API.CONSUMER.DELETE.{stream}.*",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    )


def _durable_consumer(stream: str, name: str) -> tuple[str, ...]:
    """Every JetStream API subject that touches the consumer `name` of `stream`: denied to everyone else."""
    return (
        f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
        f"$JS.API.CONSUMER.CREATE.{stream}.{name}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{name}",
        f"$JS.API.CONSUMER.DELETE.{stream}.{name}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}",
        f"$JS.ACK.{stream}.{name}.>",
    )


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    pattern_tokens, tokens = pattern.split("."), subject.split(".")
    for index, token in enumerate(pattern_tokens):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or (token != "*" and token != tokens[index]):
            return False
    return len(tokens) == len(pattern_tokens)


def _allowed(subject: str, allow: Iterable[str], deny: Iterable[str]) -> bool:
    return any(subject_matches(p, subject) for p in allow) and not any(subject_matches(p, subject) for p in deny)


def authorization_block(cluster_id: str, users: Mapping[str, str], *, no_auth_user: Role | None = None) -> str:
    """The nats-server configuration that admits one nkey user per role and per broker (`users`: user name, a
    role's or `broker-<id>`, -> public nkey, `U...`) with its permissions (`user_permissions`), for an `include`
    or the end of a nats-server config file. `no_auth_user` binds connections that bring no credentials to that
    role's user (the local cluster's convenience; never in production)."""
    lines = ["authorization {", "  users = ["]
    for user in sorted(users, key=_user_order):
        granted = user_permissions(cluster_id, user, user_inbox(users[user]))
        if user == no_auth_user:  # connections without credentials use nats-py's default inbox prefix
            granted = dataclasses.replace(granted, subscribe=(*granted.subscribe, INBOX))
        publish: dict[str, list[str]] = {"allow": list(granted.publish)}
        if granted.deny_publish:
            publish["deny"] = list(granted.deny_publish)
        body: dict[str, object] = {"publish": publish, "subscribe": {"allow": list(granted.subscribe)}}
        if granted.allow_responses:
            body["allow_responses"] = True
        lines.append(f"    # {user}")
        lines.append(f"    {{nkey: {json.dumps(users[user])}, permissions: {json.dumps(body)}}}")
    lines += ["  ]", "}"]
    if no_auth_user is not None:
        lines.append(f"no_auth_user: {json.dumps(users[no_auth_user])}")
    return "\n".join(lines) + "\n"


# -- issue 14, second pass: a user per broker, and an inbox per user -------------------------------------------------

_BROKER_USER: Final = re.compile(r"broker-([0-9]+)")
INBOX_PREFIX_ROOT: Final = "_INBOX_"


def broker_user(broker_id: int) -> str:
    """The name of broker `broker_id`'s own user (and of its credentials file, `<name>.creds`)."""
    if broker_id < 0:
        raise ValueError(f"invalid broker id {broker_id}")
    return f"broker-{broker_id}"


def user_role(user: str) -> tuple[Role, int | None]:
    """The role of the user `user` and, for a broker's own user, its broker id; ValueError for another name."""
    own = _BROKER_USER.fullmatch(user)
    if own is not None:
        return Role.BROKER, int(own.group(1))
    try:
        return Role(user), None
    except ValueError:
        raise ValueError(f"unknown NATS user {user!r}: a role ({', '.join(Role)}) or broker-<id>") from None


def user_inbox(public_key: str) -> str:
    """The inbox subjects of the nkey user `public_key`: its replies come on `_INBOX_<public key>.<...>`. A token
    of its own, not under `_INBOX.`, so that the default prefix's `_INBOX.>` covers no user's inbox."""
    if not public_key or not public_key.isalnum():
        raise ValueError(f"not an nkey public key: {public_key!r}")
    return f"{INBOX_PREFIX_ROOT}{public_key}.>"


def user_inbox_prefix(public_key: str) -> str:
    """nats-py's `inbox_prefix` for the nkey user `public_key` (see `user_inbox`)."""
    return user_inbox(public_key).removesuffix(".>")


def user_permissions(cluster_id: str, user: str, inbox: str = INBOX) -> Permissions:
    """The permissions of `user` (a role's name, or `broker-<id>`) on the cluster `cluster_id`, replies coming to
    it on `inbox`. A broker's own user is the role-wide broker narrowed to its id: it answers only its own APIs
    and emits events only under its own id."""
    role, broker_id = user_role(user)
    granted = role_permissions(cluster_id, inbox)[role]
    if broker_id is None:
        return granted
    c = check_cluster_id(cluster_id)
    any_broker_events = f"ht.{c}.events.broker.*"
    return dataclasses.replace(
        granted,
        publish=tuple(
            events_subject(c, "broker", broker_id) if subject == any_broker_events else subject
            for subject in granted.publish
        ),
        subscribe=(inbox, broker_api_wildcard(c, broker_id), any_broker_metadata(c)),
    )


def _user_order(user: str) -> tuple[int, int]:
    role, broker_id = user_role(user)
    return list(Role).index(role), -1 if broker_id is None else broker_id
