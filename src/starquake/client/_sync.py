"""The blocking API: the asyncio core runs on one background event-loop thread per client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import threading
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from starquake.client import asyncio as aio
from starquake.client._api import build_message, check_type_or_none, message_id_of
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
from starquake.client._producer import OutgoingMessage
from starquake.client.exceptions import AlreadyClosed, PulsarException

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

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop and wait for its result (cancelled if we are interrupted)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking client call made from a client callback thread")
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


class Producer:
    """Blocking producer; create it with :meth:`Client.create_producer`."""

    def __init__(self, runner: _LoopThread, inner: aio.Producer, block: bool) -> None:
        self._runner = runner
        self._inner = inner
        self._block = block

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
        return self._runner.run(self._inner.send_outgoing(msg))

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
        if self._block:
            self._runner.run(self._enqueue_blocking(msg, callback))
        else:
            self._runner.call_soon(self._enqueue, msg, callback)

    def _enqueue(self, msg: OutgoingMessage, callback: SendCallback | None) -> None:
        try:
            fut = self._inner._impl.send_nowait(msg)
        except PulsarException as exc:
            _invoke(callback, exc.result, None)
            return
        _attach(fut, callback)

    async def _enqueue_blocking(self, msg: OutgoingMessage, callback: SendCallback | None) -> None:
        try:
            fut = await self._inner._impl.send_async(msg)
        except PulsarException as exc:
            _invoke(callback, exc.result, None)
            return
        _attach(fut, callback)

    def flush(self) -> None:
        """Send batched messages now and wait until all pending ones are confirmed."""
        self._runner.run(self._inner.flush())

    def close(self) -> None:
        """Flush and close the producer."""
        self._runner.run(self._inner.close())

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


def _attach(fut: asyncio.Future[MessageId], callback: SendCallback | None) -> None:
    if callback is None:
        fut.add_done_callback(_swallow)
        return

    def done(f: asyncio.Future[MessageId]) -> None:
        if f.cancelled():
            _invoke(callback, Result.Interrupted, None)
            return
        exc = f.exception()
        if exc is None:
            _invoke(callback, Result.Ok, f.result())
        elif isinstance(exc, PulsarException):
            _invoke(callback, exc.result, None)
        else:
            _invoke(callback, Result.UnknownError, None)

    fut.add_done_callback(done)


def _swallow(fut: asyncio.Future[MessageId]) -> None:
    if not fut.cancelled():
        fut.exception()


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


class Consumer:
    """Blocking consumer; create it with :meth:`Client.subscribe`."""

    def __init__(self, runner: _LoopThread, inner: aio.Consumer, listener: Any) -> None:
        self._runner = runner
        self._inner = inner
        self._listener = (
            _ListenerThread(self, lambda: self._runner.run(self._inner.receive()), listener)
            if listener
            else None
        )

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
        return self._runner.run(self._inner.receive(timeout_millis))

    def batch_receive(self) -> list[Message]:
        """Block for messages within the ``batch_receive_policy`` (a list, possibly empty)."""
        return self._runner.run(self._inner.batch_receive())

    def reconsume_later(
        self,
        message: Message,
        delay: int | timedelta,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Redeliver ``message`` after ``delay`` (ms or timedelta) via the retry letter topic,
        acknowledging it now. Needs ``enable_retry=True`` (a Starquake extension).
        """
        self._runner.run(self._inner.reconsume_later(message, delay, properties))

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message."""
        self._runner.run(self._inner.acknowledge(message_id_of(message)))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge all messages up to and including ``message``."""
        self._runner.run(self._inner.acknowledge_cumulative(message_id_of(message)))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have ``message`` redelivered after the negative-ack delay."""
        self._runner.run(self._inner.negative_acknowledge(message_id_of(message)))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacknowledged message."""
        self._runner.call_soon(self._inner.redeliver_unacknowledged_messages)

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
        self._runner.run(self._inner.seek(messageid))

    def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer."""
        self._runner.run(self._inner.unsubscribe())

    def close(self) -> None:
        """Close the consumer."""
        self._runner.run(self._inner.close())

    def is_connected(self) -> bool:
        """True while connected."""
        return self._inner.is_connected()

    def get_last_message_id(self) -> MessageId:
        """Id of the last message in the topic."""
        return self._runner.run(self._inner.get_last_message_id())


class Reader:
    """Blocking reader; create it with :meth:`Client.create_reader`."""

    def __init__(self, runner: _LoopThread, inner: aio.Reader, listener: Any) -> None:
        self._runner = runner
        self._inner = inner
        self._listener = (
            _ListenerThread(self, lambda: self._runner.run(self._inner.read_next()), listener)
            if listener
            else None
        )

    def topic(self) -> str:
        """The topic being read."""
        return self._inner.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """Block for the next message; raises Timeout after ``timeout_millis`` if given."""
        check_type_or_none(int, timeout_millis, "timeout_millis")
        return self._runner.run(self._inner.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        """True if a message after the last one read is available."""
        return self._runner.run(self._inner.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id or a publish timestamp (ms)."""
        self._runner.run(self._inner.seek(messageid))

    def close(self) -> None:
        """Close the reader."""
        self._runner.run(self._inner.close())

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
        self._runner = _LoopThread()
        self._logger = logger

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
        return Producer(self._runner, inner, block_if_queue_full)

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
        return Consumer(self._runner, inner, message_listener)

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
        return Reader(self._runner, inner, reader_listener)

    def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic``, or ``[topic]`` if it is not partitioned."""
        return self._runner.run(self._inner.get_topic_partitions(topic))

    def shutdown(self) -> None:
        """Close at once, without waiting for pending operations."""
        self._inner.shutdown()
        self._runner.stop()

    def close(self) -> None:
        """Close every producer, consumer and reader of this client, then the connections."""
        try:
            self._runner.run(self._inner.close())
        finally:
            self._runner.stop()


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
