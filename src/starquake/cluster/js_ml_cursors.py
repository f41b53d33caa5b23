"""The durable cursors of a managed ledger in JetStream, stored (a role of
:class:`~starquake.cluster.js_managed_ledger.JetStreamManagedLedger`).

A cursor moved is marked; a flush stores each marked cursor's state as a compare-and-set at
the version this owner stored last (or "absent" for a new one), so a cursor stored meanwhile
by another owner (the topic moved) fences this one instead of being overwritten. Flushes run
one at a time: two at once would both write the first version of the same cursor, and the
second, refused, would fence the managed ledger for no other owner.
"""

from __future__ import annotations

import asyncio
import logging

from starquake.cluster.kv_metadata import BadVersionError, JetStreamMetadataStore
from starquake.storage.cursor import ManagedCursorImpl
from starquake.storage.position import LedgerFencedError, StorageError

__all__ = ["JsCursorStore"]

log = logging.getLogger(__name__)


class JsCursorStore:
    """Marked cursors and their stored versions (see the module docstring)."""

    name: str
    _metadata: JetStreamMetadataStore
    _cursor_dirty: dict[str, ManagedCursorImpl | None]
    cursor_versions: dict[str, int]
    """Version of each durable cursor's stored state."""
    _flushing: asyncio.Lock

    def fence(self, exc: BaseException) -> None:
        """Refuse further work (the lifecycle role provides it)."""
        raise NotImplementedError

    def _store_later(self, key: str, cursor: ManagedCursorImpl | None) -> None:
        self._cursor_dirty[key] = cursor

    async def flush_cursors(self) -> None:
        """Store the durable cursors changed since the last flush, each a compare-and-set
        at the version this owner holds; a version changed by another owner fences this one."""
        async with self._flushing:
            dirty, self._cursor_dirty = self._cursor_dirty, {}
            for key, cursor in dirty.items():
                try:
                    await self._store_cursor(key, cursor)
                except BadVersionError as exc:
                    why = f"{self.name}: cursor stored by another owner: {exc}"
                    self.fence(LedgerFencedError(why))
                    return
                except StorageError as exc:
                    log.warning("managed ledger %s: cursor %s not stored: %s", self.name, key, exc)
                    self._cursor_dirty.setdefault(key, cursor)

    async def _store_cursor(self, key: str, cursor: ManagedCursorImpl | None) -> None:
        version = self.cursor_versions.get(key)
        if cursor is None:
            if version is not None:
                await self._metadata.delete(key, expected_version=version)
                del self.cursor_versions[key]
            return
        mark = cursor.mark_delete_position
        self.cursor_versions[key] = await self._metadata.put(
            key, cursor.serialize(), expected_version=version or 0
        )
        cursor.stored_mark_delete = mark
