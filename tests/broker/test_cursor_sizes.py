"""``nonContiguousDeletedMessagesRangesSerializedSize`` counts what Pulsar's cursor would store:
each range a protobuf ``MessageRange`` of two ``NestedPositionInfo`` (int64 ledgerId = 1, int64
entryId = 2). The oracle is the protobuf library itself, with those two messages defined at run
time."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.cursor_sizes import serialized_ranges_size
from starquake.storage import Position

_F = descriptor_pb2.FieldDescriptorProto


def _message_range_class() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(name="ranges_oracle.proto", package="oracle")
    position = proto.message_type.add(name="NestedPositionInfo")
    for number, name in ((1, "ledgerId"), (2, "entryId")):
        position.field.add(name=name, number=number, type=_F.TYPE_INT64, label=_F.LABEL_REQUIRED)
    message_range = proto.message_type.add(name="MessageRange")
    for number, name in ((1, "lowerEndpoint"), (2, "upperEndpoint")):
        message_range.field.add(
            name=name,
            number=number,
            type=_F.TYPE_MESSAGE,
            type_name=".oracle.NestedPositionInfo",
            label=_F.LABEL_REQUIRED,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("oracle.MessageRange"))


MessageRange = _message_range_class()

ids = st.integers(min_value=-1, max_value=(1 << 63) - 1)
positions = st.builds(Position, ids, ids)


@given(st.lists(st.tuples(positions, positions), max_size=20))
def test_the_size_is_protobufs(ranges: list[tuple[Position, Position]]) -> None:
    expected = 0
    for low, high in ranges:
        message = MessageRange()
        message.lowerEndpoint.ledgerId, message.lowerEndpoint.entryId = low
        message.upperEndpoint.ledgerId, message.upperEndpoint.entryId = high
        expected += message.ByteSize()
    assert serialized_ranges_size(ranges) == expected


def test_no_holes_no_bytes() -> None:
    assert serialized_ranges_size([]) == 0
