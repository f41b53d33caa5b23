"""The per-topic cache of entry metadata forgets what every subscription is past."""

from __future__ import annotations

import time

from starquake.broker.entry_info import EntryInfo, EntryInfoCache
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import encode_entry
from starquake.storage import Position


def _entry(key: str) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, partition_key=key
    )
    return encode_entry(metadata, b"x")


def test_discard_up_to_drops_only_consumed_positions() -> None:
    cache = EntryInfoCache(max_items=100)
    positions = [Position(3, i) for i in range(5)] + [Position(4, i) for i in range(3)]
    for position in positions:
        cache.put(position, EntryInfo(1, b"old", 0, 0, False))
    assert cache.discard_up_to(Position(3, 4)) == 5
    assert cache.discard_up_to(Position(3, 4)) == 0
    assert cache.discard_up_to(Position(4, 0)) == 1
    # a dropped position is parsed again from its bytes when read
    info = cache.get(Position(3, 0), _entry("k"))
    assert info.sticky_key == b"k"


def test_discarding_many_entries_is_linear() -> None:
    """Dropping the oldest of 200,000 entries one trim at a time (as the trim loop does on a
    busy topic) takes well under a second; a dict's front deletions made it quadratic (about
    a minute, with the event loop blocked)."""
    cache = EntryInfoCache(max_items=200_000)
    info = EntryInfo(1, b"k", 0, 0, False)
    for i in range(200_000):
        cache.put(Position(1, i), info)
    started = time.monotonic()
    dropped = sum(cache.discard_up_to(Position(1, i)) for i in range(999, 200_000, 1000))
    assert dropped == 200_000
    # generous: linear takes milliseconds, the quadratic version a minute
    assert time.monotonic() - started < 20
