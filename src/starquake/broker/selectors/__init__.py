"""Key_Shared consumer selectors: which consumer gets a sticky key (pure, synchronous).

* :class:`ConsistentHashingSelector`: AUTO_SPLIT by a consistent-hash ring (the default).
* :class:`HashRangeAutoSplitSelector`: AUTO_SPLIT by halving the largest slot range.
* :class:`HashRangeExclusiveSelector`: STICKY, consumer-declared slot ranges.

All three satisfy :class:`StickyKeyConsumerSelector`. A sticky key is the message's ordering key,
else its partition key, else ``NONE_KEY``; its hash is murmur3 (32-bit) masked to 31 bits.
"""

from __future__ import annotations

from starquake.broker.selectors.base import (
    DEFAULT_RANGE_SIZE,
    HASH_SPACE_MAX,
    NONE_KEY,
    C,
    ConsumerAssignError,
    ConsumerLike,
    StickyKeyConsumerSelector,
    slot_of,
    sticky_key_hash,
)
from starquake.broker.selectors.consistent_hashing import ConsistentHashingSelector
from starquake.broker.selectors.hash_range_auto_split import HashRangeAutoSplitSelector
from starquake.broker.selectors.hash_range_exclusive import HashRangeExclusiveSelector

__all__ = [
    "DEFAULT_RANGE_SIZE",
    "HASH_SPACE_MAX",
    "NONE_KEY",
    "C",
    "ConsistentHashingSelector",
    "ConsumerAssignError",
    "ConsumerLike",
    "HashRangeAutoSplitSelector",
    "HashRangeExclusiveSelector",
    "StickyKeyConsumerSelector",
    "slot_of",
    "sticky_key_hash",
]
