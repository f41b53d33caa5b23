"""KeyValueSchema: declaration, INLINE and SEPARATED payloads, reading other versions."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.client.schema import (
    AvroSchema,
    BytesSchema,
    Int32Schema,
    Integer,
    JsonSchema,
    KeyValueEncoding,
    KeyValueSchema,
    Record,
    String,
    StringSchema,
)
from starquake.common.schema_info import (
    SchemaInfo,
    SchemaType,
    pack_key_value_schema,
    unpack_key_value_schema,
)


class UserV1(Record):
    name = String(required=True)


class UserV2(Record):
    name = String(required=True)
    age = Integer(default=-1, required=True, required_default=True)


def test_schema_info_packs_both_parts() -> None:
    key, value = StringSchema(), AvroSchema(UserV1)
    info = KeyValueSchema(key, value).schema_info()
    assert info.type is SchemaType.KEY_VALUE
    assert info.name == "KeyValue"
    assert info == pack_key_value_schema(key.schema_info(), value.schema_info())
    key_info, value_info, encoding = unpack_key_value_schema(info)
    assert (key_info.type, value_info.type, encoding) == (
        SchemaType.STRING,
        SchemaType.AVRO,
        KeyValueEncoding.INLINE,
    )
    assert value_info.data == value.schema_info().data
    assert json.loads(value_info.data)["name"] == "UserV1"
    separated = KeyValueSchema(key, value, KeyValueEncoding.SEPARATED).schema_info()
    assert separated.properties["kv.encoding.type"] == "SEPARATED"


def test_inline_payload_layout() -> None:
    schema = KeyValueSchema(StringSchema(), Int32Schema())
    payload = schema.encode(("k", 7))
    assert payload == struct.pack(">i", 1) + b"k" + struct.pack(">i", 4) + struct.pack(">i", 7)
    assert schema.decode(payload) == ("k", 7)
    assert schema.encode(["k", 7]) == payload


def test_separated_payload_is_the_value_alone() -> None:
    schema = KeyValueSchema(StringSchema(), JsonSchema(UserV1), KeyValueEncoding.SEPARATED)
    payload = schema.encode(("the-key", UserV1(name="n")))
    assert payload == JsonSchema(UserV1).encode(UserV1(name="n"))
    assert schema.decode(payload) == (None, UserV1(name="n"))
    assert schema.encode_key("the-key") == b"the-key"
    assert schema.decode_key(b"the-key") == "the-key"
    assert schema.encoding == KeyValueEncoding.SEPARATED


def test_needs_writer_schema_when_a_part_is_avro() -> None:
    assert not KeyValueSchema(StringSchema(), JsonSchema(UserV1)).needs_writer_schema
    assert KeyValueSchema(StringSchema(), AvroSchema(UserV1)).needs_writer_schema
    assert KeyValueSchema(AvroSchema(UserV1), BytesSchema()).needs_writer_schema


def test_reads_pairs_written_with_an_older_value_schema() -> None:
    old = KeyValueSchema(AvroSchema(UserV1), AvroSchema(UserV1))
    new = KeyValueSchema(AvroSchema(UserV2), AvroSchema(UserV2))
    payload = old.encode((UserV1(name="k"), UserV1(name="v")))
    key, value = new.decode_with_writer(payload, old.schema_info())
    assert key == UserV2(name="k", age=-1)
    assert value == UserV2(name="v", age=-1)
    back = old.decode_with_writer(new.encode((UserV2(name="a", age=1), value)), new.schema_info())
    assert back == (UserV1(name="a"), UserV1(name="v"))
    assert new.decode_key_with_writer(old.encode_key(UserV1(name="q")), old.schema_info()) == (
        UserV2(name="q")
    )


def test_separated_reads_value_with_writer() -> None:
    old = KeyValueSchema(StringSchema(), AvroSchema(UserV1), KeyValueEncoding.SEPARATED)
    new = KeyValueSchema(StringSchema(), AvroSchema(UserV2), KeyValueEncoding.SEPARATED)
    payload = old.encode(("k", UserV1(name="v")))
    assert new.decode_with_writer(payload, old.schema_info()) == (None, UserV2(name="v"))


def test_non_key_value_writer_is_ignored() -> None:
    schema = KeyValueSchema(StringSchema(), StringSchema())
    payload = schema.encode(("a", "b"))
    assert schema.decode_with_writer(payload, SchemaInfo(SchemaType.BYTES)) == ("a", "b")
    assert schema.decode_key_with_writer(b"a", SchemaInfo(SchemaType.BYTES)) == "a"


def test_errors() -> None:
    schema = KeyValueSchema(StringSchema(), StringSchema())
    with pytest.raises(TypeError):
        schema.encode("not a pair")
    with pytest.raises(TypeError):
        schema.encode(("a", "b", "c"))
    with pytest.raises(TypeError):
        schema.encode((1, "b"))
    with pytest.raises(ValueError):
        schema.decode(b"\x00\x00")
    with pytest.raises(ValueError):
        KeyValueSchema(StringSchema(), StringSchema(), "SIDEWAYS")
    with pytest.raises(TypeError):
        KeyValueSchema(StringSchema(), str)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=20), st.text(max_size=20))
def test_bytes_and_string_pairs_round_trip(key: bytes, value: str) -> None:
    schema = KeyValueSchema(BytesSchema(), StringSchema())
    assert schema.decode(schema.encode((key, value))) == (key, value)
