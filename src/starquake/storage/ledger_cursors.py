"""The cursor role of a managed ledger, shared by its backends: opening, creating and deleting
cursors and noting which durable cursors' states must be stored.

A backend provides :meth:`cursor_key` (where a cursor's state is stored) and
:meth:`_store_later` (note a state its next store writes: a cursor, or None for a deletion).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

from .cursor import CursorLedger, ManagedCursorImpl, decode_cursor_state
from .ledger_trim import LedgerTrim
from .position import InitialPosition, Position, StorageError
from .rangeset import PositionRangeSet

__all__ = ["LedgerCursors"]

log = logging.getLogger("starquake.storage.ledger")


class LedgerCursors(LedgerTrim):
    """Durable and non-durable cursors over the ledgers."""

    _closed: bool
    _active_count = 0
    """Active cursors (an int default: each ledger's own count starts at its first change)."""

    def _store_later(self, key: str, cursor: ManagedCursorImpl | None) -> None:
        """Have the backend's next store write ``cursor``'s state under ``key`` (None: delete)."""
        raise NotImplementedError

    def cursor_key(self, name: str) -> str:
        """Metadata key of the durable cursor ``name``."""
        raise NotImplementedError

    def _skip_damaged(self, positions: list[Position]) -> None:
        # Entries lost to damage (a gap the records skip) are acknowledged on every durable
        # cursor, so backlogs and trimming are not stuck behind them.
        for cursor in list(self._cursors.values()):
            cursor.delete(positions)

    def restored_cursor(
        self, name: str, raw: bytes | None, damage: StorageError | None = None
    ) -> ManagedCursorImpl:
        """The durable cursor ``name`` rebuilt from its stored state ``raw``; a state missing
        or damaged (``damage``: how) restarts it at the first stored entry, logged."""
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
        cursor = ManagedCursorImpl(cast(CursorLedger, self), name, True, md)
        cursor.restore(acked, batches)
        return cursor

    @property
    def cursors(self) -> Mapping[str, ManagedCursorImpl]:
        """The durable cursors, by name (read-only view)."""
        return MappingProxyType(self._cursors)

    def open_cursor(
        self, name: str, initial_position: InitialPosition = "latest"
    ) -> ManagedCursorImpl:
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
        cursor = ManagedCursorImpl(cast(CursorLedger, self), name, True, md)
        self._cursors[name] = cursor
        self.cursor_changed(cursor)
        return cursor

    def new_non_durable_cursor(
        self, start: tuple[int, int], name: str = "", inclusive: bool = True
    ) -> ManagedCursorImpl:
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
        return ManagedCursorImpl(cast(CursorLedger, self), name, False, md)

    def delete_cursor(self, name: str) -> None:
        """Delete the durable cursor ``name`` (its stored state goes with the next store)."""
        cursor = self._cursors.pop(name, None)
        if cursor is not None:
            cursor.close()
            # until its deletion is stored, a crash would bring it back: it still holds trimming
            self._deleting.append(cursor)
        self._store_later(self.cursor_key(name), None)

    def active_cursors_changed(self, delta: int) -> None:
        """One cursor more (``delta`` 1) or less (-1) is active."""
        self._active_count += delta

    def has_active_cursors(self) -> bool:
        """True while a cursor (durable or not) is active: only then are appends cached, as
        Pulsar caches new entries only for the cursors that will read them soon."""
        return self._active_count > 0

    def cursor_changed(self, cursor: ManagedCursorImpl) -> None:
        """Record that a durable cursor's state must be stored by the next store."""
        if self._cursors.get(cursor.name) is cursor:
            self._store_later(cursor.key, cursor)
