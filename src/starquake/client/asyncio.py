"""The asyncio client API (the counterpart of ``pulsar.asyncio``).

Everything here runs on the caller's event loop::

    from starquake.client.asyncio import Client

    client = Client("pulsar://localhost:6650")
    producer = await client.create_producer("my-topic")
    await producer.send(b"hello")
    await client.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import secrets
from collections.abc import Callable
from typing import Any

from starquake.client.api._async_handles import AnyProducer as AnyProducer
from starquake.client.api._async_handles import Consumer, Producer, Reader
from starquake.client.api._options import (
    ASYNC_PRODUCER_OPTIONS,
    CLIENT_OPTIONS,
    CONSUMER_OPTIONS,
    READER_OPTIONS,
    config_fields,
    consumer_config,
    producer_config,
    reader_config,
)
from starquake.client.base._arg_checks import check_type, check_type_or_none
from starquake.client.base._config import ClientConfig, ConsumerConfig, tls_identity
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
)
from starquake.client.base._logging import attach_logger, detach_logger
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._multi import ConsumerFront, normalize_topic
from starquake.client.consumer._subscribe import is_latest
from starquake.client.consumer._table_view import TableView, open_table_view
from starquake.client.consumer._timeouts import RedeliveryBackoff
from starquake.client.core._handler import ClientCore
from starquake.client.core._queue import MessageQueue
from starquake.client.core._transaction import (
    CoordinatorClient,
    Transaction,
    transactions_disabled,
)
from starquake.client.exceptions import PulsarException
from starquake.client.producer._outgoing import OutgoingMessage
from starquake.client.producer._partitioned import open_producer
from starquake.client.producer._send_ops import partition_topic
from starquake.client.wire._failover import (
    AutoClusterFailover,
    ServiceInfo,
    ServiceInfoProvider,
    initial_service_info,
    service_provider,
)
from starquake.common.schema_info import SchemaInfo, encode_schema_version

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "InitialPosition",
    "OutgoingMessage",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "TableView",
    "Transaction",
]


class Client:
    """The asyncio Pulsar client. Keyword arguments are those of the blocking ``Client``."""

    def __init__(
        self,
        service_url: str | AutoClusterFailover | ServiceInfoProvider,
        authentication: Any = None,
        operation_timeout_seconds: int = 30,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        keep_alive_interval_seconds: int = 30,
        partitions_update_interval_seconds: float = 60,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        *,
        logger: Any = None,
        queue_factory: Callable[[], MessageQueue] = MessageQueue,
        enable_transaction: bool = False,
        **runtime_options: Any,
    ) -> None:
        """``runtime_options``: the official client's ``io_threads``,
        ``message_listener_threads``, ``concurrent_lookup_requests`` and
        ``log_conf_file_path`` (checked, and without effect: one event loop does the I/O here;
        the official Python client ignores the log configuration file too), and
        ``stats_interval_in_seconds`` (accepted at its default only, NotImplementedError
        otherwise). ``queue_factory`` makes the receiver queues (the blocking client's are
        thread-safe); ``enable_transaction`` allows :meth:`new_transaction` (the Java
        client's ``enableTransaction``)."""
        provider = service_provider(service_url, authentication, tls_trust_certs_file_path)
        if provider is not None:
            info = initial_service_info(provider)
            service_url = info.service_url
            authentication = info.authentication
            tls_trust_certs_file_path = info.tls_trust_certs_file_path
        options = CLIENT_OPTIONS.collect(locals(), runtime_options)
        fields = config_fields(ClientConfig, options) | tls_identity(authentication)
        self._core = ClientCore(ClientConfig(**fields), queue_factory)
        self._transactions = options["enable_transaction"]
        self._coordinator: CoordinatorClient | None = None
        assert isinstance(service_url, str)  # for the type checker: collect() raised otherwise
        self._log_handler = attach_logger(logger)
        self._service_info = ServiceInfo(service_url, authentication, tls_trust_certs_file_path)
        self._provider = provider
        with contextlib.suppress(RuntimeError):  # created outside a loop: bound on first use
            self._core.loop = asyncio.get_running_loop()
        if provider is not None:
            provider.initialize(self._on_service_info)

    def _on_service_info(self, info: ServiceInfo) -> None:
        """(Any thread) The provider reports another cluster: switch to it on the loop."""
        if not isinstance(info, ServiceInfo):
            raise ValueError("Expected a pulsar.ServiceInfo or _pulsar.ServiceInfo instance")
        self._service_info = info
        config = dataclasses.replace(
            self._core.config,
            service_url=info.service_url,
            authentication=info.authentication,
            tls_trust_certs_file_path=info.tls_trust_certs_file_path,
            **tls_identity(info.authentication),
        )
        loop = self._core.loop
        if loop is None or loop.is_closed():
            self._core.switch_service(config)  # no loop yet: nothing is connected
        else:
            loop.call_soon_threadsafe(self._core.switch_service, config)

    def get_service_info(self) -> ServiceInfo:
        """The service info (cluster) this client currently uses."""
        return self._service_info

    async def create_producer(
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
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10,
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
        """Create a producer (see the blocking ``Client.create_producer`` for the arguments).

        Starquake extensions: ``hashing_scheme`` is BoostHash (the official Python client's
        routing) by default, JavaStringHash matches the Java client;
        ``batching_max_publish_delay_ms`` may be a fraction of a millisecond (a float, as
        pulsar-perf's ``-b``).
        """
        config = producer_config(ASYNC_PRODUCER_OPTIONS.collect(locals()))
        name = normalize_topic(topic)
        impl = await open_producer(self._core, name, config)
        return Producer(impl, name, schema)

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: Any = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: Any = None,
        key_shared_policy: Any = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: Any = None,
        crypto_failure_action: Any = ConsumerCryptoFailureAction.FAIL,
        is_pattern_topic: bool = False,
        *,
        pattern_auto_discovery_period: int = 60,
        tick_duration_ms: int = 1000,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
        enable_retry: bool = False,
        retry_letter_topic: str | None = None,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a regex pattern (a ``str`` with
        ``is_pattern_topic=True``, or an ``re.Pattern``).

        The positional arguments are those of ``pulsar.asyncio.Client.subscribe``. Keyword-only
        extensions (the official asyncio client has none of them):

        - ``pattern_auto_discovery_period``: seconds between checks for new topics matching a
          pattern (the blocking client's argument of that name).

        - ``tick_duration_ms``: granularity of the ack timeout (default 1 s).
        - ``negative_ack_redelivery_backoff`` / ``ack_timeout_redelivery_backoff``: a
          :class:`MultiplierRedeliveryBackoff`; the nack delay becomes
          ``backoff.next(redelivery_count)`` and the ack timeout grows by it.
        - ``expire_time_of_incomplete_chunked_message_ms``: drop (and acknowledge) a chunked
          message still incomplete this long after its first chunk (0: never).
        - ``enable_retry`` / ``retry_letter_topic``: subscribe to the retry letter topic too and
          allow :meth:`Consumer.reconsume_later`.
        """
        config = consumer_config(CONSUMER_OPTIONS.collect(locals()))
        front = _consumer_front(self._core, topic, subscription_name, config, is_pattern_topic)
        await front.start()
        return Consumer(front, schema)

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: Any = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """Create a reader positioned at ``start_message_id`` (earliest, latest or an id)."""
        config = reader_config(READER_OPTIONS.collect(locals()))
        prefix = subscription_role_prefix or "reader"
        subscription = f"{prefix}-{secrets.token_hex(5)}"
        front = ConsumerFront(
            self._core,
            [topic],
            subscription,
            config,
            start_message_id=start_message_id,
            consumer_name=reader_name or "",
        )
        await front.start()
        if is_latest(start_message_id):
            for consumer in front.consumers.values():
                last = await consumer.get_last_message_id()
                if start_message_id_inclusive and last.entry_id() >= 0:
                    # As the official client: "latest", inclusive, starts at the last message.
                    await consumer.seek(last)
                else:
                    consumer.latest_at_start = last
        return Reader(front, schema)

    async def create_table_view(
        self,
        topic: str,
        subscription_name: str | None = None,
        schema: Any = None,
    ) -> TableView:
        """A table view of ``topic`` (all partitions): the latest value of every key, read
        with compacted readers from the earliest message and kept up to date. Returns once
        the view holds the messages the topic holds now. ``schema`` (a
        ``starquake.client.schema`` schema, bytes by default) decodes the values and must be
        compatible with the topic's."""
        from starquake.client.schema import BytesSchema, Schema

        if schema is None:
            schema = BytesSchema()
        check_type(str, topic, "topic")
        check_type_or_none(str, subscription_name, "subscription_name")
        check_type(Schema, schema, "schema")
        view = await open_table_view(self._core, topic, subscription_name, schema)
        return TableView(view, topic, subscription_name, schema)

    async def new_transaction(self, timeout_ms: int = 60000) -> Transaction:
        """Open a transaction that the broker aborts unless it ends within ``timeout_ms``
        (the Java client's ``newTransaction().withTransactionTimeout(...).build()``); needs
        a client made with ``enable_transaction=True`` (InvalidConfiguration otherwise)."""
        if not self._transactions:
            raise transactions_disabled()
        check_type(int, timeout_ms, "timeout_ms")
        if self._coordinator is None:
            self._coordinator = CoordinatorClient(self._core)
        txn_id = await self._coordinator.new_txn(timeout_ms)
        return Transaction(self._coordinator, txn_id)

    def resume_transaction(self, txn_id: tuple[int, int]) -> Transaction:
        """The transaction ``txn_id`` (most, least significant bits), opened elsewhere (another
        client or process), to commit or abort it or to send in it (a Starquake extension:
        how a transaction crosses processes). Its state here starts OPEN; the coordinator
        decides: TransactionNotFound once it ended, InvalidTxnStatus if it is ending the
        other way. Needs ``enable_transaction=True``."""
        if not self._transactions:
            raise transactions_disabled()
        most, least = txn_id
        check_type(int, most, "txn_id[0]")
        check_type(int, least, "txn_id[1]")
        if self._coordinator is None:
            self._coordinator = CoordinatorClient(self._core)
        return Transaction(self._coordinator, (most, least))

    async def get_topics_of_namespace(self, namespace: str) -> list[str]:
        """The persistent topics of ``tenant/namespace``, partitions named one by one
        (a Starquake extension; the broker command the pattern subscriptions use)."""
        check_type(str, namespace, "namespace")
        return await self._core.lookup.get_topics_of_namespace(namespace, 0)

    @property
    def core(self) -> ClientCore:
        """The shared state of this client's producers and consumers (for extensions such as
        :class:`starquake.client.bulk.BulkReader`)."""
        return self._core

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic``, or ``[topic]`` if it is not partitioned."""
        check_type(str, topic, "topic")
        name = normalize_topic(topic)
        count = await self._core.lookup.get_partitioned_metadata(name)
        if count == 0:
            return [name]
        return [partition_topic(name, i) for i in range(count)]

    async def get_schema_info(self, topic: str, version: int | None = None) -> SchemaInfo | None:
        """Schema ``version`` of ``topic`` (the latest when None) as the broker stores it, or
        None when the topic has no schema (a Starquake extension)."""
        check_type(str, topic, "topic")
        check_type_or_none(int, version, "version")
        raw = None if version is None else encode_schema_version(version)
        return await self._core.lookup.get_schema(normalize_topic(topic), raw)

    async def close(self) -> None:
        """Close every producer, consumer and reader, then the connections."""
        if self._provider is not None:
            self._provider.close()
        try:
            await self._core.close()
        finally:
            detach_logger(self._log_handler)
            self._log_handler = None

    def shutdown(self) -> None:
        """Mark the client closed at once (connections close as the loop runs on)."""
        self._core.closed = True
        if self._provider is not None:
            self._provider.close()
        detach_logger(self._log_handler)
        self._log_handler = None


def _consumer_front(
    core: ClientCore,
    topic: str | list[str] | re.Pattern[str],
    subscription_name: str,
    config: ConsumerConfig,
    is_pattern_topic: bool,
) -> ConsumerFront:
    """The consumer of ``topic``: one topic, a list of topics or a regex pattern (a ``str``
    with ``is_pattern_topic``, or an ``re.Pattern``); ValueError for any other argument."""
    if isinstance(topic, str) and is_pattern_topic:
        return ConsumerFront(core, [], subscription_name, config, pattern=re.compile(topic))
    elif isinstance(topic, str):
        return ConsumerFront(core, [topic], subscription_name, config)
    elif isinstance(topic, list) and is_pattern_topic:
        raise ValueError(
            "Argument 'topic' must be a string when 'is_pattern_topic' is True; lists of "
            "topics do not support pattern subscriptions"
        )
    elif isinstance(topic, list):
        return ConsumerFront(core, list(topic), subscription_name, config)
    elif isinstance(topic, re.Pattern):
        return ConsumerFront(core, [], subscription_name, config, pattern=topic)
    else:
        raise ValueError(
            "Argument 'topic' is expected to be of a type between (str, list, re.pattern)"
        )
