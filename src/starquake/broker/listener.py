"""Listening sockets whose accept loop guards the broker's connections and descriptors.

The event loop's own server accepts whatever arrives; when ``accept()`` fails for want of
descriptors the listening socket stays readable, so it retries (and logs) without end, and
the connections it did accept can take every descriptor the storage needs. A
:class:`Listener` accepts itself:

- **connection limit** (``max_connections``, 0: none): at the limit a ``PAUSE`` listener stops
  accepting until a connection closes, new ones waiting in the kernel's accept queue (as the
  connection limit of Pulsar's web server, ``maxHttpServerConnections``); a ``REFUSE`` listener
  accepts and closes them at once (as Pulsar's ``brokerMaxConnections``).
- **descriptor reserve**: descriptors are handed out lowest first, so an accepted socket
  numbered within :func:`descriptor_reserve` of the open-file limit means nearly all of them
  are in use. It is closed and accepting pauses for :data:`ACCEPT_RETRY_SECONDS`, which leaves
  the reserve to the storage and to the connections already open.
- **accept failures** for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) pause accepting
  likewise instead of spinning on the readable socket.

Each kind of event is logged at most once per :data:`LOG_INTERVAL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import resource
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from starquake.broker.log_throttle import LogThrottle
from starquake.common.descriptors import descriptor_limit

log = logging.getLogger(__name__)

ACCEPT_BATCH = 64
"""Connections accepted per wake-up of a listening socket (others get their turn between)."""
ACCEPT_RETRY_SECONDS = 1.0
"""How long accepting pauses when descriptors or kernel memory run out."""
LOG_INTERVAL_SECONDS = 10.0
PAUSE = "pause"
REFUSE = "refuse"
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ProtocolFactory = Callable[[Callable[[], None]], asyncio.BaseProtocol]
"""Makes the protocol of an accepted connection, given what to call once it has closed."""


def descriptor_reserve(limit: int) -> int:
    """Descriptors kept free of connections for the storage and the rest of the broker."""
    return min(128, limit // 4)


def raise_open_file_limit() -> None:
    """Raise the soft open-file limit to the hard one (as many servers do at start)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.info("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
        return
    log.info("raised the open-file limit from %d to %d", soft, target)


def bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address of ``host`` (not accepting yet)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                # worded as the event loop's own servers word it
                reason = (exc.strerror or str(exc)).lower()
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {address!r}: {reason}"
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _Slot:
    """One accepted connection's place under the limit, given back exactly once."""

    __slots__ = ("_listener",)

    def __init__(self, listener: Listener) -> None:
        self._listener: Listener | None = listener

    def release(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.released()


class Listener:
    """Accepts connections on ``sockets`` and hands each to a protocol from ``factory``."""

    def __init__(
        self,
        name: str,
        sockets: list[socket.socket],
        factory: ProtocolFactory,
        *,
        ssl_context: ssl.SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
        max_connections: int = 0,
        at_limit: str = PAUSE,
    ) -> None:
        self.name = name
        self.sockets = sockets
        self._factory = factory
        self._ssl = ssl_context
        self._ssl_handshake_timeout = ssl_handshake_timeout if ssl_context is not None else None
        self.max_connections = max_connections
        self._at_limit = at_limit
        self.active = 0
        """Connections accepted and not yet closed."""
        self.refused = 0
        """Connections closed at once: over the limit, or while descriptors ran short."""
        self.pauses = 0
        """Times accepting paused for want of descriptors or kernel memory."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._closed = False
        self._full = False
        self._backoff: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._fd_limit = 0
        self._reserve = 0
        self._limit_log = LogThrottle(log, LOG_INTERVAL_SECONDS)
        self._resource_log = LogThrottle(log, LOG_INTERVAL_SECONDS)

    @property
    def port(self) -> int:
        """The port bound."""
        return int(self.sockets[0].getsockname()[1])

    def start(self) -> None:
        """Start accepting."""
        self._loop = asyncio.get_running_loop()
        self._fd_limit = descriptor_limit()
        self._reserve = descriptor_reserve(self._fd_limit)
        self._update_reading()

    def close(self) -> None:
        """Stop accepting and close the listening sockets (open connections stay)."""
        self._closed = True
        self._update_reading()
        if self._backoff is not None:
            self._backoff.cancel()
        for sock in self.sockets:
            sock.close()
        for task in self._tasks:
            task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the connections being set up (a TLS handshake) have given up."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def released(self) -> None:
        """A connection closed: its place is free."""
        self.active -= 1
        if self._full and self.active < self.max_connections:
            self._full = False
            self._update_reading()

    def _update_reading(self) -> None:
        want = not self._closed and not self._full and self._backoff is None
        if want == self._reading or self._loop is None:
            return
        self._reading = want
        for sock in self.sockets:
            if want:
                accept = functools.partial(self._accept, sock, int(sock.family), sock.proto)
                self._loop.add_reader(sock.fileno(), accept)
            else:
                self._loop.remove_reader(sock.fileno())

    def _pause(self, seconds: float) -> None:
        if self._backoff is None and self._loop is not None and not self._closed:
            self._backoff = self._loop.call_later(seconds, self._end_backoff)
            self._update_reading()

    def _end_backoff(self) -> None:
        self._backoff = None
        self._update_reading()

    def _accept(self, listening: socket.socket, family: int, proto: int) -> None:
        for _ in range(ACCEPT_BATCH):
            if not self._reading:
                return
            if self._at_limit == PAUSE and 0 < self.max_connections <= self.active:
                self._full = True
                self._update_reading()
                self._limit_log.log(
                    logging.WARNING,
                    "%s: %d connections open, the limit: new ones wait until one closes",
                    self.name,
                    self.active,
                )
                return
            try:
                # the descriptor alone (accept4, close-on-exec): socket.accept() would build a
                # socket object through enum conversions first
                fd, _ = listening._accept()  # type: ignore[attr-defined]
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._out_of_resources(exc)
                return
            if fd >= self._fd_limit - self._reserve:
                self._refuse(fd)
                self._out_of_resources(None)
                return
            if self._at_limit == REFUSE and 0 < self.max_connections <= self.active:
                self._refuse(fd)
                self._limit_log.log(
                    logging.WARNING,
                    "%s: closed a new connection: %d connections open, the limit",
                    self.name,
                    self.active,
                )
                continue
            self._serve(_accepted_socket(family, proto, fd))

    def _refuse(self, fd: int) -> None:
        self.refused += 1
        os.close(fd)

    def _out_of_resources(self, exc: OSError | None) -> None:
        """Accepting fails for want of descriptors (or kernel memory): pause, log once."""
        self.pauses += 1
        if exc is not None and exc.errno not in _OUT_OF_RESOURCES:
            self._resource_log.log(logging.WARNING, "%s: accept failed: %s", self.name, exc)
        else:
            why = str(exc) if exc is not None else "nearly every descriptor is in use"
            self._resource_log.log(
                logging.WARNING,
                "%s: not accepting connections for %.0f s: %s (open-file limit %d, "
                "%d connections open here)",
                self.name,
                ACCEPT_RETRY_SECONDS,
                why,
                self._fd_limit,
                self.active,
            )
        self._pause(ACCEPT_RETRY_SECONDS)

    def _serve(self, conn: socket.socket) -> None:
        """Hand ``conn`` to the event loop's transport (which makes it non-blocking and sets
        TCP_NODELAY itself). Without TLS that completes within a loop iteration, so it is
        driven without a task; a TLS handshake runs as a task that closing cancels."""
        assert self._loop is not None
        self.active += 1
        slot = _Slot(self)
        if self._ssl is None:
            factory = functools.partial(self._factory, slot.release)
            _drive(self._loop.connect_accepted_socket(factory, conn), self, conn, slot)
            return
        task = self._loop.create_task(self._connect(conn, slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def set_up_failed(self, conn: socket.socket, slot: _Slot, exc: BaseException) -> None:
        """Setting up an accepted connection failed (a reset, a failed TLS handshake)."""
        log.debug("%s: connection set-up failed: %r", self.name, exc)
        slot.release()
        with contextlib.suppress(OSError):
            conn.close()

    async def _connect(self, conn: socket.socket, slot: _Slot) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._factory(slot.release),
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=self._ssl_handshake_timeout,
            )
        except (Exception, asyncio.CancelledError) as exc:  # a failed TLS handshake, a reset
            self.set_up_failed(conn, slot, exc)


_SOCKET_CLASSES: dict[int, type[socket.socket]] = {}


def _accepted_socket(family: int, proto: int, fd: int) -> socket.socket:
    """A socket object for an accepted descriptor (of the listening socket's ``family`` and
    ``proto``: asyncio's own loop sets TCP_NODELAY only on a socket whose ``proto`` says TCP)
    whose ``family`` and ``type`` are plain attributes (the event loop reads both; the socket
    module's properties convert to enums)."""
    cls = _SOCKET_CLASSES.get(family)
    if cls is None:
        attributes = {"__slots__": (), "family": family, "type": socket.SOCK_STREAM}
        cls = _SOCKET_CLASSES[family] = type("AcceptedSocket", (socket.socket,), attributes)
    return cls(family, socket.SOCK_STREAM, proto, fd)


def _drive(
    setup: Coroutine[Any, Any, Any], listener: Listener, conn: socket.socket, slot: _Slot
) -> None:
    """Run ``setup`` (the loop's ``connect_accepted_socket`` without TLS) without a task: it
    creates the transport at once and then waits for one future, the protocol's
    ``connection_made``; a task would cost more than the whole wait."""

    def step(_: object = None) -> None:
        try:
            waiting = setup.send(None)
        except StopIteration:
            return
        except BaseException as exc:  # as the task of a TLS connection reports it
            listener.set_up_failed(conn, slot, exc)
            return
        waiting.add_done_callback(step)

    step()
