"""Row layouts of reads with ``schema.decode``: topic schemas mapped to Spark types.

AVRO and JSON schemas are Avro schemas. A record's fields become top-level columns, followed by
the metadata columns; any other Avro schema becomes one column ``value``. Avro types map to
Spark types as follows:

========================================  =====================================
Avro                                      Spark
========================================  =====================================
boolean, int, long, float, double         BooleanType, IntegerType, LongType,
                                          FloatType, DoubleType
string, enum, string with logical uuid    StringType
bytes, fixed                              BinaryType
bytes/fixed with logical decimal          DecimalType(precision, scale)
int with logical date                     DateType
long with logical timestamp-millis/micros TimestampType
long with logical local-timestamp-*       TimestampNTZType
array, map                                ArrayType, MapType(StringType, ...)
record                                    StructType
["null", X] (in any order)                X, nullable
========================================  =====================================

Other unions, ``null`` alone, recursive records and the logical types time-millis and
time-micros are refused. Top-level columns are always nullable: a message whose value is null
(a tombstone) gives nulls in every value column. STRING and the fixed-size primitive schemas
give one column ``value``; BYTES or no schema gives the raw layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
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

from starquake.client.schema import SchemaInfo, SchemaType
from starquake.spark._avro_names import full_name, reference_candidates
from starquake.spark._options import PulsarOptionError
from starquake.spark._rows import METADATA_FIELDS, SOURCE_SCHEMA

__all__ = ["RowLayout", "avro_to_spark", "layout_of"]

_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
}
_LOGICAL: dict[tuple[str, str], DataType] = {
    ("int", "date"): DateType(),
    ("long", "timestamp-millis"): TimestampType(),
    ("long", "timestamp-micros"): TimestampType(),
    ("long", "local-timestamp-millis"): TimestampNTZType(),
    ("long", "local-timestamp-micros"): TimestampNTZType(),
    ("string", "uuid"): StringType(),
}
_REFUSED_LOGICAL = {"time-millis", "time-micros"}
# Primitive schema types read as one typed column ``value``.
_VALUE_TYPES: dict[SchemaType, DataType] = {
    SchemaType.STRING: StringType(),
    SchemaType.BOOLEAN: BooleanType(),
    SchemaType.INT8: ByteType(),
    SchemaType.INT16: ShortType(),
    SchemaType.INT32: IntegerType(),
    SchemaType.INT64: LongType(),
    SchemaType.FLOAT: FloatType(),
    SchemaType.DOUBLE: DoubleType(),
}
_METADATA_NAMES = {f.name for f in METADATA_FIELDS}


class AvroMappingError(PulsarOptionError):
    """An Avro schema has a type that no Spark column can hold."""


class _Names:
    """Named Avro types seen so far (records, enums, fixed), by full name."""

    def __init__(self) -> None:
        self.types: dict[str, DataType | None] = {}  # None: a record still being mapped

    def lookup(self, name: str, namespace: str) -> DataType:
        """The Spark type of the named type ``name`` refers to from ``namespace``."""
        for candidate in reference_candidates(name, namespace):
            if candidate in self.types:
                found = self.types[candidate]
                if found is None:
                    raise AvroMappingError(f"record {candidate} contains itself (recursive)")
                return found
        raise AvroMappingError(f"unknown Avro type {name!r}")


def avro_to_spark(schema: Any) -> tuple[DataType, bool]:
    """The Spark type of an Avro schema (parsed JSON) and whether its values may be null.

    Raises :class:`PulsarOptionError` for types without a Spark counterpart."""
    return _map(schema, _Names(), "")


def _map(schema: Any, names: _Names, namespace: str) -> tuple[DataType, bool]:
    if isinstance(schema, list):
        return _union(schema, names, namespace)
    if isinstance(schema, str):
        if schema == "null":
            raise AvroMappingError("a 'null' type alone cannot be a Spark column")
        primitive = _PRIMITIVES.get(schema)
        if primitive is not None:
            return primitive, False
        return names.lookup(schema, namespace), False
    if not isinstance(schema, dict) or "type" not in schema:
        raise AvroMappingError(f"not an Avro schema: {schema!r}")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None:
        found = _logical(schema, str(logical))
        if found is not None:
            if kind == "fixed":
                names.types[full_name(schema, namespace)[0]] = found
            return found, False
    if kind in ("record", "error"):
        return _record(schema, names, namespace), False
    if kind in ("enum", "fixed"):
        named: DataType = StringType() if kind == "enum" else BinaryType()
        names.types[full_name(schema, namespace)[0]] = named
        return named, False
    if kind == "array":
        items, items_null = _map(schema.get("items"), names, namespace)
        return ArrayType(items, containsNull=items_null), False
    if kind == "map":
        values, values_null = _map(schema.get("values"), names, namespace)
        return MapType(StringType(), values, valueContainsNull=values_null), False
    return _map(kind, names, namespace)  # {"type": "int"} and the like


def _logical(schema: dict[str, Any], logical: str) -> DataType | None:
    kind = schema["type"]
    if logical in _REFUSED_LOGICAL:
        raise AvroMappingError(f"the Avro logical type {logical} has no Spark counterpart")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        try:
            precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        except (KeyError, TypeError, ValueError):
            raise AvroMappingError(f"decimal without a valid precision: {schema!r}") from None
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            raise AvroMappingError(f"decimal({precision}, {scale}) does not fit Spark's decimal")
        return DecimalType(precision, scale)
    if isinstance(kind, str):
        return _LOGICAL.get((kind, logical))
    return None  # an unknown logical type reads as its underlying type


def _union(branches: list[Any], names: _Names, namespace: str) -> tuple[DataType, bool]:
    others = [b for b in branches if b != "null"]
    if len(others) != 1:
        shown = json.dumps(branches)
        raise AvroMappingError(
            f"the union {shown} cannot be a Spark column (only a type or [null, type] can)"
        )
    found, _ = _map(others[0], names, namespace)
    return found, len(others) < len(branches)


def _record(schema: dict[str, Any], names: _Names, namespace: str) -> StructType:
    full, own_space = full_name(schema, namespace)
    names.types[full] = None
    fields = []
    for f in schema.get("fields") or []:
        if not isinstance(f, dict) or "name" not in f:
            raise AvroMappingError(f"record {full}: a field without a name: {f!r}")
        try:
            kind, nullable = _map(f.get("type"), names, own_space)
        except AvroMappingError as exc:
            raise AvroMappingError(f"field {f['name']!r} of record {full}: {exc}") from None
        fields.append(StructField(str(f["name"]), kind, nullable))
    struct = StructType(fields)
    names.types[full] = struct
    return struct


@dataclass(frozen=True)
class RowLayout:
    """The rows a read produces: ``kind`` is ``raw`` (payload bytes), ``record`` (an Avro
    record's fields as columns) or ``value`` (one typed ``value`` column); ``info`` is the
    topic schema values are decoded to (the reader schema), ``schema`` the Spark schema."""

    kind: str
    info: SchemaInfo | None
    schema: StructType

    @property
    def value_fields(self) -> list[StructField]:
        """The Spark fields of the decoded value (all but the metadata columns)."""
        return [f for f in self.schema.fields if f.name not in _METADATA_NAMES]


RAW_LAYOUT = RowLayout("raw", None, SOURCE_SCHEMA)


def _definition(info: SchemaInfo, topic: str) -> Any:
    try:
        return json.loads(info.data)
    except ValueError:
        raise AvroMappingError(f"the {info.type.name} schema of {topic} is not JSON") from None


def layout_of(info: SchemaInfo | None, topic: str = "the topic") -> RowLayout:
    """The row layout of a read decoding values written with the schema ``info``."""
    if info is None or info.type in (SchemaType.BYTES, SchemaType.NONE):
        return RAW_LAYOUT
    metadata = list(METADATA_FIELDS)
    if info.type in _VALUE_TYPES:
        value = StructField("value", _VALUE_TYPES[info.type], True)
        return RowLayout("value", info, StructType([value, *metadata]))
    if not info.type.is_struct:
        raise PulsarOptionError(
            f"option 'schema.decode': {topic} has a {info.type.name} schema, which is not "
            "decoded (AVRO, JSON, STRING and the number and boolean schemas are); read it "
            "without schema.decode"
        )
    definition = _definition(info, topic)
    try:
        kind, _nullable = avro_to_spark(definition)
    except AvroMappingError as exc:
        raise AvroMappingError(f"option 'schema.decode': the schema of {topic}: {exc}") from None
    is_record = isinstance(definition, dict) and definition.get("type") in ("record", "error")
    if not is_record:
        value = StructField("value", kind, True)
        return RowLayout("value", info, StructType([value, *metadata]))
    assert isinstance(kind, StructType)
    clash = [f.name for f in kind.fields if f.name in _METADATA_NAMES]
    if clash:
        raise AvroMappingError(
            f"option 'schema.decode': the record of {topic} has a field named {clash[0]!r}, "
            "which is a metadata column"
        )
    fields = [StructField(f.name, f.dataType, True) for f in kind.fields]
    return RowLayout("record", info, StructType([*fields, *metadata]))
