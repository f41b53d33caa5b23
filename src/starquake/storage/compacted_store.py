"""Where a topic's compacted ledger lives: the interface the compaction talks to.

A compacted ledger holds copies of entries of a managed ledger under their original
positions, in position order, written once by one compaction and never changed. The topic's
*committed* compacted ledger (its id and the horizon it covers) is recorded beside the managed
ledger; a compaction writes a new one, records it (the commit point), then deletes the one it
replaced.

Two implementations:

- files in the managed ledger's directory, their record a key of the broker's metadata store
  (:mod:`starquake.storage.compacted_files`, the standalone broker);
- a ledger of the cluster's JetStream ledgers, recorded in the managed ledger's stored ledger
  list (:mod:`starquake.cluster.js_compacted`, cluster mode): whichever broker owns the topic
  next opens the same compacted view.

Reads are awaitable (a file-backed reader returns at its first step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .api import ManagedLedger
from .compacted import CompactedRecord
from .position import Position

__all__ = ["CompactedLedgerBuilder", "CompactedLedgerReader", "CompactedLedgerStore"]


class CompactedLedgerReader(Protocol):
    """An open compacted ledger."""

    @property
    def ledger_id(self) -> int:
        """The compacted ledger's id (from the same allocator as data ledgers)."""

    @property
    def horizon(self) -> Position:
        """The last position of the managed ledger the compaction covered."""

    @property
    def entries(self) -> int:
        """How many entries it holds."""

    @property
    def size(self) -> int:
        """Bytes of its entries."""

    @property
    def last(self) -> Position | None:
        """The position of its last entry (None: it holds none)."""

    async def read_from(self, position: Position, max_entries: int) -> list[CompactedRecord]:
        """Up to ``max_entries`` entries at or after ``position``, in order (a damaged one
        has ``data`` None). StorageError when they cannot be read."""

    async def reopen(self) -> CompactedLedgerReader:
        """Another reader of the same compacted ledger, closed independently of this one."""

    def close(self) -> None:
        """Release what the reader holds."""


class CompactedLedgerBuilder(Protocol):
    """A new compacted ledger being written."""

    @property
    def ledger_id(self) -> int:
        """The new compacted ledger's id."""

    async def append(self, items: Sequence[tuple[Position, bytes | memoryview]]) -> None:
        """Append entries, each after every position appended before."""

    async def finish(self, horizon: Position) -> CompactedLedgerReader:
        """Make the ledger durable, covering the log up to ``horizon``, and open it."""

    async def abort(self) -> None:
        """Give the unfinished ledger up and delete what was written."""


class CompactedLedgerStore(Protocol):
    """The compacted ledgers of a broker's managed ledgers (see the module docstring)."""

    async def create(self, ledger: ManagedLedger) -> CompactedLedgerBuilder:
        """Begin a new compacted ledger of ``ledger``."""

    async def open_committed(self, ledger: ManagedLedger) -> CompactedLedgerReader | None:
        """The committed compacted ledger of ``ledger`` opened (None: there is none or it
        cannot be opened, which is logged); compacted ledgers of compactions that did not
        commit are deleted."""

    async def commit(self, ledger: ManagedLedger, compacted: CompactedLedgerReader) -> None:
        """Record ``compacted`` as the committed compacted ledger of ``ledger`` (durably: the
        commit point of a compaction)."""

    async def delete(self, ledger: ManagedLedger, compacted: CompactedLedgerReader) -> None:
        """Delete a compacted ledger that is not (or no longer) the committed one."""

    async def forget(self, name: str) -> None:
        """The managed ledger ``name`` is being deleted: its compaction record goes (its
        compacted ledgers go with the managed ledger)."""
