"""Lookups over HTTP: what the client asks a broker's web port when its service URL is
``http://`` or ``https://``, as the official clients do.

- the broker of a topic: ``GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}``
  (``?listenerName=`` with a listener name, as Pulsar's Java client sends it), whose
  ``brokerUrl`` (``brokerUrlTls`` over TLS) the binary connection then goes to;
- the partitions of a topic:
  ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions?checkAllowAutoCreation=true``;
- the topics of a namespace (pattern subscriptions):
  ``GET /admin/v2/namespaces/{tenant}/{namespace}/topics?mode=PERSISTENT|NON_PERSISTENT|ALL``.

Credentials go in the ``Authorization`` header (``Bearer <token>``, ``Basic <user:password>``),
a TLS client certificate in the handshake of ``https://``. Each request uses a new connection
(HTTP/1.1, ``Connection: close``) and follows redirects; the credentials go only to the host
and port they were first sent to. As in the official client, an HTTP error status fails the
operation with ``ConnectError`` at once, and a web port that cannot be reached is retried until
the operation timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit

from starquake.client.base._config import CLIENT_VERSION, ClientConfig
from starquake.client.exceptions import (
    AuthenticationError,
    ConnectError,
    LookupError,
    Timeout,
)
from starquake.client.wire._connection import FinalConnectError
from starquake.common.topic_name import TopicName

_MAX_REDIRECTS = 20
_MAX_BODY = 16 * 1024 * 1024
_MAX_HEADER_LINES = 100
_REDIRECTS = (301, 302, 303, 307, 308)
_MODES = {0: "PERSISTENT", 1: "NON_PERSISTENT", 2: "ALL"}


class HttpStatusError(FinalConnectError):
    """The web service answered an HTTP error status: not retried (the official client fails
    the operation with ConnectError at once)."""


def http_hosts(url: str) -> list[tuple[str, int]]:
    """``http(s)://h1:8080,h2/`` -> ``[("h1", 8080), ("h2", 80)]`` (443 for https)."""
    parts = urlsplit(url)
    default_port = "443" if parts.scheme == "https" else "80"
    hosts = []
    for item in parts.netloc.split(","):
        host, _, port = item.rpartition(":")
        if not host or item.endswith("]"):
            host, port = item, default_port
        hosts.append((host.strip("[]"), int(port)))
    return hosts


class HttpLookup:
    """The lookups of a client whose service URL is an HTTP one."""

    def __init__(
        self, config: ClientConfig, tls_context: Callable[[], Awaitable[ssl.SSLContext | None]]
    ) -> None:
        self._config = config
        self._tls_context = tls_context
        self._hosts = http_hosts(config.service_url)
        self._next_host = 0

    async def partitions(self, topic: str) -> int:
        """The number of partitions of ``topic`` (0: not partitioned)."""
        name = TopicName.parse(topic)
        path = f"/admin/v2/{_topic_path(name)}/partitions?checkAllowAutoCreation=true"
        body = await self._get_json(path)
        count = body.get("partitions", 0) if isinstance(body, dict) else None
        if not isinstance(count, int):
            raise LookupError(f"malformed partition metadata of {topic}: {body!r}")
        return count

    async def broker_url(self, topic: str) -> str:
        """The binary URL of the broker serving ``topic`` (the TLS one over TLS)."""
        path = f"/lookup/v2/topic/{_topic_path(TopicName.parse(topic))}"
        if self._config.listener_name:
            path += f"?listenerName={quote(self._config.listener_name, safe='')}"
        body = await self._get_json(path)
        key = "brokerUrlTls" if self._config.tls else "brokerUrl"
        url = body.get(key) if isinstance(body, dict) else None
        if not isinstance(url, str) or not url:
            raise LookupError(f"the lookup of {topic} answered no {key}: {body!r}")
        return url

    async def topics(self, namespace: str, mode: int) -> list[str]:
        """The topics (partitions by their partition names) of ``tenant/namespace``."""
        path = f"/admin/v2/namespaces/{namespace}/topics?mode={_MODES.get(mode, 'PERSISTENT')}"
        body = await self._get_json(path)
        if not isinstance(body, list) or not all(isinstance(t, str) for t in body):
            raise LookupError(f"malformed topic list of {namespace}: {body!r}")
        return list(body)

    async def _get_json(self, path: str) -> Any:
        host, port = self._hosts[self._next_host % len(self._hosts)]
        self._next_host += 1
        headers = await self._auth_headers()
        origin = (host, port)
        for _ in range(_MAX_REDIRECTS + 1):
            sent = headers if (host, port) == origin else {}
            status, location, body = await self._request(host, port, path, sent)
            if status in _REDIRECTS and location:
                host, port, path = self._redirect(host, port, location)
                continue
            if status >= 400:
                raise HttpStatusError(
                    f"{self._url(host, port, path)} answered HTTP {status}{_reason(body)}"
                )
            try:
                return json.loads(body)
            except ValueError:
                raise LookupError(f"{self._url(host, port, path)} answered no JSON") from None
        raise LookupError(f"too many redirects looking up {path}")

    async def _auth_headers(self) -> dict[str, str]:
        auth = self._config.authentication
        if auth is None:
            return {}
        try:
            if auth.blocking:
                return await asyncio.to_thread(auth.http_headers)
            return auth.http_headers()
        except Exception as exc:
            raise AuthenticationError(f"cannot get the credentials: {exc}") from None

    def _redirect(self, host: str, port: int, location: str) -> tuple[str, int, str]:
        parts = urlsplit(location)
        if parts.netloc:
            host, port = http_hosts(f"{parts.scheme or 'http'}://{parts.netloc}")[0]
        path = parts.path or "/"
        return host, port, f"{path}?{parts.query}" if parts.query else path

    def _url(self, host: str, port: int, path: str) -> str:
        scheme = "https" if self._config.tls else "http"
        return f"{scheme}://{host}:{port}{path}"

    async def _request(
        self, host: str, port: int, path: str, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """(status, Location header, body) of ``GET path``, within the operation timeout."""
        url = self._url(host, port, path)
        try:
            context = await self._tls_context()
        except FinalConnectError as exc:  # a client certificate that cannot be used
            raise LookupError(f"cannot look up over {url}: {exc}") from None
        try:
            async with asyncio.timeout(self._config.operation_timeout_seconds):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, server_hostname=host if context else None
                )
                try:
                    writer.write(_request_bytes(host, port, path, headers))
                    return await _read_response(reader)
                finally:
                    writer.close()
                    with contextlib.suppress(OSError, ssl.SSLError):
                        await writer.wait_closed()
        except TimeoutError:
            raise Timeout(f"no answer from {url}") from None
        except ssl.SSLError as exc:  # before OSError, its base class; final, as curl's
            raise LookupError(f"TLS handshake with {url} failed: {exc}") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise ConnectError(f"cannot get {url}: {exc}") from None


def _reason(body: bytes) -> str:
    """``: <reason>`` of an error answer (Pulsar's ``{"reason": ...}``), or ""."""
    with contextlib.suppress(ValueError):
        answer = json.loads(body)
        if isinstance(answer, dict) and isinstance(answer.get("reason"), str):
            return f": {answer['reason']}"
    return ""


def _topic_path(name: TopicName) -> str:
    return f"{name.domain.value}/{name.namespace_name}/{quote(name.local_name, safe='')}"


def _request_bytes(host: str, port: int, path: str, headers: dict[str, str]) -> bytes:
    host_header = f"[{host}]" if ":" in host else host
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host_header}:{port}",
        f"User-Agent: {CLIENT_VERSION}",
        "Accept: application/json",
        "Connection: close",
        *(f"{key}: {value}" for key, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
    """(status, Location, body) of an HTTP/1.1 response (ValueError if malformed)."""
    status_line = (await reader.readline()).decode("latin-1").split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/"):
        raise ValueError("not an HTTP response")
    status = int(status_line[1])
    fields: dict[str, str] = {}
    for _ in range(_MAX_HEADER_LINES):
        line = (await reader.readline()).decode("latin-1").strip()
        if not line:
            break
        key, _, value = line.partition(":")
        fields[key.strip().lower()] = value.strip()
    else:
        raise ValueError("too many header lines")
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in fields:
        length = int(fields["content-length"])
        if length > _MAX_BODY:
            raise ValueError(f"a body of {length} bytes")
        body = await reader.readexactly(length)
    else:
        body = await reader.read(_MAX_BODY)
    return status, fields.get("location", ""), body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return bytes(body)
        if len(body) + size > _MAX_BODY:
            raise ValueError("a body over 16 MiB")
        body += await reader.readexactly(size)
        await reader.readline()
