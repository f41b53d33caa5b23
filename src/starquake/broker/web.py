"""The web port: the admin API, HTTP lookups and health checks, served with aiohttp on the
broker's event loop.

Routes are given as a regular expression over the path (its named groups are the path
parameters, and the query's parameters come with them) with what the route needs of the
caller's role (:class:`Need`). Anything else gets a JSON 404; a body over the limit gets 413.

Connections (see :class:`WebLimits`): at most ``max_connections`` at once (beyond, new ones wait
in the accept queue); a connection must deliver a complete request head within
``idle_timeout`` seconds of opening or of its previous response (closed otherwise: idle
keep-alive connections and slow headers alike), and a body must arrive within
``body_timeout`` seconds of its head (else 408 and close). The request is authenticated from
its head before its body is read; until then aiohttp's flow control buffers at most a few
reads of the body, and a refused request (401) is answered at once and its connection closed
without reading the body (after the authentication service's linger, see
:class:`WebAuthenticationError`).

Security hooks, both optional: :attr:`WebServer.authenticate` turns a request into a role (or
raises :class:`WebAuthenticationError`, answered 401), and :attr:`WebServer.authorize` sees the
role, the matched route's :class:`Need` and its path's parameters, and may answer in its place
(401, 403).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import re
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from starquake.broker.listener import Listener, bind
from starquake.broker.web_door import RefuseEarly, WebAuthenticationError, WebDoor

__all__ = ["Call", "Need", "WebAuthenticationError", "WebLimits", "WebServer", "json_reply"]

log = logging.getLogger(__name__)

# (status, content type, body), optionally followed by extra response headers
Reply = tuple[int, str, bytes] | tuple[int, str, bytes, dict[str, str]]
MAX_BODY_BYTES = 1024 * 1024


class Need(enum.Enum):
    """What a route needs of the caller's role (checked by :attr:`WebServer.authorize`)."""

    NOTHING = "nothing"
    ANY_ROLE = "any role"
    SUPER_USER = "super user"
    TENANT_ADMIN = "tenant admin"
    LIST_TOPICS = "list topics"
    TOPIC_LOOKUP = "lookup"
    TOPIC_CONSUME = "consume"
    TOPIC_ADMIN = "topic admin"


@dataclass(frozen=True)
class Call:
    """A routed request as its endpoint sees it."""

    params: dict[str, str]
    """The query's parameters, then the path's (which win on a clash)."""
    body: bytes = b""
    role: str | None = None
    """The authenticated role (None: authentication is off)."""
    target: str = ""
    """The request's path and query, as received."""


Endpoint = Callable[[Call], Awaitable[Reply]]
# request -> role (None: authentication is off); raises WebAuthenticationError
Authenticate = Callable[[web.Request], Awaitable[str | None]]
# (role, what the route needs, the path's parameters) -> None to allow, or the refusal
Authorize = Callable[[str | None, Need, dict[str, str]], Awaitable[Reply | None]]


@dataclass(frozen=True)
class WebLimits:
    """How long and how many connections the web ports keep (Pulsar's defaults)."""

    idle_timeout: float = 30.0
    """Seconds a connection has for a complete request head (from opening or the last response)."""
    body_timeout: float = 30.0
    """Seconds a request's body has to arrive in full after its head."""
    max_connections: int = 2048
    """Connections open at once, per port (0: no limit)."""
    accept_queue: int = 8192
    """Backlog of the listening sockets."""


@dataclass(frozen=True)
class _Served:
    method: str
    pattern: re.Pattern[str]
    endpoint: Endpoint
    need: Need


class WebServer:
    """Serves routes given as (method, path pattern, endpoint, what the route needs)."""

    def __init__(self, limits: WebLimits | None = None) -> None:
        self._routes: list[_Served] = []
        self.limits = limits or WebLimits()
        self._runner: web.AppRunner | None = None
        self.listeners: list[Listener] = []
        self.authenticate: Authenticate | None = None
        self.authorize: Authorize | None = None
        self.refuse_early: RefuseEarly | None = None
        """Checks the ``Authorization`` header of a connection's first request before aiohttp
        reads it (see :mod:`starquake.broker.web_door`); raises WebAuthenticationError."""
        self.refused_early = 0
        """Requests refused (401) at the door, before aiohttp."""
        self._doors: set[WebDoor] = set()
        """Open connections (aiohttp knows only those whose first bytes passed the door)."""

    @property
    def open_connections(self) -> int:
        """Connections open on the web ports."""
        return len(self._doors)

    @property
    def aiohttp_handlers(self) -> int:
        """Connections aiohttp serves (those whose first bytes passed the door)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    def add_route(self, method: str, pattern: str, endpoint: Endpoint, need: Need) -> None:
        """Serve ``method`` on every path that ``pattern`` (a regular expression whose named
        groups are the path's parameters) matches in full; the first route added wins."""
        self._routes.append(_Served(method, re.compile(pattern), endpoint, need))

    async def _dispatch(
        self, method: str, target: str, body: bytes, role: str | None = None, raw_target: str = ""
    ) -> Reply:
        path, _, query = target.partition("?")
        for served in self._routes:
            found = served.pattern.fullmatch(path) if served.method == method else None
            if found is None:
                continue
            names = {k: v for k, v in found.groupdict().items() if v is not None}
            if self.authorize is not None:
                refusal = await self.authorize(role, served.need, dict(names))
                if refusal is not None:
                    return refusal
            params = dict(urllib.parse.parse_qsl(query))
            params.update(names)
            try:
                return await served.endpoint(Call(params, body, role, raw_target))
            except Exception:
                log.exception("%s %s failed", method, path)
                return json_reply(500, {"reason": "internal error; see the broker log"})
        return json_reply(404, {"reason": f"No route for {method} {path}"})

    async def start(self, host: str, port: int) -> int:
        """Bind plain HTTP on ``port`` (served from :meth:`serve` on); returns the port bound (-1:
        ``port`` -1, no plain HTTP; :meth:`start_tls` may still add HTTPS)."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        # every path, newlines included (a percent-encoded one in a name)
        app.router.add_route("*", r"/{path:[\s\S]*}", self._handle)
        # keepalive_timeout runs from a connection's start and from each response until the
        # next request's head is complete; lingering_time 0: a body left unread (a refused
        # request) closes the connection rather than being read and thrown away
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=self.limits.idle_timeout,
            lingering_time=0,
        )
        await runner.setup()
        self._runner = runner
        if port < 0:
            return -1
        return self._listen("web port", host, port, None)

    async def start_tls(self, host: str, port: int, ssl_context: ssl.SSLContext) -> int:
        """Also serve HTTPS on ``port`` (after :meth:`start`); returns the port bound."""
        assert self._runner is not None, "start() first"
        return self._listen("TLS web port", host, port, ssl_context)

    def _listen(self, name: str, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        """Bind ``port`` (accepting from :meth:`serve` on); returns the port bound (port 0: a
        free one)."""
        assert self._runner is not None
        handlers = self._runner.server
        assert handlers is not None

        def factory(on_closed: Callable[[], None]) -> asyncio.BaseProtocol:
            return WebDoor(
                handlers,
                on_closed,
                self.refuse_early,
                refused,
                MAX_BODY_BYTES,
                self.limits.idle_timeout,
                self._doors,
            )

        def refused() -> None:
            self.refused_early += 1

        listener = Listener(
            name,
            bind(host, port, self.limits.accept_queue),
            factory,
            ssl_context=ssl_context,
            ssl_handshake_timeout=self.limits.idle_timeout,
            max_connections=self.limits.max_connections,
        )
        self.listeners.append(listener)
        return listener.port

    def serve(self) -> None:
        """Start accepting on the ports bound by :meth:`start` and :meth:`start_tls` (until
        then connections wait in the accept queue: nothing is answered before the broker is
        ready)."""
        for listener in self.listeners:
            listener.start()

    async def stop(self) -> None:
        """Stop serving and close the listening sockets."""
        listeners, self.listeners = self.listeners, []
        for listener in listeners:
            listener.close()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        for door in list(self._doors):
            door.close()
        for listener in listeners:
            await listener.wait_closed()

    async def _handle(self, request: web.Request) -> web.Response:
        """Check the head (size, credentials), then read the body and dispatch."""
        too_large = json_reply(413, {"reason": f"request body over {MAX_BODY_BYTES} bytes"})
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return _response(too_large, close=True)
        try:
            role = await self.authenticate(request) if self.authenticate else None
        except WebAuthenticationError as exc:
            return await _refuse(request, exc)
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _response(too_large, close=True)
        except TimeoutError:
            reason = f"request body not received within {self.limits.body_timeout:g} s"
            return _response(json_reply(408, {"reason": reason}), close=True)
        target = request.path  # percent-decoded, as topic names are matched
        if request.query_string:
            target += "?" + request.query_string
        raw = request.raw_path  # as sent (percent-encoded): for a redirect to another broker
        return _response(await self._dispatch(request.method, target, body, role, raw))


async def _refuse(request: web.Request, exc: WebAuthenticationError) -> web.Response:
    """Answer 401 at once; the connection closes (its body unread) after ``exc.linger``. What
    the client sends meanwhile is not answered (aiohttp's flow control stops reading after a
    few requests or reads of a body)."""
    response = _response(json_reply(401, {"reason": str(exc)}), close=True)
    if exc.linger is not None:
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:  # the client is gone: nothing to linger for
            return response
        await exc.linger()
    return response


def _response(reply: Reply, *, close: bool = False) -> web.Response:
    """The aiohttp response of ``reply``; ``close``: the connection closes after it (its
    request's body was not read in full)."""
    status, ctype, payload = reply[0], reply[1], reply[2]
    headers = _sanitised(reply[3]) if len(reply) > 3 else None
    response = web.Response(
        status=status,
        body=payload,
        content_type=_mime(ctype),
        charset=_charset(ctype),
        headers=headers,
    )
    if close:
        response.force_close()
    return response


_LINE_BREAKS = re.compile(r"[\r\n]")


def _sanitised(headers: dict[str, str]) -> dict[str, str]:
    """Header names and values with each CR and LF as a space, as Jetty writes them (some
    carry what a client sent, e.g. a message's properties: never a header of their own)."""
    return {_LINE_BREAKS.sub(" ", name): _LINE_BREAKS.sub(" ", v) for name, v in headers.items()}


def _mime(ctype: str) -> str:
    """The content type with every parameter but ``charset`` (aiohttp adds that one)."""
    parts = [part.strip() for part in ctype.split(";")]
    return "; ".join(p for p in parts if p and p.partition("=")[0].strip().lower() != "charset")


def _charset(ctype: str) -> str | None:
    for param in ctype.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "charset":
            return value.strip()
    return None


def json_reply(status: int, value: object) -> tuple[int, str, bytes]:
    """A JSON answer (Pulsar's admin API answers errors as ``{"reason": ...}``)."""
    return status, "application/json", json.dumps(value).encode()
