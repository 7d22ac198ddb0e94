"""Which brokers hold a new topic's partitions: Kafka's replica assignment, bit for bit.

Room: libs/core (rules as pure functions). Owns the partition-to-replicas map a topic gets when it is created
or grows, which must equal what Kafka's `AdminUtils.assignReplicasToBrokers` (server-common) computes for the
same brokers and start indexes, so that an operator reading Kafka's docs can predict where replicas land.
The first replica of each partition is its preferred leader.

Never draws randomness. Kafka picks the start index and the follower shift with `Random.nextInt(n)` when the
caller passes -1; here that draw is the injectable `choose` (see `assign_replicas_to_brokers`), and the
shell decides whether it is random, seeded or fixed.

Kafka 4's KRaft controller places replicas with a different, randomised placer (`StripedReplicaPlacer`);
this module is the AdminUtils algorithm that the ZooKeeper controller and Kafka's tools use, which is the one
with exact, deterministic test vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hightide.protocol.errors import ErrorCode, HightideError

Choose = Callable[[int], int]
"""`choose(n)` returns an index in [0, n); it stands in for Kafka's `rand.nextInt(n)`."""


class InvalidReplicaAssignment(HightideError):
    """A request for a replica assignment that Kafka would refuse; `error_code` says why.

    Kafka answers INVALID_PARTITIONS for a partition count below 1 and INVALID_REPLICATION_FACTOR for a
    replication factor below 1 or above the number of brokers (no brokers at all is the latter).
    """

    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


def choose_first(n: int) -> int:
    """The deterministic default for `choose`: always index 0, whatever the broker count.

    With it, `fixed_start_index=-1` places replicas exactly as `fixed_start_index=0` does, so the same call
    always gives the same map. Kafka draws at random instead so that partition 0 of successive topics does
    not always lead on the first broker; a shell that wants Kafka's spread passes `random.randrange` (or a
    seeded `random.Random(seed).randrange` in the simulator).
    """
    assert n >= 1, "there is always a broker to choose from"
    return 0


def assign_replicas_to_brokers(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    *,
    choose: Choose = choose_first,
) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: partition id -> replicas, the preferred leader first.

    Leaders go round-robin along `broker_ids` (in the order given; Kafka's callers sort them), starting at
    `start_index`; the other replicas follow the leader at a gap of `1 + (shift + j) % (n - 1)` brokers, and
    the shift grows by one each time the partition id reaches a nonzero multiple of the broker count, so that the
    partitions a broker leads have their followers spread over all the other brokers:

    | partition id                         | leader index            | j-th follower index (j from 0)           |
    |--------------------------------------|-------------------------|------------------------------------------|
    | p, from max(0, start_partition_id)   | (p + start_index) % n   | (leader + 1 + (shift + j) % (n - 1)) % n |

    `start_index` and the initial shift are both `fixed_start_index` when it is >= 0; otherwise they are two
    successive calls `choose(n)` (start index first, as Kafka draws them). `start_partition_id` is the first
    partition id to assign: Kafka's add-partitions path passes the current partition count, with the index
    of partition 0's leader as the fixed start index, so new partitions continue the leaders' rotation.

    Results equal Kafka's while its 32-bit int arithmetic does not overflow, i.e. while `fixed_start_index +
    start_partition_id + num_partitions` stays below 2**31; past that Kafka itself fails or misplaces.
    Raises InvalidReplicaAssignment (Kafka's checks and messages, in Kafka's order), and also for duplicate
    broker ids, which Kafka's callers never pass and which would put two replicas on one broker.
    """
    _check_request(len(broker_ids), num_partitions, replication_factor)
    if len(set(broker_ids)) != len(broker_ids):
        raise InvalidReplicaAssignment(
            f"Duplicate broker ids in {list(broker_ids)}.", ErrorCode.INVALID_REPLICA_ASSIGNMENT
        )
    num_brokers = len(broker_ids)
    start_index, next_replica_shift = _start_indexes(fixed_start_index, num_brokers, choose)
    assignment: dict[int, list[int]] = {}
    current_partition_id = max(0, start_partition_id)
    for _ in range(num_partitions):
        if current_partition_id > 0 and current_partition_id % num_brokers == 0:
            next_replica_shift += 1
        first_replica_index = (current_partition_id + start_index) % num_brokers
        replicas = [broker_ids[first_replica_index]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[_replica_index(first_replica_index, next_replica_shift, j, num_brokers)])
        assert len(set(replicas)) == replication_factor, "replicas of one partition are on distinct brokers"
        assignment[current_partition_id] = replicas
        current_partition_id += 1
    return assignment


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Kafka's `getRackAlternatedBrokerList`: one broker per rack in turn, racks and brokers in order.

    Racks sort as Java sorts strings (by UTF-16 code unit, which differs from Python's code-point order only
    for characters beyond the BMP); brokers sort by id within their rack; a rack that runs out is skipped.
    For racks {rack1: 0, 1, 2; rack2: 3, 4, 5; rack3: 6, 7, 8} the list is 0, 3, 6, 1, 4, 7, 2, 5, 8.
    """
    brokers_by_rack: dict[str, list[int]] = {}
    for broker_id, rack in broker_racks.items():
        brokers_by_rack.setdefault(rack, []).append(broker_id)
    racks = sorted(brokers_by_rack, key=_java_string_order)
    queues = [sorted(brokers_by_rack[rack], reverse=True) for rack in racks]  # pop() takes the smallest id
    alternated: list[int] = []
    rack_index = 0
    while len(alternated) < len(broker_racks):
        if queues[rack_index]:
            alternated.append(queues[rack_index].pop())
        rack_index = (rack_index + 1) % len(racks)
    return alternated


def assign_replicas_to_brokers_rack_aware(
    broker_racks: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    *,
    choose: Choose = choose_first,
) -> dict[int, list[int]]:
    """Kafka's rack-aware assignment, used by Kafka when every broker has a rack.

    Leaders go round-robin along `rack_alternated_broker_list(broker_racks)`. Each further replica walks on
    from the leader as in the rack-unaware case (with the shift multiplied by the rack count), skipping a
    broker whose rack already has a replica while some rack has none, and a broker that already has one while
    some broker has none. So a partition spans min(replication_factor, racks) racks. `fixed_start_index`,
    `start_partition_id` and `choose` mean what they mean for `assign_replicas_to_brokers`.
    """
    _check_request(len(broker_racks), num_partitions, replication_factor)
    arranged = rack_alternated_broker_list(broker_racks)
    num_brokers = len(arranged)
    num_racks = len(set(broker_racks.values()))
    start_index, next_replica_shift = _start_indexes(fixed_start_index, num_brokers, choose)
    assignment: dict[int, list[int]] = {}
    current_partition_id = max(0, start_partition_id)
    for _ in range(num_partitions):
        if current_partition_id > 0 and current_partition_id % num_brokers == 0:
            next_replica_shift += 1
        assignment[current_partition_id] = _rack_aware_replicas(
            arranged,
            broker_racks,
            num_racks=num_racks,
            first_replica_index=(current_partition_id + start_index) % num_brokers,
            shift=next_replica_shift * num_racks,
            replication_factor=replication_factor,
        )
        current_partition_id += 1
    return assignment


def _rack_aware_replicas(
    arranged: list[int],
    broker_racks: Mapping[int, str],
    *,
    num_racks: int,
    first_replica_index: int,
    shift: int,
    replication_factor: int,
) -> list[int]:
    """One partition's replicas: the leader, then the first acceptable broker along the walk, in turn."""
    num_brokers = len(arranged)
    leader = arranged[first_replica_index]
    replicas = [leader]
    racks_with_replicas = {broker_racks[leader]}
    brokers_with_replicas = {leader}
    # Any n - 1 consecutive steps visit every broker but the leader, and one of them is acceptable (an unused
    # rack has only unused brokers), so each replica is found within n - 1 steps.
    steps_max = (replication_factor - 1) * (num_brokers - 1)
    k = 0
    while len(replicas) < replication_factor:
        assert k < steps_max, "every replica is found within n - 1 steps of the walk"
        broker = arranged[_replica_index(first_replica_index, shift, k, num_brokers)]
        rack = broker_racks[broker]
        k += 1
        if rack in racks_with_replicas and len(racks_with_replicas) < num_racks:
            continue  # Kafka: another rack has no replica yet
        if broker in brokers_with_replicas and len(brokers_with_replicas) < num_brokers:
            continue  # Kafka: another broker has no replica yet
        replicas.append(broker)
        racks_with_replicas.add(rack)
        brokers_with_replicas.add(broker)
    return replicas


def _check_request(num_brokers: int, num_partitions: int, replication_factor: int) -> None:
    """Kafka's three checks, in Kafka's order and with Kafka's messages."""
    if num_partitions <= 0:
        raise InvalidReplicaAssignment("Number of partitions must be larger than 0.", ErrorCode.INVALID_PARTITIONS)
    if replication_factor <= 0:
        raise InvalidReplicaAssignment(
            "Replication factor must be larger than 0.", ErrorCode.INVALID_REPLICATION_FACTOR
        )
    if replication_factor > num_brokers:
        raise InvalidReplicaAssignment(
            f"Replication factor: {replication_factor} larger than available brokers: {num_brokers}.",
            ErrorCode.INVALID_REPLICATION_FACTOR,
        )


def _start_indexes(fixed_start_index: int, num_brokers: int, choose: Choose) -> tuple[int, int]:
    """(start index, initial replica shift): both the fixed index, or two draws in Kafka's order."""
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    start_index = choose(num_brokers)
    next_replica_shift = choose(num_brokers)
    assert 0 <= start_index < num_brokers, f"choose({num_brokers}) gave {start_index}"
    assert 0 <= next_replica_shift < num_brokers, f"choose({num_brokers}) gave {next_replica_shift}"
    return start_index, next_replica_shift


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, num_brokers: int) -> int:
    """Kafka's `replicaIndex`: never the leader's own index, since the gap is in [1, n - 1]."""
    shift = 1 + (second_replica_shift + replica_index) % (num_brokers - 1)
    return (first_replica_index + shift) % num_brokers


def _java_string_order(text: str) -> bytes:
    """A sort key equal to Java's `String.compareTo`: big-endian UTF-16 compares code unit by code unit."""
    return text.encode("utf-16-be", "surrogatepass")
