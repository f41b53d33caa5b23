"""Starquake's pure-Python Pulsar client: the ``pulsar`` API with a different import.

::

    from starquake import client as pulsar

    client = pulsar.Client("pulsar://localhost:6650")
    producer = client.create_producer("my-topic")
    producer.send(b"hello")
    consumer = client.subscribe("my-topic", "my-subscription")
    msg = consumer.receive()
    consumer.acknowledge(msg)
    client.close()

Typed values use the schemas of :mod:`starquake.client.schema` (``pulsar.schema`` in the
official client): ``client.create_producer(topic, schema=schema.AvroSchema(MyRecord))``.

The blocking API runs an asyncio core (:mod:`starquake.client.asyncio`) on a background
event-loop thread. Both APIs take their arguments from one declaration of every option
(name, default, checks as the official client's): the tables of ``api/_options``.

Layout, lowest layer first; a part imports only the layers below it (checked by
``tests/architecture/test_client_layering.py``). The subpackages are private: their public
names are re-exported here and by the public modules.

- ``base/``: the enums, ``Message`` and ``MessageId``, the settings (``_config``), argument
  checks and the consumer policies (``_arg_checks``), authentication (``_auth``), the
  client's logger (``_logging``); ``schema/`` and ``topics`` stand alone.
- ``exceptions``: the official client's exception classes and the wire-error mapping.
- ``crypto/``: end-to-end encryption (``_crypto``) and data-key wrapping (``_key_wrap``).
- ``wire/``: one connection (``_connection``), the pool and the lookup service
  (``_pool``, ``_http_lookup``), failover between clusters (``_failover``).
- ``core/``: ``ClientCore`` and the reconnecting base of producers and consumers
  (``_handler``), the receiver queue (``_queue``, ``_interrupts``), chunked messages
  (``_chunks``), partition discovery (``_partition_updates``).
- ``producer/``: one partition's producer (``_producer``), outgoing messages and batches
  (``_outgoing``, ``_send_ops``), partitioned producers and routing (``_partitioned``).
- ``consumer/``: one partition's consumer (``_consumer``), what it tracks until acked
  (``_deliveries``, ``_acks``, ``_timeouts``), dead letters (``_dlq``, which produces),
  SUBSCRIBE and SEEK (``_subscribe``), the consumer of many topics or a pattern (``_multi``),
  value decoding (``_decoding``), table views (``_table_view``).
- ``api/``: every option declared once (``_option_spec``, ``_options``) and the asyncio
  handles (``_async_handles``).
- ``asyncio``: the asyncio ``Client``.
- ``sync/``: the blocking ``Client`` (``_client``) on its loop thread (``_loop``), and the
  blocking producer, consumer, reader and table view; ``bulk/``: bulk readers
  (:mod:`starquake.client.bulk`) with their entry stream, decryption and row splitting.
- this module: the blocking API, as ``pulsar`` exports it.
"""

from __future__ import annotations

from starquake.client import schema
from starquake.client.base._arg_checks import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
)
from starquake.client.base._auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from starquake.client.base._config import KeySharedPolicy
from starquake.client.base._enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    LoggerLevel,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._timeouts import MultiplierRedeliveryBackoff, RedeliveryBackoff
from starquake.client.crypto._crypto import CryptoKeyReader, EncryptionContext, EncryptionKey
from starquake.client.exceptions import (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    BrokerMetadataError,
    BrokerPersistenceError,
    ChecksumError,
    ConnectError,
    ConsumerAssignError,
    ConsumerBusy,
    ConsumerNotFound,
    ConsumerNotInitialized,
    CryptoError,
    CumulativeAcknowledgementNotAllowedError,
    ErrorGettingAuthenticationData,
    IncompatibleSchema,
    Interrupted,
    InvalidConfiguration,
    InvalidMessage,
    InvalidTopicName,
    InvalidTxnStatusError,
    InvalidUrl,
    LookupError,
    MemoryBufferIsFull,
    MessageTooBig,
    NotAllowedError,
    NotConnected,
    OperationNotSupported,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerFenced,
    ProducerNotInitialized,
    ProducerQueueIsFull,
    PulsarException,
    ReadError,
    ServiceUnitNotReady,
    SubscriptionNotFound,
    Timeout,
    TooManyLookupRequestException,
    TopicNotFound,
    TopicTerminated,
    TransactionConflict,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
    UnknownError,
    UnsupportedVersionError,
)
from starquake.client.schema import BytesSchema
from starquake.client.sync._client import (
    Client,
    ConsoleLogger,
    Consumer,
    FileLogger,
    Producer,
    Reader,
    TableView,
    Transaction,
)
from starquake.client.wire._failover import AutoClusterFailover, ServiceInfo, ServiceInfoProvider

__all__ = [
    "AlreadyClosed",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AuthorizationError",
    "AutoClusterFailover",
    "BatchingType",
    "BrokerMetadataError",
    "BrokerPersistenceError",
    "BytesSchema",
    "ChecksumError",
    "Client",
    "CompressionType",
    "ConnectError",
    "ConsoleLogger",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerBatchReceivePolicy",
    "ConsumerBusy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerNotFound",
    "ConsumerNotInitialized",
    "ConsumerType",
    "CryptoError",
    "CryptoKeyReader",
    "CumulativeAcknowledgementNotAllowedError",
    "EncryptionContext",
    "EncryptionKey",
    "ErrorGettingAuthenticationData",
    "FileLogger",
    "HashingScheme",
    "IncompatibleSchema",
    "InitialPosition",
    "Interrupted",
    "InvalidConfiguration",
    "InvalidMessage",
    "InvalidTopicName",
    "InvalidTxnStatusError",
    "InvalidUrl",
    "KeySharedMode",
    "KeySharedPolicy",
    "LoggerLevel",
    "LookupError",
    "MemoryBufferIsFull",
    "Message",
    "MessageId",
    "MessageTooBig",
    "MultiplierRedeliveryBackoff",
    "NotAllowedError",
    "NotConnected",
    "OperationNotSupported",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerNotInitialized",
    "ProducerQueueIsFull",
    "PulsarException",
    "ReadError",
    "Reader",
    "RedeliveryBackoff",
    "RegexSubscriptionMode",
    "Result",
    "ServiceInfo",
    "ServiceInfoProvider",
    "ServiceUnitNotReady",
    "SubscriptionNotFound",
    "TableView",
    "Timeout",
    "TooManyLookupRequestException",
    "TopicNotFound",
    "TopicTerminated",
    "Transaction",
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionNotFound",
    "UnknownError",
    "UnsupportedVersionError",
    "schema",
]
