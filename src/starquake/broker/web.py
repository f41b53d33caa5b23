"""The web port: a small HTTP/1.1 server for health checks (the admin API builds on it later).

It reads one request per connection turn (keep-alive honoured), bounded in size, and answers
``GET /admin/v2/brokers/health`` with ``ok``. Anything else gets a JSON 404.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024

Handler = Callable[[str, str, bytes], Awaitable[tuple[int, str, bytes]]]

_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
}


class WebServer:
    """Serves routes given as ``(method, path) -> handler``."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self._server: asyncio.Server | None = None

    def route(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler

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
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                path = target.split("?", 1)[0]
                handler = self.routes.get((method, path))
                if handler is None:
                    status, ctype, payload = (
                        404,
                        "application/json",
                        json.dumps({"reason": f"No route for {method} {path}"}).encode(),
                    )
                else:
                    status, ctype, payload = await handler(method, target, body)
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
