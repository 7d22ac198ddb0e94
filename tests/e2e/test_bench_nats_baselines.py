"""The NATS baselines Hightide's produce benchmark is printed beside measure what they say they measure.

Method: start real nats-server processes with `LocalNatsCluster` (a 3-server JetStream cluster; one plain server),
run each throughput baseline with tiny counts, and check behaviour, never speed: the JetStream stream really has
3 replicas (a leader and two online followers), every acked publish is in the stream, the numbers are positive,
and the servers and their directory are gone afterwards.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from hightide.client.bench_nats import (
    BaselineResult,
    LocalNatsCluster,
    jetstream_r3_throughput,
    nats_pubsub_throughput,
)


def _positive(result: BaselineResult) -> bool:
    return result.records > 0 and result.seconds > 0 and result.records_per_s > 0 and result.mb_per_s > 0


@pytest.mark.slow
def test_jetstream_r3_baseline_publishes_to_a_stream_with_three_replicas(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[BaselineResult, int, int, str | None, list[tuple[str | None, bool]]]]:
        async with LocalNatsCluster(3, jetstream=True, workdir=tmp_path) as cluster:
            assert len(cluster.urls) == 3 and all(url.startswith("nats://127.0.0.1:") for url in cluster.urls)
            small = await jetstream_r3_throughput(500, 100, window=64, cluster=cluster, stream="SMALL")
            large = await jetstream_r3_throughput(20, 16 * 1024, cluster=cluster, stream="LARGE")
            client = await nats.connect(servers=cluster.urls, allow_reconnect=False)
            try:
                seen = []
                for result, stream in ((small, "SMALL"), (large, "LARGE")):
                    info = await client.jetstream().stream_info(stream)
                    assert info.cluster is not None
                    followers = [(peer.name, bool(peer.offline)) for peer in info.cluster.replicas or []]
                    seen.append(
                        (result, info.config.num_replicas or 0, info.state.messages, info.cluster.leader, followers)
                    )
                return seen
            finally:
                await client.close()

    seen = asyncio.run(scenario())
    for (result, replicas, messages, leader, followers), size in zip(seen, (100, 16 * 1024), strict=True):
        assert replicas == 3
        assert leader in {"n0", "n1", "n2"}
        assert len(followers) == 2 and not any(offline for _, offline in followers)
        assert {name for name, _ in followers} | {leader} == {"n0", "n1", "n2"}
        assert result.records == messages == (500 if size == 100 else 20)
        assert result.record_bytes == size and _positive(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_nats_core_baseline_delivers_every_message() -> None:
    result = asyncio.run(nats_pubsub_throughput(2_000, 100))
    assert result.name == "nats core pub/sub 100 B"
    assert result.records == 2_000 and result.record_bytes == 100 and _positive(result)
