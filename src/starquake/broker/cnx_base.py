"""What the command handlers of a connection share: state, writing, error replies, async steps.

:class:`CommandContext` is the view of a connection that the handler classes (producer and
consumer commands) are given; :class:`CnxBase` implements its helpers for
:class:`~starquake.broker.connection.ServerCnx`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from google.protobuf.message import Message

from starquake.broker.error_replies import error_reply
from starquake.broker.errors import BrokerServiceError, PersistenceError
from starquake.broker.security.tls import peer_common_name

log = logging.getLogger(__name__)

_R = TypeVar("_R")

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.producer import Producer
    from starquake.broker.service import BrokerService
    from starquake.broker.topic_api import TopicApi
    from starquake.common.topic_name import TopicName


class CommandContext(Protocol):
    """What producer and consumer command handlers need from their connection."""

    service: BrokerService
    remote_address: str
    auth_role: str | None
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]

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

    def disconnect_producer(self, producer: Producer) -> None:
        """Close a producer from the broker side."""
        ...

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close a consumer from the broker side."""
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
        self, request: Message, then: Callable[[], None], always: Callable[[], None] | None = None
    ) -> None:
        """Store the durable cursor changes, then run ``then`` (or fail ``request``)."""
        ...


class CnxBase:
    """State and helpers of :class:`~starquake.broker.connection.ServerCnx` used by handlers."""

    service: BrokerService
    transport: asyncio.Transport | None
    remote_address: str
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]

    def write(self, frame: bytes) -> None:
        """Queue one frame (implemented by the connection)."""
        raise NotImplementedError

    @property
    def is_open(self) -> bool:
        """The connection is up (replies can still be written)."""
        return self.transport is not None

    def pending_write_bytes(self) -> int:
        """Bytes written to the connection that the peer has not taken yet."""
        return 0 if self.transport is None else self.transport.get_write_buffer_size()

    def peer_common_name(self) -> str | None:
        """The common name of the TLS client certificate, or None without one."""
        return peer_common_name(self.transport)

    def fail(self, request: Message, exc: BrokerServiceError) -> None:
        """Answer ``request`` with the error reply its command calls for."""
        self.write(error_reply(request, exc))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task of the broker service."""
        task = asyncio.get_running_loop().create_task(coro)
        self.service.background.add(task)
        task.add_done_callback(self.service.background.discard)

    def await_then(
        self,
        request: Message,
        work: Coroutine[Any, Any, _R],
        then: Callable[[_R], None],
        what: str,
    ) -> None:
        """Run ``work`` off the hot path, then ``then`` with its result while the connection
        is open; a failure answers ``request`` instead, and an unexpected one is also logged."""

        async def run() -> None:
            try:
                result = await work
            except BrokerServiceError as exc:
                self.fail(request, exc)
                return
            except Exception as exc:  # never leave a request unanswered
                log.exception("%s failed", what)
                self.fail(request, BrokerServiceError(f"{what} failed: {exc!r}"))
                return
            if self.transport is not None:  # the connection may have closed meanwhile
                then(result)

        self.spawn(run())

    def load_then(
        self,
        request: Message,
        topic_name: TopicName,
        create: bool,
        then: Callable[[TopicApi], None],
    ) -> None:
        """Load the topic off the hot path, then run ``then`` (or answer the request's error)."""

        async def load() -> TopicApi:
            try:
                return await self.service.get_topic(topic_name, create=create)
            except BrokerServiceError:
                raise
            except Exception as exc:
                log.exception("loading topic %s failed", topic_name)
                raise BrokerServiceError(f"Cannot load topic {topic_name}: {exc!r}") from exc

        self.await_then(request, load(), then, f"loading topic {topic_name}")

    def persist_then(
        self,
        request: Message,
        then: Callable[[], None],
        always: Callable[[], None] | None = None,
    ) -> None:
        """Store the durable cursor changes made so far, then run ``then`` (and ``always``,
        whether storing succeeded or not).

        A state change that a client is told about (a new subscription, an unsubscribe, a
        seek) must survive a crash from the moment the client hears of it.
        """

        async def persist() -> None:
            try:
                await self.service.persist_cursors()
            except Exception as exc:
                raise PersistenceError(f"Cannot store the subscription: {exc}") from exc
            finally:
                if always is not None:
                    always()

        self.await_then(request, persist(), lambda _: then(), "storing the cursors")
