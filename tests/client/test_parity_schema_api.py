"""The schema API with both clients: ``SchemaInfo``'s methods, the base ``Record`` class, and
``Message.schema_version()`` of messages received from a broker."""

from __future__ import annotations

import enum
import struct
import types
from typing import Any

import pulsar
import pytest
from official_client import subscribe_earliest

import starquake.client


def _schemas(mod: types.ModuleType) -> list[Any]:
    schema = mod.schema

    class Point(schema.Record):
        x = schema.Integer()
        label = schema.String()

    return [
        schema.BytesSchema(),
        schema.StringSchema(),
        schema.JsonSchema(Point),
        schema.AvroSchema(Point),
    ]


def _described(info: Any) -> tuple[int, str, str]:
    return int(info.schema_type()), info.name(), info.schema()


def test_schema_info_methods_match() -> None:
    theirs = [_described(s.schema_info()) for s in _schemas(pulsar)]
    mine = [_described(s.schema_info()) for s in _schemas(starquake.client)]
    assert mine == theirs
    assert [name for _, name, _ in mine] == ["BYTES", "STRING", "JSON", "AVRO"]


def test_protobuf_native_schema_info_methods_match() -> None:
    from google.protobuf import timestamp_pb2

    theirs = pulsar.schema.ProtobufNativeSchema(timestamp_pb2.Timestamp).schema_info()
    mine = starquake.client.schema.ProtobufNativeSchema(timestamp_pb2.Timestamp).schema_info()
    assert _described(mine) == _described(theirs)
    assert mine.name() == "PROTOBUF_NATIVE"


@pytest.mark.parametrize("kwargs", [{}, {"a": 1, "c": 8}])
def test_the_base_record_class_cannot_be_instantiated(
    mod: types.ModuleType, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(AttributeError):
        mod.schema.Record(**kwargs)


def test_schema_version_is_a_str(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic, schema=mod.schema.StringSchema())
    producer = client.create_producer(topic, schema=mod.schema.StringSchema())
    producer.send("typed")
    typed = consumer.receive(10_000)
    assert typed.schema_version() == struct.pack(">q", 0).decode()
    plain_topic = f"{topic}-bytes"
    plain_consumer = subscribe_earliest(mod, client, plain_topic)
    client.create_producer(plain_topic).send(b"raw")
    assert plain_consumer.receive(10_000).schema_version() == ""


def _nested_values(mod: types.ModuleType) -> tuple[Any, dict[str, Any]]:
    schema = mod.schema

    class Color(enum.Enum):
        RED = 1
        BLUE = 2

    class Inner(schema.Record):
        n = schema.Integer()
        color = schema.CustomEnum(Color)

    class Outer(schema.Record):
        inner = Inner
        items = schema.Array(Inner())
        by_name = schema.Map(Inner())
        colors = schema.Array(schema.CustomEnum(Color))

    inner = Inner(n=1, color=Color.RED)
    values = {
        "inner": inner,
        "items": [inner, Inner(n=2, color=Color.BLUE)],
        "by_name": {"a": inner},
        "colors": [Color.BLUE],
        "plain": b"x",
    }
    return schema.AvroSchema(Outer), values


def _fields_only(value: Any) -> Any:
    """``value`` without the official ``Record``'s private attributes, which its
    ``encode_dict`` copies from nested records' ``__dict__`` (Avro ignores them)."""
    if isinstance(value, dict):
        return {k: _fields_only(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [_fields_only(v) for v in value]
    return value


def test_avro_encode_dict_matches() -> None:
    """``AvroSchema.encode_dict``: what a record's field values become before Avro encoding."""
    theirs_schema, theirs = _nested_values(pulsar)
    mine_schema, mine = _nested_values(starquake.client)
    expected = _fields_only(theirs_schema.encode_dict(theirs))
    assert mine_schema.encode_dict(mine) == expected
    assert expected["inner"] == {"n": 1, "color": "RED"}
    assert expected["colors"] == ["BLUE"]
