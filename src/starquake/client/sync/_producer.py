"""The blocking Producer: sends handed to the loop thread without waiting for it."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from starquake.client import asyncio as aio
from starquake.client.api._async_handles import AnyProducer
from starquake.client.api._options import MESSAGE_OPTIONS, build_message
from starquake.client.base._enums import (
    Result,
)
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import MessageId
from starquake.client.core._interrupts import acquire as acquire_interruptibly
from starquake.client.exceptions import (
    Interrupted,
    ProducerQueueIsFull,
    PulsarException,
)
from starquake.client.producer._outgoing import OutgoingMessage
from starquake.client.producer._producer import ProducerImpl
from starquake.client.sync._loop import ON_LOOP, LoopThread, Mailbox, PendingSend, Waiter
from starquake.client.sync._transaction import Transaction, core_transaction

log = logging.getLogger(CLIENT_LOGGER_NAME)
R = TypeVar("R")
SendCallback = Callable[[Result, MessageId | None], None]


class _Sent:
    """Done-callback of one send's future: frees its queue slot, then reports the result."""

    __slots__ = ("callback", "slots", "waiter")

    def __init__(
        self,
        slots: threading.Semaphore | None,
        callback: SendCallback | None,
        waiter: Waiter | None,
    ) -> None:
        self.slots = slots
        self.callback = callback
        self.waiter = waiter

    def __call__(self, fut: asyncio.Future[MessageId]) -> None:
        if self.slots is not None:
            self.slots.release()
        cancelled = fut.cancelled()
        error = concurrent.futures.CancelledError() if cancelled else fut.exception()
        if self.waiter is not None:
            self.waiter.set(None if error is not None else fut.result(), error)
        elif self.callback is not None:
            if error is None:
                _invoke(self.callback, Result.Ok, fut.result())
            else:
                _invoke(self.callback, _result_of(error), None)


def acquire_slot(slots: threading.Semaphore) -> None:
    """Wait for room in a full producer queue (``block_if_queue_full``)."""
    try:
        acquire_interruptibly(slots)
    except KeyboardInterrupt:  # Ctrl-C while waiting, as the official client reports it
        raise Interrupted("interrupted while waiting for room in the producer queue") from None


def _result_of(error: BaseException) -> Result:
    if isinstance(error, PulsarException):
        return error.result
    if isinstance(error, concurrent.futures.CancelledError):
        return Result.Interrupted
    return Result.UnknownError


def _max_pending(impl: AnyProducer) -> int:
    """How many messages the core lets ``impl`` hold pending (0: no limit applies)."""
    if isinstance(impl, ProducerImpl):
        return impl.max_pending_messages
    return sum(p.max_pending_messages for p in impl.producers)


class Producer:
    """Blocking producer; create it with :meth:`Client.create_producer`.

    Sends are queued in ``_items`` by the calling threads and moved into the core by the loop
    (:meth:`_drain`), in queue order, one wake-up per burst. ``_slots`` mirrors the core's
    pending-message limit on the caller side: a send takes a slot first (waiting for one
    with ``block_if_queue_full``) and the loop frees it when the send completes, after the
    core freed its own, so the core never finds a non-partitioned producer full.
    """

    def __init__(self, runner: LoopThread, inner: aio.Producer, block: bool) -> None:
        self._runner = runner
        self._inner = inner
        self._impl = inner.impl
        self._block = block
        limit = _max_pending(inner.impl)
        self._slots = threading.Semaphore(limit) if limit > 0 else None
        self._items: collections.deque[PendingSend] = collections.deque()
        self._mailbox = Mailbox(runner.loop, self._drain, 0.0)
        self._stalled: asyncio.Task[None] | None = None  # loop only

    def topic(self) -> str:
        """The topic this producer publishes to."""
        return self._inner.topic()

    def producer_name(self) -> str:
        """The producer name."""
        return self._inner.producer_name()

    def last_sequence_id(self) -> int:
        """Sequence id of the last message confirmed by the broker (-1 if none)."""
        return self._inner.last_sequence_id()

    def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
        txn: Transaction | None = None,
    ) -> MessageId:
        """Publish a message and block until the broker stored it; returns its id. With
        ``txn``, the message is part of that transaction (visible once it commits)."""
        msg = build_message(self._inner.schema, MESSAGE_OPTIONS, locals())
        msg.txn = core_transaction(txn)
        if self._runner.in_loop_thread():
            raise RuntimeError(ON_LOOP)
        slots = self._slots
        if slots is not None and not slots.acquire(False):
            if not self._block:
                raise ProducerQueueIsFull("producer queue is full")
            acquire_slot(slots)
        waiter = Waiter()
        self._items.append((msg, None, waiter))
        self._mailbox.wake()
        return waiter.wait()

    def send_async(
        self,
        content: Any,
        callback: SendCallback | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
        txn: Transaction | None = None,
    ) -> None:
        """Queue a message; ``callback(result, message_id)`` runs once the broker answered
        (``txn``: the transaction the message is part of).

        With ``block_if_queue_full`` this waits while ``max_pending_messages`` are pending;
        otherwise a full queue is reported to the callback (``Result.ProducerQueueIsFull``).
        The callback runs on the client's I/O thread and must not block on the client.
        """
        msg = build_message(self._inner.schema, MESSAGE_OPTIONS, locals())
        msg.txn = core_transaction(txn)
        slots = self._slots
        if slots is not None and not slots.acquire(False):
            if not self._block:
                self._items.append((None, callback, None))
                self._mailbox.wake()
                return
            if self._runner.in_loop_thread():
                raise RuntimeError(ON_LOOP)
            acquire_slot(slots)
        self._items.append((msg, callback, None))
        self._mailbox.wake()

    # --- loop side --------------------------------------------------------------------------

    def _drain(self) -> None:
        """(Loop) Hand the queued sends to the core, in order, until the queue is empty or
        the core is full (a partition of a partitioned producer, or a ``send`` racing
        ``send_async``), in which case a task waits for space and carries on.
        """
        if self._stalled is not None:
            return
        items = self._items
        impl = self._impl
        slots = self._slots
        while items:
            msg, callback, waiter = items.popleft()
            if msg is None:
                _invoke(callback, Result.ProducerQueueIsFull, None)
                continue
            if msg.txn is not None:  # it registers its partition with the transaction first
                coro = self._send_when_space(msg, callback, waiter)
                self._stalled = self._runner.loop.create_task(coro)
                return
            try:
                fut = impl.send_nowait(msg)
            except ProducerQueueIsFull as exc:
                if self._block:
                    coro = self._send_when_space(msg, callback, waiter)
                    self._stalled = self._runner.loop.create_task(coro)
                    return
                self._failed(exc, callback, waiter)
                continue
            except Exception as exc:
                self._failed(exc, callback, waiter)
                continue
            fut.add_done_callback(_Sent(slots, callback, waiter))

    async def _send_when_space(
        self, msg: OutgoingMessage, callback: SendCallback | None, waiter: Waiter | None
    ) -> None:
        try:
            fut = await self._impl.send_async(msg)
        except Exception as exc:
            self._failed(exc, callback, waiter)
        else:
            fut.add_done_callback(_Sent(self._slots, callback, waiter))
        finally:
            self._stalled = None
        self._drain()

    def _failed(
        self, error: BaseException, callback: SendCallback | None, waiter: Waiter | None
    ) -> None:
        if self._slots is not None:
            self._slots.release()
        if waiter is not None:
            waiter.set(None, error)
        else:
            _invoke(callback, _result_of(error), None)

    async def _submit_all(self) -> None:
        """(Loop) Hand over everything queued so far, waiting for space if needed."""
        while True:
            self._drain()
            stalled = self._stalled
            if stalled is None:
                return
            await asyncio.wait([stalled])

    async def _flush(self) -> None:
        await self._submit_all()
        await self._inner.flush()

    async def _close(self) -> None:
        await self._submit_all()
        await self._inner.close()

    def hand_over(self) -> None:
        """(Loop) Hand the sends callers queued to the core (before the client closes)."""
        self._drain()

    async def handed_over(self) -> None:
        """(Loop) Return once every send queued so far is in the core (a transaction's sends
        are then counted by it: its commit waits for them)."""
        await self._submit_all()

    # --- blocking calls ---------------------------------------------------------------------

    def flush(self) -> None:
        """Send batched messages now and wait until all pending ones are confirmed."""
        self._runner.run(self._flush())

    def close(self) -> None:
        """Flush and close the producer."""
        self._runner.run(self._close())

    def is_connected(self) -> bool:
        """True while connected to the broker."""
        return self._inner.is_connected()


def _invoke(callback: SendCallback | None, result: Result, msg_id: MessageId | None) -> None:
    if callback is None:
        return
    try:
        callback(result, msg_id)
    except Exception:
        log.exception("send callback raised")
