"""Connection pool (one connection per logical broker address) and the lookup service."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

from starquake.client.base._config import CLIENT_VERSION, ClientConfig
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.exceptions import (
    RETRYABLE,
    ConnectError,
    InvalidConfiguration,
    InvalidUrl,
    LookupError,
    PulsarException,
    Timeout,
    from_server_error,
)
from starquake.client.wire._connection import ClientConnection, FinalConnectError, TlsHandshakeError
from starquake.client.wire._http_lookup import HttpLookup
from starquake.common.schema_info import SchemaInfo
from starquake.common.tls import ClientCertificateError, TlsSettingsError, client_ssl_context
from starquake.protocol import client_commands
from starquake.protocol.schema import schema_info_of
from starquake.protocol.wire import pb

log = logging.getLogger(CLIENT_LOGGER_NAME)

# our own generator: a library must not draw from (or disturb) the global one
_RANDOM = random.Random()

_MAX_REDIRECTS = 20
_CLOSE_WAIT_SECONDS = 1.0  # for a TLS connection's goodbye (close_notify) on close
_R = TypeVar("_R")
_Attempt = Callable[[], Awaitable[_R]]


def check_service_url(url: str) -> None:
    """Reject a service URL as the official client does: ValueError for a missing or unknown
    scheme, no host, or a bad port."""
    parts = urlsplit(url)
    if not parts.scheme or "://" not in url:
        raise ValueError(f"The scheme part is missing: {url}")
    if parts.scheme not in ("pulsar", "pulsar+ssl", "http", "https"):
        raise ValueError(f"Invalid scheme: {parts.scheme}")
    if not parts.netloc:
        raise ValueError("No service url is provided yet")
    for item in parts.netloc.split(","):
        host, _, port = item.rpartition(":")
        if host and not item.endswith("]") and not port.isdigit():
            raise ValueError(f"invalid hostname: {item}")


def parse_service_url(url: str) -> list[tuple[str, int]]:
    """``pulsar://h1:6650,h2:6651/`` -> ``[("h1", 6650), ("h2", 6651)]`` (``pulsar+ssl://``
    too; default ports 6650 and 6651)."""
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise InvalidUrl(f"unsupported service URL {url!r}")
    default_port = "6651" if parts.scheme == "pulsar+ssl" else "6650"
    hosts = []
    for item in parts.netloc.split(","):
        host, _, port = item.rpartition(":")
        if not host:
            host, port = item, default_port
        hosts.append((host.strip("[]"), int(port)))
    if not hosts:
        raise InvalidUrl(f"no host in service URL {url!r}")
    return hosts


class ConnectionPool:
    """Opens, shares and forgets broker connections, keyed by logical address."""

    def __init__(self, config: ClientConfig) -> None:
        self._config = config
        self._connections: dict[str, ClientConnection] = {}
        self._opening: dict[str, asyncio.Future[ClientConnection]] = {}
        self._closed = False
        self._ssl_context: ssl.SSLContext | None = None

    async def get_connection(self, logical_url: str) -> ClientConnection:
        """An open connection to ``logical_url`` (``pulsar://host:port``), reused if possible."""
        if self._closed:
            raise ConnectError("client is closed")
        cnx = self._connections.get(logical_url)
        if cnx is not None and cnx.is_open:
            return cnx
        opening = self._opening.get(logical_url)
        if opening is not None:
            return await asyncio.shield(opening)
        fut: asyncio.Future[ClientConnection] = asyncio.get_running_loop().create_future()
        self._opening[logical_url] = fut
        try:
            cnx = await self._open(logical_url)
            if self._closed:  # the client closed while we connected: nobody will close it
                cnx.abort()
                raise ConnectError("client is closed")
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._opening.pop(logical_url, None)
        self._connections[logical_url] = cnx
        fut.set_result(cnx)
        return cnx

    async def _open(self, logical_url: str) -> ClientConnection:
        host, port = _RANDOM.choice(parse_service_url(logical_url))
        loop = asyncio.get_running_loop()
        timeout = self._config.connection_timeout_ms / 1000
        tls_context = await self.tls_context()
        try:
            _, cnx = await asyncio.wait_for(
                loop.create_connection(
                    lambda: ClientConnection(
                        logical_url,
                        CLIENT_VERSION,
                        self._config.keep_alive_interval_seconds,
                        self._config.authentication,
                    ),
                    host,
                    port,
                    ssl=tls_context,
                    server_hostname=host if tls_context is not None else None,
                ),
                timeout,
            )
        except ssl.SSLError as exc:  # before OSError, its base class
            raise TlsHandshakeError(f"TLS handshake with {logical_url} failed: {exc}") from None
        except (OSError, TimeoutError) as exc:
            raise ConnectError(f"cannot connect to {logical_url}: {exc}") from None
        try:
            await cnx.handshake(timeout)
        except BaseException:  # refused, timed out, or cancelled (the client is closing)
            cnx.abort()
            raise
        log.debug("connected to %s (%s)", logical_url, cnx.server_version)
        return cnx

    async def tls_context(self) -> ssl.SSLContext | None:
        """The SSL context of broker connections and HTTPS lookups (None without TLS), built
        once off the loop."""
        config = self._config
        if not config.tls:
            return None
        if self._ssl_context is None:
            try:
                context = await asyncio.to_thread(
                    client_ssl_context,
                    trust_certs_file_path=config.tls_trust_certs_file_path,
                    allow_insecure_connection=config.tls_allow_insecure_connection,
                    validate_hostname=config.tls_validate_hostname,
                    certificate_file_path=config.tls_certificate_file_path,
                    private_key_file_path=config.tls_private_key_file_path,
                )
            except ClientCertificateError as exc:  # the official client cannot connect
                raise FinalConnectError(str(exc)) from None
            except TlsSettingsError as exc:
                raise InvalidConfiguration(str(exc)) from None
            self._ssl_context = self._ssl_context or context
        return self._ssl_context

    async def close(self) -> None:
        """Close every connection."""
        self._closed = True
        connections = list(self._connections.values())
        for cnx in connections:
            cnx.close()
        self._connections.clear()
        await asyncio.gather(*(cnx.wait_lost(_CLOSE_WAIT_SECONDS) for cnx in connections))

    def abort(self) -> None:
        """Close every connection at once (no TLS goodbye): the loop is about to stop."""
        self._closed = True
        connections, self._connections = self._connections, {}
        for cnx in connections.values():
            cnx.abort()


class LookupService:
    """Binary-protocol lookups: partition metadata, topic owner (with redirects), namespaces."""

    def __init__(
        self, config: ClientConfig, pool: ConnectionPool, request_ids: itertools.count[int]
    ):
        self._config = config
        self._pool = pool
        self._request_ids = request_ids
        self._service_url = config.service_url.rstrip("/")
        self._http: HttpLookup | None = None
        if config.service_url.startswith(("http://", "https://")):
            self._http = HttpLookup(config, pool.tls_context)
        self._schemas: dict[tuple[str, bytes], SchemaInfo | None] = {}

    def use(self, config: ClientConfig, pool: ConnectionPool) -> None:
        """Look up in another cluster from now on; lookups retrying go there next attempt."""
        self._config = config
        self._pool = pool
        self._service_url = config.service_url.rstrip("/")
        self._schemas.clear()

    def next_request_id(self) -> int:
        return next(self._request_ids)

    @property
    def _timeout(self) -> float:
        return self._config.operation_timeout_seconds

    async def _retrying(self, what: str, attempt: _Attempt[_R]) -> _R:
        """Retry ``attempt`` on retryable errors with backoff until the operation timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        delay = self._config.initial_backoff_ms / 1000
        while True:
            try:
                return await attempt()
            except (TlsHandshakeError, FinalConnectError):
                raise
            except (*RETRYABLE, Timeout) as exc:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise Timeout(f"{what}: {exc}") from None
                log.debug("%s failed (%s); retrying in %.2fs", what, exc, delay)
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, self._config.max_backoff_ms / 1000)

    async def get_partitioned_metadata(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 for a non-partitioned topic)."""

        async def attempt() -> int:
            if self._http is not None:
                return await self._http.partitions(topic)
            cnx = await self._pool.get_connection(self._service_url)
            rid = self.next_request_id()
            cmd = client_commands.partitioned_metadata(topic, rid)
            resp = (await cnx.request(cmd, rid, self._timeout)).partition_metadata_response
            if resp.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
                raise _lookup_error(resp.error, resp.message)
            return resp.partitions

        return await self._retrying(f"partition metadata of {topic}", attempt)

    async def lookup(self, topic: str) -> str:
        """Logical URL of the broker that serves ``topic`` (following redirects)."""

        async def attempt() -> str:
            if self._http is not None:
                return await self._http.broker_url(topic)
            url = self._service_url
            authoritative = False
            for _ in range(_MAX_REDIRECTS):
                cnx = await self._pool.get_connection(url)
                rid = self.next_request_id()
                cmd = client_commands.lookup(topic, rid, authoritative, self._config.listener_name)
                resp = (await cnx.request(cmd, rid, self._timeout)).lookup_topic_response
                if resp.response == pb.CommandLookupTopicResponse.Failed:
                    raise _lookup_error(resp.error, resp.message)
                target = self._broker_url(resp) or url
                if resp.proxy_through_service_url:
                    target = self._service_url
                if resp.response == pb.CommandLookupTopicResponse.Connect:
                    return target
                url, authoritative = target, resp.authoritative
            raise LookupError(f"too many lookup redirects for {topic}")

        return await self._retrying(f"lookup of {topic}", attempt)

    def _broker_url(self, resp: pb.CommandLookupTopicResponse) -> str:
        """The URL a lookup answered for this client: the TLS one on TLS ("": the broker
        answered none of the right kind, and the current connection's broker serves)."""
        if self._config.tls:
            if not resp.brokerServiceUrlTls and resp.brokerServiceUrl:
                raise LookupError(
                    f"the broker offers no TLS URL (only {resp.brokerServiceUrl}): "
                    "is its brokerServicePortTls on?"
                )
            return resp.brokerServiceUrlTls
        return resp.brokerServiceUrl

    async def get_topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        """Topics (partitions included) of ``tenant/namespace``."""

        async def attempt() -> list[str]:
            if self._http is not None:
                return await self._http.topics(namespace, mode)
            cnx = await self._pool.get_connection(self._service_url)
            rid = self.next_request_id()
            cmd = client_commands.get_topics_of_namespace(namespace, rid, mode)
            resp = (await cnx.request(cmd, rid, self._timeout)).get_topics_of_namespace_response
            return list(resp.topics)

        return await self._retrying(f"topics of {namespace}", attempt)

    def has_cached_schema(self, topic: str, version: bytes) -> bool:
        """Whether schema version ``version`` of ``topic`` was fetched before."""
        return (topic, version) in self._schemas

    def cached_schema(self, topic: str, version: bytes) -> SchemaInfo | None:
        """Schema version ``version`` of ``topic`` if fetched before (None if not, or if the
        topic has no such version)."""
        return self._schemas.get((topic, version))

    async def get_schema(self, topic: str, version: bytes | None = None) -> SchemaInfo | None:
        """Schema ``version`` of ``topic`` (the latest when None), or None when the topic has
        no such schema. Versions never change, so they are cached."""
        if version and self.has_cached_schema(topic, version):
            return self.cached_schema(topic, version)

        async def attempt() -> SchemaInfo | None:
            cnx = await self._pool.get_connection(await self.lookup(topic))
            rid = self.next_request_id()
            cmd = client_commands.get_schema(topic, rid, version)
            resp = (await cnx.request(cmd, rid, self._timeout)).get_schema_response
            if resp.HasField("error_code"):
                if resp.error_code == pb.TopicNotFound:
                    return None
                raise _lookup_error(resp.error_code, resp.error_message)
            return schema_info_of(resp.schema)

        info = await self._retrying(f"schema of {topic}", attempt)
        if version and len(self._schemas) < _MAX_CACHED_SCHEMAS:
            self._schemas[(topic, version)] = info
        return info


_MAX_CACHED_SCHEMAS = 10_000


def _lookup_error(code: int, message: str) -> PulsarException:
    return from_server_error(code, message)
