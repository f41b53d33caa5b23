"""The view of a connection that its command handlers are given.

The handler classes (producer, consumer and topic commands) are typed against
:class:`CommandContext`, a Protocol: state, writing, error replies and async steps;
:class:`~starquake.broker.connection.ServerCnx` implements it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from google.protobuf.message import Message

from starquake.broker.errors import BrokerServiceError
from starquake.broker.registrations import CreationsUnderWay

_R = TypeVar("_R")

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.producer import Producer
    from starquake.broker.service import BrokerService
    from starquake.broker.topic_api import TopicApi
    from starquake.common.topic_name import TopicName


class CommandContext(Protocol):
    """What producer, consumer and topic command handlers need from their connection."""

    service: BrokerService
    remote_address: str
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]
    creating: CreationsUnderWay
    """PRODUCER and SUBSCRIBE requests under way (a close for one of their ids gives the
    creation up)."""

    @property
    def client_version(self) -> str:
        """The client library and version announced in CONNECT."""
        ...

    @property
    def auth_role(self) -> str | None:
        """The authenticated role (None while authentication is off or not yet done)."""
        ...

    @property
    def is_open(self) -> bool:
        """The connection is up (replies can still be written)."""
        ...

    def pending_write_bytes(self) -> int:
        """Bytes written to the connection that the peer has not taken yet."""
        ...

    def write(self, frame: bytes) -> None:
        """Queue one frame."""
        ...

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        """Queue several frames."""
        ...

    def close(self) -> None:
        """Close the connection (after flushing what is queued)."""
        ...

    def hold_reading(self, reason: str) -> None:
        """Stop reading from the peer until every reason is released."""
        ...

    def release_reading(self, reason: str) -> None:
        """Drop one reason to hold reading; reading resumes once none is left."""
        ...

    def receipt_sent(self, producer_id: int, *, newest: bool = False) -> None:
        """A send of ``producer_id`` is answered."""
        ...

    def receipts_sent(self, producer_id: int, count: int) -> None:
        """The ``count`` oldest sends of ``producer_id`` are answered."""
        ...

    def disconnect_producer(self, producer: Producer) -> None:
        """Close a producer from the broker side."""
        ...

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close a consumer from the broker side."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task of the connection."""
        ...

    def fail(self, request: Message, exc: BrokerServiceError) -> None:
        """Answer ``request`` with the error reply its command calls for."""
        ...

    def await_then(
        self, request: Message, work: Coroutine[Any, Any, _R], then: Callable[[_R], None], what: str
    ) -> None:
        """Run ``work`` off the hot path, then ``then`` with its result (or fail ``request``)."""
        ...

    def load_then(
        self,
        request: Message,
        topic_name: TopicName,
        create: bool,
        then: Callable[[TopicApi], None],
    ) -> None:
        """Load a topic off the hot path, then run ``then`` (or fail ``request``)."""
        ...

    def persist_then(
        self,
        request: Message,
        then: Callable[[], None],
        always: Callable[[], None] | None = None,
        undo: Callable[[], None] | None = None,
    ) -> None:
        """Store the durable cursor changes, then run ``then`` (or fail ``request``)."""
        ...
