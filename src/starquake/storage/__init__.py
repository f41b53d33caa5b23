"""Storage engine: managed ledgers of opaque entries, cursors, group commit, metadata store.

No networking and nothing about Pulsar commands: entries are opaque bytes at :class:`Position`\\ s.
The core is synchronous and deterministic but for the reads of entries, which are coroutines
(a remote backend's wait for the network; the file backend's return at their first step); the
broker calls it on its event loop, except
:meth:`PendingCommit.execute` (and metadata writes), which it runs in a worker thread.

:class:`ManagedLedger` and :class:`ManagedCursor` are the interfaces (protocols, with their
contract in :mod:`.api`) the broker programs against; :class:`FileManagedLedger` and
:class:`ManagedCursorImpl` implement them over local files.
"""

from __future__ import annotations

from .api import ManagedCursor, ManagedLedger
from .commit import PendingCommit
from .config import ManagedLedgerConfig
from .cursor import ManagedCursorImpl
from .dirlock import DataDirectoryLock, DataDirectoryLockedError, make_dirs
from .factory import ManagedLedgerFactory, PreparedLedger
from .faults import FileFaults, InjectedFaults, StorageFaults
from .ledger import FileManagedLedger
from .metadata import (
    ABSENT,
    BadVersionError,
    MemoryMetadataStore,
    MetadataDamagedError,
    MetadataStore,
    SqliteMetadataStore,
    Versioned,
)
from .position import (
    EARLIEST,
    LATEST,
    Entry,
    InitialPosition,
    InvalidPositionError,
    LedgerBusyError,
    LedgerFencedError,
    LedgerInfo,
    Position,
    RetentionLimits,
    StorageError,
)
from .rangeset import PositionRangeSet
from .read_now import read_at_hand, read_now

__all__ = [
    "ABSENT",
    "EARLIEST",
    "LATEST",
    "BadVersionError",
    "DataDirectoryLock",
    "DataDirectoryLockedError",
    "Entry",
    "FileFaults",
    "FileManagedLedger",
    "InitialPosition",
    "InjectedFaults",
    "InvalidPositionError",
    "LedgerBusyError",
    "LedgerFencedError",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedCursorImpl",
    "ManagedLedger",
    "ManagedLedgerConfig",
    "ManagedLedgerFactory",
    "MemoryMetadataStore",
    "MetadataDamagedError",
    "MetadataStore",
    "PendingCommit",
    "Position",
    "PositionRangeSet",
    "PreparedLedger",
    "RetentionLimits",
    "SqliteMetadataStore",
    "StorageError",
    "StorageFaults",
    "Versioned",
    "make_dirs",
    "read_at_hand",
    "read_now",
]
