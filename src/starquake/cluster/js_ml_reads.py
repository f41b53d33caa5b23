"""Reads and trimming of a managed ledger in JetStream (roles of
:class:`~starquake.cluster.js_managed_ledger.JetStreamManagedLedger`).

Positions, counts and statistics are the file backend's (:class:`LedgerTrim`, over the same
per-ledger :class:`LedgerState` bookkeeping); what differs is where entries come from and how
ledgers go. Reads serve the tail from the factory's entry cache (appends are cached while a
cursor is active, until evicted) and fetch the rest by record through the ledger's record
index, suspending while JetStream answers. Trimming drops whole consumed ledgers from memory
at once and queues their subjects for purging; the writer purges, then stores the ledger list
without them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from starquake.cluster.js_ledgers import JetStreamLedgers, LedgerIndex
from starquake.storage.cursor import ManagedCursorImpl
from starquake.storage.ledger_cursors import LedgerCursors
from starquake.storage.ledger_reads import VisibleEntries
from starquake.storage.position import Entry, Position, RetentionLimits, StorageError
from starquake.storage.segment import HEADER_SIZE
from starquake.storage.state import EntryCache, LedgerState

__all__ = ["JsLedgerReads"]


class JsLedgerReads(LedgerCursors):
    """Awaitable reads by record and trimming by purge over ``_ids``/``_states``."""

    _ledgers: JetStreamLedgers
    _indexes: dict[int, LedgerIndex]
    _cache: EntryCache
    _purge: list[tuple[int, bool]]
    _fenced_ids: set[int]
    _cursor_dirty: dict[str, ManagedCursorImpl | None]

    def _kick(self) -> None:
        """Have the writer run (the lifecycle role provides it)."""
        raise NotImplementedError

    def _skip_damaged(self, positions: list[Position]) -> None:
        """Records are checked as a whole when read; a damaged one is a read error."""

    # ------------------------------------------------------------------ reading

    def read_entries_now(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        raise StorageError("a JetStream ledger's reads are awaitable")

    def read_entry_now(self, position: tuple[int, int]) -> Entry | None:
        raise StorageError("a JetStream ledger's reads are awaitable")

    def find_first_now(self, predicate: Callable[[Entry], bool]) -> Position | None:
        raise StorageError("a JetStream ledger's reads are awaitable")

    async def read_entries(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        """Visible entries at or after ``start``, in order, at most ``max_entries`` and (but
        for the first) within ``max_bytes``; entries of a ledger trimmed while the read
        waited are left out."""
        out: list[Entry] = []
        ledger_id, entry_id = start[0], max(start[1], 0)
        budget = max_bytes
        while len(out) < max_entries:
            lc_lid, lc_eid = self._lc
            ids = self._ids  # looked up again after each wait: trimming may have changed it
            i = bisect_left(ids, ledger_id)
            if i >= len(ids) or ids[i] > lc_lid:
                break
            lid = ids[i]
            if lid != ledger_id:
                entry_id = 0
            state = self._states[lid]
            last = state.confirmed - 1 if lid != lc_lid else min(state.confirmed - 1, lc_eid)
            got = []
            if entry_id <= last:
                got = await self._read_ledger_range(state, entry_id, last, max_entries - len(out))
            for entry in got:
                if budget is not None:
                    if out and len(entry.data) > budget:
                        return out
                    budget -= len(entry.data)
                out.append(entry)
            if got and got[-1].position.entry_id < last:
                ledger_id, entry_id = lid, got[-1].position.entry_id + 1
            else:
                ledger_id, entry_id = lid + 1, 0
        return out

    def try_read_entries(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry] | None:
        """What :meth:`read_entries` would return when the entry cache holds all of it (the
        tail that consumers keep up with); None when a record must be fetched."""
        out: list[Entry] = []
        ledger_id, entry_id = start[0], max(start[1], 0)
        budget = max_bytes
        lc_lid, lc_eid = self._lc
        while len(out) < max_entries:
            i = bisect_left(self._ids, ledger_id)
            if i >= len(self._ids) or self._ids[i] > lc_lid:
                break
            lid = self._ids[i]
            if lid != ledger_id:
                entry_id = 0
            state = self._states[lid]
            last = state.confirmed - 1 if lid != lc_lid else min(state.confirmed - 1, lc_eid)
            while entry_id <= last and len(out) < max_entries:
                data = self._cache.get(state, entry_id)
                if data is None:
                    return None
                if budget is not None:
                    if out and len(data) > budget:
                        return out
                    budget -= len(data)
                out.append(Entry(Position(lid, entry_id), data))
                entry_id += 1
            ledger_id, entry_id = lid + 1, 0
        return out

    async def _read_ledger_range(
        self, state: LedgerState, first: int, last: int, want: int
    ) -> list[Entry]:
        """Up to ``want`` entries ``first..last`` of one ledger: cached ones, else one fetch
        of the records up to the next cached entry."""
        lid = state.ledger_id
        out: list[Entry] = []
        eid = first
        while eid <= last and len(out) < want:
            data = self._cache.get(state, eid)
            if data is not None:
                out.append(Entry(Position(lid, eid), data))
                eid += 1
                continue
            index = self._indexes.get(lid)
            if index is None:
                break
            cached_from = state.cache_base + state.cache_skip
            stop = min(last, eid + want - len(out) - 1)
            if eid < cached_from <= stop:
                stop = cached_from - 1
            try:
                fetched = await self._ledgers.read(lid, index, eid, stop - eid + 1)
            except StorageError:
                if self._states.get(lid) is not state:
                    break  # trimmed while the read waited
                raise
            if self._states.get(lid) is not state or not fetched:
                break
            out.extend(Entry(Position(lid, e), data) for e, data in fetched)
            eid = fetched[-1][0] + 1
        return out

    async def read_entry(self, position: tuple[int, int]) -> Entry | None:
        """The visible entry at exactly ``position``, or None."""
        ledger_id, entry_id = position
        state = self._states.get(ledger_id)
        if state is None or entry_id < 0 or position > self._lc or entry_id >= state.confirmed:
            return None
        got = await self._read_ledger_range(state, entry_id, entry_id, 1)
        return got[0] if got else None

    async def replay_entries(self, positions: Sequence[tuple[int, int]]) -> list[Entry]:
        """The visible entries at ``positions``, in that order, without those not stored."""
        out = []
        for position in positions:
            entry = await self.read_entry(position)
            if entry is not None:
                out.append(entry)
        return out

    async def find_first(self, predicate: Callable[[Entry], bool]) -> Position | None:
        """Binary search for the first visible entry whose (monotone) ``predicate`` holds."""
        visible = VisibleEntries(self._ids, self._states, self._lc)
        lo, hi = 0, visible.total
        while lo < hi:
            mid = (lo + hi) // 2
            entry = await self.read_entry(visible.position(mid))
            if entry is not None and predicate(entry):
                hi = mid
            else:
                lo = mid + 1
        return visible.position(lo) if lo < visible.total else None

    # ------------------------------------------------------------------ trimming

    def trim(
        self,
        retention: RetentionLimits | None = None,
        hold: tuple[int, int] | None = None,
        now: float | None = None,
    ) -> int:
        """Delete consumed sealed ledgers beyond ``retention`` and not after ``hold`` (the
        file backend's rule); their subjects are purged, then the ledger list is stored."""
        self._deleting = [c for c in self._deleting if c.key in self._cursor_dirty]
        marks = [c.trim_horizon for c in (*self._cursors.values(), *self._deleting)]
        if hold is not None:
            marks.append(Position(hold[0], hold[1]))
        horizon = min(marks) if marks else None
        if retention is not None and retention.seconds < 0 and retention.size_bytes < 0:
            return 0
        now = self._clock() if now is None else now
        total = self.total_size
        deleted = 0
        while len(self._ids) > 1:
            state = self._states[self._ids[0]]
            if state is self._cur or not state.sealed or state.pending:
                break
            if state.confirmed != state.entries:
                break
            if horizon is not None and Position(state.ledger_id, state.entries - 1) > horizon:
                break
            if retention is not None:
                closed_at = self._states[self._ids[1]].created_at
                expired = retention.seconds >= 0 and now - closed_at >= retention.seconds
                over_size = retention.size_bytes >= 0 and total > retention.size_bytes
                if not (expired or over_size):
                    break
            total -= state.confirmed_end - HEADER_SIZE
            self._drop_ledger(state)
            deleted += 1
        if deleted:
            self.refresh_last_confirmed()
            self._kick()
        return deleted

    def _drop_ledger(self, state: LedgerState) -> None:
        lid = state.ledger_id
        self._cache.drop(state)
        del self._states[lid]
        self._ids.pop(0)
        self._indexes.pop(lid, None)
        self._purge.append((lid, lid in self._fenced_ids))
        self._fenced_ids.discard(lid)
