"""The configuration metadata in JetStream, behind the storage layer's synchronous
``MetadataStore`` names, for a broker whose code reads its configuration synchronously.

Design (the broker's event loop never waits on the network):

- One *store thread* runs its own asyncio loop holding the connection to JetStream
  (:class:`~starquake.cluster.kv_metadata.JetStreamMetadataStore`).
- The store keeps a *replica* of every value under its prefixes: filled when it opens (by one
  key-value watch per prefix, which delivers the current values first) and kept current by the
  same watches. ``get``, ``get_versioned`` and ``list_children`` answer from the replica at once,
  from any thread.
- Writes (``put``, ``delete``, ``put_many``) are handed to the store thread and wait for
  JetStream's answer, at most ``timeout`` seconds (then :class:`StorageError`). They block their
  caller, so they must be called off the event loop (the broker runs every metadata write in a
  worker thread); at most :data:`MAX_PENDING_WRITES` are under way at once, further callers wait
  for a slot. A write's result enters the replica when JetStream acknowledged it, so its caller
  reads what it wrote; the watch brings the same change again, which the replica ignores by its
  version. A compare-and-set write refused for its version reads the key from JetStream into
  the replica before it raises, so the caller's next attempt starts from the version that won.
- Every change the watches bring that changes the replica (another broker's write, or one of
  this broker's coming back first) is announced to the listeners with its path, on the store
  thread: a listener only notes the path and returns (it must not wait or take a lock held
  across a store call).

``put_many`` is not atomic here: its writes are made one after the other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from starquake.cluster.jetstream import NATS_ERRORS
from starquake.cluster.kv_metadata import JetStreamMetadataStore
from starquake.common.redact import redact_url
from starquake.storage import BadVersionError, StorageError, Versioned
from starquake.storage.metadata import direct_children

__all__ = ["MAX_PENDING_WRITES", "JetStreamConfigurationStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_PENDING_WRITES = 64
"""Writes handed to the store thread and not yet answered, at most."""


class JetStreamConfigurationStore:
    """A synchronous metadata store over a JetStream key-value bucket for the keys under
    ``prefixes``, read from a replica kept current by watches."""

    def __init__(self, servers: Sequence[str], prefixes: Sequence[str], timeout: float) -> None:
        self.servers = list(servers)
        self.timeout = timeout
        self._prefixes = tuple(p.rstrip("/") for p in prefixes)
        self._lock = threading.Lock()
        self._replica: dict[str, Versioned] = {}
        self._deleted: dict[str, int] = {}  # the version a deleted key had (older news: ignored)
        self._listeners: list[Callable[[str], None]] = []
        self._slots = threading.BoundedSemaphore(MAX_PENDING_WRITES)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="starquake-configuration-store", daemon=True
        )
        self._store: JetStreamMetadataStore | None = None
        self._closed = False

    @classmethod
    def open(
        cls,
        servers: Sequence[str],
        prefixes: Sequence[str],
        *,
        bucket: str = "sq_metadata",
        give_up_after: float = 10,
        timeout: float = 10,
        replicas: int = 1,
    ) -> JetStreamConfigurationStore:
        """Connect, open (or create) ``bucket`` with ``replicas`` copies of each value and fill
        the replica (blocking: call off the event loop); StorageError naming the servers once
        ``give_up_after`` seconds passed."""
        store = cls(servers, prefixes, timeout)
        store._thread.start()
        try:
            store._call(store._start(bucket, give_up_after, replicas), give_up_after + timeout)
        except BaseException:
            store.close()
            raise
        return store

    async def _start(self, bucket: str, give_up_after: float, replicas: int) -> None:
        self._store = await JetStreamMetadataStore.connect(
            self.servers, bucket=bucket, replicas=replicas, give_up_after=give_up_after
        )
        loaded = [asyncio.Event() for _ in self._prefixes]
        for prefix, event in zip(self._prefixes, loaded, strict=True):
            await self._store.watch(prefix, self._seen, event.set)
        await asyncio.gather(*(event.wait() for event in loaded))

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(path)`` on the store thread for each change the watches bring."""
        self._listeners.append(listener)

    def _seen(self, path: str, value: bytes | None, version: int) -> None:
        if self._record(path, value, version):
            for listener in self._listeners:
                listener(path)

    def _record(self, path: str, value: bytes | None, version: int) -> bool:
        """Enter a change into the replica unless it knows a newer one; whether it did."""
        with self._lock:
            current = self._replica.get(path)
            known = current.version if current is not None else self._deleted.get(path, 0)
            if version <= known:
                return False
            if value is None:
                self._replica.pop(path, None)
                self._deleted[path] = version
            else:
                self._replica[path] = Versioned(value, version)
                self._deleted.pop(path, None)
            return True

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the store thread and wait for its result (from another thread)."""
        wait = self.timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            where = redact_url(",".join(self.servers))
            raise StorageError(
                f"configuration store {where}: no answer within {wait:g} s"
            ) from None
        except NATS_ERRORS as exc:
            where = redact_url(",".join(self.servers))
            raise StorageError(f"configuration store {where}: {exc!r}") from None

    def _write(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed or self._store is None:
            coro.close()
            raise StorageError("the configuration store is closed")
        with self._slots:
            return self._call(coro)

    # --- the MetadataStore names ----------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The value of ``key`` in the replica, or None."""
        found = self.get_versioned(key)
        return None if found is None else found.value

    def get_versioned(self, key: str) -> Versioned | None:
        """The value of ``key`` and its version in the replica, or None."""
        with self._lock:
            return self._replica.get(key)

    def list_children(self, prefix: str) -> list[str]:
        """Sorted names of the direct children of ``prefix`` in the replica."""
        with self._lock:
            keys = list(self._replica)
        return direct_children(prefix, keys)

    def put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        """Write ``key`` in JetStream (compare-and-set as ``MetadataStore``); the new version."""
        assert self._store is not None
        try:
            version = self._write(self._store.put(key, bytes(value), expected_version))
        except BadVersionError:
            self._reload(key)
            raise
        self._record(key, bytes(value), version)
        return version

    def _reload(self, key: str) -> None:
        """Read ``key`` from JetStream into the replica (after a compare-and-set found another
        version: the caller reads again, and must see the version that won, not wait for the
        watch to bring it)."""
        assert self._store is not None
        found = self._write(self._store.get_versioned(key))
        if found is not None:
            self._record(key, found.value, found.version)
        else:
            before = self.get_versioned(key)
            if before is not None:
                self._record(key, None, before.version + 1)

    def delete(self, key: str, expected_version: int | None = None) -> None:
        """Delete ``key`` in JetStream (compare-and-set as ``MetadataStore``)."""
        assert self._store is not None
        before = self.get_versioned(key)
        try:
            self._write(self._store.delete(key, expected_version))
        except BadVersionError:
            self._reload(key)
            raise
        if before is not None:
            self._record(key, None, before.version + 1)

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply the writes one after the other (not atomic)."""
        for key, value in items:
            if value is None:
                self.delete(key)
            else:
                self.put(key, value)

    def close(self) -> None:
        """Stop the watches, close the connection and the store thread."""
        if self._closed:
            return
        self._closed = True
        if self._store is not None and self._thread.is_alive():
            try:
                self._call(self._store.close(), 10)
            except StorageError as exc:
                log.warning("closing the configuration store: %s", exc)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
