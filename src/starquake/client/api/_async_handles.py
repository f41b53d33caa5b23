"""The asyncio producer, consumer and reader handles the asyncio ``Client`` returns."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from starquake.client.api._options import ASYNC_MESSAGE_OPTIONS, build_message
from starquake.client.base._arg_checks import (
    DEFAULT_BATCH_RECEIVE_POLICY,
    check_type,
    check_type_or_none,
    delay_ms_of,
    message_id_of,
    seek_target,
)
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._decoding import ValueDecoding
from starquake.client.consumer._multi import ConsumerFront
from starquake.client.core._transaction import Transaction
from starquake.client.exceptions import AlreadyClosed, OperationNotSupported
from starquake.client.producer._outgoing import OutgoingMessage
from starquake.client.producer._partitioned import PartitionedProducer
from starquake.client.producer._producer import ProducerImpl
from starquake.protocol.batch_rows import PackedBatch

AnyProducer = ProducerImpl | PartitionedProducer


class Producer:
    """An asyncio producer; create it with :meth:`Client.create_producer`."""

    def __init__(self, impl: AnyProducer, topic: str, schema: Any) -> None:
        self._impl = impl
        self._topic = topic
        self._schema = schema

    @property
    def impl(self) -> AnyProducer:
        """The core producer this wraps (for the blocking wrapper)."""
        return self._impl

    @property
    def schema(self) -> Any:
        """The schema that encodes the values sent (None: bytes)."""
        return self._schema

    async def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
        txn: Transaction | None = None,
    ) -> MessageId:
        """Send a message and return its id once the broker has stored it (the arguments of
        the blocking ``Producer.send``, with ``disable_replication`` unset by default, as in
        the official asyncio client); ``txn``: the transaction it belongs to."""
        msg = build_message(self._schema, ASYNC_MESSAGE_OPTIONS, locals())
        msg.txn = txn
        return await self._impl.send(msg)

    async def send_outgoing(self, msg: OutgoingMessage) -> MessageId:
        """Send a prepared :class:`OutgoingMessage`."""
        return await self._impl.send(msg)

    def send_nowait(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue a prepared message at once and return the future of its id; raises
        ``ProducerQueueIsFull`` when ``max_pending_messages`` are already pending (a Starquake
        extension for bulk writers, cheaper than :meth:`send_queued`)."""
        return self._impl.send_nowait(msg)

    @property
    def is_partitioned(self) -> bool:
        """Whether this producer writes to a partitioned topic (a Starquake extension)."""
        return not isinstance(self._impl, ProducerImpl)

    def send_batch(self, msgs: list[OutgoingMessage]) -> asyncio.Future[MessageId]:
        """Send prepared messages with explicit, increasing sequence ids as one batch entry
        now (a Starquake extension for bulk writers; producers of one partition only). Raises
        ``ProducerQueueIsFull`` when they do not fit in ``max_pending_messages``."""
        if not isinstance(self._impl, ProducerImpl):
            raise OperationNotSupported("send_batch needs a producer of a single partition")
        return self._impl.send_batch(msgs)

    def send_packed(
        self, batch: PackedBatch, txn: Transaction | None = None
    ) -> asyncio.Future[MessageId]:
        """Send a batch payload built from columns (``starquake.protocol.batch_rows.pack_rows``)
        as one batch entry now (a Starquake extension for bulk writers, as :meth:`send_batch`);
        ``txn``: the transaction it belongs to, with which :meth:`topic` must be registered
        already (``await txn.register_produced_topic(producer.topic())``)."""
        if not isinstance(self._impl, ProducerImpl):
            raise OperationNotSupported("send_packed needs a producer of a single partition")
        return self._impl.send_packed(batch, txn)

    @property
    def registrations(self) -> int:
        """How many times the broker accepted this producer: more than 1 after a reconnection,
        which resends what was not confirmed (a Starquake extension; producers of one
        partition only, else 0)."""
        return self._impl.registrations if isinstance(self._impl, ProducerImpl) else 0

    async def send_queued(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue a prepared message and return the future of its id, without waiting for the
        broker (a Starquake extension for bulk writers: many sends in flight, in order). Waits
        only for queue space when the producer has ``block_if_queue_full``."""
        return await self._impl.send_async(msg)

    async def flush(self) -> None:
        """Send batched messages now and wait until all pending ones are confirmed."""
        await self._impl.flush()

    async def close(self) -> None:
        """Flush and close the producer (AlreadyClosed if it was, as the official client)."""
        if self._impl.is_closed:
            raise AlreadyClosed("producer already closed")
        await self._impl.close()

    def topic(self) -> str:
        """The topic this producer publishes to."""
        return self._topic

    def producer_name(self) -> str:
        """The producer name (chosen by the broker unless given)."""
        return self._impl.producer_name

    def last_sequence_id(self) -> int:
        """Sequence id of the last message confirmed by the broker (-1 if none)."""
        return self._impl.last_sequence_id

    def is_connected(self) -> bool:
        """True while connected to the broker."""
        return self._impl.connected and not self._impl.is_closed


class Receiving:
    """What the asyncio consumer and reader share: a consumer front and the value decoding."""

    def __init__(self, front: ConsumerFront, schema: Any) -> None:
        self._front = front
        self._schema = schema
        self._decoding = ValueDecoding(schema, front.lookup)

    async def _next(self, timeout_millis: int | None) -> Message:
        timeout = None if timeout_millis is None else timeout_millis / 1000
        return await self._decoding.prepare(await self._front.receive(timeout))

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or a publish timestamp (ms)."""
        await self._front.seek(seek_target(messageid))

    async def close(self) -> None:
        """Close (a consumer's pending acks are flushed first)."""
        await self._front.close()

    def topic(self) -> str:
        """The topic (or a consumer's pattern)."""
        return self._front.topic

    def is_connected(self) -> bool:
        """True while every inner consumer is connected."""
        return self._front.connected and not self._front.is_closed

    @property
    def front(self) -> ConsumerFront:
        """The implementation object (for the blocking wrapper)."""
        return self._front

    @property
    def schema(self) -> Any:
        """The schema that decodes the values received (None: bytes)."""
        return self._schema


class Consumer(Receiving):
    """An asyncio consumer; create it with :meth:`Client.subscribe`."""

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """Wait for the next message (raises Timeout after ``timeout_millis`` if given)."""
        front = self._front
        if front.config.receiver_queue_size == 0 and not len(front.queue):
            for inner in list(front.consumers.values()):  # no prefetching: ask for one
                inner.request_one()
        return await self._next(timeout_millis)

    async def batch_receive(self) -> list[Message]:
        """Messages received together, within the subscription's ``batch_receive_policy``
        (default: up to 10 MB, waiting at most 100 ms); possibly an empty list.
        """
        policy = self._front.config.batch_receive_policy or DEFAULT_BATCH_RECEIVE_POLICY
        messages = await self._front.batch_receive(
            policy.max_num_message, policy.max_num_bytes, policy.timeout_ms
        )
        return [await self._decoding.prepare(m) for m in messages]

    async def reconsume_later(
        self,
        message: Message,
        delay: int | timedelta,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Have ``message`` delivered again after ``delay`` (ms or timedelta) through the retry
        letter topic, then acknowledge it (needs ``enable_retry=True``; a Starquake extension).
        """
        check_type(Message, message, "message")
        check_type_or_none(dict, properties, "properties")
        await self._front.reconsume_later(message, delay_ms_of(delay), properties)

    async def acknowledge(
        self, message: Message | MessageId, txn: Transaction | None = None
    ) -> None:
        """Acknowledge one message (sent with the next ack group); with ``txn``, in that
        transaction: sent at once, returns when the broker holds it (raises its error)."""
        if txn is not None:
            await self._front.acknowledge_in_txn(message, txn, cumulative=False)
            return
        self._front.acknowledge(message_id_of(message))

    async def acknowledge_cumulative(
        self, message: Message | MessageId, txn: Transaction | None = None
    ) -> None:
        """Acknowledge all messages up to and including ``message`` (``txn``: in that
        transaction, as :meth:`acknowledge`)."""
        if txn is not None:
            await self._front.acknowledge_in_txn(message, txn, cumulative=True)
            return
        self._front.acknowledge_cumulative(message_id_of(message))

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have ``message`` redelivered after the negative-ack delay."""
        self._front.negative_acknowledge(message_id_of(message))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacknowledged message."""
        self._front.redeliver_unacknowledged_messages()

    async def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer."""
        await self._front.unsubscribe()

    async def get_last_message_id(self) -> MessageId:
        """Id of the last message in the topic."""
        return await self._front.get_last_message_id()

    def subscription_name(self) -> str:
        """The subscription name."""
        return self._front.subscription

    def consumer_name(self) -> str:
        """The consumer name."""
        return self._front.consumer_name


class Reader(Receiving):
    """An asyncio reader; create it with :meth:`Client.create_reader`."""

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """Wait for the next message (raises Timeout after ``timeout_millis`` if given)."""
        return await self._next(timeout_millis)

    async def has_message_available(self) -> bool:
        """True if a message after the last one read is available."""
        return await self._front.has_message_available()
