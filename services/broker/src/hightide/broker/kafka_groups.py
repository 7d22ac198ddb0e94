"""The Kafka listener's group, IncrementalAlterConfigs and reassignment handlers: Kafka clients' requests, translated
(`hightide.protocol.kafka_groups`), reach the same calls as the NATS ones.

Room: services/broker (wiring; issue 15). One set of rules, two front doors:
- the group APIs go through the broker's driving task to the group coordinator (`BrokerService._serve_kafka_group`),
  the calls the NATS handlers make, so they emit the same group events; this broker is the coordinator of the
  groups whose `__consumer_offsets` partition it leads, NOT_COORDINATOR elsewhere (the coordinator's answer);
- FindCoordinator answers the leader of the group's partition with its Kafka listener (COORDINATOR_NOT_AVAILABLE
  while `__consumer_offsets` is being created or that broker has no listener);
- IncrementalAlterConfigs (topics) and the reassignment APIs go to the active controller over NATS, as
  `hightide topic alter` and `hightide reassign` send them. APPEND and SUBTRACT of a list config are Kafka's
  (`ConfigAdminManager.prepareIncrementalConfigs`): the topic's value (its override, else Kafka's default) with
  the items added (those not present) or removed, then SET.
A request Hightide's bounds refuse (ValidationError) is answered INVALID_REQUEST, a controller not answering with
its error: never a dropped connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from hightide.core import topic_configs
from hightide.protocol import kafka, wire
from hightide.protocol import kafka_groups as kg
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi, ControllerApi
from hightide.runtime.rpc import RequestFailed

if TYPE_CHECKING:
    from hightide.broker.kafka_listener import KafkaListener

TRANSACTION_KEY_TYPE: Final = 1
SERVED_APIS: Final = kg.GROUP_APIS | kg.ADMIN_APIS


async def answer(listener: KafkaListener, request: kafka.Request) -> Any:
    """The Kafka answer to one of `SERVED_APIS`."""
    try:
        return await _answer(listener, request)
    except ValidationError as error:
        message = str(error.errors()[0].get("msg", "invalid request"))[:256]
        return refused(request, ErrorCode.INVALID_REQUEST, message)
    except RequestFailed as error:
        return refused(request, error.error_code, str(error)[:256])


async def _answer(listener: KafkaListener, request: kafka.Request) -> Any:
    service, key, body = listener.service, request.api_key, request.body
    if key == kafka.FIND_COORDINATOR:
        return await _find_coordinator(listener, request)
    if key == kafka.JOIN_GROUP:
        joined = await service.kafka_request(BrokerApi.JOIN_GROUP, kg.join_group_request(body, request.client_id))
        if kg.rejoin_for_old_client(request, joined):
            rejoin = kg.join_group_request(body, request.client_id, member_id=joined.member_id)
            joined = await service.kafka_request(BrokerApi.JOIN_GROUP, rejoin)
        return kg.join_group_response(request, joined)
    if key == kafka.SYNC_GROUP:
        synced = await service.kafka_request(BrokerApi.SYNC_GROUP, kg.sync_group_request(body))
        return kg.sync_group_response(request, synced)
    if key == kafka.HEARTBEAT:
        beat = await service.kafka_request(BrokerApi.HEARTBEAT, kg.heartbeat_request(body))
        return kg.heartbeat_response(request, beat)
    if key == kafka.LEAVE_GROUP:
        left = await service.kafka_request(BrokerApi.LEAVE_GROUP, kg.leave_group_request(body))
        return kg.leave_group_response(request, left)
    if key == kafka.OFFSET_COMMIT:
        commit = kg.offset_commit_request(body)
        committed = wire.OffsetCommitResponse()
        if commit is not None:
            committed = await service.kafka_request(BrokerApi.OFFSET_COMMIT, commit)
        return kg.offset_commit_response(request, committed)
    if key == kafka.OFFSET_FETCH:
        answers = []
        for one in kg.offset_fetch_requests(body):
            answers.append((one, await service.kafka_request(BrokerApi.OFFSET_FETCH, one)))
        return kg.offset_fetch_response(request, answers)
    if key == kafka.LIST_GROUPS:
        listed = await service.kafka_request(BrokerApi.LIST_GROUPS, kg.list_groups_request(body))
        return kg.list_groups_response(request, listed)
    if key == kafka.DESCRIBE_GROUPS:
        described = await service.kafka_request(BrokerApi.DESCRIBE_GROUPS, kg.describe_groups_request(body))
        return kg.describe_groups_response(request, described)
    if key == kafka.DELETE_GROUPS:
        deleted = await service.kafka_request(BrokerApi.DELETE_GROUPS, kg.delete_groups_request(body))
        return kg.delete_groups_response(request, deleted)
    if key == kafka.INCREMENTAL_ALTER_CONFIGS:
        return await _incremental_alter_configs(listener, request)
    if key == kafka.ALTER_PARTITION_REASSIGNMENTS:
        altered = await service._controller(
            ControllerApi.ALTER_PARTITION_REASSIGNMENTS,
            kg.alter_partition_reassignments_request(body),
            wire.AlterPartitionReassignmentsResponse,
        )
        return kg.alter_partition_reassignments_response(request, altered)
    assert key == kafka.LIST_PARTITION_REASSIGNMENTS, key
    listed_reassignments = await service._controller(
        ControllerApi.LIST_PARTITION_REASSIGNMENTS,
        kg.list_partition_reassignments_request(body),
        wire.ListPartitionReassignmentsResponse,
    )
    return kg.list_partition_reassignments_response(request, listed_reassignments)


async def _find_coordinator(listener: KafkaListener, request: kafka.Request) -> Any:
    service = listener.service
    answers: list[kg.CoordinatorAnswer] = []
    endpoints: dict[int, tuple[str, int]] | None = None
    for key, key_type in kg.coordinator_keys(request.body):
        if key_type == TRANSACTION_KEY_TYPE:
            message = "transactions are not served by Hightide"
            answers.append((key, int(ErrorCode.INVALID_REQUEST), -1, "", -1, message))
            continue
        try:
            found = await service.kafka_request(BrokerApi.FIND_COORDINATOR, wire.FindCoordinatorRequest(key=key))
        except ValidationError:
            answers.append((key, int(ErrorCode.INVALID_GROUP_ID), -1, "", -1, "invalid group id"))
            continue
        if found.error:
            answers.append((key, found.error, -1, "", -1, found.message))
            continue
        if endpoints is None:
            metadata = await service.kafka_request(BrokerApi.METADATA, wire.MetadataRequest(topics=()))
            endpoints = {}
            for b in metadata.brokers:
                host, _, port = b.kafka_listener.rpartition(":")
                if host and port.isdigit() and not b.fenced:
                    endpoints[b.broker_id] = (host, int(port))
        endpoint = endpoints.get(found.node_id)
        if endpoint is None:
            message = f"broker {found.node_id} has no Kafka listener"
            answers.append((key, int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1, message))
            continue
        answers.append((key, 0, found.node_id, endpoint[0], endpoint[1], ""))
    return kg.find_coordinator_response(request, answers)


# -- IncrementalAlterConfigs ----------------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


async def _incremental_alter_configs(listener: KafkaListener, request: kafka.Request) -> Any:
    service = listener.service
    answers: list[kg.AlterConfigsAnswer] = []
    for resource in request.body.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        if kind != kafka.TOPIC_RESOURCE:
            message = "only topic configs are altered by Hightide's Kafka listener"
            answers.append((kind, name, int(ErrorCode.INVALID_REQUEST), message))
            continue
        try:
            body = await _alter_configs_body(listener, name, resource.configs, bool(request.body.validate_only))
            altered = await service._controller(ControllerApi.ALTER_CONFIGS, body, wire.AlterConfigsResponse)
            answers.append((kind, name, altered.error, altered.message))
        except _Refused as refusal:
            answers.append((kind, name, int(refusal.error), str(refusal)))
        except ValidationError as error:
            message = str(error.errors()[0].get("msg", "invalid request"))[:256]
            answers.append((kind, name, int(ErrorCode.INVALID_REQUEST), message))
        except RequestFailed as error:
            answers.append((kind, name, int(error.error_code), str(error)[:256]))
    return kg.incremental_alter_configs_response(request, answers)


async def _alter_configs_body(
    listener: KafkaListener, topic: str, configs: Any, validate_only: bool
) -> wire.AlterConfigsRequest:
    names = [c.name for c in configs]
    if len(names) != len(set(names)):
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {sorted(names)}")
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    current: dict[str, str] | None = None
    for config in configs:
        op = kg.INCREMENTAL_OPS.get(int(config.config_operation))
        if op is None:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown config operation {config.config_operation}")
        if op == "DELETE":
            delete_configs.append(config.name)
            continue
        if config.value is None:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {config.name}")
        if op == "SET":
            set_configs[config.name] = config.value
            continue
        row = topic_configs.TOPIC_CONFIGS.get(config.name)
        if current is None and row is not None and row.type is topic_configs.ConfigType.LIST:
            current = await _topic_overrides(listener, topic)  # what APPEND and SUBTRACT start from
        try:
            set_configs[config.name] = topic_configs.list_after(
                config.name, (current or {}).get(config.name), config.value, append=op == "APPEND"
            )
        except topic_configs.InvalidTopicConfig as error:
            raise _Refused(ErrorCode.INVALID_CONFIG, error.message) from None
    return wire.AlterConfigsRequest(
        topic=topic, set_configs=set_configs, delete_configs=tuple(delete_configs), validate_only=validate_only
    )


async def _topic_overrides(listener: KafkaListener, topic: str) -> dict[str, str]:
    metadata = await listener.service.kafka_request(BrokerApi.METADATA, wire.MetadataRequest(topics=(topic,)))
    found = metadata.topics[0]
    if found.error:
        raise _Refused(wire.error_code_of(found.error), f"topic {topic}: {wire.error_code_of(found.error).name}")
    return dict(found.configs)


# -- answers to refused requests ------------------------------------------------------------------------------------


def refused(request: kafka.Request, error: ErrorCode, message: str) -> Any:
    """The answer to a request Hightide's bounds refuse, or whose controller did not answer: `error` everywhere
    the request named something."""
    code, body = int(error), request.body
    key = request.api_key
    if key == kafka.FIND_COORDINATOR:
        return kg.find_coordinator_response(
            request, [(k, code, -1, "", -1, message) for k, _ in kg.coordinator_keys(body)]
        )
    if key == kafka.JOIN_GROUP:
        return kg.join_group_response(request, wire.JoinGroupResponse(error=code, member_id=body.member_id[:1024]))
    if key == kafka.SYNC_GROUP:
        return kg.sync_group_response(request, wire.SyncGroupResponse(error=code))
    if key == kafka.HEARTBEAT:
        return kg.heartbeat_response(request, wire.HeartbeatResponse(error=code))
    if key == kafka.LEAVE_GROUP:
        return kg.leave_group_response(request, wire.LeaveGroupResponse(error=code))
    if key == kafka.OFFSET_COMMIT:
        return kg.offset_commit_response(request, wire.OffsetCommitResponse(error=code))
    if key == kafka.OFFSET_FETCH:
        groups = [g.group_id for g in body.groups] if hasattr(body, "groups") else [body.group_id]
        empty = [
            (wire.OffsetFetchRequest.model_construct(group_id=g, partitions=None), wire.OffsetFetchResponse(error=code))
            for g in groups
        ]
        return kg.offset_fetch_response(request, empty)
    if key == kafka.LIST_GROUPS:
        return kg.list_groups_response(request, wire.ListGroupsResponse(error=code))
    if key == kafka.DESCRIBE_GROUPS:
        return kg.describe_groups_response(request, wire.DescribeGroupsResponse(error=code))
    if key == kafka.DELETE_GROUPS:
        return kg.delete_groups_response(request, wire.DeleteGroupsResponse(error=code))
    if key == kafka.INCREMENTAL_ALTER_CONFIGS:
        return kg.incremental_alter_configs_response(
            request, [(int(r.resource_type), r.resource_name, code, message) for r in body.resources]
        )
    if key == kafka.ALTER_PARTITION_REASSIGNMENTS:
        return kg.alter_partition_reassignments_response(
            request, wire.AlterPartitionReassignmentsResponse(error=code, message=message[:4096])
        )
    assert key == kafka.LIST_PARTITION_REASSIGNMENTS, key
    return kg.list_partition_reassignments_response(
        request, wire.ListPartitionReassignmentsResponse(error=code, message=message[:4096])
    )
