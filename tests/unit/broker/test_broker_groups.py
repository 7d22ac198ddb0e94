"""The broker's group wiring: what the coordinator is told of leadership, how its records become a produce, how
FindCoordinator is answered.

Method: the pure helpers of hightide.broker.groups on hand-made inputs (a coordinator, a metadata image), and the
produce they build decoded back with the record batch codec.
"""

from __future__ import annotations

from hightide.broker.groups import (
    OFFSETS_TOPIC,
    GroupSettings,
    append_outcome,
    append_request,
    find_coordinator,
    leadership_changes,
)
from hightide.core.clock import MonoMs, Now, WallMs
from hightide.core.group_coordinator import (
    AppendGroupRecords,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupRecord,
    LoadGroupPartition,
    group_partition,
)
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicImage
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import decode_batches

NOW = Now(MonoMs(1_000), WallMs(1_700_000_000_000))


def test_leadership_changes_resign_first_then_load_new_leaderships() -> None:
    coordinator = GroupCoordinator(1, GroupCoordinatorConfig(offsets_topic_num_partitions=3))
    coordinator.on_become_leader(0, 4, NOW)
    effects = leadership_changes(coordinator, {0: 4}, {0: 5, 2: 1}, NOW)
    loads = [e for e in effects if isinstance(e, LoadGroupPartition)]
    assert [(e.partition, e.leader_epoch) for e in loads] == [(0, 5), (2, 1)]
    assert leadership_changes(coordinator, {0: 5, 2: 1}, {2: 1}, NOW) == []  # nothing was loaded on 0 yet


def test_a_partition_beyond_the_configured_count_is_not_coordinated() -> None:
    coordinator = GroupCoordinator(1, GroupCoordinatorConfig(offsets_topic_num_partitions=3))
    assert leadership_changes(coordinator, {}, {7: 0}, NOW) == []


def test_an_append_is_one_keyed_batch_with_tombstones_as_null_values() -> None:
    append = AppendGroupRecords(3, 2, 7, (GroupRecord(b"k1", b"v1"), GroupRecord(b"k2", None)))
    request = append_request(append, NOW, timeout_ms=5_000)
    assert (request.acks, request.timeout_ms) == (-1, 5_000)
    [data] = request.partitions
    assert (data.topic, data.partition) == (OFFSETS_TOPIC, 2)
    [(_, records)] = decode_batches(data.records)
    assert [(r.key, r.value, r.timestamp) for r in records] == [(b"k1", b"v1", NOW.wall_ms), (b"k2", None, NOW.wall_ms)]


def test_an_appends_outcome_is_the_first_error() -> None:
    ok = wire.ProduceResponse(partitions=(wire.ProducePartitionResponse(topic=OFFSETS_TOPIC, partition=0, error=0),))
    refused = wire.ProduceResponse(
        partitions=(
            wire.ProducePartitionResponse(topic=OFFSETS_TOPIC, partition=0, error=int(ErrorCode.NOT_ENOUGH_REPLICAS)),
        )
    )
    assert append_outcome(ok) is ErrorCode.NONE
    assert append_outcome(refused) is ErrorCode.NOT_ENOUGH_REPLICAS
    assert append_outcome(wire.ProduceResponse(error=int(ErrorCode.REQUEST_TIMED_OUT))) is ErrorCode.REQUEST_TIMED_OUT


def image_with_offsets_topic(leaders: list[int]) -> MetadataImage:
    partitions = tuple(PartitionRegistration((1, 2, 3), (1, 2, 3), (), (), leader, 0, 0) for leader in leaders)
    return MetadataImage(topics={"id": TopicImage(OFFSETS_TOPIC, "id", partitions)}, topic_ids={OFFSETS_TOPIC: "id"})


def test_find_coordinator_asks_for_the_topic_when_it_does_not_exist() -> None:
    answer, create = find_coordinator(MetadataImage(), wire.FindCoordinatorRequest(key="g"), GroupSettings())
    assert create and answer.error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_find_coordinator_answers_the_leader_of_the_groups_partition() -> None:
    settings = GroupSettings(offsets_topic_num_partitions=3)
    partition = group_partition("g", 3)
    leaders = [1, 2, 3]
    answer, create = find_coordinator(image_with_offsets_topic(leaders), wire.FindCoordinatorRequest(key="g"), settings)
    assert not create
    assert (answer.error_code, answer.node_id, answer.partition) == (ErrorCode.NONE, leaders[partition], partition)


def test_find_coordinator_without_a_leader_is_coordinator_not_available() -> None:
    settings = GroupSettings(offsets_topic_num_partitions=3)
    answer, create = find_coordinator(
        image_with_offsets_topic([-1, -1, -1]), wire.FindCoordinatorRequest(key="g"), settings
    )
    assert not create and answer.error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_the_offsets_topic_is_created_compacted_with_the_configured_size() -> None:
    topic = GroupSettings(offsets_topic_num_partitions=5, offsets_topic_replication_factor=2).creatable_topic()
    assert (topic.name, topic.num_partitions, topic.replication_factor) == (OFFSETS_TOPIC, 5, 2)
    assert topic.configs == {"cleanup.policy": "compact"}
