"""Consumer of one topic partition: subscribe, permits, batch unpacking, acks, seek, reconnect.

Flow control: after (re)subscribing we grant ``receiver_queue_size`` permits; every message the
application takes (or that we drop: acked batch indexes, messages before a reader's start id)
earns one permit back, and once half the queue is earned back we send FLOW with that many.
On reconnect the broker redelivers what was not acked, so the queue's messages of this
consumer are dropped and the permits start over.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from starquake.client.base._config import ConsumerConfig
from starquake.client.base._enums import ConsumerCryptoFailureAction
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._deliveries import SHARED_TYPES, DeliveryTracker, signed_64
from starquake.client.consumer._subscribe import (
    is_earliest,
    is_latest,
    seek_command,
    skip_after_seek,
    subscribe_command,
)
from starquake.client.consumer._txn_acks import check_cumulative_allowed, send_txn_ack
from starquake.client.core._chunks import ChunkAssembler, is_chunk
from starquake.client.core._handler import ClientCore, HandlerBase
from starquake.client.core._queue import MessageQueue
from starquake.client.crypto._crypto import EncryptionContext, MessageDecryptor, encryption_context
from starquake.client.exceptions import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    PulsarException,
)
from starquake.client.wire._connection import ClientConnection
from starquake.protocol import client_commands
from starquake.protocol.batch import unpack_batch
from starquake.protocol.compression import decompress
from starquake.protocol.enums import AckType
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import parse_entry
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.consumer._dlq import DeadLetterHandler
    from starquake.client.core._transaction import Transaction

log = logging.getLogger(CLIENT_LOGGER_NAME)


class ConsumerImpl(HandlerBase):
    """Consumer for a single topic or one partition; delivers into a (possibly shared) queue."""

    def __init__(
        self,
        core: ClientCore,
        topic: str,
        subscription: str,
        config: ConsumerConfig,
        queue: MessageQueue,
        *,
        partition: int = -1,
        queue_size: int | None = None,
        start_message_id: MessageId | None = None,
        consumer_name: str | None = None,
        dead_letter: DeadLetterHandler | None = None,
    ) -> None:
        super().__init__(core, topic)
        self.subscription = subscription
        self._config = config
        self._queue = queue
        self.partition = partition
        self.consumer_id = next(core.consumer_ids)
        self.consumer_name = (
            consumer_name if consumer_name is not None else config.consumer_name
        ) or secrets.token_hex(5)
        self._queue_size = config.receiver_queue_size if queue_size is None else queue_size
        self._permits = 0
        self._zero_waiting = False  # zero queue: a FLOW(1) is out for a receive waiting
        self._start_id = start_message_id
        self._inclusive = config.start_message_id_inclusive
        self._filter: MessageId | None = None
        self._min_publish_time = 0
        if start_message_id is not None and not (
            is_earliest(start_message_id) or is_latest(start_message_id)
        ):
            self._filter = start_message_id
        self.last_dequeued: MessageId | None = None
        self.latest_at_start: MessageId | None = None  # readers from "latest": last id at start
        self._deliveries = DeliveryTracker(
            self.consumer_id,
            topic,
            config,
            write=self._write,
            redeliver_all=self.redeliver_unacknowledged_messages,
            earn_permits=self._increase_permits,
            dead_letter=dead_letter,
        )
        reader = config.crypto_key_reader
        self._decryptor = MessageDecryptor(reader) if reader is not None else None
        self._chunks = ChunkAssembler(
            config.max_pending_chunked_message,
            config.auto_ack_oldest_chunked_message_on_queue_full,
            config.expire_time_of_incomplete_chunked_message_ms,
            self._deliveries.discard_chunks,
        )
        self.is_active = True
        self.reached_end_of_topic = False
        self._closed = False

    def __repr__(self) -> str:
        return f"Consumer({self.topic}, {self.subscription})"

    @property
    def queue(self) -> MessageQueue:
        """The queue this consumer delivers into (shared by the partitions of one front)."""
        return self._queue

    @property
    def start_message_id(self) -> MessageId | None:
        """(Readers) Where reading starts: the id given at creation or by the last seek."""
        return self._start_id

    # --- connection -------------------------------------------------------------------------

    def _subscribe_start(self) -> pb.MessageIdData | None:
        if self._config.durable:
            return None
        if self.last_dequeued is not None:  # resume a reader after the last message it handed out
            self._filter = self.last_dequeued.plain()
            self._inclusive = False
            return self.last_dequeued.to_proto(with_batch=False)
        start = self._start_id or MessageId.latest
        if start.first_chunk_message_id is not None and self._inclusive:
            start = start.first_chunk_message_id  # a chunked message starts at its first chunk
            self._filter = start
        return start.to_proto(with_batch=False)

    async def _register(self, cnx: ClientConnection) -> None:
        if not self._config.durable:
            # A reader resumes after the last message it handed out: what is still queued
            # comes again, so drop it before the resume point is fixed (a receive during the
            # subscribe round trip would otherwise hand those messages out twice).
            self._queue.settle()
            self._queue.remove_where(lambda m: m.received_by is self)
        rid = self._core.next_request_id()
        cmd = subscribe_command(
            self._config,
            self.topic,
            self.subscription,
            self.consumer_id,
            rid,
            self.consumer_name,
            self._subscribe_start(),
        )
        close = client_commands.close_consumer
        await self._register_on(cnx, cnx.consumers, self.consumer_id, (cmd, rid), close)
        if self._closing:  # closed while it subscribed: not left registered on the broker
            cnx.consumers.pop(self.consumer_id, None)
            cnx.write_command(close(self.consumer_id, self._core.next_request_id()))
            return
        self._queue.settle()  # count what other threads took before the permits start over
        self._cnx = cnx
        log.info("%r subscribed", self)
        self._queue.remove_where(lambda m: m.received_by is self)
        self._forget_deliveries()
        self._permits = 0
        if self._queue_size > 0:
            cnx.write_command(client_commands.flow(self.consumer_id, self._queue_size))
        elif self._zero_waiting:  # a receive still waits: ask again on the new connection
            cnx.write_command(client_commands.flow(self.consumer_id, 1))
        self._deliveries.flush_acks()

    # --- incoming ---------------------------------------------------------------------------

    def request_one(self) -> None:
        """(Zero receiver queue) A receive waits: ask the broker for one message."""
        if self._queue_size > 0 or self._closed:
            return
        self._zero_waiting = True
        self._write(client_commands.flow(self.consumer_id, 1))

    def on_message(self, command: pb.CommandMessage, entry: bytes) -> None:
        self._zero_waiting = False
        mid = command.message_id
        ledger, entry_id = signed_64(mid.ledgerId), signed_64(mid.entryId)
        redelivery = command.redelivery_count
        try:
            parsed = parse_entry(entry)
            meta = parsed.metadata
            payload: bytes | memoryview = parsed.payload
            msg_id = MessageId.from_parts(
                ledger, entry_id, self.partition, topic=self.topic, service=self._core.service
            )
            context, sealed = None, False
            if meta.encryption_keys:  # each chunk is encrypted on its own
                payload, context = self._decrypt(meta, payload, msg_id)
                if context is None:
                    return
                sealed = context.is_decryption_failed()
            if is_chunk(meta):
                if self._skip(msg_id, meta.publish_time):
                    self._increase_permits(1)
                    return
                whole = self._chunks.add(meta, bytes(payload), msg_id)
                if whole is None:
                    self._increase_permits(1)
                    return
                payload, chunk_ids = whole
                msg_id = MessageId.from_chunks(chunk_ids, self.topic)
            if meta.compression and not sealed:
                payload = decompress(meta.compression, payload, meta.uncompressed_size)
        except (ProtocolError, ValueError) as exc:
            log.error("%r: dropping corrupt message %d:%d: %s", self, ledger, entry_id, exc)
            self._increase_permits(1)
            return
        if not meta.HasField("num_messages_in_batch") or sealed:  # CONSUME: a batch whole
            if msg_id.first_chunk_message_id is None and self._skip(msg_id, meta.publish_time):
                self._increase_permits(1)
                return
            msg = Message.from_wire(meta, None, bytes(payload), msg_id, redelivery, self, context)
            if not self._deliveries.hold_dead_letter(msg_id, [msg], redelivery):
                self._queue.put(msg)
            return
        self._on_batch(command, meta, payload, ledger, entry_id, context)

    def _decrypt(
        self, meta: pb.MessageMetadata, payload: bytes | memoryview, msg_id: MessageId
    ) -> tuple[bytes | memoryview, EncryptionContext | None]:
        """Decrypt an entry: the plaintext and its context, the ciphertext and a context
        saying so (CONSUME), or no context when the entry is dropped (DISCARD, FAIL)."""
        plain = self._decryptor.decrypt(meta, payload) if self._decryptor is not None else None
        if plain is not None:
            return plain, encryption_context(meta, failed=False)
        action = self._config.crypto_failure_action
        if action == ConsumerCryptoFailureAction.CONSUME:
            log.warning("%r: delivering message %s still encrypted", self, msg_id)
            return payload, encryption_context(meta, failed=True)
        if action == ConsumerCryptoFailureAction.DISCARD:
            log.warning("%r: discarding message %s that cannot be decrypted", self, msg_id)
            cmd = client_commands.ack(self.consumer_id, AckType.Individual, [msg_id.to_proto()])
            cmd.ack.validation_error = pb.CommandAck.DecryptionError
            self._write(cmd)
            self._increase_permits(1)
        else:  # FAIL: not delivered (redelivered after the ack timeout, if there is one)
            log.error("%r: message %s cannot be decrypted, not delivered", self, msg_id)
            self._deliveries.undelivered(msg_id)
        return payload, None

    def _on_batch(
        self,
        command: pb.CommandMessage,
        meta: pb.MessageMetadata,
        payload: bytes | memoryview,
        ledger: int,
        entry_id: int,
        context: EncryptionContext | None = None,
    ) -> None:
        redelivery = command.redelivery_count
        count = meta.num_messages_in_batch
        ack_set = list(command.ack_set) if command.ack_set else None
        skipped = 0
        try:
            items = unpack_batch(payload, count)
        except ValueError as exc:
            log.error("%r: dropping corrupt batch %d:%d: %s", self, ledger, entry_id, exc)
            self._increase_permits(count)
            return
        partition, topic, service = self.partition, self.topic, self._core.service
        filtering = self._filter is not None or self._min_publish_time
        make_id = MessageId.from_parts
        entries: list[tuple[pb.SingleMessageMetadata, bytes, MessageId]] = []
        indexes: set[int] = set()
        for index, (single, data) in enumerate(items):
            if ack_set and not (ack_set[index >> 6] >> (index & 63)) & 1:
                skipped += 1
                continue
            msg_id = make_id(ledger, entry_id, partition, index, count, topic, service)
            if filtering and self._skip(msg_id, meta.publish_time):
                skipped += 1
                continue
            entries.append((single, bytes(data), msg_id))
            indexes.add(index)
        messages = (
            Message.from_wire_batch(meta, entries, redelivery, self, context) if entries else []
        )
        if messages and self._deliveries.hold_dead_letter(
            MessageId.from_parts(ledger, entry_id, partition), messages, redelivery
        ):
            skipped += len(messages) - 1
            messages = []
        if messages:
            self._deliveries.delivered_batch((ledger, entry_id), indexes)
            self._queue.put_many(messages)
        if skipped:
            self._increase_permits(skipped)

    def _skip(self, msg_id: MessageId, publish_time: int) -> bool:
        if self._min_publish_time and publish_time < self._min_publish_time:
            return True
        start = self._filter
        if start is None:
            return False
        if start.batch_index() < 0:
            here, there = msg_id.entry_key, start.entry_key
        else:
            here = (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())  # type: ignore[assignment]
            there = (start.ledger_id(), start.entry_id(), start.batch_index())  # type: ignore[assignment]
        if here < there or (here == there and not self._inclusive):
            return True
        self._filter = None  # past the start: stop checking
        return False

    def on_dequeued(self, msg: Message) -> None:
        """The application took ``msg`` from the queue."""
        self.last_dequeued = msg.message_id()
        self._increase_permits(1)
        self._deliveries.dequeued(msg)

    def on_dequeued_many(self, messages: list[Message]) -> None:
        """:meth:`on_dequeued` for several messages taken in this order."""
        if self._closed:
            return
        self.last_dequeued = messages[-1].message_id()
        self._increase_permits(len(messages))
        self._deliveries.dequeued_many(messages)

    def _increase_permits(self, count: int) -> None:
        if self._queue_size <= 0:
            return
        self._permits += count
        if self._permits >= max(1, self._queue_size // 2) and self._write(
            client_commands.flow(self.consumer_id, self._permits)
        ):
            self._permits = 0

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active

    def on_reached_end_of_topic(self) -> None:
        self.reached_end_of_topic = True

    # --- acknowledgments --------------------------------------------------------------------

    def acknowledge(self, msg_id: MessageId) -> None:
        """Acknowledge one message (a batch entry is acked once all its messages are)."""
        if self._closed:  # _check_open, inlined: this runs once per message
            raise AlreadyClosed("consumer is closed")
        self._deliveries.acknowledge(msg_id)

    def acknowledge_cumulative(self, msg_id: MessageId) -> None:
        """Acknowledge everything up to and including ``msg_id``."""
        self._check_open()
        if self._config.consumer_type in SHARED_TYPES:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared/KeyShared subscriptions"
            )
        self._deliveries.acknowledge_cumulative(msg_id)

    async def acknowledge_in_txn(
        self, msg_id: MessageId, txn: Transaction, cumulative: bool = False
    ) -> None:
        """Acknowledge ``msg_id`` (everything up to it with ``cumulative``) in ``txn``: held
        by the broker until the transaction ends; raises the broker's error."""
        self._check_open()
        check_cumulative_allowed(cumulative, self._config.consumer_type)
        where = (self.topic, self.subscription)
        await send_txn_ack(
            self._core, self._live_connection, self.consumer_id, where, msg_id, txn, cumulative
        )
        self._deliveries.acked_in_txn(msg_id, cumulative)

    def negative_acknowledge(self, msg_id: MessageId, redelivery_count: int = 0) -> None:
        """Ask for redelivery of ``msg_id`` after the negative-ack delay (or backoff)."""
        self._check_open()
        self._deliveries.negative_acknowledge(msg_id, redelivery_count)

    def _forget_deliveries(self) -> None:
        """Everything unacknowledged will come again: drop per-delivery state."""
        self._deliveries.forget()
        self._chunks.clear()

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to send every unacknowledged message again."""
        if not self.connected:
            return
        removed = self._queue.remove_where(lambda m: m.received_by is self)
        self._forget_deliveries()
        self._write(client_commands.redeliver(self.consumer_id))
        if removed:
            self._increase_permits(removed)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("consumer is closed")

    def service_switched(self) -> None:
        self._deliveries.switch_service(self._core.service)

    # --- requests ---------------------------------------------------------------------------

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms).

        As in the official client, after a seek to a message id the messages up to it (or
        before it, with ``start_message_id_inclusive``) are skipped.
        """
        self._check_open()
        cnx = await self._live_connection()
        rid = self._core.next_request_id()
        durable = self._config.durable
        if not durable:  # readers re-subscribe from there (after a time: from the start)
            self._start_id = MessageId.earliest if isinstance(target, int) else target
        inclusive = self._config.start_message_id_inclusive
        cmd, position = seek_command(self.consumer_id, rid, target, inclusive)
        self.last_dequeued = None
        self.latest_at_start = None
        await cnx.request(cmd, rid, self._core.operation_timeout)
        self._queue.remove_where(lambda m: m.received_by is self)
        self._forget_deliveries()
        self._deliveries.reset_acks()
        self.last_dequeued = None
        self._inclusive = inclusive
        self._filter, self._min_publish_time = skip_after_seek(position, durable)

    async def get_last_message_id(self) -> MessageId:
        """Id of the last message stored in the topic (partition)."""
        return (await self.last_and_mark_delete())[0]

    @property
    def seeking_by_time(self) -> bool:
        """(Readers) Sought to a publish time, and nothing read since."""
        return bool(self._min_publish_time) and self.last_dequeued is None

    async def last_and_mark_delete(self) -> tuple[MessageId, MessageId | None]:
        """Id of the last message stored in the topic (partition), and the subscription's
        mark-delete position when the broker gives it."""
        cnx = await self._live_connection()
        rid = self._core.next_request_id()
        cmd = client_commands.get_last_message_id(self.consumer_id, rid)
        resp = await cnx.request(cmd, rid, self._core.operation_timeout)
        answer = resp.get_last_message_id_response
        last = MessageId.from_proto(answer.last_message_id, self.partition, self.topic)
        if not answer.HasField("consumer_mark_delete_position"):
            return last, None
        mark = answer.consumer_mark_delete_position
        return last, MessageId.from_proto(mark, self.partition, self.topic)

    def has_queued_messages(self) -> bool:
        """True if the receiver queue holds messages of this consumer."""
        return any(m.received_by is self for m in self._queue)

    # --- close ------------------------------------------------------------------------------

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker, then close."""
        self._check_open()
        cnx = await self._live_connection()
        rid = self._core.next_request_id()
        await cnx.request(
            client_commands.unsubscribe(self.consumer_id, rid), rid, self._core.operation_timeout
        )
        await self._close(send_close=False)

    async def close(self) -> None:
        """Flush acks and close the consumer on the broker."""
        await self._close(send_close=True)

    async def _close(self, *, send_close: bool) -> None:
        if self._closed:
            return
        self._deliveries.close()
        self._chunks.close()
        self._closed = True
        self._stop_reconnecting()
        self._core.handlers.discard(self)
        log.info("%r closed", self)
        self._queue.remove_where(lambda m: m.received_by is self)
        cnx, self._cnx = self._cnx, None
        if cnx is None or not cnx.is_open:
            return
        cnx.consumers.pop(self.consumer_id, None)
        if send_close:
            rid = self._core.next_request_id()
            cmd = client_commands.close_consumer(self.consumer_id, rid)
            try:
                await cnx.request(cmd, rid, self._core.operation_timeout)
            except PulsarException as exc:
                log.debug("%r: close: %s", self, exc)

    @property
    def is_closed(self) -> bool:
        return self._closed
