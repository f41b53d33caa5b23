"""The blocking API: the asyncio core runs on one background event-loop thread per client."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import re
import threading
import weakref
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from starquake.client import asyncio as aio
from starquake.client._api import (
    DEFAULT_BATCH_RECEIVE_POLICY,
    build_message,
    check_type_or_none,
    message_id_of,
)
from starquake.client._consumer import ConsumerImpl
from starquake.client._enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    LoggerLevel,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from starquake.client._message import Message, MessageId
from starquake.client._multi import ConsumerFront
from starquake.client._producer import OutgoingMessage, ProducerImpl
from starquake.client._queue import ThreadSafeQueue
from starquake.client.exceptions import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    ProducerQueueIsFull,
    PulsarException,
)

log = logging.getLogger("starquake.client")
R = TypeVar("R")
SendCallback = Callable[[Result, MessageId | None], None]


class _LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="starquake-client-io", daemon=True
        )
        self._thread.start()

    def in_loop_thread(self) -> bool:
        """True when called from the loop's thread (a send callback, say)."""
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop and wait for its result (cancelled if we are interrupted)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(_ON_LOOP)
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
            self.loop.close()


_ON_LOOP = "blocking client call made from a client callback thread"
# Acks and permits handed over without a blocking call reach the loop within this delay.
_HAND_OVER_DELAY = 0.01


class _Mailbox:
    """Runs ``process`` on the loop for work that caller threads queued, waking the loop once
    per burst rather than once per call.

    :meth:`wake` asks for a run soon, :meth:`wake_later` for one within ``delay`` seconds.
    Callers queue their work first and then test the flags; the loop clears a flag before it
    runs ``process``. So a caller that finds a flag set queued its work before that run
    started, and the run will see it. (Two callers may both schedule a run: harmless.)
    """

    __slots__ = ("_delay", "_later", "_loop", "_process", "_soon")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, process: Callable[[], None], delay: float
    ) -> None:
        self._loop = loop
        self._process = process
        self._delay = delay
        self._soon = False
        self._later = False

    def wake(self) -> None:
        if not self._soon:
            self._soon = True
            self._loop.call_soon_threadsafe(self._run_soon)

    def wake_later(self) -> None:
        if not (self._soon or self._later):
            self._later = True
            self._loop.call_soon_threadsafe(self._arm)

    def _run_soon(self) -> None:
        self._soon = False
        self._process()

    def _arm(self) -> None:
        self._loop.call_later(self._delay, self._run_later)

    def _run_later(self) -> None:
        self._later = False
        self._process()


class _Waiter:
    """The caller's end of one blocking ``send``: a lock the loop releases with the result."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._value: MessageId | None = None
        self._error: BaseException | None = None

    def set(self, value: MessageId | None, error: BaseException | None) -> None:
        self._value = value
        self._error = error
        self._done.release()

    def wait(self) -> MessageId:
        self._done.acquire()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


# A send handed to the loop: (message or None when refused for a full queue, callback, waiter).
_Send = tuple[OutgoingMessage | None, SendCallback | None, _Waiter | None]


class _Sent:
    """Done-callback of one send's future: frees its queue slot, then reports the result."""

    __slots__ = ("callback", "slots", "waiter")

    def __init__(
        self,
        slots: threading.Semaphore | None,
        callback: SendCallback | None,
        waiter: _Waiter | None,
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


def _result_of(error: BaseException) -> Result:
    if isinstance(error, PulsarException):
        return error.result
    if isinstance(error, concurrent.futures.CancelledError):
        return Result.Interrupted
    return Result.UnknownError


def _max_pending(impl: aio.AnyProducer) -> int:
    """How many messages the core lets ``impl`` hold pending (0: no limit applies)."""
    if isinstance(impl, ProducerImpl):
        return impl._config.max_pending_messages
    return sum(p._config.max_pending_messages for p in impl.producers)


class Producer:
    """Blocking producer; create it with :meth:`Client.create_producer`.

    Sends are queued in ``_items`` by the calling threads and moved into the core by the loop
    (:meth:`_drain`), in queue order, one wake-up per burst. ``_slots`` mirrors the core's
    pending-message limit on the caller side: a send takes a slot first (waiting for one
    with ``block_if_queue_full``) and the loop frees it when the send completes, after the
    core freed its own, so the core never finds a non-partitioned producer full.
    """

    def __init__(self, runner: _LoopThread, inner: aio.Producer, block: bool) -> None:
        self._runner = runner
        self._inner = inner
        self._impl = inner._impl
        self._block = block
        limit = _max_pending(inner._impl)
        self._slots = threading.Semaphore(limit) if limit > 0 else None
        self._items: collections.deque[_Send] = collections.deque()
        self._mailbox = _Mailbox(runner.loop, self._drain, 0.0)
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
    ) -> MessageId:
        """Publish a message and block until the broker stored it; returns its id."""
        msg = build_message(
            self._inner._schema,
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
            deliver_at,
            deliver_after,
        )
        if self._runner.in_loop_thread():
            raise RuntimeError(_ON_LOOP)
        slots = self._slots
        if slots is not None and not slots.acquire(False):
            if not self._block:
                raise ProducerQueueIsFull("producer queue is full")
            slots.acquire()
        waiter = _Waiter()
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
    ) -> None:
        """Queue a message; ``callback(result, message_id)`` runs once the broker answered.

        With ``block_if_queue_full`` this waits while ``max_pending_messages`` are pending;
        otherwise a full queue is reported to the callback (``Result.ProducerQueueIsFull``).
        The callback runs on the client's I/O thread and must not block on the client.
        """
        msg = build_message(
            self._inner._schema,
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
            deliver_at,
            deliver_after,
        )
        slots = self._slots
        if slots is not None and not slots.acquire(False):
            if not self._block:
                self._items.append((None, callback, None))
                self._mailbox.wake()
                return
            if self._runner.in_loop_thread():
                raise RuntimeError(_ON_LOOP)
            slots.acquire()
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
        self, msg: OutgoingMessage, callback: SendCallback | None, waiter: _Waiter | None
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
        self, error: BaseException, callback: SendCallback | None, waiter: _Waiter | None
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

    def _hand_over(self) -> None:
        self._drain()

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


class _Receiver:
    """What consumers and readers share: the receive fast path and the hand-over to the loop.

    Received messages wait in the front's :class:`ThreadSafeQueue`; the calling thread takes
    them without a round trip. What the loop must learn (messages taken, which earn permits
    back; acks; nacks) is queued and handed over by a :class:`_Mailbox`: soon when half the
    receiver queue was taken or the caller is about to wait for a message, otherwise within
    ``_HAND_OVER_DELAY``. Blocking calls (seek, close, ...) hand everything over first.
    """

    def __init__(self, runner: _LoopThread, front: ConsumerFront, schema: Any) -> None:
        queue = front.queue
        assert isinstance(queue, ThreadSafeQueue)
        self._runner = runner
        self._front = front
        self._queue = queue
        self._decoder = schema.decode if schema is not None and hasattr(schema, "decode") else None
        self._ops: collections.deque[_Op] = collections.deque()
        self._mailbox = _Mailbox(runner.loop, self._process, _HAND_OVER_DELAY)
        self._settle_at = max(1, front._config.receiver_queue_size // 2)
        self._closed = False

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

    def _hand_over(self) -> None:
        self._process()

    async def _after_hand_over(self, coro: Coroutine[Any, Any, R]) -> R:
        self._process()
        return await coro

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Hand everything over, then run ``coro`` on the loop and wait for it."""
        return self._runner.run(self._after_hand_over(coro))

    def _decorate(self, msg: Message) -> Message:
        if self._decoder is not None:
            msg._value_decoder = self._decoder
        return msg

    def _taken(self) -> None:
        if self._queue.unsettled >= self._settle_at:
            self._mailbox.wake()
        else:
            self._mailbox.wake_later()

    def _before_wait(self) -> None:
        """The caller is about to wait for messages: settle what it took first."""
        if self._runner.in_loop_thread():
            raise RuntimeError(_ON_LOOP)
        if self._queue.unsettled:
            self._mailbox.wake()

    def _take(self, timeout_millis: int | None) -> Message:
        max_wait = None if timeout_millis is None else timeout_millis / 1000
        msg = self._queue.take(max_wait, self._before_wait)
        self._taken()
        return self._decorate(msg)

    def _queue_op(self, op: _Op) -> None:
        self._ops.append(op)
        self._mailbox.wake_later()


class Consumer(_Receiver):
    """Blocking consumer; create it with :meth:`Client.subscribe`."""

    def __init__(self, runner: _LoopThread, inner: aio.Consumer, listener: Any) -> None:
        super().__init__(runner, inner.front, inner._schema)
        self._inner = inner
        # Without a pattern the inner consumers never change after subscribing, so ids can
        # be routed to them from any thread.
        self._fixed = front_is_fixed(inner.front)
        self._shared = inner.front._config.consumer_type in (
            ConsumerType.Shared,
            ConsumerType.KeyShared,
        )
        self._listener = _ListenerThread(self, self._listen, listener) if listener else None

    def _listen(self) -> Message:
        return self._take(None)

    def topic(self) -> str:
        """The topic (or pattern) of this consumer."""
        return self._inner.topic()

    def subscription_name(self) -> str:
        """The subscription name."""
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        """The consumer name."""
        return self._inner.consumer_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """Block for the next message; raises Timeout after ``timeout_millis`` if given."""
        check_type_or_none(int, timeout_millis, "timeout_millis")
        return self._take(timeout_millis)

    def batch_receive(self) -> list[Message]:
        """Block for messages within the ``batch_receive_policy`` (a list, possibly empty)."""
        policy = self._front._config.batch_receive_policy or DEFAULT_BATCH_RECEIVE_POLICY
        max_wait = policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        messages = self._queue.take_batch(
            policy.max_num_message, policy.max_num_bytes, max_wait, self._before_wait
        )
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
            consumer, mid = target._consumer, target.message_id()
        else:
            return None
        if self._closed:
            raise AlreadyClosed("consumer is closed")
        return consumer, mid

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (handed to the I/O thread; this does not wait)."""
        target = message_id_of(message)
        routed = self._route(target)
        if routed is None:
            self._run(self._inner.acknowledge(target))
            return
        self._queue_op((_ACK, routed[0], routed[1], 0))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge all messages up to and including ``message`` (does not wait)."""
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

    def seek(self, messageid: MessageId | int) -> None:
        """Reset the subscription to a message id or a publish timestamp (ms)."""
        self._run(self._inner.seek(messageid))

    def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer."""
        self._run(self._inner.unsubscribe())
        self._closed = True

    def close(self) -> None:
        """Close the consumer (acknowledgements made before are sent first)."""
        try:
            self._run(self._inner.close())
        finally:
            self._closed = True

    def is_connected(self) -> bool:
        """True while connected."""
        return self._inner.is_connected()

    def get_last_message_id(self) -> MessageId:
        """Id of the last message in the topic."""
        return self._run(self._inner.get_last_message_id())


def front_is_fixed(front: ConsumerFront) -> bool:
    """True if the inner consumers of ``front`` cannot change any more (no pattern)."""
    return front._pattern is None


def _owned_by(msg: Message, queue: ThreadSafeQueue) -> bool:
    owner = msg._consumer
    return isinstance(owner, ConsumerImpl) and owner._queue is queue


class Reader(_Receiver):
    """Blocking reader; create it with :meth:`Client.create_reader`."""

    def __init__(self, runner: _LoopThread, inner: aio.Reader, listener: Any) -> None:
        super().__init__(runner, inner.front, inner._schema)
        self._inner = inner
        self._listener = _ListenerThread(self, self._listen, listener) if listener else None

    def _listen(self) -> Message:
        return self._take(None)

    def topic(self) -> str:
        """The topic being read."""
        return self._inner.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """Block for the next message; raises Timeout after ``timeout_millis`` if given."""
        check_type_or_none(int, timeout_millis, "timeout_millis")
        return self._take(timeout_millis)

    def has_message_available(self) -> bool:
        """True if a message after the last one read is available."""
        return self._run(self._inner.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id or a publish timestamp (ms)."""
        self._run(self._inner.seek(messageid))

    def close(self) -> None:
        """Close the reader."""
        try:
            self._run(self._inner.close())
        finally:
            self._closed = True

    def is_connected(self) -> bool:
        """True while connected."""
        return self._inner.is_connected()


class ConsoleLogger:
    """Log to the console at ``log_level`` (maps onto Python logging)."""

    def __init__(self, log_level: LoggerLevel = LoggerLevel.Info) -> None:
        self.log_level = log_level


class FileLogger:
    """Log to ``log_file`` at ``log_level`` (maps onto Python logging)."""

    def __init__(self, log_level: LoggerLevel, log_file: str) -> None:
        self.log_level = log_level
        self.log_file = log_file


class Client:
    """The Pulsar client: one instance shares connections among its producers and consumers."""

    def __init__(
        self,
        service_url: str,
        authentication: Any = None,
        operation_timeout_seconds: int = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: Any = None,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
    ) -> None:
        if not isinstance(service_url, str):
            raise ValueError("Argument service_url is expected to be of type 'str'")
        self._inner = aio.Client(
            service_url,
            authentication,
            operation_timeout_seconds=operation_timeout_seconds,
            connection_timeout_ms=connection_timeout_ms,
            listener_name=listener_name,
        )
        self._inner._core.queue_factory = ThreadSafeQueue
        self._runner = _LoopThread()
        self._logger = logger
        self._handles: weakref.WeakSet[Producer | _Receiver] = weakref.WeakSet()

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Any = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        batching_type: BatchingType = BatchingType.Default,
        encryption_key: str | None = None,
        crypto_key_reader: Any = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: Callable[[Message, int], int] | None = None,
        hashing_scheme: HashingScheme = HashingScheme.BoostHash,
    ) -> Producer:
        """Create a producer. Same arguments and defaults as ``pulsar.Client.create_producer``
        (batching is off by default here, on in the asyncio API, as in the official client).
        """
        inner = self._runner.run(
            self._inner.create_producer(
                topic,
                producer_name,
                schema,
                initial_sequence_id,
                send_timeout_millis,
                compression_type,
                max_pending_messages,
                max_pending_messages_across_partitions,
                block_if_queue_full,
                batching_enabled,
                batching_max_messages,
                batching_max_allowed_size_in_bytes,
                batching_max_publish_delay_ms,
                chunking_enabled,
                message_routing_mode,
                lazy_start_partitioned_producers,
                properties,
                batching_type,
                encryption_key,
                crypto_key_reader,
                access_mode,
                message_router,
                hashing_scheme,
            )
        )
        producer = Producer(self._runner, inner, block_if_queue_full)
        self._handles.add(producer)
        return producer

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        message_listener: Any = None,
        **kwargs: Any,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a regex pattern.

        The keyword arguments and defaults are those of ``pulsar.Client.subscribe``
        (``receiver_queue_size=1000``, ``initial_position=InitialPosition.Latest``,
        ``negative_ack_redelivery_delay_ms=60000``, ``dead_letter_policy``,
        ``batch_receive_policy``, ``max_pending_chunked_message``, ...), plus the Starquake
        extensions documented on :meth:`starquake.client.asyncio.Client.subscribe`
        (``tick_duration_ms``, ``negative_ack_redelivery_backoff``,
        ``ack_timeout_redelivery_backoff``, ``expire_time_of_incomplete_chunked_message_ms``,
        ``enable_retry``, ``retry_letter_topic``).
        """
        inner = self._runner.run(
            self._inner.subscribe(topic, subscription_name, consumer_type, schema, **kwargs)
        )
        consumer = Consumer(self._runner, inner, message_listener)
        self._handles.add(consumer)
        return consumer

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        reader_listener: Any = None,
        **kwargs: Any,
    ) -> Reader:
        """Create a reader at ``start_message_id`` (``MessageId.earliest``, ``.latest`` or an id).

        Keyword arguments as ``pulsar.Client.create_reader`` (``receiver_queue_size``,
        ``reader_name``, ``subscription_role_prefix``, ``start_message_id_inclusive``, ...).
        """
        inner = self._runner.run(
            self._inner.create_reader(topic, start_message_id, schema, **kwargs)
        )
        reader = Reader(self._runner, inner, reader_listener)
        self._handles.add(reader)
        return reader

    def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic``, or ``[topic]`` if it is not partitioned."""
        return self._runner.run(self._inner.get_topic_partitions(topic))

    def shutdown(self) -> None:
        """Close at once, without waiting for pending operations."""
        self._inner.shutdown()
        self._runner.stop()

    def close(self) -> None:
        """Close every producer, consumer and reader of this client, then the connections."""
        handles = list(self._handles)
        try:
            self._runner.run(self._close(handles))
        finally:
            for handle in handles:
                if isinstance(handle, _Receiver):
                    handle._closed = True
            self._runner.stop()

    async def _close(self, handles: list[Producer | _Receiver]) -> None:
        for handle in handles:  # what callers queued goes first
            handle._hand_over()
        try:
            await self._inner.close()
        finally:
            for handle in handles:  # wake threads blocked in receive()
                if isinstance(handle, _Receiver):
                    handle._queue.close()


__all__ = [
    "Client",
    "ConsoleLogger",
    "Consumer",
    "FileLogger",
    "InitialPosition",
    "Producer",
    "Reader",
    "RegexSubscriptionMode",
]
