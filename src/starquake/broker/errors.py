"""Broker-side exceptions, each carrying the wire ``ServerError`` it is reported with."""

from __future__ import annotations

from starquake.protocol.errors import ServerError


class BrokerServiceError(Exception):
    """A request that cannot be served; ``code`` is sent to the client with the message."""

    code: ServerError = ServerError.UnknownError

    def __init__(self, message: str, code: ServerError | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class TopicNotFoundError(BrokerServiceError):
    code = ServerError.TopicNotFound


class InvalidTopicNameError(BrokerServiceError):
    code = ServerError.InvalidTopicName


class ConsumerBusyError(BrokerServiceError):
    code = ServerError.ConsumerBusy


class ProducerBusyError(BrokerServiceError):
    code = ServerError.ProducerBusy


class SubscriptionNotFoundError(BrokerServiceError):
    code = ServerError.SubscriptionNotFound


class NotAllowedError(BrokerServiceError):
    code = ServerError.NotAllowedError


class PersistenceError(BrokerServiceError):
    code = ServerError.PersistenceError


class ServiceNotReadyError(BrokerServiceError):
    code = ServerError.ServiceNotReady


class MetadataError(BrokerServiceError):
    code = ServerError.MetadataError
