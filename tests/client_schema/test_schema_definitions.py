"""Schema declarations: the same text, name and type as the official client's, byte for byte."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import pulsar.schema as official
import pytest
from schema_twins import definition, twins

import starquake.client.schema as ours
from starquake.common.schema_info import SchemaType


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 3


class Size(enum.Enum):
    S = "small"
    L = "large"


def flat(m: Any) -> Any:
    class Flat(m.Record):
        i = m.Integer()
        lg = m.Long()
        f = m.Float()
        d = m.Double()
        b = m.Boolean()
        s = m.String()
        by = m.Bytes()

    return Flat


def required(m: Any) -> Any:
    class Required(m.Record):
        i = m.Integer(required=True)
        lg = m.Long(required=True)
        f = m.Float(required=True)
        d = m.Double(required=True)
        b = m.Boolean(required=True)
        s = m.String(required=True)
        by = m.Bytes(required=True)

    return Required


def defaults(m: Any) -> Any:
    class Defaults(m.Record):
        i = m.Integer(default=5, required_default=True)
        i_req = m.Integer(default=5, required=True, required_default=True)
        i_unstated = m.Integer(default=5)
        none_stated = m.Long(required_default=True)
        f = m.Float(default=1.25, required=True, required_default=True)
        d = m.Double(default=-0.5, required_default=True)
        b = m.Boolean(required_default=True)
        b_true = m.Boolean(default=True, required=True, required_default=True)
        s = m.String(default="héllo", required_default=True)
        s_req = m.String(default="x", required=True, required_default=True)
        arr = m.Array(m.Integer(), default=[1, 2], required_default=True)
        mp = m.Map(m.String(), default={"k": "v"}, required=True, required_default=True)

    return Defaults


def enums(m: Any) -> Any:
    class Enums(m.Record):
        color = m.CustomEnum(Color)
        again = m.CustomEnum(Color, required=True)
        size = Size
        size_default = m.CustomEnum(Size, default=Size.L, required=True, required_default=True)
        by_name = m.CustomEnum(Color, default="BLUE", required_default=True)

    return Enums


def containers(m: Any) -> Any:
    class Containers(m.Record):
        ints = m.Array(m.Integer())
        strings = m.Array(m.String(), required=True)
        nested = m.Array(m.Array(m.Double()))
        by_key = m.Map(m.Long())
        of_lists = m.Map(m.Array(m.Boolean()), required=True)
        of_maps = m.Array(m.Map(m.Bytes()))

    return Containers


def nested(m: Any) -> Any:
    class Point(m.Record):
        x = m.Integer(required=True)
        y = m.Integer(required=True)

    class Segment(m.Record):
        start = Point()
        end = Point(required=True)
        points = m.Array(Point())
        named = m.Map(Point(), required=True)

    class Drawing(m.Record):
        title = m.String()
        main = Segment(required=True)
        extra = Segment()
        origin = Point(required_default=True)

    return Drawing


def namespaced(m: Any) -> Any:
    class Money(m.Record):
        _avro_namespace = "com.example.money"
        units = m.Long(required=True)
        currency = m.String(default="EUR", required_default=True)

    class Order(m.Record):
        _avro_namespace = "com.example.orders"
        id = m.String(required=True)
        price = Money()
        refunds = m.Array(Money())
        by_currency = m.Map(Money())

    return Order


def empty_namespace(m: Any) -> Any:
    class Blank(m.Record):
        _avro_namespace = ""
        x = m.Integer()

    class Holder(m.Record):
        a = Blank()
        b = Blank()

    return Holder


def sorted_fields(m: Any) -> Any:
    class Inner(m.Record):
        _sorted_fields = True
        zz = m.Integer()
        aa = m.String()

    class Sorted(m.Record):
        _sorted_fields = True
        zebra = m.Integer()
        apple = m.CustomEnum(Color)
        mango = Inner()
        banana = m.CustomEnum(Color)
        cherry = m.Array(Inner())

    return Sorted


def class_body(m: Any) -> Any:
    class Body(m.Record):
        class Mood(enum.Enum):
            HAPPY = "h"
            SAD = "s"

        class Part(m.Record):
            n = m.Integer()

        ignored = 5
        label = m.String()

        def method(self) -> int:
            return 1

    return Body


def inherited(m: Any) -> Any:
    class Base(m.Record):
        a = m.Integer()

    class Derived(Base):
        b = m.String()

    return Derived


def enum_array(m: Any) -> Any:
    class EnumArray(m.Record):
        colors = m.Array(m.CustomEnum(Color))
        by_key = m.Map(m.CustomEnum(Color))

    return EnumArray


def record_default(m: Any) -> Any:
    class Leaf(m.Record):
        v = m.Integer()

    class Tree(m.Record):
        leaf = Leaf(required=True, required_default=True)
        other = Leaf(required_default=True)

    return Tree


BUILDERS: list[Callable[[Any], Any]] = [
    flat,
    required,
    defaults,
    enums,
    containers,
    nested,
    namespaced,
    empty_namespace,
    sorted_fields,
    class_body,
    inherited,
    enum_array,
    record_default,
]


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda b: b.__name__)
def test_record_schema_dict_matches_official(builder: Callable[[Any], Any]) -> None:
    mine, theirs = twins(builder)
    assert mine.schema() == theirs.schema()


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("kind", ["JsonSchema", "AvroSchema"])
def test_struct_definition_is_byte_identical(builder: Callable[[Any], Any], kind: str) -> None:
    mine, theirs = twins(builder)
    our_schema = getattr(ours, kind)(mine)
    official_schema = getattr(official, kind)(theirs)
    assert definition(our_schema) == definition(official_schema)
    info = our_schema.schema_info()
    assert info.name == official_schema.schema_info().name()
    assert int(info.type) == int(official_schema.schema_info().schema_type())
    assert info.properties == {}


def test_definition_text_form() -> None:
    class Point(ours.Record):
        x = ours.Integer(required=True)

    data = ours.JsonSchema(Point).schema_info().data
    assert data == (
        b'{\n "type": "record",\n "name": "Point",\n "fields": [\n  {\n   "name": "x",\n'
        b'   "type": "int"\n  }\n ]\n}'
    )


def test_names_and_types_of_every_schema() -> None:
    class R(ours.Record):
        x = ours.Integer()

    expected = {
        ours.BytesSchema(): (SchemaType.BYTES, "BYTES", b""),
        ours.StringSchema(): (SchemaType.STRING, "STRING", b"null"),
        ours.JsonSchema(R): (SchemaType.JSON, "JSON", None),
        ours.AvroSchema(R): (SchemaType.AVRO, "AVRO", None),
        ours.BooleanSchema(): (SchemaType.BOOLEAN, "Boolean", b""),
        ours.Int8Schema(): (SchemaType.INT8, "INT8", b""),
        ours.Int16Schema(): (SchemaType.INT16, "INT16", b""),
        ours.Int32Schema(): (SchemaType.INT32, "INT32", b""),
        ours.Int64Schema(): (SchemaType.INT64, "INT64", b""),
        ours.FloatSchema(): (SchemaType.FLOAT, "Float", b""),
        ours.DoubleSchema(): (SchemaType.DOUBLE, "Double", b""),
    }
    for schema, (kind, name, data) in expected.items():
        info = schema.schema_info()
        assert (info.type, info.name, info.properties) == (kind, name, {}), schema
        if data is not None:
            assert info.data == data, schema


def test_string_and_bytes_match_official_declarations() -> None:
    for mine, theirs in [
        (ours.StringSchema(), official.StringSchema()),
        (ours.BytesSchema(), official.BytesSchema()),
    ]:
        info, other = mine.schema_info(), theirs.schema_info()
        assert info.name == other.name()
        assert int(info.type) == int(other.schema_type())
    # The official client sends the string schema's "null" text as its data; bytes send none.
    assert (
        ours.StringSchema().schema_info().data
        == official.StringSchema().schema_info().schema().encode()
    )


def test_avro_definition_from_a_dict() -> None:
    schema = {
        "type": "record",
        "name": "Free",
        "namespace": "x.y",
        "fields": [{"name": "a", "type": ["null", "string"], "default": None}],
    }
    mine = ours.AvroSchema(None, schema_definition=schema)
    theirs = official.AvroSchema(None, schema_definition=schema)
    assert definition(mine) == definition(theirs)


def test_record_class_wins_over_definition() -> None:
    class R(ours.Record):
        x = ours.Integer()

    schema = ours.AvroSchema(R, schema_definition={"type": "string"})
    assert schema.schema_info().data == ours.AvroSchema(R).schema_info().data


def test_named_types_are_defined_once_per_schema() -> None:
    class Point(ours.Record):
        x = ours.Integer()

    class Two(ours.Record):
        a = Point()
        b = Point()

    fields = Two.schema()["fields"]
    assert fields[0]["type"][1]["type"] == "record"
    assert fields[1]["type"] == ["null", "Point"]
    # a fresh schema() call starts from an empty set of names again
    assert Two.schema() == Two.schema()


def test_schema_info_classmethod_refers_to_defined_names() -> None:
    class Point(ours.Record):
        _avro_namespace = "geo"
        x = ours.Integer()

    assert Point.schema_info({"geo.Point"}) == "geo.Point"
    names: set[str] = set()
    assert Point.schema_info(names)["name"] == "Point"
    assert names == {"geo.Point"}


def test_field_schema_methods_match_official() -> None:
    for make in [
        lambda m: m.Integer(),
        lambda m: m.CustomEnum(Color),
        lambda m: m.Array(m.String()),
        lambda m: m.Map(m.Array(m.Long())),
        lambda m: m.Null(),
    ]:
        mine, theirs = twins(make)
        assert mine.schema() == theirs.schema()
        assert mine.type() == theirs.type()
