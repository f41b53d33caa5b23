"""In-memory time index of delayed messages (``delayedDeliveryEnabled``).

Shared and Key_Shared dispatchers hand every entry whose ``deliver_at_time`` lies in the future to
:class:`InMemoryDelayedDeliveryTracker` instead of a consumer, and ask it for the positions that
became due. Time is always passed in by the caller (milliseconds since the epoch).

Bucketing (as Pulsar's ``InMemoryDelayedDeliveryTracker``): delivery times are grouped into buckets
of ``precision = 2**floor(log2(tick_ms))`` milliseconds (512 ms for the default 1000 ms tick) by
clearing the low bits of ``deliver_at`` (``trimLowerBit``). Let ``cutoff = now`` in strict mode
(``isDelayedDeliveryDeliverAtTimeStrict=true``) and ``now + tick_ms`` otherwise.

* non-strict (default): a bucket's key is ``deliver_at`` rounded *down*; a bucket is due once
  ``key + precision - 1 <= cutoff``, i.e. once every time it may hold is within one tick of now.
  Messages are thus delivered up to ``tick_ms`` early, never late;
* strict: the key is ``deliver_at`` rounded *up* (saturating); a bucket is due once
  ``key <= now``. Messages are never early, and at most ``precision - 1`` ms late.

:meth:`~InMemoryDelayedDeliveryTracker.add` refuses (returns False: dispatch now) a message with
``deliver_at < 0`` or ``deliver_at <= cutoff``.

Structure: ``bucket key -> set of positions``, a min-heap of bucket keys (stale keys are dropped
lazily) and ``position -> bucket key`` for removals. Draining sorts a bucket once and consumes it
from a cursor, so adding, removing and scheduling cost O(log buckets) per message amortized.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from sys import getsizeof

from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import entry_metadata
from starquake.storage import ManagedLedger, Position

__all__ = ["InMemoryDelayedDeliveryTracker", "precision_bits", "rebuild"]

_MAX_TIME = (1 << 63) - 1
_REBUILD_BATCH = 500


def precision_bits(tick_ms: int) -> int:
    """Low bits of ``deliver_at`` trimmed for bucketing: ``floor(log2(tick_ms))`` (0 below 2)."""
    return max(tick_ms, 1).bit_length() - 1


class _Bucket:
    __slots__ = ("cursor", "members", "order")

    def __init__(self) -> None:
        self.members: set[Position] = set()
        self.order: list[Position] | None = None  # sorted snapshot of members, drained from cursor
        self.cursor = 0


class InMemoryDelayedDeliveryTracker:
    """Positions held back until their delivery time, ordered by (bucket time, position).

    ``fixed_delay_lookahead`` is Pulsar's ``delayedDeliveryFixedDelayDetectionLookahead`` (a count,
    0 disables it): see :meth:`should_pause_dispatch`.
    """

    def __init__(
        self,
        tick_ms: int = 1000,
        strict: bool = False,
        *,
        fixed_delay_lookahead: int = 0,
    ) -> None:
        self.tick_ms = tick_ms
        self.strict = strict
        self.fixed_delay_lookahead = fixed_delay_lookahead
        self._bits = precision_bits(tick_ms)
        self._precision = 1 << self._bits
        self._mask = -1 << self._bits
        self._buckets: dict[int, _Bucket] = {}
        self._heap: list[int] = []
        self._where: dict[Position, int] = {}
        self._highest_tracked = 0
        self._fixed_delay = True

    @property
    def precision_ms(self) -> int:
        """Width of a time bucket in milliseconds."""
        return self._precision

    # ------------------------------------------------------------------ time arithmetic

    def _bucket_cutoff(self, now_ms: int) -> int:
        """Highest bucket key that is due at ``now_ms``."""
        if self.strict:
            return now_ms
        return now_ms + self.tick_ms - self._precision + 1

    def bucket_of(self, deliver_at_ms: int) -> int:
        """The bucket key (rounded delivery time) that ``deliver_at_ms`` is filed under."""
        if self.strict:
            return min(deliver_at_ms + self._precision - 1, _MAX_TIME) & self._mask
        return deliver_at_ms & self._mask

    # ------------------------------------------------------------------ adding and removing

    def add(self, position: Position, deliver_at_ms: int, now_ms: int) -> bool:
        """Hold ``position`` until ``deliver_at_ms``; False when it is already due (dispatch now).

        Adding a position that is already held moves it to the new time.
        """
        strict = self.strict
        if deliver_at_ms < 0 or deliver_at_ms <= (now_ms if strict else now_ms + self.tick_ms):
            self._fixed_delay = False
            return False
        if strict:
            key = min(deliver_at_ms + self._precision - 1, _MAX_TIME) & self._mask
        else:
            key = deliver_at_ms & self._mask
        where = self._where
        previous = where.get(position)
        if previous is not None:
            if previous == key:
                return True
            self._discard(position, previous)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
            heapq.heappush(self._heap, key)
        elif bucket.order is not None:
            bucket.order = None
        bucket.members.add(position)
        where[position] = key
        highest = self._highest_tracked
        if deliver_at_ms > highest:
            self._highest_tracked = deliver_at_ms
        elif deliver_at_ms < highest - self.tick_ms:
            self._fixed_delay = False
        return True

    def _discard(self, position: Position, key: int) -> None:
        bucket = self._buckets[key]
        bucket.members.discard(position)
        if not bucket.members:
            del self._buckets[key]  # its heap key goes stale and is dropped lazily

    def remove(self, positions: Iterable[Position]) -> None:
        """Stop tracking ``positions`` (acknowledged, or the cursor moved past them)."""
        where = self._where
        for position in positions:
            key = where.pop(position, None)
            if key is not None:
                self._discard(position, key)
        if not where:
            self.clear()

    def remove_up_to(self, position: Position) -> int:
        """Stop tracking every position ``<= position`` (cumulative ack, mark-delete moved)."""
        doomed = [p for p in self._where if p <= position]
        self.remove(doomed)
        return len(doomed)

    def clear(self) -> None:
        """Forget everything."""
        self._buckets.clear()
        self._heap.clear()
        self._where.clear()
        self._highest_tracked = 0
        self._fixed_delay = True

    def __len__(self) -> int:
        """Number of positions held."""
        return len(self._where)

    def memory_bytes(self) -> int:
        """Bytes the index holds: its containers (the position map, the heap, each bucket's
        set and sorted list) and the positions in them (what ``delayedMessageIndexSizeInBytes``
        reports; Pulsar reports its own index's). One step per bucket."""
        size = getsizeof(self._where) + getsizeof(self._heap) + getsizeof(self._buckets)
        for bucket in self._buckets.values():
            size += getsizeof(bucket) + getsizeof(bucket.members)
            if bucket.order is not None:
                size += getsizeof(bucket.order)
        if self._where:
            size += len(self._where) * getsizeof(next(iter(self._where)))
        return size

    def __contains__(self, position: object) -> bool:
        return position in self._where

    # ------------------------------------------------------------------ scheduling

    def _first_key(self) -> int | None:
        heap, buckets = self._heap, self._buckets
        while heap:
            key = heap[0]
            if key in buckets:
                return key
            heapq.heappop(heap)
        return None

    def next_delivery_time(self) -> int | None:
        """The earliest bucket key held (Pulsar's ``nextDeliveryTime``), or None when empty."""
        return self._first_key()

    def next_due_time(self) -> int | None:
        """The earliest ``now_ms`` at which :meth:`has_message_available` turns true, or None.

        The moment to arm the dispatcher's timer for (``max`` it with now to avoid the past).
        """
        key = self._first_key()
        if key is None:
            return None
        if self.strict:
            return key
        return key + self._precision - 1 - self.tick_ms

    def has_message_available(self, now_ms: int) -> bool:
        """Whether at least one held message is due at ``now_ms``."""
        key = self._first_key()
        return key is not None and key <= self._bucket_cutoff(now_ms)

    def get_scheduled(self, max_messages: int, now_ms: int) -> list[Position]:
        """Remove and return up to ``max_messages`` due positions, by bucket time then position.

        (Pulsar returns the same selection as a set sorted by position.)
        """
        out: list[Position] = []
        if max_messages <= 0:
            return out
        cutoff = self._bucket_cutoff(now_ms)
        where, buckets, heap = self._where, self._buckets, self._heap
        need = max_messages
        while need > 0:
            key = self._first_key()
            if key is None or key > cutoff:
                break
            bucket = buckets[key]
            members = bucket.members
            if len(members) <= need and bucket.order is None:
                taken = sorted(members)
                members.clear()
            else:
                order = bucket.order
                if order is None:
                    order = bucket.order = sorted(members)
                    bucket.cursor = 0
                i = bucket.cursor
                taken = []
                while len(taken) < need and i < len(order):
                    p = order[i]
                    i += 1
                    if p in members:
                        members.remove(p)
                        taken.append(p)
                bucket.cursor = i
            for p in taken:
                del where[p]
            out.extend(taken)
            need -= len(taken)
            if not members:
                del buckets[key]
                heapq.heappop(heap)
        if not where:
            self.clear()
        return out

    def should_pause_dispatch(self, now_ms: int) -> bool:
        """Pulsar's ``shouldPauseAllDeliveries``: stop reading the cursor for now.

        True when fixed-delay detection is on, every message added so far had a delivery time no
        earlier than one tick before the highest seen (so delivery order equals log order), at
        least ``fixed_delay_lookahead`` messages are held and none is due.
        """
        return (
            self.fixed_delay_lookahead > 0
            and self._fixed_delay
            and len(self._where) >= self.fixed_delay_lookahead
            and not self.has_message_available(now_ms)
        )

    def __repr__(self) -> str:
        return (
            f"InMemoryDelayedDeliveryTracker(held={len(self)}, buckets={len(self._buckets)}, "
            f"next={self.next_delivery_time()})"
        )


async def rebuild(
    tracker: InMemoryDelayedDeliveryTracker,
    ledger: ManagedLedger,
    from_position: Position,
    now_ms: int,
    is_acked: Callable[[Position], bool],
) -> int:
    """Re-add the delayed entries in ``[from_position, ledger.last_confirmed]`` still pending.

    For use after a restart: scans the stored entries, parses their metadata, and adds those
    not acknowledged (``is_acked``) whose ``deliver_at_time`` is still in the future for the
    tracker. Entries that cannot be parsed are skipped. Returns how many positions were added.
    """
    end = ledger.last_confirmed
    start = ledger.normalize(from_position)
    added = 0
    while start <= end:
        entries = await ledger.read_entries(start, _REBUILD_BATCH)
        for entry in entries:
            position = entry.position
            if position > end:
                break
            if is_acked(position):
                continue
            try:
                md = entry_metadata(entry.data)
            except ProtocolError:
                continue
            if md.HasField("deliver_at_time") and tracker.add(position, md.deliver_at_time, now_ms):
                added += 1
        if not entries or entries[-1].position >= end:
            break
        start = ledger.next_position(entries[-1].position)
    return added
