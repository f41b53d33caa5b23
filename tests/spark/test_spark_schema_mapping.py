"""Schema mapping of the Spark source without Spark running: Avro to Spark types (reads with
``schema.decode``), Spark to Avro (writes with ``schema.type``), JSON values, row layouts."""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from starquake.client.schema import AvroSchema, Integer, Record, SchemaInfo, SchemaType, String
from starquake.spark import PulsarOptionError
from starquake.spark._encode import spark_to_avro, write_schema
from starquake.spark._options import read_options, source_target, write_options
from starquake.spark._typed import avro_to_spark, layout_of
from starquake.spark._values import avro_fixer, json_reader

METADATA = [
    "__key",
    "__topic",
    "__messageId",
    "__publishTime",
    "__eventTime",
    "__messageProperties",
]


@pytest.mark.parametrize(
    ("avro", "spark"),
    [
        ("boolean", BooleanType()),
        ("int", IntegerType()),
        ("long", LongType()),
        ("float", FloatType()),
        ("double", DoubleType()),
        ("string", StringType()),
        ("bytes", BinaryType()),
        ({"type": "enum", "name": "Color", "symbols": ["RED"]}, StringType()),
        ({"type": "fixed", "name": "Hash", "size": 4}, BinaryType()),
        ({"type": "int", "logicalType": "date"}, DateType()),
        ({"type": "long", "logicalType": "timestamp-millis"}, TimestampType()),
        ({"type": "long", "logicalType": "timestamp-micros"}, TimestampType()),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, TimestampNTZType()),
        ({"type": "string", "logicalType": "uuid"}, StringType()),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            DecimalType(9, 2),
        ),
        ({"type": "int", "logicalType": "something-else"}, IntegerType()),
        ({"type": "array", "items": "long"}, ArrayType(LongType(), containsNull=False)),
        (
            {"type": "array", "items": ["null", "string"]},
            ArrayType(StringType(), containsNull=True),
        ),
        (
            {"type": "map", "values": ["double", "null"]},
            MapType(StringType(), DoubleType(), valueContainsNull=True),
        ),
    ],
)
def test_avro_types_map_to_spark_types(avro: Any, spark: Any) -> None:
    assert avro_to_spark(avro) == (spark, False)


def test_null_unions_are_nullable_and_other_unions_are_refused() -> None:
    assert avro_to_spark(["null", "int"]) == (IntegerType(), True)
    assert avro_to_spark(["int", "null"]) == (IntegerType(), True)
    assert avro_to_spark(["int"]) == (IntegerType(), False)
    with pytest.raises(PulsarOptionError, match="union"):
        avro_to_spark(["null", "int", "string"])
    with pytest.raises(PulsarOptionError, match="null"):
        avro_to_spark("null")
    with pytest.raises(PulsarOptionError, match="time-millis"):
        avro_to_spark({"type": "int", "logicalType": "time-millis"})


def test_nested_and_named_records() -> None:
    point = {
        "type": "record",
        "name": "Point",
        "namespace": "geo",
        "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": ["null", "int"]}],
    }
    shape = {
        "type": "record",
        "name": "Shape",
        "namespace": "geo",
        "fields": [
            {"name": "center", "type": point},
            {"name": "corners", "type": {"type": "array", "items": "Point"}},
            {"name": "origin", "type": ["null", "geo.Point"]},
        ],
    }
    inner = StructType([StructField("x", IntegerType(), False), StructField("y", IntegerType())])
    assert avro_to_spark(shape) == (
        StructType(
            [
                StructField("center", inner, False),
                StructField("corners", ArrayType(inner, containsNull=False), False),
                StructField("origin", inner, True),
            ]
        ),
        False,
    )


def test_recursive_records_and_unknown_names_are_refused() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(PulsarOptionError, match="recursive"):
        avro_to_spark(node)
    with pytest.raises(PulsarOptionError, match="Nowhere"):
        avro_to_spark({"type": "array", "items": "Nowhere"})


def _avro_info(definition: Any, kind: SchemaType = SchemaType.AVRO) -> SchemaInfo:
    return SchemaInfo(kind, json.dumps(definition).encode(), {}, kind.name)


def test_layouts_of_topic_schemas() -> None:
    class Event(Record):
        name = String(required=True)
        count = Integer()

    layout = layout_of(AvroSchema(Event).schema_info())
    assert layout.kind == "record"
    assert layout.schema.names == ["name", "count", *METADATA]
    # top-level columns are nullable (a null message value gives nulls)
    assert [f.nullable for f in layout.value_fields] == [True, True]
    assert layout.value_fields[1].dataType == IntegerType()

    assert layout_of(None).kind == "raw"
    assert layout_of(SchemaInfo(SchemaType.BYTES)).kind == "raw"
    string = layout_of(SchemaInfo(SchemaType.STRING, b"null"))
    assert (string.kind, string.schema.fields[0].dataType) == ("value", StringType())
    assert layout_of(SchemaInfo(SchemaType.INT16)).schema.fields[0].dataType == ShortType()
    assert layout_of(SchemaInfo(SchemaType.INT8)).schema.fields[0].dataType == ByteType()
    not_record = layout_of(_avro_info({"type": "array", "items": "int"}, SchemaType.JSON))
    assert not_record.kind == "value"
    assert not_record.schema.fields[0].dataType == ArrayType(IntegerType(), False)


def test_layouts_refuse_clashing_names_and_undecoded_types() -> None:
    clash = {"type": "record", "name": "R", "fields": [{"name": "__key", "type": "string"}]}
    with pytest.raises(PulsarOptionError, match="__key"):
        layout_of(_avro_info(clash))
    with pytest.raises(PulsarOptionError, match="PROTOBUF_NATIVE"):
        layout_of(SchemaInfo(SchemaType.PROTOBUF_NATIVE, b"x"))
    with pytest.raises(PulsarOptionError, match="union"):
        layout_of(_avro_info({"type": "record", "name": "R", "fields": [
            {"name": "u", "type": ["int", "string"]}]}))  # fmt: skip


def test_json_values_take_defaults_and_convert_logical_types() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "a", "type": "int"},
            {"name": "b", "type": "string", "default": "dflt"},
            {"name": "c", "type": ["null", "long"]},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "raw", "type": "bytes"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
            {"name": "m", "type": {"type": "map", "values": "E"}},
            {"name": "n", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5}},
        ],
    }
    read = json_reader(schema)
    value = {"a": 1, "d": 2, "t": 1500, "raw": "hi", "e": 3, "m": {"k": "X"}, "n": "1.5"}
    assert read(value) == {
        "a": 1,
        "b": "dflt",
        "c": None,
        "d": datetime.date(1970, 1, 3),
        "t": datetime.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=datetime.UTC),
        "raw": b"hi",
        "e": "3",
        "m": {"k": "X"},
        "n": decimal.Decimal("1.5"),
    }
    with pytest.raises(ValueError, match="'a' is missing"):
        read({"d": 2, "t": 1, "raw": "", "e": "X", "m": {}, "n": 1})
    with pytest.raises(ValueError, match="not an integer"):
        read({**value, "a": "one"})
    with pytest.raises(ValueError, match="null"):
        read({**value, "b": None})


def test_avro_values_need_fixing_only_for_uuids() -> None:
    plain = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    assert avro_fixer(plain) is None
    with_uuid = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "id", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
            {"name": "ids", "type": {"type": "array", "items": "string"}},
        ],
    }
    fix = avro_fixer(with_uuid)
    assert fix is not None
    import uuid

    u = uuid.UUID(int=7)
    assert fix({"id": u, "ids": ["a"]}) == {"id": str(u), "ids": ["a"]}
    assert fix({"id": None, "ids": []}) == {"id": None, "ids": []}


def test_spark_types_map_to_avro_and_back() -> None:
    struct = StructType(
        [
            StructField("name", StringType(), False),
            StructField("count", IntegerType()),
            StructField("small", ShortType()),
            StructField("tags", ArrayType(StringType(), containsNull=False)),
            StructField("scores", MapType(StringType(), DoubleType())),
            StructField("when", TimestampType()),
            StructField("local", TimestampNTZType()),
            StructField("day", DateType()),
            StructField("price", DecimalType(10, 2)),
            StructField("blob", BinaryType()),
            StructField("inner", StructType([StructField("x", LongType(), False)])),
        ]
    )
    avro = spark_to_avro(struct, "Row")
    assert avro["name"] == "Row"
    fields = {f["name"]: f for f in avro["fields"]}
    assert fields["name"] == {"name": "name", "type": "string"}
    assert fields["count"] == {"name": "count", "type": ["null", "int"], "default": None}
    assert fields["inner"]["type"][1]["name"] == "Row_inner"
    back, _ = avro_to_spark(avro)
    assert isinstance(back, StructType)
    # what changes on the way: small ints widen, nullability stays
    expected = [
        StructField(f.name, IntegerType() if f.name == "small" else f.dataType, f.nullable)
        for f in struct.fields
    ]
    assert back.fields == expected
    AvroSchema(None, schema_definition=avro)  # a schema the client accepts


def test_write_schema_rules() -> None:
    flat = StructType(
        [
            StructField("a", IntegerType()),
            StructField("b", StringType()),
            StructField("__key", StringType()),
        ]
    )
    spec = write_schema({"schema.type": "AVRO", "schema.name": "ns.Thing"}, flat)
    assert spec is not None
    assert (spec.kind, spec.columns, spec.nested) == ("avro", ("a", "b"), False)
    assert spec.definition["name"] == "ns.Thing"
    nested = StructType([StructField("value", StructType([StructField("x", LongType())]))])
    spec = write_schema({"schema.type": "json"}, nested)
    assert spec is not None and spec.nested
    assert [f["name"] for f in spec.definition["fields"]] == ["x"]
    assert write_schema({}, flat) is None
    with pytest.raises(PulsarOptionError, match="protobuf"):
        write_schema({"schema.type": "protobuf"}, flat)
    with pytest.raises(PulsarOptionError, match="one string column"):
        write_schema({"schema.type": "string"}, flat)
    with pytest.raises(PulsarOptionError, match=r"needs the option 'schema\.type'"):
        write_schema({"schema.name": "X"}, flat)
    with pytest.raises(PulsarOptionError, match="not a valid Avro field name"):
        write_schema({"schema.type": "avro"}, StructType([StructField("a b", LongType())]))
    with pytest.raises(PulsarOptionError, match="string keys"):
        write_schema(
            {"schema.type": "avro"},
            StructType([StructField("m", MapType(LongType(), LongType()))]),
        )


def test_schema_options_are_checked() -> None:
    assert source_target({"topic": "t"}) is None
    assert source_target({"topic": "t", "schema.decode": "false"}) is None
    target = source_target({"topics": "a,b", "Schema.Decode": "TRUE"})
    assert target is not None and target.topics == (
        "persistent://public/default/a",
        "persistent://public/default/b",
    )
    with pytest.raises(PulsarOptionError, match=r"schema\.decode"):
        source_target({"topic": "t", "schema.decode": "yes"})
    read_options({"topic": "t", "schema.decode": "true"}, streaming=True)
    write_options({"topic": "t", "schema.type": "avro", "schema.name": "R"})
