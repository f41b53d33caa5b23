"""What every Key_Shared selector shares: the sticky-key hash, the slot, the selector protocol.

A Key_Shared dispatcher hashes each entry's sticky key (ordering key, else partition key, else
:data:`NONE_KEY`) with :func:`sticky_key_hash` and asks its selector which consumer owns that hash.
Selectors are pure, synchronous bookkeeping: no I/O, no clock, no ``await``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, TypeVar

from starquake.common.hashes import murmur3_32_masked

__all__ = [
    "DEFAULT_RANGE_SIZE",
    "HASH_SPACE_MAX",
    "NONE_KEY",
    "C",
    "ConsumerAssignError",
    "ConsumerLike",
    "StickyKeyConsumerSelector",
    "check_range_size",
    "slot_of",
    "sticky_key_hash",
]

#: Pulsar's ``StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE`` (``2 << 15``): slots 0..65535.
DEFAULT_RANGE_SIZE = 65536

#: The largest sticky-key hash: hashes are 31-bit (``murmur3 & 0x7fffffff``).
HASH_SPACE_MAX = 0x7FFFFFFF

#: The sticky key of an entry with neither ordering key nor partition key. Some of Pulsar's
#: documentation spells it ``NON_KEY``; Pulsar's brokers (``Commands.peekStickyKey``) use
#: ``"NONE_KEY"``, which we keep so keyless messages hash to the same consumer slot as on a
#: Pulsar broker.
NONE_KEY = b"NONE_KEY"

C = TypeVar("C", bound=Hashable)


class ConsumerAssignError(ValueError):
    """A consumer cannot join a selector (bad or overlapping ranges, no room left, duplicate).

    The selector is left exactly as it was before the failed call.
    """


class ConsumerLike(Protocol):
    """The parts of the broker's consumer a Key_Shared dispatcher hands to a selector.

    Selectors themselves only need a hashable object plus its name (passed separately to
    ``add_consumer``); names may repeat across consumers, identity is the object.
    """

    name: str
    consumer_id: int


class StickyKeyConsumerSelector(Protocol[C]):
    """Maps sticky-key hashes to consumers; Pulsar's ``StickyKeyConsumerSelector``."""

    def add_consumer(
        self, consumer: C, name: str, ranges: Sequence[tuple[int, int]] | None = None
    ) -> None:
        """Add ``consumer`` named ``name``; ``ranges``: its inclusive slot ranges (STICKY only).

        Raises :class:`ConsumerAssignError` and changes nothing when the consumer cannot join.
        """
        ...

    def remove_consumer(self, consumer: C) -> None:
        """Remove ``consumer``; removing one that is not present does nothing."""
        ...

    def select(self, key_hash: int) -> C | None:
        """Return the consumer for a sticky-key hash (31-bit murmur value), or None if none."""
        ...

    def consumer_key_hash_ranges(self) -> dict[C, list[tuple[int, int]]]:
        """Return each consumer's inclusive ``(start, end)`` ranges, consumers in join order."""
        ...

    @property
    def consumers(self) -> list[C]:
        """The current consumers, in join order."""
        ...


def sticky_key_hash(key: bytes) -> int:
    """Return Pulsar's sticky-key hash: MurmurHash3 x86_32, seed 0, top bit cleared (31 bits)."""
    return murmur3_32_masked(key)


def slot_of(hash_: int) -> int:
    """Return the hash-range slot of a sticky-key hash: ``hash_ % 65536``.

    This is Pulsar 2.x/3.x's documented rule. Pulsar 4.0 (PIP-379) additionally maps
    slot 0 to 1 to reserve 0 as "not set" for its draining-hash bookkeeping; we have no such
    bookkeeping, so slot 0 stays a real slot and a STICKY range ``[0, x]`` owns it. Because 65536
    divides 2**31, the raw 32-bit murmur value and the masked 31-bit one give the same slot.
    """
    return hash_ % DEFAULT_RANGE_SIZE


def check_range_size(range_size: int) -> None:
    """Reject a slot-space size that is not a power of two in ``[2, 2**31]``.

    A power of two dividing 2**31 keeps ``hash % range_size`` identical for the raw and the
    masked murmur value (Pulsar's auto-split selector has the same requirement).
    """
    if range_size < 2 or range_size > HASH_SPACE_MAX + 1 or range_size & (range_size - 1):
        raise ValueError(f"range_size must be a power of two in [2, 2**31], got {range_size}")
