"""ManagedCursor: a subscription's position in a managed ledger and its acknowledgment state.

State: the mark-delete position (everything at or before it is acknowledged), the individually
acknowledged positions after it (a :class:`PositionRangeSet`) and, per batch entry partially
acknowledged, the batch ack set (a ``java.util.BitSet`` as 64-bit words, a set bit = still unacked).
When the acknowledged ranges reach the mark-delete position, it moves forward.

Durability: a durable cursor reports every change to its factory; the broker collects the
serialized states with :meth:`ManagedLedgerFactory.take_cursor_snapshots` and writes them to the
metadata store from a worker thread at a fixed interval (at most once per second). Acknowledgments
made within the last interval before a crash are lost, so those messages may be redelivered
(at-least-once). The read position is not persisted: after recovery a cursor reads from the first
position after its mark-delete position.

Serialized state (compact JSON)::

    {"md": [ledger, entry],                    # mark-delete position
     "r":  [ledger, first, last, ...],          # individually acked closed intervals, flattened
     "b":  [[ledger, entry, [word, ...]], ...]} # batch ack sets, unsigned 64-bit words
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .api import ManagedLedger
from .position import Entry, InvalidPositionError, Position, StorageError
from .rangeset import PositionRangeSet

__all__ = ["CursorLedger", "ManagedCursorImpl", "decode_cursor_state", "encode_cursor_state"]

_MASK64 = (1 << 64) - 1


def encode_cursor_state(
    mark_delete: Position, acked: PositionRangeSet, batches: dict[Position, list[int]]
) -> bytes:
    """Serialize a cursor's acknowledgment state."""
    ranges: list[int] = []
    for lid, first, last in acked.intervals():
        ranges += (lid, first, last)
    doc: dict[str, Any] = {"md": list(mark_delete), "r": ranges}
    if batches:
        doc["b"] = [[p[0], p[1], words] for p, words in batches.items()]
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_cursor_state(
    raw: bytes,
) -> tuple[Position, PositionRangeSet, dict[Position, list[int]]]:
    """Parse what :func:`encode_cursor_state` produced."""
    try:
        doc = json.loads(raw)
        md = Position(int(doc["md"][0]), int(doc["md"][1]))
        acked = PositionRangeSet()
        flat = doc.get("r", [])
        for i in range(0, len(flat) - 2, 3):
            acked.add_range(int(flat[i]), int(flat[i + 1]), int(flat[i + 2]))
        batches = {
            Position(int(lid), int(eid)): [int(w) & _MASK64 for w in words]
            for lid, eid, words in doc.get("b", [])
        }
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise StorageError(f"corrupt cursor state: {exc}") from exc
    return md, acked, batches


def _signed(word: int) -> int:
    return word - (1 << 64) if word >= 1 << 63 else word


class CursorLedger(ManagedLedger, Protocol):
    """A managed ledger as its cursors see it: the interface plus the durable-state hooks."""

    def cursor_key(self, name: str) -> str:
        """Metadata key of the durable cursor ``name``."""
        ...

    def cursor_changed(self, cursor: ManagedCursorImpl) -> None:
        """Record that a durable cursor's state must be persisted by the next snapshot."""
        ...

    def active_cursors_changed(self, delta: int) -> None:
        """One cursor more (``delta`` 1) or less (-1) is active."""
        ...

    def try_read_entries(
        self, start: tuple[int, int], max_entries: int, max_bytes: int | None = None
    ) -> list[Entry] | None:
        """What :meth:`ManagedLedger.read_entries` would return, if the ledger has it at hand
        (the file backend always: its reads never wait; a remote backend from its cache of
        recent entries); None when the read must wait (the cursor then awaits it)."""
        ...


class ManagedCursorImpl:
    """The :class:`~starquake.storage.api.ManagedCursor`, over any :class:`CursorLedger`.

    Create with :meth:`ManagedLedger.open_cursor` (durable) or
    :meth:`ManagedLedger.new_non_durable_cursor`. ``key`` is a durable cursor's metadata key.
    """

    def __init__(self, ledger: CursorLedger, name: str, durable: bool, mark_delete: Position):
        self.name = name
        self.durable = durable
        self._ml = ledger
        self._md = Position(mark_delete[0], mark_delete[1])
        self.stored_mark_delete = self._md
        """The mark-delete position of the last stored state (what a crash falls back to)."""
        self._acked = PositionRangeSet()
        self._batches: dict[Position, list[int]] = {}
        self._rp = ledger.next_position(self._md)
        self._closed = False
        self._reading = False
        self._moves = 0
        """Counts moves of the read position from outside a read (rewind, seek, reset)."""
        self._active = False
        self.key = ledger.cursor_key(name) if durable else ""

    def restore(self, acked: PositionRangeSet, batches: dict[Position, list[int]]) -> None:
        """Install recovered acknowledgment state (used by recovery)."""
        self._acked = acked
        self._batches = batches
        self._acked.remove_up_to(self._md)
        self._advance()
        self._rp = self._ml.next_position(self._md)
        self._moves += 1

    def serialize(self) -> bytes:
        """The cursor's persistent state as bytes (see the module docstring)."""
        return encode_cursor_state(self._md, self._acked, self._batches)

    @property
    def ledger(self) -> CursorLedger:
        """The managed ledger this cursor reads."""
        return self._ml

    @property
    def mark_delete_position(self) -> Position:
        """Every entry at or before this position is acknowledged."""
        return self._md

    @property
    def trim_horizon(self) -> Position:
        """How far this cursor lets its ledger be trimmed: entries after the stored mark-delete
        position may still be needed after a crash, so it holds at the lower of the two."""
        return min(self._md, self.stored_mark_delete)

    @property
    def read_position(self) -> Position:
        """Next position to read."""
        return self._rp

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def _changed(self) -> None:
        if self.durable:
            self._ml.cursor_changed(self)

    def _advance(self) -> None:
        """Move the mark-delete position over acked ranges that now touch it."""
        acked = self._acked
        ml = self._ml
        while acked:
            first = acked.first()
            assert first is not None
            lid, start, last = first
            if (lid, start) > ml.next_position(self._md):
                break
            if (lid, last) > self._md:
                self._md = Position(lid, last)
            acked.remove_up_to(self._md)
        if self._batches:
            md = self._md
            self._batches = {p: w for p, w in self._batches.items() if p > md}
        if self._rp <= self._md:
            self._rp = ml.next_position(self._md)

    def _skip_acked(self, position: Position) -> Position:
        ml = self._ml
        p = ml.normalize(position)
        if p <= self._md:
            p = ml.next_position(self._md)
        acked = self._acked
        while acked:
            found = acked.range_containing(p)
            if found is None:
                break
            p = ml.next_position((found[0], found[2]))
        return p

    # ------------------------------------------------------------------ reading

    async def read_entries(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Up to ``max_entries`` unacknowledged entries from the read position, and with
        ``max_bytes`` until their data reach that many bytes (at least one entry; the last may
        go past the limit).

        Stops at the ledger's last confirmed entry; advances the read position past what was
        returned (and past acknowledged entries skipped on the way). Entries the ledger has at
        hand (:meth:`CursorLedger.try_read_entries`) are taken without suspending; while a
        read of the others waits, the cursor may be moved or closed: the read then returns
        nothing and leaves the position where it was moved to; entries acknowledged meanwhile
        are left out.
        """
        if self._reading:
            raise StorageError(f"cursor {self.name!r} of {self._ml.name}: already reading")
        out: list[Entry] = []
        ml = self._ml
        lc = ml.last_confirmed
        moves = self._moves
        p = self._rp
        left = max_bytes
        while len(out) < max_entries:
            p = self._skip_acked(p)
            if p > lc:
                break
            want = max_entries - len(out)
            acked = self._acked
            nxt = acked.next_range_after(p) if acked else None
            if nxt is not None and nxt[0] == p[0]:
                want = min(want, nxt[1] - p[1])
            batch = ml.try_read_entries(p, want, left)
            if batch is None:  # the ledger must wait for them
                waited = await self._read_waiting(p, want, moves, left)
                if waited is None:
                    return []  # the cursor was moved or closed meanwhile
                lc = ml.last_confirmed
                batch = waited[0]
                if waited[1] and not batch:
                    continue  # all acknowledged while the read waited: skipped next turn
            elif batch and acked:
                for i, entry in enumerate(batch):
                    if entry.position in acked:
                        del batch[i:]
                        break
            if not batch:
                break
            out.extend(batch)
            p = ml.next_position(batch[-1].position)
            if left is not None:
                left -= sum([len(entry.data) for entry in batch])
                if left <= 0:
                    break
        if p <= self._md:
            p = ml.next_position(self._md)
        self._rp = p
        return out

    async def _read_waiting(
        self, p: Position, want: int, moves: int, max_bytes: int | None
    ) -> tuple[list[Entry], bool] | None:
        """The ledger's awaited read at ``p``: (entries still unacknowledged, whether any
        were read), or None if the cursor was moved or closed while it waited."""
        self._reading = True
        try:
            batch = await self._ml.read_entries(p, want, max_bytes)
        finally:
            self._reading = False
        if self._moves != moves or self._closed:
            return None
        if not batch:
            return batch, False
        return self._unacked_prefix(batch), True

    def _unacked_prefix(self, batch: list[Entry]) -> list[Entry]:
        """``batch`` without entries at or before the mark-delete position, cut before the
        first individually acknowledged one."""
        md = self._md
        if batch[0].position <= md:
            batch = [entry for entry in batch if entry.position > md]
        acked = self._acked
        if acked:
            for i, entry in enumerate(batch):
                if entry.position in acked:
                    return batch[:i]
        return batch

    def has_more_entries(self) -> bool:
        """True if an unacknowledged entry is available at or after the read position."""
        return self._skip_acked(self._rp) <= self._ml.last_confirmed

    def rewind(self) -> None:
        """Read again from the first position after the mark-delete position."""
        self._rp = self._ml.next_position(self._md)
        self._moves += 1

    def seek(self, position: tuple[int, int]) -> None:
        """Set the read position (acks unchanged; never at or before the mark-delete position)."""
        ml = self._ml
        p = ml.normalize(position)
        limit = ml.next_position(ml.last_confirmed)
        if p > limit:
            p = limit
        if p <= self._md:
            p = ml.next_position(self._md)
        self._rp = p
        self._moves += 1

    def reset(self, position: tuple[int, int]) -> None:
        """Pulsar's resetCursor: acknowledge everything before ``position``, nothing from it on.

        The mark-delete position becomes the one just before ``position``, individual and batch
        acks are cleared and reading restarts at ``position``.
        """
        ml = self._ml
        p = ml.normalize(position)
        limit = ml.next_position(ml.last_confirmed)
        if p > limit:
            p = limit
        self._md = Position(p.ledger_id, p.entry_id - 1)
        self._acked.clear()
        self._batches.clear()
        self._rp = p
        self._moves += 1
        self._changed()

    # ------------------------------------------------------------------ acknowledging

    def mark_delete(self, position: tuple[int, int]) -> bool:
        """Cumulative ack of everything up to ``position``; False if it is not past mark-delete."""
        if position <= self._md:
            return False
        if position > self._ml.last_confirmed:
            raise StorageError(
                f"cannot mark-delete {position[0]}:{position[1]} past the last confirmed entry "
                f"{self._ml.last_confirmed}"
            )
        self._md = Position(position[0], position[1])
        self._acked.remove_up_to(self._md)
        self._advance()
        self._changed()
        return True

    def delete(self, positions: Iterable[tuple[int, int]]) -> list[Position]:
        """Individual acks; the mark-delete position moves forward when the acks reach it.

        Returns the positions refused because they name no stored entry (not written yet, or
        past the end of their ledger): acknowledging them would skip messages not sent yet.
        Positions in deleted ledgers were consumed already and are ignored.
        """
        acked = self._acked
        batches = self._batches
        ml = self._ml
        changed = False
        refused: list[Position] = []
        for p in positions:
            md = self._md
            if p <= md:
                continue
            if not ml.entry_exists(p):
                if not ml.is_trimmed(p):
                    refused.append(Position(p[0], p[1]))
                continue
            changed = True
            if batches:
                batches.pop(Position(p[0], p[1]), None)
            if not acked and p[0] == md[0] and p[1] == md[1] + 1:
                self._md = Position(p[0], p[1])  # the common case: the next entry in order
                continue
            acked.add(p[0], p[1])
        if changed:
            if acked or batches:
                self._advance()
            elif self._rp <= self._md:
                self._rp = self._ml.next_position(self._md)
            self._changed()
        return refused

    def ack_batch_indexes(
        self, position: tuple[int, int], ack_set: Sequence[int], batch_size: int
    ) -> bool:
        """Partial ack of a batch entry.

        ``ack_set`` is a ``java.util.BitSet`` as little-endian int64 words where a set bit means
        "still unacked"; it is intersected with what was kept (at first: the ``batch_size``
        indexes, or the ack set as it is when the size is not known, 0). Returns True (and acks
        the entry as a whole) once every index is acknowledged.
        """
        pos = Position(position[0], position[1])
        if self.is_acked(pos) or self._ml.is_trimmed(pos):
            return True
        if not self._ml.entry_exists(pos):
            raise InvalidPositionError(f"cannot acknowledge {pos}: no such entry")
        current = self._batches.get(pos)
        if current is None and batch_size <= 0:
            current = [word & _MASK64 for word in ack_set]
        elif current is None:
            full, rest = divmod(batch_size, 64)
            current = [_MASK64] * full + ([(1 << rest) - 1] if rest else [])
        merged = [
            word & (ack_set[i] & _MASK64 if i < len(ack_set) else 0)
            for i, word in enumerate(current)
        ]
        if not any(merged):
            self._batches.pop(pos, None)
            self.delete([pos])
            return True
        while merged and not merged[-1]:
            merged.pop()
        self._batches[pos] = merged
        self._changed()
        return False

    def get_batch_ack_set(self, position: tuple[int, int]) -> list[int] | None:
        """Remaining (unacked-bits) words of a partially acked batch as signed int64, or None."""
        words = self._batches.get(Position(position[0], position[1]))
        if words is None:
            return None
        return [_signed(w) for w in words]

    def is_acked(self, position: tuple[int, int]) -> bool:
        """True if ``position`` is acknowledged (cumulatively or individually)."""
        return position <= self._md or position in self._acked

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        """Individually acked ranges, Pulsar style open-closed ``(a, b]``."""
        return [
            (Position(lid, first - 1), Position(lid, last))
            for lid, first, last in self._acked.intervals()
        ]

    def backlog(self) -> int:
        """Unacknowledged entries in ``(mark_delete_position, ledger.last_confirmed]``."""
        lc = self._ml.last_confirmed
        total = self._ml.count_entries(self._md, lc)
        if self._acked:
            total -= self._acked.count_between(self._md, lc)
        return max(total, 0)

    def close(self) -> None:
        """Stop using the cursor (a durable cursor's state stays stored)."""
        self.set_inactive()
        self._closed = True

    @property
    def is_active(self) -> bool:
        """True while a consumer reads through the cursor (set by its subscription)."""
        return self._active

    def set_active(self) -> None:
        """A consumer reads through the cursor: its ledger caches new entries for it."""
        if not self._active and not self._closed:
            self._active = True
            self._ml.active_cursors_changed(1)

    def set_inactive(self) -> None:
        """No consumer reads through the cursor any more."""
        if self._active:
            self._active = False
            self._ml.active_cursors_changed(-1)

    def __repr__(self) -> str:
        kind = "durable" if self.durable else "non-durable"
        return (
            f"ManagedCursor({self.name!r}, {kind}, mark_delete={self._md}, read={self._rp}, "
            f"acked={len(self._acked)} ranges)"
        )
