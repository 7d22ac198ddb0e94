"""The client's metadata cache never goes backwards, and says when a request's leader is gone.

Method: a ClusterConnection without a NATS connection (the cache needs none) fed MetadataResponses as brokers
would answer them, some from a broker behind the metadata log (a lower `metadata_offset`, older epochs), as a
broker that has just restarted answers; given/when/then on what the cache then holds.
"""

from __future__ import annotations

from typing import Any, cast

from nats.aio.client import Client

from hightide.client.connection import ClusterConnection, Leadership
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode

T = "orders"


def answer(
    offset: int,
    *,
    leader: int = 1,
    leader_epoch: int = 0,
    partition_epoch: int = 0,
    partitions: int = 1,
    topic_id: str = "id-1",
    unknown: bool = False,
    fenced: tuple[int, ...] = (),
    broker_epochs: dict[int, int] | None = None,
) -> wire.MetadataResponse:
    epochs = broker_epochs or {1: 10, 2: 20, 3: 30}
    brokers = tuple(
        wire.BrokerMetadata(broker_id=b, broker_epoch=e, fenced=b in fenced, in_controlled_shutdown=False)
        for b, e in sorted(epochs.items())
    )
    if unknown:
        topic = wire.TopicMetadata(name=T, error=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    else:
        topic = wire.TopicMetadata(
            name=T,
            topic_id=topic_id,
            partitions=tuple(
                wire.PartitionMetadata(
                    partition=p,
                    leader=leader,
                    leader_epoch=leader_epoch,
                    partition_epoch=partition_epoch,
                    replicas=(1, 2, 3),
                    isr=(1, 2, 3),
                )
                for p in range(partitions)
            ),
        )
    return wire.MetadataResponse(brokers=brokers, topics=(topic,), metadata_offset=offset)


def connection(*answers: wire.MetadataResponse) -> ClusterConnection:
    conn = ClusterConnection(cast(Client, cast(Any, None)), "test")
    for each in answers:
        conn.update_metadata(each)
    return conn


def leader(conn: ClusterConnection) -> tuple[int, int] | None:
    info = conn.leader_of(T, 0)
    return None if info is None else (info.leader, info.leader_epoch)


def test_an_answer_with_an_older_leader_epoch_does_not_replace_the_newer_leader() -> None:
    conn = connection(answer(50, leader=2, leader_epoch=3))
    conn.update_metadata(answer(40, leader=1, leader_epoch=2))
    assert leader(conn) == (2, 3)


def test_a_newer_leader_epoch_or_partition_epoch_replaces_the_entry() -> None:
    conn = connection(answer(50, leader=2, leader_epoch=3))
    conn.update_metadata(answer(51, leader=2, leader_epoch=3, partition_epoch=4))
    info = conn.leader_of(T, 0)
    assert info is not None and info.partition_epoch == 4
    conn.update_metadata(answer(52, leader=3, leader_epoch=4))
    assert leader(conn) == (3, 4)


def test_a_broker_behind_the_log_calling_a_known_topic_unknown_is_not_believed() -> None:
    conn = connection(answer(50))
    conn.update_metadata(answer(40, unknown=True))
    assert leader(conn) == (1, 0)


def test_a_broker_at_least_as_far_along_calling_the_topic_unknown_drops_it() -> None:
    conn = connection(answer(50))
    conn.update_metadata(answer(50, unknown=True))
    assert conn.leader_of(T, 0) is None and T not in conn.partitions


def test_a_recreated_topic_replaces_the_old_one_whatever_its_epochs_and_a_stale_answer_does_not_bring_it_back() -> None:
    conn = connection(answer(50, leader=2, leader_epoch=7, topic_id="old"))
    conn.update_metadata(answer(60, leader=3, leader_epoch=0, topic_id="new"))
    assert leader(conn) == (3, 0)
    conn.update_metadata(answer(55, leader=2, leader_epoch=7, topic_id="old"))
    assert leader(conn) == (3, 0)


def test_partitions_added_are_kept_when_a_stale_answer_lists_fewer() -> None:
    conn = connection(answer(50, partitions=3))
    conn.update_metadata(answer(40, partitions=1))
    assert len(conn.partitions[T]) == 3


def test_a_stale_broker_table_does_not_unfence_a_broker() -> None:
    conn = connection(answer(50, fenced=(1,)))
    conn.update_metadata(answer(40))
    assert conn.brokers[1].fenced


SENT = Leadership(T, 0, leader=1, leader_epoch=0, broker_epoch=10)


def test_a_request_whose_leader_the_metadata_still_names_has_not_moved() -> None:
    assert not connection(answer(50)).leadership_moved(SENT)


def test_a_request_has_moved_once_the_metadata_names_another_leader_or_a_newer_epoch() -> None:
    assert connection(answer(50, leader=2, leader_epoch=1)).leadership_moved(SENT)
    assert connection(answer(50, leader=1, leader_epoch=1)).leadership_moved(SENT)


def test_a_request_has_moved_once_its_leader_is_fenced_or_registered_again() -> None:
    assert connection(answer(50, fenced=(1,))).leadership_moved(SENT)
    assert connection(answer(50, broker_epochs={1: 11, 2: 20, 3: 30})).leadership_moved(SENT)


def test_a_request_has_moved_once_its_topic_is_gone() -> None:
    conn = connection(answer(50))
    conn.update_metadata(answer(51, unknown=True))
    assert conn.leadership_moved(SENT)


def test_leadership_is_what_the_cache_holds_now() -> None:
    conn = connection(answer(50, leader=2, leader_epoch=3))
    assert conn.leadership(T, 0) == Leadership(T, 0, 2, 3, 20)
    assert conn.leadership(T, 1) is None
