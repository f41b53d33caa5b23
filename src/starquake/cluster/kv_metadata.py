"""The metadata store on a JetStream key-value bucket: versioned values, compare-and-set, watches.

Keys are Pulsar's metadata paths (``/admin/policies/public/default``). A path becomes a KV key
token by token: each ``/``-separated segment is one ``.``-separated token; characters a KV key
does not allow (and ``_``) are written ``_`` plus two hex digits of each UTF-8 byte, and an
empty segment (``persistent://`` has one) is the token ``_``. A value's *version* is the KV
revision of its last write: ``put`` and ``delete`` with an expected version succeed only if
the value is still at that version (``ABSENT``: only if absent), else ``BadVersionError``, as
ZooKeeper's versioned writes do. The names and their meaning are those of the storage layer's
``MetadataStore`` (``starquake.storage.metadata``), here awaitable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any

from nats.js.api import KeyValueConfig
from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError

from starquake.cluster.jetstream import WRONG_LAST_SEQUENCE, live_entries, open_bucket, until_ready
from starquake.storage import ABSENT, BadVersionError, StorageError, Versioned

log = logging.getLogger(__name__)

_PLAIN = re.compile(r"[-=A-Za-z0-9]")
_DELETE_OPS = ("DEL", "PURGE")
_REWATCH_SECONDS = 60
"""How long a watch is tried again after a reconnection before its changes are given up."""


__all__ = ["BadVersionError", "JetStreamMetadataStore", "Versioned", "key_to_path", "path_to_key"]

WatchCallback = Callable[[str, bytes | None, int], None]


def _escape(segment: str) -> str:
    if not segment:
        return "_"
    out = []
    for char in segment:
        if _PLAIN.fullmatch(char):
            out.append(char)
        else:
            out.extend(f"_{byte:02x}" for byte in char.encode())
    return "".join(out)


def _unescape(token: str) -> str:
    if token == "_":
        return ""
    raw = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            raw.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(token[i].encode())
            i += 1
    return raw.decode()


def path_to_key(path: str) -> str:
    """The KV key of metadata path ``path`` (which starts with ``/``)."""
    if not path.startswith("/") or path == "/":
        raise ValueError(f"not a metadata path: {path!r}")
    return ".".join(_escape(segment) for segment in path[1:].split("/"))


def key_to_path(key: str) -> str:
    """The metadata path of KV key ``key``."""
    return "/" + "/".join(_unescape(token) for token in key.split("."))


class JetStreamMetadataStore:
    """Metadata in one JetStream key-value bucket (``replicas`` copies)."""

    def __init__(self, nc: Any, kv: Any) -> None:
        self._nc = nc
        self._kv = kv
        self._watches: set[asyncio.Task[None]] = set()
        self._watched: list[tuple[str, WatchCallback, bool]] = []
        self._current: list[asyncio.Task[None]] = []  # the task of each of _watched

    @classmethod
    async def connect(
        cls,
        servers: list[str],
        *,
        bucket: str = "sq_metadata",
        replicas: int = 1,
        give_up_after: float = 30,
    ) -> JetStreamMetadataStore:
        """Connect and open (or create) the bucket; StorageError once ``give_up_after``
        seconds passed without success."""
        config = KeyValueConfig(bucket=bucket, replicas=replicas, history=1)
        stores: list[JetStreamMetadataStore] = []

        async def reconnected() -> None:
            for store in stores:
                store._spawn(store._watch_again())

        nc, kv = await open_bucket(servers, config, give_up_after, reconnected)
        stores.append(cls(nc, kv))
        return stores[0]

    async def get(self, path: str) -> bytes | None:
        """The value at ``path``, or None."""
        found = await self.get_versioned(path)
        return None if found is None else found.value

    async def get_versioned(self, path: str) -> Versioned | None:
        """The value at ``path`` and its version, or None."""
        try:
            entry = await self._kv.get(path_to_key(path))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return Versioned(entry.value or b"", entry.revision)

    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> int:
        """Write ``value``; with ``expected_version`` only if the stored version is that one
        (``ABSENT``: only if absent). The new version."""
        key = path_to_key(path)
        try:
            if expected_version is None:
                return int(await self._kv.put(key, value))
            if expected_version == ABSENT:
                return int(await self._kv.create(key, value))
            return int(await self._kv.update(key, value, last=expected_version))
        except KeyWrongLastSequenceError:
            raise BadVersionError(path, expected_version) from None

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Remove ``path`` (no error if absent); with ``expected_version`` only if it is at
        that version (``ABSENT``: only if absent, which changes nothing)."""
        key = path_to_key(path)
        if expected_version is not None:
            current = await self.get_versioned(path)
            if (ABSENT if current is None else current.version) != expected_version:
                raise BadVersionError(path, expected_version)
            if current is None:
                return
        try:
            await self._kv.delete(key, last=expected_version)
        except APIError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                raise BadVersionError(path, expected_version) from None
            raise

    async def list_children(self, path: str) -> list[str]:
        """The names one level below ``path`` (of keys stored there or deeper)."""
        prefix = "" if path == "/" else path_to_key(path) + "."
        entries = await live_entries(self._kv, f"{prefix}>", values=False)
        return sorted({_unescape(e.key[len(prefix) :].split(".", 1)[0]) for e in entries})

    async def watch(
        self,
        path: str,
        callback: WatchCallback,
        ready: Callable[[], None] | None = None,
        *,
        children_only: bool = False,
    ) -> None:
        """Call ``callback(path, value, version)`` for every value at or below ``path`` (with
        ``children_only``, only one level below it): the current ones first (then
        ``ready()``), then each change (``value`` None: deleted), until closed. After a
        reconnection to the servers the watch starts again (a server may have lost its
        consumer): the current values come again, then the changes."""
        self._current.append(await self._watch(path, callback, ready, children_only))
        self._watched.append((path, callback, children_only))

    async def _watch(
        self,
        path: str,
        callback: WatchCallback,
        ready: Callable[[], None] | None,
        children_only: bool,
    ) -> asyncio.Task[None]:
        prefix = "" if path == "/" else path_to_key(path) + "."
        watcher = await self._kv.watch(prefix + ("*" if children_only else ">"))

        async def run() -> None:
            try:
                async for entry in watcher:
                    if entry is None:  # the end of the current values
                        if ready is not None:
                            ready()
                        continue
                    deleted = entry.operation in _DELETE_OPS
                    value = None if deleted else (entry.value or b"")
                    callback(key_to_path(entry.key), value, entry.revision)
            finally:
                with contextlib.suppress(Exception):
                    await watcher.stop()

        return self._spawn(run())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._watches.add(task)
        task.add_done_callback(self._watches.discard)
        return task

    async def _watch_again(self) -> None:
        """A new watch for each one, replacing it once started (JetStream may need a moment
        after a server restart)."""
        deadline = time.monotonic() + _REWATCH_SECONDS
        for i, (path, callback, children_only) in enumerate(list(self._watched)):

            async def attempt(
                path: str = path, callback: WatchCallback = callback, only: bool = children_only
            ) -> Any:
                return await self._watch(path, callback, None, only)

            try:
                task = await until_ready(deadline, f"watch of {path}", attempt)
            except StorageError as exc:
                log.error("metadata changes under %s are not seen: %s", path, exc)
                continue
            self._current[i].cancel()
            self._current[i] = task
        log.info("metadata watches started again after a reconnection")

    async def close(self) -> None:
        for task in list(self._watches):
            task.cancel()
        if self._watches:
            await asyncio.wait(list(self._watches), timeout=5)
        await self._nc.close()
