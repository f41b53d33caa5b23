"""Per-ledger bookkeeping shared by the managed ledger, the group commit and the entry cache.

A :class:`LedgerState` knows its managed ledger only as a :class:`LedgerOwner`: the part of it
that the factory and the group commit call.
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .api import ManagedLedger
from .position import Position
from .segment import FORMAT_VERSION, HEADER_SIZE, record_header_size

__all__ = ["ENTRY_OVERHEAD", "EntryCache", "LedgerOwner", "LedgerState"]


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
        "allocated_end",
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
        self.allocated_end = 0
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

    def pending_within(self, budget: int) -> int:
        """How many of the pending appends, from the first, fit in ``budget`` bytes of the
        file (at least one: a record larger than the budget is written alone)."""
        first = self.pending_first
        if self.end - self.pending_offset <= budget:
            return self.entries - first
        # the records that end by the limit are those before the first one starting past it
        after = bisect_right(self.offsets, self.pending_offset + budget, first + 1, self.entries)
        return max(1, after - 1 - first)

    def __repr__(self) -> str:
        return f"LedgerState({self.ledger_id}, entries={self.entries}, confirmed={self.confirmed})"


ENTRY_OVERHEAD = 49
"""Bytes a cached entry costs beyond its payload: the bytes object's header (33) and its slots
in the ledger's list and in the eviction order (8 each). The cache's size counts them, so that
its bound holds for memory, not only for payloads."""


class EntryCache:
    """Byte-bounded cache of recent appends shared by every ledger of a factory.

    Each ledger keeps its cached entries in a list (``cache[i]`` is entry ``cache_base + i``); the
    cache keeps one reference to the ledger per cached entry, in append order, so evicting the
    globally oldest entry is a ``popleft`` plus dropping the ledger's oldest cached entry.

    Eviction follows Pulsar's managed-ledger cache: once the size (payloads plus
    :data:`ENTRY_OVERHEAD` each) goes over ``max_bytes``, the oldest entries go until it is at
    most ``max_bytes * watermark``; and :meth:`evict_older_than`, run every eviction interval,
    drops the entries cached longer than the time threshold. The times are those of the calls:
    each call marks how many entries were cached by then, so entries carry no timestamp.
    """

    __slots__ = (
        "_live",
        "_marks",
        "_order",
        "_popped",
        "_pushed",
        "max_bytes",
        "on_filled",
        "size",
        "watermark",
    )

    def __init__(self, max_bytes: int, watermark: float = 0.9) -> None:
        self.max_bytes = max_bytes
        self.watermark = watermark
        self.size = 0
        self._order: deque[LedgerState] = deque()
        self._live = 0
        self._pushed = 0
        """References ever appended to ``_order`` (its end, counted from the first one)."""
        self._popped = 0
        """References ever taken off the front of ``_order`` (its start)."""
        self._marks: deque[tuple[float, int]] = deque()
        """(time, ``_pushed`` then) of each :meth:`evict_older_than` call, oldest first."""
        self.on_filled: Callable[[], None] | None = None
        """Called when an entry is cached while none was (the time-based eviction sleeps
        while the cache is empty)."""

    @property
    def entries(self) -> int:
        """How many entries are cached."""
        return self._live

    @property
    def empty(self) -> bool:
        """Nothing is cached: time-based eviction has nothing to do."""
        return not self._order

    def add(self, state: LedgerState, data: bytes) -> None:
        """Cache the entry just appended to ``state`` (its id is ``cache_base + len(cache)``)."""
        state.cache.append(data)
        if not self._order and self.on_filled is not None:
            self.on_filled()
        self._order.append(state)
        self._pushed += 1
        self._live += 1
        self.size += len(data) + ENTRY_OVERHEAD
        if self.size > self.max_bytes:
            self._evict_to(int(self.max_bytes * self.watermark))

    def skip(self, state: LedgerState, count: int = 1) -> None:
        """Keep the numbering of ``state``'s cached entries right past ``count`` entries
        appended but not cached (no cursor was active to read them soon)."""
        if state.cache_skip >= len(state.cache):
            state.cache_base += len(state.cache) + count
            state.cache.clear()
            state.cache_skip = 0
        elif count == 1:
            state.cache.append(None)
        else:
            state.cache.extend(itertools.repeat(None, count))

    def get(self, state: LedgerState, entry_id: int) -> bytes | None:
        """Cached bytes of an entry, or None."""
        i = entry_id - state.cache_base
        if 0 <= i < len(state.cache):
            return state.cache[i]
        return None

    def evict_older_than(self, now: float, threshold: float) -> int:
        """Drop the entries cached more than ``threshold`` seconds before ``now`` (as far as
        the earlier calls' marks tell); returns how many went."""
        marks = self._marks
        marks.append((now, self._pushed))
        upto = -1
        while marks and marks[0][0] <= now - threshold:
            upto = marks.popleft()[1]
        if upto < 0:
            return 0
        live = self._live
        self._evict_while(lambda: self._popped < upto)
        return live - self._live

    def _evict_to(self, target: int) -> None:
        self._evict_while(lambda: self.size > target)

    def _evict_while(self, more: Callable[[], bool]) -> None:
        order = self._order
        while order and more():
            state = order.popleft()
            self._popped += 1
            skip = state.cache_skip
            cache = state.cache
            while skip < len(cache) and cache[skip] is None:
                skip += 1  # appends that were not cached
            if skip >= len(cache):
                state.cache_skip = skip
                continue  # stale reference of a dropped ledger
            data = cache[skip]
            cache[skip] = None
            self._live -= 1
            if data is not None:
                self.size -= len(data) + ENTRY_OVERHEAD
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
                self.size -= len(data) + ENTRY_OVERHEAD
                self._live -= 1
        state.cache_base += len(cache)
        state.cache = []
        state.cache_skip = 0
        state.cache_dead = True
        if len(self._order) > 2 * self._live + 4096:
            self._compact()

    def _compact(self) -> None:
        """Leave out the references of dropped ledgers, keeping the time marks right."""
        kept: deque[LedgerState] = deque()
        marks = sorted(m for _, m in self._marks)
        renumbered: dict[int, int] = {}
        at = self._popped
        j = 0
        for state in self._order:
            while j < len(marks) and marks[j] <= at:
                renumbered[marks[j]] = self._popped + len(kept)
                j += 1
            at += 1
            if not state.cache_dead:
                kept.append(state)
        for m in marks[j:]:
            renumbered[m] = self._popped + len(kept)
        self._marks = deque((t, renumbered[m]) for t, m in self._marks)
        self._order = kept
        self._pushed = self._popped + len(kept)
