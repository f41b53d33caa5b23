"""Producer commands of a connection: PRODUCER, SEND (the publish hot path), CLOSE_PRODUCER.

The SENDs of one producer read together (one read of the connection, no other command between
them) are published as a run: one append of all their entries to the managed ledger, their
receipts queued in order, as if published one by one; a topic that checks each entry on its
own (deduplication, a delivery delay limit) and a SEND of a transaction take them one by one.

Read back-pressure: when the bytes of sends waiting for their receipt pass
``maxPendingSendBytesPerConnection``, the connection stops reading until receipts bring them
back to half of it.
"""

from __future__ import annotations

import logging
from collections import deque

from starquake.broker import backlog_quota
from starquake.broker.cnx_base import CommandContext
from starquake.broker.dedup import NO_HIGHEST_SEQUENCE_ID
from starquake.broker.entry_info import EntryInfo, info_of
from starquake.broker.entry_scan import scan_entry
from starquake.broker.errors import (
    BrokerServiceError,
    ChecksumError,
    NotAllowedError,
    ProducerBusyError,
    ServiceNotReadyError,
)
from starquake.broker.producer import Producer, RunEntry
from starquake.broker.schemas.topic_schemas import add_producer_schema, validation_enforced
from starquake.broker.topic import PersistentTopic
from starquake.broker.topic_api import TopicApi
from starquake.broker.transactions.buffer import TopicTransactionBuffer
from starquake.protocol import commands
from starquake.protocol.enums import ProducerAccessMode
from starquake.protocol.errors import ChecksumMismatchError, ProtocolError
from starquake.protocol.framing import parse_entry
from starquake.protocol.schema import schema_info_of
from starquake.protocol.send_scan import SendFields, send_fields_of
from starquake.protocol.wire import pb

log = logging.getLogger(__name__)

T = pb.BaseCommand
PENDING_SENDS = "pending sends"
"""The reason the connection's reading is held while too many sends await their receipt."""


class ProducerCommands:
    """Handles the producer commands of one connection and tracks its sends awaiting receipts."""

    def __init__(self, cnx: CommandContext) -> None:
        self._cnx = cnx
        self._service = cnx.service
        self.pending_send_bytes = 0
        """Bytes of the entries sent on this connection whose receipt is not out yet."""
        self.reading_paused = False
        """Reading is held because of :attr:`pending_send_bytes`."""
        # Sizes of the entries awaiting a receipt, per producer id, oldest first (receipts of one
        # producer go out in order): each receipt gives its entry's bytes back.
        self._pending_sizes: dict[int, deque[int]] = {}
        # SENDs of one producer read together, published together (see flush_sends)
        self._run: list[RunEntry] = []
        self._run_sends: list[SendFields] = []
        self._run_producer: Producer | None = None

    # --- PRODUCER -----------------------------------------------------------------------------

    def on_producer(self, command: T, _: bytes | None) -> None:
        """PRODUCER: authorize, load the topic if needed, check the schema, add the producer."""
        request = command.producer
        existing = self._cnx.producers.get(request.producer_id)
        if existing is not None:
            if existing.topic.full_name != request.topic:
                self._cnx.fail(request, ProducerBusyError("Producer id already in use"))
                return
            self._cnx.write(
                commands.producer_success(
                    request.request_id, existing.name, schema_version=existing.schema_version
                )
            )
            return
        if not self._cnx.creating.producers.begin(request.producer_id, request.request_id):
            self._cnx.fail(
                request, ServiceNotReadyError("Producer is already present on the connection")
            )
            return
        try:
            topic_name = self._service.parse_topic(request.topic)
            self._service.authorization.check_produce(
                self._cnx.auth_role, topic_name, request.initial_subscription_name
            )
            topic = self._service.loaded_topic(topic_name)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        if topic is None:
            self._cnx.load_then(
                request, topic_name, True, lambda t: self._producer_schema(request, t)
            )
            return
        self._producer_schema(request, topic)

    def _producer_schema(self, request: pb.CommandProducer, topic: TopicApi) -> None:
        """Find the producer's schema version (off the loop) when schemas are involved, then
        add the producer."""
        if isinstance(topic, PersistentTopic):
            try:  # as Pulsar does: before the schema check, so a refused producer adds none
                backlog_quota.check_producer(self._service, topic)
            except BrokerServiceError as exc:
                self._cnx.fail(request, exc)
                return
        info = schema_info_of(request.schema) if request.HasField("schema") else None
        name = self._service.parse_topic(topic.full_name)
        if info is None and not validation_enforced(self._service, name.namespace_name):
            self._add_producer(request, topic, b"")
            return
        self._cnx.await_then(
            request,
            add_producer_schema(self._service, name, info),
            lambda version: self._add_producer(request, topic, version),
            f"schema check of a producer on {topic.full_name}",
        )

    def _add_producer(
        self, request: pb.CommandProducer, topic: TopicApi, schema_version: bytes
    ) -> None:
        """Admit the producer to the topic and answer (at once, or when it gets exclusivity)."""
        if not self._cnx.creating.producers.wanted(request.producer_id, request.request_id):
            return  # closed by the client while the topic loaded (it no longer waits)
        if topic.closed:  # unloaded during the schema check
            self._cnx.fail(request, ServiceNotReadyError("Topic is being closed"))
            return
        try:
            name = request.producer_name if request.HasField("producer_name") else ""
            producer = Producer(
                topic,
                self._cnx,
                request.producer_id,
                name or topic.generate_producer_name(),
                request.producer_access_mode,
                request.epoch,
            )
            producer.schema_version = schema_version
            self._create_initial_subscription(request, topic)
            admitted = topic.add_producer(producer)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        self._cnx.producers[request.producer_id] = producer
        self._cnx.creating.producers.end(request.producer_id, request.request_id)
        if admitted:
            log.info(
                "producer %s created on %s from %s",
                producer.name,
                topic.full_name,
                self._cnx.remote_address,
            )
            self._producer_ready(producer, request.request_id, topic.producer_registry.epoch)
            return
        self._wait_for_exclusive(request, topic, producer)

    def _wait_for_exclusive(
        self, request: pb.CommandProducer, topic: TopicApi, producer: Producer
    ) -> None:
        """Queue a WaitForExclusive producer and tell the client it is not ready yet."""
        log.info("producer %s waits for exclusive access to %s", producer.name, topic.full_name)
        topic.producer_registry.wait(
            producer, lambda p, epoch: self._producer_ready(p, request.request_id, epoch)
        )
        self._cnx.write(
            commands.producer_success(
                request.request_id,
                producer.name,
                -1,
                producer_ready=False,
                schema_version=producer.schema_version,
            )
        )

    def _create_initial_subscription(self, request: pb.CommandProducer, topic: TopicApi) -> None:
        """Create the subscription a producer asks for, if the namespace allows it."""
        initial = request.initial_subscription_name
        if not initial or not topic.is_persistent or initial in topic.subscriptions:
            return
        namespace = self._service.parse_topic(topic.full_name).namespace_name
        if not self._service.auto_subscription_creation(namespace):
            raise NotAllowedError(
                f"Cannot create the initial subscription {initial!r}: automatic "
                "subscription creation is disabled (allowAutoSubscriptionCreation=false)"
            )
        topic.get_or_create_subscription(
            initial, durable=True, initial_earliest=True, start=None, start_inclusive=False
        )

    def _producer_ready(self, producer: Producer, request_id: int, epoch: int) -> None:
        """Tell the client its producer may send (with the topic epoch when exclusive)."""
        exclusive = producer.access_mode != ProducerAccessMode.Shared
        self._cnx.write(
            commands.producer_success(
                request_id,
                producer.name,
                producer.topic.last_sequence_id(producer.name),
                topic_epoch=epoch if exclusive else None,
                schema_version=producer.schema_version,
            )
        )

    # --- SEND ---------------------------------------------------------------------------------

    def on_send(self, command: T, entry: bytes | None) -> None:
        """SEND decoded through protobuf: as :meth:`on_scanned_send`, published at once."""
        self._send(send_fields_of(command.send, entry))
        self.flush_sends()

    def on_scanned_send(self, send: SendFields) -> None:
        """SEND read without protobuf; an unexpected error closes the connection (as the
        connection does around the other handlers). Its entry may wait, with the SENDs after
        it, until :meth:`flush_sends` (which the connection calls before any other command
        and at the end of each read)."""
        try:
            self._send(send)
        except Exception:
            log.exception("error handling SEND from %s", self._cnx.remote_address)
            self._take_run()  # the SENDs collected are not published: the connection closes
            self._cnx.close()

    def _send(self, send: SendFields) -> None:
        """SEND: check the entry and publish it (in a run with the SENDs of its producer read
        with it); its receipt (or error) is sent later."""
        producer = self._cnx.producers.get(send.producer_id)
        if producer is None or not producer.attached:
            self.flush_sends()
            log.warning(
                "closing connection from %s: SEND for unknown producer %d",
                self._cnx.remote_address,
                send.producer_id,
            )
            self._cnx.close()
            return
        try:
            entry, info, last_chunk = self._checked_entry(send)
        except BrokerServiceError as exc:
            self._cnx.fail(send.message(), exc)
            return
        # As in Pulsar, a SEND without highest_sequence_id (or with one below sequence_id)
        # declares none: -1, echoed in the receipt. Deduplication then counts the entry as
        # sequence_id alone, whatever the batch's size: ids within a batch need not be
        # consecutive (the official client's key-based batches interleave).
        sequence_id = send.sequence_id
        if send.has_highest and send.highest_sequence_id >= sequence_id:
            highest = send.highest_sequence_id
        else:
            highest = NO_HIGHEST_SEQUENCE_ID
        item = (sequence_id, highest, info, entry, last_chunk)
        if send.has_txn:
            self.flush_sends()
            self._publish(producer, send, item)
            self._pause_if_over_limit()
            return
        if producer is not self._run_producer:
            self.flush_sends()
            self._run_producer = producer
        self._run.append(item)
        self._run_sends.append(send)

    def flush_sends(self) -> None:
        """Publish the SENDs :meth:`_send` collected: together when the topic takes runs."""
        producer, run, sends = self._take_run()
        if producer is None:
            return
        topic = producer.topic
        producer_id = producer.producer_id
        if len(run) > 1 and topic.takes_runs:
            for item in run:
                self._count_pending(producer_id, len(item[3]))
            try:
                topic.publish_run(producer, run)
            except BrokerServiceError as exc:
                for send in sends:
                    self.receipt_sent(producer_id, newest=True)
                    self._cnx.fail(send.message(), exc)
        else:
            for item, send in zip(run, sends, strict=True):
                self._publish(producer, send, item)
        self._pause_if_over_limit()

    def _take_run(self) -> tuple[Producer | None, list[RunEntry], list[SendFields]]:
        """The SENDs collected (their producer, entries and commands), forgotten here."""
        taken = (self._run_producer, self._run, self._run_sends)
        self._run, self._run_sends, self._run_producer = [], [], None
        return taken

    def _publish(self, producer: Producer, send: SendFields, item: RunEntry) -> None:
        """Publish one SEND's entry (to its transaction, if it has one)."""
        sequence_id, highest, info, entry, last_chunk = item
        self._count_pending(send.producer_id, len(entry))  # a duplicate's receipt may come now
        txn = (send.txnid_most_bits, send.txnid_least_bits) if send.has_txn else None
        try:
            buffer = None if txn is None else _buffer_for(producer, txn)
            position = producer.topic.publish(
                producer, sequence_id, highest, info, entry, last_chunk=last_chunk
            )
            if buffer is not None and position is not None and txn is not None:
                buffer.appended(txn, position)
        except BrokerServiceError as exc:
            self.receipt_sent(send.producer_id, newest=True)
            self._cnx.fail(send.message(), exc)

    def _pause_if_over_limit(self) -> None:
        """Hold reading while the bytes awaiting receipts pass the connection's limit."""
        limit = self._service.config.maxPendingSendBytesPerConnection
        if not self.reading_paused and self.pending_send_bytes > limit:
            self.reading_paused = True
            self._cnx.hold_reading(PENDING_SENDS)

    def _checked_entry(self, send: SendFields) -> tuple[bytes, EntryInfo, bool]:
        """The entry to store (without broker entry metadata), its info and whether it is the
        last chunk of its message; raises the error to answer the SEND with when the entry
        cannot be stored."""
        entry = send.entry
        if entry is None:
            raise BrokerServiceError("SEND without payload")
        scanned = scan_entry(entry)
        if scanned is not None:
            info, last_chunk, size = scanned
        else:
            try:
                parsed = parse_entry(entry)
            except ChecksumMismatchError as exc:
                raise ChecksumError("Checksum failed on the broker") from exc
            except ProtocolError as exc:
                raise BrokerServiceError(str(exc)) from exc
            if parsed.broker_entry_metadata is not None:
                entry = _strip_broker_entry_metadata(entry)
            size = len(parsed.payload)
            metadata = parsed.metadata
            info = info_of(metadata)
            last_chunk = not metadata.HasField("chunk_id") or (
                metadata.chunk_id >= metadata.num_chunks_from_msg - 1
            )
        limit = self._service.config.maxMessageSize
        if size > limit and not send.is_chunk:
            raise NotAllowedError(f"Message of {size} bytes exceeds maxMessageSize ({limit})")
        return entry, info, last_chunk

    def _count_pending(self, producer_id: int, size: int) -> None:
        """Count an entry of ``size`` bytes as awaiting its receipt."""
        queue = self._pending_sizes.get(producer_id)
        if queue is None:
            queue = self._pending_sizes[producer_id] = deque()
        queue.append(size)
        self.pending_send_bytes += size

    def receipt_sent(self, producer_id: int, *, newest: bool = False) -> None:
        """A send of ``producer_id`` is answered (receipt or error): give its bytes back, and
        resume reading once the pending bytes fell to half of the limit."""
        sizes = self._pending_sizes
        queue = sizes.get(producer_id)
        if queue:
            self.pending_send_bytes -= queue.pop() if newest else queue.popleft()
            if not queue:
                del sizes[producer_id]
        self._resume_reading_if_below()

    def receipts_sent(self, producer_id: int, count: int) -> None:
        """The ``count`` oldest sends of ``producer_id`` are answered (as :meth:`receipt_sent`
        for each)."""
        sizes = self._pending_sizes
        queue = sizes.get(producer_id)
        if queue:
            answered = 0
            for _ in range(min(count, len(queue))):
                answered += queue.popleft()
            self.pending_send_bytes -= answered
            if not queue:
                del sizes[producer_id]
        self._resume_reading_if_below()

    def _resume_reading_if_below(self) -> None:
        """Resume reading once the pending bytes fell to half of the limit."""
        limit = self._service.config.maxPendingSendBytesPerConnection
        if self.reading_paused and self.pending_send_bytes <= limit // 2 and self._cnx.is_open:
            self.reading_paused = False
            self._cnx.release_reading(PENDING_SENDS)

    # --- closing ------------------------------------------------------------------------------

    def on_close_producer(self, command: T, _: bytes | None) -> None:
        """CLOSE_PRODUCER: remove the producer (if any) and confirm."""
        request = command.close_producer
        producer = self._cnx.producers.get(request.producer_id)
        if producer is not None:
            self.remove_producer(producer)
            log.info("producer %s closed on %s", producer.name, producer.topic.full_name)
        elif self._cnx.creating.producers.give_up(request.producer_id):
            log.info(
                "producer %d closed by %s before its creation completed",
                request.producer_id,
                self._cnx.remote_address,
            )
        self._cnx.write(commands.success(request.request_id))

    def remove_producer(self, producer: Producer) -> None:
        """Detach ``producer`` from this connection and its topic."""
        producer.closed = True
        self._cnx.producers.pop(producer.producer_id, None)
        producer.topic.remove_producer(producer)

    def disconnect_producer(self, producer: Producer) -> None:
        """Close a producer from the broker side; the client creates it again."""
        self.remove_producer(producer)
        self._cnx.write(commands.close_producer(producer.producer_id, 0))


def _strip_broker_entry_metadata(entry: bytes) -> bytes:
    """The entry without the broker entry metadata a client should not have sent."""
    if entry[:2] == b"\x0e\x02":
        size = int.from_bytes(entry[2:6], "big")
        return entry[6 + size :]
    return entry


def _buffer_for(producer: Producer, txn: tuple[int, int]) -> TopicTransactionBuffer:
    """The transaction buffer that takes a message of ``txn`` for the producer's topic; as
    Pulsar, NotAllowed when transactions are off (or the topic is not persistent).

    A message of a transaction that is not open is refused with NotAllowed too (naming why):
    Pulsar's Java client fails the send on that code, where it would reconnect and send it
    again, for ever, on the transaction error codes."""
    buffer = producer.topic.txn
    if buffer is None:
        raise NotAllowedError("Transactions are not enabled.")
    try:
        buffer.check_append(txn)
    except BrokerServiceError as exc:
        raise NotAllowedError(exc.message) from None
    return buffer
