"""The web ports' front door: a request whose presented credentials are refused is answered
401 before aiohttp parses it.

A client that repeats wrong credentials (a password guesser, a script with a stale token)
costs the broker a connection, a request and a refusal each time; through aiohttp that is a
request object, a handler task and a response writer per attempt, several times the cost of the
connection itself. The door looks at the first bytes of a connection: when they hold a whole
request head that is plain enough to read without aiohttp (HTTP/1.1, one ``Authorization``
header, a body within the web server's limit given by ``Content-Length``, no ``Expect`` nor
``Transfer-Encoding``, every line well formed), it stops reading and has the credentials
checked (:attr:`WebServer.refuse_early <starquake.broker.web.WebServer.refuse_early>`). Refused,
the connection gets the same 401 as aiohttp would send (status, headers, JSON reason), reads
nothing more and is closed after the refusal's linger. Otherwise (accepted, or anything the
door does not read) the bytes go to aiohttp unchanged, which authenticates the request as
always (a cached verdict by then).

With credentials the verdict does not depend on the method or the path (presented credentials
are always checked), so the door needs neither.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import re
from collections.abc import Awaitable, Callable

from aiohttp.http import SERVER_SOFTWARE

log = logging.getLogger(__name__)

HEAD_LIMIT = 8190
"""The longest request head the door reads (aiohttp's default line limit)."""
_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ /[!-~]* HTTP/1\.1")
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*")
_NOT_AT_THE_DOOR = frozenset({b"expect", b"transfer-encoding"})


class WebAuthenticationError(Exception):
    """The request's credentials are missing or wrong (answered 401 with this message; then,
    with ``linger``, the connection closes once ``linger()`` returns, answering nothing more
    meanwhile)."""

    def __init__(self, message: str, linger: Callable[[], Awaitable[None]] | None = None) -> None:
        super().__init__(message)
        self.linger = linger


RefuseEarly = Callable[[str, str], Awaitable[None]]
"""(Authorization header value, client address) -> None, or WebAuthenticationError."""


def door_credentials(data: bytes, max_body: int) -> str | None:
    """The ``Authorization`` value of the request head ``data`` starts with, when the door can
    answer for it (see the module's description; a body over ``max_body`` bytes is aiohttp's
    to refuse); None: leave it to aiohttp."""
    end = data.find(b"\r\n\r\n", 0, HEAD_LIMIT)
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    if not _REQUEST_LINE.fullmatch(lines[0]) or lines[0].startswith(b"HEAD "):
        return None
    authorization: bytes | None = None
    for line in lines[1:]:
        header = _HEADER.fullmatch(line)
        if header is None:
            return None
        name = header[1].lower()
        if name == b"authorization":
            if authorization is not None:
                return None
            authorization = header[2]
        elif name == b"content-length":
            size = header[2]
            if not size.isdigit() or int(size) > max_body:
                return None
        elif name in _NOT_AT_THE_DOOR:
            return None
    if authorization is None:
        return None
    return authorization.decode("utf-8", "surrogateescape")


def unauthorized(message: str) -> bytes:
    """aiohttp's 401 answer to an HTTP/1.1 request refused with ``message`` (closing)."""
    body = json.dumps({"reason": message}).encode()
    head = (
        "HTTP/1.1 401 Unauthorized\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\r\n"
        f"Server: {SERVER_SOFTWARE}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class WebDoor(asyncio.Protocol):
    """The protocol of one web connection. aiohttp's handler (``make_inner``) is made when the
    first bytes pass the door, and gets every event from then on; ``on_closed`` is called once
    the connection is lost.

    Until then the door keeps aiohttp's first deadline itself: a connection whose first request
    head is not complete ``head_timeout`` seconds after it opened is closed, as aiohttp closes
    an idle connection. A connection that sends nothing, or whose first request is refused at
    the door, never costs an aiohttp handler."""

    def __init__(
        self,
        make_inner: Callable[[], asyncio.Protocol],
        on_closed: Callable[[], None],
        refuse_early: RefuseEarly | None,
        refused: Callable[[], None],
        max_body: int,
        head_timeout: float,
        open_doors: set[WebDoor],
    ) -> None:
        self._make_inner = make_inner
        self._open_doors = open_doors
        self._inner: asyncio.Protocol | None = None
        self._on_closed = on_closed
        self._refuse_early = refuse_early
        self._refused = refused
        self._max_body = max_body
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._tail = b""
        """The last bytes of the first head so far (its end may come split)."""
        self._transport: asyncio.Transport | None = None
        self._held: bytearray | None = None
        """Bytes read while the verdict is awaited (None: forwarding)."""
        self._eof = False
        self._verdict: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the deadline of the first request head."""
        self._transport = transport  # type: ignore[assignment]  # uvloop's: no subclass
        self._open_doors.add(self)
        if self._head_timeout > 0:
            loop = asyncio.get_running_loop()
            self._head_timer = loop.call_later(self._head_timeout, self._head_overdue)

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self._transport is not None:
            self._transport.close()

    def _watch_head(self, data: bytes) -> None:
        """Stop the first deadline once the first request head is complete."""
        window = self._tail + data
        if window.find(b"\r\n\r\n") >= 0:
            assert self._head_timer is not None
            self._head_timer.cancel()
            self._head_timer = None
        else:
            self._tail = window[-3:]

    def _handler(self) -> asyncio.Protocol:
        """aiohttp's handler of the connection, made (and told of it) on first use."""
        inner = self._inner
        if inner is None:
            inner = self._inner = self._make_inner()
            inner.connection_made(self._transport)  # type: ignore[arg-type]
        return inner

    def data_received(self, data: bytes) -> None:
        """The first bytes pass the door; then forwarded (held while a verdict is awaited)."""
        if self._held is not None:
            self._held += data
            return
        if self._head_timer is not None:
            self._watch_head(data)
        check = self._refuse_early
        if check is not None:
            self._refuse_early = None  # the first request only
            authorization = door_credentials(data, self._max_body)
            if authorization is not None and self._transport is not None:
                self._held = bytearray(data)
                self._transport.pause_reading()
                peer = self._transport.get_extra_info("peername")
                remote = str(peer[0]) if peer else ""  # as aiohttp's request.remote
                self._verdict = asyncio.get_running_loop().create_task(
                    self._decide(check, authorization, remote)
                )
                return
        self._handler().data_received(data)

    async def _decide(self, check: RefuseEarly, authorization: str, remote: str) -> None:
        try:
            await check(authorization, remote)
        except WebAuthenticationError as exc:
            await self._refuse(exc)
            return
        except Exception:  # aiohttp's path answers it as it always has
            log.exception("checking the credentials of a web request failed")
        held, self._held = self._held, None
        transport = self._transport
        if transport is None or transport.is_closing() or held is None:
            return
        transport.resume_reading()
        handler = self._handler()
        handler.data_received(bytes(held))
        if self._eof:
            handler.eof_received()

    async def _refuse(self, exc: WebAuthenticationError) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._refused()
        transport.write(unauthorized(str(exc)))
        if exc.linger is not None:
            await exc.linger()
        transport.close()

    def eof_received(self) -> bool | None:
        """Forwarded (after the held bytes, when a verdict is awaited)."""
        if self._held is not None:
            self._eof = True
            return True  # keep the transport open for the answer
        return None if self._inner is None else self._inner.eof_received()

    def pause_writing(self) -> None:
        """Forwarded."""
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        """Forwarded."""
        if self._inner is not None:
            self._inner.resume_writing()

    def close(self) -> None:
        """Close the connection (the web server stops)."""
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forwarded, then the place is given back."""
        self._transport = None
        self._open_doors.discard(self)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._verdict is not None and not self._verdict.done():
            self._verdict.cancel()  # a check not started yet leaves its queue
        try:
            if self._inner is not None:
                self._inner.connection_lost(exc)
        finally:
            self._on_closed()
