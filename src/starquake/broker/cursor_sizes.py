"""How many bytes Pulsar's managed cursor would store a subscription's acknowledgment holes in:
the stats field ``nonContiguousDeletedMessagesRangesSerializedSize``.

Pulsar's cursor stores each individually acknowledged range as a protobuf ``MessageRange`` of
two ``NestedPositionInfo`` endpoints (field 1: the lower, open end; field 2: the upper, closed
end), each holding ``ledgerId = 1`` and ``entryId = 2`` as int64 varints (a negative id takes
ten bytes), and reports the sum of those messages' sizes. Starquake stores its cursors in its
own format; the figure is computed from the same ranges in Pulsar's terms, so tools that watch
it read what they would on Pulsar.
"""

from __future__ import annotations

from collections.abc import Sequence

from starquake.protocol.varint import varint
from starquake.storage import Position

__all__ = ["serialized_ranges_size"]


def _endpoint_size(position: Position) -> int:
    inner = 2 + len(varint(position.ledger_id)) + len(varint(position.entry_id))
    return 1 + len(varint(inner)) + inner  # the field's tag, its length, the message


def serialized_ranges_size(ranges: Sequence[tuple[Position, Position]]) -> int:
    """The bytes of ``ranges`` (open-closed ``(a, b]`` pairs) as ``MessageRange`` messages."""
    return sum(_endpoint_size(low) + _endpoint_size(high) for low, high in ranges)
