"""Writes with ``schema.type``: values encoded with a schema derived from the DataFrame's.

The value columns are the columns whose names do not start with ``__`` and are not ``headers``
(those keep their meaning: key, event time, properties, topic, Kafka's headers). With
``schema.type`` ``avro`` or ``json`` they become one record: the fields of a single struct
column ``value``, or else the value columns themselves, in their order. The record's Avro schema
(named by ``schema.name``, default ``Row``) is what the producers declare, so the topic
registers it and every message carries its version. Spark types map to Avro types as follows:
boolean; byte, short and int as ``int``; long; float; double; string; binary as ``bytes``; date
as ``int``/``date``; timestamp as ``long``/``timestamp-micros``; timestamp_ntz as
``long``/``local-timestamp-micros``; decimal as ``bytes``/``decimal``; array; map with string
keys; struct as a nested record named ``<parent>_<field>``. A nullable column or element becomes
``["null", type]``, a nullable record field with the default null.

JSON payloads hold the record as a JSON object: binary as UTF-8 text, dates as day counts,
timestamps as microseconds since the epoch, decimals as text.

With ``schema.type`` ``string`` the value is one string column ``value``, sent as UTF-8
under the STRING schema.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
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
    StructType,
    TimestampNTZType,
    TimestampType,
)

from starquake.client.schema import AvroSchema, Schema, SchemaType, StringSchema
from starquake.spark._options import PulsarOptionError
from starquake.spark._sink import PulsarSinkError

__all__ = ["RowEncoder", "WriteSchema", "spark_to_avro", "write_schema"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIMPLE: list[tuple[type[DataType], Any]] = [
    (BooleanType, "boolean"),
    (ByteType, "int"),
    (ShortType, "int"),
    (IntegerType, "int"),
    (LongType, "long"),
    (FloatType, "float"),
    (DoubleType, "double"),
    (StringType, "string"),
    (BinaryType, "bytes"),
    (DateType, {"type": "int", "logicalType": "date"}),
    (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
    (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
]
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_MICRO = datetime.timedelta(microseconds=1)

Convert = Callable[[Any], Any]


def _nullable(avro: Any, nullable: bool) -> Any:
    return ["null", avro] if nullable else avro


def spark_to_avro(data_type: DataType, name: str = "Row") -> Any:
    """The Avro type of values of ``data_type`` (records named ``name``, nested ones
    ``<name>_<field>``); :class:`PulsarOptionError` for types Avro cannot hold."""
    for kind, avro in _SIMPLE:
        if type(data_type) is kind:
            return dict(avro) if isinstance(avro, dict) else avro
    if isinstance(data_type, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    if isinstance(data_type, ArrayType):
        items = spark_to_avro(data_type.elementType, name)
        return {"type": "array", "items": _nullable(items, data_type.containsNull)}
    if isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise PulsarOptionError(
                f"option 'schema.type': {data_type.simpleString()} has keys that are not "
                "strings; Avro maps have string keys"
            )
        values = spark_to_avro(data_type.valueType, name)
        return {"type": "map", "values": _nullable(values, data_type.valueContainsNull)}
    if isinstance(data_type, StructType):
        return record_schema(data_type, name)
    raise PulsarOptionError(
        f"option 'schema.type': {data_type.simpleString()} has no Avro counterpart"
    )


def record_schema(struct: StructType, name: str) -> dict[str, Any]:
    """The Avro record schema of rows of ``struct``."""
    local = name.rpartition(".")[2]
    fields: list[dict[str, Any]] = []
    for f in struct.fields:
        if not _NAME.fullmatch(f.name):
            raise PulsarOptionError(
                f"option 'schema.type': column {f.name!r} is not a valid Avro field name "
                "(letters, digits and '_', not starting with a digit); rename it"
            )
        avro = spark_to_avro(f.dataType, f"{local}_{f.name}")
        field: dict[str, Any] = {"name": f.name, "type": _nullable(avro, f.nullable)}
        if f.nullable:
            field["default"] = None
        fields.append(field)
    return {"type": "record", "name": name, "fields": fields}


class _JsonDeclaration(Schema):
    """The JSON schema of a record given by its Avro definition (values are plain dicts)."""

    def __init__(self, definition: Any) -> None:
        super().__init__(dict, SchemaType.JSON, definition, "JSON")

    def encode(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


@dataclass(frozen=True)
class WriteSchema:
    """How a write with ``schema.type`` encodes values: ``kind`` (avro, json, string), the
    columns that make a value, whether they are the fields of one struct column ``value``,
    and the record's Avro schema (None for string)."""

    kind: str
    columns: tuple[str, ...]
    nested: bool
    definition: Any
    struct: StructType

    def producer_schema(self) -> Schema:
        """The schema the producers declare."""
        if self.kind == "avro":
            return AvroSchema(None, schema_definition=self.definition)
        if self.kind == "json":
            return _JsonDeclaration(self.definition)
        return StringSchema()


def write_schema(options: Mapping[str, str], schema: StructType) -> WriteSchema | None:
    """The ``schema.type`` of a write checked against the DataFrame's ``schema`` (None when
    the option is absent); :class:`PulsarOptionError` when they do not fit."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    kind = lowered.get("schema.type")
    name = lowered.get("schema.name")
    if kind is None:
        if name is not None:
            raise PulsarOptionError("option 'schema.name' needs the option 'schema.type'")
        return None
    kind = kind.strip().lower()
    if kind not in ("avro", "json", "string"):
        raise PulsarOptionError(f"option 'schema.type': {kind!r} is not avro, json or string")
    values = [f for f in schema.fields if not f.name.startswith("__") and f.name != "headers"]
    if not values:
        raise PulsarOptionError("option 'schema.type': the DataFrame has no value column")
    columns = tuple(f.name for f in values)
    if kind == "string":
        if name is not None:
            raise PulsarOptionError("option 'schema.name' is for schema.type avro or json")
        if columns != ("value",) or not isinstance(values[0].dataType, StringType):
            raise PulsarOptionError(
                "option 'schema.type' string: write one string column 'value' "
                f"(got {', '.join(f'{f.name} {f.dataType.simpleString()}' for f in values)})"
            )
        return WriteSchema(kind, columns, False, None, StructType(values))
    name = (name or "Row").strip()
    if not all(_NAME.fullmatch(part) for part in name.split(".")):
        raise PulsarOptionError(f"option 'schema.name': {name!r} is not an Avro record name")
    nested = columns == ("value",) and isinstance(values[0].dataType, StructType)
    struct = values[0].dataType if nested else StructType(values)
    assert isinstance(struct, StructType)
    return WriteSchema(kind, columns, nested, record_schema(struct, name), struct)


# --- encoding ---------------------------------------------------------------------------------


def _converter(data_type: DataType, for_json: bool) -> Convert | None:
    """What an Arrow-produced Python value of ``data_type`` needs before encoding."""
    if isinstance(data_type, StructType):
        parts = [(f.name, _converter(f.dataType, for_json)) for f in data_type.fields]
        fixes = [(n, c) for n, c in parts if c is not None]
        if not fixes:
            return None

        def fix_record(v: dict[str, Any]) -> dict[str, Any]:
            out = dict(v)
            for n, c in fixes:
                if out[n] is not None:
                    out[n] = c(out[n])
            return out

        return fix_record
    if isinstance(data_type, ArrayType):
        item = _converter(data_type.elementType, for_json)
        if item is None:
            return None
        return lambda v: [None if x is None else item(x) for x in v]
    if isinstance(data_type, MapType):  # Arrow gives maps as lists of pairs
        value = _converter(data_type.valueType, for_json)
        if value is None:
            return dict
        return lambda v: {k: None if x is None else value(x) for k, x in v}
    if not for_json:
        return None
    if isinstance(data_type, BinaryType):
        return lambda v: bytes(v).decode("utf-8")
    if isinstance(data_type, DateType):
        return lambda v: (v - _EPOCH_DATE).days
    if isinstance(data_type, TimestampType):
        return lambda v: (v - _EPOCH) // _MICRO
    if isinstance(data_type, TimestampNTZType):
        return lambda v: (v - _EPOCH_NAIVE) // _MICRO
    if isinstance(data_type, DecimalType):
        return str
    return None


class RowEncoder:
    """Encodes the value columns of Arrow batches as :class:`WriteSchema` says."""

    def __init__(self, spec: WriteSchema) -> None:
        self._spec = spec
        self._convert = _converter(spec.struct, spec.kind == "json")
        self._encode: Callable[[Any], bytes] = spec.producer_schema().encode

    def encode(self, batch: pa.RecordBatch, first: int) -> list[bytes | None]:
        """The payloads of the rows of ``batch`` (row ``i`` is row ``first + i`` of the task).

        Raises :class:`PulsarSinkError` naming the row that does not encode."""
        spec = self._spec
        if spec.nested:
            records: list[Any] = batch.column(batch.schema.get_field_index("value")).to_pylist()
        else:
            records = batch.select(list(spec.columns)).to_pylist()
        convert, encode = self._convert, self._encode
        out: list[bytes | None] = []
        append = out.append
        for i, record in enumerate(records):
            if record is None:
                append(None)
                continue
            try:
                append(encode(record if convert is None else convert(record)))
            except Exception as exc:  # the Avro encoder's errors have no common base
                raise PulsarSinkError(
                    f"row {first + i} does not encode as {spec.kind}: {exc}"
                ) from None
        return out
