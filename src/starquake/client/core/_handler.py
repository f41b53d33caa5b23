"""Shared client state and the reconnecting base of producers and consumers."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from starquake.client.base._config import ClientConfig
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.core._queue import MessageQueue
from starquake.client.exceptions import (
    RETRYABLE,
    AlreadyClosed,
    NotConnected,
    ProducerFenced,
    PulsarException,
    Timeout,
    TopicNotFound,
    TopicTerminated,
)
from starquake.client.wire._connection import ClientConnection, FinalConnectError
from starquake.client.wire._pool import ConnectionPool, LookupService
from starquake.protocol.wire import pb

log = logging.getLogger(CLIENT_LOGGER_NAME)

# Errors after which reconnecting cannot help (a fenced producer stays fenced: another one
# took the topic with ExclusiveWithFencing).
_FATAL = (TopicNotFound, TopicTerminated, AlreadyClosed, ProducerFenced)


class ClientCore:
    """What every producer and consumer of one client shares: config, pool, lookups, ids."""

    def __init__(
        self, config: ClientConfig, queue_factory: Callable[[], MessageQueue] = MessageQueue
    ) -> None:
        self.config = config
        self.pool = ConnectionPool(config)
        self.request_ids = itertools.count()
        self.lookup = LookupService(config, self.pool, self.request_ids)
        self.producer_ids = itertools.count()
        self.consumer_ids = itertools.count()
        self.handlers: set[Any] = set()
        # Periodic work (partition watchers, pattern discovery): cancelled when the client closes.
        self.background: set[asyncio.Task[None]] = set()
        self.closed = False
        # Receiver queues of new consumers (the blocking API asks for thread-safe ones).
        self.queue_factory = queue_factory
        # Which cluster the client uses: counts the switches (see MessageId.service).
        self.service = 0
        # The event loop the client runs on, once known (for switches reported by threads).
        self.loop: asyncio.AbstractEventLoop | None = None

    def switch_service(self, config: ClientConfig) -> None:
        """Use another cluster (service URL, authentication, trust store): later lookups and
        connections go there; the current connections close, so producers and consumers
        reconnect to it. Call on the loop, or before the client has a loop."""
        old = self.pool
        self.config = config
        self.pool = ConnectionPool(config)
        self.lookup.use(config, self.pool)
        self.service += 1
        log.info("service URL is now %s", config.service_url)
        for handler in self.handlers:
            if isinstance(handler, HandlerBase):
                handler.service_switched()
        if self.loop is not None and not self.closed:
            self.spawn(old.close())

    @property
    def operation_timeout(self) -> float:
        return self.config.operation_timeout_seconds

    def next_request_id(self) -> int:
        return next(self.request_ids)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` in the background until it ends or the client closes."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def close(self) -> None:
        """Close every producer and consumer, then the connections."""
        self.closed = True
        try:
            await self._close_handlers()
        finally:  # the connections close even if a handler's close failed
            await self.pool.close()

    async def _close_handlers(self) -> None:
        handlers = list(self.handlers)
        for handler in handlers:
            try:
                await handler.close()
            except PulsarException as exc:
                log.debug("closing %r: %s", handler, exc)
        for task in self.background:
            task.cancel()
        # Reconnections cancelled by the closes must finish before the loop may stop.
        tasks = [
            h.reconnecting
            for h in handlers
            if isinstance(h, HandlerBase) and h.reconnecting is not None
        ]
        tasks.extend(self.background)
        if tasks:
            await asyncio.wait(tasks, timeout=self.operation_timeout)


class HandlerBase:
    """A producer or consumer bound to one topic (partition): connects, and reconnects on loss.

    Subclasses implement :meth:`_register` (send PRODUCER / SUBSCRIBE on a connection and
    install themselves on it) and may override :meth:`_disconnected`.
    """

    def __init__(self, core: ClientCore, topic: str) -> None:
        self._core = core
        self.topic = topic
        self._cnx: ClientConnection | None = None
        self._closing = False
        self._reconnect_task: asyncio.Task[None] | None = None
        self._epoch = 0

    @property
    def reconnecting(self) -> asyncio.Task[None] | None:
        """The task reconnecting this handler, if one was started (it may have ended)."""
        return self._reconnect_task

    @property
    def connected(self) -> bool:
        """True while registered on a live connection."""
        return self._cnx is not None and self._cnx.is_open

    async def _register(self, cnx: ClientConnection) -> None:
        raise NotImplementedError

    def _disconnected(self) -> None:
        """Hook: the connection went away (before a reconnect is scheduled)."""

    def _check_open(self) -> None:
        """Hook: raise AlreadyClosed once the handler is closed."""

    def service_switched(self) -> None:
        """Hook: the client moved to another cluster, whose message ids name other messages
        (a consumer drops the acknowledgments it has not sent yet)."""

    async def _register_on(
        self,
        cnx: ClientConnection,
        registry: dict[int, Any],
        handler_id: int,
        request: tuple[pb.BaseCommand, int],
        close: Callable[[int, int], pb.BaseCommand],
    ) -> pb.BaseCommand:
        """Send ``request`` (PRODUCER or SUBSCRIBE, and its request id) with this handler in
        ``registry`` (the connection's producers or consumers) under ``handler_id``, and return
        the answer. A failure takes it out again; after a timeout the broker may have
        registered it all the same, so it is closed there too (``close(id, request_id)``); so too
        when the registration is given up (cancelled: the handler was closed meanwhile).

        A CLOSE_PRODUCER / CLOSE_CONSUMER that arrives with the answer (the topic was unloaded
        just after it took this handler) is read before this coroutine resumes: it takes the
        handler out of ``registry`` while the handler is not yet bound to ``cnx``, so nothing
        else would reconnect it. That is NotConnected here: the caller connects again."""
        registry[handler_id] = self
        command, rid = request
        try:
            answer = await cnx.request(command, rid, self._core.operation_timeout)
        except (Timeout, asyncio.CancelledError):
            # the broker may have registered it (or will): close it there, or it would hold
            # its place (an exclusive subscription, a producer name) as long as the connection
            registry.pop(handler_id, None)
            cnx.write_command(close(handler_id, self._core.next_request_id()))  # dropped if closed
            raise
        except BaseException:
            registry.pop(handler_id, None)
            raise
        if registry.get(handler_id) is not self:
            raise NotConnected(f"{self!r} was closed by the broker as it registered")
        return answer

    def _write(self, cmd: pb.BaseCommand) -> bool:
        """Write ``cmd`` on the connection if it is open; whether it was written."""
        cnx = self._cnx
        if cnx is None or not cnx.is_open:
            return False
        cnx.write_command(cmd)
        return True

    async def _live_connection(self) -> ClientConnection:
        """The connection; while the handler reconnects (after a seek the broker closes
        it), wait for it up to the operation timeout, as the official client does."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._core.operation_timeout
        delay = 0.005
        while True:
            self._check_open()
            cnx = self._cnx
            if cnx is not None and cnx.is_open:
                return cnx
            remaining = deadline - loop.time()
            if remaining <= 0 or self._core.closed:
                raise NotConnected(f"{self!r} is not connected")
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)

    async def _connect_once(self) -> None:
        url = await self._core.lookup.lookup(self.topic)
        cnx = await self._core.pool.get_connection(url)
        await self._register(cnx)
        self._epoch += 1

    async def start(self) -> None:
        """Connect and register with the broker for the first time (raises on failure)."""
        if self._core.closed:  # after Client.close() or shutdown(), as the official client
            self._closing = True
            raise AlreadyClosed("the client is closed")
        self._core.handlers.add(self)
        self._core.loop = asyncio.get_running_loop()
        try:
            await self._start()
        except BaseException:
            self._core.handlers.discard(self)
            self._closing = True
            raise

    async def _start(self) -> None:
        """First connection: retry retryable errors until the operation timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._core.operation_timeout
        delay = self._core.config.initial_backoff_ms / 1000
        while True:
            try:
                await self._connect_once()
                return
            except FinalConnectError:  # retrying cannot help
                raise
            except (*RETRYABLE, Timeout) as exc:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise Timeout(f"{self.topic}: {exc}") from None
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, self._core.config.max_backoff_ms / 1000)

    def on_disconnected(self, cnx: ClientConnection) -> None:
        """Called by the connection when it closes, or when the broker closed us on it."""
        if cnx is not self._cnx:
            return
        self._cnx = None
        self._disconnected()
        self._schedule_reconnect()

    def _schedule_reconnect(self) -> None:
        if self._closing or self._core.closed:
            return
        if self._reconnect_task is not None and not self._reconnect_task.done():
            return
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        delay = self._core.config.initial_backoff_ms / 1000
        while not self._closing and not self._core.closed:
            try:
                await self._connect_once()
                log.info("%r reconnected", self)
                return
            except _FATAL as exc:
                log.error("%r cannot reconnect: %s", self, exc)
                self._fail(exc)
                return
            except PulsarException as exc:
                log.info("%r reconnect failed (%s); retrying in %.1fs", self, exc, delay)
                self._reconnect_failed(exc)
            except OSError as exc:
                log.info("%r reconnect failed (%s); retrying in %.1fs", self, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._core.config.max_backoff_ms / 1000)

    def _fail(self, exc: PulsarException) -> None:
        """Hook: the handler can never reconnect."""

    def _reconnect_failed(self, exc: PulsarException) -> None:
        """Hook: one reconnection attempt failed with ``exc`` (another one follows)."""

    def _stop_reconnecting(self) -> None:
        self._closing = True
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
