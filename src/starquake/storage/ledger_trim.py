"""Trimming, retention and statistics of a file-backed managed ledger (the trim role of
:class:`~starquake.storage.ledger.FileManagedLedger`).

Data goes whole ledgers at a time, oldest first: a sealed ledger is deleted once every durable
cursor's stored mark-delete position (and the broker's hold) is past it and the retention limits
no longer keep it. The files are unlinked by the next group commit, off the event loop.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path

from .cursor import ManagedCursorImpl
from .ledger_reads import LedgerReads
from .position import LedgerInfo, Position, RetentionLimits
from .segment import HEADER_SIZE
from .state import LedgerState

__all__ = ["LedgerTrim"]


class LedgerTrim(LedgerReads):
    """Trimming and statistics over the stored ledgers."""

    _clock: Callable[[], float]
    _cursors: dict[str, ManagedCursorImpl]
    _deleting: list[ManagedCursorImpl]

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
        self._deleting = [c for c in self._deleting if self._host.is_unsaved(c.key)]
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
            self._host.forget_state(state)
            self._host.maybe_release(state)
            doomed += [
                self._directory / f"{state.ledger_id}{suffix}" for suffix in (".log", ".idx")
            ]
            del self._states[state.ledger_id]
            self._ids.pop(0)
            deleted += 1
        if deleted:
            self._host.queue_deletion(self._directory, doomed)
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
