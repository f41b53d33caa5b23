"""A set of positions kept as sorted, disjoint closed intervals.

Each interval lies within one ledger: ``[(L, first), (L, last)]``. Two intervals of the same ledger
that touch are merged; intervals of different ledgers are never merged (whether ledger L ends where
ledger L+1 begins is the managed ledger's business, not the set's). Lookups use ``bisect`` on the
interval starts; appending at the end (acks arrive in mostly increasing order) is O(1).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from .position import Position

__all__ = ["PositionRangeSet"]


class PositionRangeSet:
    """Sorted disjoint closed intervals of positions, one ledger per interval."""

    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self) -> None:
        self._starts: list[tuple[int, int]] = []  # (ledger_id, first entry id)
        self._ends: list[int] = []  # last entry id, same ledger as the start
        self._count = 0

    def __len__(self) -> int:
        """Number of intervals."""
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    @property
    def size(self) -> int:
        """Number of positions in the set."""
        return self._count

    def __contains__(self, position: object) -> bool:
        if not isinstance(position, tuple):
            return False
        i = bisect_right(self._starts, position) - 1
        return i >= 0 and self._starts[i][0] == position[0] and self._ends[i] >= position[1]

    def add(self, ledger_id: int, entry_id: int) -> bool:
        """Add one position; returns False if it was already present."""
        starts = self._starts
        if starts:
            last_ledger, _ = starts[-1]
            last_end = self._ends[-1]
            if ledger_id == last_ledger:
                if entry_id == last_end + 1:
                    self._ends[-1] = entry_id
                    self._count += 1
                    return True
                if entry_id > last_end:
                    starts.append((ledger_id, entry_id))
                    self._ends.append(entry_id)
                    self._count += 1
                    return True
            elif ledger_id > last_ledger:
                starts.append((ledger_id, entry_id))
                self._ends.append(entry_id)
                self._count += 1
                return True
        before = self._count
        self.add_range(ledger_id, entry_id, entry_id)
        return self._count != before

    def add_range(self, ledger_id: int, first: int, last: int) -> None:
        """Add every position ``(ledger_id, first..last)`` (inclusive)."""
        if last < first:
            return
        starts, ends = self._starts, self._ends
        lo = bisect_left(starts, (ledger_id, first))
        if lo > 0 and starts[lo - 1][0] == ledger_id and ends[lo - 1] >= first - 1:
            lo -= 1
        hi = lo
        new_first, new_last = first, last
        removed = 0
        n = len(starts)
        while hi < n:
            s_ledger, s_first = starts[hi]
            if s_ledger != ledger_id or s_first > last + 1:
                break
            new_first = min(new_first, s_first)
            new_last = max(new_last, ends[hi])
            removed += ends[hi] - s_first + 1
            hi += 1
        starts[lo:hi] = [(ledger_id, new_first)]
        ends[lo:hi] = [new_last]
        self._count += new_last - new_first + 1 - removed

    def remove_up_to(self, position: Position) -> None:
        """Remove every position ``<= position``."""
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, position)
        if i == 0:
            return
        removed = 0
        keep_tail = None
        ledger_id, entry_id = position
        last_ledger = starts[i - 1][0]
        if last_ledger == ledger_id and ends[i - 1] > entry_id:
            keep_tail = (ledger_id, entry_id + 1, ends[i - 1])
        for j in range(i):
            removed += ends[j] - starts[j][1] + 1
        del starts[:i]
        del ends[:i]
        self._count -= removed
        if keep_tail is not None:
            lid, first, last = keep_tail
            starts.insert(0, (lid, first))
            ends.insert(0, last)
            self._count += last - first + 1

    def clear(self) -> None:
        """Remove everything."""
        self._starts.clear()
        self._ends.clear()
        self._count = 0

    def first(self) -> tuple[int, int, int] | None:
        """The first interval as ``(ledger_id, first, last)``, or None."""
        if not self._starts:
            return None
        lid, first = self._starts[0]
        return lid, first, self._ends[0]

    def range_containing(self, position: Position) -> tuple[int, int, int] | None:
        """The interval containing ``position`` as ``(ledger_id, first, last)``, or None."""
        i = bisect_right(self._starts, position) - 1
        if i >= 0:
            lid, first = self._starts[i]
            if lid == position[0] and self._ends[i] >= position[1]:
                return lid, first, self._ends[i]
        return None

    def next_range_after(self, position: Position) -> tuple[int, int, int] | None:
        """The first interval that starts strictly after ``position``, or None."""
        i = bisect_right(self._starts, position)
        if i < len(self._starts):
            lid, first = self._starts[i]
            return lid, first, self._ends[i]
        return None

    def count_between(self, after: Position, up_to: Position) -> int:
        """Number of positions ``p`` in the set with ``after < p <= up_to``."""
        total = 0
        starts, ends = self._starts, self._ends
        i = max(bisect_right(starts, after) - 1, 0)
        for j in range(i, len(starts)):
            lid, first = starts[j]
            if (lid, first) > up_to:
                break
            last = ends[j]
            if lid == after[0]:
                first = max(first, after[1] + 1)
            elif lid < after[0]:
                continue
            if lid == up_to[0]:
                last = min(last, up_to[1])
            if last >= first:
                total += last - first + 1
        return total

    def intervals(self) -> Iterator[tuple[int, int, int]]:
        """Every interval as ``(ledger_id, first, last)``, in order."""
        for (lid, first), last in zip(self._starts, self._ends, strict=True):
            yield lid, first, last

    def __repr__(self) -> str:
        body = ", ".join(f"[{lid}:{a}..{lid}:{b}]" for lid, a, b in self.intervals())
        return f"PositionRangeSet({body})"
