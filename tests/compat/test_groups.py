"""Consumer groups over the Kafka listener: confluent-kafka, kafka-python and aiokafka (from PyPI, unchanged) each
consume a 6-partition topic with a group of two members that commit, one member leaves and the other takes over
its partitions, and a restarted member resumes at the committed offsets: every record is read exactly once (nothing
skipped, nothing read twice past a commit). confluent-kafka's AdminClient lists, describes and deletes the groups,
which `hightide group describe` (over NATS) sees as well: one coordinator, two front doors.

Method: the `cluster` fixture (conftest) starts real processes. Each member commits what it has read after every
batch (synchronously), so a member that leaves or is restarted has nothing read past its commit; waits are polled
conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from hightide.client.local_cluster import LocalCluster
from hightide.protocol import kafka
from support import kafka_wire
from support.cluster_cli import describe, hightide, wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 6
RECORDS = 600
DEADLINE_S = 90


def _topic_with_records(cluster: LocalCluster, bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)
    assert admin.create_topics([new])[topic].result(timeout=30) is None
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, topic)), 30, "a full ISR")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


class Member:
    """One group member as the scenario drives it (each client adapts to this)."""

    name: str

    def poll(self) -> list[int]:
        """Read a batch (it may be empty), commit what was read, and answer the values read."""
        raise NotImplementedError

    def assignment(self) -> set[int]:
        raise NotImplementedError

    def close(self) -> list[int]:
        """Leave the group; answer any values read (and committed) since the last poll."""
        raise NotImplementedError


def _scenario(make: Callable[[str], Member]) -> None:
    """Two members share the partitions; the second leaves and the first takes them all; the first is restarted
    (closed, then a new member) and resumes at the commits. Every value read exactly once."""
    read: Counter[int] = Counter()
    first, second = make("m1"), make("m2")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (first.assignment() and second.assignment()) or len(read) < RECORDS // 3:
            assert time.monotonic() < deadline, (
                f"two members sharing the partitions (m1 {first.assignment()}, m2 {second.assignment()}, "
                f"{len(read)} values read)"
            )
            read.update(first.poll() + second.poll())
        assert first.assignment() | second.assignment() == set(range(PARTITIONS))
        assert not first.assignment() & second.assignment()
    finally:
        read.update(second.close())
    deadline = time.monotonic() + DEADLINE_S
    while first.assignment() != set(range(PARTITIONS)) or len(read) < 2 * RECORDS // 3:
        assert time.monotonic() < deadline, f"the remaining member taking every partition ({first.assignment()})"
        read.update(first.poll())
    read.update(first.close())
    restarted = make("m3")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(read) < RECORDS:
            assert time.monotonic() < deadline, f"the restarted member reading the rest ({len(read)} of {RECORDS})"
            read.update(restarted.poll())
        for _ in range(3):  # nothing more arrives: the restart did not go back before the commits
            read.update(restarted.poll())
    finally:
        read.update(restarted.close())
    assert sorted(read) == list(range(RECORDS)), "every record read"
    assert [v for v, n in read.items() if n > 1] == [], "no record read twice"


# -- confluent-kafka ------------------------------------------------------------------------------------------------


class ConfluentMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
            }
        )
        self.consumer.subscribe([topic])

    def poll(self) -> list[int]:
        messages = self.consumer.consume(num_messages=50, timeout=0.2)
        values = []
        for m in messages:
            if m.error() is None:
                values.append(int(m.value()))
            else:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
        if values:
            self.consumer.commit(asynchronous=False)
        return values

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> list[int]:
        self.consumer.close()
        return []


def test_confluent_group_shares_takes_over_and_resumes(cluster: LocalCluster, bootstrap: str) -> None:
    _topic_with_records(cluster, bootstrap, "grp-ck")
    _scenario(lambda name: ConfluentMember(bootstrap, "g-ck", "grp-ck", name))
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-ck"})
    try:
        committed = probe.committed([CkTopicPartition("grp-ck", p) for p in range(PARTITIONS)], timeout=30)
    finally:
        probe.close()
    assert [tp.offset for tp in committed] == [RECORDS // PARTITIONS] * PARTITIONS

    # The coordinator's events for requests that came over the listener, as for NATS ones (the audit reads them).
    joined = wait_for(lambda: group_events(cluster, "MemberJoined", "g-ck"), 30, "MemberJoined events")
    assert {e["member_id"].split("-")[0] for e in joined} == {"m1", "m2", "m3"}
    left = wait_for(lambda: group_events(cluster, "MemberLeft", "g-ck"), 30, "MemberLeft events")
    assert {e["reason"] for e in left} == {"left"}
    commits = wait_for(lambda: group_events(cluster, "OffsetsCommitted", "g-ck"), 30, "OffsetsCommitted events")
    final = {}
    for commit in commits:
        final.update(zip(commit["partitions"], commit["offsets"], strict=True))
    assert final == dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)
    synced = wait_for(lambda: group_events(cluster, "GroupAssignmentSynced", "g-ck"), 30, "GroupAssignmentSynced")
    assert any(sorted(e["partitions"]) == list(range(PARTITIONS)) and len(set(e["members"])) == 2 for e in synced)


def group_events(cluster: LocalCluster, kind: str, group: str) -> list[dict[str, Any]]:
    result = hightide(cluster.data_dir, "events", "tail", "--type", kind, "--format", "json")
    assert result.returncode == 0, result.stderr
    found = [json.loads(line)["event"] for line in result.stdout.splitlines() if line.strip()]
    return [e for e in found if e.get("group_id") == group]


def test_confluent_admin_lists_describes_and_deletes_groups(cluster: LocalCluster, bootstrap: str) -> None:
    _topic_with_records(cluster, bootstrap, "grp-admin")
    member = ConfluentMember(bootstrap, "g-admin", "grp-admin", "admin-member")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + DEADLINE_S
        while member.assignment() != set(range(PARTITIONS)):
            assert time.monotonic() < deadline, "the member assigned every partition"
            member.poll()
        listed = admin.list_consumer_groups().result(timeout=30)
        assert "g-admin" in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups(["g-admin"])["g-admin"].result(timeout=30)
        assert described.state.name == "STABLE"
        assert [m.client_id for m in described.members] == ["admin-member"]
        owned = {tp.partition for tp in described.members[0].assignment.topic_partitions}
        assert owned == set(range(PARTITIONS))
        nats_view = hightide(cluster.data_dir, "group", "describe", "g-admin", timeout=60)
        assert nats_view.returncode == 0, nats_view.stderr
        assert "admin-member" in nats_view.stdout
        refused = admin.delete_consumer_groups(["g-admin"])["g-admin"]
        with pytest.raises(Exception) as not_empty:
            refused.result(timeout=30)
        assert not_empty.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()
    assert admin.delete_consumer_groups(["g-admin"])["g-admin"].result(timeout=30) is None
    wait_for(
        lambda: "g-admin" not in {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid},
        30,
        "the deleted group gone from the list",
    )


# -- kafka-python ---------------------------------------------------------------------------------------------------


class KafkaPythonMember(Member):
    """A KafkaConsumer polled in a loop on its own thread, as a kafka-python application runs one.

    Driving two kafka-python 3.0 consumers from one thread in turn livelocks the group: `join_group_async` leaves a
    JoinGroup/SyncGroup task in flight when a poll's timeout ends, and at the next poll replaces a task that has
    finished meanwhile with a new JoinGroup instead of taking its assignment. The leader's join finishes while the
    other consumer is being polled, so the leader rejoined every generation and never took its partitions (seen
    with 3.0.12; kafka-python's main branch has the same code). Polling without pause leaves that window only
    between two polls. The consumer is touched by its thread alone; `poll` answers what the thread has read and
    committed since the last call."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._values: list[int] = []
        self._assigned: set[int] = set()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        self._thread = threading.Thread(target=self._run, name=f"kafka-python-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batches = self.consumer.poll(timeout_ms=200, max_records=50)
                values = [int(r.value) for records in batches.values() for r in records]
                if values:
                    self.consumer.commit()
                assigned = {tp.partition for tp in self.consumer.assignment()}
                with self._changed:
                    self._values += values
                    self._assigned = assigned
                    self._changed.notify_all()
        except BaseException as error:  # reported to the scenario by its next call
            with self._changed:
                self._error = error
                self._changed.notify_all()
        finally:
            self.consumer.close(autocommit=False)

    def _take(self) -> list[int]:
        if self._error is not None:
            raise AssertionError(f"{self.name}'s poll loop failed") from self._error
        values, self._values = self._values, []
        return values

    def poll(self) -> list[int]:
        """Wait up to a poll's timeout for values (or a failure), as `KafkaConsumer.poll` would."""
        with self._changed:
            self._changed.wait_for(lambda: self._values or self._error is not None, timeout=0.2)
            return self._take()

    def assignment(self) -> set[int]:
        with self._lock:
            return set(self._assigned)

    def close(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), f"{self.name}'s poll loop did not stop"
        with self._changed:
            return self._take()


def test_kafka_python_group_shares_takes_over_and_resumes(cluster: LocalCluster, bootstrap: str) -> None:
    _topic_with_records(cluster, bootstrap, "grp-kp")
    _scenario(lambda name: KafkaPythonMember(bootstrap, "g-kp", "grp-kp", name))


# -- aiokafka -------------------------------------------------------------------------------------------------------


class AioMember(Member):
    """An AIOKafkaConsumer driven from this thread through one event loop shared by the scenario's members."""

    def __init__(self, loop: asyncio.AbstractEventLoop, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name, self.loop = name, loop

        async def start() -> Any:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id=name,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=10_000,
                heartbeat_interval_ms=500,
            )
            await consumer.start()
            return consumer

        self.consumer = loop.run_until_complete(start())

    def poll(self) -> list[int]:
        async def batch() -> list[int]:
            batches = await self.consumer.getmany(timeout_ms=200, max_records=50)
            values = [int(r.value) for records in batches.values() for r in records]
            if values:
                await self.consumer.commit()
            return values

        # The other member's tasks (heartbeats, rejoins) run while this one waits.
        return self.loop.run_until_complete(batch())

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> list[int]:
        self.loop.run_until_complete(self.consumer.stop())
        return []


def test_aiokafka_group_shares_takes_over_and_resumes(cluster: LocalCluster, bootstrap: str) -> None:
    _topic_with_records(cluster, bootstrap, "grp-aio")
    loop = asyncio.new_event_loop()
    try:
        _scenario(lambda name: AioMember(loop, bootstrap, "g-aio", "grp-aio", name))
    finally:
        loop.close()


def test_the_groups_are_visible_over_nats(cluster: LocalCluster) -> None:
    """The groups Kafka clients made (now empty, with their offsets) are the coordinator's, as `group list` shows."""
    listed = hightide(cluster.data_dir, "group", "list")
    assert listed.returncode == 0, listed.stderr
    assert {"g-ck", "g-kp", "g-aio"} <= set(listed.stdout.split())


# -- which broker coordinates, hand-built requests ------------------------------------------------------------------


def _listeners(cluster: LocalCluster) -> dict[int, str]:
    state = json.loads(Path(cluster.state_file).read_text())
    return {int(b): address for b, address in state["kafka_listeners"].items()}


def _coordinators(address: str, groups: list[str]) -> dict[str, tuple[int, str, int]]:
    """FindCoordinator v4 (batched keys): group -> (error, host:port, node id)."""
    answer = kafka_wire.call(address, kafka.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=tuple(groups))
    return {c.key: (int(c.error_code), f"{c.host}:{c.port}", int(c.node_id)) for c in answer.coordinators}


def test_the_coordinator_is_the_offsets_partition_leader_and_others_answer_not_coordinator(
    cluster: LocalCluster, bootstrap: str
) -> None:
    listeners = _listeners(cluster)
    groups = [f"g-wire-{i}" for i in range(12)]
    found = wait_for(
        lambda: (c := _coordinators(listeners[1], groups)) and all(e == 0 for e, _, _ in c.values()) and c,
        60,
        "every key's coordinator found",
    )
    assert {address for _, address, _ in found.values()} <= set(listeners.values())
    assert all(listeners[node] == address for _, address, node in found.values())
    # The same answer from every broker, and from v0-v3 (one key each).
    assert _coordinators(listeners[2], groups) == found
    for version in range(4):
        one = kafka_wire.call(listeners[3], kafka.FIND_COORDINATOR, version, key=groups[0], key_type=0)
        assert (int(one.error_code), int(one.node_id)) == (0, found[groups[0]][2])

    coordinator = max(set(listeners), key=lambda b: sum(1 for _, _, n in found.values() if n == b))
    group = next(g for g in groups if found[g][2] == coordinator)
    other = next(b for b in listeners if b != coordinator)
    heartbeat = {"group_id": group, "generation_id": 1, "member_id": "m", "group_instance_id": None}
    elsewhere = kafka_wire.call(listeners[other], kafka.HEARTBEAT, 4, **heartbeat)
    assert int(elsewhere.error_code) == 16  # NOT_COORDINATOR
    at_home = kafka_wire.call(listeners[coordinator], kafka.HEARTBEAT, 4, **heartbeat)
    assert int(at_home.error_code) not in (0, 16)  # the coordinator's own answer: no such member

    # OffsetCommit v8 outside group management, then OffsetFetch v8 batching two groups of the same coordinator.
    same = [g for g in groups if found[g][2] == coordinator][:2]
    assert len(same) == 2  # twelve groups, three brokers: one broker coordinates four or more of them
    topic_schema = kafka_wire.nested(kafka.OFFSET_COMMIT, 8, "OffsetCommitRequestTopic")
    part_schema = kafka_wire.nested(kafka.OFFSET_COMMIT, 8, "OffsetCommitRequestPartition")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic("grp-wire", 2, 3)])["grp-wire"].result(timeout=30) is None
    for i, g in enumerate(same):
        partitions = tuple(
            kafka.make(part_schema, partition_index=p, committed_offset=10 * (i + 1) + p, committed_metadata="")
            for p in range(2)
        )
        committed = kafka_wire.call(
            listeners[coordinator],
            kafka.OFFSET_COMMIT,
            8,
            group_id=g,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(kafka.make(topic_schema, name="grp-wire", partitions=partitions),),
        )
        assert [int(p.error_code) for t in committed.topics for p in t.partitions] == [0, 0]
    group_schema = kafka_wire.nested(kafka.OFFSET_FETCH, 8, "OffsetFetchRequestGroup")
    fetched = kafka_wire.call(
        listeners[coordinator],
        kafka.OFFSET_FETCH,
        8,
        groups=tuple(kafka.make(group_schema, group_id=g, topics=None) for g in same),
        require_stable=False,
    )
    offsets = {
        (g.group_id, p.partition_index): int(p.committed_offset)
        for g in fetched.groups
        for t in g.topics
        for p in t.partitions
    }
    assert all(int(g.error_code) == 0 for g in fetched.groups)
    assert offsets == {(same[0], 0): 10, (same[0], 1): 11, (same[1], 0): 20, (same[1], 1): 21}


def test_join_group_before_v4_adds_the_new_member_at_once(cluster: LocalCluster) -> None:
    """JoinGroup v0-v3 predate KIP-394: a new member is not told MEMBER_ID_REQUIRED but joins with the id it is
    given (the listener rejoins for it); LeaveGroup v0 names one member."""
    listeners = _listeners(cluster)
    group = "g-join-v0"
    found = wait_for(
        lambda: (c := _coordinators(listeners[1], [group])) and c[group][0] == 0 and c, 60, "the coordinator"
    )
    coordinator = listeners[found[group][2]]
    protocol = kafka.make(
        kafka_wire.nested(kafka.JOIN_GROUP, 0, "JoinGroupRequestProtocol"), name="range", metadata=b""
    )
    joined = kafka_wire.call(
        coordinator,
        kafka.JOIN_GROUP,
        0,
        group_id=group,
        session_timeout=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=(protocol,),
    )
    assert int(joined.error_code) == 0
    assert joined.member_id.startswith("hand-")
    assert (joined.leader, int(joined.generation_id), joined.protocol_name) == (joined.member_id, 1, "range")
    assert [m.member_id for m in joined.members] == [joined.member_id]
    left = kafka_wire.call(coordinator, kafka.LEAVE_GROUP, 0, group_id=group, member_id=joined.member_id)
    assert int(left.error_code) == 0


def test_commits_for_partitions_the_cluster_does_not_have_are_unknown_topic_or_partition(bootstrap: str) -> None:
    """KafkaApis checks its metadata before the coordinator: a commit for a topic that does not exist, one whose
    name no topic can have, or a partition past the topic's count, is UNKNOWN_TOPIC_OR_PARTITION and commits
    nothing; the partitions that do exist in the same request are committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic("ck-commit-known", 1, 3)])["ck-commit-known"].result(timeout=30) is None
    wait_for(lambda: "ck-commit-known" in admin.list_topics(timeout=15).topics, 30, "the topic in the metadata")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-commit-unknown", "enable.auto.commit": False})
    try:
        for topic, partition in (("ck-no-such-topic", 0), ("no spaces!", 0), ("ck-commit-known", 5)):
            with pytest.raises(KafkaException) as refused:
                consumer.commit(offsets=[CkTopicPartition(topic, partition, 5)], asynchronous=False)
            assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, (topic, refused.value)
        mixed = [CkTopicPartition("ck-commit-known", 0, 7), CkTopicPartition("ck-no-such-topic", 0, 7)]
        with pytest.raises(KafkaException):
            consumer.commit(offsets=mixed, asynchronous=False)
        committed = consumer.committed([*mixed, CkTopicPartition("ck-commit-known", 5)], timeout=30)
        assert [(tp.topic, tp.partition, tp.offset) for tp in committed] == [
            ("ck-commit-known", 0, 7),
            ("ck-no-such-topic", 0, -1001),  # librdkafka's OFFSET_INVALID: nothing committed
            ("ck-commit-known", 5, -1001),
        ]
    finally:
        consumer.close()
