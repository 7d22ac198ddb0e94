"""The broker's Kafka wire-protocol listener: Kafka clients' second front door to the same replica manager.

Room: services/broker (wiring; issue 15). This module owns the TCP side only: `listeners` and
`advertised.listeners` (Kafka's names; one listener, of any of Kafka's four security protocols: TLS and the SASL
step before dispatch are `kafka_security`'s), reading 4-byte-size frames (through `READ_BUFFER_BYTES` over a kernel
receive buffer of `RECEIVE_BUFFER_BYTES`, so that a client's large Produce requests are taken in while the loop is
busy; a size over
`socket.request.max.bytes` or negative closes the connection, as Kafka's `NetworkReceive`), and writing answers in
the order of the requests. Kafka serves one request of a connection at a time (it mutes the connection until the
answer is sent); here consecutive Produce requests are pipelined: each is handed to the driving task as soon as it is
read, in order (so appends keep the connection's order, which idempotence needs), and the answers are written in
that order as replication completes them, up to `PRODUCE_PIPELINE_DEPTH` at once (librdkafka keeps 5 in flight).
Any other request waits until every earlier answer is written and is then served alone, as in Kafka. What a request
means is `hightide.protocol.kafka` (the codec and the translation to internal requests); what it does is the
`BrokerService`'s: Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch and Metadata go through the service's one
driving task to the replica manager, exactly as the NATS requests do (so they emit the same events); CreateTopics,
DeleteTopics, InitProducerId and DescribeCluster go to the active controller over NATS, as Hightide's own Admin
and Producer send them. The group APIs, IncrementalAlterConfigs and the reassignment APIs are
`hightide.broker.kafka_groups`'s. A request Kafka would refuse (`UnservedRequest`) or an oversized frame closes its
connection without an answer, logged (peer and reason) and emitted as a `KafkaConnectionRefused` event; every
other connection keeps being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from hightide.broker import broker_configs, kafka_groups
from hightide.broker.kafka_security import ConnectionAuthenticator, ListenerSecurity, listener_security
from hightide.core import topic_configs
from hightide.core.topic_rules import refusals_before_the_controller
from hightide.protocol import events, kafka, kafka_sasl, wire
from hightide.protocol.errors import ErrorCode
from hightide.protocol.subjects import BrokerApi, ControllerApi
from hightide.runtime.config import ConfigError
from hightide.runtime.rpc import RequestFailed

if TYPE_CHECKING:
    from hightide.broker.service import BrokerService

PLAINTEXT: Final = "PLAINTEXT"
PRODUCE_PIPELINE_DEPTH: Final = 16  # Produce requests of one connection handed on before their answers are written
# The connection's read buffer: a whole Produce of librdkafka's (message.max.bytes, 1,000,000) or the Java client's
# (max.request.size, 1 MiB) is taken in without pausing the socket (asyncio's default, 64 KiB, pauses it at 128 KiB
# and resumes it on the next turn of the loop: twice the loop turns per large frame). Kafka reads a frame into a
# buffer of its size (NetworkReceive); this is the bound on what is buffered beyond the frame being read.
READ_BUFFER_BYTES: Final = 1024 * 1024
# The kernel's receive buffer of each connection (SO_RCVBUF, set on the listening socket so that accepted ones
# inherit it; Linux caps it at net.core.rmem_max). While the broker's one event loop is busy (an append, a
# replication round), the kernel takes in what the client sends: librdkafka stops building Produce requests while
# more than queue.buffering.backpressure.threshold (1) of its requests are not yet sent, so a socket that fills at
# asyncio's pace holds its requests back (issue 15's 16 KiB benchmark). Kafka sets socket.receive.buffer.bytes
# (100 KiB) but reads a connection whenever data is there; this is Hightide's own setting, not that config.
RECEIVE_BUFFER_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    host: str
    port: int
    advertised_host: str
    advertised_port: int  # 0: the port bound
    socket_request_max_bytes: int = kafka.SOCKET_REQUEST_MAX_BYTES_DEFAULT
    security: ListenerSecurity | None = None  # None: PLAINTEXT (issue 15, security)


def _named_endpoint(name: str, value: str) -> tuple[str, str, int]:
    """(listener name, host, port) of `NAME://host:port`; the name's protocol is listener.security.protocol.map's."""
    listener_name, sep, rest = value.partition("://")
    if not sep or ":" not in rest or not listener_name.replace("_", "").isalnum():
        raise ConfigError(f"Invalid value {value} for configuration {name}: expected NAME://host:port")
    host, _, port = rest.rpartition(":")
    if not port.isdigit() or int(port) > 65_535:
        raise ConfigError(f"Invalid value {value} for configuration {name}: bad port")
    return listener_name.upper(), host.strip("[]"), int(port)


def listener_config(props: dict[str, str], socket_request_max_bytes: int) -> ListenerConfig | None:
    """The Kafka listener from `listeners` / `advertised.listeners` (None when `listeners` is not set: a broker
    without a Kafka listener). One listener; its security from `listener.security.protocol.map` and the rest."""
    listeners = props.get("listeners", "").strip()
    if not listeners:
        return None
    if "," in listeners:
        raise ConfigError(f"Invalid value {listeners} for configuration listeners: one listener is served")
    listener_name, host, port = _named_endpoint("listeners", listeners)
    advertised = props.get("advertised.listeners", "").strip()
    adv_name, adv_host, adv_port = (
        _named_endpoint("advertised.listeners", advertised) if advertised else (listener_name, host, 0)
    )
    if adv_name != listener_name:
        raise ConfigError(f"advertised.listeners names {adv_name}, which is not in listeners ({listener_name})")
    if not adv_host or adv_host == "0.0.0.0":
        raise ConfigError("advertised.listeners must name a host clients can reach")
    security = listener_security(props, listener_name)
    if security.security_protocol == PLAINTEXT:
        return ListenerConfig(host, port, adv_host, adv_port, socket_request_max_bytes)
    return ListenerConfig(host, port, adv_host, adv_port, socket_request_max_bytes, security)


class KafkaListener:
    def __init__(self, config: ListenerConfig, service: BrokerService) -> None:
        self.config = config
        self.service = service
        self.log = service.log
        self.server: asyncio.Server | None = None
        self.port = config.port
        self._connections: set[asyncio.Task[None]] = set()
        self._versions_seen: set[tuple[int, int]] = set()  # each (api key, version) is logged once: what clients use

    @property
    def advertised(self) -> str:
        return f"{self.config.advertised_host}:{self.config.advertised_port or self.port}"

    async def start(self) -> None:
        security = self.config.security
        tls = None if security is None else security.ssl_context
        self.server = await asyncio.start_server(
            self._connection, self.config.host, self.config.port, ssl=tls, limit=READ_BUFFER_BYTES
        )
        for sock in self.server.sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
        self.port = self.server.sockets[0].getsockname()[1]
        self.service.log.info("kafka_listener_started", listener=f"{self.config.host}:{self.port}")

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._connections):
            task.cancel()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        security = self.config.security
        auth = ConnectionAuthenticator(security, self.log, str(peer)) if security and security.uses_sasl else None
        pipeline = _Pipeline(writer)
        try:
            while True:
                authenticating = auth is not None and not auth.complete
                try:
                    prefix = await reader.readexactly(4)
                    limit = auth.max_receive_size if auth is not None and authenticating else None
                    size = kafka.frame_size(prefix, limit or self.config.socket_request_max_bytes)
                    frame = await reader.readexactly(size)
                except asyncio.IncompleteReadError:
                    return  # the client closed (a frame cut short is simply never served, as in Kafka)
                except kafka.FrameTooLarge as error:
                    self.log.warning("kafka_frame_refused", peer=str(peer), error=str(error))
                    self._connection_refused(peer, "oversized")
                    return
                if auth is not None and authenticating:  # the SASL step before dispatch (kafka_security)
                    answer, close = auth.receive(frame)
                    if answer is not None:
                        writer.write(answer)
                        await writer.drain()
                    if close:
                        await auth.failed()
                        return
                    continue
                try:
                    request = kafka.parse_request(frame)
                except kafka.UnservedRequest as error:
                    await pipeline.drained()  # the earlier requests are answered first, as Kafka serves in order
                    self.log.warning(
                        "kafka_request_refused", peer=str(peer), error=str(error)[:512], head=frame[:64].hex()
                    )
                    self._connection_refused(peer, error.reason, error.api_key, error.api_version)
                    return
                await self._serve(request, pipeline, writer)
        except (ConnectionError, OSError):
            return
        except Exception as error:  # a defect in a translation: this connection closes, the broker serves on
            self.log.error("kafka_request_failed", peer=str(peer), error=repr(error)[:512])
            return
        finally:
            pipeline.close()
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, request: kafka.Request, pipeline: _Pipeline, writer: asyncio.StreamWriter) -> None:
        """A pipelined Produce is handed on and its answer queued; any other request waits for every earlier answer
        to be written and is then served alone."""
        self._note_version(request)
        produce = self._pipelined_produce(request)
        if produce is not None:
            pending = await self.service.kafka_submit(BrokerApi.PRODUCE, produce)
            await pipeline.put((request, produce.acks, pending))
            return
        await pipeline.drained()
        body = await self._answer(request)
        if body is None:
            return  # Produce with acks=0: Kafka sends no answer
        writer.write(kafka.encode_response(request, body))
        await writer.drain()

    def _pipelined_produce(self, request: kafka.Request) -> wire.ProduceRequest | None:
        """The internal request of a Produce that can be pipelined (it translates cleanly); None: serve it alone."""
        if request.api_key != kafka.PRODUCE or request.body is None:
            return None
        try:
            return kafka.produce_request(request.body)  # None: no partition it can carry (`_answer` answers)
        except ValidationError:
            return None  # `_answer` gives the error answer, in order

    def _note_version(self, request: kafka.Request) -> None:
        if (request.api_key, request.api_version) not in self._versions_seen:
            self._versions_seen.add((request.api_key, request.api_version))
            self.log.info(
                "kafka_api_version_first_served",
                api_key=request.api_key,
                api_version=request.api_version,
                client_id=(request.client_id or "")[:64],
            )

    async def _answer(self, request: kafka.Request) -> Any:
        key = request.api_key
        try:
            if key == kafka.API_VERSIONS:
                return kafka.api_versions_response(request)
            if request.body is None:  # issue 15: a version not served of a served API (the lead's decision)
                return kafka.unsupported_version_response(request)
            if key == kafka.PRODUCE:
                produce = kafka.produce_request(request.body)
                answer = wire.ProduceResponse()
                if produce is not None:
                    answer = await self.service.kafka_request(BrokerApi.PRODUCE, produce)
                if int(request.body.acks) == 0:
                    return None
                return kafka.produce_response(request, answer)
            if key == kafka.FETCH:
                fetch = kafka.fetch_request(request.body)
                fetched = None if fetch is None else await self.service.kafka_request(BrokerApi.FETCH, fetch)
                return kafka.fetch_response(request, fetched)
            if key == kafka.LIST_OFFSETS:
                listing = kafka.list_offsets_request(request.body)
                listed = wire.ListOffsetsResponse()
                if listing is not None:
                    listed = await self.service.kafka_request(BrokerApi.LIST_OFFSETS, listing)
                return kafka.list_offsets_response(request, listed)
            if key == kafka.OFFSET_FOR_LEADER_EPOCH:
                query = kafka.offsets_for_leader_epoch_request(request.body)
                epochs = wire.OffsetsForLeaderEpochResponse()
                if query is not None:
                    epochs = await self.service.kafka_request(BrokerApi.OFFSETS_FOR_LEADER_EPOCH, query)
                return kafka.offsets_for_leader_epoch_response(request, epochs)
            if key == kafka.METADATA:
                metadata = await self.service.kafka_request(BrokerApi.METADATA, kafka.metadata_request(request.body))
                if not self.service.manager.ready:
                    # Not caught up with the metadata log (it just started): a live topic may look unknown, so
                    # every topic is LEADER_NOT_AVAILABLE (retriable), as NATS clients are not answered at all.
                    metadata = metadata.model_copy(
                        update={
                            "topics": tuple(
                                t.model_copy(update={"error": int(ErrorCode.LEADER_NOT_AVAILABLE), "partitions": ()})
                                for t in metadata.topics
                            )
                        }
                    )
                return kafka.metadata_response(
                    request, metadata, self.service.settings.cluster_id, controller_id=self.service.id
                )
            if key == kafka.INIT_PRODUCER_ID:
                if request.body.transactional_id is not None:
                    # No transactions in Hightide: Kafka's answer to a transactional id the broker will not serve.
                    refused = wire.InitProducerIdResponse(error=kafka.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                    return kafka.init_producer_id_response(request, refused)
                ids = await self._controller(
                    ControllerApi.INIT_PRODUCER_ID, wire.InitProducerIdRequest(), wire.InitProducerIdResponse
                )
                return kafka.init_producer_id_response(request, ids)
            if key == kafka.CREATE_TOPICS:
                return await self._create_topics(request)
            if key == kafka.DELETE_TOPICS:
                unknown = _refusals(list(request.body.topic_names), creating=False)
                deletion = kafka.delete_topics_request(request.body, unknown)
                deleted = wire.DeleteTopicsResponse()
                if deletion is not None:
                    deleted = await self._controller(ControllerApi.DELETE_TOPICS, deletion, wire.DeleteTopicsResponse)
                return kafka.delete_topics_response(request, deleted, unknown)
            if key == kafka.DESCRIBE_CLUSTER:
                described = await self._controller(
                    ControllerApi.DESCRIBE_CLUSTER, wire.DescribeClusterRequest(), wire.DescribeClusterResponse
                )
                return kafka.describe_cluster_response(request, described, controller_id=self.service.id)
            if key == kafka.CREATE_PARTITIONS:
                return await self._create_partitions(request)
            if key == kafka.ELECT_LEADERS:
                elected = await self._controller(
                    ControllerApi.ELECT_LEADERS, kafka.elect_leaders_request(request.body), wire.ElectLeadersResponse
                )
                return kafka.elect_leaders_response(request, elected)
            if key == kafka.DESCRIBE_CONFIGS:
                return await self._describe_configs(request)
            if key in (kafka.SASL_HANDSHAKE, kafka.SASL_AUTHENTICATE):  # no SASL here, or already authenticated
                return kafka_sasl.illegal_state_response(request)
            # -- issue 15, groups/configs/reassignments slice: hightide.broker.kafka_groups serves them --
            if key in kafka_groups.SERVED_APIS:
                return await kafka_groups.answer(self, request)
        except ValidationError as error:
            # A request Kafka's schema allows and Hightide's bounds refuse (an empty batch, too many partitions).
            return kafka.error_response(request, ErrorCode.INVALID_REQUEST, _first_error(error))
        except RequestFailed as error:
            return kafka.error_response(request, error.error_code, str(error))
        raise AssertionError(f"a served API without a handler: {key}")

    def _connection_refused(self, peer: Any, reason: str, api_key: int = -1, api_version: int = -1) -> None:
        """Issue 15: a connection closed without an answer is a broker event too (the warning is logged above)."""
        self.service.events.emit(
            events.KafkaConnectionRefused(
                broker_id=self.service.id, peer=str(peer)[:256], reason=reason, api_key=api_key, api_version=api_version
            )
        )

    async def _controller(
        self, api: ControllerApi, body: wire.Wire, kind: type[Any], timeout_ms: int | None = None
    ) -> Any:
        return await self.service._controller(api, body, kind, timeout_ms)

    async def _create_topics(self, request: kafka.Request) -> Any:
        """ControllerApis' checks before the controller: a name given twice (none of its entries acted on) and, here,
        a topic the internal request cannot carry, are answered by the listener; the rest go to the controller."""
        body = request.body
        if body.validate_only:
            return kafka.error_response(
                request, ErrorCode.INVALID_REQUEST, "validate_only is not supported by Hightide"
            )
        refused = dict(_refusals([topic.name for topic in body.topics], creating=True))
        for topic in body.topics:
            if topic.name not in refused:
                try:
                    kafka.creatable_topic(topic)
                except ValidationError as error:
                    refused[topic.name] = (int(ErrorCode.INVALID_REQUEST), _first_error(error))
        creation = kafka.create_topics_request(body, refused)
        created = wire.CreateTopicsResponse()
        if creation is not None:
            created = await self._controller(
                ControllerApi.CREATE_TOPICS,
                creation,
                wire.CreateTopicsResponse,
                # The client's timeout, but never shorter than the broker's own wait for the controller: a
                # timeout of 0 (do not wait) must not turn a creation under way into REQUEST_TIMED_OUT.
                timeout_ms=max(
                    int(body.timeout.total_seconds() * 1000), self.service.settings.controller_request_timeout_ms
                ),
            )
        return kafka.create_topics_response(request, created, refused)

    async def _create_partitions(self, request: kafka.Request) -> Any:
        if request.body.validate_only:
            return kafka.error_response(
                request, ErrorCode.INVALID_REQUEST, "validate_only is not supported by Hightide"
            )
        refused = _refusals([topic.name for topic in request.body.topics], creating=False)
        results = [(name, error, message) for name, (error, message) in refused.items()]
        for topic in request.body.topics:
            if topic.name in refused:
                continue
            try:
                one = kafka.create_partitions_request(topic)
                answer = await self._controller(ControllerApi.CREATE_PARTITIONS, one, wire.CreatePartitionsResponse)
                results.append((one.topic, answer.error, answer.message))
            except ValidationError as error:
                results.append((topic.name, int(ErrorCode.INVALID_REQUEST), _first_error(error)))
            except RequestFailed as error:
                results.append((topic.name, int(error.error_code), str(error)))
        return kafka.create_partitions_response(request, results)

    async def _describe_configs(self, request: kafka.Request) -> Any:
        """Topic resources from this broker's metadata image: each topic config, its override (a dynamic topic
        config), else this broker's setting (static broker config), else Kafka's default."""
        answers: list[kafka.ResourceAnswer] = []
        for resource in request.body.resources:
            kind, name = int(resource.resource_type), resource.resource_name
            wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
            if kind == kafka.BROKER_RESOURCE:
                answers.append(self._broker_resource(name, wanted))
                continue
            if kind != kafka.TOPIC_RESOURCE:
                message = "only topic and broker configs are described by Hightide's Kafka listener"
                answers.append((kind, name, int(ErrorCode.INVALID_REQUEST), message, []))
                continue
            try:
                metadata = await self.service.kafka_request(BrokerApi.METADATA, wire.MetadataRequest(topics=(name,)))
            except ValidationError:
                answers.append((kind, name, int(ErrorCode.INVALID_TOPIC_EXCEPTION), "invalid topic name", []))
                continue
            topic = metadata.topics[0]
            if topic.error:
                answers.append((kind, name, topic.error, "", []))
                continue
            answers.append((kind, name, 0, "", self._topic_configs(topic.configs, wanted)))
        return kafka.describe_configs_response(request, answers)

    def _broker_resource(self, name: str, wanted: set[str] | None) -> kafka.ResourceAnswer:
        """Kafka's ConfigHelper for a BROKER resource: this broker's configs; the empty name is the cluster-wide
        dynamic defaults (Hightide has none); another broker's id is that broker's to answer."""
        kind, me = kafka.BROKER_RESOURCE, self.service.id
        if not name:
            return (kind, name, 0, "", [])
        if not _JAVA_INT.fullmatch(name):  # Integer.parseInt's form (Python's int() also takes "1_0" and " 1")
            return (kind, name, int(ErrorCode.INVALID_REQUEST), f"Broker id must be an integer, but it is: {name}", [])
        if int(name) != me:
            message = f"Unexpected broker id, expected {me}, but received {name}"
            return (kind, name, int(ErrorCode.INVALID_REQUEST), message, [])
        return (kind, name, 0, "", broker_configs.describe(self.service.settings, wanted))

    def _topic_configs(self, overrides: dict[str, str], wanted: set[str] | None) -> list[kafka.ConfigRow]:
        rows: list[kafka.ConfigRow] = []
        broker = self.service.settings.log_defaults
        for config, default in sorted(topic_configs.defaults().items()):
            if wanted is not None and config not in wanted:
                continue
            if config in overrides:
                rows.append((config, overrides[config], kafka.CONFIG_SOURCE_DYNAMIC_TOPIC))
            elif config in broker:
                rows.append((config, broker[config], kafka.CONFIG_SOURCE_STATIC_BROKER))
            else:
                rows.append((config, broker_configs.config_text(default), kafka.CONFIG_SOURCE_DEFAULT))
        return rows


_Pipelined = tuple[kafka.Request, int, "asyncio.Future[Any]"]  # (the request, its acks, the internal answer)


class _Pipeline:
    """The answers of one connection's pipelined Produce requests, written in the requests' order by a task of its
    own as the driving task completes them. A failure to write ends the connection (ConnectionError for the reader)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._queue: asyncio.Queue[_Pipelined] = asyncio.Queue(maxsize=PRODUCE_PIPELINE_DEPTH)
        self._task: asyncio.Task[None] | None = None
        self._unanswered = 0  # items put and not yet written (the queue's own count is private)

    async def put(self, item: _Pipelined) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._write_in_order())
        self._check()
        self._unanswered += 1
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(item)  # room in the pipeline: the next frame is read without a turn of the loop
            return
        put = asyncio.ensure_future(self._queue.put(item))
        await asyncio.wait({put, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            self._unanswered -= 1  # never queued (the writer ended: `_check` ends the connection)
        self._check()

    async def drained(self) -> None:
        if self._task is None:
            return
        self._check()
        if self._unanswered == 0:
            return  # every pipelined answer is written: no turn of the loop
        joined = asyncio.ensure_future(self._queue.join())
        await asyncio.wait({joined, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not joined.done():
            joined.cancel()
        self._check()

    def _check(self) -> None:
        """The writer ended: the connection ends with its error (a defect in a translation is logged as one)."""
        if self._task is None or not self._task.done():
            return
        error = None if self._task.cancelled() else self._task.exception()
        if error is None or isinstance(error, (ConnectionError, OSError)):
            raise ConnectionError("the connection's answers could not be written")
        raise error

    async def _write_in_order(self) -> None:
        while True:
            request, acks, answer = await self._queue.get()
            try:
                internal = await answer
                if acks != 0:  # acks=0: Kafka sends no answer
                    self._writer.write(kafka.encode_response(request, kafka.produce_response(request, internal)))
                    await self._writer.drain()
            finally:
                self._unanswered -= 1
                self._queue.task_done()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")


def _first_error(error: ValidationError) -> str:
    return str(error.errors()[0].get("msg", "invalid request"))[:256]


def _refusals(names: list[str], *, creating: bool) -> kafka.Refusals:
    """`refusals_before_the_controller` (libs/core) as the Kafka answers' (error number, message) by name."""
    refused = refusals_before_the_controller(names, creating=creating)
    return {name: (int(error), message) for name, (error, message) in refused.items()}
