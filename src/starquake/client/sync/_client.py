"""The blocking API: the asyncio core runs on one background event-loop thread per client."""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from starquake.client import asyncio as aio
from starquake.client.api._options import (
    CLIENT_OPTIONS,
    CONSUMER_OPTIONS,
    PRODUCER_OPTIONS,
    READER_OPTIONS,
)
from starquake.client.base._arg_checks import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
)
from starquake.client.base._enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from starquake.client.base._logging import CLIENT_LOGGER_NAME, ConsoleLogger, FileLogger
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._timeouts import RedeliveryBackoff
from starquake.client.core._queue import ThreadSafeQueue
from starquake.client.crypto._crypto import CryptoKeyReader
from starquake.client.exceptions import AlreadyClosed
from starquake.client.sync._consumer import Consumer, Reader, Receiver
from starquake.client.sync._loop import LoopThread
from starquake.client.sync._producer import Producer
from starquake.client.sync._table_view import TableView
from starquake.client.sync._transaction import Transaction
from starquake.client.wire._failover import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from starquake.common.schema_info import SchemaInfo

log = logging.getLogger(CLIENT_LOGGER_NAME)
R = TypeVar("R")
H = TypeVar("H", bound=Producer | Consumer | Reader)
SendCallback = Callable[[Result, MessageId | None], None]


class Client:
    """The Pulsar client: one instance shares connections among its producers and consumers."""

    def __init__(
        self,
        service_url: str | AutoClusterFailover | ServiceInfoProvider,
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
        partitions_update_interval_seconds: int = 60,
        *,
        enable_transaction: bool = False,
    ) -> None:
        """The official client's arguments; Starquake's ``enable_transaction`` allows
        :meth:`new_transaction` (the Java client's ``enableTransaction``)."""
        self._inner = aio.Client(**CLIENT_OPTIONS.pick(locals()), queue_factory=ThreadSafeQueue)
        self._runner = LoopThread()
        self._inner.core.loop = self._runner.loop
        self._shut_down = False
        self._handles: weakref.WeakSet[Producer | Consumer | Reader] = weakref.WeakSet()

    def _track(self, handle: H) -> H:
        """Remember ``handle`` so that :meth:`close` closes it first."""
        self._handles.add(handle)
        return handle

    def get_service_info(self) -> ServiceInfo:
        """The service info (cluster) this client currently uses."""
        return self._inner.get_service_info()

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
        options = PRODUCER_OPTIONS.pick(locals())
        inner = self._runner.run(self._inner.create_producer(**options))
        return self._track(Producer(self._runner, inner, block_if_queue_full))

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        message_listener: Callable[[Consumer, Message], None] | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: CryptoKeyReader | None = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: ConsumerBatchReceivePolicy | None = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        *,
        is_pattern_topic: bool = False,
        tick_duration_ms: int = 1000,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
        enable_retry: bool = False,
        retry_letter_topic: str | None = None,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a regex pattern.

        The arguments, their order and defaults are those of ``pulsar.Client.subscribe``;
        the keyword-only ones are Starquake extensions documented on
        :meth:`starquake.client.asyncio.Client.subscribe` (``is_pattern_topic`` is the
        official asyncio client's).
        """
        options = CONSUMER_OPTIONS.pick(locals())
        listener = options.pop("message_listener")
        inner = self._runner.run(self._inner.subscribe(**options))
        return self._track(Consumer(self._runner, inner, listener))

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        reader_listener: Callable[[Reader, Message], None] | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: CryptoKeyReader | None = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """Create a reader at ``start_message_id`` (``MessageId.earliest``, ``.latest`` or an
        id); the arguments of ``pulsar.Client.create_reader``."""
        options = READER_OPTIONS.pick(locals())
        listener = options.pop("reader_listener")
        inner = self._runner.run(self._inner.create_reader(**options))
        return self._track(Reader(self._runner, inner, listener))

    def create_table_view(
        self,
        topic: str,
        subscription_name: str | None = None,
        schema: Any = None,
    ) -> TableView:
        """Create a table view of ``topic``: the latest value of every key, kept up to date.

        As ``pulsar.Client.create_table_view``: returns once the view holds what the topic
        holds now; ``subscription_name`` defaults to a random name; ``schema`` (bytes by
        default) decodes the values and must be compatible with the topic's schema.
        """
        inner = self._runner.run(self._inner.create_table_view(topic, subscription_name, schema))
        return TableView(self._runner, inner.view, topic, subscription_name, inner.schema)

    def new_transaction(self, timeout_ms: int = 60000) -> Transaction:
        """Open a transaction that the broker aborts unless it ends within ``timeout_ms``
        (needs ``enable_transaction=True``; InvalidConfiguration otherwise)."""
        impl = self._runner.run(self._inner.new_transaction(timeout_ms))
        return Transaction(self._runner, impl, self._sends_handed_over)

    async def _sends_handed_over(self) -> None:
        """(Loop) Every send queued by the producers so far is in the core."""
        for handle in list(self._handles):
            if isinstance(handle, Producer):
                await handle.handed_over()

    def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic``, or ``[topic]`` if it is not partitioned."""
        return self._runner.run(self._inner.get_topic_partitions(topic))

    def get_schema_info(self, topic: str, version: int | None = None) -> SchemaInfo | None:
        """Schema ``version`` of ``topic`` (the latest when None) as the broker stores it, or
        None when the topic has no schema (a Starquake extension)."""
        return self._runner.run(self._inner.get_schema_info(topic, version))

    def shutdown(self) -> None:
        """Close at once, without waiting for pending operations."""
        self._shut_down = True
        self._inner.shutdown()
        self._stop_loop()

    def close(self) -> None:
        """Close every producer, consumer and reader of this client, then the connections.

        Raises AlreadyClosed if it was closed before (closing after :meth:`shutdown` does
        nothing), as the official client."""
        if self._runner.loop.is_closed():
            if self._shut_down:
                return
            raise AlreadyClosed("the client is already closed")
        handles = list(self._handles)
        try:
            self._runner.run(self._close(handles))
        finally:
            for handle in handles:
                if isinstance(handle, Receiver):
                    handle.mark_closed()
            self._stop_loop()

    def _stop_loop(self) -> None:
        """Stop the client's loop, aborting first the connections an orderly close did not
        reach (after shutdown(), or a close that failed): no socket may outlive the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self._runner.call_soon(self._inner.core.pool.abort)
        self._runner.stop()

    async def _close(self, handles: list[Producer | Consumer | Reader]) -> None:
        for handle in handles:  # what callers queued goes first
            handle.hand_over()
        try:
            await self._inner.close()
        finally:
            for handle in handles:  # wake threads blocked in receive()
                if isinstance(handle, Receiver):
                    handle.release_waiters()


__all__ = [
    "Client",
    "ConsoleLogger",
    "Consumer",
    "FileLogger",
    "InitialPosition",
    "Producer",
    "Reader",
    "RegexSubscriptionMode",
    "TableView",
    "Transaction",
]
