"""Topic rules: the checks and placement of topic creation, and what a topic's configs mean for its partitions.

Room: libs/core (rules, pure). Functions of a metadata image and the controller's config: Kafka's topic name rules
(Topic.validate, the '.'/'_' collision), createTopics' and createPartitions' checks in Kafka's order and their
replica placement (AdminUtils over the active brokers, randomness injected as `choose`), the effective min ISR and
unclean election setting of a topic, and the auto rebalance's choice of preferred elections.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from hightide.core.controller_config import ControllerConfig
from hightide.core.controller_results import CreateTopicReply, Reply
from hightide.core.metadata_image import MetadataImage, PartitionRegistration, TopicImage, TopicPartition
from hightide.core.placement import Choose, InvalidReplicaAssignment, assign_replicas_to_brokers
from hightide.core.topic_configs import (
    InvalidTopicConfig,
    min_insync_replicas,
    unclean_leader_election_enable,
    validate,
)
from hightide.protocol import wire
from hightide.protocol.errors import ErrorCode

RECORDS_PER_REQUEST_MAX: Final = 10_000
"""Kafka's MAX_RECORDS_PER_USER_OP: the most records one admin request may produce."""
TOPIC_NAME_LENGTH_MAX: Final = 249

_LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


def effective_min_isr(topic: TopicImage, config: ControllerConfig) -> int:
    """Kafka's getTopicEffectiveMinIsr: the topic's min.insync.replicas (or the default), at most its RF."""
    configured = min_insync_replicas(topic.configs, config.min_insync_replicas)
    replication_factor = len(topic.partitions[0].replicas) if topic.partitions else configured
    return min(configured, replication_factor)


def unclean_leader_election_enabled(topic: TopicImage, config: ControllerConfig) -> bool:
    return unclean_leader_election_enable(topic.configs, config.unclean_leader_election_enable)


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate: why a topic name is illegal, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} characters, topic name: {name}"
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return f"Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def no_such_topic(name: str) -> str:
    """The message of UNKNOWN_TOPIC_OR_PARTITION for a topic the controller does not know (or a name no topic can
    have)."""
    return f"No such topic as {name}"


DUPLICATE_TOPIC_NAME: Final = "Duplicate topic name."


def refusals_before_the_controller(names: Sequence[str], *, creating: bool) -> dict[str, tuple[ErrorCode, str]]:
    """ControllerApis' answers to a CreateTopics (`creating`), DeleteTopics or CreatePartitions before the
    controller sees it, by name, in the order first named: a name given more than once is INVALID_REQUEST
    "Duplicate topic name." (once, and none of its entries is acted on); a name the internal requests cannot carry
    (`wire.carries_topic_name`: outside Kafka's characters or length) names no topic: INVALID_TOPIC_EXCEPTION with
    Topic.validate's reason when creating, else UNKNOWN_TOPIC_OR_PARTITION. Every other name goes on."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    refused: dict[str, tuple[ErrorCode, str]] = {}
    for name, count in counts.items():
        if count > 1:
            refused[name] = (ErrorCode.INVALID_REQUEST, DUPLICATE_TOPIC_NAME)
        elif not wire.carries_topic_name(name):
            if creating:
                refused[name] = (ErrorCode.INVALID_TOPIC_EXCEPTION, topic_name_error(name) or "illegal topic name")
            else:
                refused[name] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, no_such_topic(name))
    return refused


def colliding_topic(image: MetadataImage, name: str) -> str | None:
    """Kafka refuses a name that equals an existing one once '.' is read as '_' (metric names would clash)."""
    if "." not in name and "_" not in name:
        return None
    unified = name.replace(".", "_")
    colliding = sorted(n for n in image.topic_ids if ("." in n or "_" in n) and n.replace(".", "_") == unified)
    return colliding[0] if colliding else None


def preferred_elections_due(image: MetadataImage, percentage: int) -> tuple[TopicPartition, ...]:
    """The auto rebalance check (the ZooKeeper controller's checkAndTriggerAutoLeaderRebalance): for each broker
    B, of the partitions whose preferred replica is B, the share not led by B; when it is strictly above
    `percentage`, those of them whose B is active and in the ISR are due a preferred election.

    With 10 partitions preferring B, 1 led elsewhere (10%) is not above 10%, 2 (20%) are.
    """
    by_preferred: dict[int, list[tuple[TopicPartition, PartitionRegistration]]] = {}
    for tp, partition in image.all_partitions():
        by_preferred.setdefault(partition.preferred_leader, []).append((tp, partition))
    due: list[TopicPartition] = []
    for broker_id in sorted(by_preferred):
        preferred_here = by_preferred[broker_id]
        elsewhere = [(tp, p) for tp, p in preferred_here if p.leader != broker_id]
        if len(elsewhere) * 100 > percentage * len(preferred_here):
            due.extend(tp for tp, p in elsewhere if image.is_active(broker_id) and broker_id in p.isr)
    return tuple(sorted(due))


# -- new topics and partitions --------------------------------------------------------------------------------


def check_new_topic(
    image: MetadataImage, name: str, topic_id: str, configs: Mapping[str, str | None]
) -> CreateTopicReply | None:
    """The name and config checks of createTopics, in Kafka's order of precedence."""
    error: CreateTopicReply | None = None
    illegal = topic_name_error(name)
    if illegal is not None:
        error = CreateTopicReply(ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)
    colliding = colliding_topic(image, name)
    if colliding is not None:
        message = f"Topic '{name}' collides with existing topic: {colliding}"
        error = CreateTopicReply(ErrorCode.INVALID_TOPIC_EXCEPTION, message)
    if name in image.topic_ids:
        error = CreateTopicReply(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if error is not None:
        return error
    nulls = [key for key, value in configs.items() if value is None]
    if nulls:
        message = f"Null value not supported for topic configs: {','.join(nulls)}"
        return CreateTopicReply(ErrorCode.INVALID_CONFIG, message)
    try:
        validate({key: value for key, value in configs.items() if value is not None})
    except InvalidTopicConfig as invalid:
        return CreateTopicReply(invalid.error_code, invalid.message)
    if not topic_id or topic_id in image.topics:
        return CreateTopicReply(ErrorCode.INVALID_REQUEST, f"Topic id '{topic_id}' is empty or in use.")
    return None


def replicas_for_new_topic(
    image: MetadataImage,
    config: ControllerConfig,
    choose: Choose,
    partitions: int,
    replication_factor: int,
    assignments: Sequence[Sequence[int]] | None,
) -> list[tuple[int, ...]] | CreateTopicReply:
    if assignments:
        if replication_factor != -1:
            message = "A manual partition assignment was specified, but replication factor was not set to -1."
            return CreateTopicReply(ErrorCode.INVALID_REQUEST, message)
        if partitions != -1:
            message = "A manual partition assignment was specified, but numPartitions was not set to -1."
            return CreateTopicReply(ErrorCode.INVALID_REQUEST, message)
        expected_rf = len(assignments[0])
        for partition_id, replicas in enumerate(assignments):
            problem = manual_assignment_error(image, replicas, expected_rf if partition_id else None)
            if problem is None and not any(image.is_active(r) for r in replicas):
                problem = (
                    f"All brokers specified in the manual partition assignment for partition {partition_id} "
                    "are fenced or in controlled shutdown."
                )
            if problem is not None:
                return CreateTopicReply(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        return [tuple(replicas) for replicas in assignments]
    if replication_factor < -1 or replication_factor == 0:
        message = "Replication factor must be larger than 0, or -1 to use the default value."
        return CreateTopicReply(ErrorCode.INVALID_REPLICATION_FACTOR, message)
    if partitions < -1 or partitions == 0:
        message = "Number of partitions was set to an invalid non-positive value."
        return CreateTopicReply(ErrorCode.INVALID_PARTITIONS, message)
    count = config.num_partitions if partitions == -1 else partitions
    factor = config.default_replication_factor if replication_factor == -1 else replication_factor
    if count > RECORDS_PER_REQUEST_MAX:
        message = f"Creating {count} partitions exceeds {RECORDS_PER_REQUEST_MAX} records."
        return CreateTopicReply(ErrorCode.INVALID_PARTITIONS, message)
    placed = place(image, choose, count, factor, fixed_start_index=-1, start_partition_id=0)
    if isinstance(placed, Reply):
        return CreateTopicReply(placed.error, placed.message)
    return placed


def replicas_for_new_partitions(
    image: MetadataImage,
    choose: Choose,
    topic: TopicImage,
    additional: int,
    assignments: Sequence[Sequence[int]] | None,
) -> list[tuple[int, ...]] | Reply:
    replication_factor = len(topic.partitions[0].replicas)
    current = len(topic.partitions)
    if assignments is not None:
        for offset, replicas in enumerate(assignments):
            problem = manual_assignment_error(image, replicas, replication_factor)
            if problem is None and not any(image.is_active(r) for r in replicas):
                problem = (
                    f"All brokers specified in the manual partition assignment for partition "
                    f"{current + offset} are fenced or in controlled shutdown."
                )
            if problem is not None:
                return Reply(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        return [tuple(replicas) for replicas in assignments]
    # AdminZkClient.createPartitions: continue the leaders' rotation from partition 0's leader.
    brokers = image.active_brokers()
    first_leader = topic.partitions[0].preferred_leader
    start_index = next((i for i, b in enumerate(brokers) if b >= first_leader), 0)
    return place(
        image, choose, additional, replication_factor, fixed_start_index=start_index, start_partition_id=current
    )


def place(
    image: MetadataImage,
    choose: Choose,
    count: int,
    replication_factor: int,
    *,
    fixed_start_index: int,
    start_partition_id: int,
) -> list[tuple[int, ...]] | Reply:
    """Kafka's AdminUtils placement over the active brokers, by id."""
    brokers = image.active_brokers()
    prefix = f"Unable to replicate the partition {replication_factor} time(s): "
    if not brokers and image.brokers:
        message = prefix + "All brokers are currently fenced or in controlled shutdown."
        return Reply(ErrorCode.INVALID_REPLICATION_FACTOR, message)
    try:
        placed = assign_replicas_to_brokers(
            brokers, count, replication_factor, fixed_start_index, start_partition_id, choose=choose
        )
    except InvalidReplicaAssignment as error:
        return Reply(error.error_code, prefix + str(error.args[0]))
    return [tuple(placed[p]) for p in sorted(placed)]


def manual_assignment_error(
    image: MetadataImage, replicas: Sequence[int], replication_factor: int | None
) -> str | None:
    """Kafka's validateManualPartitionAssignment."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if image.broker(broker_id) is None:
            return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {broker_id} more than once."
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        return (
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {replication_factor} replica(s)."
        )
    return None
