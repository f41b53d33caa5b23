"""What the command handlers of a connection share: state, writing, error replies."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from starquake.broker.errors import BrokerServiceError, PersistenceError
from starquake.protocol import commands

log = logging.getLogger(__name__)

_R = TypeVar("_R")

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.producer import Producer
    from starquake.broker.service import BrokerService
    from starquake.broker.topic_api import TopicApi
    from starquake.common.topic_name import TopicName


class CnxBase:
    """State and helpers of :class:`~starquake.broker.connection.ServerCnx` used by handlers."""

    service: BrokerService
    transport: asyncio.Transport | None
    remote_address: str
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]

    def write(self, frame: bytes) -> None:
        raise NotImplementedError

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        raise NotImplementedError

    def _error(self, request_id: int, exc: BrokerServiceError) -> None:
        self.write(commands.error(request_id, exc.code, exc.message))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.service.background.add(task)
        task.add_done_callback(self.service.background.discard)

    def _await_then(
        self,
        request_id: int,
        work: Coroutine[Any, Any, _R],
        then: Callable[[_R], None],
        what: str,
        reply_error: Callable[[int, BrokerServiceError], None] | None = None,
    ) -> None:
        """Run ``work`` off the hot path, then ``then`` with its result while the connection
        is open; a failure answers the request instead (with ``reply_error``, by default an
        ERROR command), and an unexpected one is also logged."""
        answer = reply_error or self._error

        async def run() -> None:
            try:
                result = await work
            except BrokerServiceError as exc:
                answer(request_id, exc)
                return
            except Exception as exc:  # never leave a request unanswered
                log.exception("%s failed", what)
                answer(request_id, BrokerServiceError(f"{what} failed: {exc!r}"))
                return
            if self.transport is not None:  # the connection may have closed meanwhile
                then(result)

        self._spawn(run())

    def _load_then(
        self,
        topic_name: TopicName,
        create: bool,
        request_id: int,
        then: Callable[[TopicApi], None],
    ) -> None:
        """Load the topic off the hot path, then run ``then`` (or answer the request's error)."""

        async def load() -> None:
            try:
                topic = await self.service.get_topic(topic_name, create=create)
            except BrokerServiceError as exc:
                self._error(request_id, exc)
                return
            except Exception as exc:  # never leave a request unanswered
                log.exception("loading topic %s failed", topic_name)
                self._error(
                    request_id, BrokerServiceError(f"Cannot load topic {topic_name}: {exc!r}")
                )
                return
            if self.transport is not None:  # the connection may have closed meanwhile
                then(topic)

        self._spawn(load())

    def _persist_then(
        self,
        request_id: int,
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
                self._error(request_id, PersistenceError(f"Cannot store the subscription: {exc}"))
                return
            finally:
                if always is not None:
                    always()
            if self.transport is not None:  # the connection may have closed meanwhile
                then()

        self._spawn(persist())
