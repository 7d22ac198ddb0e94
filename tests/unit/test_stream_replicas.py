"""Stream replicas are the configured count clamped to the NATS cluster the server's connect INFO describes."""

from __future__ import annotations

import pytest

from hightide.runtime.stream_replicas import DEFAULT_STREAM_REPLICAS, clamp_replicas

STANDALONE = {"server_name": "n1", "jetstream": True}
THREE = {"cluster": "hightide", "connect_urls": ["127.0.0.1:4222", "127.0.0.1:4223", "127.0.0.1:4224"]}


def test_a_standalone_server_gets_one_replica_whatever_is_asked() -> None:
    # A standalone JetStream refuses R>1 (error 10074): the default of 3 must still run on one node.
    assert clamp_replicas(DEFAULT_STREAM_REPLICAS, STANDALONE) == 1
    assert clamp_replicas(5, {}) == 1


def test_a_three_node_cluster_gets_the_configured_count_up_to_three() -> None:
    assert clamp_replicas(3, THREE) == 3
    assert clamp_replicas(1, THREE) == 1
    assert clamp_replicas(5, THREE) == 3  # R5 on three nodes: "no suitable peers for placement" (10005)


def test_a_cluster_that_advertises_no_urls_gets_what_is_asked() -> None:
    assert clamp_replicas(3, {"cluster": "hightide"}) == 3
    assert clamp_replicas(3, {"cluster": "hightide", "connect_urls": ["a:1", "a:1"]}) == 1  # one server, listed twice


@pytest.mark.parametrize("requested", [0, -1, 6])
def test_a_count_jetstream_cannot_have_is_refused(requested: int) -> None:
    with pytest.raises(ValueError, match="stream replicas must be 1 to 5"):
        clamp_replicas(requested, THREE)
