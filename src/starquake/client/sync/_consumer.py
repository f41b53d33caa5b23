"""The blocking Consumer and Reader: messages taken straight from a thread-safe queue."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, Generic, TypeVar

from starquake.client import asyncio as aio
from starquake.client.api._async_handles import Receiving
from starquake.client.base._arg_checks import (
    DEFAULT_BATCH_RECEIVE_POLICY,
    check_c_int,
    check_type_or_none,
    message_id_of,
)
from starquake.client.base._enums import (
    ConsumerType,
    Result,
)
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._consumer import ConsumerImpl
from starquake.client.consumer._decoding import ValueDecoding
from starquake.client.core._queue import ThreadSafeQueue
from starquake.client.exceptions import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    Interrupted,
    InvalidConfiguration,
    PulsarException,
)
from starquake.client.sync._loop import HAND_OVER_DELAY, ON_LOOP, LoopThread, Mailbox
from starquake.client.sync._transaction import Transaction, core_transaction

log = logging.getLogger(CLIENT_LOGGER_NAME)
R = TypeVar("R")
H = TypeVar("H", bound=Receiving)
SendCallback = Callable[[Result, MessageId | None], None]


class _ListenerThread:
    """Feeds a consumer's messages to a ``listener(consumer, message)`` on its own thread."""

    def __init__(self, owner: Any, receive: Callable[[], Message], listener: Any) -> None:
        self._owner = owner
        self._receive = receive
        self._listener = listener
        self.running = threading.Event()
        self.running.set()
        self._thread = threading.Thread(target=self._run, name="starquake-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.running.wait()
            try:
                msg = self._receive()
            except AlreadyClosed:
                return
            except (PulsarException, RuntimeError, concurrent.futures.CancelledError):
                return
            try:
                self._listener(self._owner, msg)
            except Exception:
                log.exception("message listener raised")


# Operations handed to the loop by acknowledge & co: (kind, inner consumer, id, count).
_ACK, _ACK_CUMULATIVE, _NACK, _REDELIVER = range(4)
_Op = tuple[int, ConsumerImpl | None, MessageId | None, int]


class Receiver(Generic[H]):
    """What consumers and readers share: the receive fast path and the hand-over to the loop.

    Received messages wait in the front's :class:`ThreadSafeQueue`; the calling thread takes
    them without a round trip. What the loop must learn (messages taken, which earn permits
    back; acks; nacks) is queued and handed over by a :class:`Mailbox`: soon when half the
    receiver queue was taken or the caller is about to wait for a message, otherwise within
    ``HAND_OVER_DELAY``. Blocking calls (seek, close, ...) hand everything over first.
    """

    def __init__(self, runner: LoopThread, inner: H, listener: Any) -> None:
        front = inner.front
        queue = front.queue
        assert isinstance(queue, ThreadSafeQueue)
        self._runner = runner
        self._inner = inner
        self._front = front
        self._queue = queue
        self._decoding = ValueDecoding(inner.schema, front.lookup)
        self._ops: collections.deque[_Op] = collections.deque()
        self._mailbox = Mailbox(runner.loop, self._process, HAND_OVER_DELAY)
        self._settle_at = max(1, front.config.receiver_queue_size // 2)
        self._zero_queue = front.config.receiver_queue_size == 0
        self._closed = False
        self._listener = _ListenerThread(self, self._listen, listener) if listener else None

    def _listen(self) -> Message:
        return self._take(None)

    def topic(self) -> str:
        """The topic (or a consumer's pattern)."""
        return self._inner.topic()

    def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or a publish timestamp (ms)."""
        self._run(self._inner.seek(messageid))

    def close(self) -> None:
        """Close (acknowledgements made before are sent first)."""
        try:
            self._run(self._inner.close())
        finally:
            self._closed = True

    def is_connected(self) -> bool:
        """True while connected."""
        return self._inner.is_connected()

    def _process(self) -> None:
        """(Loop) Settle the messages taken, then apply the operations queued before."""
        ops = self._ops
        count = len(ops)  # acks queued by now are of messages taken by now
        self._queue.settle()
        for _ in range(count):
            kind, consumer, mid, number = ops.popleft()
            try:
                if kind == _REDELIVER:
                    self._front.redeliver_unacknowledged_messages()
                    continue
                assert consumer is not None and mid is not None
                if kind == _ACK:
                    consumer.acknowledge(mid)
                elif kind == _ACK_CUMULATIVE:
                    consumer.acknowledge_cumulative(mid)
                else:
                    consumer.negative_acknowledge(mid, number)
            except PulsarException as exc:
                log.debug("%r: acknowledgement dropped: %s", consumer, exc)

    def hand_over(self) -> None:
        """(Loop) Apply what callers queued (before the client closes)."""
        self._process()

    def release_waiters(self) -> None:
        """(Loop) The client closed: wake the threads waiting for a message, with an error."""
        self._queue.close()

    def mark_closed(self) -> None:
        """The client closed: refuse further acknowledgements."""
        self._closed = True

    async def _after_hand_over(self, coro: Coroutine[Any, Any, R]) -> R:
        self._process()
        return await coro

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Hand everything over, then run ``coro`` on the loop and wait for it."""
        return self._runner.run(self._after_hand_over(coro))

    def _decorate(self, msg: Message) -> Message:
        decoding = self._decoding
        if decoding.needs_fetch(msg):  # the writer's schema, once per version
            self._runner.run(decoding.fetch(msg))
        return decoding.decorate(msg)

    def _taken(self) -> None:
        if self._queue.unsettled >= self._settle_at:
            self._mailbox.wake()
        else:
            self._mailbox.wake_later()

    def _before_wait(self) -> None:
        """The caller is about to wait for messages: settle what it took first."""
        if self._runner.in_loop_thread():
            raise RuntimeError(ON_LOOP)
        if self._queue.unsettled:
            self._mailbox.wake()
        if self._zero_queue:  # no prefetching: ask the broker for the message waited for
            self._runner.loop.call_soon_threadsafe(self._request_one)

    def _request_one(self) -> None:
        """(Loop) Zero receiver queue: one FLOW permit per inner consumer."""
        for inner in list(self._front.consumers.values()):
            inner.request_one()

    def _take(self, timeout_millis: int | None) -> Message:
        max_wait = None if timeout_millis is None else timeout_millis / 1000
        try:
            msg = self._queue.take(max_wait, self._before_wait)
        except KeyboardInterrupt:  # SIGINT while waiting: the official client's error
            raise Interrupted("interrupted while waiting for a message") from None
        self._taken()
        return self._decorate(msg)

    def _queue_op(self, op: _Op) -> None:
        self._ops.append(op)
        self._mailbox.wake_later()


class Consumer(Receiver[aio.Consumer]):
    """Blocking consumer; create it with :meth:`Client.subscribe`."""

    def __init__(self, runner: LoopThread, inner: aio.Consumer, listener: Any) -> None:
        # Without a pattern the inner consumers never change after subscribing, so ids can
        # be routed to them from any thread.
        self._fixed = inner.front.has_fixed_topics
        self._shared = inner.front.config.consumer_type in (
            ConsumerType.Shared,
            ConsumerType.KeyShared,
        )
        super().__init__(runner, inner, listener)

    def subscription_name(self) -> str:
        """The subscription name."""
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        """The consumer name."""
        return self._inner.consumer_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """Block for the next message; raises Timeout after ``timeout_millis`` if given."""
        check_type_or_none(int, timeout_millis, "timeout_millis")
        if timeout_millis is not None:
            check_c_int(timeout_millis, "receive")
        if self._zero_queue and timeout_millis is not None:  # as the official client
            raise InvalidConfiguration("receive with a timeout needs receiver_queue_size > 0")
        return self._take(timeout_millis)

    def batch_receive(self) -> list[Message]:
        """Block for messages within the ``batch_receive_policy`` (a list, possibly empty)."""
        policy = self._front.config.batch_receive_policy or DEFAULT_BATCH_RECEIVE_POLICY
        max_wait = policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        try:
            messages = self._queue.take_batch(
                policy.max_num_message, policy.max_num_bytes, max_wait, self._before_wait
            )
        except KeyboardInterrupt:  # SIGINT while waiting, as receive() reports it
            raise Interrupted("interrupted while waiting for messages") from None
        if messages:
            self._taken()
        return [self._decorate(m) for m in messages]

    def reconsume_later(
        self,
        message: Message,
        delay: int | timedelta,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Redeliver ``message`` after ``delay`` (ms or timedelta) via the retry letter topic,
        acknowledging it now. Needs ``enable_retry=True`` (a Starquake extension).
        """
        self._run(self._inner.reconsume_later(message, delay, properties))

    def _route(self, target: Message | MessageId) -> tuple[ConsumerImpl, MessageId] | None:
        """The inner consumer of ``target`` when it can be told here, else None."""
        if self._fixed:
            consumer, mid = self._front.route(target)
        elif isinstance(target, Message) and _owned_by(target, self._queue):
            consumer, mid = target.received_by, target.message_id()
        else:
            return None
        if self._closed:
            raise AlreadyClosed("consumer is closed")
        return consumer, mid

    def acknowledge(self, message: Message | MessageId, txn: Transaction | None = None) -> None:
        """Acknowledge one message (handed to the I/O thread; this does not wait). With
        ``txn``: in that transaction, waiting until the broker holds the ack (its error is
        raised, e.g. TransactionConflict); it takes effect when the transaction commits."""
        if txn is not None:
            self._run(self._inner.acknowledge(message, txn=core_transaction(txn)))
            return
        target = message_id_of(message)
        routed = self._route(target)
        if routed is None:
            self._run(self._inner.acknowledge(target))
            return
        self._queue_op((_ACK, routed[0], routed[1], 0))

    def acknowledge_cumulative(
        self, message: Message | MessageId, txn: Transaction | None = None
    ) -> None:
        """Acknowledge all messages up to and including ``message`` (does not wait; with
        ``txn``, in that transaction, as :meth:`acknowledge`)."""
        if txn is not None:
            self._run(self._inner.acknowledge_cumulative(message, txn=core_transaction(txn)))
            return
        target = message_id_of(message)
        routed = self._route(target)
        if routed is None:
            self._run(self._inner.acknowledge_cumulative(target))
            return
        if self._shared:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared/KeyShared subscriptions"
            )
        self._queue_op((_ACK_CUMULATIVE, routed[0], routed[1], 0))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have ``message`` redelivered after the negative-ack delay (does not wait)."""
        target = message_id_of(message)
        routed = self._route(target)
        if routed is None:
            self._run(self._inner.negative_acknowledge(target))
            return
        count = target.redelivery_count() if isinstance(target, Message) else 0
        self._queue_op((_NACK, routed[0], routed[1], count))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacknowledged message."""
        self._ops.append((_REDELIVER, None, None, 0))
        self._mailbox.wake()

    def pause_message_listener(self) -> None:
        """Stop handing messages to the listener until resumed."""
        if self._listener is not None:
            self._listener.running.clear()

    def resume_message_listener(self) -> None:
        """Resume the message listener."""
        if self._listener is not None:
            self._listener.running.set()

    def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer."""
        self._run(self._inner.unsubscribe())
        self._closed = True

    def get_last_message_id(self) -> MessageId:
        """Id of the last message in the topic."""
        return self._run(self._inner.get_last_message_id())


def _owned_by(msg: Message, queue: ThreadSafeQueue) -> bool:
    owner = msg.received_by
    return isinstance(owner, ConsumerImpl) and owner.queue is queue


class Reader(Receiver[aio.Reader]):
    """Blocking reader; create it with :meth:`Client.create_reader`."""

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """Block for the next message; raises Timeout after ``timeout_millis`` if given."""
        check_type_or_none(int, timeout_millis, "timeout_millis")
        if timeout_millis is not None:
            check_c_int(timeout_millis, "receive")
        return self._take(timeout_millis)

    def has_message_available(self) -> bool:
        """True if a message after the last one read is available."""
        return self._run(self._inner.has_message_available())
