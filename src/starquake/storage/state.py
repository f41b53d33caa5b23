"""Per-ledger bookkeeping shared by the managed ledger, the group commit and the entry cache.

A :class:`LedgerState` knows its managed ledger only as a :class:`LedgerOwner`: the part of it
that the factory and the group commit call.
"""

from __future__ import annotations

from array import array
from collections import deque
from pathlib import Path
from typing import Protocol

from .api import ManagedLedger
from .position import Position
from .segment import FORMAT_VERSION, HEADER_SIZE, record_header_size

__all__ = ["EntryCache", "LedgerOwner", "LedgerState"]


class LedgerOwner(ManagedLedger, Protocol):
    """A managed ledger as its factory and the group commit see it."""

    def fence(self, exc: BaseException) -> None:
        """Refuse further appends and drop buffered ones (a commit of this ledger failed)."""
        ...

    def refresh_last_confirmed(self) -> Position:
        """Recompute ``last_confirmed`` from the ledgers (a commit finished)."""
        ...

    def busy(self) -> bool:
        """True while bytes of this instance are buffered or being written."""
        ...

    def drop(self) -> None:
        """Forget everything in memory and discard buffered appends (deleted)."""
        ...


class LedgerState:
    """Everything known in memory about one ledger file.

    ``entries`` counts appended entries (their offsets are assigned at once), ``confirmed``
    those whose commit finished. ``pending`` holds appended bytes not yet handed to a commit; they
    start at file offset ``pending_offset`` with entry id ``pending_first``. ``inflight`` counts
    commits that captured bytes of this ledger and have not finished or failed yet: the write fd
    stays open while it is non-zero.
    """

    __slots__ = (
        "cache",
        "cache_base",
        "cache_dead",
        "cache_skip",
        "confirmed",
        "confirmed_end",
        "created_at",
        "damaged",
        "directory",
        "dropped",
        "end",
        "entries",
        "fd",
        "header_pending",
        "index_done",
        "inflight",
        "ledger_id",
        "new_file",
        "offsets",
        "owner",
        "path",
        "pending",
        "pending_first",
        "pending_offset",
        "sealed",
        "version",
    )

    def __init__(
        self, owner: LedgerOwner, ledger_id: int, directory: Path, created_at: float
    ) -> None:
        self.owner = owner
        self.ledger_id = ledger_id
        self.directory = directory
        self.path = directory / f"{ledger_id}.log"
        self.created_at = created_at
        self.fd = -1
        self.offsets: array[int] = array("q")
        self.end = HEADER_SIZE
        self.entries = 0
        self.confirmed = 0
        self.confirmed_end = HEADER_SIZE
        self.sealed = False
        self.pending: list[bytes] = []
        self.pending_first = 0
        self.pending_offset = HEADER_SIZE
        self.header_pending = False
        self.new_file = False
        self.inflight = 0
        self.dropped = False
        self.index_done = False
        self.damaged: set[int] = set()
        """Entry ids whose record failed its checksum: reads and cursors skip them."""
        self.version = FORMAT_VERSION
        """Format version of the file (older files are read in their own format)."""
        self.cache: list[bytes | None] = []
        self.cache_base = 0
        self.cache_skip = 0
        self.cache_dead = False

    @property
    def record_header(self) -> int:
        """Bytes of each record's header in this ledger's file."""
        return record_header_size(self.version)

    def record_end(self, entry_id: int) -> int:
        """File offset just after the record of ``entry_id``."""
        nxt = entry_id + 1
        return self.offsets[nxt] if nxt < len(self.offsets) else self.end

    def __repr__(self) -> str:
        return f"LedgerState({self.ledger_id}, entries={self.entries}, confirmed={self.confirmed})"


class EntryCache:
    """Byte-bounded cache of recent appends shared by every ledger of a factory.

    Each ledger keeps its cached entries in a list (``cache[i]`` is entry ``cache_base + i``); the
    cache keeps one reference to the ledger per cached entry, in append order, so evicting the
    globally oldest entry is a ``popleft`` plus dropping the ledger's oldest cached entry.
    """

    __slots__ = ("_live", "_order", "max_bytes", "size")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._order: deque[LedgerState] = deque()
        self._live = 0

    def add(self, state: LedgerState, data: bytes) -> None:
        """Cache the entry just appended to ``state`` (its id is ``cache_base + len(cache)``)."""
        state.cache.append(data)
        self._order.append(state)
        self._live += 1
        self.size += len(data)
        if self.size > self.max_bytes:
            self._evict()

    def get(self, state: LedgerState, entry_id: int) -> bytes | None:
        """Cached bytes of an entry, or None."""
        i = entry_id - state.cache_base
        if 0 <= i < len(state.cache):
            return state.cache[i]
        return None

    def _evict(self) -> None:
        order = self._order
        while self.size > self.max_bytes and order:
            state = order.popleft()
            skip = state.cache_skip
            cache = state.cache
            if skip >= len(cache):
                continue  # stale reference of a dropped ledger
            data = cache[skip]
            cache[skip] = None
            self._live -= 1
            if data is not None:
                self.size -= len(data)
            skip += 1
            if skip >= 1024 and skip * 2 >= len(cache):
                del cache[:skip]
                state.cache_base += skip
                skip = 0
            state.cache_skip = skip

    def drop(self, state: LedgerState) -> None:
        """Forget every cached entry of ``state`` (ledger trimmed, closed or deleted)."""
        cache = state.cache
        for i in range(state.cache_skip, len(cache)):
            data = cache[i]
            if data is not None:
                self.size -= len(data)
                self._live -= 1
        state.cache_base += len(cache)
        state.cache = []
        state.cache_skip = 0
        state.cache_dead = True
        if len(self._order) > 2 * self._live + 4096:
            self._order = deque(s for s in self._order if not s.cache_dead)
