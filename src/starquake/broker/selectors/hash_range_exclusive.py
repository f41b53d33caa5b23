"""Key_Shared STICKY: every consumer declares its own hash ranges (``KeySharedMode.STICKY``).

Ranges are inclusive ``(start, end)`` pairs over the slots ``0 .. range_size - 1``; a hash goes to
the consumer whose range holds ``hash % range_size``, or to nobody. A subscribe whose ranges are
missing, out of bounds, reversed or overlapping (another consumer's or each other) fails and
leaves the selector as if it had never been tried, as on a Pulsar broker.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Sequence
from itertools import pairwise
from typing import Generic

from starquake.broker.selectors.base import (
    DEFAULT_RANGE_SIZE,
    C,
    ConsumerAssignError,
    check_range_size,
)

__all__ = ["HashRangeExclusiveSelector"]


class HashRangeExclusiveSelector(Generic[C]):
    """Exclusive-range selector (Pulsar's ``HashRangeExclusiveStickyKeyConsumerSelector``)."""

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        """Create an empty selector over slots ``0 .. range_size - 1`` (a power of two)."""
        check_range_size(range_size)
        self._range_size = range_size
        self._starts: list[int] = []  # sorted range starts
        self._by_start: dict[int, tuple[int, C]] = {}  # start -> (inclusive end, owner)
        self._members: dict[C, list[tuple[int, int]]] = {}  # consumer -> its sorted ranges

    @property
    def consumers(self) -> list[C]:
        """The current consumers, in join order."""
        return list(self._members)

    def _validated(
        self, name: str, ranges: Sequence[tuple[int, int]] | None
    ) -> list[tuple[int, int]]:
        """Return ``ranges`` sorted, or raise :class:`ConsumerAssignError` explaining the fault."""
        if not ranges:
            raise ConsumerAssignError(
                f"consumer {name!r}: Key_Shared STICKY mode needs at least one hash range"
            )
        top = self._range_size - 1
        for start, end in ranges:
            if not 0 <= start <= end <= top:
                raise ConsumerAssignError(
                    f"consumer {name!r}: invalid hash range [{start}, {end}]: "
                    f"need 0 <= start <= end <= {top}"
                )
        ordered = sorted((int(start), int(end)) for start, end in ranges)
        for (s1, e1), (s2, e2) in pairwise(ordered):
            if s2 <= e1:
                raise ConsumerAssignError(
                    f"consumer {name!r}: its hash ranges [{s1}, {e1}] and [{s2}, {e2}] overlap"
                )
        for start, end in ordered:
            clash = self._first_overlap(start, end)
            if clash is not None:
                s, e = clash
                raise ConsumerAssignError(
                    f"consumer {name!r}: hash range [{start}, {end}] overlaps [{s}, {e}] "
                    "of another consumer"
                )
        return ordered

    def _first_overlap(self, start: int, end: int) -> tuple[int, int] | None:
        """Return the lowest existing range intersecting ``[start, end]``, if any."""
        index = bisect_right(self._starts, start) - 1
        if index >= 0:
            s = self._starts[index]
            e = self._by_start[s][0]
            if e >= start:
                return s, e
        index += 1
        if index < len(self._starts) and self._starts[index] <= end:
            s = self._starts[index]
            return s, self._by_start[s][0]
        return None

    def add_consumer(
        self, consumer: C, name: str, ranges: Sequence[tuple[int, int]] | None = None
    ) -> None:
        """Give ``consumer`` the inclusive slot ``ranges`` it declared.

        Raises :class:`ConsumerAssignError` (selector unchanged) if the consumer is already
        present or the ranges are missing, out of ``[0, range_size - 1]``, reversed or overlapping.
        """
        if consumer in self._members:
            raise ConsumerAssignError(f"consumer {name!r} is already in the selector")
        ordered = self._validated(name, ranges)
        for start, end in ordered:
            insort(self._starts, start)
            self._by_start[start] = (end, consumer)
        self._members[consumer] = ordered

    def remove_consumer(self, consumer: C) -> None:
        """Free ``consumer``'s ranges; an unknown consumer is ignored."""
        ranges = self._members.pop(consumer, None)
        if ranges is None:
            return
        for start, _end in ranges:
            del self._by_start[start]
            del self._starts[bisect_right(self._starts, start) - 1]

    def select(self, key_hash: int) -> C | None:
        """Return the owner of slot ``key_hash % range_size``, or None if no range holds it."""
        slot = key_hash % self._range_size
        index = bisect_right(self._starts, slot) - 1
        if index < 0:
            return None
        end, owner = self._by_start[self._starts[index]]
        return owner if slot <= end else None

    def consumer_key_hash_ranges(self) -> dict[C, list[tuple[int, int]]]:
        """Return each consumer's declared inclusive ranges, sorted, consumers in join order."""
        return {consumer: list(ranges) for consumer, ranges in self._members.items()}
