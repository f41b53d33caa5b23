"""ServerCnx: one client connection, an asyncio protocol around the sans-IO frame decoder.

Commands are handled in arrival order, synchronously where possible, so SENDs after a PRODUCER
see the producer. A malformed frame closes this connection only; a request that fails gets an
ERROR (or SEND_ERROR, or a failed lookup response) with the matching ServerError code.

Read back-pressure: when the bytes of sends waiting for their receipt pass
``maxPendingSendBytesPerConnection``, reading pauses until receipts catch up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from starquake import __version__
from starquake.broker.consumer import Consumer, SubType
from starquake.broker.entry_info import info_of
from starquake.broker.errors import BrokerServiceError, ProducerBusyError
from starquake.broker.producer import Producer
from starquake.broker.subscription import to_signed
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.checksum import crc32c
from starquake.protocol.errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    ProtocolError,
    ServerError,
)
from starquake.protocol.framing import FRAME_PADDING, FrameDecoder, parse_entry
from starquake.storage import EARLIEST, Position

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

T = pb.BaseCommand
SERVER_VERSION = f"Pulsar Server starquake-{__version__}"


class ServerCnx(asyncio.Protocol):
    """The broker side of one client connection."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        config = service.config
        self.decoder = FrameDecoder(config.maxMessageSize + FRAME_PADDING)
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        self.connected = False
        self.protocol_version = 0
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._pending_send_bytes = 0
        self._pending_sends = 0
        self._reading_paused = False
        self._last_received = time.monotonic()
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_outstanding = False
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._handlers: dict[int, Callable[[T, bytes | None], None]] = {
            T.CONNECT: self._on_connect,
            T.PING: self._on_ping,
            T.PONG: self._on_pong,
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.PRODUCER: self._on_producer,
            T.SEND: self._on_send,
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.SUBSCRIBE: self._on_subscribe,
            T.FLOW: self._on_flow,
            T.ACK: self._on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            T.UNSUBSCRIBE: self._on_unsubscribe,
            T.CLOSE_CONSUMER: self._on_close_consumer,
            T.SEEK: self._on_seek,
            T.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
            T.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            T.CONSUMER_STATS: self._on_consumer_stats,
            T.GET_SCHEMA: self._on_get_schema,
            T.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
        }

    # --- transport plumbing -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.service.connections.add(self)
        interval = self.service.config.keepAliveIntervalSeconds
        if interval > 0:
            self._keepalive = asyncio.get_running_loop().call_later(interval, self._check_keepalive)

    def connection_lost(self, exc: Exception | None) -> None:
        self.service.connections.discard(self)
        if self._keepalive is not None:
            self._keepalive.cancel()
        for producer in list(self.producers.values()):
            self._remove_producer(producer)
        for consumer in list(self.consumers.values()):
            self._remove_consumer(consumer)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self._last_received = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameTooLargeError as exc:
            log.warning("closing connection from %s: %s", self.remote_address, exc)
            self.close()
            return
        except ProtocolError as exc:
            log.warning("closing connection from %s: malformed frame: %s", self.remote_address, exc)
            self.close()
            return
        for command, entry in frames:
            if self.transport is None:
                return
            if not self.connected and command.type != T.CONNECT:
                log.warning(
                    "closing connection from %s: command before CONNECT", self.remote_address
                )
                self.close()
                return
            handler = self._handlers.get(command.type)
            if handler is None:
                self._unsupported(command)
                continue
            try:
                handler(command, entry)
            except Exception:
                log.exception(
                    "error handling %s from %s", T.Type.Name(command.type), self.remote_address
                )
                self.close()
                return

    def write(self, frame: bytes) -> None:
        """Queue a frame; everything queued in one loop iteration goes out in one write."""
        if self.transport is None:
            return
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def write_frames(self, frames: list[bytes]) -> None:
        if self.transport is None:
            return
        self._out.extend(frames)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self.transport is not None and out:
            self.transport.writelines(out)

    def close(self) -> None:
        if self.transport is not None:
            self._flush()
            self.transport.close()

    def _check_keepalive(self) -> None:
        interval = self.service.config.keepAliveIntervalSeconds
        if self.transport is None:
            return
        if time.monotonic() - self._last_received >= interval:
            if self._ping_outstanding:
                log.info(
                    "closing idle connection from %s (no keep-alive reply)", self.remote_address
                )
                self.close()
                return
            self._ping_outstanding = True
            self.write(commands.ping())
        self._keepalive = asyncio.get_running_loop().call_later(interval, self._check_keepalive)

    def _error(self, request_id: int, exc: BrokerServiceError) -> None:
        self.write(commands.error(request_id, exc.code, exc.message))

    def _unsupported(self, command: T) -> None:
        name = T.Type.Name(command.type)
        request_id = _request_id_of(command)
        log.info("unsupported command %s from %s", name, self.remote_address)
        if request_id is not None:
            self.write(
                commands.error(request_id, ServerError.NotAllowedError, f"{name} is not supported")
            )

    # --- handshake ------------------------------------------------------------------------------

    def _on_connect(self, command: T, _: bytes | None) -> None:
        if self.connected:
            log.warning("closing connection from %s: second CONNECT", self.remote_address)
            self.close()
            return
        connect = command.connect
        self.protocol_version = min(connect.protocol_version, commands.MAX_PROTOCOL_VERSION)
        self.connected = True
        self.write(
            commands.connected(
                SERVER_VERSION, self.protocol_version, self.service.config.maxMessageSize
            )
        )

    def _on_ping(self, command: T, _: bytes | None) -> None:
        self.write(commands.pong())

    def _on_pong(self, command: T, _: bytes | None) -> None:
        self._ping_outstanding = False

    # --- lookups ------------------------------------------------------------------------------

    def _on_partitioned_metadata(self, command: T, _: bytes | None) -> None:
        request = command.partition_metadata
        request_id = request.request_id
        try:
            topic = self.service.parse_topic(request.topic)
            partitions = self.service.partitioned_metadata(topic)
        except BrokerServiceError as exc:
            self.write(commands.partitioned_metadata_response(request_id, 0, exc.code, exc.message))
            return
        if partitions == 0 and self.service.wants_auto_partitioned(topic):
            self._spawn(self._create_auto_partitioned(request_id, topic))
            return
        self.write(commands.partitioned_metadata_response(request_id, partitions))

    async def _create_auto_partitioned(self, request_id: int, topic: Any) -> None:
        try:
            partitions = await self.service.create_auto_partitioned(topic)
        except BrokerServiceError as exc:
            self.write(commands.partitioned_metadata_response(request_id, 0, exc.code, exc.message))
            return
        self.write(commands.partitioned_metadata_response(request_id, partitions))

    def _on_lookup(self, command: T, _: bytes | None) -> None:
        request = command.lookup_topic
        try:
            topic = self.service.parse_topic(request.topic)
            self.service.check_lookup(topic)
        except BrokerServiceError as exc:
            self.write(
                commands.lookup_response(
                    request.request_id, error_code=exc.code, message=exc.message
                )
            )
            return
        self.write(commands.lookup_response(request.request_id, self.service.service_url))

    def _on_get_topics_of_namespace(self, command: T, _: bytes | None) -> None:
        request = command.get_topics_of_namespace
        namespace = request.namespace
        mode = request.mode
        if not self.service.resources.namespace_exists(namespace):
            self.write(
                commands.error(
                    request.request_id,
                    ServerError.MetadataError,
                    f"Namespace {namespace} does not exist",
                )
            )
            return
        topics: list[str] = []
        if mode != pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
            topics += self.service.list_topics(namespace)
        if mode != pb.CommandGetTopicsOfNamespace.PERSISTENT:
            topics += self.service.list_topics(namespace, persistent=False)
        filtered = False
        if request.HasField("topics_pattern"):
            try:
                topics = self.service.filter_topics(topics, request.topics_pattern)
                filtered = True
            except Exception:
                filtered = False
        self.write(
            commands.get_topics_of_namespace_response(
                request.request_id, topics, filtered=filtered, topics_hash=topics_hash(topics)
            )
        )

    # --- producers ----------------------------------------------------------------------------

    def _on_producer(self, command: T, _: bytes | None) -> None:
        request = command.producer
        request_id = request.request_id
        producer_id = request.producer_id
        existing = self.producers.get(producer_id)
        if existing is not None:
            if existing.topic.full_name == request.topic:
                self.write(commands.producer_success(request_id, existing.name))
            else:
                self._error(request_id, ProducerBusyError("Producer id already in use"))
            return
        try:
            topic_name = self.service.parse_topic(request.topic)
            topic = self.service.get_topic(topic_name)
            name = request.producer_name if request.HasField("producer_name") else ""
            if not name:
                name = topic.generate_producer_name()
            producer = Producer(
                topic, self, producer_id, name, request.producer_access_mode, request.epoch
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
            self.write(commands.producer_success(request_id, name, -1, producer_ready=False))
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
        try:
            metadata = parsed.metadata
            last_chunk = not metadata.HasField("chunk_id") or (
                metadata.chunk_id >= metadata.num_chunks_from_msg - 1
            )
            producer.topic.publish(
                producer, sequence_id, highest, info_of(metadata), entry, last_chunk=last_chunk
            )
        except BrokerServiceError as exc:
            self.write(commands.send_error(send.producer_id, sequence_id, exc.code, exc.message))
            return
        self._pending_sends += 1
        self._pending_send_bytes += len(entry)
        if (
            not self._reading_paused
            and self._pending_send_bytes > self.service.config.maxPendingSendBytesPerConnection
            and self.transport is not None
        ):
            self._reading_paused = True
            self.transport.pause_reading()

    def receipt_sent(self, producer_id: int) -> None:
        self._pending_sends -= 1
        if self._pending_sends <= 0:
            self._pending_sends = 0
            self._pending_send_bytes = 0
        if (
            self._reading_paused
            and self._pending_send_bytes
            <= self.service.config.maxPendingSendBytesPerConnection // 2
            and self.transport is not None
        ):
            self._reading_paused = False
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

    # --- consumers ----------------------------------------------------------------------------

    def _on_subscribe(self, command: T, _: bytes | None) -> None:
        request = command.subscribe
        request_id = request.request_id
        consumer_id = request.consumer_id
        if consumer_id in self.consumers:
            existing = self.consumers[consumer_id]
            if existing.subscription.topic.full_name == request.topic:
                self.write(commands.success(request_id))
            else:
                self._error(request_id, BrokerServiceError("Consumer id already in use"))
            return
        try:
            topic_name = self.service.parse_topic(request.topic)
            topic = self.service.get_topic(topic_name, create=request.force_topic_creation)
            start: Position | None = None
            inclusive = False
            if request.HasField("start_message_id"):
                mid = request.start_message_id
                start = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
                # As Pulsar does: start at the given entry itself; the client drops the messages
                # before its start id (or up to it, for an exclusive start).
                inclusive = start.ledger_id >= 0 and start.entry_id >= 0
                if start.ledger_id < 0:
                    start = EARLIEST
            subscription = topic.get_or_create_subscription(
                request.subscription,
                durable=request.durable,
                initial_earliest=request.initialPosition == pb.CommandSubscribe.Earliest,
                start=start,
                start_inclusive=inclusive,
            )
            consumer = Consumer(
                subscription,
                self,
                consumer_id,
                request.consumer_name,
                SubType(request.subType),
                request.priority_level,
                topic.partition_index,
            )
            consumer.read_compacted = request.read_compacted
            consumer.metadata = {kv.key: kv.value for kv in request.metadata}
            if request.HasField("keySharedMeta"):
                meta = request.keySharedMeta
                consumer.allow_out_of_order = meta.allowOutOfOrderDelivery
                if meta.keySharedMode == pb.STICKY:
                    consumer.key_hash_ranges = [(r.start, r.end) for r in meta.hashRanges]
            subscription.add_consumer(consumer)
        except BrokerServiceError as exc:
            if (
                "subscription" in locals()
                and not subscription.durable
                and not subscription.consumers
            ):
                topic.remove_subscription(subscription.name)
            self._error(request_id, exc)
            return
        self.consumers[consumer_id] = consumer
        log.info(
            "consumer %r subscribed to %s/%s (%s) from %s",
            consumer.name,
            topic.full_name,
            subscription.name,
            consumer.sub_type.name,
            self.remote_address,
        )
        self.write(commands.success(request_id))
        if subscription.dispatcher is not None:
            subscription.dispatcher.schedule()

    def _on_flow(self, command: T, _: bytes | None) -> None:
        flow = command.flow
        consumer = self.consumers.get(flow.consumer_id)
        if consumer is None:
            return
        dispatcher = consumer.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.consumer_flow(consumer, flow.messagePermits)

    def _on_ack(self, command: T, _: bytes | None) -> None:
        ack = command.ack
        consumer = self.consumers.get(ack.consumer_id)
        wants_response = ack.HasField("request_id")
        if consumer is None:
            if wants_response:
                self.write(
                    commands.ack_response(
                        ack.consumer_id,
                        ack.request_id,
                        ServerError.ConsumerNotFound,
                        "Consumer not found",
                    )
                )
            return
        subscription = consumer.subscription
        try:
            if ack.ack_type == pb.CommandAck.Cumulative:
                if len(ack.message_id) == 1:
                    mid = ack.message_id[0]
                    position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
                    subscription.acknowledge_cumulative(consumer, position)
            else:
                positions = []
                batch_index_ack = self.service.config.acknowledgmentAtBatchIndexLevelEnabled
                for mid in ack.message_id:
                    position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
                    if batch_index_ack and len(mid.ack_set):
                        size = mid.batch_size if mid.HasField("batch_size") else 0
                        if size <= 0:
                            size = subscription.topic.batch_size_of(position)
                        subscription.acknowledge_batch_index(consumer, position, mid.ack_set, size)
                    else:
                        positions.append(position)
                if positions:
                    subscription.acknowledge_individual(consumer, positions)
        except BrokerServiceError as exc:
            if wants_response:
                self.write(
                    commands.ack_response(ack.consumer_id, ack.request_id, exc.code, exc.message)
                )
            else:
                log.info("ignored ack from %s: %s", self.remote_address, exc)
            return
        if wants_response:
            self.write(commands.ack_response(ack.consumer_id, ack.request_id))

    def _on_redeliver(self, command: T, _: bytes | None) -> None:
        request = command.redeliver_unacknowledged_messages
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            return
        positions: list[Position] | None = None
        if len(request.message_ids):
            positions = [
                Position(to_signed(m.ledgerId), to_signed(m.entryId)) for m in request.message_ids
            ]
        consumer.subscription.redeliver(consumer, positions)

    def _on_unsubscribe(self, command: T, _: bytes | None) -> None:
        request = command.unsubscribe
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(
                request.request_id,
                BrokerServiceError("Consumer not found", ServerError.ConsumerNotFound),
            )
            return
        subscription = consumer.subscription
        others = [c for c in subscription.consumers if c is not consumer]
        if others and not request.force:
            self._error(
                request.request_id,
                BrokerServiceError(
                    f"Subscription {subscription.name} has other connected consumers",
                    ServerError.ConsumerBusy,
                ),
            )
            return
        for other in others:
            other.cnx.disconnect_consumer(other)
        self._remove_consumer(consumer)
        try:
            subscription.topic.unsubscribe(subscription.name)
        except BrokerServiceError as exc:
            if subscription.durable:
                self._error(request.request_id, exc)
                return
        log.info("unsubscribed %s/%s", subscription.topic.full_name, subscription.name)
        self.write(commands.success(request.request_id))

    def _on_close_consumer(self, command: T, _: bytes | None) -> None:
        request = command.close_consumer
        consumer = self.consumers.get(request.consumer_id)
        if consumer is not None:
            self._remove_consumer(consumer)
        self.write(commands.success(request.request_id))

    def _remove_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.consumer_id, None)
        consumer.subscription.remove_consumer(consumer)

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close a consumer from the broker side; the client subscribes again."""
        self._remove_consumer(consumer)
        self.write(commands.close_consumer(consumer.consumer_id, 0))

    def _on_seek(self, command: T, _: bytes | None) -> None:
        request = command.seek
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(
                request.request_id,
                BrokerServiceError("Consumer not found", ServerError.ConsumerNotFound),
            )
            return
        subscription = consumer.subscription
        topic = subscription.topic
        if not topic.is_persistent:
            self._error(
                request.request_id,
                BrokerServiceError(
                    "Seek is not supported on non-persistent topics", ServerError.NotAllowedError
                ),
            )
            return
        if request.HasField("message_id"):
            mid = request.message_id
            position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
            if position.ledger_id < 0:
                first = topic.ledger.first_position()
                position = (
                    first
                    if first is not None
                    else topic.ledger.next_position(topic.ledger.last_confirmed)
                )
            elif position.ledger_id >= (1 << 63) - 1:
                position = topic.ledger.next_position(topic.ledger.last_confirmed)
        elif request.HasField("message_publish_time"):
            position = topic.find_position_by_publish_time(request.message_publish_time)
        else:
            self._error(
                request.request_id,
                BrokerServiceError("SEEK needs a message id or a publish time"),
            )
            return
        # As Pulsar does: disconnect the subscription's consumers (they re-subscribe and
        # re-send their permits), move the cursor, then confirm.
        for other in subscription.consumers:
            other.cnx.disconnect_consumer(other)
        subscription.reset_cursor(position)
        log.info("seek %s/%s to %s", topic.full_name, subscription.name, position)
        self.write(commands.success(request.request_id))

    def _on_get_last_message_id(self, command: T, _: bytes | None) -> None:
        request = command.get_last_message_id
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(
                request.request_id,
                BrokerServiceError("Consumer not found", ServerError.ConsumerNotFound),
            )
            return
        topic = consumer.subscription.topic
        last, batch_index = topic.last_message_position()
        partition = topic.partition_index
        mark = (
            consumer.subscription.cursor.mark_delete_position
            if topic.is_persistent
            else Position(-1, -1)
        )
        self.write(
            commands.get_last_message_id_response(
                request.request_id,
                commands.message_id_data(last.ledger_id, last.entry_id, partition, batch_index),
                commands.message_id_data(mark.ledger_id, mark.entry_id, partition),
            )
        )

    def _on_consumer_stats(self, command: T, _: bytes | None) -> None:
        request = command.consumer_stats
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self.write(
                commands.consumer_stats_error(
                    request.request_id, ServerError.ConsumerNotFound, "Consumer not found"
                )
            )
            return
        subscription = consumer.subscription
        self.write(
            commands.consumer_stats_response(
                request.request_id,
                consumerName=consumer.name,
                availablePermits=max(consumer.permits, 0),
                unackedMessages=consumer.unacked_messages,
                address=self.remote_address,
                connectedSince=time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(consumer.connected_since)
                ),
                type=consumer.sub_type.name,
                msgBacklog=subscription.backlog(),
                msgRateOut=0.0,
                msgThroughputOut=0.0,
                msgRateRedeliver=0.0,
                blockedConsumerOnUnackedMsgs=False,
                msgRateExpired=0.0,
                messageAckRate=0.0,
            )
        )

    def _on_get_schema(self, command: T, _: bytes | None) -> None:
        request = command.get_schema
        self.write(
            commands.get_schema_response_error(
                request.request_id, ServerError.TopicNotFound, "Schema not found"
            )
        )

    def _on_get_or_create_schema(self, command: T, _: bytes | None) -> None:
        request = command.get_or_create_schema
        self.write(
            commands.get_or_create_schema_response(request.request_id, (0).to_bytes(8, "big"))
        )

    # --- helpers --------------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.service.background.add(task)
        task.add_done_callback(self.service.background.discard)


def _request_id_of(command: T) -> int | None:
    for field, value in command.ListFields():
        if field.name == "type":
            continue
        for sub_field, sub_value in value.ListFields():
            if sub_field.name == "request_id":
                return int(sub_value)
    return None


def _strip_broker_entry_metadata(entry: bytes) -> bytes:
    if entry[:2] == b"\x0e\x02":
        size = int.from_bytes(entry[2:6], "big")
        return entry[6 + size :]
    return entry


def topics_hash(topics: list[str]) -> str:
    """Pulsar's TopicList hash: CRC32C of the sorted names joined by ',', little-endian hex."""
    value = crc32c(",".join(sorted(topics)).encode())
    return value.to_bytes(4, "little").hex()
