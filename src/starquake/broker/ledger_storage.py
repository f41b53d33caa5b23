"""LedgerStorage: where the broker's managed ledgers live, whichever backend keeps them.

The broker opens, lists, deletes and commits its topics' managed ledgers through this one
interface. Two implementations:

- :class:`FileLedgerStorage` (standalone, the default): the managed ledgers in files under
  ``dataDir`` (:class:`~starquake.storage.factory.ManagedLedgerFactory`); appends become
  durable by the broker's group commit (:meth:`LedgerStorage.take_pending`, run by
  :class:`~starquake.broker.committer.GroupCommitter`), and durable cursors are stored in the
  broker's metadata store.
- :class:`~starquake.cluster.js_factory.JetStreamLedgerFactory` (cluster mode): the managed
  ledgers in JetStream; each managed ledger writes its own records and reports them through
  the hooks given to :meth:`LedgerStorage.listen`, and stores its cursors in JetStream.

Each also keeps its managed ledgers' compacted ledgers (``compacted_ledgers``): files beside
the managed ledgers' and a metadata key, or JetStream ledgers recorded in the managed ledgers'
stored ledger lists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from starquake.storage import (
    ManagedLedger,
    ManagedLedgerFactory,
    MetadataStore,
    PendingCommit,
    Position,
)
from starquake.storage.compacted_files import FileCompactedLedgers
from starquake.storage.compacted_store import CompactedLedgerStore
from starquake.storage.state import EntryCache

__all__ = ["CommittedHook", "FailedHook", "FileLedgerStorage", "LedgerStorage"]

CommittedHook = Callable[[Sequence[tuple[ManagedLedger, Position]]], None]
"""Called with ``[(managed ledger, its new last confirmed position)]`` as appends become
durable."""
FailedHook = Callable[[Sequence[ManagedLedger], BaseException], None]
"""Called with the managed ledgers whose appends could not be made durable (now fenced)."""


class LedgerStorage(Protocol):
    """The managed ledgers of a broker (see the module docstring)."""

    def take_pending(self) -> PendingCommit | None:
        """The appends (and file work) waiting for the group commit, or None: nothing to do,
        or a backend whose ledgers commit by themselves."""

    def listen(self, on_committed: CommittedHook, on_failed: FailedHook) -> None:
        """Report to these hooks the appends made durable, or failed, outside the group
        commit (a backend whose ledgers commit by themselves; the file backend has none)."""

    async def open_ledger(self, name: str) -> ManagedLedger:
        """Open (recover, or create) the managed ledger ``name``. Raises
        :class:`~starquake.storage.LedgerBusyError` when it cannot be opened just now
        (retry) and :class:`~starquake.storage.StorageError` on failure."""

    def exists(self, name: str) -> bool:
        """Whether the managed ledger ``name`` is stored."""

    def list_names(self) -> list[str]:
        """The names of the stored managed ledgers (may block: call it off the event loop)."""

    async def delete(self, name: str) -> None:
        """Delete the managed ledger ``name`` (closed first) with its cursors."""

    async def allocate_ledger_id(self) -> int:
        """A ledger id never handed out before (for a compacted ledger)."""

    @property
    def compacted_ledgers(self) -> CompactedLedgerStore:
        """Where the managed ledgers' compacted ledgers live."""

    @property
    def cache(self) -> EntryCache:
        """The entry cache shared by the managed ledgers."""

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far; raises if the store fails (a
        failed write is retried by the next call)."""

    async def close(self) -> None:
        """Close every managed ledger; what was appended becomes durable, cursors are stored."""


class FileLedgerStorage:
    """The managed ledgers in ``dataDir`` (see the module docstring)."""

    def __init__(self, factory: ManagedLedgerFactory, metadata: MetadataStore) -> None:
        self.factory = factory
        self._metadata = metadata
        self._cursor_lock = asyncio.Lock()
        self.cache = factory.cache
        """The entry cache shared by the managed ledgers."""
        self.compacted_ledgers = FileCompactedLedgers(metadata, self.allocate_ledger_id)
        """Compacted ledgers as files beside the managed ledgers', recorded in ``metadata``."""

    def take_pending(self) -> PendingCommit | None:
        """The file work of every managed ledger waiting for the group commit."""
        return self.factory.take_pending()

    def listen(self, on_committed: CommittedHook, on_failed: FailedHook) -> None:
        """Nothing to report here: the group commit reports every append."""

    async def open_ledger(self, name: str) -> ManagedLedger:
        """Open ``name``; scanning its files (and repairing a torn tail after a crash) runs in
        a worker thread, so a large recovery never stalls the event loop."""
        existing = self.factory.check_openable(name)
        if existing is not None:
            return existing
        cuts = self.factory.take_cuts_for(name)
        prepared = await asyncio.to_thread(self.factory.prepare, name, cuts)
        return self.factory.open_prepared(prepared)

    def exists(self, name: str) -> bool:
        """Whether ``name`` has a directory of ledger files."""
        return self.factory.exists(name)

    def list_names(self) -> list[str]:
        """The managed ledgers with a directory (reads the directory: blocking)."""
        return self.factory.list_names()

    async def delete(self, name: str) -> None:
        """Delete ``name``'s files and its cursor states; the files are removed in a worker
        thread (a large topic's take a fraction of a second), the name is free at once."""
        detached = self.factory.detach(name)
        if detached is not None:
            await asyncio.to_thread(self.factory.remove_detached, detached)

    async def allocate_ledger_id(self) -> int:
        """The next ledger id of this data directory."""
        return self.factory.allocate_ledger_id()

    async def persist_cursors(self) -> None:
        """Store the cursor states changed so far in the metadata store.

        Writes run one at a time, in the order their snapshots were taken, so an older state
        never overwrites a newer one. A failed write is retried by the next call.
        """
        async with self._cursor_lock:
            snapshots = self.factory.take_cursor_snapshots()
            if not snapshots:
                return
            try:
                await asyncio.to_thread(self._metadata.put_many, snapshots)
            except BaseException:
                self.factory.cursor_snapshots_failed(snapshots)
                raise
            self.factory.cursor_snapshots_written(snapshots)

    async def close(self) -> None:
        """Close the factory (its last commit and index writes run in a worker thread)."""
        await asyncio.to_thread(self.factory.close)
