"""Key_Shared AUTO_SPLIT by consistent hashing (the default selector).

The ring follows Pulsar 2.x's documented behaviour: each consumer puts ``replica_points``
points on a ring of 31-bit hashes, point ``i`` at ``murmur3_32_masked((name + str(i)).encode())``.
A key hash goes to the first point at or after it, wrapping to the first point. Consumers whose
points collide (always the case for two consumers of the same name) share the ring entry; the
entry's list is sorted by name, ties in join order, and a hash picks ``list[hash % len(list)]``.

Current Pulsar keys points as ``name + "\\0" + nameIndex + "\\0" + i`` hashed into slots 1..65535,
and resolves collisions by keeping the first consumer; we keep the 2.x ring on purpose, so
that keys go to the same consumers as on the brokers that use it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from itertools import count
from typing import Generic

from starquake.broker.selectors.base import HASH_SPACE_MAX, C, ConsumerAssignError
from starquake.common.hashes import murmur3_32_masked

__all__ = ["ConsistentHashingSelector"]


class ConsistentHashingSelector(Generic[C]):
    """Consistent-hash ring selector (Pulsar's ``ConsistentHashingStickyKeyConsumerSelector``).

    ``select`` is a binary search over the sorted ring points, O(log points).
    """

    def __init__(self, replica_points: int = 100) -> None:
        """Create an empty ring; every consumer will own ``replica_points`` points on it."""
        if replica_points < 1:
            raise ValueError(f"replica_points must be >= 1, got {replica_points}")
        self._replica_points = replica_points
        self._points: list[int] = []  # sorted ring positions
        self._ring: dict[int, list[C]] = {}  # position -> sharers, by (name, join order)
        self._members: dict[C, tuple[str, int]] = {}  # consumer -> (name, join sequence)
        self._seq = count()

    @property
    def consumers(self) -> list[C]:
        """The current consumers, in join order."""
        return list(self._members)

    def _point_hashes(self, name: str) -> list[int]:
        return [murmur3_32_masked(f"{name}{i}".encode()) for i in range(self._replica_points)]

    def add_consumer(
        self, consumer: C, name: str, ranges: Sequence[tuple[int, int]] | None = None
    ) -> None:
        """Put ``consumer``'s points on the ring; ``ranges`` is ignored (STICKY only).

        Raises :class:`ConsumerAssignError` if this very object is already on the ring.
        """
        if consumer in self._members:
            raise ConsumerAssignError(f"consumer {name!r} is already in the selector")
        self._members[consumer] = (name, next(self._seq))
        for point in self._point_hashes(name):
            sharers = self._ring.get(point)
            if sharers is None:
                self._ring[point] = [consumer]
                insort(self._points, point)
            elif consumer not in sharers:
                sharers.append(consumer)
                sharers.sort(key=self._members.__getitem__)

    def remove_consumer(self, consumer: C) -> None:
        """Take ``consumer``'s points off the ring; an unknown consumer is ignored."""
        member = self._members.pop(consumer, None)
        if member is None:
            return
        for point in self._point_hashes(member[0]):
            sharers = self._ring.get(point)
            if sharers is None or consumer not in sharers:
                continue  # the same point twice in one consumer's list: already removed
            sharers.remove(consumer)
            if not sharers:
                del self._ring[point]
                del self._points[bisect_left(self._points, point)]

    def select(self, key_hash: int) -> C | None:
        """Return the owner of the first ring point at or after ``key_hash`` (wrapping round)."""
        points = self._points
        if not points:
            return None
        index = bisect_left(points, key_hash)
        sharers = self._ring[points[index if index < len(points) else 0]]
        return sharers[key_hash % len(sharers)]

    def consumer_key_hash_ranges(self) -> dict[C, list[tuple[int, int]]]:
        """Return the inclusive 31-bit hash ranges each consumer's ring points cover.

        One range per ring point ``p``: ``(previous point + 1, p)``, the first point's range
        starting at 0. Hashes above the last point wrap to the first point, so when the last
        point is below ``2**31 - 1`` its owner(s) also get ``(last point + 1, 2**31 - 1)``.
        Each list is sorted by start; consumers come in join order.

        A point shared by several consumers splits its range among them by ``hash % n``, which
        contiguous ranges cannot express; like Pulsar 2.x, the range is then listed under every
        sharer. Without shared points the ranges are disjoint and cover ``[0, 2**31 - 1]``.
        """
        result: dict[C, list[tuple[int, int]]] = {consumer: [] for consumer in self._members}
        start = 0
        for point in self._points:
            for consumer in self._ring[point]:
                result[consumer].append((start, point))
            start = point + 1
        if self._points and start <= HASH_SPACE_MAX:
            for consumer in self._ring[self._points[0]]:
                result[consumer].append((start, HASH_SPACE_MAX))
        return result
