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
import re
import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from starquake.client import _timeouts
from starquake.client._api import (
    DEFAULT_BATCH_RECEIVE_POLICY,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    build_message,
    check_type,
    check_type_or_none,
    delay_ms_of,
    message_id_of,
    seek_target,
)
from starquake.client._api import (
    key_shared_policy as _key_shared_policy,
)
from starquake.client._auth import Authentication
from starquake.client._config import ClientConfig, ConsumerConfig, ProducerConfig
from starquake.client._consumer import is_latest
from starquake.client._crypto import CryptoKeyReader, failure_action
from starquake.client._decoding import ValueDecoding
from starquake.client._enums import (
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
from starquake.client._handler import ClientCore
from starquake.client._message import Message, MessageId
from starquake.client._multi import ConsumerFront, normalize_topic
from starquake.client._partitioned import PartitionedProducer, open_producer
from starquake.client._producer import OutgoingMessage, ProducerImpl, partition_topic
from starquake.client._table_view import TableView, open_table_view
from starquake.client._timeouts import RedeliveryBackoff
from starquake.client.exceptions import (
    AlreadyClosed,
    OperationNotSupported,
    PulsarException,
)
from starquake.common.schema_info import SchemaInfo, encode_schema_version
from starquake.protocol.batch_rows import PackedBatch

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
]

AnyProducer = ProducerImpl | PartitionedProducer


class Producer:
    """An asyncio producer; create it with :meth:`Client.create_producer`."""

    def __init__(self, impl: AnyProducer, topic: str, schema: Any) -> None:
        self._impl = impl
        self._topic = topic
        self._schema = schema

    def _message(self, content: Any, **kwargs: Any) -> OutgoingMessage:
        return build_message(self._schema, content, **kwargs)

    async def send(
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
        """Send a message and return its id once the broker has stored it."""
        msg = self._message(
            content,
            properties=properties,
            partition_key=partition_key,
            ordering_key=ordering_key,
            sequence_id=sequence_id,
            replication_clusters=replication_clusters,
            disable_replication=disable_replication,
            event_timestamp=event_timestamp,
            deliver_at=deliver_at,
            deliver_after=deliver_after,
        )
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

    def send_packed(self, batch: PackedBatch) -> asyncio.Future[MessageId]:
        """Send a batch payload built from columns (``starquake.protocol.batch_rows.pack_rows``)
        as one batch entry now (a Starquake extension for bulk writers, as :meth:`send_batch`)."""
        if not isinstance(self._impl, ProducerImpl):
            raise OperationNotSupported("send_packed needs a producer of a single partition")
        return self._impl.send_packed(batch)

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


class Consumer:
    """An asyncio consumer; create it with :meth:`Client.subscribe`."""

    def __init__(self, front: ConsumerFront, schema: Any) -> None:
        self._front = front
        self._schema = schema
        self._decoding = ValueDecoding(schema, front.lookup)

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """Wait for the next message (raises Timeout after ``timeout_millis`` if given)."""
        timeout = None if timeout_millis is None else timeout_millis / 1000
        front = self._front
        if front._config.receiver_queue_size == 0 and not len(front.queue):
            for inner in list(front.consumers.values()):  # no prefetching: ask for one
                inner.request_one()
        return await self._decoding.prepare(await front.receive(timeout))

    async def batch_receive(self) -> list[Message]:
        """Messages received together, within the subscription's ``batch_receive_policy``
        (default: up to 10 MB, waiting at most 100 ms); possibly an empty list.
        """
        policy = self._front._config.batch_receive_policy or DEFAULT_BATCH_RECEIVE_POLICY
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

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (sent with the next ack group)."""
        self._front.acknowledge(message_id_of(message))

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge all messages up to and including ``message``."""
        self._front.acknowledge_cumulative(message_id_of(message))

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have ``message`` redelivered after the negative-ack delay."""
        self._front.negative_acknowledge(message_id_of(message))

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to redeliver every unacknowledged message."""
        self._front.redeliver_unacknowledged_messages()

    async def seek(self, messageid: MessageId | int) -> None:
        """Reset the subscription to a message id or a publish timestamp (ms)."""
        await self._front.seek(seek_target(messageid))

    async def unsubscribe(self) -> None:
        """Delete the subscription and close the consumer."""
        await self._front.unsubscribe()

    async def close(self) -> None:
        """Close the consumer (pending acks are flushed first)."""
        await self._front.close()

    async def get_last_message_id(self) -> MessageId:
        """Id of the last message in the topic."""
        return await self._front.get_last_message_id()

    def topic(self) -> str:
        """The topic (or pattern) of this consumer."""
        return self._front.topic

    def subscription_name(self) -> str:
        """The subscription name."""
        return self._front.subscription

    def consumer_name(self) -> str:
        """The consumer name."""
        return self._front.consumer_name

    def is_connected(self) -> bool:
        """True while every inner consumer is connected."""
        return self._front.connected and not self._front.is_closed

    @property
    def front(self) -> ConsumerFront:
        """The implementation object (for the blocking wrapper)."""
        return self._front


class Reader:
    """An asyncio reader; create it with :meth:`Client.create_reader`."""

    def __init__(self, front: ConsumerFront, schema: Any) -> None:
        self._front = front
        self._schema = schema
        self._decoding = ValueDecoding(schema, front.lookup)

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """Wait for the next message (raises Timeout after ``timeout_millis`` if given)."""
        timeout = None if timeout_millis is None else timeout_millis / 1000
        return await self._decoding.prepare(await self._front.receive(timeout))

    async def has_message_available(self) -> bool:
        """True if a message after the last one read is available."""
        return await self._front.has_message_available()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id or a publish timestamp (ms)."""
        await self._front.seek(seek_target(messageid))

    async def close(self) -> None:
        """Close the reader."""
        await self._front.close()

    def topic(self) -> str:
        """The topic being read."""
        return self._front.topic

    def is_connected(self) -> bool:
        """True while connected."""
        return self._front.connected and not self._front.is_closed

    @property
    def front(self) -> ConsumerFront:
        """The implementation object (for the blocking wrapper)."""
        return self._front


class Client:
    """The asyncio Pulsar client. Keyword arguments are those of the blocking ``Client``."""

    def __init__(
        self,
        service_url: str,
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
        **_ignored: Any,
    ) -> None:
        check_type(str, service_url, "service_url")
        check_type(int, operation_timeout_seconds, "operation_timeout_seconds")
        check_type(int, connection_timeout_ms, "connection_timeout_ms")
        if authentication is not None and not isinstance(authentication, Authentication):
            raise ValueError(
                "Argument authentication is expected to be a starquake.client Authentication "
                "(AuthenticationToken, AuthenticationBasic, AuthenticationTLS)"
            )
        tls_identity = authentication.tls_certificate_paths if authentication else None
        if tls_identity is not None:  # AuthenticationTLS: its certificate, in the handshake
            tls_certificate_file_path, tls_private_key_file_path = tls_identity
        from starquake.client._pool import check_service_url, parse_service_url

        check_service_url(service_url)
        parse_service_url(service_url)
        self._core = ClientCore(
            ClientConfig(
                service_url,
                operation_timeout_seconds=operation_timeout_seconds,
                connection_timeout_ms=connection_timeout_ms,
                keep_alive_interval_seconds=keep_alive_interval_seconds,
                listener_name=listener_name or "",
                partitions_update_interval_seconds=partitions_update_interval_seconds,
                use_tls=use_tls,
                tls_trust_certs_file_path=tls_trust_certs_file_path,
                tls_allow_insecure_connection=tls_allow_insecure_connection,
                tls_validate_hostname=tls_validate_hostname,
                tls_certificate_file_path=tls_certificate_file_path,
                tls_private_key_file_path=tls_private_key_file_path,
                authentication=authentication,
            )
        )

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
        """Create a producer (see the blocking ``Client.create_producer`` for the arguments).

        ``hashing_scheme`` is a Starquake extension: BoostHash (the official Python client's
        routing) by default; JavaStringHash matches the Java client.
        """
        check_type(str, topic, "topic")
        check_type_or_none(str, producer_name, "producer_name")
        check_type_or_none(int, initial_sequence_id, "initial_sequence_id")
        check_type(int, send_timeout_millis, "send_timeout_millis")
        check_type(int, max_pending_messages, "max_pending_messages")
        check_type(bool, block_if_queue_full, "block_if_queue_full")
        check_type(bool, batching_enabled, "batching_enabled")
        for name, value in (
            ("max_pending_messages_across_partitions", max_pending_messages_across_partitions),
            ("batching_max_messages", batching_max_messages),
            ("batching_max_allowed_size_in_bytes", batching_max_allowed_size_in_bytes),
            ("batching_max_publish_delay_ms", batching_max_publish_delay_ms),
        ):
            check_type(int, value, name)
        check_type(bool, chunking_enabled, "chunking_enabled")
        check_type(bool, lazy_start_partitioned_producers, "lazy_start_partitioned_producers")
        check_type_or_none(dict, properties, "properties")
        if batching_enabled and chunking_enabled:
            raise ValueError("Batching and chunking of messages can't be enabled together.")
        check_type_or_none(str, encryption_key, "encryption_key")
        check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
        config = ProducerConfig(
            producer_name=producer_name,
            initial_sequence_id=initial_sequence_id,
            send_timeout_millis=send_timeout_millis,
            compression_type=CompressionType(int(compression_type)),
            max_pending_messages=max_pending_messages,
            max_pending_messages_across_partitions=max_pending_messages_across_partitions,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            chunking_enabled=chunking_enabled,
            message_routing_mode=PartitionsRoutingMode(int(message_routing_mode)),
            hashing_scheme=HashingScheme(int(hashing_scheme)),
            lazy_start_partitioned_producers=lazy_start_partitioned_producers,
            properties=dict(properties or {}),
            batching_type=BatchingType(int(batching_type)),
            access_mode=ProducerAccessMode(int(access_mode)),
            message_router=message_router,
            schema=schema,
            encryption_key=encryption_key,
            crypto_key_reader=crypto_key_reader,
        )
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
        crypto_failure_action: Any = None,
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
        check_type(str, subscription_name, "subscription_name")
        check_type(int, receiver_queue_size, "receiver_queue_size")
        for name, value in (
            (
                "max_total_receiver_queue_size_across_partitions",
                max_total_receiver_queue_size_across_partitions,
            ),
            ("broker_consumer_stats_cache_time_ms", broker_consumer_stats_cache_time_ms),
            ("pattern_auto_discovery_period", pattern_auto_discovery_period),
        ):
            check_type(int, value, name)
        check_type_or_none(str, consumer_name, "consumer_name")
        check_type(int, negative_ack_redelivery_delay_ms, "negative_ack_redelivery_delay_ms")
        check_type_or_none(dict, properties, "properties")
        check_type_or_none(int, unacked_messages_timeout_ms, "unacked_messages_timeout_ms")
        check_type(int, max_pending_chunked_message, "max_pending_chunked_message")
        check_type(
            bool,
            auto_ack_oldest_chunked_message_on_queue_full,
            "auto_ack_oldest_chunked_message_on_queue_full",
        )
        check_type_or_none(ConsumerBatchReceivePolicy, batch_receive_policy, "batch_receive_policy")
        check_type_or_none(ConsumerDeadLetterPolicy, dead_letter_policy, "dead_letter_policy")
        check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
        minimum = _timeouts.MIN_UNACKED_MESSAGES_TIMEOUT_MS
        if unacked_messages_timeout_ms and unacked_messages_timeout_ms < minimum:
            raise ValueError(
                "Consumer Config Exception: Unacknowledged message timeout should be greater "
                "than 10 seconds."
            )
        config = ConsumerConfig(
            consumer_type=ConsumerType(int(consumer_type)),
            receiver_queue_size=receiver_queue_size,
            max_total_receiver_queue_size_across_partitions=max_total_receiver_queue_size_across_partitions,
            consumer_name=consumer_name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            is_read_compacted=is_read_compacted,
            properties=dict(properties or {}),
            pattern_auto_discovery_period=pattern_auto_discovery_period,
            initial_position=InitialPosition(int(initial_position)),
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
            start_message_id_inclusive=start_message_id_inclusive,
            key_shared_policy=_key_shared_policy(key_shared_policy),
            batch_index_ack_enabled=batch_index_ack_enabled,
            regex_subscription_mode=RegexSubscriptionMode(int(regex_subscription_mode)),
            dead_letter_policy=dead_letter_policy,
            tick_duration_ms=tick_duration_ms,
            negative_ack_redelivery_backoff=negative_ack_redelivery_backoff,
            ack_timeout_redelivery_backoff=ack_timeout_redelivery_backoff,
            max_pending_chunked_message=max_pending_chunked_message,
            auto_ack_oldest_chunked_message_on_queue_full=auto_ack_oldest_chunked_message_on_queue_full,
            expire_time_of_incomplete_chunked_message_ms=expire_time_of_incomplete_chunked_message_ms,
            batch_receive_policy=batch_receive_policy,
            enable_retry=enable_retry,
            retry_letter_topic=retry_letter_topic,
            schema=schema,
            crypto_key_reader=crypto_key_reader,
            crypto_failure_action=failure_action(crypto_failure_action),
        )
        if isinstance(topic, str) and is_pattern_topic:
            front = ConsumerFront(
                self._core, [], subscription_name, config, pattern=re.compile(topic)
            )
        elif isinstance(topic, str):
            front = ConsumerFront(self._core, [topic], subscription_name, config)
        elif isinstance(topic, list) and is_pattern_topic:
            raise ValueError(
                "Argument 'topic' must be a string when 'is_pattern_topic' is True; lists of "
                "topics do not support pattern subscriptions"
            )
        elif isinstance(topic, list):
            front = ConsumerFront(self._core, list(topic), subscription_name, config)
        elif isinstance(topic, re.Pattern):
            front = ConsumerFront(self._core, [], subscription_name, config, pattern=topic)
        else:
            raise ValueError(
                "Argument 'topic' is expected to be of a type between (str, list, re.pattern)"
            )
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
        crypto_failure_action: Any = None,
    ) -> Reader:
        """Create a reader positioned at ``start_message_id`` (earliest, latest or an id)."""
        check_type(str, topic, "topic")
        check_type(MessageId, start_message_id, "start_message_id")
        check_type(int, receiver_queue_size, "receiver_queue_size")
        check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
        check_type_or_none(str, reader_name, "reader_name")
        check_type_or_none(str, subscription_role_prefix, "subscription_role_prefix")
        config = ConsumerConfig(
            consumer_type=ConsumerType.Exclusive,
            receiver_queue_size=receiver_queue_size,
            is_read_compacted=is_read_compacted,
            start_message_id_inclusive=start_message_id_inclusive,
            durable=False,
            schema=schema,
            crypto_key_reader=crypto_key_reader,
            crypto_failure_action=failure_action(crypto_failure_action),
        )
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
        await self._core.close()

    def shutdown(self) -> None:
        """Mark the client closed at once (connections close as the loop runs on)."""
        self._core.closed = True
