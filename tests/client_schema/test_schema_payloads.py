"""Payloads: the same bytes as the official client's, and each reads the other's."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any

import pulsar.schema as official
import pytest
from schema_twins import plain, twins

import starquake.client.schema as ours
from starquake.common.schema_info import SchemaInfo, SchemaType


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Size(enum.Enum):
    S = "S"
    L = "L"


def model(m: Any) -> Any:
    class Money(m.Record):
        _avro_namespace = "shop"
        units = m.Long(required=True)
        currency = m.String(default="EUR", required_default=True)

    class Order(m.Record):
        id = m.String(required=True)
        qty = m.Integer()
        price = Money()
        paid = m.Boolean()
        weight = m.Float()
        ratio = m.Double(required=True, default=0.0)
        blob = m.Bytes()
        color = m.CustomEnum(Color)
        size = m.CustomEnum(Size, default=Size.S, required=True)
        tags = m.Array(m.String())
        lines = m.Array(Money())
        attrs = m.Map(m.Long())
        by_name = m.Map(Money())
        grid = m.Array(m.Array(m.Integer()))

    return Money, Order


(MONEY, ORDER), (OFFICIAL_MONEY, OFFICIAL_ORDER) = twins(model)

SAMPLES: list[dict[str, Any]] = [
    {"id": "a"},
    {"id": "", "price": {"units": 0}},
    {
        "id": "ünïcødé ✓",
        "qty": -(2**31),
        "price": {"units": 2**63 - 1, "currency": "USD"},
        "paid": True,
        "weight": 0.5,
        "ratio": -1e300,
        "blob": b"raw bytes",
        "color": "GREEN",
        "size": "L",
        "tags": ["x", "", "z"],
        "lines": [{"units": 1}, {"units": -2, "currency": "JPY"}],
        "attrs": {"a": 1, "": -1},
        "by_name": {"m": {"units": 3}},
        "grid": [[1, 2], [], [3]],
    },
    {"id": "ints as floats", "weight": 3, "ratio": 7, "color": 1},
]


def build(cls: Any, sample: dict[str, Any]) -> Any:
    record = cls(**sample)
    if "price" not in sample:
        record.price = None
    return record


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("kind", ["JsonSchema", "AvroSchema"])
def test_payloads_are_byte_identical_and_cross_decode(kind: str, sample: dict[str, Any]) -> None:
    mine = getattr(ours, kind)(ORDER)
    theirs = getattr(official, kind)(OFFICIAL_ORDER)
    our_record, their_record = build(ORDER, sample), build(OFFICIAL_ORDER, sample)
    payload = mine.encode(our_record)
    assert payload == theirs.encode(their_record)
    assert plain(mine.decode(payload)) == plain(theirs.decode(payload)) == plain(their_record)
    assert mine.decode(payload) == our_record


def test_json_text_form() -> None:
    class Point(ours.Record):
        _sorted_fields = True
        y = ours.Integer()
        x = ours.Integer()
        color = ours.CustomEnum(Color)

    payload = ours.JsonSchema(Point).encode(Point(x=1, y=2, color=Color.GREEN))
    assert payload == b'{\n "y": 2,\n "x": 1,\n "color": 2\n}'


def test_json_decodes_foreign_layouts() -> None:
    schema = ours.JsonSchema(ORDER)
    compact = json.dumps({"id": "x", "qty": 5, "unknown": [1], "price": {"units": 7}}).encode()
    decoded = schema.decode(compact)
    assert (decoded.id, decoded.qty, decoded.price.units, decoded.price.currency) == (
        "x",
        5,
        7,
        "EUR",
    )
    assert decoded.size is Size.S
    assert plain(decoded) == plain(official.JsonSchema(OFFICIAL_ORDER).decode(compact))


def test_avro_is_schemaless_binary() -> None:
    class Pair(ours.Record):
        a = ours.Integer(required=True)
        b = ours.String()

    assert ours.AvroSchema(Pair).encode(Pair(a=1, b="hi")) == b"\x02\x02\x04hi"
    assert ours.AvroSchema(Pair).encode(Pair(a=-1)) == b"\x01\x00"


def test_avro_with_a_dict_definition() -> None:
    definition = {
        "type": "record",
        "name": "Free",
        "fields": [
            {"name": "a", "type": "int"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
    mine = ours.AvroSchema(None, definition)
    theirs = official.AvroSchema(None, definition)
    value = {"a": 5, "tags": ["x", "y"]}
    payload = mine.encode(value)
    assert payload == theirs.encode(value)
    assert mine.decode(payload) == theirs.decode(payload) == value
    assert mine.decode_with_writer(payload, mine.schema_info()) == value


@pytest.mark.parametrize(
    "attempt",
    [
        lambda m: m.JsonSchema(model(m)[1]).encode({"id": "x"}),
        lambda m: m.JsonSchema(model(m)[1]).encode(model(m)[0](units=1)),
        lambda m: m.AvroSchema(model(m)[1]).encode("x"),
        lambda m: m.AvroSchema(None, {"type": "string"}).encode("not a dict"),
        lambda m: m.AvroSchema(None),
        lambda m: m.AvroSchema(model(m)[1]).encode(model(m)[1]()),
        lambda m: m.JsonSchema(model(m)[1]).decode(b"[1, 2]"),
        lambda m: m.JsonSchema(model(m)[1]).decode(b"{not json"),
        lambda m: m.StringSchema().encode(b"bytes"),
        lambda m: m.StringSchema().encode(5),
        lambda m: m.StringSchema().decode(b"\xff"),
        lambda m: m.BytesSchema().encode("text"),
        lambda m: m.BytesSchema().encode(bytearray(b"x")),
        lambda m: m.AvroSchema(model(m)[1]).decode(b"\x02"),
    ],
)
def test_errors_have_the_official_exception_class(attempt: Callable[[Any], Any]) -> None:
    def outcome(module: Any) -> type[BaseException]:
        try:
            attempt(module)
        except Exception as exc:
            return type(exc)
        raise AssertionError("no error")

    assert outcome(ours) is outcome(official)


def test_string_and_bytes_payloads() -> None:
    for mine, theirs, value in [
        (ours.StringSchema(), official.StringSchema(), "héllo ✓"),
        (ours.BytesSchema(), official.BytesSchema(), b"\x00\xff"),
    ]:
        payload = mine.encode(value)
        assert payload == theirs.encode(value)
        assert mine.decode(payload) == theirs.decode(payload) == value
        assert mine.decode_with_writer(payload, SchemaInfo(SchemaType.BYTES)) == value
        assert not mine.needs_writer_schema


def test_only_avro_needs_the_writer_schema() -> None:
    class R(ours.Record):
        x = ours.Integer()

    assert ours.AvroSchema(R).needs_writer_schema
    assert not ours.JsonSchema(R).needs_writer_schema


def test_avro_decode_with_writer_rejects_other_types() -> None:
    class R(ours.Record):
        x = ours.Integer()

    schema = ours.AvroSchema(R)
    payload = schema.encode(R(x=1))
    json_info = ours.JsonSchema(R).schema_info()
    with pytest.raises(ValueError):
        schema.decode_with_writer(payload, SchemaInfo(SchemaType.JSON, json_info.data + b" "))
    # the same definition text is simply this schema
    assert schema.decode_with_writer(payload, schema.schema_info()) == R(x=1)


def test_schema_reprs() -> None:
    class R(ours.Record):
        x = ours.Integer()

    assert repr(ours.JsonSchema(R)) == "JsonSchema(R)"
    assert repr(ours.AvroSchema(R)) == "AvroSchema(R)"
    assert repr(ours.StringSchema()) == "StringSchema"
    with pytest.raises(TypeError):
        ours.JsonSchema(int)  # type: ignore[arg-type]
