"""The per-topic cache of entry metadata forgets what every subscription is past."""

from __future__ import annotations

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
