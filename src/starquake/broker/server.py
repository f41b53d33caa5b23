"""BrokerServer: start-up, serving and graceful shutdown of one standalone broker."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from starquake.broker import admin
from starquake.broker.config import BrokerConfig
from starquake.broker.connection import ServerCnx
from starquake.broker.service import BrokerService
from starquake.broker.web import WebServer
from starquake.storage import FileFaults, StorageError, StorageFaults

log = logging.getLogger(__name__)


def storage_faults(path: str) -> StorageFaults:
    """Storage faults controlled by the JSON file ``path`` (a testing aid; see FileFaults)."""
    log.warning("storage fault injection is on, controlled by %s", path)
    return FileFaults(Path(path))


class BrokerStartError(Exception):
    """The broker cannot start (e.g. its data directory is in use by another broker)."""


class BrokerServer:
    """Binds the binary-protocol port and the web port around a :class:`BrokerService`."""

    def __init__(self, config: BrokerConfig, faults: StorageFaults | None = None) -> None:
        self.config = config
        self._faults = faults
        self.service: BrokerService | None = None
        self._server: asyncio.Server | None = None
        self.web = WebServer()
        self.broker_port = 0
        self.web_port = 0
        self._stopped = asyncio.Event()

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_host}:{self.broker_port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{self.config.advertised_host}:{self.web_port}"

    async def start(self) -> None:
        started = time.monotonic()
        config = self.config
        if config.extra:
            log.info(
                "ignoring %d configuration keys Starquake does not use: %s",
                len(config.extra),
                ", ".join(sorted(config.extra)),
            )
        try:
            service = BrokerService(config, self._faults)
        except StorageError as exc:
            raise BrokerStartError(str(exc)) from exc
        self.service = service
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: ServerCnx(service),
                config.bindAddress,
                config.brokerServicePort,
                start_serving=False,
            )
        except BaseException:
            service.abort()
            self.service = None
            raise
        self.broker_port = int(self._server.sockets[0].getsockname()[1])
        self.web.route("GET", "/admin/v2/brokers/health", _health)
        admin.install(self.web, service)
        self.web_port = await self.web.start(config.bindAddress, config.webServicePort)
        await asyncio.to_thread(service.start_resources, self.service_url, self.web_service_url)
        service.start(self.service_url, self.web_service_url)
        await self._server.start_serving()
        log.info(
            "Starquake broker ready on %s (web %s, data %s) in %.0f ms",
            self.service_url,
            self.web_service_url,
            config.dataDir,
            (time.monotonic() - started) * 1000,
        )

    async def stop(self) -> None:
        """Stop accepting, close connections, commit and persist everything, close storage."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        await self.web.stop()
        service = self.service
        if service is not None:
            connections = list(service.connections)
            for cnx in connections:
                cnx.close()
            await service.stop()
            # A peer that stopped reading leaves its connection waiting to flush: the broker
            # is going away, so drop what it will never take rather than leak the socket.
            for cnx in connections:
                cnx.abort()
        await server.wait_closed()
        self._stopped.set()
        log.info("Starquake broker stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


async def _health(method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
    return 200, "text/plain", b"ok"
