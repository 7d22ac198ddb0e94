"""The permission model (`hightide.protocol.permissions`) covers every name `hightide.protocol.subjects` makes.

Method: every public function of the subjects module that makes a subject, stream or bucket name is listed here
with a sample name, so a new one fails `test_every_name_maker_is_listed` until it is given to the roles; each
sample must be published (or, for a stream, created and read) by some role and consumed by some role. The other
tests pin the rules a deployment depends on: who answers and calls each API, whose events may be published by
whom, and that nobody may delete, purge or update a stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from hightide.lake.archiver import ARCHIVER_CONSUMER
from hightide.protocol import subjects
from hightide.protocol.permissions import (
    ARCHIVER_DURABLE,
    BROKER_API_CALLERS,
    CONTROLLER_API_CALLERS,
    EMITTERS,
    Role,
    authorization_block,
    broker_user,
    role_permissions,
    subject_matches,
    user_inbox,
    user_inbox_prefix,
    user_permissions,
    user_role,
)
from hightide.protocol.subjects import BrokerApi, ControllerApi

C = "perm-test"
PERMISSIONS = role_permissions(C)

# name maker -> (kind, sample names). kind: "subject" (published and subscribed), "stream" (JetStream stream)
NAME_MAKERS: dict[Callable[..., Any], tuple[str, list[str]]] = {
    subjects.broker_api: ("subject", [subjects.broker_api(C, 3, api) for api in BrokerApi]),
    subjects.broker_api_wildcard: ("subscription", [subjects.broker_api_wildcard(C, 3)]),
    subjects.any_broker_metadata: ("subject", [subjects.any_broker_metadata(C)]),
    subjects.controller_api: ("subject", [subjects.controller_api(C, api) for api in ControllerApi]),
    subjects.controller_api_wildcard: ("subscription", [subjects.controller_api_wildcard(C)]),
    subjects.metadata_subject: ("stream subject", [subjects.metadata_subject(C)]),
    subjects.metadata_stream: ("stream", [subjects.metadata_stream(C)]),
    subjects.controller_bucket: ("stream", [f"KV_{subjects.controller_bucket(C)}"]),
    subjects.events_subject: (
        "stream subject",
        [subjects.events_subject(C, service, 7) for services in EMITTERS.values() for service in services],
    ),
    subjects.events_subjects: ("stream filter", [subjects.events_subjects(C)]),
    subjects.events_stream: ("stream", [subjects.events_stream(C)]),
}
NOT_NAMES = {subjects.check_cluster_id, subjects.api_of, subjects.events_message_id}


def _publishers(subject: str) -> set[Role]:
    return {role for role, granted in PERMISSIONS.items() if granted.may_publish(subject)}


def _subscribers(subject: str) -> set[Role]:
    return {role for role, granted in PERMISSIONS.items() if granted.may_subscribe(subject)}


def test_every_name_maker_is_listed() -> None:
    makers = {
        function
        for name, function in inspect.getmembers(subjects, inspect.isfunction)
        if function.__module__ == subjects.__name__ and not name.startswith("_")
    }
    assert makers - NOT_NAMES == set(NAME_MAKERS), "a new name in subjects.py: give it to the roles in permissions.py"


@pytest.mark.parametrize("maker", list(NAME_MAKERS), ids=lambda f: f.__name__)
def test_every_name_is_granted_to_some_role(maker: Callable[..., Any]) -> None:
    kind, samples = NAME_MAKERS[maker]
    for sample in samples:
        if kind == "subject":
            assert _publishers(sample), f"nobody may publish on {sample}"
            assert _subscribers(sample) or _subscribers(subjects.broker_api_wildcard(C, 3)), sample
        elif kind == "subscription":
            assert _subscribers(sample), f"nobody may subscribe to {sample}"
        elif kind == "stream subject":
            assert _publishers(sample), f"nobody may append {sample}"
        elif kind == "stream filter":
            assert _publishers(f"$JS.API.CONSUMER.CREATE.{subjects.events_stream(C)}"), sample
        else:
            assert _publishers(f"$JS.API.STREAM.CREATE.{sample}"), f"nobody may create the stream {sample}"
            assert _publishers(f"$JS.API.STREAM.INFO.{sample}"), f"nobody may read the stream {sample}"


def test_each_api_is_answered_by_its_service_only() -> None:
    for api in BrokerApi:
        assert _subscribers(subjects.broker_api(C, 2, api)) == {Role.BROKER}, api
    for api in ControllerApi:
        assert _subscribers(subjects.controller_api(C, api)) == {Role.CONTROLLER}, api
    assert _subscribers(subjects.any_broker_metadata(C)) == {Role.BROKER}


def test_each_api_has_callers_and_the_tables_name_every_api() -> None:
    assert set(BROKER_API_CALLERS) == set(BrokerApi)
    assert set(CONTROLLER_API_CALLERS) == set(ControllerApi)
    for api, roles in BROKER_API_CALLERS.items():
        assert _publishers(subjects.broker_api(C, 5, api)) == set(roles), api
    for api, roles in CONTROLLER_API_CALLERS.items():
        assert _publishers(subjects.controller_api(C, api)) == set(roles), api


def test_a_client_produces_and_fetches_but_never_replicates_nor_administers() -> None:
    client = PERMISSIONS[Role.CLIENT]
    for api in (BrokerApi.PRODUCE, BrokerApi.FETCH, BrokerApi.JOIN_GROUP, BrokerApi.OFFSET_COMMIT):
        assert client.may_publish(subjects.broker_api(C, 1, api))
    assert client.may_publish(subjects.controller_api(C, ControllerApi.INIT_PRODUCER_ID))
    assert not client.may_publish(subjects.broker_api(C, 1, BrokerApi.REPLICA_FETCH))
    for api in (ControllerApi.CREATE_TOPICS, ControllerApi.REGISTER_BROKER, ControllerApi.ALTER_PARTITION):
        assert not client.may_publish(subjects.controller_api(C, api))
    assert not client.may_publish(subjects.metadata_subject(C))
    assert PERMISSIONS[Role.ADMIN].may_publish(subjects.controller_api(C, ControllerApi.CREATE_TOPICS))


def test_only_the_controller_writes_the_metadata_log_and_the_lease() -> None:
    bucket = subjects.controller_bucket(C)
    assert _publishers(subjects.metadata_subject(C)) == {Role.CONTROLLER}
    assert _publishers(f"$KV.{bucket}.leader") == {Role.CONTROLLER}
    assert _publishers(f"$JS.API.STREAM.CREATE.{subjects.metadata_stream(C)}") == {Role.CONTROLLER}
    assert _publishers(f"$JS.API.STREAM.CREATE.KV_{bucket}") == {Role.CONTROLLER}


def test_events_are_published_only_in_the_emitters_own_name() -> None:
    for role, services in EMITTERS.items():
        for service in ("controller", "broker", "producer", "consumer", "canary", "archiver"):
            allowed = PERMISSIONS[role].may_publish(subjects.events_subject(C, service, 1))
            assert allowed == (service in services), (role, service)


@pytest.mark.parametrize("operation", ["DELETE", "PURGE", "UPDATE", "MSG.DELETE"])
def test_nobody_deletes_purges_or_updates_a_stream(operation: str) -> None:
    for stream in (subjects.metadata_stream(C), subjects.events_stream(C), f"KV_{subjects.controller_bucket(C)}"):
        assert _publishers(f"$JS.API.STREAM.{operation}.{stream}") == set(), (operation, stream)


def test_only_the_archiver_touches_its_durable_consumer() -> None:
    assert ARCHIVER_DURABLE == ARCHIVER_CONSUMER
    events = subjects.events_stream(C)
    for subject in (
        f"$JS.API.CONSUMER.DELETE.{events}.{ARCHIVER_DURABLE}",
        f"$JS.API.CONSUMER.MSG.NEXT.{events}.{ARCHIVER_DURABLE}",
        f"$JS.API.CONSUMER.CREATE.{events}.{ARCHIVER_DURABLE}.{subjects.events_subjects(C)}",
        f"$JS.ACK.{events}.{ARCHIVER_DURABLE}.1.2.3.4.5",
    ):
        assert _publishers(subject) == {Role.ARCHIVER}, subject
    assert PERMISSIONS[Role.CLIENT].may_publish(f"$JS.API.CONSUMER.DELETE.{events}.someone_else")


def test_subject_matching_follows_nats() -> None:
    assert subject_matches("a.*.c", "a.b.c")
    assert not subject_matches("a.*.c", "a.b.d.c")
    assert subject_matches("a.>", "a.b.c")
    assert not subject_matches("a.>", "a")
    assert not subject_matches("a.b", "a.b.c")


def test_the_server_block_names_each_user_by_public_key_only() -> None:
    keys = {role: f"U{role.value.upper():A<55}" for role in Role}
    block = authorization_block(C, keys, no_auth_user=Role.CLIENT)
    for key in keys.values():
        assert block.count(f'nkey: "{key}"') == 1
        assert block.count(f'"_INBOX_{key}.>"') == 1  # its own inbox
    assert block.startswith("authorization {") and f'no_auth_user: "{keys[Role.CLIENT]}"' in block
    assert block.count('"_INBOX.>"') == 1  # the default inbox: only for connections without credentials


# -- issue 14, second pass: a user per broker, an inbox per user -----------------------------------------------------


def test_a_brokers_own_user_answers_and_emits_only_as_that_broker() -> None:
    own = user_permissions(C, broker_user(2), user_inbox("UBROKER2"))
    for api in BrokerApi:
        assert own.may_subscribe(subjects.broker_api(C, 2, api)), api
        assert not own.may_subscribe(subjects.broker_api(C, 1, api)), api
        assert own.may_publish(subjects.broker_api(C, 1, api)), api  # it calls every broker (replication)
    assert own.may_subscribe(subjects.any_broker_metadata(C))
    assert not own.may_subscribe(f"ht.{C}.broker.*.*")
    assert own.may_publish(subjects.events_subject(C, "broker", 2))
    assert not own.may_publish(subjects.events_subject(C, "broker", 1))
    assert not own.may_publish(subjects.events_subject(C, "broker", 21))
    for api in ControllerApi:
        assert own.may_publish(subjects.controller_api(C, api)), api
    assert not own.may_publish(subjects.metadata_subject(C))
    assert user_role(broker_user(2)) == (Role.BROKER, 2) and user_role("admin") == (Role.ADMIN, None)
    with pytest.raises(ValueError, match="unknown NATS user"):
        user_role("broker-x")


def test_each_user_subscribes_to_its_own_inbox_only() -> None:
    keys = {"client": "UCLIENT", "admin": "UADMIN", broker_user(1): "UBROKER1"}
    for user, key in keys.items():
        granted = user_permissions(C, user, user_inbox(key))
        assert granted.may_subscribe(f"{user_inbox_prefix(key)}.abc.def")
        for other in set(keys.values()) - {key}:
            assert not granted.may_subscribe(f"{user_inbox_prefix(other)}.abc.def"), (user, other)
        assert not granted.may_subscribe("_INBOX.abc.def")
        assert not granted.may_publish(f"{user_inbox_prefix(key)}.abc.def")  # replies go by allow_responses
