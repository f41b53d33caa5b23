"""The web port: a small HTTP/1.1 server for health checks (the admin API builds on it later).

It reads one request per connection turn (keep-alive honoured), bounded in size, and serves
routes given as an exact path or as a regular expression over the path (its named groups are
the path parameters). Anything else gets a JSON 404.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024

Handler = Callable[[str, str, bytes], Awaitable[tuple[int, str, bytes]]]
# (path parameters, body) -> (status, content type, body)
PatternHandler = Callable[[dict[str, str], bytes], Awaitable[tuple[int, str, bytes]]]
MAX_BODY_BYTES = 1024 * 1024

_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    412: "Precondition Failed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}


class WebServer:
    """Serves routes given as ``(method, path) -> handler``."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.patterns: list[tuple[str, re.Pattern[str], PatternHandler]] = []
        self._server: asyncio.Server | None = None

    def route(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler

    def route_pattern(self, method: str, pattern: str, handler: PatternHandler) -> None:
        """Serve ``method`` on every path that ``pattern`` matches in full."""
        self.patterns.append((method, re.compile(pattern), handler))

    async def _dispatch(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        path = target.split("?", 1)[0]
        handler = self.routes.get((method, path))
        if handler is not None:
            return await handler(method, target, body)
        for verb, pattern, on_match in self.patterns:
            match = pattern.fullmatch(path)
            if match is not None and verb == method:
                try:
                    return await on_match(match.groupdict(), body)
                except Exception:
                    log.exception("%s %s failed", method, path)
                    return json_reply(500, {"reason": "internal error; see the broker log"})
        return json_reply(404, {"reason": f"No route for {method} {path}"})

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._respond(writer, 400, "text/plain", b"request header too large")
                    return
                if len(head) > MAX_HEADER_BYTES:
                    await self._respond(writer, 400, "text/plain", b"request header too large")
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, _version = lines[0].split(" ", 2)
                except ValueError:
                    await self._respond(writer, 400, "text/plain", b"bad request line")
                    return
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                try:
                    length = int(headers.get("content-length", "0") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES:
                    await self._respond(writer, 413, "text/plain", b"bad or too large body")
                    return
                try:
                    body = await reader.readexactly(length) if length else b""
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                status, ctype, payload = await self._dispatch(method, target, body)
                await self._respond(writer, status, ctype, payload)
                if headers.get("connection", "").lower() == "close":
                    return
        finally:
            writer.close()

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes) -> None:
        reason = _REASONS.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(head + body)
        await writer.drain()


def json_reply(status: int, value: object) -> tuple[int, str, bytes]:
    """A JSON answer (Pulsar's admin API answers errors as ``{"reason": ...}``)."""
    return status, "application/json", json.dumps(value).encode()
