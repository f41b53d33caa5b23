"""ProtobufNativeSchema with message classes built at run time from descriptor protos."""

from __future__ import annotations

import base64
import json
from typing import Any

import pulsar.schema as official
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from schema_twins import definition

import starquake.client.schema as ours
from starquake.common.schema_info import SchemaInfo, SchemaType

F = descriptor_pb2.FieldDescriptorProto


def _file(name: str, package: str, deps: list[str]) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto(
        name=name, package=package, syntax="proto3", dependency=deps
    )


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    type_name: str = "",
    repeated: bool = False,
) -> None:
    field = message.field.add(
        name=name,
        number=number,
        type=kind,  # type: ignore[arg-type]
        label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL,
    )
    if type_name:
        field.type_name = type_name


def build_pool() -> descriptor_pool.DescriptorPool:
    """Four files: a diamond (order imports money and audit, both import base) plus scalars."""
    base = _file("common/base.proto", "common", [])
    stamp = base.message_type.add(name="Stamp")
    _field(stamp, "millis", 1, F.TYPE_INT64)

    money = _file("common/money.proto", "common", ["common/base.proto"])
    m = money.message_type.add(name="Money")
    _field(m, "units", 1, F.TYPE_INT64)
    _field(m, "currency", 2, F.TYPE_STRING)
    _field(m, "at", 3, F.TYPE_MESSAGE, ".common.Stamp")

    audit = _file("common/audit.proto", "common", ["common/base.proto"])
    a = audit.message_type.add(name="Audit")
    _field(a, "who", 1, F.TYPE_STRING)
    _field(a, "at", 2, F.TYPE_MESSAGE, ".common.Stamp")

    order = _file("shop/order.proto", "shop", ["common/money.proto", "common/audit.proto"])
    o = order.message_type.add(name="Order")
    _field(o, "id", 1, F.TYPE_STRING)
    _field(o, "price", 2, F.TYPE_MESSAGE, ".common.Money")
    _field(o, "tags", 3, F.TYPE_STRING, repeated=True)
    _field(o, "audit", 4, F.TYPE_MESSAGE, ".common.Audit")
    _field(o, "flag", 5, F.TYPE_BOOL)
    _field(o, "blob", 6, F.TYPE_BYTES)
    line = o.nested_type.add(name="Line")
    _field(line, "qty", 1, F.TYPE_INT32)
    _field(o, "lines", 7, F.TYPE_MESSAGE, ".shop.Order.Line", repeated=True)

    pool = descriptor_pool.DescriptorPool()
    for proto in (base, money, audit, order):
        pool.Add(proto)
    return pool


POOL = build_pool()


def message_class(full_name: str) -> Any:
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


ORDER = message_class("shop.Order")
MONEY = message_class("common.Money")
STAMP = message_class("common.Stamp")
LINE = message_class("shop.Order.Line")


def sample_order() -> Any:
    order = ORDER(id="o-1", tags=["a", "b"], flag=True, blob=b"\x00\x01")
    order.price.units = 42
    order.price.currency = "EUR"
    order.price.at.millis = 1234567890123
    order.audit.who = "me"
    order.lines.add(qty=3)
    return order


@pytest.mark.parametrize("cls", [ORDER, MONEY, STAMP, LINE], ids=lambda c: c.__name__)
def test_definition_is_byte_identical(cls: Any) -> None:
    mine = ours.ProtobufNativeSchema(cls)
    theirs = official.ProtobufNativeSchema(cls)
    assert definition(mine) == definition(theirs)
    info = mine.schema_info()
    assert info.type is SchemaType.PROTOBUF_NATIVE
    assert info.name == theirs.schema_info().name() == "PROTOBUF_NATIVE"
    assert info.properties == {}


def test_definition_content() -> None:
    data = json.loads(ours.ProtobufNativeSchema(ORDER).schema_info().data)
    assert list(data) == ["fileDescriptorSet", "rootMessageTypeName", "rootFileDescriptorName"]
    assert data["rootMessageTypeName"] == "shop.Order"
    assert data["rootFileDescriptorName"] == "shop/order.proto"
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(data["fileDescriptorSet"]))
    # every file once, after the files it imports
    assert [f.name for f in files.file] == [
        "common/base.proto",
        "common/money.proto",
        "common/audit.proto",
        "shop/order.proto",
    ]
    nested = json.loads(ours.ProtobufNativeSchema(LINE).schema_info().data)
    assert nested["rootMessageTypeName"] == "shop.Order.Line"
    assert nested["rootFileDescriptorName"] == "shop/order.proto"


def test_payloads_cross_decode() -> None:
    mine, theirs = ours.ProtobufNativeSchema(ORDER), official.ProtobufNativeSchema(ORDER)
    order = sample_order()
    payload = mine.encode(order)
    assert payload == theirs.encode(order) == order.SerializeToString()
    assert mine.decode(payload) == order
    assert theirs.decode(payload) == mine.decode(theirs.encode(order))
    assert mine.decode_with_writer(payload, SchemaInfo(SchemaType.PROTOBUF_NATIVE)) == order
    assert not mine.needs_writer_schema


def test_errors_match_official() -> None:
    for module in (ours, official):
        with pytest.raises(TypeError):
            module.ProtobufNativeSchema(int)
        with pytest.raises(TypeError):
            module.ProtobufNativeSchema(sample_order())
        with pytest.raises(TypeError):
            module.ProtobufNativeSchema(ORDER).encode(MONEY(units=1))
        with pytest.raises(DecodeError):
            module.ProtobufNativeSchema(ORDER).decode(b"\xff\xff\xff")


def test_repr() -> None:
    assert repr(ours.ProtobufNativeSchema(ORDER)) == "ProtobufNativeSchema(Order)"
