"""Settings of the client, producers and consumers (the public keyword arguments, gathered)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starquake.client.base._auth import Authentication
from starquake.client.base._enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from starquake.common.schema_info import SchemaInfo

CLIENT_VERSION = "Pulsar-Python-Starquake-0.1.0"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    service_url: str
    operation_timeout_seconds: float = 30
    connection_timeout_ms: int = 10000
    keep_alive_interval_seconds: float = 30
    listener_name: str = ""
    initial_backoff_ms: int = 100
    max_backoff_ms: int = 30000
    partitions_update_interval_seconds: float = 60
    """How often producers and consumers of partitioned topics look for added partitions
    (0: never), as the C++ and Java clients do."""
    # TLS (a pulsar+ssl:// or https:// service URL, or use_tls with a pulsar:// one)
    use_tls: bool = False
    tls_trust_certs_file_path: str | None = None
    """CA certificates (PEM) the broker's certificate must chain to (None: the system's)."""
    tls_allow_insecure_connection: bool = False
    """Accept any broker certificate (no verification at all)."""
    tls_validate_hostname: bool = False
    """Also check that the broker's certificate names the host connected to."""
    tls_certificate_file_path: str | None = None
    """The client certificate (PEM) presented to the broker: the one place TLS
    authentication puts its certificate, with :attr:`tls_private_key_file_path`."""
    tls_private_key_file_path: str | None = None
    authentication: Authentication | None = None
    """How connections authenticate (None: they present no credentials)."""

    @property
    def tls(self) -> bool:
        """Whether connections to brokers use TLS."""
        return self.use_tls or self.service_url.startswith(("pulsar+ssl://", "https://"))


def tls_identity(authentication: Authentication | None) -> dict[str, Any]:
    """The :class:`ClientConfig` fields of the certificate and key that ``authentication``
    presents in the TLS handshake (``AuthenticationTLS``'s), none for the other kinds."""
    identity = authentication.tls_certificate_paths if authentication else None
    if identity is None:
        return {}
    return {"tls_certificate_file_path": identity[0], "tls_private_key_file_path": identity[1]}


@dataclass(slots=True)
class ProducerConfig:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50000
    block_if_queue_full: bool = False
    batching_enabled: bool = True
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: float = 10
    chunking_enabled: bool = False
    message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution
    hashing_scheme: HashingScheme = HashingScheme.BoostHash
    lazy_start_partitioned_producers: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    batching_type: BatchingType = BatchingType.Default
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    message_router: Callable[[Any, int], int] | None = None
    schema: Any = None
    initial_subscription_name: str | None = None  # DLQ producers (CommandProducer field 13)
    encryption_key: str | None = None
    crypto_key_reader: Any = None


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    """Key_Shared settings (mirrors ``pulsar.ConsumerKeySharedPolicy``)."""

    key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit
    allow_out_of_order_delivery: bool = False
    sticky_ranges: tuple[tuple[int, int], ...] | None = None


@dataclass(slots=True)
class ConsumerConfig:
    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    negative_ack_redelivery_delay_ms: int = 60000
    is_read_compacted: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    pattern_auto_discovery_period: int = 60
    initial_position: InitialPosition = InitialPosition.Latest
    replicate_subscription_state_enabled: bool = False
    start_message_id_inclusive: bool = False
    key_shared_policy: KeySharedPolicy | None = None
    batch_index_ack_enabled: bool = False
    regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly
    dead_letter_policy: Any = None
    tick_duration_ms: int = 1000
    negative_ack_redelivery_backoff: Any = None
    ack_timeout_redelivery_backoff: Any = None
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    expire_time_of_incomplete_chunked_message_ms: int = 60000
    batch_receive_policy: Any = None
    enable_retry: bool = False
    retry_letter_topic: str | None = None
    ack_grouping_time_ms: int = 100
    ack_grouping_max_size: int = 1000
    durable: bool = True
    schema: Any = None
    crypto_key_reader: Any = None
    crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL


def declared_schema(schema: Any) -> SchemaInfo | None:
    """What a producer or consumer declares for ``schema`` (None: bytes, nothing declared)."""
    if schema is None:
        return None
    info = schema.schema_info()
    if not isinstance(info, SchemaInfo):
        raise ValueError(f"{schema!r} is not a starquake.client.schema schema")
    return None if info.type.wire == 0 else info
