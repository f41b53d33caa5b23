"""Run a broker inside the current process, on its own thread and event loop.

For tests (ours and users'): ``with EmbeddedBroker(tmp_path) as broker: ...`` starts a broker on
free ports and stops it cleanly on exit::

    with EmbeddedBroker(tmp_path / "data") as broker:
        client = pulsar.Client(broker.service_url)
        broker.create_partitioned_topic("persistent://public/default/t", 4)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from starquake.broker.config import BrokerConfig, load_config
from starquake.broker.server import BrokerServer
from starquake.broker.service import BrokerService
from starquake.storage import StorageFaults

R = TypeVar("R")


class EmbeddedBroker:
    """A broker running in a background thread; ports default to 0 (any free port)."""

    def __init__(
        self, data_dir: str | Path, *, faults: StorageFaults | None = None, **overrides: Any
    ) -> None:
        """``overrides`` are broker settings by their broker.conf names; ``faults`` injects
        storage faults (for tests of failure handling)."""
        settings: dict[str, Any] = {
            "dataDir": str(data_dir),
            "bindAddress": "127.0.0.1",
            "brokerServicePort": 0,
            "webServicePort": 0,
        }
        settings.update(overrides)
        self.config: BrokerConfig = load_config(overrides=settings, environ={})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: BrokerServer | None = None
        self._faults = faults

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        """Start the broker on its own thread and event loop; return once it serves."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            server = BrokerServer(self.config, self._faults)
            self._server = server
            try:
                loop.run_until_complete(server.start())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_until_complete(server.wait_stopped())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="starquake-broker", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop the broker and join its thread (no-op if not running)."""
        if self._server is None or self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(timeout=60)
        self._thread.join(timeout=60)
        self._server = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- addresses ----------------------------------------------------------------------------

    @property
    def server(self) -> BrokerServer:
        """The running server (RuntimeError when stopped)."""
        if self._server is None:
            raise RuntimeError("broker is not running")
        return self._server

    @property
    def service(self) -> BrokerService:
        """The running broker service."""
        service = self.server.service
        assert service is not None
        return service

    @property
    def service_url(self) -> str:
        """``pulsar://host:port`` (``pulsar+ssl://`` when the plaintext port is off)."""
        return self.server.service_url

    @property
    def web_service_url(self) -> str:
        """``http://host:port`` of the admin REST API."""
        return self.server.web_service_url

    @property
    def service_url_tls(self) -> str:
        """``pulsar+ssl://host:port`` ("" unless ``brokerServicePortTls`` is on)."""
        return self.server.service_url_tls

    @property
    def web_service_url_tls(self) -> str:
        """``https://host:port`` ("" unless ``webServicePortTls`` is on)."""
        return self.server.web_service_url_tls

    @property
    def broker_port(self) -> int:
        """The port of ``pulsar://``."""
        return self.server.broker_port

    @property
    def broker_port_tls(self) -> int:
        """The port of ``pulsar+ssl://`` (0 when off)."""
        return self.server.broker_port_tls

    @property
    def web_port_tls(self) -> int:
        """The port of ``https://`` (0 when off)."""
        return self.server.web_port_tls

    # --- running code on the broker's loop ----------------------------------------------------

    def call(self, coro: Coroutine[Any, Any, R], timeout: float = 30) -> R:
        """Run ``coro`` on the broker's event loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # --- admin operations (in-process; the HTTP admin API wraps the same calls) ---------------

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Create a partitioned topic, as the admin API would."""
        service = self.service
        name = service.parse_topic(topic)
        self.call(asyncio.to_thread(service.resources.create_partitioned_topic, name, partitions))

    def create_tenant(self, tenant: str) -> None:
        """Create a tenant, as the admin API would."""
        self.call(asyncio.to_thread(self.service.resources.create_tenant, tenant))

    def create_namespace(self, namespace: str) -> None:
        """Create a namespace (``tenant/namespace``), as the admin API would."""
        self.call(asyncio.to_thread(self.service.resources.create_namespace, namespace))
