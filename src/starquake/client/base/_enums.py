"""Enumerations of the public client API, with the official client's member names and values."""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "BatchingType",
    "CompressionType",
    "ConsumerCryptoFailureAction",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "LoggerLevel",
    "PartitionsRoutingMode",
    "ProducerAccessMode",
    "RegexSubscriptionMode",
    "Result",
]


class _Enum(IntEnum):
    """IntEnum whose ``str()`` is ``Type.Member``, like the official client's enums."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class CompressionType(_Enum):
    """Payload compression codec (the values are the wire ``CompressionType``)."""

    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


class ConsumerType(_Enum):
    """Subscription type (the values are the wire ``SubType``)."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class InitialPosition(_Enum):
    """Where a new subscription starts."""

    Latest = 0
    Earliest = 1


class PartitionsRoutingMode(_Enum):
    """How a producer on a partitioned topic picks the partition of keyless messages."""

    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class HashingScheme(_Enum):
    """Hash of the partition key used for routing (the official Python client uses BoostHash)."""

    Murmur3_32Hash = 0
    BoostHash = 1
    JavaStringHash = 2


class BatchingType(_Enum):
    """Batch builder: one batch for everything, or one batch per key."""

    Default = 0
    KeyBased = 1


class LoggerLevel(_Enum):
    """Log level for :class:`ConsoleLogger` / :class:`FileLogger`."""

    Debug = 0
    Info = 1
    Warn = 2
    Error = 3


class KeySharedMode(_Enum):
    """Key_Shared hash range assignment."""

    AutoSplit = 0
    Sticky = 1


class ProducerAccessMode(_Enum):
    """Producer access mode on a topic (the values are the wire ``ProducerAccessMode``)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class RegexSubscriptionMode(_Enum):
    """Which topics a regex subscription considers."""

    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


class ConsumerCryptoFailureAction(_Enum):
    """What to do with a message that cannot be decrypted."""

    FAIL = 0
    DISCARD = 1
    CONSUME = 2


class Result(_Enum):
    """Result codes passed to ``send_async`` callbacks (same values as the official client)."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45
