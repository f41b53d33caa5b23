"""What a consumer remembers of delivered messages until they are acknowledged.

Acknowledgments (grouped, batch indexes), negative acknowledgments, the ack timeout and dead
letter candidates, and the redeliveries they lead to, for one consumer of one partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from starquake.client.base._config import ConsumerConfig
from starquake.client.base._enums import ConsumerType
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._acks import AckGroupingTracker, NegativeAcksTracker
from starquake.client.consumer._timeouts import EntryKey, UnackedMessageTracker
from starquake.protocol import client_commands
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.consumer._dlq import DeadLetterHandler

_I64_MAX = (1 << 63) - 1
SHARED_TYPES = (ConsumerType.Shared, ConsumerType.KeyShared)


def signed_64(value: int) -> int:
    """An unsigned 64-bit wire value as the signed int64 it stands for."""
    return value - (1 << 64) if value > _I64_MAX else value


class DeliveryTracker:
    """The acknowledgment state of one consumer's deliveries and the redeliveries it asks for.

    ``write`` sends a command on the consumer's connection (False when there is none),
    ``redeliver_all`` asks for every unacknowledged message again (Exclusive and Failover
    subscriptions cannot redeliver single messages), ``earn_permits`` gives flow permits back
    for messages never delivered to the application.
    """

    def __init__(
        self,
        consumer_id: int,
        topic: str,
        config: ConsumerConfig,
        *,
        write: Callable[[pb.BaseCommand], bool],
        redeliver_all: Callable[[], None],
        earn_permits: Callable[[int], None],
        dead_letter: DeadLetterHandler | None,
    ) -> None:
        self._consumer_id = consumer_id
        self._topic = topic
        self._config = config
        self._write = write
        self._redeliver_all = redeliver_all
        self._earn_permits = earn_permits
        self._shared = config.consumer_type in SHARED_TYPES
        self._batch_index_acks = config.batch_index_ack_enabled
        self._batch_pending: dict[EntryKey, set[int]] = {}
        self._service = 0  # the client's cluster (see MessageId.service)
        self._acks = AckGroupingTracker(
            consumer_id, write, config.ack_grouping_time_ms, config.ack_grouping_max_size
        )
        self._nacks = NegativeAcksTracker(self.redeliver)
        self._unacked: UnackedMessageTracker | None = None
        if config.unacked_messages_timeout_ms:
            self._unacked = UnackedMessageTracker(
                config.unacked_messages_timeout_ms,
                config.tick_duration_ms,
                self.redeliver,
                config.ack_timeout_redelivery_backoff,
            )
        # Dead letter candidates (Shared / Key_Shared only): entry -> its delivered messages.
        self._dead_letter = dead_letter if self._shared else None
        self._dlq_candidates: dict[EntryKey, list[Message]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # --- deliveries -------------------------------------------------------------------------

    def delivered_batch(self, key: EntryKey, indexes: set[int]) -> None:
        """The messages ``indexes`` of batch entry ``key`` were queued for the application."""
        self._batch_pending[key] = indexes

    def dequeued(self, msg: Message) -> None:
        """The application took ``msg``: the ack timeout starts."""
        if self._unacked is not None:
            self._unacked.add(msg.message_id(), msg.redelivery_count())

    def dequeued_many(self, messages: list[Message]) -> None:
        """:meth:`dequeued` for several messages."""
        unacked = self._unacked
        if unacked is not None:
            for msg in messages:
                unacked.add(msg.message_id(), msg.redelivery_count())

    def undelivered(self, msg_id: MessageId) -> None:
        """``msg_id`` could not be delivered (not decrypted): redeliver it after the ack
        timeout, if there is one."""
        if self._unacked is not None:
            self._unacked.add(msg_id)

    def hold_dead_letter(self, entry: MessageId, messages: list[Message], count: int) -> bool:
        """Remember dead letter candidates; True if they must not be delivered at all."""
        handler = self._dead_letter
        if handler is None:
            return False
        if count < handler.max_redeliver_count:
            return False
        self._dlq_candidates[entry.entry_key] = messages
        if count == handler.max_redeliver_count:
            return False
        self.redeliver([entry])
        self._earn_permits(1)
        return True

    def forget(self) -> None:
        """Everything unacknowledged will come again: drop per-delivery state."""
        self._batch_pending.clear()
        self._dlq_candidates.clear()
        if self._unacked is not None:
            self._unacked.clear()

    # --- acknowledgments --------------------------------------------------------------------

    def acknowledge(self, msg_id: MessageId) -> None:
        """Acknowledge one message (a batch entry is acked once all its messages are)."""
        # once per message: each attribute and call read once
        if 0 <= msg_id.service != self._service:
            return  # delivered by another cluster (see switch_service)
        index = msg_id.batch_index()
        if index >= 0 and msg_id.batch_size > 0:
            key = msg_id.entry_key
            pending = self._batch_pending.get(key)
            if pending is None:
                pending = self._batch_pending[key] = set(range(msg_id.batch_size))
            pending.discard(index)
            if pending:
                if self._batch_index_acks:
                    # the broker keeps which messages of the batch are acknowledged, so they
                    # are not delivered again after a reconnect or to another consumer
                    self._acks.add_individual([_batch_index_ack(msg_id, pending)])
                return
            del self._batch_pending[key]
        self._dlq_candidates.pop(msg_id.entry_key, None)
        if self._unacked is not None:
            self._unacked.remove(msg_id.entry_key)
        self._acks.add_individual([c.to_proto(with_batch=False) for c in msg_id.chunk_message_ids])

    def acknowledge_cumulative(self, msg_id: MessageId) -> None:
        """Acknowledge everything up to and including ``msg_id``."""
        if 0 <= msg_id.service != self._service:
            return
        target = msg_id
        if (
            msg_id.batch_index() >= 0
            and msg_id.batch_size > 0
            and (msg_id.batch_index() < msg_id.batch_size - 1)
        ):  # the batch is not complete: ack up to the previous entry
            target = MessageId.from_parts(
                msg_id.ledger_id(), msg_id.entry_id() - 1, msg_id.partition()
            )
        for key in [k for k in self._batch_pending if k <= target.entry_key]:
            del self._batch_pending[key]
        for key in [k for k in self._dlq_candidates if k <= target.entry_key]:
            del self._dlq_candidates[key]
        if self._unacked is not None:
            self._unacked.remove_up_to(target.entry_key)
        self._acks.add_cumulative(target.to_proto(with_batch=False))

    def acked_in_txn(self, msg_id: MessageId, cumulative: bool) -> None:
        """``msg_id`` (up to it: ``cumulative``) was acknowledged in a transaction: no ack
        timeout redelivers it (an abort has the broker deliver it again)."""
        if self._unacked is not None:
            if cumulative:
                self._unacked.remove_up_to(msg_id.entry_key)
            else:
                self._unacked.remove(msg_id.entry_key)
        self._dlq_candidates.pop(msg_id.entry_key, None)

    def negative_acknowledge(self, msg_id: MessageId, redelivery_count: int = 0) -> None:
        """Ask for redelivery of ``msg_id`` after the negative-ack delay (or backoff)."""
        if 0 <= msg_id.service != self._service:
            return
        self._batch_pending.pop(msg_id.entry_key, None)
        if self._unacked is not None:
            self._unacked.remove(msg_id.entry_key)
        backoff = self._config.negative_ack_redelivery_backoff
        delay = (
            backoff.next(redelivery_count)
            if backoff is not None
            else self._config.negative_ack_redelivery_delay_ms
        )
        self._nacks.add(msg_id, delay)

    def discard_chunks(self, ids: list[MessageId], acknowledge: bool) -> None:
        """Chunks of a message the assembler gave up on: ack silently or redeliver later."""
        if acknowledge:
            self._acks.add_individual([mid.to_proto(with_batch=False) for mid in ids])
        else:
            delay = self._config.negative_ack_redelivery_delay_ms
            for mid in ids:
                self._nacks.add(mid, delay)

    # --- redelivery -------------------------------------------------------------------------

    def redeliver(self, ids: list[MessageId]) -> None:
        """Redeliver these (nack or ack timeout), or dead-letter the candidates among them."""
        if not self._shared:
            self._redeliver_all()
            return
        wire: list[pb.MessageIdData] = []
        for mid in ids:
            messages = self._dlq_candidates.pop(mid.entry_key, None)
            if messages is not None and self._dead_letter is not None:
                self._spawn(self._send_to_dead_letter(mid, messages))
            else:
                wire.extend(c.to_proto(with_batch=False) for c in mid.chunk_message_ids)
        if wire:
            self._write(client_commands.redeliver(self._consumer_id, wire))

    async def _send_to_dead_letter(self, mid: MessageId, messages: list[Message]) -> None:
        assert self._dead_letter is not None
        if await self._dead_letter.send_to_dead_letter(messages, self._topic) and not self._closed:
            for msg in messages:
                self.acknowledge(msg.message_id())
        elif not self._closed:
            ids = [c.to_proto(with_batch=False) for c in mid.chunk_message_ids]
            self._write(client_commands.redeliver(self._consumer_id, ids))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def flush_acks(self) -> None:
        """Send the grouped acknowledgments now (on a new connection)."""
        self._acks.flush()

    def switch_service(self, service: int) -> None:
        """The client moved to another cluster (``service``): the same ledger and entry ids
        name other messages there, so the grouped acknowledgments not sent yet are dropped,
        and later (negative) acknowledgments of ids the old cluster delivered are not sent
        (that cluster redelivers those messages after a switch back)."""
        self._service = service
        self._acks.reset()

    def reset_acks(self) -> None:
        """Drop the grouped acknowledgments not sent yet (after a seek)."""
        self._acks.reset()

    def close(self) -> None:
        """Stop the timers and the dead letter sends (pending grouped acks are sent first)."""
        self._acks.close()
        self._nacks.close()
        if self._unacked is not None:
            self._unacked.close()
        for task in list(self._tasks):
            task.cancel()
        self._closed = True


def _batch_index_ack(msg_id: MessageId, unacked: set[int]) -> pb.MessageIdData:
    """The ack of a batch entry's acknowledged messages: ``ack_set`` has a bit set for each
    message still unacknowledged (64 per word, lowest bit first)."""
    data = msg_id.to_proto(with_batch=False)
    data.batch_size = msg_id.batch_size
    words = [0] * ((msg_id.batch_size + 63) // 64)
    for index in unacked:
        words[index >> 6] |= 1 << (index & 63)
    data.ack_set.extend(signed_64(w) for w in words)  # int64 on the wire
    return data
