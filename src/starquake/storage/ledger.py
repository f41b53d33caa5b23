"""FileManagedLedger: an append-only log of opaque entries split into ledgers (one file each).

This module holds the lifecycle (recovery, rollover, fencing, closing), the append path and the
cursors; positions and reads are in :mod:`.ledger_reads`, trimming and statistics in
:mod:`.ledger_trim`.

Threading: every method runs on the broker's event loop; only :class:`PendingCommit.execute` runs in
a worker thread. ``append`` buffers in memory (no syscall unless it rolls over to a new ledger);
entries become readable when the group commit that wrote them finishes.

Rollover (Pulsar's rules), checked on each append: the current ledger is sealed and a new ledger
(new global id, entry ids from 0) is created when it has at least one entry and either its age
reached ``max_rollover_seconds``, or it is full (entries or bytes) and its age reached
``min_rollover_seconds``. :meth:`FileManagedLedger.maybe_rollover` applies the same rule from a
timer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, unquote

from .cursor import ManagedCursorImpl
from .host import LedgerHost
from .ledger_cursors import LedgerCursors
from .position import LedgerFencedError, Position, StorageError
from .recovery import recover_ledger_states
from .segment import HEADER_SIZE, LEDGER_RECORD_HEADER_SIZE
from .state import LedgerState

__all__ = ["FileManagedLedger"]

log = logging.getLogger(__name__)


_new_position = tuple.__new__
"""Makes a Position from a tuple of its fields (the NamedTuple's own constructor is a Python
function: several times slower, once per append)."""


class FileManagedLedger(LedgerCursors):
    """A named, append-only log of entries in local files; the file backend of
    :class:`~starquake.storage.api.ManagedLedger`. Create it with
    :meth:`ManagedLedgerFactory.open`."""

    def __init__(self, factory: LedgerHost, name: str, directory: Path) -> None:
        self.name = name
        self._host = factory
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
        self._cursors: dict[str, ManagedCursorImpl] = {}
        self._deleting: list[ManagedCursorImpl] = []
        self._cursor_prefix = "/managed-ledgers/" + quote(name, safe="")
        self._reusable_id: int | None = None

    # ------------------------------------------------------------------ lifecycle

    def scan(self, cuts: dict[Path, int] | None = None) -> list[LedgerState]:
        """Read (and repair) this ledger's files; touches nothing shared, so may run in a thread.

        ``cuts`` gives files to cut first (bytes a failed commit left past the last entry).

        A ledger whose every write failed (a full disk fails each retry: the commit that
        created it failed, nothing of it was ever acknowledged) and that is newer than every
        ledger kept becomes the new current ledger again, under the same id, rather than a new
        id per retry. Any other ledger id is never used twice.
        """
        removed: list[int] = []
        states = recover_ledger_states(self, self._directory, cuts, removed)
        newest = states[-1].ledger_id if states else -1
        never_written = {path.name for path, size in (cuts or {}).items() if size <= HEADER_SIZE}
        self._reusable_id = max(
            (i for i in removed if i > newest and f"{i}.log" in never_written), default=None
        )
        return states

    def recover(self, states: list[LedgerState] | None = None) -> None:
        """Load the ledgers and durable cursors found on disk and open a new ledger for writing.

        ``states`` is the result of :meth:`scan` when the scan already ran (off the event loop).
        """
        for state in self.scan() if states is None else states:
            self._ids.append(state.ledger_id)
            self._states[state.ledger_id] = state
            self._host.ensure_ledger_ids_above(state.ledger_id)
            if not state.index_done and not state.damaged:
                # a ledger with lost entries is scanned at every start (which finds them again)
                self._host.queue_index(state)
        # The ledger that receives appends exists before any cursor is restored: restoring a
        # cursor asks where the entry after its mark-delete position lives, which may be in it.
        self._create_ledger(self._clock(), self._reusable_id)
        self._reusable_id = None
        self.refresh_last_confirmed()
        factory = self._host
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
        cursor = self.restored_cursor(name, raw, damage)
        self._cursors[name] = cursor
        if cursor.key in self._host.cursor_dirty:
            self._host.cursor_dirty[cursor.key] = cursor

    def _create_ledger(self, now: float, reuse: int | None = None) -> LedgerState:
        """A new current ledger: id ``reuse`` (an emptied ledger of this one) or a new id."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        ledger_id = reuse if reuse is not None else self._host.allocate_ledger_id()
        state = LedgerState(self, ledger_id, self._directory, now)
        try:
            # Created now, opened for writing by the commit of its first appends (within
            # max_open_write_files: a burst of rollovers must not open a file each at once).
            os.close(os.open(state.path, flags, 0o644))
        except FileExistsError as exc:
            if reuse is not None:
                return self._create_ledger(now)
            raise StorageError(f"cannot create ledger file {state.path}: {exc}") from exc
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
        self._host.maybe_release(old)
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
            self._host.maybe_release(state)

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
            self._host.forget_state(state)
            self._host.maybe_release(state)
        self._host.ledger_closed(self)

    def drop(self) -> None:
        """Forget everything in memory and discard buffered appends (the factory deletes files)."""
        self._closed = True
        if self._fenced is None:
            self._fenced = StorageError(f"managed ledger {self.name} was deleted")
        for state in self._states.values():
            state.dropped = True
            state.pending = []
            self._host.forget_state(state)
            self._host.maybe_release(state)
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
        if self._active_count:
            self._cache.add(state, data)
        else:
            self._cache.skip(state)  # no consumer would read it from the cache soon
        return _new_position(Position, (state.ledger_id, n))  # Position(...) without its __new__

    def append_many(self, datas: Sequence[bytes]) -> list[Position]:
        """:meth:`append` each of ``datas``, in order, in one call (the SENDs of one read);
        their positions. The rollover rule is applied before each entry, at one time."""
        if self._fenced is not None or self._closed:
            self._refuse()
        positions: list[Position] = []
        add = positions.append
        now = self._clock()
        cache = self._cache if self._active_count else None
        state = self._cur
        n, skipped = state.entries, 0  # skipped: entries not cached (no cursor reads them soon)
        offsets, end, pending = state.offsets, state.end, state.pending
        rolls, ledger_id = self._rolls_at(state, now), state.ledger_id
        for data in datas:
            if n and (rolls == 1 or (rolls and (n >= self._max_entries or end >= self._max_size))):
                self._end_run(state, n, end, skipped)
                state = self._rollover(now)
                n, skipped, offsets, end, pending = 0, 0, state.offsets, state.end, state.pending
                rolls, ledger_id = self._rolls_at(state, now), state.ledger_id
            if not pending:
                self._dirty[state] = None
            offsets.append(end)
            end += LEDGER_RECORD_HEADER_SIZE + len(data)  # a new ledger: the current format
            pending.append(data)
            if cache is None:
                skipped += 1
            else:
                cache.add(state, data)
            add(_new_position(Position, (ledger_id, n)))
            n += 1
        self._end_run(state, n, end, skipped)
        return positions

    def _end_run(self, state: LedgerState, entries: int, end: int, skipped: int) -> None:
        """What :meth:`append_many` kept in locals goes back to ``state``."""
        state.entries, state.end = entries, end
        if skipped:
            self._cache.skip(state, skipped)

    def _rolls_at(self, state: LedgerState, now: float) -> int:
        """When ``state`` rolls over at ``now``: 1 before any further entry (its time is up),
        2 once it is full, 0 not in this call (it is too young)."""
        age = now - state.created_at
        if age >= self._max_roll:
            return 1
        return 2 if age >= self._min_roll else 0

    def _refuse(self) -> None:
        if self._fenced is not None:
            raise LedgerFencedError(f"managed ledger {self.name} is fenced: {self._fenced!r}")
        raise StorageError(f"managed ledger {self.name} is closed")

    # ------------------------------------------------------------------ cursors

    def _store_later(self, key: str, cursor: ManagedCursorImpl | None) -> None:
        self._host.cursor_dirty[key] = cursor

    def cursor_key(self, name: str) -> str:
        """Metadata key of the durable cursor ``name``."""
        return f"{self._cursor_prefix}/{quote(name, safe='')}"

    @property
    def cursor_prefix(self) -> str:
        """Metadata key under which the durable cursors are stored."""
        return self._cursor_prefix

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, last_confirmed={self._lc})"
