"""Producer commands of a connection: PRODUCER, SEND (the publish hot path), CLOSE_PRODUCER."""

from __future__ import annotations

import logging
from collections import deque

from starquake.broker import backlog_quota
from starquake.broker.cnx_base import CnxBase
from starquake.broker.entry_info import info_of
from starquake.broker.errors import BrokerServiceError, ProducerBusyError
from starquake.broker.producer import Producer
from starquake.broker.schemas.topic_schemas import add_producer_schema, validation_enforced
from starquake.broker.topic import PersistentTopic
from starquake.broker.topic_api import TopicApi
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.errors import ChecksumMismatchError, ProtocolError, ServerError
from starquake.protocol.framing import parse_entry
from starquake.protocol.schema import schema_info_of

log = logging.getLogger(__name__)

T = pb.BaseCommand


class ProducerCommands(CnxBase):
    """Handlers for producer commands (mixed into ServerCnx)."""

    auth_role: str | None
    _pending_send_bytes: int
    # Sizes of the entries awaiting a receipt, per producer id, oldest first (receipts of one
    # producer go out in order): each receipt gives its entry's bytes back.
    _pending_sizes: dict[int, deque[int]]
    _reading_paused: bool
    _write_paused: bool
    _read_paused_for_writes: bool

    def close(self) -> None:
        raise NotImplementedError

    def _on_producer(self, command: T, _: bytes | None) -> None:
        request = command.producer
        request_id = request.request_id
        producer_id = request.producer_id
        existing = self.producers.get(producer_id)
        if existing is not None:
            if existing.topic.full_name == request.topic:
                self.write(
                    commands.producer_success(
                        request_id, existing.name, schema_version=existing.schema_version
                    )
                )
            else:
                self._error(request_id, ProducerBusyError("Producer id already in use"))
            return
        try:
            topic_name = self.service.parse_topic(request.topic)
            self.service.authorization.check_produce(
                self.auth_role, topic_name, request.initial_subscription_name
            )
            topic = self.service.loaded_topic(topic_name)
        except BrokerServiceError as exc:
            self._error(request_id, exc)
            return
        if topic is None:
            self._load_then(
                topic_name, True, request_id, lambda t: self._producer_schema(request, t)
            )
            return
        self._producer_schema(request, topic)

    def _producer_schema(self, request: pb.CommandProducer, topic: TopicApi) -> None:
        """Find the producer's schema version (off the loop) when schemas are involved, then
        add the producer."""
        if isinstance(topic, PersistentTopic):
            try:  # as Pulsar does: before the schema check, so a refused producer adds none
                backlog_quota.check_producer(self.service, topic)
            except BrokerServiceError as exc:
                self._error(request.request_id, exc)
                return
        info = schema_info_of(request.schema) if request.HasField("schema") else None
        name = self.service.parse_topic(topic.full_name)
        if info is None and not validation_enforced(self.service, name.namespace_name):
            self._add_producer(request, topic, b"")
            return

        self._await_then(
            request.request_id,
            add_producer_schema(self.service, name, info),
            lambda version: self._add_producer(request, topic, version),
            f"schema check of a producer on {topic.full_name}",
        )

    def _add_producer(
        self, request: pb.CommandProducer, topic: TopicApi, schema_version: bytes
    ) -> None:
        request_id = request.request_id
        producer_id = request.producer_id
        if producer_id in self.producers:  # the same id arrived again while the topic loaded
            self._error(request_id, ProducerBusyError("Producer id already in use"))
            return
        try:
            name = request.producer_name if request.HasField("producer_name") else ""
            if not name:
                name = topic.generate_producer_name()
            producer = Producer(
                topic,
                self,
                producer_id,
                name,
                request.producer_access_mode,
                request.epoch,
            )
            producer.schema_version = schema_version
            initial = request.initial_subscription_name
            if initial and topic.is_persistent and initial not in topic.subscriptions:
                if not self.service.auto_subscription_creation(
                    self.service.parse_topic(topic.full_name).namespace_name
                ):
                    raise BrokerServiceError(
                        f"Cannot create the initial subscription {initial!r}: automatic "
                        "subscription creation is disabled (allowAutoSubscriptionCreation=false)",
                        ServerError.NotAllowedError,
                    )
                topic.get_or_create_subscription(
                    initial, durable=True, initial_earliest=True, start=None, start_inclusive=False
                )
            admitted = topic.add_producer(producer)
        except BrokerServiceError as exc:
            self._error(request_id, exc)
            return
        self.producers[producer_id] = producer
        if not admitted:
            log.info("producer %s waits for exclusive access to %s", name, topic.full_name)
            topic.producer_registry.wait(
                producer, lambda p, epoch: self._producer_ready(p, request_id, epoch)
            )
            self.write(
                commands.producer_success(
                    request_id, name, -1, producer_ready=False, schema_version=schema_version
                )
            )
            return
        log.info("producer %s created on %s from %s", name, topic.full_name, self.remote_address)
        self._producer_ready(producer, request_id, topic.producer_registry.epoch)

    def _producer_ready(self, producer: Producer, request_id: int, epoch: int) -> None:
        exclusive = producer.access_mode != 0
        self.write(
            commands.producer_success(
                request_id,
                producer.name,
                producer.topic.last_sequence_id(producer.name),
                topic_epoch=epoch if exclusive else None,
                schema_version=producer.schema_version,
            )
        )

    def _on_send(self, command: T, entry: bytes | None) -> None:
        send = command.send
        producer = self.producers.get(send.producer_id)
        if producer is None or id(producer) not in producer.topic.producers:
            log.warning(
                "closing connection from %s: SEND for unknown producer %d",
                self.remote_address,
                send.producer_id,
            )
            self.close()
            return
        sequence_id = send.sequence_id
        if entry is None:
            self.write(
                commands.send_error(
                    send.producer_id, sequence_id, ServerError.UnknownError, "SEND without payload"
                )
            )
            return
        try:
            parsed = parse_entry(entry)
        except ChecksumMismatchError:
            self.write(
                commands.send_error(
                    send.producer_id,
                    sequence_id,
                    ServerError.ChecksumError,
                    "Checksum failed on the broker",
                )
            )
            return
        except ProtocolError as exc:
            self.write(
                commands.send_error(
                    send.producer_id, sequence_id, ServerError.UnknownError, str(exc)
                )
            )
            return
        if parsed.broker_entry_metadata is not None:
            entry = _strip_broker_entry_metadata(entry)
        size = len(parsed.payload)
        if size > self.service.config.maxMessageSize and not send.is_chunk:
            self.write(
                commands.send_error(
                    send.producer_id,
                    sequence_id,
                    ServerError.NotAllowedError,
                    f"Message of {size} bytes exceeds maxMessageSize "
                    f"({self.service.config.maxMessageSize})",
                )
            )
            return
        # A batch covers sequence_id .. highest; clients that omit highest_sequence_id number
        # the messages of a batch consecutively.
        if send.HasField("highest_sequence_id") and send.highest_sequence_id >= sequence_id:
            highest = send.highest_sequence_id
        else:
            highest = sequence_id + max(send.num_messages, 1) - 1
        # counted before publishing: a duplicate's receipt may be sent from within publish
        queue = self._pending_sizes.get(send.producer_id)
        if queue is None:
            queue = self._pending_sizes[send.producer_id] = deque()
        queue.append(len(entry))
        self._pending_send_bytes += len(entry)
        try:
            metadata = parsed.metadata
            last_chunk = not metadata.HasField("chunk_id") or (
                metadata.chunk_id >= metadata.num_chunks_from_msg - 1
            )
            producer.topic.publish(
                producer, sequence_id, highest, info_of(metadata), entry, last_chunk=last_chunk
            )
        except BrokerServiceError as exc:
            self.receipt_sent(send.producer_id, newest=True)
            self.write(commands.send_error(send.producer_id, sequence_id, exc.code, exc.message))
            return
        if (
            not self._reading_paused
            and self._pending_send_bytes > self.service.config.maxPendingSendBytesPerConnection
            and self.transport is not None
        ):
            self._reading_paused = True
            self.transport.pause_reading()

    def receipt_sent(self, producer_id: int, *, newest: bool = False) -> None:
        """A send of ``producer_id`` is answered (receipt or error): give its bytes back, and
        resume reading once the pending bytes fell to half of the limit."""
        sizes = self._pending_sizes
        queue = sizes.get(producer_id)
        if queue:
            self._pending_send_bytes -= queue.pop() if newest else queue.popleft()
            if not queue:
                del sizes[producer_id]
        if (
            self._reading_paused
            and self._pending_send_bytes
            <= self.service.config.maxPendingSendBytesPerConnection // 2
            and self.transport is not None
        ):
            self._reading_paused = False
            if self._write_paused:
                # the client cannot take our writes either: reading resumes with writing
                self._read_paused_for_writes = True
            else:
                self.transport.resume_reading()

    def _on_close_producer(self, command: T, _: bytes | None) -> None:
        request = command.close_producer
        producer = self.producers.get(request.producer_id)
        if producer is not None:
            self._remove_producer(producer)
            log.info("producer %s closed on %s", producer.name, producer.topic.full_name)
        self.write(commands.success(request.request_id))

    def _remove_producer(self, producer: Producer) -> None:
        producer.closed = True
        self.producers.pop(producer.producer_id, None)
        producer.topic.remove_producer(producer)

    def disconnect_producer(self, producer: Producer) -> None:
        self._remove_producer(producer)
        self.write(commands.close_producer(producer.producer_id, 0))


def _strip_broker_entry_metadata(entry: bytes) -> bytes:
    if entry[:2] == b"\x0e\x02":
        size = int.from_bytes(entry[2:6], "big")
        return entry[6 + size :]
    return entry
