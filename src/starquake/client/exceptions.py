"""Exception classes with the official client's names, and the wire-error mapping.

Every error is a :class:`PulsarException`; ``error()`` returns its :class:`Result` code (as the
official asyncio API does).
"""

from __future__ import annotations

from typing import ClassVar

from starquake.client.base._enums import Result
from starquake.protocol.errors import ServerError


class PulsarException(Exception):
    """Base class of every client error."""

    result: ClassVar[Result] = Result.UnknownError

    def error(self) -> Result:
        """The :class:`Result` code of this error."""
        return self.result


class UnknownError(PulsarException):
    """Result ``UnknownError``."""

    result = Result.UnknownError


class InvalidConfiguration(PulsarException):
    """Result ``InvalidConfiguration``."""

    result = Result.InvalidConfiguration


class Timeout(PulsarException):
    """Result ``Timeout``."""

    result = Result.Timeout


class LookupError(PulsarException):
    """Result ``LookupError``."""

    result = Result.LookupError


class ConnectError(PulsarException):
    """Result ``ConnectError``."""

    result = Result.ConnectError


class ReadError(PulsarException):
    """Result ``ReadError``."""

    result = Result.ReadError


class AuthenticationError(PulsarException):
    """Result ``AuthenticationError``."""

    result = Result.AuthenticationError


class AuthorizationError(PulsarException):
    """Result ``AuthorizationError``."""

    result = Result.AuthorizationError


class ErrorGettingAuthenticationData(PulsarException):
    """Result ``ErrorGettingAuthenticationData``."""

    result = Result.ErrorGettingAuthenticationData


class BrokerMetadataError(PulsarException):
    """Result ``BrokerMetadataError``."""

    result = Result.BrokerMetadataError


class BrokerPersistenceError(PulsarException):
    """Result ``BrokerPersistenceError``."""

    result = Result.BrokerPersistenceError


class ChecksumError(PulsarException):
    """Result ``ChecksumError``."""

    result = Result.ChecksumError


class ConsumerBusy(PulsarException):
    """Result ``ConsumerBusy``."""

    result = Result.ConsumerBusy


class NotConnected(PulsarException):
    """Result ``NotConnected``."""

    result = Result.NotConnected


class AlreadyClosed(PulsarException):
    """Result ``AlreadyClosed``."""

    result = Result.AlreadyClosed


class InvalidMessage(PulsarException):
    """Result ``InvalidMessage``."""

    result = Result.InvalidMessage


class ConsumerNotInitialized(PulsarException):
    """Result ``ConsumerNotInitialized``."""

    result = Result.ConsumerNotInitialized


class ProducerNotInitialized(PulsarException):
    """Result ``ProducerNotInitialized``."""

    result = Result.ProducerNotInitialized


class ProducerBusy(PulsarException):
    """Result ``ProducerBusy``."""

    result = Result.ProducerBusy


class TooManyLookupRequestException(PulsarException):
    """Result ``TooManyLookupRequestException``."""

    result = Result.TooManyLookupRequestException


class InvalidTopicName(PulsarException):
    """Result ``InvalidTopicName``."""

    result = Result.InvalidTopicName


class InvalidUrl(PulsarException):
    """Result ``InvalidUrl``."""

    result = Result.InvalidUrl


class ServiceUnitNotReady(PulsarException):
    """Result ``ServiceUnitNotReady``."""

    result = Result.ServiceUnitNotReady


class OperationNotSupported(PulsarException):
    """Result ``OperationNotSupported``."""

    result = Result.OperationNotSupported


class ProducerBlockedQuotaExceededError(PulsarException):
    """Result ``ProducerBlockedQuotaExceededError``."""

    result = Result.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(PulsarException):
    """Result ``ProducerBlockedQuotaExceededException``."""

    result = Result.ProducerBlockedQuotaExceededException


class ProducerQueueIsFull(PulsarException):
    """Result ``ProducerQueueIsFull``."""

    result = Result.ProducerQueueIsFull


class MessageTooBig(PulsarException):
    """Result ``MessageTooBig``."""

    result = Result.MessageTooBig


class TopicNotFound(PulsarException):
    """Result ``TopicNotFound``."""

    result = Result.TopicNotFound


class SubscriptionNotFound(PulsarException):
    """Result ``SubscriptionNotFound``."""

    result = Result.SubscriptionNotFound


class ConsumerNotFound(PulsarException):
    """Result ``ConsumerNotFound``."""

    result = Result.ConsumerNotFound


class UnsupportedVersionError(PulsarException):
    """Result ``UnsupportedVersionError``."""

    result = Result.UnsupportedVersionError


class TopicTerminated(PulsarException):
    """Result ``TopicTerminated``."""

    result = Result.TopicTerminated


class CryptoError(PulsarException):
    """Result ``CryptoError``."""

    result = Result.CryptoError


class IncompatibleSchema(PulsarException):
    """Result ``IncompatibleSchema``."""

    result = Result.IncompatibleSchema


class ConsumerAssignError(PulsarException):
    """Result ``ConsumerAssignError``."""

    result = Result.ConsumerAssignError


class CumulativeAcknowledgementNotAllowedError(PulsarException):
    """Result ``CumulativeAcknowledgementNotAllowedError``."""

    result = Result.CumulativeAcknowledgementNotAllowedError


class TransactionCoordinatorNotFoundError(PulsarException):
    """Result ``TransactionCoordinatorNotFoundError``."""

    result = Result.TransactionCoordinatorNotFoundError


class InvalidTxnStatusError(PulsarException):
    """Result ``InvalidTxnStatusError``."""

    result = Result.InvalidTxnStatusError


class NotAllowedError(PulsarException):
    """Result ``NotAllowedError``."""

    result = Result.NotAllowedError


class TransactionConflict(PulsarException):
    """Result ``TransactionConflict``."""

    result = Result.TransactionConflict


class TransactionNotFound(PulsarException):
    """Result ``TransactionNotFound``."""

    result = Result.TransactionNotFound


class ProducerFenced(PulsarException):
    """Result ``ProducerFenced``."""

    result = Result.ProducerFenced


class MemoryBufferIsFull(PulsarException):
    """Result ``MemoryBufferIsFull``."""

    result = Result.MemoryBufferIsFull


class Interrupted(PulsarException):
    """Result ``Interrupted``."""

    result = Result.Interrupted


_BY_SERVER_ERROR: dict[int, type[PulsarException]] = {
    ServerError.UnknownError: UnknownError,
    ServerError.MetadataError: BrokerMetadataError,
    ServerError.PersistenceError: BrokerPersistenceError,
    ServerError.AuthenticationError: AuthenticationError,
    ServerError.AuthorizationError: AuthorizationError,
    ServerError.ConsumerBusy: ConsumerBusy,
    ServerError.ServiceNotReady: ServiceUnitNotReady,
    ServerError.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    ServerError.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededException,
    ServerError.ChecksumError: ChecksumError,
    ServerError.UnsupportedVersionError: UnsupportedVersionError,
    ServerError.TopicNotFound: TopicNotFound,
    ServerError.SubscriptionNotFound: SubscriptionNotFound,
    ServerError.ConsumerNotFound: ConsumerNotFound,
    ServerError.TooManyRequests: TooManyLookupRequestException,
    ServerError.TopicTerminatedError: TopicTerminated,
    ServerError.ProducerBusy: ProducerBusy,
    ServerError.InvalidTopicName: InvalidTopicName,
    ServerError.IncompatibleSchema: IncompatibleSchema,
    ServerError.ConsumerAssignError: ConsumerAssignError,
    ServerError.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    ServerError.InvalidTxnStatus: InvalidTxnStatusError,
    ServerError.NotAllowedError: NotAllowedError,
    ServerError.TransactionConflict: TransactionConflict,
    ServerError.TransactionNotFound: TransactionNotFound,
    ServerError.ProducerFenced: ProducerFenced,
}

# Errors after which a lookup and a new attempt may succeed.
RETRYABLE = (ServiceUnitNotReady, TooManyLookupRequestException, ConnectError, NotConnected)


def from_server_error(code: int, message: str) -> PulsarException:
    """The exception for a wire ``ServerError`` code and message."""
    return _BY_SERVER_ERROR.get(code, UnknownError)(message)
