"""What a managed ledger and a group commit need from their factory, as narrow interfaces.

:class:`~starquake.storage.factory.ManagedLedgerFactory` implements :class:`LedgerHost` and
:class:`CommitHost`; the ledger and the commit modules know it only through them, so none of
them imports the factory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .config import ManagedLedgerConfig
from .faults import StorageFaults
from .metadata import MetadataStore
from .position import Position
from .state import EntryCache, LedgerOwner, LedgerState

__all__ = ["CommitHost", "LedgerHost", "StoredCursor"]


class StoredCursor(Protocol):
    """A durable cursor whose changed state waits for the next cursor snapshot."""

    stored_mark_delete: Position
    """The mark-delete position of the last stored state (set once a snapshot is written)."""

    @property
    def key(self) -> str:
        """The cursor's metadata key."""
        ...

    @property
    def mark_delete_position(self) -> Position:
        """The current mark-delete position."""
        ...

    def serialize(self) -> bytes:
        """The cursor's state, as stored."""
        ...


class FileHost(Protocol):
    """The ledger files' shared resources: write descriptors, read descriptors, the cache."""

    def maybe_release(self, state: LedgerState) -> None:
        """Close a ledger's write fd once nothing more will be written through it."""
        ...

    def forget_state(self, state: LedgerState) -> None:
        """Drop a ledger's cached entries and read fd (trimmed, closed or deleted)."""
        ...


class CommitHost(FileHost, Protocol):
    """What :class:`~starquake.storage.commit.PendingCommit` needs from its factory."""

    @property
    def config(self) -> ManagedLedgerConfig:
        """The factory's tuning (``journal_sync``)."""
        ...

    @property
    def faults(self) -> StorageFaults | None:
        """Fault-injection hooks for tests (None in production)."""
        ...

    def cut_on_reopen(self, path: Path, size: int) -> None:
        """Cut the bytes past ``size`` off ``path`` when its managed ledger is next recovered."""
        ...


class LedgerHost(FileHost, Protocol):
    """What a file-backed managed ledger needs from its factory."""

    cursor_dirty: dict[str, StoredCursor | None]
    """Durable cursors changed since the last snapshot, by key (None: deleted)."""

    @property
    def config(self) -> ManagedLedgerConfig:
        """Rollover rules and cache size."""
        ...

    @property
    def clock(self) -> Callable[[], float]:
        """The time, in seconds since the epoch."""
        ...

    @property
    def cache(self) -> EntryCache:
        """The tail-read cache shared by every ledger of the factory."""
        ...

    @property
    def dirty_states(self) -> dict[LedgerState, None]:
        """Ledgers with appends for the next commit."""
        ...

    @property
    def metadata(self) -> MetadataStore:
        """Where durable cursors' states are stored."""
        ...

    def allocate_ledger_id(self) -> int:
        """A new global ledger id."""
        ...

    def ensure_ledger_ids_above(self, ledger_id: int) -> None:
        """Never hand out ``ledger_id`` or a smaller id (found on disk)."""
        ...

    def queue_index(self, state: LedgerState) -> None:
        """Have the next commit write the index file of a sealed, fully written ledger."""
        ...

    def queue_deletion(self, directory: Path, paths: list[Path]) -> None:
        """Have the next commit delete ``paths`` and fsync ``directory``."""
        ...

    def read_fd(self, state: LedgerState) -> int:
        """A descriptor to pread ``state``'s file."""
        ...

    def ledger_closed(self, ml: LedgerOwner) -> None:
        """``ml`` was closed (it may still have writes in flight)."""
        ...

    def is_unsaved(self, key: str) -> bool:
        """True while a change of the durable cursor ``key`` is waiting or being written."""
        ...

    def unsaved_cursor_state(self, key: str) -> tuple[bool, bytes | None]:
        """``(True, state or None)`` if a newer state than the stored one is pending."""
        ...

    def unsaved_cursor_keys(self, prefix: str) -> set[str]:
        """Keys below ``prefix`` whose state is not stored yet."""
        ...
