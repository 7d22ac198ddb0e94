"""A request whose NATS connection dies ends at once as NETWORK_EXCEPTION, as Kafka's client fails the requests of
a closed connection (issue 14: clustered NATS).

Why it matters: on a NATS cluster a client's node may be killed while a produce request is out. The request, or
its answer, is lost with that connection; nats-py reconnects to another node but would leave the request waiting
until request.timeout.ms (30 s). Meanwhile later batches go through and push the lost one's sequence out of the
leader's five-batch deduplication window, so its retry 30 s later is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) and
the records fail: seen in `tests/e2e/test_nats_cluster.py` before this rule. Ended at once, the retry comes while
the leader still remembers the batch.

Method: three real nats-server processes routed as one cluster. A silent "broker 1" on one node takes the produce
request and never answers; the client is on another node, which is killed with -9. The request must end as
NETWORK_EXCEPTION well before its 60 s timeout.
"""

from __future__ import annotations

import asyncio
import time

import nats
import nats.aio.client
import nats.aio.msg
import nats.errors
import pytest

from hightide.client.bench_nats import LocalNatsCluster
from hightide.client.connection import ClusterConnection, Leadership
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi, broker_api
from hightide.runtime.rpc import RequestFailed

CLUSTER = "nodeloss"
TOPIC = "orders"
REQUEST_TIMEOUT_S = 60.0
ENDS_WITHIN_S = 30.0


def metadata() -> wire.MetadataResponse:
    partition = wire.PartitionMetadata(
        partition=0, leader=1, leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,)
    )
    return wire.MetadataResponse(
        brokers=(wire.BrokerMetadata(broker_id=1, broker_epoch=10, fenced=False, in_controlled_shutdown=False),),
        topics=(wire.TopicMetadata(name=TOPIC, topic_id="id-1", partitions=(partition,)),),
        metadata_offset=1,
    )


async def routed(urls: list[str]) -> None:
    """Until every server lists all three client URLs (the routes are up), with a deadline."""
    deadline = time.monotonic() + 30
    for url in urls:
        while True:
            nc = await nats.connect(url, allow_reconnect=False)
            listed = len(set(nc._server_info.get("connect_urls") or ()))
            await nc.close()
            if listed == len(urls):
                break
            assert time.monotonic() < deadline, f"{url} did not route to every server"
            await asyncio.sleep(0.1)  # polling the routes, bounded by the deadline


async def interest_reached(nc: nats.aio.client.Client, subject: str) -> None:
    """Until a request from the client's node to `subject` is answered, with a deadline.

    A subscription reaches the other nodes over the routes some time after its own node has it; a request
    published before then has no interest at the client's node and is dropped without a word. Both of the silent
    broker's subscriptions travel the same route in order, so once the later one answers, the earlier is known.
    """
    deadline = time.monotonic() + 30
    while True:
        try:
            await nc.request(subject, b"ping", timeout=0.5)
            return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            assert time.monotonic() < deadline, f"{subject}: the interest never reached the client's node"


@pytest.mark.slow
def test_a_request_whose_nats_node_dies_ends_as_network_exception_not_at_its_timeout() -> None:
    asyncio.run(scenario())


async def scenario() -> None:
    async with LocalNatsCluster(3, jetstream=False) as cluster:
        await routed(cluster.urls)
        conn = await ClusterConnection.open(",".join(cluster.urls), CLUSTER)
        assert conn.nc.connected_url is not None
        client_node = [u.endswith(f":{conn.nc.connected_url.port}") for u in cluster.urls].index(True)
        broker_url = cluster.urls[(client_node + 1) % 3]
        silent = await nats.connect(broker_url)
        taken = asyncio.Event()

        async def never_answer(_msg: object) -> None:
            taken.set()

        async def pong(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"pong")

        await silent.subscribe(broker_api(CLUSTER, 1, BrokerApi.PRODUCE), cb=never_answer)
        await silent.subscribe(f"{CLUSTER}.test.interest", cb=pong)
        await silent.flush()
        await interest_reached(conn.nc, f"{CLUSTER}.test.interest")
        conn.update_metadata(metadata())
        data = wire.ProducePartitionData(topic=TOPIC, partition=0, records=b"batch")
        body = wire.ProduceRequest(acks=-1, timeout_ms=30_000, partitions=(data,))
        try:
            request = asyncio.ensure_future(
                conn.broker_watched(
                    (Leadership(TOPIC, 0, leader=1, leader_epoch=0, broker_epoch=10),),
                    BrokerApi.PRODUCE,
                    body,
                    wire.ProduceResponse,
                    timeout_s=REQUEST_TIMEOUT_S,
                    watch_after_s=0.1,
                    watch_every_s=0.1,
                )
            )
            await asyncio.wait_for(taken.wait(), 30)  # the request reached the broker's node
            cluster._processes[client_node].kill()  # kill -9 of the client's NATS node
            started = time.monotonic()
            with pytest.raises(RequestFailed) as failed:
                await asyncio.wait_for(request, ENDS_WITHIN_S)
            assert failed.value.error_code is ErrorCode.NETWORK_EXCEPTION, failed.value
            print(f"ended {time.monotonic() - started:.2f} s after the kill")
        finally:
            await silent.close()
            await conn.nc.close()
