"""The ManagedLedger and ManagedCursor interfaces: what the broker may rely on from a backend.

A backend (today the file-based :class:`~starquake.storage.ledger.FileManagedLedger`; later a
replicated ledger) implements :class:`ManagedLedger`; :class:`ManagedCursor` is the acknowledgment
state of one subscription on it. The broker types its ledgers and cursors with these protocols.

Contract every implementation keeps:

Ordering
    An append gets its :class:`Position` at once, synchronously, in call order: positions of one
    managed ledger strictly increase, ``(ledger_id, entry_id)`` compared as a tuple. A position
    is never reused and an entry never moves: a later read of a position returns the bytes
    appended there, or nothing once the ledger holding it was trimmed (or the entry was found
    damaged and skipped). Entry ids of a ledger start at 0; a new ledger has a larger id.

Durability and visibility
    An appended entry is invisible (reads, cursors, :attr:`ManagedLedger.last_confirmed`) until
    it is durable: written and fsync'd to the local disk (or, for a replicated backend,
    acknowledged by its quorum). Entries become visible strictly in position order, so
    ``last_confirmed`` only moves forward, and an entry at or before it survives a crash of the
    process (of the machine too, when syncing is on). Completion of an append means exactly
    this: ``last_confirmed >= position``. With the file backend the broker's group commit
    (``factory.take_pending()`` then ``execute``/``finish``) makes entries durable and reports
    each ledger's new ``last_confirmed``.

Fencing and ownership
    One writer: a managed ledger is owned by one process and one open instance at a time (the
    data directory lock, or the replicated backend's leadership); only the owner appends. When
    making appends durable fails, the managed ledger is *fenced*: its appends not yet durable
    never become visible (their positions are never reused for other data either),
    :attr:`ManagedLedger.fenced` is true and :meth:`ManagedLedger.append` raises
    :class:`LedgerFencedError` until the ledger is reopened, which recovers it from what is
    durable. :meth:`ManagedLedger.close` refuses further appends but lets appends already made
    become durable (appends then raise :class:`StorageError`); deleting a managed ledger
    discards the appends that are not durable yet (they never become visible) and fences it.

Errors
    Every failure is a :class:`StorageError`: :class:`LedgerFencedError` (a failed commit, see
    above), :class:`LedgerBusyError` (reopening while a previous instance still has writes in
    flight; retry), :class:`InvalidPositionError` (acknowledging an entry that does not exist).
    Plain :class:`StorageError` covers I/O failures, damaged stored data and misuse (appending
    to a closed ledger, mark-deleting past ``last_confirmed``).

Reads
    Every read of entries is awaitable (a replicated backend fetches them over the network).
    The file backend's reads never suspend: their coroutine returns at the first step, so a
    caller driving it with :func:`~starquake.storage.read_now.read_at_hand` (or a dispatcher's
    eager pass) pays no scheduling. State may change while a read waits; the cursor's
    :meth:`ManagedCursor.read_entries` keeps itself consistent (see there), other callers
    check what they need again after the await. Everything else (positions, counts,
    acknowledgments, appends) stays synchronous: it is kept in memory by every backend.

Trimming and retention
    Data is deleted whole ledgers at a time, oldest first, by :meth:`ManagedLedger.trim` only: a
    ledger goes once it is sealed (no longer the one receiving appends), every entry in it is at
    or before every durable cursor's mark-delete position *as last stored* (a cursor restored
    after a crash never needs a deleted entry) and the retention limits no longer keep it.
    Non-durable cursors never hold data back. Positions in trimmed ledgers count as consumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .position import Entry, InitialPosition, LedgerInfo, Position, RetentionLimits

__all__ = ["ManagedCursor", "ManagedLedger"]


class ManagedCursor(Protocol):
    """Read position and acknowledgment state of one subscription (or reader) on a ledger.

    A durable cursor's state is stored (periodically; acknowledgments of the last interval
    before a crash may be lost, so delivery is at-least-once) and holds back trimming; a
    non-durable cursor lives in memory only. The read position is never stored: after recovery
    reading restarts right after the mark-delete position.
    """

    @property
    def name(self) -> str:
        """The subscription's name (empty for an anonymous non-durable cursor)."""
        ...

    @property
    def durable(self) -> bool:
        """True when the cursor's state is stored and holds back trimming."""
        ...

    @property
    def ledger(self) -> ManagedLedger:
        """The managed ledger this cursor reads."""
        ...

    @property
    def mark_delete_position(self) -> Position:
        """Every entry at or before this position is acknowledged."""
        ...

    @property
    def read_position(self) -> Position:
        """Next position to read."""
        ...

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        ...

    async def read_entries(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Up to ``max_entries`` unacknowledged visible entries from the read position, in
        order; advances the read position past them (see Reads). With ``max_bytes`` the read
        stops once its entries' data reach that many bytes (at least one entry is returned;
        the last may go past the limit).

        One read at a time per cursor (:class:`StorageError` otherwise). A read during which
        the read position was moved (:meth:`rewind`, :meth:`seek`, :meth:`reset`) or the
        cursor closed returns no entries and leaves the position as moved; entries
        acknowledged while it waited are left out."""
        ...

    def has_more_entries(self) -> bool:
        """True if an unacknowledged visible entry is at or after the read position."""
        ...

    def rewind(self) -> None:
        """Read again from the first position after the mark-delete position."""
        ...

    def seek(self, position: tuple[int, int]) -> None:
        """Set the read position (never at or before the mark-delete position)."""
        ...

    def reset(self, position: tuple[int, int]) -> None:
        """Acknowledge everything before ``position`` and nothing from it on (resetCursor)."""
        ...

    def mark_delete(self, position: tuple[int, int]) -> bool:
        """Cumulative acknowledgment up to ``position``; False if it is not past the current
        mark-delete position. Raises :class:`StorageError` past ``last_confirmed``."""
        ...

    def delete(self, positions: Iterable[tuple[int, int]]) -> list[Position]:
        """Individual acknowledgments; returns the positions refused (no such entry yet)."""
        ...

    def ack_batch_indexes(
        self, position: tuple[int, int], ack_set: Sequence[int], batch_size: int
    ) -> bool:
        """Partial acknowledgment of a batch entry; True once all its indexes are acked.
        ``batch_size`` 0: not known (the ack set is taken as it is). Raises
        :class:`InvalidPositionError` for an entry that does not exist."""
        ...

    def get_batch_ack_set(self, position: tuple[int, int]) -> list[int] | None:
        """Unacknowledged-bits words (signed int64) of a partially acked batch, or None."""
        ...

    def is_acked(self, position: tuple[int, int]) -> bool:
        """True if ``position`` is acknowledged (cumulatively or individually)."""
        ...

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        """Individually acknowledged ranges, open-closed ``(a, b]``."""
        ...

    def backlog(self) -> int:
        """Unacknowledged visible entries after the mark-delete position."""
        ...

    def close(self) -> None:
        """Stop using the cursor (a durable cursor's state stays stored)."""
        ...

    @property
    def is_active(self) -> bool:
        """True while a consumer reads through the cursor (set by its subscription)."""
        ...

    def set_active(self) -> None:
        """A consumer reads through the cursor: its ledger caches new entries for it."""
        ...

    def set_inactive(self) -> None:
        """No consumer reads through the cursor any more."""
        ...


class ManagedLedger(Protocol):
    """A named, append-only log of opaque entries split into ledgers (see the module contract).

    Every method runs on the broker's event loop and none waits for data to become durable:
    that happens elsewhere (the file backend's group commit, in a worker thread). Reads of
    entries are coroutines (see Reads); the file backend's read its cache or files without
    suspending, and a rollover creates a file.
    """

    @property
    def name(self) -> str:
        """The managed ledger's name (the persistent topic's)."""
        ...

    @property
    def fenced(self) -> bool:
        """True after making appends durable failed; appends refused until reopened."""
        ...

    @property
    def closed(self) -> bool:
        """True once closed or deleted."""
        ...

    @property
    def directory(self) -> Path:
        """A local directory of this managed ledger, deleted with it: the broker keeps the
        topic's compacted ledgers there. A replicated backend provides one per topic too."""
        ...

    def close(self) -> None:
        """Refuse further appends; appends already made still become durable."""
        ...

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes) -> Position:
        """Take ``data`` as the next entry and return its position (see Ordering); it becomes
        visible once durable. Raises :class:`LedgerFencedError` when fenced (or deleted) and
        :class:`StorageError` when closed."""
        ...

    def append_many(self, datas: Sequence[bytes]) -> list[Position]:
        """:meth:`append` each of ``datas``, in order, in one call (the publish path hands over
        the SENDs of one read together); their positions. All are taken, or none (the error
        is raised)."""
        ...

    def maybe_rollover(self) -> bool:
        """Apply the ledger rollover rule now (a timer calls it); True if a new ledger began."""
        ...

    def roll_over(self) -> bool:
        """Start a new ledger now if the current one has entries; True if one was started."""
        ...

    # ------------------------------------------------------------------ positions

    @property
    def last_confirmed(self) -> Position:
        """Last durable, visible entry; ``(current_ledger_id, -1)`` when there is none."""
        ...

    @property
    def current_ledger_id(self) -> int:
        """Id of the ledger that receives appends."""
        ...

    def normalize(self, position: tuple[int, int]) -> Position:
        """The first position ``>= position`` that holds (or will hold) an entry."""
        ...

    def next_position(self, position: tuple[int, int]) -> Position:
        """The position right after ``position`` (may be the next ledger's entry 0)."""
        ...

    def entry_exists(self, position: tuple[int, int]) -> bool:
        """True if ``position`` names a visible entry that is still stored."""
        ...

    def is_trimmed(self, position: tuple[int, int]) -> bool:
        """True if ``position`` lies in a ledger deleted by trimming."""
        ...

    def first_position(self) -> Position | None:
        """The first stored visible entry, or None."""
        ...

    def position_before_first(self) -> Position:
        """A position just before the first stored entry."""
        ...

    def count_entries(self, after: tuple[int, int], up_to: tuple[int, int]) -> int:
        """Number of visible entries in ``(after, up_to]``."""
        ...

    # ------------------------------------------------------------------ reading

    async def read_entries(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        """Visible entries at or after ``start``, in order, at most ``max_entries`` and (but
        for the first) within ``max_bytes`` of data (Pulsar's asyncReadEntries)."""
        ...

    async def read_entry(self, position: tuple[int, int]) -> Entry | None:
        """The visible entry at exactly ``position``, or None."""
        ...

    async def replay_entries(self, positions: Sequence[tuple[int, int]]) -> list[Entry]:
        """The visible entries at these positions, in the order given, leaving out those not
        stored (Pulsar's asyncReplayEntries): one read for a dispatcher's redeliveries."""
        ...

    async def find_first(self, predicate: Callable[[Entry], bool]) -> Position | None:
        """The first visible entry whose (monotone) ``predicate`` is true, or None."""
        ...

    # ------------------------------------------------------------------ cursors

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors, by name (read-only view)."""
        ...

    def has_active_cursors(self) -> bool:
        """True while a cursor (durable or not) is active: only then are appends cached, as
        Pulsar caches new entries only for the cursors that will read them soon."""
        ...

    def open_cursor(self, name: str, initial_position: InitialPosition = "latest") -> ManagedCursor:
        """Open (or recover) the durable cursor ``name``; a new one starts after
        ``last_confirmed`` (``"latest"``) or before the first stored entry (``"earliest"``)."""
        ...

    def new_non_durable_cursor(
        self, start: tuple[int, int], name: str = "", inclusive: bool = True
    ) -> ManagedCursor:
        """A cursor kept in memory only, reading from ``start``."""
        ...

    def delete_cursor(self, name: str) -> None:
        """Delete the durable cursor ``name`` (it holds trimming until its deletion is stored)."""
        ...

    # ------------------------------------------------------------------ trimming and stats

    def trim(
        self,
        retention: RetentionLimits | None = None,
        hold: tuple[int, int] | None = None,
        now: float | None = None,
    ) -> int:
        """Delete consumed sealed ledgers beyond ``retention`` and not after ``hold``; returns
        how many were deleted (see Trimming and retention)."""
        ...

    def ledgers(self) -> list[LedgerInfo]:
        """Visible entries, bytes and creation time of every stored ledger."""
        ...

    @property
    def number_of_entries(self) -> int:
        """Visible entries over all stored ledgers."""
        ...

    @property
    def total_size(self) -> int:
        """Bytes of the visible entries (with their framing) over all stored ledgers."""
        ...

    def estimated_size_after(self, position: tuple[int, int]) -> int:
        """Estimated bytes of the visible entries after ``position`` (the backlog size)."""
        ...
