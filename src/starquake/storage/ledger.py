"""ManagedLedger: an append-only log of opaque entries split into ledgers (one file each).

Threading: every method runs on the broker's event loop; only :class:`PendingCommit.execute` runs in
a worker thread. ``append`` buffers in memory (no syscall unless it rolls over to a new ledger);
entries become readable when the group commit that wrote them finishes.

Rollover (Pulsar's rules), checked on each append: the current ledger is sealed and a new ledger
(new global id, entry ids from 0) is created when it has at least one entry and either its age
reached ``max_rollover_seconds``, or it is full (entries or bytes) and its age reached
``min_rollover_seconds``. :meth:`ManagedLedger.maybe_rollover` applies the same rule from a timer.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from .cursor import ManagedCursor, decode_cursor_state
from .position import (
    Entry,
    InitialPosition,
    LedgerFencedError,
    LedgerInfo,
    Position,
    RetentionLimits,
    StorageError,
)
from .rangeset import PositionRangeSet
from .recovery import recover_ledger_states
from .segment import HEADER_SIZE, LEDGER_RECORD_HEADER_SIZE, parse_records
from .state import LedgerState

if TYPE_CHECKING:
    from .factory import ManagedLedgerFactory

__all__ = ["ManagedLedger"]

log = logging.getLogger(__name__)

_READ_CHUNK = 4 * 1024 * 1024  # largest single pread when serving reads from a file


class ManagedLedger:
    """A named, append-only log of entries; create it with :meth:`ManagedLedgerFactory.open`."""

    def __init__(self, factory: ManagedLedgerFactory, name: str, directory: Path) -> None:
        self.name = name
        self._factory = factory
        self._directory = directory
        config = factory.config
        self._max_entries = config.max_entries_per_ledger
        self._max_size = config.max_size_per_ledger_bytes
        self._min_roll = config.min_rollover_seconds
        self._max_roll = config.max_rollover_seconds
        self._clock = factory.clock
        self._cache = factory.cache
        self._dirty = factory.dirty_states
        self._ids: list[int] = []
        self._states: dict[int, LedgerState] = {}
        self._cur: LedgerState
        self._lc = Position(-1, -1)
        self._fenced: BaseException | None = None
        self._closed = False
        self._cursors: dict[str, ManagedCursor] = {}
        self._deleting: list[ManagedCursor] = []
        self._cursor_prefix = "/managed-ledgers/" + quote(name, safe="")

    # ------------------------------------------------------------------ lifecycle

    def scan(self, cuts: dict[Path, int] | None = None) -> list[LedgerState]:
        """Read (and repair) this ledger's files; touches nothing shared, so may run in a thread.

        ``cuts`` gives files to cut first (bytes a failed commit left past the last entry).
        """
        return recover_ledger_states(self, self._directory, cuts)

    def recover(self, states: list[LedgerState] | None = None) -> None:
        """Load the ledgers and durable cursors found on disk and open a new ledger for writing.

        ``states`` is the result of :meth:`scan` when the scan already ran (off the event loop).
        """
        for state in self.scan() if states is None else states:
            self._ids.append(state.ledger_id)
            self._states[state.ledger_id] = state
            self._factory.ensure_ledger_ids_above(state.ledger_id)
            if not state.index_done and not state.damaged:
                # a ledger with lost entries is scanned at every start (which finds them again)
                self._factory.queue_index(state)
        # The ledger that receives appends exists before any cursor is restored: restoring a
        # cursor asks where the entry after its mark-delete position lives, which may be in it.
        self._create_ledger(self._clock())
        self.refresh_last_confirmed()
        factory = self._factory
        base = self._cursor_prefix + "/"
        keys = {base + child for child in factory.metadata.list_children(self._cursor_prefix)}
        keys |= factory.unsaved_cursor_keys(self._cursor_prefix)
        for key in sorted(keys):
            # a state not yet written (this ledger closed moments ago) wins over the stored one
            unsaved, raw = factory.unsaved_cursor_state(key)
            name = unquote(key[len(base) :])
            if not unsaved:
                try:
                    raw = factory.metadata.get(key)
                except StorageError as exc:  # its checksum failed: not a position to act on
                    self._restore_cursor(name, None, exc)
                    continue
            if raw is not None:
                self._restore_cursor(name, raw)
        found = [
            Position(lid, eid) for lid in self._ids for eid in sorted(self._states[lid].damaged)
        ]
        if found:
            self._skip_damaged(found)

    def _restore_cursor(
        self, name: str, raw: bytes | None, damage: StorageError | None = None
    ) -> None:
        try:
            if raw is None:
                raise damage or StorageError("no stored state")
            md, acked, batches = decode_cursor_state(raw)
        except StorageError as exc:
            # Losing acknowledgments is better than losing messages: read it all again.
            md, acked, batches = self.position_before_first(), PositionRangeSet(), {}
            log.error(
                "cursor %s of %s has a damaged stored state (%s); it restarts at the first "
                "stored entry, so acknowledged messages may be delivered again",
                name,
                self.name,
                exc,
            )
        cursor = ManagedCursor(self, name, True, md)
        cursor.restore(acked, batches)
        self._cursors[name] = cursor
        if cursor.key in self._factory.cursor_dirty:
            self._factory.cursor_dirty[cursor.key] = cursor

    def _create_ledger(self, now: float) -> LedgerState:
        ledger_id = self._factory.allocate_ledger_id()
        state = LedgerState(self, ledger_id, self._directory, now)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            state.fd = os.open(state.path, flags, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create ledger file {state.path}: {exc}") from exc
        state.header_pending = True
        state.new_file = True
        self._ids.append(ledger_id)
        self._states[ledger_id] = state
        self._cur = state
        return state

    def _rollover(self, now: float) -> LedgerState:
        old = self._cur
        state = self._create_ledger(now)
        old.sealed = True
        self._factory.maybe_release(old)
        return state

    def maybe_rollover(self) -> bool:
        """Apply the rollover rule now (for a periodic timer); True if a new ledger was started."""
        if self._fenced is not None or self._closed:
            return False
        state = self._cur
        n = state.entries
        if not n:
            return False
        now = self._clock()
        age = now - state.created_at
        if age >= self._max_roll or (
            (n >= self._max_entries or state.end >= self._max_size) and age >= self._min_roll
        ):
            self._rollover(now)
            return True
        return False

    def roll_over(self) -> bool:
        """Start a new ledger now if the current one has entries (truncating a topic seals
        its data so that it can be deleted); True if a new ledger was started."""
        if self._fenced is not None or self._closed or not self._cur.entries:
            return False
        self._rollover(self._clock())
        return True

    @property
    def fenced(self) -> bool:
        """True after a failed commit: appends are refused until the ledger is reopened."""
        return self._fenced is not None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` (or the factory's delete) was called."""
        return self._closed

    @property
    def directory(self) -> Path:
        """The directory holding this managed ledger's files (deleted with it)."""
        return self._directory

    def fence(self, exc: BaseException) -> None:
        """Refuse further appends and drop buffered ones (called when a commit failed)."""
        if self._fenced is None:
            self._fenced = exc
        for state in self._states.values():
            if state.pending:
                state.pending = []
                state.pending_offset = state.end
                state.pending_first = state.entries
            self._factory.maybe_release(state)

    def busy(self) -> bool:
        """True while bytes of this instance are buffered or being written."""
        return any(s.pending or s.inflight for s in self._states.values())

    def close(self) -> None:
        """Stop accepting appends; buffered appends are still committed by the next commit."""
        if self._closed:
            return
        self._closed = True
        for cursor in self._cursors.values():
            cursor.close()
        for state in self._states.values():
            self._factory.forget_state(state)
            self._factory.maybe_release(state)
        self._factory.ledger_closed(self)

    def drop(self) -> None:
        """Forget everything in memory and discard buffered appends (the factory deletes files)."""
        self._closed = True
        if self._fenced is None:
            self._fenced = StorageError(f"managed ledger {self.name} was deleted")
        for state in self._states.values():
            state.dropped = True
            state.pending = []
            self._factory.forget_state(state)
            self._factory.maybe_release(state)
        self._cursors.clear()

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes) -> Position:
        """Buffer ``data`` as the next entry and return its position.

        The entry becomes readable (and durable) when the commit that takes it finishes.
        """
        if self._fenced is not None or self._closed:
            self._refuse()
        state = self._cur
        n = state.entries
        if n:
            now = self._clock()
            age = now - state.created_at
            if age >= self._max_roll or (
                (n >= self._max_entries or state.end >= self._max_size) and age >= self._min_roll
            ):
                state = self._rollover(now)
                n = 0
        state.entries = n + 1
        state.offsets.append(state.end)
        state.end += LEDGER_RECORD_HEADER_SIZE + len(data)  # a new ledger: the current format
        pending = state.pending
        if not pending:
            self._dirty[state] = None
        pending.append(data)
        self._cache.add(state, data)
        return Position(state.ledger_id, n)

    def _refuse(self) -> None:
        if self._fenced is not None:
            raise LedgerFencedError(f"managed ledger {self.name} is fenced: {self._fenced!r}")
        raise StorageError(f"managed ledger {self.name} is closed")

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

    def read_entries(
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
                    assert data is not None
                    if budget is not None:
                        if out and len(data) > budget:
                            return 0
                        budget -= len(data)
                    out.append(Entry(Position(lid, eid), data))
                    eid += 1
                continue
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
        j = eid
        stop_after = False
        left = budget
        while j <= run_end:
            size = state.record_end(j) - offsets[j] - header
            if left is not None:
                if (out or j > eid) and size > left:
                    stop_after = True
                    break
                left -= size
            j += 1
            if state.record_end(j - 1) - start_offset >= _READ_CHUNK:
                break
        if j == eid:
            return eid, left, True
        length = state.record_end(j - 1) - start_offset
        fd = self._factory.read_fd(state)
        try:
            buf = os.pread(fd, length, start_offset)
        except OSError as exc:
            raise StorageError(
                f"cannot read ledger {state.ledger_id} of {self.name}: {exc}"
            ) from exc
        starts = [offsets[k] - start_offset for k in range(eid, j)]
        first_id = eid if state.version >= 2 else None
        for k, record in enumerate(parse_records(buf, starts, length, first_id)):
            if record is None:
                self._damaged(state, eid + k)
            else:
                out.append(Entry(Position(state.ledger_id, eid + k), record))
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

    def _skip_damaged(self, positions: list[Position]) -> None:
        # As Pulsar does when it skips non-recoverable data: the lost entries are acknowledged
        # on every durable cursor, so backlogs and trimming are not stuck behind them.
        for cursor in list(self._cursors.values()):
            cursor.delete(positions)

    def read_entry(self, position: tuple[int, int]) -> Entry | None:
        """The visible entry at exactly ``position``, or None."""
        ledger_id, entry_id = position
        state = self._states.get(ledger_id)
        if state is None or entry_id < 0 or position > self._lc or entry_id >= state.confirmed:
            return None
        out: list[Entry] = []
        self._read_ledger(state, entry_id, entry_id, 1, out, None)
        return out[0] if out else None

    def find_first(self, predicate: Callable[[Entry], bool]) -> Position | None:
        """Binary search for the first visible entry whose ``predicate`` is true.

        The predicate must be monotone over the log (false...false, true...true).
        """
        ids: list[int] = []
        cumulative: list[int] = []
        total = 0
        lc_lid, lc_eid = self._lc
        for ledger_id in self._ids:
            if ledger_id > lc_lid:
                break
            n = self._states[ledger_id].confirmed
            if ledger_id == lc_lid:
                n = min(n, lc_eid + 1)
            if n > 0:
                ids.append(ledger_id)
                total += n
                cumulative.append(total)
        lo, hi = 0, total
        while lo < hi:
            mid = (lo + hi) // 2
            k = bisect_right(cumulative, mid)
            entry_id = mid - (cumulative[k - 1] if k else 0)
            entry = self.read_entry((ids[k], entry_id))
            if entry is not None and predicate(entry):
                hi = mid
            else:
                lo = mid + 1
        if lo >= total:
            return None
        k = bisect_right(cumulative, lo)
        return Position(ids[k], lo - (cumulative[k - 1] if k else 0))

    # ------------------------------------------------------------------ cursors

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors, by name (read-only view)."""
        return MappingProxyType(self._cursors)

    def open_cursor(self, name: str, initial_position: InitialPosition = "latest") -> ManagedCursor:
        """Open (or recover) the durable cursor ``name``.

        A new cursor starts after :attr:`last_confirmed` (``"latest"``) or at the first stored
        entry (``"earliest"``).
        """
        cursor = self._cursors.get(name)
        if cursor is not None:
            return cursor
        if self._closed:
            raise StorageError(f"managed ledger {self.name} is closed")
        if initial_position == "earliest":
            md = self.position_before_first()
        elif initial_position == "latest":
            md = self._lc
        else:
            raise ValueError(f"unknown initial position {initial_position!r}")
        cursor = ManagedCursor(self, name, True, md)
        self._cursors[name] = cursor
        self.cursor_changed(cursor)
        return cursor

    def new_non_durable_cursor(
        self, start: tuple[int, int], name: str = "", inclusive: bool = True
    ) -> ManagedCursor:
        """A cursor kept in memory only (it does not hold back trimming).

        ``start`` may be :data:`EARLIEST`, :data:`LATEST` (or anything past the end) or a
        position; with ``inclusive`` the entry at ``start`` is the first one read.
        """
        lc = self._lc
        p = self.normalize(start)
        if p > self.next_position(lc):
            md = lc
        elif inclusive or p != start:
            md = Position(p.ledger_id, p.entry_id - 1)
        else:
            md = Position(start[0], start[1])
        return ManagedCursor(self, name, False, md)

    def delete_cursor(self, name: str) -> None:
        """Delete the durable cursor ``name`` (its stored state goes with the next snapshot)."""
        cursor = self._cursors.pop(name, None)
        if cursor is not None:
            cursor.close()
            # until its deletion is stored, a crash would bring it back: it still holds trimming
            self._deleting.append(cursor)
        self._factory.cursor_dirty[self.cursor_key(name)] = None

    def cursor_key(self, name: str) -> str:
        """Metadata key of the durable cursor ``name``."""
        return f"{self._cursor_prefix}/{quote(name, safe='')}"

    def cursor_changed(self, cursor: ManagedCursor) -> None:
        """Record that a durable cursor's state must be persisted by the next snapshot."""
        if self._cursors.get(cursor.name) is cursor:
            self._factory.cursor_dirty[cursor.key] = cursor

    @property
    def cursor_prefix(self) -> str:
        """Metadata key under which the durable cursors are stored."""
        return self._cursor_prefix

    # ------------------------------------------------------------------ trimming and stats

    def trim(
        self,
        retention: RetentionLimits | None = None,
        hold: tuple[int, int] | None = None,
        now: float | None = None,
    ) -> int:
        """Delete sealed ledgers consumed by every durable cursor; returns how many were deleted.

        A ledger is consumed when all its entries lie at or before every durable cursor's
        mark-delete position, as last stored (so that no cursor restored after a crash needs
        it), and at or before ``hold`` (with neither, every sealed ledger is consumed). The
        current ledger is never deleted. ``retention`` keeps consumed ledgers (none when
        None): the oldest goes first, once closed ``retention.seconds`` ago or while the
        ledgers kept exceed ``retention.size_bytes``; the first one kept stops the trim.
        """
        self._deleting = [c for c in self._deleting if self._factory.is_unsaved(c.key)]
        marks = [c.trim_horizon for c in (*self._cursors.values(), *self._deleting)]
        if hold is not None:
            marks.append(Position(hold[0], hold[1]))
        horizon = min(marks) if marks else None
        if retention is not None and retention.seconds < 0 and retention.size_bytes < 0:
            return 0  # infinite retention
        if now is None:
            now = self._clock()
        total = self.total_size
        deleted = 0
        doomed: list[Path] = []
        while len(self._ids) > 1:
            state = self._states[self._ids[0]]
            if state is self._cur or not state.sealed or state.inflight or state.pending:
                break
            if state.confirmed != state.entries:
                break
            if horizon is not None and Position(state.ledger_id, state.entries - 1) > horizon:
                break
            size = state.confirmed_end - HEADER_SIZE
            if retention is not None:
                # a ledger is closed when the next one is created
                closed_at = self._states[self._ids[1]].created_at
                expired = retention.seconds >= 0 and now - closed_at >= retention.seconds
                over_size = retention.size_bytes >= 0 and total > retention.size_bytes
                if not (expired or over_size):
                    break
            total -= size
            state.dropped = True
            self._factory.forget_state(state)
            self._factory.maybe_release(state)
            doomed += [
                self._directory / f"{state.ledger_id}{suffix}" for suffix in (".log", ".idx")
            ]
            del self._states[state.ledger_id]
            self._ids.pop(0)
            deleted += 1
        if deleted:
            self._factory.queue_deletion(self._directory, doomed)
            self.refresh_last_confirmed()
        return deleted

    @staticmethod
    def _info(state: LedgerState) -> LedgerInfo:
        return LedgerInfo(
            state.ledger_id, state.confirmed, state.confirmed_end - HEADER_SIZE, state.created_at
        )

    def ledgers(self) -> list[LedgerInfo]:
        """Visible entries, bytes and creation time of every stored ledger."""
        return [self._info(self._states[lid]) for lid in self._ids]

    @property
    def number_of_entries(self) -> int:
        """Visible entries over all stored ledgers."""
        return sum(s.confirmed for s in self._states.values())

    @property
    def total_size(self) -> int:
        """Bytes of the visible records (with their 8-byte framing) over all stored ledgers."""
        return sum(s.confirmed_end - HEADER_SIZE for s in self._states.values())

    def estimated_size_after(self, position: tuple[int, int]) -> int:
        """Estimated bytes of the visible entries after ``position`` (Pulsar's estimated
        backlog size): whole ledgers after it, plus the part of its own ledger past it at
        that ledger's average entry size. A position in a deleted ledger counts everything."""
        ledger_id, entry_id = position
        total = 0
        for lid in self._ids[bisect_left(self._ids, ledger_id) :]:
            state = self._states[lid]
            size = state.confirmed_end - HEADER_SIZE
            entries = state.confirmed
            if lid == ledger_id and entry_id >= 0 and entries:
                if entry_id + 1 >= entries:
                    size = 0
                else:
                    size -= (entry_id + 1) * (size // entries)
            total += size
        return total

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, last_confirmed={self._lc})"
