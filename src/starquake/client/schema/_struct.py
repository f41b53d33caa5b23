"""Record schemas: ``JsonSchema`` and ``AvroSchema``.

Both declare the record's Avro schema (:meth:`Record.schema`) as their definition, under the
names ``JSON`` and ``AVRO`` with no properties.

JSON payloads are a JSON object of the record's fields in declaration order, indented by one
space: enum members as their values, ``bytes`` as UTF-8 text, nested records as objects.

Avro payloads are the record in Avro binary encoding with no container header or schema
fingerprint: enum members as their names, nested records as records. Reading a payload written
under another version of the schema resolves the writer's schema against this one (fields the
writer lacks take the reader's defaults, fields the reader lacks are skipped); the writer's
top-level record name is taken to be the reader's, so renaming the record class keeps old data
readable.
"""

from __future__ import annotations

import copy
import enum
import io
import json
from typing import Any

from starquake.client.schema._base import Schema
from starquake.client.schema._record import (
    Record,
    field_values,
    record_from_mapping,
    record_schema,
)
from starquake.common.schema_info import SchemaInfo, SchemaType

__all__ = ["AvroSchema", "JsonSchema"]

# Parsed writer schemas kept per AvroSchema instance (distinct schema versions seen).
_WRITER_CACHE_SIZE = 64


def _record_class(record_cls: Any, schema: str) -> type[Record]:
    if not (isinstance(record_cls, type) and issubclass(record_cls, Record)):
        raise TypeError(f"{schema} needs a Record subclass, got {record_cls!r}")
    return record_cls


def _json_default(value: Any) -> Any:
    """JSON form of the values ``json`` cannot encode by itself."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, Record):
        return field_values(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _avro_datum(value: Any) -> Any:
    """``value`` with records as dicts and enum members as their names."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Record):
        return {name: _avro_datum(item) for name, item in field_values(value).items()}
    if isinstance(value, list):
        return [_avro_datum(item) for item in value]
    if isinstance(value, dict):
        return {key: _avro_datum(item) for key, item in value.items()}
    return value


class JsonSchema(Schema):
    """Records of ``record_cls`` as JSON objects.

    Decoding ignores unknown keys and gives missing fields their defaults, so any version of
    the record reads any other's payloads.
    """

    def __init__(self, record_cls: type[Record]) -> None:
        cls = _record_class(record_cls, "JsonSchema")
        super().__init__(cls, SchemaType.JSON, record_schema(cls), "JSON")

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        text = json.dumps(field_values(obj), default=_json_default, indent=1)
        return text.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        loaded = json.loads(data)
        if not isinstance(loaded, dict):
            raise TypeError(f"JSON payload is a {type(loaded).__name__}, not an object")
        return record_from_mapping(self._record_cls, loaded)

    def __repr__(self) -> str:
        return f"JsonSchema({self._record_cls.__name__})"


class AvroSchema(Schema):
    """Records of ``record_cls`` in Avro binary encoding.

    Without a record class, ``schema_definition`` (an Avro schema as a dict) is the schema and
    values are plain dicts, both ways.
    """

    def __init__(self, record_cls: type[Record] | None, schema_definition: Any = None) -> None:
        if record_cls is None and schema_definition is None:
            raise AssertionError("AvroSchema needs a record class or a schema definition")
        if record_cls is not None:
            record_cls = _record_class(record_cls, "AvroSchema")
            schema_definition = record_schema(record_cls)
        super().__init__(record_cls, SchemaType.AVRO, schema_definition, "AVRO")
        self._definition: Any = schema_definition
        self._parsed: Any = None
        self._writers: dict[bytes, Any] = {}

    @property
    def needs_writer_schema(self) -> bool:
        return True

    def _reader(self) -> Any:
        if self._parsed is None:
            import fastavro

            self._parsed = fastavro.parse_schema(copy.deepcopy(self._definition))
        return self._parsed

    def _writer(self, writer: SchemaInfo) -> Any:
        parsed = self._writers.get(writer.data)
        if parsed is not None:
            return parsed
        if writer.type is not SchemaType.AVRO:
            raise ValueError(f"writer schema is {writer.type.name}, not AVRO")
        import fastavro

        definition = json.loads(writer.data)
        reader = self._definition
        if isinstance(definition, dict) and isinstance(reader, dict) and "name" in reader:
            definition["name"] = reader["name"]
        parsed = fastavro.parse_schema(definition)
        if len(self._writers) >= _WRITER_CACHE_SIZE:
            self._writers.clear()
        self._writers[writer.data] = parsed
        return parsed

    def encode(self, obj: Any) -> bytes:
        import fastavro

        if self._record_cls is not None:
            self._validate_object_type(obj)
            datum = _avro_datum(obj)
        elif isinstance(obj, dict):
            datum = obj
        else:
            raise ValueError("AvroSchema without a record class encodes dicts only")
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._reader(), datum)
        return out.getvalue()

    def encode_dict(self, d: dict[str, Any]) -> dict[str, Any]:
        """``d`` (a record's field values) as Avro encodes it: nested records as dicts, enum
        members as their names, inside lists and maps too."""
        return {key: _avro_datum(value) for key, value in d.items()}

    def decode(self, data: bytes) -> Any:
        return self._read(data, None)

    def decode_with_writer(self, data: bytes, writer: SchemaInfo) -> Any:
        """The record in ``data`` written with the Avro schema ``writer``, resolved to this
        schema (ValueError when ``writer`` is not an Avro schema; fastavro's errors when the
        two schemas do not resolve)."""
        if writer.data == self._schema_info.data:
            return self.decode(data)
        return self._read(data, self._writer(writer))

    def _read(self, data: bytes, writer: Any) -> Any:
        import fastavro

        reader = self._reader()
        buffer = io.BytesIO(data)
        if writer is None:
            value = fastavro.schemaless_reader(buffer, reader, None)
        else:
            value = fastavro.schemaless_reader(buffer, writer, reader)
        if self._record_cls is None:
            return value
        if not isinstance(value, dict):
            raise TypeError(f"Avro payload holds a {type(value).__name__}, not a record")
        return record_from_mapping(self._record_cls, value)

    def __repr__(self) -> str:
        if self._record_cls is None:
            return "AvroSchema(<definition>)"
        return f"AvroSchema({self._record_cls.__name__})"
