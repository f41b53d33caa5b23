"""Every argument of the public client API, declared once: name, default, checks.

The tables below are read by both front-ends (the blocking ``starquake.client`` and
``starquake.client.asyncio``) and by the signature tests: a front-end's explicit parameters
must be options of its table, with the table's defaults (the official client's, plus the
Starquake extensions at the end). The checks raise what the official client raises: ValueError
from its Python type checks, TypeError from its C++ binding (an int out of range), and
NotImplementedError for an option nothing here implements, unless it has its default.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from starquake.client.api._option_spec import (
    REQUIRED,
    Check,
    Option,
    OptionTable,
    checks,
    enum_option,
    required,
    typed,
)
from starquake.client.base._arg_checks import (
    ConsumerBatchReceivePolicy,
    as_binding_bool,
    check_c_int,
    check_c_size,
    check_not_negative,
    check_type,
)
from starquake.client.base._arg_checks import key_shared_policy as normalized_key_shared_policy
from starquake.client.base._auth import Authentication
from starquake.client.base._config import ConsumerConfig, KeySharedPolicy, ProducerConfig
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
from starquake.client.base._message import MessageId
from starquake.client.consumer import _timeouts
from starquake.client.core._queue import MessageQueue
from starquake.client.crypto._crypto import CryptoKeyReader, failure_action
from starquake.client.producer._outgoing import OutgoingMessage


def c_size(bits: int) -> Check:
    """The TypeError of a C++ setter taking an unsigned int of ``bits`` bits."""
    return partial(check_c_size, unsigned_bits=bits)


def c_int_named(setter: str) -> Check:
    """:func:`check_c_int` for a C++ setter named otherwise than the argument."""
    return lambda value, _name: check_c_int(value, setter)


def only_default(default: Any) -> Check:
    """NotImplementedError for an option nothing here implements, but at its default (never
    dropped silently)."""

    def check(value: Any, name: str) -> None:
        if value != default or type(value) is not type(default):
            raise NotImplementedError(
                f"{name}={value!r} is not supported by starquake.client (only the default, "
                f"{default!r})"
            )

    return check


def _check_service_url(url: str, _name: str) -> None:
    from starquake.client.wire._pool import check_service_url

    check_service_url(url)


def _check_authentication(value: Any, _name: str) -> None:
    if value is not None and not isinstance(value, Authentication):
        raise ValueError(
            "Argument authentication is expected to be a starquake.client Authentication "
            "(AuthenticationToken, AuthenticationBasic, AuthenticationTLS)"
        )


CLIENT_OPTIONS = OptionTable(
    "Client",
    Option("service_url", REQUIRED, partial(check_type, str), _check_service_url),
    Option("authentication", None, _check_authentication),
    typed("operation_timeout_seconds", 30, int, binding=check_c_int),
    # The C++ runtime's threads and lookup limit: checked, and without effect here (one
    # event loop per client does the I/O).
    typed("io_threads", 1, int, binding=check_c_int),
    typed("message_listener_threads", 1, int, binding=check_c_int),
    typed("concurrent_lookup_requests", 50000, int, binding=check_c_int),
    typed("log_conf_file_path", None, str),  # the official Python client ignores it too
    typed("stats_interval_in_seconds", 600, int, binding=checks(c_size(32), only_default(600))),
    typed("use_tls", False, bool),
    typed("tls_trust_certs_file_path", None, str),
    typed("tls_allow_insecure_connection", False, bool),
    typed("tls_validate_hostname", False, bool),
    Option("logger", None),
    typed("connection_timeout_ms", 10000, int, binding=c_int_named("connection_timeout")),
    typed("listener_name", None, str, convert=lambda v: v or ""),
    typed("tls_private_key_file_path", None, str),
    typed("tls_certificate_file_path", None, str),
    # Starquake extensions
    Option("partitions_update_interval_seconds", 60),
    Option("keep_alive_interval_seconds", 30),
    typed("enable_transaction", False, bool),  # the Java client's enableTransaction
    Option("queue_factory", MessageQueue),  # the blocking client's queues are thread-safe
)

# --- producers ------------------------------------------------------------------------------


def _check_routing_mode(value: Any, _name: str) -> None:
    """The official binding's TypeError for a routing mode that is not a
    PartitionsRoutingMode (ours or the official enum)."""
    if not isinstance(value, PartitionsRoutingMode) and (
        type(value).__name__ != "PartitionsRoutingMode"
    ):
        raise TypeError(
            "partitions_routing_mode(): incompatible function arguments. The following "
            f"argument types are supported: (PartitionsRoutingMode); invoked with: {value!r}"
        )


def _properties(value: dict[str, str] | None) -> dict[str, str]:
    return dict(value or {})


def _check_producer(options: dict[str, Any]) -> None:
    if options.get("batching_enabled") and options.get("chunking_enabled"):
        raise ValueError("Batching and chunking of messages can't be enabled together.")


_PENDING_LIMIT = checks(check_c_int, check_not_negative)
PRODUCER_OPTIONS = OptionTable(
    "create_producer",
    required("topic", partial(check_type, str)),
    typed("producer_name", None, str),
    Option("schema", None),  # None: BytesSchema
    typed("initial_sequence_id", None, int),
    typed("send_timeout_millis", 30000, int, binding=check_c_int),
    enum_option("compression_type", CompressionType.NONE),
    typed("max_pending_messages", 1000, int, binding=_PENDING_LIMIT),
    typed("max_pending_messages_across_partitions", 50000, int, binding=_PENDING_LIMIT),
    typed("block_if_queue_full", False, bool),
    typed("batching_enabled", False, bool),
    typed("batching_max_messages", 1000, int, binding=c_size(32)),
    typed("batching_max_allowed_size_in_bytes", 128 * 1024, int, binding=c_size(64)),
    typed("batching_max_publish_delay_ms", 10, int, binding=c_size(64)),
    typed("chunking_enabled", False, bool),
    Option(
        "message_routing_mode",
        PartitionsRoutingMode.RoundRobinDistribution,
        binding=_check_routing_mode,
        convert=lambda v: PartitionsRoutingMode(int(v)),
    ),
    typed(
        "lazy_start_partitioned_producers", False, bool, binding=only_default(False)
    ),  # every partition's producer starts with the partitioned producer
    typed("properties", None, dict, convert=_properties),
    enum_option("batching_type", BatchingType.Default),
    typed("encryption_key", None, str),
    typed("crypto_key_reader", None, CryptoKeyReader),
    enum_option("access_mode", ProducerAccessMode.Shared),
    Option("message_router", None),
    # Starquake extension: BoostHash routes keys as the official Python client does,
    # JavaStringHash as the Java client.
    Option("hashing_scheme", HashingScheme.BoostHash, convert=lambda v: HashingScheme(int(v))),
    validate=_check_producer,
)


def _check_publish_delay(value: Any, name: str) -> None:
    """The asyncio API's delay: an int as the official client's, or a float (a fraction of a
    millisecond, as pulsar-perf's ``-b``)."""
    if not isinstance(value, float):
        check_type(int, value, name)
    elif not value >= 0:
        raise ValueError(f"{name} must not be negative")


def _publish_delay_binding(value: Any, name: str) -> None:
    if not isinstance(value, float):
        check_c_size(value, name, unsigned_bits=64)


ASYNC_PRODUCER_OPTIONS = PRODUCER_OPTIONS.with_defaults(batching_enabled=True).but(
    Option("batching_max_publish_delay_ms", 10, _check_publish_delay, _publish_delay_binding)
)

# --- consumers and readers ------------------------------------------------------------------


def _check_dead_letter_policy(value: Any, _name: str) -> None:
    from starquake.client.base._arg_checks import ConsumerDeadLetterPolicy

    if value is not None and not isinstance(value, ConsumerDeadLetterPolicy):
        # the official client calls its policy() unchecked
        raise AttributeError(f"'{type(value).__name__}' object has no attribute 'policy'")


def _check_crypto_failure_action(value: Any, _name: str) -> None:
    failure_action(value)


def _check_consumer(options: dict[str, Any]) -> None:
    timeout = options.get("unacked_messages_timeout_ms")
    if timeout and timeout < _timeouts.MIN_UNACKED_MESSAGES_TIMEOUT_MS:  # read when used
        raise ValueError(
            "Consumer Config Exception: Unacknowledged message timeout should be greater "
            "than 10 seconds."
        )


# Options of both consumers and readers.
_SCHEMA = Option("schema", None)  # None: BytesSchema
_RECEIVER_QUEUE_SIZE = typed("receiver_queue_size", 1000, int, binding=check_c_int)
_IS_READ_COMPACTED = typed("is_read_compacted", False, bool)
_CRYPTO_KEY_READER = typed("crypto_key_reader", None, CryptoKeyReader)
_START_INCLUSIVE = typed("start_message_id_inclusive", False, bool)
_CRYPTO_FAILURE_ACTION = Option(
    "crypto_failure_action", ConsumerCryptoFailureAction.FAIL, _check_crypto_failure_action
)

CONSUMER_OPTIONS = OptionTable(
    "subscribe",
    required("topic"),  # a str, a list of str or a re.Pattern, checked when subscribing
    required("subscription_name", partial(check_type, str)),
    enum_option("consumer_type", ConsumerType.Exclusive),
    _SCHEMA,
    Option("message_listener", None),  # the blocking API's
    _RECEIVER_QUEUE_SIZE,
    typed("max_total_receiver_queue_size_across_partitions", 50000, int, binding=check_c_int),
    typed("consumer_name", None, str),
    typed("unacked_messages_timeout_ms", None, int, binding=c_size(64)),
    # consumer statistics are not provided
    typed("broker_consumer_stats_cache_time_ms", 30000, int, binding=only_default(30000)),
    typed("negative_ack_redelivery_delay_ms", 60000, int),
    _IS_READ_COMPACTED,
    typed("properties", None, dict, convert=_properties),
    typed("pattern_auto_discovery_period", 60, int),
    enum_option("initial_position", InitialPosition.Latest),
    _CRYPTO_KEY_READER,
    Option(
        "replicate_subscription_state_enabled",
        False,
        convert=lambda v: as_binding_bool(v, "replicate_subscription_state_enabled"),
    ),
    typed("max_pending_chunked_message", 10, int, binding=c_size(64)),
    typed("auto_ack_oldest_chunked_message_on_queue_full", False, bool),
    _START_INCLUSIVE,
    typed("batch_receive_policy", None, ConsumerBatchReceivePolicy),
    typed("key_shared_policy", None, KeySharedPolicy, convert=normalized_key_shared_policy),
    typed("batch_index_ack_enabled", False, bool),
    enum_option("regex_subscription_mode", RegexSubscriptionMode.PersistentOnly),
    Option("dead_letter_policy", None, _check_dead_letter_policy),
    _CRYPTO_FAILURE_ACTION,
    # Starquake extensions (keyword-only), documented on the asyncio Client.subscribe;
    # is_pattern_topic is the official asyncio client's.
    Option("is_pattern_topic", False),
    Option("tick_duration_ms", 1000),
    Option("negative_ack_redelivery_backoff", None),
    Option("ack_timeout_redelivery_backoff", None),
    Option("expire_time_of_incomplete_chunked_message_ms", 60000),
    Option("enable_retry", False),
    Option("retry_letter_topic", None),
    validate=_check_consumer,
)

READER_OPTIONS = OptionTable(
    "create_reader",
    required("topic", partial(check_type, str)),
    required("start_message_id", partial(check_type, MessageId)),
    _SCHEMA,
    Option("reader_listener", None),  # the blocking API's
    _RECEIVER_QUEUE_SIZE,
    typed("reader_name", None, str),
    typed("subscription_role_prefix", None, str),
    _IS_READ_COMPACTED,
    _CRYPTO_KEY_READER,
    _START_INCLUSIVE,
    _CRYPTO_FAILURE_ACTION,
)


def config_fields(config_type: type, options: Mapping[str, Any]) -> dict[str, Any]:
    """The collected options that are fields of ``config_type``."""
    return {f.name: options[f.name] for f in dataclasses.fields(config_type) if f.name in options}


def producer_config(options: Mapping[str, Any]) -> ProducerConfig:
    """The settings of a producer from its collected options."""
    return ProducerConfig(**config_fields(ProducerConfig, options))


def consumer_config(options: Mapping[str, Any]) -> ConsumerConfig:
    """The settings of a consumer from its collected options."""
    return ConsumerConfig(**config_fields(ConsumerConfig, options))


def reader_config(options: Mapping[str, Any]) -> ConsumerConfig:
    """The settings of a reader (a non-durable exclusive consumer) from its options."""
    fields = config_fields(ConsumerConfig, options)
    return ConsumerConfig(consumer_type=ConsumerType.Exclusive, durable=False, **fields)


# --- messages -------------------------------------------------------------------------------


def _check_sequence_id(value: int, _name: str) -> None:
    """The official message builder's checks: TypeError beyond an int64, ValueError for a
    negative id."""
    if not -(2**63) <= value < 2**63:
        raise TypeError(
            "sequence_id(): incompatible function arguments. The following argument types "
            f"are supported: (int64); invoked with: {value}"
        )
    if value < 0:
        raise ValueError("sequenceId needs to be >= 0")


MESSAGE_OPTIONS = OptionTable(
    "send",
    typed("properties", None, dict, convert=_properties),
    typed("partition_key", None, str),
    typed("ordering_key", None, str),
    typed("sequence_id", None, int, binding=_check_sequence_id),
    typed("replication_clusters", None, list),
    typed("disable_replication", False, bool),
    typed("event_timestamp", None, int, binding=c_size(64)),
    typed("deliver_at", None, int, binding=c_size(64)),
    typed("deliver_after", None, timedelta),
    # the value, encoded by the producer's schema first; send_async's callback; the
    # transaction the message belongs to (the Java client's newMessage(txn))
    plain=("content", "callback", "txn"),
)
# The official asyncio send leaves the flag unset by default.
ASYNC_MESSAGE_OPTIONS = MESSAGE_OPTIONS.but(typed("disable_replication", None, bool, convert=bool))


def build_message(schema: Any, table: OptionTable, arguments: Mapping[str, Any]) -> OutgoingMessage:
    """The message a ``send`` front-end's arguments (its ``locals()``) describe, checked as
    the official client's: the value encoded by ``schema`` first, then the options of
    ``table``."""
    content = arguments["content"]
    data: bytes | None = None
    if content is not None:
        if schema is None and not isinstance(content, bytes):  # the default BytesSchema's error
            raise TypeError(
                f"Invalid record obj of type {type(content)} - expected type is {bytes}"
            )
        data = schema.encode(content) if schema is not None else content
        check_type(bytes, data, "data")
    options = table.collect(arguments)
    when = options["deliver_at"] or None
    delay: timedelta | None = options["deliver_after"]
    if delay:
        when = int(time.time() * 1000 + delay.total_seconds() * 1000)
    ordering_key: str | None = options["ordering_key"]
    return OutgoingMessage(
        data,
        properties=options["properties"],
        partition_key=options["partition_key"] or None,
        ordering_key=ordering_key.encode("utf-8") if ordering_key else None,
        sequence_id=options["sequence_id"] or None,
        event_timestamp=options["event_timestamp"] or None,
        deliver_at=when,
        replication_clusters=options["replication_clusters"] or None,
        disable_replication=options["disable_replication"],
    )
