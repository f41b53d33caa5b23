"""Producer, consumer and reader arguments checked as the official client does, as configs.

The asyncio ``Client`` (which the blocking one drives) calls these with its arguments: every
check and normalisation of them lives here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starquake.client import _timeouts
from starquake.client._arg_checks import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    as_binding_bool,
    check_c_int,
    check_c_size,
    check_enum,
    check_not_negative,
    check_type,
    check_type_or_none,
    refuse_unsupported,
)
from starquake.client._arg_checks import key_shared_policy as normalized_key_shared_policy
from starquake.client._config import ConsumerConfig, KeySharedPolicy, ProducerConfig
from starquake.client._crypto import CryptoKeyReader, failure_action
from starquake.client._enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from starquake.client._message import Message, MessageId
from starquake.client._timeouts import RedeliveryBackoff


def producer_config(
    *,
    producer_name: str | None,
    schema: Any,
    initial_sequence_id: int | None,
    send_timeout_millis: int,
    compression_type: CompressionType,
    max_pending_messages: int,
    max_pending_messages_across_partitions: int,
    block_if_queue_full: bool,
    batching_enabled: bool,
    batching_max_messages: int,
    batching_max_allowed_size_in_bytes: int,
    batching_max_publish_delay_ms: int,
    chunking_enabled: bool,
    message_routing_mode: PartitionsRoutingMode,
    lazy_start_partitioned_producers: bool,
    properties: dict[str, str] | None,
    batching_type: BatchingType,
    encryption_key: str | None,
    crypto_key_reader: Any,
    access_mode: ProducerAccessMode,
    message_router: Callable[[Message, int], int] | None,
    hashing_scheme: HashingScheme,
) -> ProducerConfig:
    """The checked settings of a producer (``create_producer``'s arguments but the topic)."""
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
    refuse_unsupported(
        {"lazy_start_partitioned_producers": lazy_start_partitioned_producers},
        {"lazy_start_partitioned_producers": False},
    )
    check_type_or_none(dict, properties, "properties")
    if batching_enabled and chunking_enabled:
        raise ValueError("Batching and chunking of messages can't be enabled together.")
    check_type_or_none(str, encryption_key, "encryption_key")
    check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
    _check_producer_enums(compression_type, batching_type, access_mode, message_routing_mode)
    check_c_int(send_timeout_millis, "send_timeout_millis")
    for name, value in (
        ("max_pending_messages", max_pending_messages),
        ("max_pending_messages_across_partitions", max_pending_messages_across_partitions),
    ):
        check_c_int(value, name)
        check_not_negative(value, name)
    check_c_size(batching_max_messages, "batching_max_messages")
    check_c_size(
        batching_max_allowed_size_in_bytes, "batching_max_allowed_size_in_bytes", unsigned_bits=64
    )
    check_c_size(batching_max_publish_delay_ms, "batching_max_publish_delay_ms", unsigned_bits=64)
    return ProducerConfig(
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


def _check_producer_enums(
    compression_type: Any, batching_type: Any, access_mode: Any, routing_mode: Any
) -> None:
    """The enum arguments of ``create_producer``, as the official client checks them (its C++
    binding raises TypeError for a routing mode that is not a PartitionsRoutingMode)."""
    check_enum(CompressionType, compression_type, "compression_type")
    check_enum(BatchingType, batching_type, "batching_type")
    check_enum(ProducerAccessMode, access_mode, "access_mode")
    if not isinstance(routing_mode, PartitionsRoutingMode) and (
        type(routing_mode).__name__ != "PartitionsRoutingMode"
    ):
        raise TypeError(
            "partitions_routing_mode(): incompatible function arguments. The following "
            f"argument types are supported: (PartitionsRoutingMode); invoked with: {routing_mode!r}"
        )


def _check_consumer_flags(
    *,
    consumer_type: Any,
    is_read_compacted: Any,
    initial_position: Any,
    start_message_id_inclusive: Any,
    key_shared_policy: Any,
    batch_index_ack_enabled: Any,
    regex_subscription_mode: Any,
    dead_letter_policy: Any,
) -> None:
    """The type checks of ``subscribe``'s flags and enums, as the official client's."""
    check_enum(ConsumerType, consumer_type, "consumer_type")
    check_type(bool, is_read_compacted, "is_read_compacted")
    check_enum(InitialPosition, initial_position, "initial_position")
    check_type(bool, start_message_id_inclusive, "start_message_id_inclusive")
    check_type_or_none(KeySharedPolicy, key_shared_policy, "key_shared_policy")
    check_type(bool, batch_index_ack_enabled, "batch_index_ack_enabled")
    check_enum(RegexSubscriptionMode, regex_subscription_mode, "regex_subscription_mode")
    if dead_letter_policy is not None and not isinstance(
        dead_letter_policy, ConsumerDeadLetterPolicy
    ):  # the official client calls its policy() unchecked
        raise AttributeError(
            f"'{type(dead_letter_policy).__name__}' object has no attribute 'policy'"
        )


def consumer_config(
    *,
    subscription_name: str,
    consumer_type: ConsumerType,
    schema: Any,
    receiver_queue_size: int,
    max_total_receiver_queue_size_across_partitions: int,
    consumer_name: str | None,
    unacked_messages_timeout_ms: int | None,
    broker_consumer_stats_cache_time_ms: int,
    negative_ack_redelivery_delay_ms: int,
    is_read_compacted: bool,
    properties: dict[str, str] | None,
    initial_position: InitialPosition,
    crypto_key_reader: Any,
    replicate_subscription_state_enabled: bool,
    max_pending_chunked_message: int,
    auto_ack_oldest_chunked_message_on_queue_full: bool,
    start_message_id_inclusive: bool,
    batch_receive_policy: Any,
    key_shared_policy: Any,
    batch_index_ack_enabled: bool,
    regex_subscription_mode: RegexSubscriptionMode,
    dead_letter_policy: Any,
    crypto_failure_action: Any,
    pattern_auto_discovery_period: int,
    tick_duration_ms: int,
    negative_ack_redelivery_backoff: RedeliveryBackoff | None,
    ack_timeout_redelivery_backoff: RedeliveryBackoff | None,
    expire_time_of_incomplete_chunked_message_ms: int,
    enable_retry: bool,
    retry_letter_topic: str | None,
) -> ConsumerConfig:
    """The checked settings of a consumer (``subscribe``'s arguments but the topic)."""
    check_type(str, subscription_name, "subscription_name")
    _check_consumer_flags(
        consumer_type=consumer_type,
        is_read_compacted=is_read_compacted,
        initial_position=initial_position,
        start_message_id_inclusive=start_message_id_inclusive,
        key_shared_policy=key_shared_policy,
        batch_index_ack_enabled=batch_index_ack_enabled,
        regex_subscription_mode=regex_subscription_mode,
        dead_letter_policy=dead_letter_policy,
    )
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
    refuse_unsupported(  # consumer statistics are not provided
        {"broker_consumer_stats_cache_time_ms": broker_consumer_stats_cache_time_ms},
        {"broker_consumer_stats_cache_time_ms": 30000},
    )
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
    check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
    check_c_int(receiver_queue_size, "receiver_queue_size")
    check_c_int(
        max_total_receiver_queue_size_across_partitions,
        "max_total_receiver_queue_size_across_partitions",
    )
    if unacked_messages_timeout_ms is not None:
        check_c_size(unacked_messages_timeout_ms, "unacked_messages_timeout_ms", unsigned_bits=64)
    check_c_size(max_pending_chunked_message, "max_pending_chunked_message", unsigned_bits=64)
    minimum = _timeouts.MIN_UNACKED_MESSAGES_TIMEOUT_MS
    if unacked_messages_timeout_ms and unacked_messages_timeout_ms < minimum:
        raise ValueError(
            "Consumer Config Exception: Unacknowledged message timeout should be greater "
            "than 10 seconds."
        )
    return ConsumerConfig(
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
        replicate_subscription_state_enabled=as_binding_bool(
            replicate_subscription_state_enabled, "replicate_subscription_state_enabled"
        ),
        start_message_id_inclusive=start_message_id_inclusive,
        key_shared_policy=normalized_key_shared_policy(key_shared_policy),
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


def reader_config(
    *,
    topic: str,
    start_message_id: MessageId,
    schema: Any,
    receiver_queue_size: int,
    reader_name: str | None,
    subscription_role_prefix: str | None,
    is_read_compacted: bool,
    crypto_key_reader: Any,
    start_message_id_inclusive: bool,
    crypto_failure_action: Any,
) -> ConsumerConfig:
    """The checked settings of a reader (``create_reader``'s arguments)."""
    check_type(str, topic, "topic")
    check_type(MessageId, start_message_id, "start_message_id")
    check_type(int, receiver_queue_size, "receiver_queue_size")
    check_type(bool, is_read_compacted, "is_read_compacted")
    check_type(bool, start_message_id_inclusive, "start_message_id_inclusive")
    check_c_int(receiver_queue_size, "receiver_queue_size")
    check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
    check_type_or_none(str, reader_name, "reader_name")
    check_type_or_none(str, subscription_role_prefix, "subscription_role_prefix")
    return ConsumerConfig(
        consumer_type=ConsumerType.Exclusive,
        receiver_queue_size=receiver_queue_size,
        is_read_compacted=is_read_compacted,
        start_message_id_inclusive=start_message_id_inclusive,
        durable=False,
        schema=schema,
        crypto_key_reader=crypto_key_reader,
        crypto_failure_action=failure_action(crypto_failure_action),
    )
