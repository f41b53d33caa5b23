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

from starquake.client import _commands
from starquake.client._acks import AckGroupingTracker, NegativeAcksTracker
from starquake.client._config import ConsumerConfig
from starquake.client._connection import ClientConnection
from starquake.client._enums import ConsumerType, KeySharedMode
from starquake.client._handler import ClientCore, HandlerBase
from starquake.client._message import Message, MessageId
from starquake.client._queue import MessageQueue
from starquake.client.exceptions import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    NotConnected,
    PulsarException,
    Timeout,
)
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.batch import unpack_batch
from starquake.protocol.compression import decompress
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import parse_entry

log = logging.getLogger("starquake.client")
_I64_MAX = (1 << 63) - 1
_SHARED = (ConsumerType.Shared, ConsumerType.KeyShared)


def _signed(value: int) -> int:
    return value - (1 << 64) if value > _I64_MAX else value


def is_earliest(mid: MessageId) -> bool:
    return mid.ledger_id() < 0 and mid.entry_id() < 0


def is_latest(mid: MessageId) -> bool:
    return mid.ledger_id() == _I64_MAX and mid.entry_id() == _I64_MAX


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
        self._batch_pending: dict[tuple[int, int], set[int]] = {}
        self._acks = AckGroupingTracker(
            self.consumer_id, self._write, config.ack_grouping_time_ms, config.ack_grouping_max_size
        )
        self._nacks = NegativeAcksTracker(config.negative_ack_redelivery_delay_ms, self._redeliver)
        self.is_active = True
        self.reached_end_of_topic = False
        self._closed = False

    def __repr__(self) -> str:
        return f"Consumer({self.topic}, {self.subscription})"

    # --- connection -------------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe (raises on failure)."""
        self._core.handlers.add(self)
        try:
            await self._start()
        except BaseException:
            self._core.handlers.discard(self)
            self._closing = True
            raise

    def _write(self, cmd: pb.BaseCommand) -> bool:
        cnx = self._cnx
        if cnx is None or not cnx.is_open:
            return False
        cnx.write_command(cmd)
        return True

    def _key_shared_meta(self) -> pb.KeySharedMeta | None:
        if self._config.consumer_type != ConsumerType.KeyShared:
            return None
        policy = self._config.key_shared_policy
        meta = pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT)
        if policy is not None:
            meta.allowOutOfOrderDelivery = policy.allow_out_of_order_delivery
            if policy.key_shared_mode == KeySharedMode.Sticky:
                meta.keySharedMode = pb.STICKY
                for start, end in policy.sticky_ranges or ():
                    meta.hashRanges.add(start=start, end=end)
        else:
            meta.allowOutOfOrderDelivery = False
        return meta

    def _subscribe_start(self) -> pb.MessageIdData | None:
        if self._config.durable:
            return None
        if self.last_dequeued is not None:  # resume a reader after the last message it handed out
            self._filter = self.last_dequeued
            self._inclusive = False
            return self.last_dequeued.to_proto(with_batch=False)
        start = self._start_id or MessageId.latest
        return start.to_proto(with_batch=False)

    async def _register(self, cnx: ClientConnection) -> None:
        rid = self._core.next_request_id()
        cmd = _commands.subscribe(
            self.topic,
            self.subscription,
            int(self._config.consumer_type),
            self.consumer_id,
            rid,
            consumer_name=self.consumer_name,
            durable=self._config.durable,
            initial_position=int(self._config.initial_position),
            read_compacted=self._config.is_read_compacted,
            metadata=self._config.properties,
            start_message_id=self._subscribe_start(),
            key_shared_meta=self._key_shared_meta(),
            replicate_subscription_state=self._config.replicate_subscription_state_enabled,
        )
        cnx.consumers[self.consumer_id] = self
        try:
            await cnx.request(cmd, rid, self._core.operation_timeout)
        except Timeout:
            cnx.consumers.pop(self.consumer_id, None)
            close = _commands.close_consumer(self.consumer_id, self._core.next_request_id())
            cnx.write_command(close)
            raise
        except BaseException:
            cnx.consumers.pop(self.consumer_id, None)
            raise
        if self._closing:
            cnx.consumers.pop(self.consumer_id, None)
            return
        self._cnx = cnx
        self._queue.remove_where(lambda m: m._consumer is self)
        self._batch_pending.clear()
        self._permits = 0
        if self._queue_size > 0:
            cnx.write_command(_commands.flow(self.consumer_id, self._queue_size))
        self._acks.flush()

    # --- incoming ---------------------------------------------------------------------------

    def on_message(self, command: pb.CommandMessage, entry: bytes) -> None:
        mid = command.message_id
        ledger, entry_id = _signed(mid.ledgerId), _signed(mid.entryId)
        try:
            parsed = parse_entry(entry)
            meta = parsed.metadata
            payload: bytes | memoryview = parsed.payload
            if meta.compression:
                payload = decompress(meta.compression, payload, meta.uncompressed_size)
        except (ProtocolError, ValueError) as exc:
            log.error("%r: dropping corrupt message %d:%d: %s", self, ledger, entry_id, exc)
            self._increase_permits(1)
            return
        redelivery = command.redelivery_count
        if not meta.HasField("num_messages_in_batch"):
            msg_id = MessageId._make(ledger, entry_id, self.partition, topic=self.topic)
            if self._skip(msg_id, meta.publish_time):
                self._increase_permits(1)
                return
            self._queue.put(self._single_message(meta, bytes(payload), msg_id, redelivery))
            return
        count = meta.num_messages_in_batch
        ack_set = list(command.ack_set)
        skipped = 0
        delivered: set[int] = set()
        try:
            items = unpack_batch(payload, count)
        except ValueError as exc:
            log.error("%r: dropping corrupt batch %d:%d: %s", self, ledger, entry_id, exc)
            self._increase_permits(count)
            return
        for index, (single, data) in enumerate(items):
            if ack_set and not (ack_set[index >> 6] >> (index & 63)) & 1:
                skipped += 1
                continue
            msg_id = MessageId._make(ledger, entry_id, self.partition, index, count, self.topic)
            if self._skip(msg_id, meta.publish_time):
                skipped += 1
                continue
            delivered.add(index)
            self._queue.put(self._batched_message(meta, single, bytes(data), msg_id, redelivery))
        if delivered:
            self._batch_pending[(ledger, entry_id)] = delivered
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

    def _single_message(
        self, meta: pb.MessageMetadata, data: bytes, msg_id: MessageId, redelivery: int
    ) -> Message:
        return Message(
            data,
            properties={kv.key: kv.value for kv in meta.properties},
            partition_key=meta.partition_key,
            ordering_key=meta.ordering_key,
            publish_timestamp=meta.publish_time,
            event_timestamp=meta.event_time,
            message_id=msg_id,
            topic_name=self.topic,
            redelivery_count=redelivery,
            producer_name=meta.producer_name,
            schema_version=meta.schema_version,
            null_value=meta.null_value,
            consumer=self,
        )

    def _batched_message(
        self,
        meta: pb.MessageMetadata,
        single: pb.SingleMessageMetadata,
        data: bytes,
        msg_id: MessageId,
        redelivery: int,
    ) -> Message:
        return Message(
            data,
            properties={kv.key: kv.value for kv in single.properties},
            partition_key=single.partition_key,
            ordering_key=single.ordering_key,
            publish_timestamp=meta.publish_time,
            event_timestamp=single.event_time,
            message_id=msg_id,
            topic_name=self.topic,
            redelivery_count=redelivery,
            producer_name=meta.producer_name,
            schema_version=meta.schema_version,
            null_value=single.null_value,
            consumer=self,
        )

    def on_dequeued(self, msg: Message) -> None:
        """The application took ``msg`` from the queue."""
        self.last_dequeued = msg.message_id()
        self._increase_permits(1)

    def _increase_permits(self, count: int) -> None:
        if self._queue_size <= 0:
            return
        self._permits += count
        if self._permits >= max(1, self._queue_size // 2) and self._write(
            _commands.flow(self.consumer_id, self._permits)
        ):
            self._permits = 0

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active

    def on_reached_end_of_topic(self) -> None:
        self.reached_end_of_topic = True

    # --- acknowledgments --------------------------------------------------------------------

    def acknowledge(self, msg_id: MessageId) -> None:
        """Acknowledge one message (a batch entry is acked once all its messages are)."""
        self._check_open()
        if msg_id.batch_index() >= 0 and msg_id.batch_size > 0:
            key = msg_id.entry_key
            pending = self._batch_pending.get(key)
            if pending is None:
                pending = self._batch_pending[key] = set(range(msg_id.batch_size))
            pending.discard(msg_id.batch_index())
            if pending:
                return
            del self._batch_pending[key]
        self._acks.add_individual([msg_id.to_proto(with_batch=False)])

    def acknowledge_cumulative(self, msg_id: MessageId) -> None:
        """Acknowledge everything up to and including ``msg_id``."""
        self._check_open()
        if self._config.consumer_type in _SHARED:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared/KeyShared subscriptions"
            )
        target = msg_id
        if (
            msg_id.batch_index() >= 0
            and msg_id.batch_size > 0
            and (msg_id.batch_index() < msg_id.batch_size - 1)
        ):  # the batch is not complete: ack up to the previous entry
            target = MessageId._make(msg_id.ledger_id(), msg_id.entry_id() - 1, msg_id.partition())
        for key in [k for k in self._batch_pending if k <= target.entry_key]:
            del self._batch_pending[key]
        self._acks.add_cumulative(target.to_proto(with_batch=False))

    def negative_acknowledge(self, msg_id: MessageId) -> None:
        """Ask for redelivery of ``msg_id`` after the negative-ack delay."""
        self._check_open()
        self._batch_pending.pop(msg_id.entry_key, None)
        self._nacks.add(msg_id.to_proto(with_batch=False))

    def _redeliver(self, ids: list[pb.MessageIdData]) -> None:
        if self._config.consumer_type in _SHARED:
            self._write(_commands.redeliver(self.consumer_id, ids))
        else:
            self.redeliver_unacknowledged_messages()

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to send every unacknowledged message again."""
        if not self.connected:
            return
        removed = self._queue.remove_where(lambda m: m._consumer is self)
        self._batch_pending.clear()
        self._write(_commands.redeliver(self.consumer_id))
        if removed:
            self._increase_permits(removed)

    def flush_acks(self) -> None:
        self._acks.flush()

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("consumer is closed")

    # --- requests ---------------------------------------------------------------------------

    def _live_connection(self) -> ClientConnection:
        cnx = self._cnx
        if cnx is None or not cnx.is_open:
            raise NotConnected(f"{self!r} is not connected")
        return cnx

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms).

        As in the official client, after a seek to a message id the messages up to it (or
        before it, with ``start_message_id_inclusive``) are skipped.
        """
        self._check_open()
        cnx = self._live_connection()
        rid = self._core.next_request_id()
        durable = self._config.durable
        if isinstance(target, int):
            if not durable:  # readers re-subscribe from the start and filter by publish time
                self._start_id = MessageId.earliest
            cmd = _commands.seek(self.consumer_id, rid, publish_time=target)
        else:
            if not durable:
                self._start_id = target
            cmd = _commands.seek(
                self.consumer_id, rid, message_id=target.to_proto(with_batch=False)
            )
        self.last_dequeued = None
        await cnx.request(cmd, rid, self._core.operation_timeout)
        self._queue.remove_where(lambda m: m._consumer is self)
        self._batch_pending.clear()
        self._acks.reset()
        self.last_dequeued = None
        self._inclusive = self._config.start_message_id_inclusive
        if isinstance(target, int):
            self._filter = None
            self._min_publish_time = 0 if durable else target
        else:
            self._min_publish_time = 0
            concrete = not (is_earliest(target) or is_latest(target))
            self._filter = target if concrete else None

    async def get_last_message_id(self) -> MessageId:
        """Id of the last message stored in the topic (partition)."""
        cnx = self._live_connection()
        rid = self._core.next_request_id()
        cmd = _commands.get_last_message_id(self.consumer_id, rid)
        resp = await cnx.request(cmd, rid, self._core.operation_timeout)
        return MessageId.from_proto(
            resp.get_last_message_id_response.last_message_id, self.partition, self.topic
        )

    def has_queued_messages(self) -> bool:
        """True if the receiver queue holds messages of this consumer."""
        return any(m._consumer is self for m in self._queue)

    # --- close ------------------------------------------------------------------------------

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker, then close."""
        self._check_open()
        cnx = self._live_connection()
        rid = self._core.next_request_id()
        await cnx.request(
            _commands.unsubscribe(self.consumer_id, rid), rid, self._core.operation_timeout
        )
        await self._close(send_close=False)

    async def close(self) -> None:
        """Flush acks and close the consumer on the broker."""
        await self._close(send_close=True)

    async def _close(self, *, send_close: bool) -> None:
        if self._closed:
            return
        self._acks.close()
        self._nacks.close()
        self._closed = True
        self._stop_reconnecting()
        self._core.handlers.discard(self)
        self._queue.remove_where(lambda m: m._consumer is self)
        cnx, self._cnx = self._cnx, None
        if cnx is None or not cnx.is_open:
            return
        cnx.consumers.pop(self.consumer_id, None)
        if send_close:
            rid = self._core.next_request_id()
            cmd = _commands.close_consumer(self.consumer_id, rid)
            try:
                await cnx.request(cmd, rid, self._core.operation_timeout)
            except PulsarException as exc:
                log.debug("%r: close: %s", self, exc)

    @property
    def is_closed(self) -> bool:
        return self._closed
