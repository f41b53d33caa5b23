"""Protocol error tree and the wire ``ServerError`` codes."""

from __future__ import annotations

from enum import IntEnum


class ProtocolError(Exception):
    """Bytes from the peer that do not follow the protocol."""


class MalformedFrameError(ProtocolError):
    """A frame whose structure or protobuf content cannot be decoded."""


class FrameTooLargeError(ProtocolError):
    """A frame larger than the negotiated maximum."""


class ChecksumMismatchError(ProtocolError):
    """A payload whose CRC32C does not match the checksum sent with it."""


class ServerError(IntEnum):
    """Error codes carried by ERROR, SEND_ERROR and lookup responses (wire enum values)."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25
