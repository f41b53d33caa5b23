"""Key_Shared AUTO_SPLIT by splitting hash ranges.

Used when ``subscriptionKeySharedUseConsistentHashing=false``.

The slots ``0 .. range_size - 1`` are cut into contiguous regions, one per consumer, and a hash
goes to the region holding ``hash % range_size``, as in Pulsar 2.x's documented behaviour:

* the first consumer owns every slot;
* a new consumer takes the lower half of the largest region (ties: the lowest region) and the
  region's owner keeps the upper half; for an odd size ``n`` the new consumer gets
  ``n - n // 2`` slots, as in Pulsar's ``splitRange``;
* a leaving consumer's region merges into its right neighbour, the last region into its left one.

Pulsar's documentation writes regions half-open (``C2 [0, 32768)``);
:meth:`consumer_key_hash_ranges` reports them inclusive (``(0, 32767)``), the form of the stats'
``keyHashRanges``. Pulsar keys its map by region end and routes ``slot`` to the ceiling end, which
gives the new consumer one slot more (``0..32768``); we keep the documented boundaries instead.

``select`` takes the masked 31-bit sticky-key hash. ``range_size`` is a power of two dividing
2**31, so the raw 32-bit murmur value lands in the same slot: the key ``Order-3459134``
(raw 3112179635, masked 964695987) is slot 6067 either way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Generic

from starquake.broker.selectors.base import (
    DEFAULT_RANGE_SIZE,
    C,
    ConsumerAssignError,
    check_range_size,
)

__all__ = ["HashRangeAutoSplitSelector"]


class HashRangeAutoSplitSelector(Generic[C]):
    """Auto-split hash-range selector (Pulsar's ``HashRangeAutoSplitStickyKeyConsumerSelector``)."""

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        """Create an empty selector over slots ``0 .. range_size - 1`` (a power of two)."""
        check_range_size(range_size)
        self._range_size = range_size
        # Region i is [_ends[i - 1] (0 for i == 0), _ends[i]) and belongs to _owners[i].
        self._ends: list[int] = []
        self._owners: list[C] = []
        self._members: dict[C, str] = {}  # consumer -> name, in join order

    @property
    def consumers(self) -> list[C]:
        """The current consumers, in join order."""
        return list(self._members)

    def _start(self, index: int) -> int:
        return self._ends[index - 1] if index else 0

    def add_consumer(
        self, consumer: C, name: str, ranges: Sequence[tuple[int, int]] | None = None
    ) -> None:
        """Give ``consumer`` the lower half of the largest region; ``ranges`` is ignored.

        Raises :class:`ConsumerAssignError` if the consumer is already present or every region
        is a single slot.
        """
        if consumer in self._members:
            raise ConsumerAssignError(f"consumer {name!r} is already in the selector")
        if not self._owners:
            self._ends.append(self._range_size)
            self._owners.append(consumer)
            self._members[consumer] = name
            return
        largest, largest_size = 0, 0
        for index, end in enumerate(self._ends):
            size = end - self._start(index)
            if size > largest_size:  # strict: the lowest region wins a tie
                largest, largest_size = index, size
        if largest_size < 2:
            raise ConsumerAssignError(
                f"no hash range left for consumer {name!r}: "
                f"{len(self._owners)} consumers already hold one slot each"
            )
        split = self._ends[largest] - largest_size // 2
        self._ends.insert(largest, split)
        self._owners.insert(largest, consumer)
        self._members[consumer] = name

    def remove_consumer(self, consumer: C) -> None:
        """Hand ``consumer``'s region to its right neighbour (the last one's to its left one)."""
        if self._members.pop(consumer, None) is None:
            return
        index = self._owners.index(consumer)
        del self._owners[index]
        if index == len(self._ends) - 1 and index > 0:
            # Last region merges left: the left neighbour's end moves up to range_size.
            del self._ends[index - 1]
        else:
            # The right neighbour's region now starts where the removed one started.
            del self._ends[index]

    def select(self, key_hash: int) -> C | None:
        """Return the owner of slot ``key_hash % range_size``, or None when empty."""
        if not self._owners:
            return None
        return self._owners[bisect_right(self._ends, key_hash % self._range_size)]

    def consumer_key_hash_ranges(self) -> dict[C, list[tuple[int, int]]]:
        """Return each consumer's single inclusive slot range ``(start, end)``, in join order."""
        by_owner = {
            owner: [(self._start(index), end - 1)]
            for index, (owner, end) in enumerate(zip(self._owners, self._ends, strict=True))
        }
        return {consumer: by_owner[consumer] for consumer in self._members}
