"""Kafka's semantics at the listener that clients rely on but rarely show, over raw sockets (kio writes the
requests): Produce with acks=0 gets no answer and the connection goes on; Fetch's KIP-320 current_leader_epoch is
checked (an older epoch is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH); ListOffsets answers the
earliest and latest offsets; OffsetForLeaderEpoch answers an epoch's end offset; a consumer's Fetch parked at the
log end is answered when an acks=all Produce commits a record there, not when its wait is over.
"""

from __future__ import annotations

import datetime
import io
import select
import socket
import struct
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from hightide.client.local_cluster import LocalCluster
from hightide.protocol import kafka
from hightide.protocol.records import encode_batch
from support.cluster_cli import active_brokers, describe, wait_for

pytestmark = pytest.mark.slow

TOPIC = "raw-semantics"


def send(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: Any) -> None:
    buffer = io.BytesIO()
    header = RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="raw"
    )
    entity_writer(RequestHeader)(buffer, header)
    entity_writer(type(body))(buffer, body)
    sock.sendall(struct.pack(">i", len(buffer.getvalue())) + buffer.getvalue())


def receive(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, response body) of a flexible-version answer."""
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    data = memoryview(_exactly(sock, size))
    correlation_id = struct.unpack_from(">i", data)[0]
    body, _ = entity_reader(load_response_schema(api_key, version))(data[5:], 0)  # id, empty tag section
    return correlation_id, body


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


@pytest.fixture(scope="module")
def leader(cluster: LocalCluster, bootstrap: str) -> tuple[str, int]:
    """The topic's leader's listener and leader epoch, after three records were produced and its first leader
    restarted (so the epoch is past 0 and an older one exists)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
    finally:
        admin.close()
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, TOPIC)), 30, "a full ISR")
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
    try:
        for i in range(3):
            producer.send(TOPIC, value=b"r%d" % i).get(timeout=30)
    finally:
        producer.close()
    first = int(describe(cluster, TOPIC)[0]["Leader"])
    cluster.stop_broker(first, hard=False)
    cluster.start_broker(first)
    wait_for(lambda: sorted(active_brokers(cluster)) == [1, 2, 3], 60, "the restarted broker back")
    wait_for(lambda: all(p["Isr"].count(",") == 2 for p in describe(cluster, TOPIC)), 30, "a full ISR again")
    with socket.create_connection(_host_port(bootstrap.split(",", maxsplit=1)[0]), timeout=15) as sock:
        topics = (MetadataRequestTopic(topic_id=None, name=TOPIC),)
        body = MetadataRequest(
            topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        send(sock, kafka.METADATA, 12, 1, body)
        _, metadata = receive(sock, kafka.METADATA, 12)
    partition = metadata.topics[0].partitions[0]
    broker = next(b for b in metadata.brokers if b.node_id == partition.leader_id)
    return f"{broker.host}:{broker.port}", int(partition.leader_epoch)


def _host_port(listener: str) -> tuple[str, int]:
    host, port = listener.rsplit(":", 1)
    return host, int(port)


def fetch_error(listener: str, current_leader_epoch: int) -> int:
    body = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=0,
        topics=(
            FetchTopic(
                topic=TOPIC,
                partitions=(
                    FetchPartition(
                        partition=0,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with socket.create_connection(_host_port(listener), timeout=15) as sock:
        send(sock, kafka.FETCH, 12, 8, body)
        correlation_id, answer = receive(sock, kafka.FETCH, 12)
    assert correlation_id == 8
    return int(answer.responses[0].partitions[0].error_code)


def test_fetch_checks_the_current_leader_epoch(leader: tuple[str, int]) -> None:
    listener, epoch = leader
    assert fetch_error(listener, epoch) == 0
    assert fetch_error(listener, -1) == 0  # no epoch given: not checked (older clients)
    assert fetch_error(listener, epoch + 1) == 75  # UNKNOWN_LEADER_EPOCH
    assert epoch > 0
    assert fetch_error(listener, epoch - 1) == 74  # FENCED_LEADER_EPOCH


def test_list_offsets_earliest_and_latest(leader: tuple[str, int]) -> None:
    listener, _ = leader
    body = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            ListOffsetsTopic(
                name=TOPIC,
                partitions=(
                    ListOffsetsPartition(partition_index=0, timestamp=-2),
                    ListOffsetsPartition(partition_index=0, timestamp=-1),
                ),
            ),
        ),
    )
    with socket.create_connection(_host_port(listener), timeout=15) as sock:
        send(sock, kafka.LIST_OFFSETS, 7, 4, body)
        _, answer = receive(sock, kafka.LIST_OFFSETS, 7)
    assert [(int(p.error_code), p.offset) for p in answer.topics[0].partitions] == [(0, 0), (0, 3)]


def test_produce_with_acks_0_gets_no_answer_and_the_connection_goes_on(leader: tuple[str, int]) -> None:
    listener, _ = leader
    # An invalid batch on purpose: with acks=0 even the refusal is not answered (Kafka's behaviour).
    produce = ProduceRequest(
        transactional_id=None,
        acks=0,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=0, records=Records(b"x")),)),
        ),
    )
    with socket.create_connection(_host_port(listener), timeout=15) as sock:
        send(sock, kafka.PRODUCE, 9, 100, produce)
        send(
            sock,
            kafka.API_VERSIONS,
            3,
            101,
            load_request_schema(kafka.API_VERSIONS, 3)(client_software_name="raw", client_software_version="1"),
        )
        size = struct.unpack(">i", _exactly(sock, 4))[0]
        correlation_id = struct.unpack(">i", _exactly(sock, size)[:4])[0]
    assert correlation_id == 101  # the first answer on the connection is the ApiVersions one


def test_offsets_for_leader_epoch_answers_each_epochs_end(leader: tuple[str, int]) -> None:
    listener, epoch = leader
    body = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(
            OffsetForLeaderTopic(
                topic=TOPIC,
                partitions=(
                    OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch, leader_epoch=0),
                    OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch, leader_epoch=epoch),
                ),
            ),
        ),
    )
    with socket.create_connection(_host_port(listener), timeout=15) as sock:
        send(sock, kafka.OFFSET_FOR_LEADER_EPOCH, 4, 6, body)
        correlation_id, answer = receive(sock, kafka.OFFSET_FOR_LEADER_EPOCH, 4)
    assert correlation_id == 6
    found = [(int(p.error_code), p.leader_epoch, p.end_offset) for p in answer.topics[0].partitions]
    # Epoch 0 wrote offsets 0..2, so it ends where the next epoch began (3); the current epoch ends at the LEO.
    assert found[0] == (0, 0, 3)
    assert found[1][:2] == (0, epoch) and found[1][2] >= 3


def _latest(sock: socket.socket, correlation_id: int) -> int:
    body = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(ListOffsetsTopic(name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),),
    )
    send(sock, kafka.LIST_OFFSETS, 7, correlation_id, body)
    answered, answer = receive(sock, kafka.LIST_OFFSETS, 7)
    assert answered == correlation_id
    return int(answer.topics[0].partitions[0].offset)


def test_pipelined_produce_requests_are_appended_and_answered_in_their_order(leader: tuple[str, int]) -> None:
    """Five acks=all Produce requests sent back to back on one connection, then a ListOffsets: the answers come in
    the requests' order, each batch got the offsets right after the one before it, and the ListOffsets answer comes
    last and counts all of them (it was served after every earlier answer was written)."""
    listener, _ = leader
    with socket.create_connection(_host_port(listener), timeout=30) as sock:
        start = _latest(sock, 199)
        for i in range(5):
            batch = encode_batch([b"p%d-a" % i, b"p%d-b" % i])
            data = PartitionProduceData(index=0, records=Records(batch))
            produce = ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout=datetime.timedelta(seconds=15),
                topic_data=(TopicProduceData(name=TOPIC, partition_data=(data,)),),
            )
            send(sock, kafka.PRODUCE, 9, 200 + i, produce)
        answers = [receive(sock, kafka.PRODUCE, 9) for _ in range(5)]
        end = _latest(sock, 205)
    assert [correlation_id for correlation_id, _ in answers] == [200, 201, 202, 203, 204]
    placed = [
        (int(a.responses[0].partition_responses[0].error_code), a.responses[0].partition_responses[0].base_offset)
        for _, a in answers
    ]
    assert placed == [(0, start + 2 * i) for i in range(5)]
    assert end == start + 10


def test_a_parked_fetch_is_answered_when_the_high_watermark_passes_its_offset(leader: tuple[str, int]) -> None:
    """Kafka's DelayedFetch: a consumer's Fetch at the log end with the longest wait served (60 s) is parked, and
    answered with the new record as soon as an acks=all Produce's record is committed (the HW passes the fetch's
    offset), not when its wait is over: its answer comes within the socket's 30 s. librdkafka waits 500 ms
    (fetch.wait.max.ms), so a broker that answered only at the wait's end would add up to that to every record's
    produce-to-consume latency."""
    listener, _ = leader
    with (
        socket.create_connection(_host_port(listener), timeout=30) as parked,
        socket.create_connection(_host_port(listener), timeout=30) as producing,
    ):
        start = _latest(producing, 300)
        wait = datetime.timedelta(milliseconds=kafka.FETCH_MAX_WAIT_MS_MAX)
        partition = FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=start, partition_max_bytes=1 << 20
        )
        fetch = FetchRequest(
            max_wait=wait,
            min_bytes=1,
            topics=(FetchTopic(topic=TOPIC, partitions=(partition,)),),
            forgotten_topics_data=(),
        )
        send(parked, kafka.FETCH, 12, 301, fetch)
        assert _latest(producing, 302) == start  # the fetch's frame was sent first; nothing was appended meanwhile
        readable, _, _ = select.select([parked], [], [], 0)
        assert readable == []  # nothing to read at the log end: the fetch waits
        data = PartitionProduceData(index=0, records=Records(encode_batch([b"wakes-the-fetch"])))
        produce = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=15),
            topic_data=(TopicProduceData(name=TOPIC, partition_data=(data,)),),
        )
        send(producing, kafka.PRODUCE, 9, 303, produce)
        _, produced = receive(producing, kafka.PRODUCE, 9)
        assert int(produced.responses[0].partition_responses[0].error_code) == 0
        correlation_id, answer = receive(parked, kafka.FETCH, 12)  # socket.timeout (30 s) if it waits its 60 s
    assert correlation_id == 301
    fetched = answer.responses[0].partitions[0]
    assert (int(fetched.error_code), fetched.high_watermark) == (0, start + 1)
    assert b"wakes-the-fetch" in bytes(fetched.records)
