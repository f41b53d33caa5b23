"""The configuration metadata shared by brokers (``configurationMetadataStoreUrl``).

With the key set, the keys of :data:`CONFIGURATION_PREFIXES` (what
:class:`~starquake.broker.resources.PulsarResources` and the schema registry store) live in a
JetStream key-value bucket all brokers share, every other key in the broker's own SQLite store
(:class:`~starquake.storage.routed_metadata.RoutedMetadataStore`).

The broker keeps reading synchronously from its copies (the resources' dicts, the registry's
cache); the shared store reads from its own replica, kept current by watches on a store thread
(see :mod:`starquake.cluster.config_store`), and writes over the network from the worker
threads that run every metadata write. :class:`ConfigurationSync` carries each change another
broker made into this broker's copies: the store thread only notes the changed path in a set
(bounded by the number of configuration keys: a path changed again before it is applied is
noted once) and asks the event loop, once, to apply what is noted; the event loop reads the
noted paths from the replica (memory) into the copies and tells the loaded topics whose
policies changed, as an admin call on this broker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Protocol

from starquake.broker.config import BrokerConfig
from starquake.broker.quorum import ledger_replicas
from starquake.broker.resource_keys import CONFIGURATION_PREFIXES as RESOURCE_PREFIXES
from starquake.broker.resource_keys import TOPIC_STATE_PREFIXES
from starquake.broker.resources import PulsarResources
from starquake.broker.schemas.registry import SchemaRegistry
from starquake.common.redact import redact_url
from starquake.common.topic_name import TopicName
from starquake.storage import MetadataStore, StorageError

if TYPE_CHECKING:
    from starquake.cluster.config_store import JetStreamConfigurationStore

__all__ = ["CONFIGURATION_PREFIXES", "ConfigurationSync", "attach", "open_configuration_store"]

log = logging.getLogger(__name__)

_SCHEMAS = "/schemas"
CONFIGURATION_PREFIXES = (*RESOURCE_PREFIXES, _SCHEMAS)
"""The keys kept in the shared configuration store; all others stay in the broker's own."""


def open_configuration_store(config: BrokerConfig) -> JetStreamConfigurationStore | None:
    """The shared configuration store of ``configurationMetadataStoreUrl`` (None when it and
    ``metadataStoreUrl`` are empty), connected and loaded; blocking, so call it off the event
    loop. In cluster mode (``metadataStoreUrl``) it keeps the topics' state of
    ``TOPIC_STATE_PREFIXES`` too. StorageError with one line naming the URL when the store
    does not answer within ``metadataStoreOperationTimeoutSeconds``."""
    servers = config.configuration_store_servers
    if not servers:
        return None
    from starquake.cluster.config_store import JetStreamConfigurationStore

    key = "configurationMetadataStoreUrl"
    if not config.configurationMetadataStoreUrl:
        key = "metadataStoreUrl"
    prefixes = CONFIGURATION_PREFIXES
    if config.metadata_store_servers:
        prefixes = (*prefixes, *TOPIC_STATE_PREFIXES)
    timeout = config.metadataStoreOperationTimeoutSeconds
    try:
        store = JetStreamConfigurationStore.open(
            servers,
            prefixes,
            give_up_after=timeout,
            timeout=timeout,
            replicas=ledger_replicas(config),
        )
    except StorageError as exc:
        reason = " ".join(str(exc).split())
        raise StorageError(
            f"{key} {redact_url(getattr(config, key))}: the configuration store does not "
            "answer within "
            f"{timeout} s ({reason})"
        ) from None
    log.info("configuration metadata in %s", redact_url(getattr(config, key)))
    return store


class SyncContext(Protocol):
    """What a change of the shared configuration touches in the broker."""

    @property
    def resources(self) -> PulsarResources:
        """The broker's copy of the resources."""

    @property
    def schemas(self) -> SchemaRegistry:
        """The schema registry."""

    def policies_changed(self, scope: str | TopicName) -> None:
        """The loaded topics under ``scope`` apply their policies again."""

    async def deduplication_changed(self, scope: str | TopicName) -> None:
        """Deduplication is switched as the policies of ``scope`` now say."""


class ConfigurationSync:
    """Applies the changes seen in the shared configuration store to the broker's copies, on
    the event loop."""

    def __init__(self, service: SyncContext, loop: asyncio.AbstractEventLoop) -> None:
        self._service = service
        self._loop = loop
        self._lock = threading.Lock()
        self._noted: set[str] = set()
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    def note(self, path: str) -> None:
        """``path`` changed (called on the store thread: notes it, never waits)."""
        with self._lock:
            self._noted.add(path)
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the broker stopped
            self._loop.call_soon_threadsafe(self._apply)

    def _apply(self) -> None:
        with self._lock:
            paths, self._noted = self._noted, set()
            self._scheduled = False
        scopes: set[str | TopicName] = set()
        for path in sorted(paths):
            try:
                scope = self._refresh(path)
            except (StorageError, ValueError) as exc:  # e.g. a value that is not JSON
                log.error("configuration change of %s not applied: %s", path, exc)
                continue
            if scope is not None:
                scopes.add(scope)
        for scope in scopes:
            self._service.policies_changed(scope)
            task = self._loop.create_task(self._service.deduplication_changed(scope))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _refresh(self, path: str) -> str | TopicName | None:
        if path.startswith(_SCHEMAS + "/"):
            parts = path.split("/")
            if len(parts) == 6:  # /schemas/<tenant>/<namespace>/<topic>/<version>
                self._service.schemas.forget("/".join(parts[2:5]))
            return None
        return self._service.resources.refresh(path)


def attach(service: SyncContext, store: MetadataStore) -> ConfigurationSync | None:
    """Keep ``service``'s copies current with ``store``'s changes, when ``store`` announces
    them (a shared configuration store); call on the event loop."""
    add_listener = getattr(store, "add_listener", None)
    if add_listener is None:
        return None
    sync = ConfigurationSync(service, asyncio.get_running_loop())
    add_listener(sync.note)
    return sync
