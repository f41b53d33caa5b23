"""Record instances: defaults, validation, conversion, equality and display."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import pytest
from schema_twins import plain, twins

import starquake.client.schema as ours
from starquake.client.schema import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)


class Color(enum.Enum):
    RED = 1
    GREEN = 2


def model(m: Any) -> Any:
    class Inner(m.Record):
        v = m.Integer()

    class Model(m.Record):
        i = m.Integer()
        i_req = m.Integer(required=True)
        lg = m.Long(default=9)
        f = m.Float()
        d = m.Double()
        b = m.Boolean()
        s = m.String(default="dflt")
        s_req = m.String(required=True)
        by = m.Bytes()
        color = m.CustomEnum(Color)
        arr = m.Array(m.Integer())
        recs = m.Array(Inner())
        mp = m.Map(m.String())
        rec_map = m.Map(Inner())
        inner = Inner()
        inner_req = Inner(required=True)
        nothing = m.Null()

    return Model


MINE, THEIRS = twins(model)


def test_defaults_match_official() -> None:
    assert plain(MINE()) == plain(THEIRS())
    record = MINE()
    assert (record.i, record.lg, record.b, record.s, record.arr) == (None, 9, False, "dflt", None)
    assert record.inner == type(record.inner)()


def test_nested_defaults_are_not_shared() -> None:
    first, second = MINE(), MINE()
    first.inner.v = 5
    assert second.inner.v is None
    assert type(MINE._fields["inner"])().v is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("i", "1"),
        ("i", 1.5),
        ("i_req", None),
        ("lg", "x"),
        ("f", "1.0"),
        ("d", [1.0]),
        ("b", 1),
        ("b", "true"),
        ("s", 5),
        ("s_req", None),
        ("color", "PURPLE"),
        ("color", 7),
        ("color", 1.0),
        ("arr", (1, 2)),
        ("arr", [1, "2"]),
        ("recs", [{"v": 1}, 5]),
        ("mp", {1: "x"}),
        ("mp", {"k": 1}),
        ("mp", ["k"]),
        ("inner", 5),
        ("inner_req", None),
        ("nothing", 0),
        ("undeclared", 1),
    ],
)
def test_bad_values_raise_like_official(name: str, value: Any) -> None:
    def attempt(cls: Any) -> type[BaseException] | None:
        record = cls()
        try:
            setattr(record, name, value)
        except Exception as exc:
            return type(exc)
        return None

    expected = attempt(THEIRS)
    assert expected is not None
    assert attempt(MINE) is expected
    with pytest.raises(expected):
        MINE(**{name: value}) if name != "undeclared" else setattr(MINE(), name, value)


@pytest.mark.parametrize(
    ("name", "value", "stored"),
    [
        ("s", b"bytes", "bytes"),
        ("by", "text", b"text"),
        ("color", "GREEN", Color.GREEN),
        ("color", 2, Color.GREEN),
        ("color", Color.RED, Color.RED),
        ("f", 3, 3),
        ("d", 2.5, 2.5),
        ("i", True, True),
        ("s", None, "dflt"),
        ("lg", None, 9),
        ("b", None, False),
        ("arr", None, None),
        ("color", None, None),
    ],
)
def test_value_conversions_match_official(name: str, value: Any, stored: Any) -> None:
    mine, theirs = MINE(), THEIRS()
    setattr(mine, name, value)
    setattr(theirs, name, value)
    assert getattr(mine, name) == getattr(theirs, name) == stored
    assert type(getattr(mine, name)) is type(stored)


def test_dict_arguments_build_nested_records() -> None:
    kwargs: dict[str, Any] = {
        "inner": {"v": 1},
        "recs": [{"v": 2}, {"v": 3}],
        "rec_map": {"a": {"v": 4}},
        "i_req": 1,
        "s_req": "s",
    }
    mine, theirs = MINE(**kwargs), THEIRS(**kwargs)
    assert plain(mine) == plain(theirs)
    assert mine.recs[1].v == 3
    assert mine.rec_map["a"].v == 4


def test_unknown_keyword_arguments_are_ignored_like_official() -> None:
    assert plain(MINE(zzz=1)) == plain(THEIRS(zzz=1))


def test_equality() -> None:
    assert MINE(i=1) == MINE(i=1)
    assert MINE(i=1) != MINE(i=2)
    assert MINE(inner={"v": 1}) != MINE(inner={"v": 2})
    assert MINE() != 5
    assert (MINE() == object()) is False

    class Other(Record):
        i = Integer()

    assert Other(i=1) != MINE(i=1)
    with pytest.raises(TypeError):
        hash(MINE())


def test_repr_and_str_are_readable() -> None:
    class Point(Record):
        x = Integer()
        label = String()
        color = CustomEnum(Color)

    point = Point(x=1, label="a", color="RED")
    assert repr(point) == "Point(x=1, label='a', color=<Color.RED: 1>)"
    assert str(point) == repr(point)
    assert repr(Integer(default=3)) == "Integer(default=3, required=False, required_default=False)"


def test_fields_only_from_own_class_body_like_official() -> None:
    class Base(Record):
        a = Integer()

    class Derived(Base):
        b = Integer()

    assert list(Derived._fields) == ["b"]
    with pytest.raises(AttributeError):
        Derived().a = 1


def test_class_body_enums_and_records_become_fields() -> None:
    class Body(Record):
        class Mood(enum.Enum):
            UP = 1

        class Part(Record):
            n = Integer()

        plain_attribute = 3

    body = Body(Mood="UP", Part={"n": 2})
    assert list(Body._fields) == ["Mood", "Part"]
    assert body.Mood is Body.Mood.UP
    assert body.Part.n == 2


def test_fields_named_like_methods_still_work() -> None:
    class Tricky(Record):
        type = String()
        default = Integer()

    class Holder(Record):
        tricky = Tricky()
        many = Array(Tricky())

    holder = Holder(tricky={"type": "t"}, many=[{"type": "u"}])
    assert holder.tricky.type == "t"
    assert holder.many[0].type == "u"
    decoded = ours.JsonSchema(Holder).decode(ours.JsonSchema(Holder).encode(holder))
    assert decoded == holder
    assert ours.AvroSchema(Holder).decode(ours.AvroSchema(Holder).encode(holder)) == holder


@pytest.mark.parametrize(
    "make",
    [
        lambda: Integer(default="x"),
        lambda: String(default=5),
        lambda: Boolean(default=0),
        lambda: CustomEnum(Color, default="NOPE"),
        lambda: Array(Integer(), default=5),
        lambda: Map(Integer(), default={"a": "b"}),
        lambda: Null(default=1),
        lambda: Long(default=1.5),
        lambda: Float(default="1"),
        lambda: Double(default=None) and Double(default=b"1"),
    ],
)
def test_bad_defaults_raise_type_error(make: Callable[[], Any]) -> None:
    with pytest.raises(TypeError):
        make()


def test_bad_container_types_are_rejected() -> None:
    with pytest.raises(TypeError):
        Array(int)
    with pytest.raises(TypeError):
        Map("string")
    with pytest.raises(TypeError):
        CustomEnum(int)  # type: ignore[arg-type]


def test_record_class_as_container_item() -> None:
    class Leaf(Record):
        v = Integer()

    assert Array(Leaf).schema() == Array(Leaf()).schema()
    assert Map(Leaf).validate_type("m", {"a": Leaf(v=1)}) == {"a": Leaf(v=1)}


def test_bytes_field_accepts_byte_likes() -> None:
    field = Bytes()
    assert field.validate_type("b", bytearray(b"ab")) == b"ab"
    assert field.validate_type("b", memoryview(b"cd")) == b"cd"
    with pytest.raises(TypeError):
        field.validate_type("b", 5)


def test_record_as_field_methods() -> None:
    class Leaf(Record):
        v = Integer()

    leaf = Leaf(default=None, required_default=True, required=True)
    assert leaf.type() == "Leaf"
    assert leaf.python_type() is Leaf
    assert leaf.required_default() is True
    assert leaf.default() is None
    assert leaf.validate_type("x", Leaf(v=1)) == Leaf(v=1)
    with pytest.raises(TypeError):
        leaf.validate_type("x", None)


def test_field_named_schema_keeps_schemas_working() -> None:
    class Doc(Record):
        schema = String()

    doc = Doc(schema="s")
    for kind in (ours.JsonSchema, ours.AvroSchema):
        codec = kind(Doc)
        assert codec.decode(codec.encode(doc)) == doc
