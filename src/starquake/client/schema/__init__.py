"""Schemas of the client: typed message values, their payloads and their declarations.

The names and behaviour follow the official Python client's ``pulsar.schema``: records declared
as :class:`Record` subclasses with typed fields, encoded as JSON (:class:`JsonSchema`) or Avro
(:class:`AvroSchema`), protobuf messages (:class:`ProtobufNativeSchema`), plain bytes and
strings. A record class generates the same Avro schema text as the official client's, so both
clients register the same schema version. :class:`KeyValueSchema` and the fixed-size primitive
schemas follow Pulsar's Java client.

Every schema offers :meth:`Schema.schema_info` (what the producer or consumer declares),
:meth:`Schema.encode` and :meth:`Schema.decode`; :meth:`Schema.decode_with_writer` reads
payloads written under another version of the schema, which needs that version's definition
when :attr:`Schema.needs_writer_schema` is true.

This package does no I/O.
"""

from __future__ import annotations

from starquake.client.schema._base import Schema
from starquake.client.schema._complex import Array, CustomEnum, Map
from starquake.client.schema._fields import (
    Boolean,
    Bytes,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Null,
    String,
)
from starquake.client.schema._key_value import KeyValueSchema
from starquake.client.schema._primitive import (
    BooleanSchema,
    BytesSchema,
    DoubleSchema,
    FloatSchema,
    Int8Schema,
    Int16Schema,
    Int32Schema,
    Int64Schema,
    StringSchema,
)
from starquake.client.schema._protobuf import ProtobufNativeSchema
from starquake.client.schema._record import Record
from starquake.client.schema._struct import AvroSchema, JsonSchema
from starquake.common.schema_info import KeyValueEncoding, SchemaInfo, SchemaType

__all__ = [
    "Array",
    "AvroSchema",
    "Boolean",
    "BooleanSchema",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "DoubleSchema",
    "Field",
    "Float",
    "FloatSchema",
    "Int8Schema",
    "Int16Schema",
    "Int32Schema",
    "Int64Schema",
    "Integer",
    "JsonSchema",
    "KeyValueEncoding",
    "KeyValueSchema",
    "Long",
    "Map",
    "Null",
    "ProtobufNativeSchema",
    "Record",
    "Schema",
    "SchemaInfo",
    "SchemaType",
    "String",
    "StringSchema",
]
