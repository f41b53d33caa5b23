"""Broker-side exceptions, each carrying the wire ``ServerError`` it is reported with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.protocol.errors import ServerError

if TYPE_CHECKING:
    from starquake.common.topic_name import TopicName


class BrokerServiceError(Exception):
    """A request that cannot be served; ``code`` is sent to the client with the message."""

    code: ServerError = ServerError.UnknownError

    def __init__(self, message: str, code: ServerError | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The text sent to the client with the error code."""
        return str(self)


class TopicNotFoundError(BrokerServiceError):
    """The topic does not exist (and is not to be created)."""

    code = ServerError.TopicNotFound


class InvalidTopicNameError(BrokerServiceError):
    """A topic name that cannot be parsed or is not allowed."""

    code = ServerError.InvalidTopicName


class ConsumerBusyError(BrokerServiceError):
    """The subscription cannot take this consumer (e.g. an exclusive one has it)."""

    code = ServerError.ConsumerBusy


class ProducerBusyError(BrokerServiceError):
    """The producer (id or name) is already in use, or the topic is held exclusively."""

    code = ServerError.ProducerBusy


class SubscriptionNotFoundError(BrokerServiceError):
    """The subscription does not exist."""

    code = ServerError.SubscriptionNotFound


class NotAllowedError(BrokerServiceError):
    """The request is not allowed by the broker's configuration or policies."""

    code = ServerError.NotAllowedError


class PersistenceError(BrokerServiceError):
    """Storing data or metadata failed."""

    code = ServerError.PersistenceError


class ServiceNotReadyError(BrokerServiceError):
    """The broker cannot serve the request now (the client retries)."""

    code = ServerError.ServiceNotReady


class TopicNotServedError(ServiceNotReadyError):
    """The topic belongs to a bundle another broker of the cluster serves."""

    def __init__(self, topic: TopicName) -> None:
        super().__init__(f"Namespace bundle for topic ({topic}) not served by this instance")
        self.topic = topic


class MetadataError(BrokerServiceError):
    """Metadata of the request (e.g. a namespace) is missing or invalid."""

    code = ServerError.MetadataError


class ConsumerNotFoundError(BrokerServiceError):
    """A command names a consumer id that this connection does not have."""

    code = ServerError.ConsumerNotFound


class ChecksumError(BrokerServiceError):
    """A sent entry whose checksum does not match its content."""

    code = ServerError.ChecksumError


class TopicTerminatedError(BrokerServiceError):
    """The topic was terminated: it takes no more messages."""

    code = ServerError.TopicTerminatedError


class ConsumerAssignError(BrokerServiceError):
    """The subscription cannot assign the consumer (e.g. Key_Shared hash ranges that clash)."""

    code = ServerError.ConsumerAssignError
