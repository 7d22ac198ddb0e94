"""Bad input to a live cluster: every request handler answers it with a Kafka error code and changes nothing.

Method: one cluster for the module (nats-server, a controller and three brokers, each a real process, started by
`LocalCluster` as `hightide cluster up` starts them) with one topic (2 partitions, RF 3) holding records. One of
its leaders is restarted first, so the cluster has real stale epochs to be fenced with: an old leader epoch of
partition 0 and the restarted broker's old broker epoch. Hypothesis then sends thousands of bad requests through a
raw NATS client, each test drawing from the facts of that cluster:

- bodies that are not a request at all, for every API: random bytes, msgpack that is not a map, maps with unknown,
  missing or mistyped fields, numbers outside their Kafka size (int16/int32/int64, negative ids) and lists over
  their bound; the protocol's own decoder must refuse each one locally, and the service must answer
  INVALID_REQUEST in the API's response type;
- well-formed bodies that are semantically wrong, each built with the one error Kafka answers it with: unknown
  topics and partitions, requests to a follower, fenced and unknown leader epochs, stale broker epochs, an
  AlterPartition from a non-leader or with a stale partition epoch or an ineligible ISR, corrupt, truncated,
  re-signed garbage and oversized record batches, out-of-order idempotent sequences, invalid topic configs.

Every request must be answered within `REPLY_TIMEOUT_S`. No generated request is one that would be valid and
change the cluster (a valid create_topics, a new broker's registration, an election that elects, an append);
after each request that could have changed something, the metadata log's last sequence or the leaders' log end
offsets are compared with the ones read before the fuzz, so a request that did change state fails its own example.
The last test checks the cluster afterwards: every process alive, the same metadata and logs as before, and a
producer, a consumer and an admin client that still work.
"""

from __future__ import annotations

import asyncio
import collections
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import crc32c
import msgpack
import nats
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from hightide.client import Admin, Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig
from hightide.client.connection import ClusterConnection
from hightide.client.local_cluster import ClusterState, LocalCluster, pid_alive
from hightide.core.topic_configs import TOPIC_CONFIGS
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.permissions import Role
from hightide.protocol.records import InvalidRecordBatch, encode_batch, validate_batches
from hightide.protocol.subjects import (
    BrokerApi,
    ControllerApi,
    any_broker_metadata,
    broker_api,
    controller_api,
    metadata_stream,
)
from hightide.runtime.nats import credentials_seed, nkey_inbox_prefix

pytestmark = pytest.mark.slow

CLUSTER_ID: Final = "fuzz"
TOPIC: Final = "fuzz.topic"
COLLIDING_TOPIC: Final = "fuzz_topic"  # Kafka refuses it beside TOPIC: '.' and '_' collide in metric names
PARTITIONS: Final = 2
BROKERS: Final = (1, 2, 3)
PRELOADED_RECORDS: Final = 40
# Small limits make the oversized cases cheap to send: one batch over max.message.bytes, and batches each under
# it whose sum is over segment.bytes (the most one append may write).
MAX_MESSAGE_BYTES: Final = 32 * 1024
SEGMENT_BYTES: Final = 128 * 1024
REPLY_TIMEOUT_S: Final = 5.0
SETUP_DEADLINE_S: Final = 60.0
REQUESTS_MIN: Final = 2_000
INT16_MAX: Final = 2**15 - 1
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
CONFIG: Final = [
    # Nothing may change the metadata on its own while the fuzz runs: no automatic preferred elections.
    "auto.leader.rebalance.enable=false",
    "broker.heartbeat.interval.ms=500",
]

T = TypeVar("T")


# -- the live cluster ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What the cluster looked like before the fuzz; strategies build their bad requests from it."""

    leaders: tuple[int, ...]
    leader_epochs: tuple[int, ...]
    partition_epochs: tuple[int, ...]
    replicas: tuple[tuple[int, ...], ...]
    isr: tuple[tuple[int, ...], ...]
    broker_epochs: dict[int, int]
    restarted_broker: int
    stale_broker_epoch: int  # the restarted broker's epoch before its restart


@dataclass(frozen=True)
class LogState:
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


@dataclass(frozen=True)
class Snapshot:
    metadata_last_sequence: int
    logs: tuple[LogState, ...]
    facts: Facts
    topics: tuple[str, ...]


@dataclass
class Live:
    cluster: LocalCluster
    state: ClusterState
    loop: asyncio.AbstractEventLoop
    nc: Client
    conn: ClusterConnection
    before: Snapshot
    requests_sent: int = 0
    answered: dict[str, int] = field(default_factory=dict)  # error name -> count, for the report

    @property
    def facts(self) -> Facts:
        return self.before.facts

    def run(self, coroutine: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coroutine)


async def poll(condition: Callable[[], Awaitable[T | None]], what: str, deadline_s: float = SETUP_DEADLINE_S) -> T:
    end = time.monotonic() + deadline_s
    while True:
        value = await condition()
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)  # polling a condition with a deadline


async def active_broker_epochs(admin: Admin) -> dict[int, int] | None:
    described = await admin.describe_cluster()
    active = {b.broker_id: b.broker_epoch for b in described.brokers if not b.fenced and not b.in_controlled_shutdown}
    return active if described.error == 0 and len(active) == len(BROKERS) else None


async def settled_topic(conn: ClusterConnection) -> wire.TopicMetadata | None:
    """The topic once every partition has a leader and a full ISR."""
    answer = await conn.metadata((TOPIC,))
    (topic,) = answer.topics
    full = all(p.leader >= 0 and len(p.isr) == len(p.replicas) for p in topic.partitions)
    return topic if topic.error == 0 and len(topic.partitions) == PARTITIONS and full else None


async def log_state(nc: Client, leader: int, partition: int) -> LogState:
    """A consumer's fetch at offset 0 that does not wait: the leader's log start, HW and LEO."""
    fetch = wire.FetchPartitionRequest(topic=TOPIC, partition=partition, fetch_offset=0, partition_max_bytes=1)
    body = wire.FetchRequest(replica_id=-1, max_wait_ms=0, partitions=(fetch,))
    reply = await nc.request(broker_api(CLUSTER_ID, leader, BrokerApi.FETCH), wire.encode(body), timeout=5)
    (answer,) = wire.decode(wire.FetchResponse, reply.data).partitions
    assert answer.error == 0, answer
    return LogState(answer.log_start_offset, answer.high_watermark, answer.log_end_offset)


async def metadata_last_sequence(nc: Client) -> int:
    info = await nc.jetstream().stream_info(metadata_stream(CLUSTER_ID))
    return int(info.state.last_seq)


async def replicated_and_settled(conn: ClusterConnection, nc: Client) -> wire.TopicMetadata | None:
    topic = await settled_topic(conn)
    if topic is None:
        return None
    states = [await log_state(nc, p.leader, p.partition) for p in topic.partitions]
    return topic if all(s.high_watermark == s.log_end_offset for s in states) else None


async def snapshot(conn: ClusterConnection, nc: Client, admin: Admin, restarted: int, stale_epoch: int) -> Snapshot:
    topic = await poll(lambda: replicated_and_settled(conn, nc), "a settled topic with HW = LEO")
    broker_epochs = await poll(lambda: active_broker_epochs(admin), "three active brokers")
    facts = Facts(
        leaders=tuple(p.leader for p in topic.partitions),
        leader_epochs=tuple(p.leader_epoch for p in topic.partitions),
        partition_epochs=tuple(p.partition_epoch for p in topic.partitions),
        replicas=tuple(p.replicas for p in topic.partitions),
        isr=tuple(p.isr for p in topic.partitions),
        broker_epochs=broker_epochs,
        restarted_broker=restarted,
        stale_broker_epoch=stale_epoch,
    )
    logs = tuple([await log_state(nc, p.leader, p.partition) for p in topic.partitions])
    topics = tuple(sorted(t.name for t in (await conn.metadata()).topics))
    return Snapshot(await metadata_last_sequence(nc), logs, facts, topics)


async def preload(conn: ClusterConnection, admin: Admin) -> None:
    configs = {
        "min.insync.replicas": "2",
        "max.message.bytes": str(MAX_MESSAGE_BYTES),
        "segment.bytes": str(SEGMENT_BYTES),
    }
    created = await admin.create_topic(TOPIC, PARTITIONS, 3, configs)
    assert created.error == 0, created
    await poll(lambda: settled_topic(conn), "the topic's leaders and full ISRs")
    async with Producer(conn, ProducerConfig(acks=-1)) as producer:
        futures = [
            await producer.send(TOPIC, b"before-%d" % i, partition=i % PARTITIONS) for i in range(PRELOADED_RECORDS)
        ]
        await producer.flush()
        for future in futures:
            await future


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data_dir = tmp_path_factory.mktemp("fuzz-cluster")
    cluster = LocalCluster(data_dir)
    state = cluster.up(brokers=len(BROKERS), controllers=1, cluster_id=CLUSTER_ID, config=CONFIG)
    loop = asyncio.new_event_loop()
    try:
        # as a broker: the fuzzer calls every API, the broker-only ones too (NATS permissions, issue 14)
        broker = state.credentials_file(Role.BROKER)
        conn = loop.run_until_complete(
            ClusterConnection.open(state.nats_url, CLUSTER_ID, credentials_file=broker, request_timeout_s=10)
        )
        admin = Admin(conn)
        seed = credentials_seed(broker) if broker is not None else None
        inbox = {} if seed is None else {"inbox_prefix": nkey_inbox_prefix(seed)}  # its own inbox (issue 14)
        nc = loop.run_until_complete(nats.connect(state.nats_url, name="fuzzer", nkeys_seed_str=seed, **inbox))
        epochs = loop.run_until_complete(poll(lambda: active_broker_epochs(admin), "three active brokers"))
        loop.run_until_complete(preload(conn, admin))
        # Restart partition 0's leader (a clean shutdown): leadership moves, so partition 0 has a leader epoch
        # above 0 and there is an old one to fence; the broker comes back with a new broker epoch.
        topic = loop.run_until_complete(settled_topic(conn))
        assert topic is not None
        restarted = topic.partitions[0].leader
        cluster.stop_broker(restarted, hard=False)
        cluster.start_broker(restarted)
        state = cluster.read_state() or state

        async def restarted_with_new_epoch() -> bool:
            current = await active_broker_epochs(admin)
            return current is not None and current[restarted] != epochs[restarted]

        loop.run_until_complete(poll(restarted_with_new_epoch, "the restarted broker active again"))
        before = loop.run_until_complete(snapshot(conn, nc, admin, restarted, epochs[restarted]))
        assert before.facts.leader_epochs[0] >= 1, before.facts
        yield Live(cluster, state, loop, nc, conn, before)
        loop.run_until_complete(nc.close())
        loop.run_until_complete(conn.close())
    finally:
        loop.close()
        cluster.down()  # the data directory stays with pytest's temporary ones: its logs explain a failure


# -- asking and checking -------------------------------------------------------------------------------------------

R = TypeVar("R", bound=wire.Response)


async def _request(nc: Client, subject: str, payload: bytes) -> bytes:
    try:
        reply = await nc.request(subject, payload, timeout=REPLY_TIMEOUT_S)
    except NoRespondersError:
        pytest.fail(f"nothing listens on {subject} any more (did the service die?)")
    except NatsTimeoutError:
        pytest.fail(f"no answer on {subject} within {REPLY_TIMEOUT_S}s to {payload[:200]!r}")
    data: bytes = reply.data
    return data


def ask(live: Live, subject: str, payload: bytes, kind: type[R]) -> R:
    """Send raw bytes; the answer must decode as `kind` and carry a Kafka error number."""
    live.requests_sent += 1
    data = live.run(_request(live.nc, subject, payload))
    try:
        answer = wire.decode(kind, data)
    except wire.InvalidRequest as error:
        pytest.fail(f"the answer on {subject} is not a {kind.__name__}: {error}; raw {msgpack.unpackb(data)!r}")
    for code in [answer.error, *(item.error for item in _items(answer))]:
        try:
            name = ErrorCode(code).name
        except ValueError:
            pytest.fail(f"{code} is not a Kafka error number: {answer}")
        live.answered[name] = live.answered.get(name, 0) + 1
    return answer


def _items(answer: wire.Response) -> tuple[Any, ...]:
    for name in ("partitions", "topics", "results"):
        items = getattr(answer, name, None)
        if isinstance(items, tuple):
            return items
    return ()


def _key_of(item: Any) -> Any:
    """What a per-item answer answers: a topic's name, or a (topic, partition)."""
    return item.name if hasattr(item, "name") else (item.topic, item.partition)


def assert_refused(answer: wire.Response, expected: ErrorCode, request: object) -> None:
    assert answer.error_code is expected, f"{request!r} answered {answer.error_code.name}, not {expected.name}"


def assert_each_refused(
    answer: wire.Response, expected: list[tuple[Any, frozenset[ErrorCode]]], request: object
) -> None:
    """A per-item API: top-level NONE, then one answer per item in order, each with one of its expected codes."""
    assert answer.error_code is ErrorCode.NONE, f"{request!r} failed as a whole: {answer}"
    items = _items(answer)
    assert len(items) == len(expected), f"{request!r}: {len(items)} answers for {len(expected)} items: {answer}"
    for item, (key, codes) in zip(items, expected, strict=True):
        assert _key_of(item) == key, f"the answer for {_key_of(item)} is where {key}'s should be: {answer}"
        code = wire.error_code_of(item.error)
        assert code in codes, f"{key}: {code.name} is not one of {sorted(c.name for c in codes)} ({request!r})"
        assert code is not ErrorCode.NONE


def named_once(expected: list[tuple[str, frozenset[ErrorCode]]]) -> list[tuple[str, frozenset[ErrorCode]]]:
    """The answers of a CreateTopics or DeleteTopics as ControllerApis gives them: the names given once, in order,
    then each name given more than once, once, INVALID_REQUEST (none of its entries acted on)."""
    mentions = collections.Counter(name for name, _ in expected)
    once = [(name, codes) for name, codes in expected if mentions[name] == 1]
    twice = [(name, frozenset({ErrorCode.INVALID_REQUEST})) for name in dict.fromkeys(mentions) if mentions[name] > 1]
    return once + twice


def assert_metadata_unchanged(live: Live) -> None:
    after = live.run(metadata_last_sequence(live.nc))
    assert after == live.before.metadata_last_sequence, "a refused request appended to the metadata log"


def assert_logs_unchanged(live: Live) -> None:
    for partition, leader in enumerate(live.facts.leaders):
        after = live.run(log_state(live.nc, leader, partition))
        assert after == live.before.logs[partition], f"partition {partition}'s log changed: {after}"


FUZZ: Final = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

# -- bodies that are not a request ---------------------------------------------------------------------------------

REQUEST_OF: Final = wire.REQUEST_OF
RESPONSE_OF: Final = wire.RESPONSE_OF
_BATCH: Final = encode_batch([b"template"])
# A well-shaped body of each API, for the mutations to break (their content is wrong anyway: unknown names).
TEMPLATES: Final[dict[str, dict[str, Any]]] = {
    BrokerApi.PRODUCE: {
        "acks": -1,
        "timeout_ms": 1000,
        "partitions": [{"topic": "t", "partition": 0, "records": _BATCH}],
    },
    BrokerApi.FETCH: {
        "replica_id": -1,
        "broker_epoch": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1024,
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "fetch_offset": 0,
                "current_leader_epoch": -1,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": 1024,
            }
        ],
    },
    BrokerApi.LIST_OFFSETS: {
        "partitions": [{"topic": "t", "partition": 0, "timestamp": -1, "current_leader_epoch": -1}]
    },
    BrokerApi.OFFSETS_FOR_LEADER_EPOCH: {
        "replica_id": -1,
        "partitions": [{"topic": "t", "partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
    },
    BrokerApi.METADATA: {"topics": ["t"]},
    ControllerApi.REGISTER_BROKER: {"broker_id": 1, "incarnation_id": "x", "previous_broker_epoch": -1},
    ControllerApi.BROKER_HEARTBEAT: {
        "broker_id": 1,
        "broker_epoch": 0,
        "current_metadata_offset": 0,
        "want_fence": False,
        "want_shut_down": False,
        "offline_replicas": [{"topic": "t", "partition": 0}],
    },
    ControllerApi.ALTER_PARTITION: {
        "broker_id": 1,
        "broker_epoch": 0,
        "topic": "t",
        "partition": 0,
        "leader_epoch": 0,
        "partition_epoch": 0,
        "new_isr": [1],
        "new_isr_broker_epochs": [-1],
    },
    ControllerApi.CREATE_TOPICS: {
        "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": None, "configs": {}}]
    },
    ControllerApi.DELETE_TOPICS: {"topics": ["t"]},
    ControllerApi.CREATE_PARTITIONS: {"topic": "t", "count": 3, "assignments": None},
    ControllerApi.ALTER_CONFIGS: {"topic": "t", "set_configs": {}, "delete_configs": [], "validate_only": False},
    ControllerApi.ELECT_LEADERS: {"election_type": "preferred", "partitions": [{"topic": "t", "partition": 0}]},
    ControllerApi.INIT_PRODUCER_ID: {},
    ControllerApi.DESCRIBE_CLUSTER: {},
    # partition reassignment (issue 13)
    ControllerApi.ALTER_PARTITION_REASSIGNMENTS: {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]},
    ControllerApi.LIST_PARTITION_REASSIGNMENTS: {"partitions": [{"topic": "t", "partition": 0}]},
    # consumer groups (issue 13)
    BrokerApi.FIND_COORDINATOR: {"key": "g", "key_type": 0},
    BrokerApi.JOIN_GROUP: {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}],
    },
    BrokerApi.SYNC_GROUP: {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
        "assignments": [{"member_id": "m", "assignment": b"a"}],
    },
    BrokerApi.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "m"},
    BrokerApi.LEAVE_GROUP: {"group_id": "g", "members": [{"member_id": "m"}]},
    BrokerApi.OFFSET_COMMIT: {
        "group_id": "g",
        "generation_id": -1,
        "member_id": "",
        "partitions": [{"topic": "t", "partition": 0, "committed_offset": 0}],
    },
    BrokerApi.OFFSET_FETCH: {"group_id": "g", "partitions": [{"topic": "t", "partition": 0}]},
    BrokerApi.LIST_GROUPS: {"states_filter": []},
    BrokerApi.DESCRIBE_GROUPS: {"groups": ["g"]},
    BrokerApi.DELETE_GROUPS: {"groups_names": ["g"]},
}
# A follower's fetch (its own subject since NATS permissions, issue 14): the consumer's body with a replica id.
TEMPLATES[BrokerApi.REPLICA_FETCH] = {**TEMPLATES[BrokerApi.FETCH], "replica_id": 1}
LIST_BOUNDS: Final = (wire.PARTITIONS_PER_REQUEST_MAX, wire.TOPICS_PER_REQUEST_MAX, wire.REPLICAS_MAX)
# Numbers at and beyond the edges of Kafka's sizes; the ones a field takes are filtered out by the local decode.
EDGE_NUMBERS: Final = (
    -1,
    -2,
    INT16_MAX + 1,
    -(2**15) - 1,
    INT32_MAX + 1,
    -(2**31) - 1,
    INT64_MAX,
    INT64_MAX + 1,
    2**64 - 1,
    INT64_MIN,
)

msgpack_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT64_MIN, 2**64 - 1),
    st.sampled_from(EDGE_NUMBERS),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
msgpack_values = st.recursive(
    msgpack_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every position in a nested body: its map keys and list indexes."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@st.composite
def mutated_body(draw: st.DrawFn, api: str) -> bytes:
    """The API's template with one thing wrong: a field dropped, added, mistyped, out of range, or a list too long."""
    body = _copy(TEMPLATES[api])
    paths = list(_paths(body))
    action = draw(st.sampled_from(["unknown_field", "drop", "retype", "edge_number", "long_list"]))
    if action == "unknown_field" or not paths:
        containers = [()] + [p for p in paths if isinstance(_at(body, p), dict)]
        where = draw(st.sampled_from(containers))
        _at(body, where)[draw(st.text(min_size=1, max_size=12))] = draw(msgpack_values)
        return bytes(msgpack.packb(body, use_bin_type=True))
    path = draw(st.sampled_from(paths))
    parent, key = _at(body, path[:-1]), path[-1]
    if action == "drop":
        del parent[key]
    elif action == "retype":
        parent[key] = draw(msgpack_values)
    elif action == "edge_number":
        parent[key] = draw(st.sampled_from(EDGE_NUMBERS))
    else:
        element = parent[key] if not isinstance(parent[key], list) else (parent[key] or [0])[0]
        parent[key] = [element] * (draw(st.sampled_from(LIST_BOUNDS)) + 1)
    return bytes(msgpack.packb(body, use_bin_type=True))


def _at(body: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


def garbage_body(api: str) -> st.SearchStrategy[bytes]:
    fields = list(TEMPLATES[api]) or ["topics"]
    return st.one_of(
        st.binary(max_size=300),
        msgpack_values.filter(lambda v: not isinstance(v, dict)).map(lambda v: msgpack.packb(v, use_bin_type=True)),
        st.dictionaries(st.sampled_from(fields) | st.text(max_size=12), msgpack_values, max_size=6).map(
            lambda v: msgpack.packb(v, use_bin_type=True)
        ),
        mutated_body(api),
    )


def refused_locally(api: str, payload: bytes) -> bool:
    try:
        wire.decode(REQUEST_OF[api], payload)
    except wire.InvalidRequest:
        return True
    return False


@st.composite
def bad_body_request(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """(API, subject, payload) of a body the protocol refuses: for every broker and controller API."""
    api = draw(st.sampled_from(sorted(REQUEST_OF)))
    if api in set(BrokerApi):
        subjects = [broker_api(CLUSTER_ID, b, BrokerApi(api)) for b in BROKERS]
        if api == BrokerApi.METADATA:
            subjects.append(any_broker_metadata(CLUSTER_ID))
    else:
        subjects = [controller_api(CLUSTER_ID, ControllerApi(api))]
    payload = draw(garbage_body(api))
    # Only bodies the protocol's own decoder refuses: a body that decodes might be a valid request that changes
    # the cluster (an empty map is a valid InitProducerId).
    assume(refused_locally(api, payload))
    return api, draw(st.sampled_from(subjects)), payload


@given(st.data())
@settings(FUZZ, max_examples=1000)
def test_a_body_that_is_not_a_request_is_answered_invalid_request(live: Live, data: st.DataObject) -> None:
    api, subject, payload = data.draw(bad_body_request())
    answer = ask(live, subject, payload, RESPONSE_OF[api])
    assert_refused(answer, ErrorCode.INVALID_REQUEST, payload[:200])
    if api in set(ControllerApi):
        assert_metadata_unchanged(live)
    elif api == BrokerApi.PRODUCE:
        assert_logs_unchanged(live)


api_tokens = st.from_regex(r"[a-z_]{1,40}", fullmatch=True).filter(
    lambda token: token not in set(BrokerApi) | set(ControllerApi)
)


@given(api=api_tokens, broker=st.sampled_from(BROKERS), payload=st.binary(max_size=50), to_broker=st.booleans())
@settings(FUZZ, max_examples=60)
def test_an_unknown_api_is_answered_invalid_request(
    live: Live, api: str, broker: int, payload: bytes, to_broker: bool
) -> None:
    prefix = f"ht.{CLUSTER_ID}.broker.{broker}" if to_broker else f"ht.{CLUSTER_ID}.controller"
    answer = ask(live, f"{prefix}.{api}", payload, wire.Response)
    assert_refused(answer, ErrorCode.INVALID_REQUEST, api)


# -- well-formed bodies that are wrong: topics, partitions, leaders --------------------------------------------------

fresh_topic_names = st.from_regex(r"fz-[a-z0-9-]{1,30}", fullmatch=True)
unknown_partitions = st.integers(PARTITIONS, INT32_MAX)
unknown_broker_ids = st.one_of(st.just(0), st.integers(max(BROKERS) + 1, INT32_MAX))
any_int32 = st.integers(-(2**31), INT32_MAX)
any_int64 = st.integers(INT64_MIN, INT64_MAX)

UNKNOWN: Final = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
NOT_LEADER: Final = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER})


@st.composite
def unknown_topic_partition(draw: st.DrawFn) -> tuple[str, int]:
    if draw(st.booleans()):
        return draw(fresh_topic_names), draw(st.integers(0, INT32_MAX))
    return TOPIC, draw(unknown_partitions)


@st.composite
def fenced_or_unknown_epoch(draw: st.DrawFn, leader_epoch: int) -> tuple[int, ErrorCode]:
    """A current_leader_epoch the leader refuses: an older one (fenced) or a newer one (unknown to it)."""
    if leader_epoch > 0 and draw(st.booleans()):
        return draw(st.integers(0, leader_epoch - 1)), ErrorCode.FENCED_LEADER_EPOCH
    return draw(st.integers(leader_epoch + 1, INT32_MAX)), ErrorCode.UNKNOWN_LEADER_EPOCH


def brokers_leaders_first(facts: Facts) -> st.SearchStrategy[int]:
    """Any broker, the partitions' leaders twice as often (the third broker may lead nothing)."""
    return st.sampled_from([*BROKERS, *facts.leaders])


@dataclass(frozen=True)
class Target:
    """One partition of a request to `broker`, with the codes Kafka answers it with."""

    topic: str
    partition: int
    codes: frozenset[ErrorCode]
    leads: bool = False  # the broker leads this partition: the case is a bad request to a leader


@st.composite
def partition_targets(draw: st.DrawFn, facts: Facts, broker: int) -> list[Target]:
    """Distinct partitions of one request: unknown ones, ones `broker` only follows, and ones it leads (`leads`)."""
    led = [p for p in range(PARTITIONS) if facts.leaders[p] == broker]
    followed = [p for p in range(PARTITIONS) if facts.leaders[p] != broker]
    targets: dict[tuple[str, int], Target] = {}
    for _ in range(draw(st.integers(1, 3))):
        # Half the partitions are ones the broker leads: the bad requests that reach the replication core.
        kind = draw(st.sampled_from(["unknown", "followed", "led", "led"]))
        if kind == "unknown":
            topic, partition = draw(unknown_topic_partition())
            targets[(topic, partition)] = Target(topic, partition, UNKNOWN)
            continue
        partition = draw(st.sampled_from((led if kind == "led" else followed) or led or followed))
        leads = partition in led
        targets[(TOPIC, partition)] = Target(TOPIC, partition, frozenset() if leads else NOT_LEADER, leads)
    return list(targets.values())


# -- produce ---------------------------------------------------------------------------------------------------------


def resign(batch: bytearray) -> bytes:
    """Fix the batch length and CRC after an edit, so only the edit is wrong."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def valid_batch(values: list[bytes], **kwargs: Any) -> bytearray:
    return bytearray(encode_batch(values, timestamps=1_700_000_000_000, **kwargs))


def locally_valid(records: bytes) -> bool:
    try:
        validate_batches(records, deep=True, max_batch_bytes=MAX_MESSAGE_BYTES)
    except InvalidRecordBatch:
        return False
    return True


CORRUPT: Final = frozenset({ErrorCode.CORRUPT_MESSAGE})
CORRUPT_OR_TOO_LARGE: Final = frozenset({ErrorCode.CORRUPT_MESSAGE, ErrorCode.RECORD_TOO_LARGE})
UNREADABLE: Final = frozenset({ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD})
INVALID_RECORD: Final = frozenset({ErrorCode.INVALID_RECORD})
values = st.lists(st.binary(max_size=40), min_size=1, max_size=5)


@st.composite
def bad_records(draw: st.DrawFn) -> tuple[bytes, frozenset[ErrorCode]]:
    """Records a leader must refuse, and the codes it refuses them with."""
    batch = valid_batch(draw(values))
    case = draw(
        st.sampled_from(
            [
                "random",
                "bit_flip",
                "length_flip",
                "truncated",
                "trailing_garbage",
                "signed_garbage",
                "too_large",
                "too_many_bytes",
                "count_mismatch",
                "control",
                "codec",
                "sequence",
            ]
        )
    )
    if case == "random":
        records = draw(st.binary(min_size=1, max_size=400))
        assume(not locally_valid(records))
        return records, frozenset(
            {
                ErrorCode.CORRUPT_MESSAGE,
                ErrorCode.RECORD_TOO_LARGE,
                ErrorCode.INVALID_RECORD,
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            }
        )
    if case == "bit_flip":  # magic, CRC or a byte under it
        index = draw(st.integers(16, len(batch) - 1))
        batch[index] ^= 1 << draw(st.integers(0, 7))
        return bytes(batch), CORRUPT
    if case == "length_flip":  # batchLength: the framing no longer matches
        index = draw(st.integers(8, 11))
        batch[index] ^= 1 << draw(st.integers(0, 7))
        return bytes(batch), CORRUPT_OR_TOO_LARGE
    if case == "truncated":
        return bytes(batch[: draw(st.integers(1, len(batch) - 1))]), CORRUPT
    if case == "trailing_garbage":
        records = bytes(batch) + draw(st.binary(min_size=1, max_size=100))
        return records, CORRUPT_OR_TOO_LARGE | UNREADABLE | {ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
    if case == "signed_garbage":  # header and CRC right, records that do not parse
        garbage = draw(st.binary(min_size=0, max_size=60))
        records = resign(batch[:61] + garbage)
        assume(not locally_valid(records))
        return records, UNREADABLE
    return _bad_records_by_header(draw, case)


def _bad_records_by_header(draw: st.DrawFn, case: str) -> tuple[bytes, frozenset[ErrorCode]]:
    if case == "too_large":  # one batch over max.message.bytes
        size = draw(st.integers(MAX_MESSAGE_BYTES + 1, MAX_MESSAGE_BYTES + 4096))
        return bytes(valid_batch([b"x" * size])), frozenset({ErrorCode.MESSAGE_TOO_LARGE})
    if case == "too_many_bytes":  # batches each within max.message.bytes, more than segment.bytes together
        batch = bytes(valid_batch([b"y" * (MAX_MESSAGE_BYTES - 200)]))
        return batch * (SEGMENT_BYTES // len(batch) + draw(st.integers(1, 2))), frozenset(
            {ErrorCode.RECORD_LIST_TOO_LARGE}
        )
    if case == "count_mismatch":  # recordCount disagrees with lastOffsetDelta (Kafka's LogValidator)
        batch = valid_batch([b"a", b"b"])
        struct.pack_into(">i", batch, 57, draw(st.sampled_from([0, 1, 3, INT32_MAX])))
        return resign(batch), INVALID_RECORD
    if case == "control":  # clients may not write control batches
        batch = valid_batch([b"a"])
        struct.pack_into(">h", batch, 21, 0x20)
        return resign(batch), INVALID_RECORD
    if case == "codec":  # a codec number Kafka does not define
        batch = valid_batch([b"a"])
        struct.pack_into(">h", batch, 21, draw(st.sampled_from([5, 6, 7])))
        return resign(batch), frozenset({ErrorCode.UNSUPPORTED_COMPRESSION_TYPE})
    # An idempotent batch the producer table refuses: no sequence, a negative epoch, or an unknown producer that
    # does not start at sequence 0. Producer ids from 10**12 are never allocated here.
    producer_id = draw(st.integers(10**12, INT64_MAX))
    flavour = draw(st.sampled_from(["no_sequence", "negative_epoch", "out_of_order"]))
    if flavour == "no_sequence":
        batch = valid_batch(
            [b"a"], producer_id=producer_id, producer_epoch=0, base_sequence=draw(st.integers(-(2**31), -1))
        )
        return bytes(batch), INVALID_RECORD
    if flavour == "negative_epoch":
        epoch = draw(st.integers(-(2**15), -1))
        batch = valid_batch([b"a"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0)
        return bytes(batch), INVALID_RECORD
    batch = valid_batch(
        [b"a"], producer_id=producer_id, producer_epoch=0, base_sequence=draw(st.integers(1, INT32_MAX))
    )
    return bytes(batch), frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER})


@st.composite
def bad_produce(draw: st.DrawFn, facts: Facts) -> tuple[int, wire.ProduceRequest, list[Target]]:
    broker = draw(brokers_leaders_first(facts))
    targets = draw(partition_targets(facts, broker))
    partitions = []
    for i, target in enumerate(targets):
        if target.leads:
            records, codes = draw(bad_records())
            targets[i] = Target(target.topic, target.partition, codes, leads=True)
        else:  # any records: the partition is refused before they are read
            records = draw(st.sampled_from([bytes(valid_batch([b"v"])), b"\x00"]))
        partitions.append(wire.ProducePartitionData(topic=target.topic, partition=target.partition, records=records))
    acks = draw(st.sampled_from([-1, 0, 1]))
    request = wire.ProduceRequest(acks=acks, timeout_ms=draw(st.integers(0, INT32_MAX)), partitions=tuple(partitions))
    return broker, request, targets


@given(st.data())
@settings(FUZZ, max_examples=450)
def test_a_bad_produce_is_refused_and_appends_nothing(live: Live, data: st.DataObject) -> None:
    broker, request, targets = data.draw(bad_produce(live.facts))
    answer = ask(live, broker_api(CLUSTER_ID, broker, BrokerApi.PRODUCE), wire.encode(request), wire.ProduceResponse)
    assert_each_refused(answer, [((t.topic, t.partition), t.codes) for t in targets], request.partitions)
    assert_logs_unchanged(live)


# -- fetch, list offsets, offsets for leader epoch, metadata --------------------------------------------------------


@st.composite
def bad_fetch(draw: st.DrawFn, facts: Facts) -> tuple[int, wire.FetchRequest, list[Target]]:
    """A consumer's fetch (or one claiming to be a replica it is not) that every partition refuses."""
    broker = draw(brokers_leaders_first(facts))
    impostor = draw(st.sampled_from(["consumer", "not_a_replica", "stale_replica"]))
    replica_id, broker_epoch = -1, -1
    if impostor == "not_a_replica":
        replica_id, broker_epoch = draw(unknown_broker_ids), draw(any_int64)
    elif impostor == "stale_replica":  # a real replica, with an epoch older than its registration's
        # (the first broker to register may have epoch 0, the metadata log's first offset: nothing is older)
        replica_id = draw(st.sampled_from([b for b in BROKERS if facts.broker_epochs[b] > 0]))
        broker_epoch = draw(st.integers(0, facts.broker_epochs[replica_id] - 1))
    targets = draw(partition_targets(facts, broker))
    partitions = []
    for i, target in enumerate(targets):
        current_leader_epoch, fetch_offset = -1, draw(st.integers(0, 10))
        if target.leads:
            epoch = facts.leader_epochs[target.partition]
            if impostor != "consumer" and draw(st.booleans()):
                codes = NOT_LEADER
                current_leader_epoch = draw(st.sampled_from([-1, epoch]))
                fetch_offset = 0  # the log start: readable, were the replica real
            elif draw(st.booleans()):
                current_leader_epoch, code = draw(fenced_or_unknown_epoch(epoch))
                codes = frozenset({code})
            else:  # outside [log start, log end]: OFFSET_OUT_OF_RANGE (unless the impostor is refused first)
                fetch_offset = draw(st.integers(INT64_MIN, -1) | st.integers(10**9, INT64_MAX))
                codes = frozenset({ErrorCode.OFFSET_OUT_OF_RANGE}) if impostor == "consumer" else NOT_LEADER
            targets[i] = Target(target.topic, target.partition, codes, leads=True)
        partitions.append(
            wire.FetchPartitionRequest(
                topic=target.topic,
                partition=target.partition,
                fetch_offset=fetch_offset,
                current_leader_epoch=current_leader_epoch,
                partition_max_bytes=draw(st.integers(0, INT32_MAX)),
            )
        )
    request = wire.FetchRequest(
        replica_id=replica_id,
        broker_epoch=broker_epoch,
        max_wait_ms=draw(st.integers(0, 60_000)),  # refused partitions answer at once, whatever the wait
        min_bytes=draw(st.integers(0, INT32_MAX)),
        max_bytes=draw(st.integers(0, INT32_MAX)),
        partitions=tuple(partitions),
    )
    return broker, request, targets


@given(st.data())
@settings(FUZZ, max_examples=250)
def test_a_bad_fetch_is_refused_at_once(live: Live, data: st.DataObject) -> None:
    broker, request, targets = data.draw(bad_fetch(live.facts))
    api = BrokerApi.FETCH if request.replica_id < 0 else BrokerApi.REPLICA_FETCH  # a replica's has its own subject
    answer = ask(live, broker_api(CLUSTER_ID, broker, api), wire.encode(request), wire.FetchResponse)
    assert_each_refused(answer, [((t.topic, t.partition), t.codes) for t in targets], request)
    assert all(p.records == b"" for p in answer.partitions), "a refused partition returned records"


@st.composite
def bad_list_offsets(draw: st.DrawFn, facts: Facts) -> tuple[int, wire.ListOffsetsRequest, list[Target]]:
    broker = draw(brokers_leaders_first(facts))
    targets = draw(partition_targets(facts, broker))
    queries = []
    for i, target in enumerate(targets):
        timestamp, current_leader_epoch = draw(any_int64), -1
        if target.leads:
            if draw(st.booleans()):
                current_leader_epoch, code = draw(fenced_or_unknown_epoch(facts.leader_epochs[target.partition]))
            else:  # -1, -2 and -3 are latest, earliest and max timestamp; other negative timestamps mean nothing
                timestamp, code = draw(st.integers(INT64_MIN, -4)), ErrorCode.INVALID_REQUEST
            targets[i] = Target(target.topic, target.partition, frozenset({code}), leads=True)
        queries.append(
            wire.ListOffsetsPartition(
                topic=target.topic,
                partition=target.partition,
                timestamp=timestamp,
                current_leader_epoch=current_leader_epoch,
            )
        )
    return broker, wire.ListOffsetsRequest(partitions=tuple(queries)), targets


@given(st.data())
@settings(FUZZ, max_examples=150)
def test_a_bad_list_offsets_is_refused(live: Live, data: st.DataObject) -> None:
    broker, request, targets = data.draw(bad_list_offsets(live.facts))
    subject = broker_api(CLUSTER_ID, broker, BrokerApi.LIST_OFFSETS)
    answer = ask(live, subject, wire.encode(request), wire.ListOffsetsResponse)
    assert_each_refused(answer, [((t.topic, t.partition), t.codes) for t in targets], request)


@st.composite
def bad_offsets_for_leader_epoch(
    draw: st.DrawFn, facts: Facts
) -> tuple[int, wire.OffsetsForLeaderEpochRequest, list[Target]]:
    broker = draw(brokers_leaders_first(facts))
    targets = draw(partition_targets(facts, broker))
    queries = []
    for i, target in enumerate(targets):
        current_leader_epoch = -1
        if target.leads:
            current_leader_epoch, code = draw(fenced_or_unknown_epoch(facts.leader_epochs[target.partition]))
            targets[i] = Target(target.topic, target.partition, frozenset({code}), leads=True)
        queries.append(
            wire.EpochQuery(
                topic=target.topic,
                partition=target.partition,
                current_leader_epoch=current_leader_epoch,
                leader_epoch=draw(any_int32),
            )
        )
    replica_id = draw(st.sampled_from([-1, *BROKERS]))
    return broker, wire.OffsetsForLeaderEpochRequest(replica_id=replica_id, partitions=tuple(queries)), targets


@given(st.data())
@settings(FUZZ, max_examples=150)
def test_a_bad_offsets_for_leader_epoch_is_refused(live: Live, data: st.DataObject) -> None:
    broker, request, targets = data.draw(bad_offsets_for_leader_epoch(live.facts))
    subject = broker_api(CLUSTER_ID, broker, BrokerApi.OFFSETS_FOR_LEADER_EPOCH)
    answer = ask(live, subject, wire.encode(request), wire.OffsetsForLeaderEpochResponse)
    assert_each_refused(answer, [((t.topic, t.partition), t.codes) for t in targets], request)


@given(
    topics=st.lists(fresh_topic_names, min_size=1, max_size=5),
    subject=st.sampled_from(
        [any_broker_metadata(CLUSTER_ID)] + [broker_api(CLUSTER_ID, b, BrokerApi.METADATA) for b in BROKERS]
    ),
)
@settings(FUZZ, max_examples=50)
def test_metadata_of_unknown_topics_is_unknown_topic_or_partition(live: Live, topics: list[str], subject: str) -> None:
    request = wire.MetadataRequest(topics=tuple(topics))
    answer = ask(live, subject, wire.encode(request), wire.MetadataResponse)
    assert_each_refused(answer, [(name, UNKNOWN) for name in topics], request)
    assert all(b.broker_id in BROKERS for b in answer.brokers)


# -- the controller: broker lifecycle --------------------------------------------------------------------------------


@st.composite
def stale_heartbeat(draw: st.DrawFn, facts: Facts) -> wire.BrokerHeartbeatRequest:
    """A heartbeat of an unknown broker, or of a known one with any epoch but its current one."""
    if draw(st.booleans()):
        broker_id, epoch = draw(unknown_broker_ids), draw(any_int64)
    else:
        broker_id = draw(st.sampled_from(BROKERS))
        current = facts.broker_epochs[broker_id]
        old = facts.stale_broker_epoch if broker_id == facts.restarted_broker else current - 1
        epoch = draw(st.sampled_from([old, -1, current + 1]) | any_int64.filter(lambda e: e != current))
    return wire.BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=epoch,
        current_metadata_offset=draw(any_int64),
        want_fence=draw(st.booleans()),
        want_shut_down=draw(st.booleans()),
        # A stale heartbeat reporting replicas offline must not take them offline either.
        offline_replicas=tuple(draw(st.lists(st.sampled_from(OFFLINE_REFS), max_size=2, unique=True))),
    )


OFFLINE_REFS: Final = tuple(wire.TopicPartitionRef(topic=TOPIC, partition=p) for p in (0, 1))


@given(st.data())
@settings(FUZZ, max_examples=150)
def test_a_heartbeat_with_a_stale_broker_epoch_is_refused(live: Live, data: st.DataObject) -> None:
    request = data.draw(stale_heartbeat(live.facts))
    subject = controller_api(CLUSTER_ID, ControllerApi.BROKER_HEARTBEAT)
    answer = ask(live, subject, wire.encode(request), wire.BrokerHeartbeatResponse)
    assert_refused(answer, ErrorCode.STALE_BROKER_EPOCH, request)
    assert_metadata_unchanged(live)


@given(
    broker_id=st.sampled_from(BROKERS),
    incarnation_id=st.text(min_size=1, max_size=64),
    previous_broker_epoch=any_int64,
)
@settings(FUZZ, max_examples=100)
def test_registering_a_live_broker_id_again_is_a_duplicate_registration(
    live: Live, broker_id: int, incarnation_id: str, previous_broker_epoch: int
) -> None:
    # A live broker's incarnation id is a random UUID this test never learns: any other one is an impostor.
    request = wire.BrokerRegistrationRequest(
        broker_id=broker_id, incarnation_id=incarnation_id, previous_broker_epoch=previous_broker_epoch
    )
    subject = controller_api(CLUSTER_ID, ControllerApi.REGISTER_BROKER)
    answer = ask(live, subject, wire.encode(request), wire.BrokerRegistrationResponse)
    assert_refused(answer, ErrorCode.DUPLICATE_BROKER_REGISTRATION, request)
    assert answer.broker_epoch == -1
    assert_metadata_unchanged(live)


@st.composite
def bad_alter_partition(draw: st.DrawFn, facts: Facts) -> tuple[wire.AlterPartitionRequest, ErrorCode]:
    """An AlterPartition with exactly one defect, in Kafka's order of checks, and the code it must get."""
    partition = draw(st.integers(0, PARTITIONS - 1))
    leader = facts.leaders[partition]
    fields: dict[str, Any] = {
        "broker_id": leader,
        "broker_epoch": facts.broker_epochs[leader],
        "topic": TOPIC,
        "partition": partition,
        "leader_epoch": facts.leader_epochs[partition],
        "partition_epoch": facts.partition_epochs[partition],
        "new_isr": facts.isr[partition],
        "new_isr_broker_epochs": tuple(-1 for _ in facts.isr[partition]),
    }
    defect = draw(st.sampled_from(sorted(ALTER_PARTITION_DEFECTS)))
    expected = ALTER_PARTITION_DEFECTS[defect](draw, facts, partition, fields)
    return wire.AlterPartitionRequest(**fields), expected


def _stale_sender(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    broker_id = draw(st.sampled_from(BROKERS) | unknown_broker_ids)
    current = facts.broker_epochs.get(broker_id)
    fields["broker_id"] = broker_id
    fields["broker_epoch"] = draw(any_int64.filter(lambda e: e != current))
    return ErrorCode.STALE_BROKER_EPOCH


def _unknown_partition(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    fields["topic"], fields["partition"] = draw(unknown_topic_partition())
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _epoch_ahead(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    # A sender ahead of the controller: the controller is likely no longer the active one (Kafka's reasoning).
    if draw(st.booleans()):
        fields["leader_epoch"] = draw(st.integers(facts.leader_epochs[partition] + 1, INT32_MAX))
    else:
        fields["partition_epoch"] = draw(st.integers(facts.partition_epochs[partition] + 1, INT32_MAX))
    return ErrorCode.NOT_CONTROLLER


def _fenced_leader_epoch(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    fields["leader_epoch"] = draw(st.integers(-(2**31), facts.leader_epochs[partition] - 1))
    return ErrorCode.FENCED_LEADER_EPOCH


def _not_the_leader(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    sender = draw(st.sampled_from([b for b in BROKERS if b != facts.leaders[partition]]))
    fields["broker_id"], fields["broker_epoch"] = sender, facts.broker_epochs[sender]
    return ErrorCode.INVALID_REQUEST


def _stale_partition_epoch(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    fields["partition_epoch"] = draw(st.integers(-(2**31), facts.partition_epochs[partition] - 1))
    return ErrorCode.INVALID_UPDATE_VERSION


def _invalid_isr(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    leader, replicas = facts.leaders[partition], facts.replicas[partition]
    flavour = draw(st.sampled_from(["epochs_length", "not_a_replica", "duplicate", "without_leader"]))
    if flavour == "epochs_length":
        count = draw(st.integers(0, 5).filter(lambda n: n != len(fields["new_isr"])))
        fields["new_isr_broker_epochs"] = tuple(-1 for _ in range(count))
        return ErrorCode.INVALID_REQUEST
    if flavour == "not_a_replica":
        isr = (leader, draw(unknown_broker_ids))
    elif flavour == "duplicate":
        isr = (leader, leader)
    else:
        isr = tuple(draw(st.lists(st.sampled_from([r for r in replicas if r != leader]), max_size=2, unique=True)))
    fields["new_isr"], fields["new_isr_broker_epochs"] = isr, tuple(-1 for _ in isr)
    return ErrorCode.INVALID_REQUEST


def _ineligible_member(draw: st.DrawFn, facts: Facts, partition: int, fields: dict[str, Any]) -> ErrorCode:
    # A valid ISR whose sender-checked member epochs are wrong for one member: the member may have restarted.
    isr = fields["new_isr"]
    wrong = draw(st.integers(0, len(isr) - 1))
    current = facts.broker_epochs[isr[wrong]]
    epochs = [-1] * len(isr)
    epochs[wrong] = draw(any_int64.filter(lambda e: e not in (-1, current)))
    fields["new_isr_broker_epochs"] = tuple(epochs)
    return ErrorCode.INELIGIBLE_REPLICA


ALTER_PARTITION_DEFECTS: Final[dict[str, Callable[[st.DrawFn, Facts, int, dict[str, Any]], ErrorCode]]] = {
    "stale_sender": _stale_sender,
    "unknown_partition": _unknown_partition,
    "epoch_ahead": _epoch_ahead,
    "fenced_leader_epoch": _fenced_leader_epoch,
    "not_the_leader": _not_the_leader,
    "stale_partition_epoch": _stale_partition_epoch,
    "invalid_isr": _invalid_isr,
    "ineligible_member": _ineligible_member,
}


@given(st.data())
@settings(FUZZ, max_examples=300)
def test_a_bad_alter_partition_is_refused_and_the_isr_stays(live: Live, data: st.DataObject) -> None:
    request, expected = data.draw(bad_alter_partition(live.facts))
    subject = controller_api(CLUSTER_ID, ControllerApi.ALTER_PARTITION)
    answer = ask(live, subject, wire.encode(request), wire.AlterPartitionResponse)
    assert_refused(answer, expected, request)
    assert_metadata_unchanged(live)


# -- the controller: admin ---------------------------------------------------------------------------------------------

TOPIC_CONFIG_BOUNDS: Final = {
    "min.insync.replicas": (1, INT32_MAX),
    "retention.ms": (-1, INT64_MAX),
    "retention.bytes": (-1, INT64_MAX),
    "segment.bytes": (14, INT32_MAX),
    "segment.ms": (1, INT64_MAX),
    "max.message.bytes": (0, INT32_MAX),
}

KNOWN_CONFIGS: Final = frozenset(TOPIC_CONFIGS)  # every name the table accepts: a drawn "unknown" name must not be one


@st.composite
def bad_config(draw: st.DrawFn) -> dict[str, str]:
    """One topic config Kafka refuses: an unknown name, or a value that is not a number of the config's type."""
    if draw(st.booleans()):
        name = draw(st.from_regex(r"[a-z]{1,10}\.[a-z.]{1,20}", fullmatch=True))
        assume(name not in KNOWN_CONFIGS)
        return {name: "1"}
    name = draw(st.sampled_from(sorted(TOPIC_CONFIG_BOUNDS)))
    low, high = TOPIC_CONFIG_BOUNDS[name]
    value = draw(
        st.integers(max_value=low - 1).map(str)
        | st.integers(min_value=high + 1).map(str)
        | st.sampled_from(["", "ten", "1.5", "0x10", "1e3"])
    )
    return {name: value}


@st.composite
def bad_assignments(draw: st.DrawFn) -> tuple[tuple[int, ...], ...]:
    """A manual assignment Kafka refuses: an unregistered broker, a broker twice, an empty or uneven list."""
    flavour = draw(st.sampled_from(["unregistered", "duplicate", "empty", "uneven"]))
    if flavour == "unregistered":
        return ((draw(st.sampled_from(BROKERS)), draw(unknown_broker_ids)),)
    if flavour == "duplicate":
        broker = draw(st.sampled_from(BROKERS))
        return ((broker, broker),)
    if flavour == "empty":
        return ((),)
    return ((1, 2), (draw(st.sampled_from(BROKERS)),))


@st.composite
def bad_creatable_topic(draw: st.DrawFn) -> tuple[wire.CreatableTopic, ErrorCode]:
    defect = draw(
        st.sampled_from(
            [
                "exists",
                "collides",
                "dots",
                "config",
                "partitions",
                "replication",
                "assignment",
                "assignment_with_counts",
            ]
        )
    )
    name = draw(fresh_topic_names)
    if defect == "exists":
        return wire.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1), ErrorCode.TOPIC_ALREADY_EXISTS
    if defect in ("collides", "dots"):
        illegal = COLLIDING_TOPIC if defect == "collides" else draw(st.sampled_from([".", ".."]))
        return wire.CreatableTopic(name=illegal), ErrorCode.INVALID_TOPIC_EXCEPTION
    if defect == "config":
        topic = wire.CreatableTopic(name=name, num_partitions=1, replication_factor=1, configs=draw(bad_config()))
        return topic, ErrorCode.INVALID_CONFIG
    if defect == "partitions":
        return wire.CreatableTopic(name=name, num_partitions=0, replication_factor=1), ErrorCode.INVALID_PARTITIONS
    if defect == "replication":  # none, or more replicas than brokers
        factor = draw(st.sampled_from([0]) | st.integers(len(BROKERS) + 1, wire.REPLICAS_MAX))
        topic = wire.CreatableTopic(name=name, num_partitions=1, replication_factor=factor)
        return topic, ErrorCode.INVALID_REPLICATION_FACTOR
    if defect == "assignment":
        return wire.CreatableTopic(name=name, assignments=draw(bad_assignments())), ErrorCode.INVALID_REPLICA_ASSIGNMENT
    # A manual assignment leaves the counts to it: giving them too is an invalid request.
    topic = wire.CreatableTopic(name=name, num_partitions=1, replication_factor=-1, assignments=((1, 2, 3),))
    if draw(st.booleans()):
        topic = wire.CreatableTopic(name=name, num_partitions=-1, replication_factor=3, assignments=((1, 2, 3),))
    return topic, ErrorCode.INVALID_REQUEST


@given(st.lists(bad_creatable_topic(), min_size=1, max_size=4))
@example([(wire.CreatableTopic(name="fz-twice"), ErrorCode.INVALID_REQUEST)] * 2)  # named twice: neither is created
@settings(FUZZ, max_examples=200)
def test_creating_bad_topics_is_refused_topic_by_topic(
    live: Live, topics: list[tuple[wire.CreatableTopic, ErrorCode]]
) -> None:
    request = wire.CreateTopicsRequest(topics=tuple(t for t, _ in topics))
    subject = controller_api(CLUSTER_ID, ControllerApi.CREATE_TOPICS)
    answer = ask(live, subject, wire.encode(request), wire.CreateTopicsResponse)
    assert_each_refused(answer, named_once([(t.name, frozenset({code})) for t, code in topics]), request)
    assert_metadata_unchanged(live)


@given(st.lists(fresh_topic_names | st.just(COLLIDING_TOPIC), min_size=1, max_size=5))
@example([TOPIC, "fz-unknown", TOPIC])  # an existing topic named twice: not deleted
@settings(FUZZ, max_examples=50)
def test_deleting_unknown_topics_is_unknown_topic_or_partition(live: Live, names: list[str]) -> None:
    request = wire.DeleteTopicsRequest(topics=tuple(names))
    subject = controller_api(CLUSTER_ID, ControllerApi.DELETE_TOPICS)
    answer = ask(live, subject, wire.encode(request), wire.DeleteTopicsResponse)
    assert_each_refused(answer, named_once([(name, UNKNOWN) for name in names]), request)
    assert_metadata_unchanged(live)


@st.composite
def bad_create_partitions(draw: st.DrawFn) -> tuple[wire.CreatePartitionsRequest, ErrorCode]:
    defect = draw(st.sampled_from(["unknown_topic", "not_an_increase", "assignment_count", "assignment"]))
    if defect == "unknown_topic":
        request = wire.CreatePartitionsRequest(topic=draw(fresh_topic_names), count=draw(st.integers(1, 10_000)))
        return request, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if defect == "not_an_increase":
        return wire.CreatePartitionsRequest(
            topic=TOPIC, count=draw(st.integers(1, PARTITIONS))
        ), ErrorCode.INVALID_PARTITIONS
    count = draw(st.integers(PARTITIONS + 1, PARTITIONS + 3))
    additional = count - PARTITIONS
    if defect == "assignment_count":  # one assignment per new partition, no more and no fewer
        lists = draw(st.integers(0, 5).filter(lambda n: n != additional))
        assignments = tuple((1, 2, 3) for _ in range(lists))
    else:  # the right number, one of them wrong: an unregistered broker, a duplicate, or the wrong RF
        wrong = draw(
            st.sampled_from([(1, 2, draw(unknown_broker_ids)), (1, 1, 2), (1, 2), (1, 2, 3, draw(unknown_broker_ids))])
        )
        assignments = (*tuple((1, 2, 3) for _ in range(additional - 1)), wrong)
    request = wire.CreatePartitionsRequest(topic=TOPIC, count=count, assignments=assignments)
    return request, ErrorCode.INVALID_REPLICA_ASSIGNMENT


@given(bad_create_partitions())
@settings(FUZZ, max_examples=150)
def test_bad_create_partitions_is_refused(live: Live, case: tuple[wire.CreatePartitionsRequest, ErrorCode]) -> None:
    request, expected = case
    subject = controller_api(CLUSTER_ID, ControllerApi.CREATE_PARTITIONS)
    answer = ask(live, subject, wire.encode(request), wire.CreatePartitionsResponse)
    assert_refused(answer, expected, request)
    assert_metadata_unchanged(live)


@st.composite
def bad_alter_configs(draw: st.DrawFn) -> tuple[wire.AlterConfigsRequest, ErrorCode]:
    """An incremental config change Kafka refuses, in its order of checks: unknown topic, a name both set and
    deleted, an unknown name or a bad value."""
    defect = draw(st.sampled_from(["unknown_topic", "set_and_deleted", "bad_value", "delete_unknown"]))
    validate_only = draw(st.booleans())
    if defect == "unknown_topic":
        topic, expected = draw(fresh_topic_names), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        set_configs, delete_configs = draw(bad_config() | st.just({"retention.ms": "1000"})), ()
    elif defect == "set_and_deleted":
        name = draw(st.sampled_from(sorted(TOPIC_CONFIG_BOUNDS)))
        topic, expected, set_configs, delete_configs = TOPIC, ErrorCode.INVALID_REQUEST, {name: "1000"}, (name,)
    elif defect == "bad_value":
        topic, expected, set_configs, delete_configs = TOPIC, ErrorCode.INVALID_CONFIG, draw(bad_config()), ()
    else:
        name = draw(
            st.from_regex(r"[a-z]{1,10}\.[a-z.]{1,20}", fullmatch=True).filter(lambda n: n not in KNOWN_CONFIGS)
        )
        topic, expected, set_configs, delete_configs = TOPIC, ErrorCode.INVALID_CONFIG, {}, (name,)
    request = wire.AlterConfigsRequest(
        topic=topic, set_configs=set_configs, delete_configs=delete_configs, validate_only=validate_only
    )
    return request, expected


@given(bad_alter_configs())
@settings(FUZZ, max_examples=100)
def test_a_bad_config_change_is_refused(live: Live, case: tuple[wire.AlterConfigsRequest, ErrorCode]) -> None:
    request, expected = case
    subject = controller_api(CLUSTER_ID, ControllerApi.ALTER_CONFIGS)
    answer = ask(live, subject, wire.encode(request), wire.AlterConfigsResponse)
    assert_refused(answer, expected, request)
    assert_metadata_unchanged(live)


@st.composite
def needless_elections(draw: st.DrawFn) -> tuple[wire.ElectLeadersRequest, list[tuple[Any, frozenset[ErrorCode]]]]:
    """Elections of unknown partitions, and unclean elections of partitions that have a leader: none elects."""
    election_type = draw(st.sampled_from(["preferred", "unclean"]))
    refs, expected = [], []
    for _ in range(draw(st.integers(1, 5))):
        if election_type == "unclean" and draw(st.booleans()):
            topic, partition = TOPIC, draw(st.integers(0, PARTITIONS - 1))
            codes = frozenset({ErrorCode.ELECTION_NOT_NEEDED})
        else:
            (topic, partition), codes = draw(unknown_topic_partition()), UNKNOWN
        refs.append(wire.TopicPartitionRef(topic=topic, partition=partition))
        expected.append(((topic, partition), codes))
    return wire.ElectLeadersRequest(election_type=election_type, partitions=tuple(refs)), expected


@given(st.data())
@settings(FUZZ, max_examples=100)
def test_an_election_that_cannot_elect_is_refused_partition_by_partition(live: Live, data: st.DataObject) -> None:
    request, expected = data.draw(needless_elections())
    subject = controller_api(CLUSTER_ID, ControllerApi.ELECT_LEADERS)
    answer = ask(live, subject, wire.encode(request), wire.ElectLeadersResponse)
    assert_each_refused(answer, expected, request)
    assert_metadata_unchanged(live)


# -- after the fuzz --------------------------------------------------------------------------------------------------


def test_after_the_fuzz_the_cluster_is_unchanged_and_serves(live: Live) -> None:
    """Runs last (pytest keeps file order): it checks what the fuzz tests above left behind."""
    assert live.requests_sent >= REQUESTS_MIN, (
        f"only {live.requests_sent} fuzz requests were sent: run the whole module, this test checks their effect"
    )
    processes = {"nats-server": live.state.nats_pid}
    processes |= {f"controller-{c}": pid for c, pid in live.state.controllers.items()}
    processes |= {f"broker-{b}": pid for b, pid in live.state.brokers.items()}
    assert [name for name, pid in processes.items() if not pid_alive(pid)] == []

    admin = Admin(live.conn)
    now = live.run(snapshot(live.conn, live.nc, admin, live.facts.restarted_broker, live.facts.stale_broker_epoch))
    assert now == live.before, "the fuzz changed the cluster"

    read = live.run(produce_and_read_back(live.conn, count=100))
    for partition in range(PARTITIONS):
        before = [b"before-%d" % i for i in range(PRELOADED_RECORDS) if i % PARTITIONS == partition]
        after = [b"after-%d" % i for i in range(100) if i % PARTITIONS == partition]
        assert read[partition] == before + after, f"partition {partition} does not hold what was acknowledged"
    replicas = live.run(create_and_describe(admin, "fz-after-the-fuzz"))
    assert replicas == 3
    print(f"\nfuzz: {live.requests_sent} requests; answers by error: {dict(sorted(live.answered.items()))}")


async def produce_and_read_back(conn: ClusterConnection, count: int) -> dict[int, list[bytes | None]]:
    """Produce `count` records with acks=all, then read each partition from its log start: its values in order."""
    async with Producer(conn, ProducerConfig(acks=-1)) as producer:
        futures = [await producer.send(TOPIC, b"after-%d" % i, partition=i % PARTITIONS) for i in range(count)]
        await producer.flush()
        for future in futures:
            await future
    consumer = Consumer(conn, ConsumerConfig(fetch_max_wait_ms=100))
    consumer.assign({(TOPIC, p): wire.EARLIEST_TIMESTAMP for p in range(PARTITIONS)})
    await consumer.resolve_positions()
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + 30
    while len(records) < PRELOADED_RECORDS + count:
        assert time.monotonic() < deadline, f"read {len(records)} of {PRELOADED_RECORDS + count} records"
        records += await consumer.poll()
    await consumer.close()
    read: dict[int, list[bytes | None]] = {p: [] for p in range(PARTITIONS)}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        read[record.partition].append(record.value)
    return read


async def create_and_describe(admin: Admin, name: str) -> int:
    """Create a topic (1 partition, RF 3) and wait until the metadata shows it led: its number of replicas."""
    created = await admin.create_topic(name, 1, 3)
    assert created.error == 0, created

    async def led() -> int | None:
        (topic,) = (await admin.describe_topics((name,))).topics
        ready = topic.error == 0 and topic.partitions and topic.partitions[0].leader >= 0
        return len(topic.partitions[0].replicas) if ready else None

    return await poll(led, f"topic {name} with a leader in the metadata", deadline_s=30)
