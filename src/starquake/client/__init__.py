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
(name, default, checks as the official client's): the tables of ``_options``.

Planned layout (the modules are flat for now; they move in a later change): ``api/`` for the
front-ends and their arguments (``_sync*``, ``asyncio``, ``_async_handles``, ``_options``,
``_option_spec``, ``_arg_checks``), ``core/`` for the protocol machinery shared by both
(connections, pool, lookups, producers, consumers, partitions, acks, chunks, dead letters),
``security/`` for authentication and end-to-end encryption, and ``bulk/`` for the bulk
readers and row batches.
"""

from __future__ import annotations

from starquake.client import schema
from starquake.client._arg_checks import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
)
from starquake.client._auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from starquake.client._config import KeySharedPolicy
from starquake.client._crypto import CryptoKeyReader, EncryptionContext, EncryptionKey
from starquake.client._enums import (
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
from starquake.client._failover import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from starquake.client._message import Message, MessageId
from starquake.client._sync import (
    Client,
    ConsoleLogger,
    Consumer,
    FileLogger,
    Producer,
    Reader,
    TableView,
)
from starquake.client._timeouts import MultiplierRedeliveryBackoff, RedeliveryBackoff
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
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionNotFound",
    "UnknownError",
    "UnsupportedVersionError",
    "schema",
]
