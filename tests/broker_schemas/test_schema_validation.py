from __future__ import annotations

import base64
import json
import struct

import pytest
from schema_samples import field, key_value, message_file, native, native_definition, record

from starquake.broker.errors import BrokerServiceError
from starquake.broker.schemas.validation import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    protobuf_native_root,
    validate,
)
from starquake.common.schema_info import SchemaInfo, SchemaType
from starquake.protocol.errors import ServerError

PRIMITIVES = [
    SchemaType.BOOLEAN,
    SchemaType.INT8,
    SchemaType.INT16,
    SchemaType.INT32,
    SchemaType.INT64,
    SchemaType.FLOAT,
    SchemaType.DOUBLE,
    SchemaType.DATE,
    SchemaType.TIME,
    SchemaType.TIMESTAMP,
    SchemaType.INSTANT,
    SchemaType.LOCAL_DATE,
    SchemaType.LOCAL_TIME,
    SchemaType.LOCAL_DATE_TIME,
]
USER = record([field("name", "string"), field("age", "int", default=0)])


def _invalid(schema: SchemaInfo, fragment: str) -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        validate(schema)
    assert fragment.lower() in str(caught.value).lower()


def test_errors_carry_the_incompatible_schema_code() -> None:
    for error in (InvalidSchemaError("x"), IncompatibleSchemaError("y")):
        assert isinstance(error, BrokerServiceError)
        assert error.code is ServerError.IncompatibleSchema


@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF])
def test_struct_records_are_valid(kind: SchemaType) -> None:
    validate(record(USER_FIELDS, kind=kind))


USER_FIELDS = [
    field("name", "string"),
    field("tags", {"type": "array", "items": "string"}),
    field("extra", {"type": "map", "values": ["null", "long"]}),
    field("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"}),
    field("hash", {"type": "fixed", "name": "Hash", "size": 4}),
    field("when", {"type": "long", "logicalType": "timestamp-millis"}),
    field("odd", {"type": "string", "logicalType": "not-a-known-logical-type"}),
]


def test_lenient_names_and_unchecked_defaults_are_accepted() -> None:
    # '$' appears in the names of nested Java classes; defaults are not checked against types.
    validate(record([field("x", "int", default="not an int")], name="Outer$Inner"))
    validate(record([field("größe", "int")], name="Maß", namespace="com.example"))


def test_non_record_avro_definitions_other_than_unions_are_accepted() -> None:
    validate(SchemaInfo(SchemaType.AVRO, b'"string"'))
    validate(SchemaInfo(SchemaType.AVRO, b'{"type": "array", "items": "int"}'))
    validate(SchemaInfo(SchemaType.JSON, b'["null", "string"]'))
    _invalid(SchemaInfo(SchemaType.AVRO, b'["null", "string"]'), "[UNION] is not supported")


def test_invalid_json_is_rejected() -> None:
    _invalid(SchemaInfo(SchemaType.AVRO, b'{"type": "record",'), "not valid JSON")
    _invalid(SchemaInfo(SchemaType.JSON, b""), "JSON schema")


@pytest.mark.parametrize(
    "definition",
    [
        b"42",
        b'{"fields": []}',
        b'{"type": "record", "fields": []}',
        b'{"type": "record", "name": "R", "fields": 5}',
        b'{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
        b'{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},'
        b' {"name": "a", "type": "long"}]}',
    ],
)
def test_json_that_is_not_an_avro_schema_is_rejected(definition: bytes) -> None:
    _invalid(SchemaInfo(SchemaType.AVRO, definition), "Invalid schema definition data for AVRO")


def test_unknown_avro_type_names_are_rejected() -> None:
    _invalid(record([field("a", "Nope")]), "Nope")
    _invalid(SchemaInfo(SchemaType.AVRO, b'{"type": "integer"}'), "integer")


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        (record([], name="bad-name"), "illegal name 'bad-name'"),
        (record([field("1st", "int")]), "illegal field name '1st'"),
        (
            record([field("e", {"type": "enum", "name": "E", "symbols": ["ok", "not ok"]})]),
            "enum symbol",
        ),
        (
            record([field("e", {"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"})]),
            "enum default 'Z'",
        ),
    ],
)
def test_bad_names_are_rejected(schema: SchemaInfo, fragment: str) -> None:
    _invalid(schema, fragment)


def test_json_accepts_legacy_json_schema_documents_only() -> None:
    legacy = {"type": "object", "id": "urn:jsonschema:demo:User", "properties": {}}
    validate(SchemaInfo(SchemaType.JSON, json.dumps(legacy).encode()))
    # The same document is not an AVRO definition, and a JSON object of no known kind is invalid.
    _invalid(SchemaInfo(SchemaType.AVRO, json.dumps(legacy).encode()), "AVRO")
    _invalid(SchemaInfo(SchemaType.JSON, b'{"type": "objet"}'), "JSON")


@pytest.mark.parametrize("kind", PRIMITIVES)
def test_primitive_types_take_no_definition(kind: SchemaType) -> None:
    validate(SchemaInfo(kind))
    _invalid(SchemaInfo(kind, b"x"), "should be empty, but 1 bytes were given")


def test_string_takes_no_definition_except_null() -> None:
    validate(SchemaInfo(SchemaType.STRING))
    validate(SchemaInfo(SchemaType.STRING, b"null"))
    _invalid(SchemaInfo(SchemaType.STRING, b'{"type": "string"}'), "string schema")


@pytest.mark.parametrize("kind", [SchemaType.BYTES, SchemaType.NONE])
def test_bytes_and_none_are_never_looked_at(kind: SchemaType) -> None:
    validate(SchemaInfo(kind))
    validate(SchemaInfo(kind, b"anything"))


@pytest.mark.parametrize(
    "kind", [SchemaType.AUTO, SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH]
)
def test_auto_kinds_cannot_be_stored(kind: SchemaType) -> None:
    _invalid(SchemaInfo(kind), "client-side schema type")


def test_protobuf_native_definitions_are_valid() -> None:
    validate(native())
    assert protobuf_native_root(native("Invoice").data) == "demo.Invoice"


def test_protobuf_native_with_imports_and_nested_root() -> None:
    common = message_file("common.proto", "demo.common", {"Money": ["units"]})
    order = message_file("order.proto", "demo", {"Order": ["id"]}, dependencies=["common.proto"])
    money = order.message_type[0].field.add(name="total", number=2, type_name=".demo.common.Money")
    money.type = money.TYPE_MESSAGE
    money.label = money.LABEL_OPTIONAL
    order.message_type[0].nested_type.add(name="Line")
    definition = native_definition([order, common], "demo.Order.Line", "order.proto")
    validate(SchemaInfo(SchemaType.PROTOBUF_NATIVE, definition))
    assert protobuf_native_root(definition) == "demo.Order.Line"
    # Without the imported file the root file does not build.
    broken = native_definition([order], "demo.Order", "order.proto")
    _invalid(SchemaInfo(SchemaType.PROTOBUF_NATIVE, broken), "'common.proto'")


def _native_document(**changes: object) -> bytes:
    document = json.loads(native().data)
    document.update(changes)
    return json.dumps({k: v for k, v in document.items() if v is not None}).encode()


@pytest.mark.parametrize(
    ("definition", "fragment"),
    [
        (b"not json", "not a JSON object"),
        (b"[1, 2]", "not a JSON object"),
        (_native_document(fileDescriptorSet=None), "fileDescriptorSet"),
        (_native_document(rootFileDescriptorName=None), "rootFileDescriptorName"),
        (_native_document(fileDescriptorSet="***"), "does not parse"),
        (
            _native_document(fileDescriptorSet=base64.b64encode(b"\xff\xff\xff").decode()),
            "does not parse",
        ),
        (_native_document(rootFileDescriptorName="other.proto"), "'other.proto'"),
        (_native_document(rootMessageTypeName="demo.Missing"), "not declared"),
        (_native_document(rootMessageTypeName="Order"), "outside package"),
        (_native_document(rootMessageTypeName="demo."), "outside package"),
    ],
)
def test_malformed_protobuf_native_definitions_are_rejected(
    definition: bytes, fragment: str
) -> None:
    _invalid(SchemaInfo(SchemaType.PROTOBUF_NATIVE, definition), fragment)


def test_protobuf_native_file_that_does_not_build_is_rejected() -> None:
    proto = message_file("order.proto", "demo", {"Order": ["id", "id"]})  # duplicate field name
    definition = native_definition([proto], "demo.Order", "order.proto")
    _invalid(SchemaInfo(SchemaType.PROTOBUF_NATIVE, definition), "does not build")


def test_key_value_validates_both_parts() -> None:
    validate(key_value(SchemaInfo(SchemaType.STRING), USER))
    validate(key_value(native(), SchemaInfo(SchemaType.INT64)))
    _invalid(key_value(SchemaInfo(SchemaType.STRING, b"xyz"), USER), "key schema")
    _invalid(
        key_value(SchemaInfo(SchemaType.STRING), SchemaInfo(SchemaType.AVRO, b"{")), "value schema"
    )


def test_bad_key_value_packing_is_rejected() -> None:
    good = key_value(SchemaInfo(SchemaType.STRING), USER)
    _invalid(SchemaInfo(SchemaType.KEY_VALUE, good.data[:-3], good.properties), "KEY_VALUE")
    _invalid(SchemaInfo(SchemaType.KEY_VALUE, struct.pack(">i", 10), good.properties), "KEY_VALUE")
    wrong_type = {**good.properties, "key.schema.type": "NOT_A_TYPE"}
    _invalid(SchemaInfo(SchemaType.KEY_VALUE, good.data, wrong_type), "NOT_A_TYPE")
    wrong_encoding = {**good.properties, "kv.encoding.type": "SIDEWAYS"}
    _invalid(SchemaInfo(SchemaType.KEY_VALUE, good.data, wrong_encoding), "SIDEWAYS")
    auto_part = {**good.properties, "key.schema.type": "AUTO_CONSUME"}
    _invalid(SchemaInfo(SchemaType.KEY_VALUE, good.data, auto_part), "client-side")
