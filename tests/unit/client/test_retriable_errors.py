"""The clients retry exactly what Kafka's clients retry: `ErrorCode.retriable` holds the codes whose exception
classes in Kafka's `org.apache.kafka.common.errors` extend RetriableException (directly, or through
InvalidMetadataException / RefreshRetriableException), among the codes Hightide has.

Method: the table below is read from Kafka's exception classes, one line per code with its class; the test
compares it with `ErrorCode.retriable` both ways, so a code marked retriable that Kafka does not retry fails it
as well as one missing.
"""

from __future__ import annotations

from hightide.protocol.errors import ErrorCode

KAFKA_RETRIABLE = {
    ErrorCode.CORRUPT_MESSAGE: "CorruptRecordException extends RetriableException",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException extends InvalidMetadataException",
    ErrorCode.LEADER_NOT_AVAILABLE: "LeaderNotAvailableException extends InvalidMetadataException",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderOrFollowerException extends InvalidMetadataException",
    ErrorCode.REQUEST_TIMED_OUT: "TimeoutException extends RetriableException",
    ErrorCode.REPLICA_NOT_AVAILABLE: "ReplicaNotAvailableException extends InvalidMetadataException",
    ErrorCode.NETWORK_EXCEPTION: "NetworkException extends InvalidMetadataException",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "CoordinatorLoadInProgressException extends RetriableException",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "CoordinatorNotAvailableException extends RetriableException",
    ErrorCode.NOT_COORDINATOR: "NotCoordinatorException extends RetriableException",
    ErrorCode.NOT_ENOUGH_REPLICAS: "NotEnoughReplicasException extends RetriableException",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "NotEnoughReplicasAfterAppendException extends RetriableException",
    ErrorCode.NOT_CONTROLLER: "NotControllerException extends RetriableException",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException extends InvalidMetadataException",
    ErrorCode.FENCED_LEADER_EPOCH: "FencedLeaderEpochException extends InvalidMetadataException",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "UnknownLeaderEpochException extends RetriableException",
    ErrorCode.OFFSET_NOT_AVAILABLE: "OffsetNotAvailableException extends RetriableException",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "PreferredLeaderNotAvailableException extends InvalidMetadataException",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "EligibleLeadersNotAvailableException extends InvalidMetadataException",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "UnstableOffsetCommitException extends RetriableException",
    ErrorCode.UNKNOWN_TOPIC_ID: "UnknownTopicIdException extends InvalidMetadataException",
    ErrorCode.INCONSISTENT_TOPIC_ID: "InconsistentTopicIdException extends InvalidMetadataException",
}


def test_the_retriable_codes_are_kafkas() -> None:
    assert {code for code in ErrorCode if code.retriable} == set(KAFKA_RETRIABLE)


def test_a_definite_refusal_is_not_retriable() -> None:
    for code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE,
                 ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.INVALID_PRODUCER_EPOCH):  # fmt: skip
        assert not code.retriable, code.name
