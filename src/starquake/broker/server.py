"""BrokerServer: start-up, serving and graceful shutdown of one standalone broker."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from starquake import _native
from starquake.broker import admin, config_sync, pulsar_settings
from starquake.broker.config import SYSTEM_PROPERTIES, BrokerConfig, ConfigError
from starquake.broker.connection import ServerCnx
from starquake.broker.listener import REFUSE, Listener, bind, raise_open_file_limit
from starquake.broker.pulsar_settings import pulsar_key
from starquake.broker.quorum import ledger_replicas
from starquake.broker.security import tls
from starquake.broker.security.web_authorization import web_authorizer
from starquake.broker.service import BrokerService
from starquake.broker.urls import BrokerUrls
from starquake.broker.web import WebLimits, WebServer
from starquake.common.redact import redact_url
from starquake.storage import FileFaults, StorageError, StorageFaults

if TYPE_CHECKING:
    from starquake.cluster.js_factory import JetStreamLedgerFactory

log = logging.getLogger(__name__)
TLS_HANDSHAKE_TIMEOUT = 30.0
"""Seconds a client has to finish the TLS handshake on the TLS ports."""
BINARY_BACKLOG = 4096
"""Backlog of the binary ports' listening sockets (the kernel caps it at ``somaxconn``)."""


GC_THRESHOLDS = (20_000, 10, 10)
"""The garbage collector's thresholds in a broker process (Python's defaults: 700, 10, 10).

A full collection walks every tracked object, with a topic's cached entries and thousands of
open connections several hundred thousand, and the event loop stands still meanwhile (0.1 to
0.2 s each). With the defaults a busy broker ran several a minute. With a young generation of
20,000 the objects of messages in flight are mostly freed by their reference counts before a
collection sees them, so few are promoted; young collections walk at most 20,000 objects (a
few ms) and full ones become rare (minutes apart under the same load). Reference counting
still frees at once whatever is not in a cycle."""


def tune_garbage_collector() -> None:
    """Set up the garbage collector of a broker process once it has started: collect, freeze
    what start-up made (modules, classes, settings: never garbage, so no full collection walks
    them again) and apply :data:`GC_THRESHOLDS`. Only for a process that is the broker: an
    embedded broker leaves its host's collector alone."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def storage_faults(path: str) -> StorageFaults:
    """Storage faults controlled by the JSON file ``path`` (a testing aid; see FileFaults)."""
    log.warning("storage fault injection is on, controlled by %s", path)
    return FileFaults(Path(path))


class BrokerStartError(Exception):
    """The broker cannot start (e.g. its data directory is in use by another broker)."""


@contextlib.contextmanager
def _naming(key: str, value: object) -> Iterator[None]:
    """Report an OSError in the block as a BrokerStartError naming the configuration key."""
    try:
        yield
    except OSError as exc:
        raise BrokerStartError(f"{key} {value}: {exc}") from exc


class BrokerServer:
    """Binds the binary-protocol ports (plaintext ``brokerServicePort``, TLS
    ``brokerServicePortTls``) and the web ports (``webServicePort``, HTTPS ``webServicePortTls``)
    around a :class:`BrokerService`; a port set to -1 is off."""

    def __init__(self, config: BrokerConfig, faults: StorageFaults | None = None) -> None:
        self.config = config
        self._faults = faults
        self.service: BrokerService | None = None
        self._servers: list[Listener] = []
        self.web = WebServer(
            WebLimits(
                idle_timeout=config.httpServerIdleTimeoutSeconds,
                body_timeout=config.httpServerRequestBodyTimeoutSeconds,
                max_connections=config.maxHttpServerConnections,
                accept_queue=config.httpServerAcceptQueueSize,
            )
        )
        self.broker_port = -1
        """The plaintext binary port bound (-1: off)."""
        self.broker_port_tls = -1
        """The TLS binary port bound (-1: off)."""
        self.web_port = -1
        self.web_port_tls = -1
        self._stopped = asyncio.Event()

    def _url(self, scheme: str, port: int) -> str:
        return f"{scheme}://{self.config.advertised_host}:{port}" if port >= 0 else ""

    @property
    def urls(self) -> BrokerUrls:
        """This broker's URLs, from the ports bound ("" for a port that is off)."""
        return BrokerUrls(
            self._url("pulsar", self.broker_port),
            self._url("pulsar+ssl", self.broker_port_tls),
            self._url("http", self.web_port),
            self._url("https", self.web_port_tls),
        )

    @property
    def service_url_tls(self) -> str:
        """``pulsar+ssl://host:port`` of the TLS binary port ("" when it is off)."""
        return self.urls.service_url_tls

    @property
    def service_url(self) -> str:
        """The plaintext service URL, or the TLS one when the plaintext port is off."""
        return self.urls.any_service_url

    @property
    def web_service_url_tls(self) -> str:
        """``https://host:port`` of the HTTPS web port ("" when it is off)."""
        return self.urls.web_service_url_tls

    @property
    def web_service_url(self) -> str:
        """The plaintext web URL, or the HTTPS one when the plaintext web port is off."""
        return self.urls.any_web_service_url

    async def start(self) -> None:
        """Open the storage and start listening on the configured ports."""
        started = time.monotonic()
        config = self.config
        _check_config(config)
        raise_open_file_limit()
        try:
            ssl_context = await tls.load_server_ssl_context(config)
        except ConfigError as exc:
            raise BrokerStartError(str(exc)) from None
        service = self.service = await self._open_service()
        await self._listen_binary(service, ssl_context)
        admin.install(self.web, service)
        if service.authorization.enabled:
            self.web.authorize = web_authorizer(service.authorization)
        if service.authentication is not None:
            self.web.authenticate = service.authentication.authenticate_http
            self.web.refuse_early = service.authentication.check_authorization
        with _naming("webServicePort", config.webServicePort):
            self.web_port = await self.web.start(config.bindAddress, config.webServicePort)
        if config.webServicePortTls >= 0:
            assert ssl_context is not None
            with _naming("webServicePortTls", config.webServicePortTls):
                self.web_port_tls = await self.web.start_tls(
                    config.bindAddress, config.webServicePortTls, ssl_context
                )
        urls = self.urls
        try:
            with _naming("dataDir", config.dataDir):
                await asyncio.to_thread(service.start_resources, urls)
        except StorageError as exc:  # e.g. a damaged stored cluster record
            raise BrokerStartError(str(exc)) from exc
        service.start(urls)
        await self._join_cluster(service, urls)
        await service.transactions.start(config.clusterName)  # recovered before clients come
        for server in self._servers:
            server.start()
        self.web.serve()
        log.info(
            "Starquake broker ready on %s (web %s, data %s) in %.0f ms; %s",
            " ".join(u for u in (urls.service_url, urls.service_url_tls) if u),
            " ".join(u for u in (urls.web_service_url, urls.web_service_url_tls) if u),
            config.dataDir,
            (time.monotonic() - started) * 1000,
            _native.BUILD,
        )

    async def _open_service(self) -> BrokerService:
        """The broker's service over its storage: ``dataDir``, and in cluster mode the shared
        configuration store and the ledgers in JetStream (each closed again on failure)."""
        config = self.config
        try:
            shared = await asyncio.to_thread(config_sync.open_configuration_store, config)
        except (StorageError, ConfigError) as exc:
            raise BrokerStartError(str(exc)) from None
        try:
            ledgers = await self._cluster_ledgers()
        except (StorageError, ConfigError) as exc:
            if shared is not None:
                await asyncio.to_thread(shared.close)
            store = redact_url(config.metadataStoreUrl)
            raise BrokerStartError(f"metadataStoreUrl {store}: {exc}") from None
        try:
            return BrokerService(config, self._faults, shared, ledgers)
        except BaseException as exc:
            if ledgers is not None:
                await ledgers.close()
            if shared is not None:
                await asyncio.to_thread(shared.close)
            if isinstance(exc, (StorageError, ConfigError)):
                raise BrokerStartError(str(exc)) from exc
            if isinstance(exc, OSError):  # the data directory cannot be created, read or written
                raise BrokerStartError(f"dataDir {config.dataDir}: {exc}") from exc
            raise

    async def _cluster_ledgers(self) -> JetStreamLedgerFactory | None:
        """The ledgers in JetStream in cluster mode, else None (the NATS client is imported
        only then: standalone needs no cluster extra)."""
        if not self.config.metadata_store_servers:
            return None
        from starquake.broker.cluster_storage import open_cluster_ledgers

        return await open_cluster_ledgers(self.config)

    async def _join_cluster(self, service: BrokerService, urls: BrokerUrls) -> None:
        """With ``metadataStoreUrl``: join the cluster (lookups answer for it from then on)."""
        config = self.config
        servers = config.metadata_store_servers
        if not servers:
            return
        from starquake.broker.cluster_join import join_cluster

        try:
            await join_cluster(
                service,
                servers,
                config.clusterName,
                urls,
                config.starquakeOwnershipLeaseSeconds,
                give_up_after=config.metadataStoreOperationTimeoutSeconds,
                replicas=ledger_replicas(config),
            )
        except Exception as exc:
            raise BrokerStartError(
                f"metadataStoreUrl {redact_url(config.metadataStoreUrl)}: "
                f"cannot join the cluster: {exc}"
            ) from None

    async def _listen_binary(
        self, service: BrokerService, ssl_context: ssl.SSLContext | None
    ) -> None:
        """Bind the binary protocol ports that are on; on failure, close what was bound and
        abort ``service``."""
        config = self.config
        try:
            if config.brokerServicePort >= 0:
                self.broker_port = await self._listen(
                    service, "brokerServicePort", config.brokerServicePort, None
                )
            if config.brokerServicePortTls >= 0:
                self.broker_port_tls = await self._listen(
                    service, "brokerServicePortTls", config.brokerServicePortTls, ssl_context
                )
        except BaseException:
            for server in self._servers:
                server.close()
            self._servers.clear()
            service.abort()
            self.service = None
            if self.config.metadata_store_servers:
                await service.storage.close()  # its connections to the nodes
            raise

    async def _listen(
        self, service: BrokerService, key: str, port: int, ssl_context: ssl.SSLContext | None
    ) -> int:
        """Bind ``port`` (not serving yet; ``key`` names it in errors); returns the port
        actually bound."""
        with _naming(key, port):
            sockets = await asyncio.to_thread(bind, self.config.bindAddress, port, BINARY_BACKLOG)
        server = Listener(
            "TLS binary port" if ssl_context is not None else "binary port",
            sockets,
            lambda on_closed: ServerCnx(service, on_closed),
            ssl_context=ssl_context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
            max_connections=self.config.brokerMaxConnections,
            at_limit=REFUSE,
        )
        self._servers.append(server)
        return server.port

    async def stop(self) -> None:
        """Stop accepting, close connections, commit and persist everything, close storage."""
        if not self._servers:
            return
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        await self.web.stop()
        service = self.service
        if service is not None:
            connections = list(service.connections)
            for cnx in connections:
                cnx.close()
            await service.transactions.stop()
            await service.stop()
            membership = service.placement.membership
            if membership is not None:
                # the topics' last appends and cursors are stored: give the bundles up at
                # once, other brokers take them over
                await membership.leave()
            # A peer that stopped reading leaves its connection waiting to flush: the broker
            # is going away, so drop what it will never take rather than leak the socket.
            for cnx in connections:
                cnx.abort()
        for server in servers:
            await server.wait_closed()
        self._stopped.set()
        log.info("Starquake broker stopped")

    async def wait_stopped(self) -> None:
        """Wait until the server has stopped."""
        await self._stopped.wait()


def _check_config(config: BrokerConfig) -> None:
    """Log the configuration keys that have no effect here; refuse a broker without any
    binary protocol port."""
    for notice in pulsar_settings.not_used_notice(config.extra):
        log.info("%s", notice)
    unused = sorted(k for k in config.extra if k not in SYSTEM_PROPERTIES and not pulsar_key(k))
    if unused:
        log.info(
            "ignoring %d configuration keys Starquake does not use: %s",
            len(unused),
            ", ".join(unused),
        )
    if config.brokerServicePort < 0 and config.brokerServicePortTls < 0:
        raise BrokerStartError(
            "no binary protocol port: brokerServicePort and brokerServicePortTls are both off"
        )
