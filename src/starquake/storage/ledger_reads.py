"""Positions and reads of a file-backed managed ledger (the read role of
:class:`~starquake.storage.ledger.FileManagedLedger`).

Entries are served from the shared tail cache when they are still in it, else read from the
ledger files with one ``pread`` per run of records (at most ``_READ_CHUNK`` bytes). A record whose
checksum fails is logged once, marked damaged and skipped from then on; durable cursors count it
as acknowledged.

The contract's reads are coroutines (a remote backend's wait for the network); these return at
their first step. The synchronous ``*_now`` forms are the file backend's own (its tests and
its recovery use them).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path

from .host import LedgerHost
from .position import Entry, Position, StorageError
from .segment import parse_records
from .state import LedgerState

__all__ = ["LedgerReads"]

log = logging.getLogger("starquake.storage.ledger")

_READ_CHUNK = 4 * 1024 * 1024  # largest single pread when serving reads from a file


class VisibleEntries:
    """The visible entries of ledgers ``ids`` numbered 0, 1, ... in log order (a binary
    search over the log by entry number)."""

    __slots__ = ("_cumulative", "_ids", "total")

    def __init__(self, ledger_ids: list[int], states: dict[int, LedgerState], lc: Position) -> None:
        self._ids: list[int] = []
        self._cumulative: list[int] = []
        self.total = 0
        for ledger_id in ledger_ids:
            if ledger_id > lc.ledger_id:
                break
            n = states[ledger_id].confirmed
            if ledger_id == lc.ledger_id:
                n = min(n, lc.entry_id + 1)
            if n > 0:
                self._ids.append(ledger_id)
                self.total += n
                self._cumulative.append(self.total)

    def position(self, n: int) -> Position:
        """The position of visible entry number ``n`` (``0 <= n < total``)."""
        k = bisect_right(self._cumulative, n)
        return Position(self._ids[k], n - (self._cumulative[k - 1] if k else 0))


class LedgerReads:
    """Positions and reads over the ledgers ``_ids`` (ascending) described by ``_states``."""

    name: str
    _directory: Path
    _host: LedgerHost
    _ids: list[int]
    _states: dict[int, LedgerState]
    _cur: LedgerState
    _lc: Position

    def _skip_damaged(self, positions: list[Position]) -> None:
        """Acknowledge lost entries on every durable cursor (the cursor role provides it)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ positions

    @property
    def last_confirmed(self) -> Position:
        """Last durable and visible entry; ``(current_ledger_id, -1)`` if there is none."""
        return self._lc

    def refresh_last_confirmed(self) -> Position:
        """Recompute :attr:`last_confirmed` from the ledgers (after a commit or a trim)."""
        for ledger_id in reversed(self._ids):
            confirmed = self._states[ledger_id].confirmed
            if confirmed:
                self._lc = Position(ledger_id, confirmed - 1)
                return self._lc
        # nothing confirmed: just before the first stored ledger (a sealed ledger whose entries
        # are still being written may come before the current one)
        self._lc = Position(self._ids[0], -1)
        return self._lc

    @property
    def current_ledger_id(self) -> int:
        """Id of the ledger that receives appends."""
        return self._cur.ledger_id

    def normalize(self, position: tuple[int, int]) -> Position:
        """The first position ``>= position`` that holds (or will hold) an entry.

        Positions in deleted ledgers or past the end of a sealed ledger move to the next ledger;
        positions past the current ledger's end are returned unchanged.
        """
        ledger_id, entry_id = position
        ids = self._ids
        i = bisect_left(ids, ledger_id)
        n = len(ids)
        while i < n:
            lid = ids[i]
            if lid != ledger_id:
                entry_id = 0
            state = self._states[lid]
            if entry_id < 0:
                entry_id = 0
            damaged = state.damaged
            while damaged and entry_id in damaged:
                entry_id += 1
            if entry_id < state.entries or not state.sealed:
                return Position(lid, entry_id)
            i += 1
        return Position(ledger_id, entry_id)

    def entry_exists(self, position: tuple[int, int]) -> bool:
        """True if ``position`` names a visible (durable) entry that is still stored."""
        ledger_id, entry_id = position
        state = self._states.get(ledger_id)
        return state is not None and 0 <= entry_id < state.confirmed and position <= self._lc

    def is_trimmed(self, position: tuple[int, int]) -> bool:
        """True if ``position`` lies in a ledger that was deleted (before every stored one)."""
        return position[0] < self._ids[0]

    def next_position(self, position: tuple[int, int]) -> Position:
        """The position right after ``position`` (may be ``(next_ledger, 0)``)."""
        return self.normalize((position[0], position[1] + 1))

    def first_position(self) -> Position | None:
        """The first stored (not trimmed) visible entry, or None."""
        for ledger_id in self._ids:
            if self._states[ledger_id].confirmed:
                return Position(ledger_id, 0)
        return None

    def position_before_first(self) -> Position:
        """A position just before the first stored entry (``(first_ledger_id, -1)``)."""
        return Position(self._ids[0], -1)

    def count_entries(self, after: tuple[int, int], up_to: tuple[int, int]) -> int:
        """Number of visible entries in ``(after, up_to]``."""
        lc = self._lc
        if up_to > lc:
            up_to = lc
        total = 0
        after_lid, after_eid = after
        up_lid, up_eid = up_to
        ids = self._ids
        for i in range(bisect_left(ids, after_lid), len(ids)):
            lid = ids[i]
            if lid > up_lid:
                break
            n = self._states[lid].confirmed
            first = after_eid + 1 if lid == after_lid else 0
            last = min(n - 1, up_eid) if lid == up_lid else n - 1
            if last >= first:
                total += last - first + 1
        return total

    # ------------------------------------------------------------------ reading

    async def read_entries(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        """As :meth:`read_entries_now` (returns without suspending)."""
        return self.read_entries_now(start, max_entries, max_bytes)

    def try_read_entries(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry] | None:
        """As :meth:`read_entries_now`: the cursors' reads never wait on this backend."""
        return self.read_entries_now(start, max_entries, max_bytes)

    async def read_entry(self, position: tuple[int, int]) -> Entry | None:
        """As :meth:`read_entry_now` (returns without suspending)."""
        return self.read_entry_now(position)

    async def replay_entries(self, positions: Sequence[tuple[int, int]]) -> list[Entry]:
        """The visible entries at ``positions``, in that order, without those not stored."""
        out = []
        for position in positions:
            entry = self.read_entry_now(position)
            if entry is not None:
                out.append(entry)
        return out

    async def find_first(self, predicate: Callable[[Entry], bool]) -> Position | None:
        """As :meth:`find_first_now` (returns without suspending)."""
        return self.find_first_now(predicate)

    def read_entries_now(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        """Visible entries with position ``>= start``, in order, across ledgers.

        Stops after ``max_entries`` entries, or before exceeding ``max_bytes`` of data (at least
        one entry is always returned when one is available).
        """
        out: list[Entry] = []
        if max_entries <= 0:
            return out
        lc_lid, lc_eid = self._lc
        ledger_id, entry_id = start
        if entry_id < 0:
            entry_id = 0
        ids = self._ids
        budget = max_bytes
        i = bisect_left(ids, ledger_id)
        while i < len(ids) and len(out) < max_entries:
            lid = ids[i]
            if lid > lc_lid:
                break
            if lid != ledger_id:
                entry_id = 0
            state = self._states[lid]
            last = state.confirmed - 1
            if lid == lc_lid and lc_eid < last:
                last = lc_eid
            if entry_id <= last:
                budget = self._read_ledger(state, entry_id, last, max_entries, out, budget)
                if budget is not None and budget <= 0:
                    break
            i += 1
        return out

    def _read_ledger(
        self,
        state: LedgerState,
        first: int,
        last: int,
        max_entries: int,
        out: list[Entry],
        budget: int | None,
    ) -> int | None:
        lid = state.ledger_id
        eid = first
        damaged = state.damaged
        while eid <= last and len(out) < max_entries:
            if damaged and eid in damaged:
                eid += 1  # a lost entry: skipped
                continue
            end = min(last, eid + max_entries - len(out) - 1)
            cache = state.cache
            base = state.cache_base
            cached_from = base + state.cache_skip
            cached_to = base + len(cache)
            if cached_from <= eid < cached_to:
                stop = min(end + 1, cached_to)
                while eid < stop:
                    data = cache[eid - base]
                    if data is None:
                        break  # appended while no cursor was active: not cached
                    if budget is not None:
                        if out and len(data) > budget:
                            return 0
                        budget -= len(data)
                    out.append(Entry(Position(lid, eid), data))
                    eid += 1
                if eid >= stop:
                    continue
                run_end = eid
                while run_end + 1 < stop and cache[run_end + 1 - base] is None:
                    run_end += 1
            else:
                run_end = min(end, cached_from - 1) if eid < cached_from else end
            if damaged:
                run_end = min([run_end, *(d - 1 for d in damaged if eid < d <= run_end)])
            eid, budget, stop = self._read_run(state, eid, run_end, out, budget)
            if stop:
                return 0
        return budget

    def _read_run(
        self, state: LedgerState, eid: int, run_end: int, out: list[Entry], budget: int | None
    ) -> tuple[int, int | None, bool]:
        """Read entries ``eid..run_end`` (none of them lost) from the file in one pread, within
        the byte budget and the chunk limit: (next entry id, budget left, budget exhausted)."""
        offsets = state.offsets
        header = state.record_header
        start_offset = offsets[eid]
        count = len(offsets)
        stop_after = False
        left = budget
        if run_end < eid:
            return eid, left, True
        if left is None:  # up to the first record that ends past the chunk limit (bisection)
            top = min(run_end + 1, count)
            j = bisect_left(offsets, start_offset + _READ_CHUNK, eid + 1, top)
            if j == top:
                j = run_end + 1
        else:
            j = eid
            while j <= run_end:
                end = offsets[j + 1] if j + 1 < count else state.end
                size = end - offsets[j] - header
                if (out or j > eid) and size > left:
                    stop_after = True
                    break
                left -= size
                j += 1
                if end - start_offset >= _READ_CHUNK:
                    break
        if j == eid:
            return eid, left, True
        length = (offsets[j] if j < count else state.end) - start_offset
        fd = self._host.read_fd(state)
        try:
            buf = os.pread(fd, length, start_offset)
        except OSError as exc:
            raise StorageError(
                f"cannot read ledger {state.ledger_id} of {self.name}: {exc}"
            ) from exc
        starts = [offset - start_offset for offset in offsets[eid:j]]
        first_id = eid if state.version >= 2 else None
        ledger_id = state.ledger_id
        records = parse_records(buf, starts, length, first_id, state.version)
        for k, record in enumerate(records, eid):
            if record is None:
                self._damaged(state, k)
            else:
                out.append(Entry(Position(ledger_id, k), record))
        return j, left, stop_after

    def _damaged(self, state: LedgerState, entry_id: int) -> None:
        """A read found the record of ``entry_id`` damaged: skip it from now on."""
        if entry_id in state.damaged:
            return
        state.damaged.add(entry_id)
        log.error(
            "ledger %s/%d.log: entry %d of %s is damaged (checksum mismatch); it is skipped "
            "and counts as acknowledged",
            self._directory,
            state.ledger_id,
            entry_id,
            self.name,
        )
        self._skip_damaged([Position(state.ledger_id, entry_id)])

    def read_entry_now(self, position: tuple[int, int]) -> Entry | None:
        """The visible entry at exactly ``position``, or None."""
        ledger_id, entry_id = position
        state = self._states.get(ledger_id)
        if state is None or entry_id < 0 or position > self._lc or entry_id >= state.confirmed:
            return None
        out: list[Entry] = []
        self._read_ledger(state, entry_id, entry_id, 1, out, None)
        return out[0] if out else None

    def find_first_now(self, predicate: Callable[[Entry], bool]) -> Position | None:
        """Binary search for the first visible entry whose ``predicate`` is true.

        The predicate must be monotone over the log (false...false, true...true).
        """
        visible = VisibleEntries(self._ids, self._states, self._lc)
        lo, hi = 0, visible.total
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.read_entry_now(visible.position(mid))
            if entry is not None and predicate(entry):
                hi = mid
            else:
                lo = mid + 1
        return visible.position(lo) if lo < visible.total else None
