"""Schema values shared by the broker and the client: types, versions, KeyValue schema data.

Pulsar's schema types carry two numberings: the admin API and the Java API name them
(``AVRO``, ``KEY_VALUE``, ``BYTES`` ...), and the wire ``Schema.Type`` numbers them. ``BYTES`` has
no wire number of its own: a producer or consumer with the bytes schema sends no schema at all,
and a ``Schema`` whose type is ``None`` (0) means bytes too.

A schema version travels as 8 bytes, the version number as a big-endian signed long; the first
schema registered on a topic is version 0.

A KEY_VALUE schema's data packs the two inner schemas' data::

    [4-byte big-endian length of the key schema data][key schema data]
    [4-byte big-endian length of the value schema data][value schema data]

and its properties name the parts: ``key.schema.name``, ``key.schema.type`` (a type name),
``key.schema.properties`` (a JSON object), the same three for ``value.``, and
``kv.encoding.type`` (``INLINE``: key and value both in the payload, packed as above;
``SEPARATED``: the key in the message key, base64-encoded, and the value in the payload).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

__all__ = [
    "KeyValueEncoding",
    "SchemaInfo",
    "SchemaType",
    "decode_schema_version",
    "encode_schema_version",
    "pack_key_value",
    "pack_key_value_schema",
    "unpack_key_value",
    "unpack_key_value_schema",
]


class SchemaType(IntEnum):
    """Pulsar's schema types, with the Java API's numbers (the wire ``Schema.Type`` for >= 0)."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    BYTES = -1
    AUTO = -2
    AUTO_CONSUME = -3
    AUTO_PUBLISH = -4

    @classmethod
    def from_wire(cls, number: int) -> SchemaType:
        """The type of a wire ``Schema.Type`` number (``None`` is bytes)."""
        if number == 0:
            return cls.BYTES
        return cls(number)

    @property
    def wire(self) -> int:
        """The wire ``Schema.Type`` number (bytes and the AUTO kinds travel as ``None``, 0)."""
        return max(int(self), 0)

    @property
    def is_struct(self) -> bool:
        """AVRO and JSON: record schemas whose definition is an Avro schema."""
        return self in (SchemaType.AVRO, SchemaType.JSON)


class KeyValueEncoding:
    """Values of the ``kv.encoding.type`` property."""

    INLINE = "INLINE"
    SEPARATED = "SEPARATED"


@dataclass(frozen=True)
class SchemaInfo:
    """A schema as declared: name, type, definition bytes and properties."""

    type: SchemaType
    data: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    name: str = ""

    def same_definition(self, other: SchemaInfo) -> bool:
        """Whether ``other`` declares the same schema (type and definition bytes; name and
        properties do not count, as in Pulsar's schema hash)."""
        return self.type == other.type and self.data == other.data


def encode_schema_version(version: int) -> bytes:
    """The 8-byte wire form of a schema version number."""
    return struct.pack(">q", version)


def decode_schema_version(raw: bytes) -> int | None:
    """The version number of 8 wire bytes (``None`` for empty or malformed bytes)."""
    if len(raw) != 8:
        return None
    return int(struct.unpack(">q", raw)[0])


def _pack_two(first: bytes, second: bytes) -> bytes:
    return struct.pack(">i", len(first)) + first + struct.pack(">i", len(second)) + second


def _unpack_two(data: bytes) -> tuple[bytes, bytes]:
    # A length of -1 stands for a null part (read here as empty bytes).
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError("key/value data shorter than its two length prefixes")
    (first_len,) = struct.unpack_from(">i", view, 0)
    first_size = max(first_len, 0)
    if first_len < -1 or 8 + first_size > len(view):
        raise ValueError("key/value data: bad key length")
    first = bytes(view[4 : 4 + first_size])
    (second_len,) = struct.unpack_from(">i", view, 4 + first_size)
    start = 8 + first_size
    second_size = max(second_len, 0)
    if second_len < -1 or start + second_size != len(view):
        raise ValueError("key/value data: bad value length")
    return first, bytes(view[start : start + second_size])


def pack_key_value(key: bytes, value: bytes) -> bytes:
    """The INLINE payload of a key/value message."""
    return _pack_two(key, value)


def unpack_key_value(payload: bytes) -> tuple[bytes, bytes]:
    """Key and value bytes of an INLINE key/value payload (ValueError when malformed)."""
    return _unpack_two(payload)


def pack_key_value_schema(
    key: SchemaInfo, value: SchemaInfo, encoding: str = KeyValueEncoding.INLINE
) -> SchemaInfo:
    """The KEY_VALUE schema made of ``key`` and ``value``."""
    properties = {
        "key.schema.name": key.name,
        "key.schema.type": key.type.name,
        "key.schema.properties": json.dumps(key.properties, sort_keys=True),
        "value.schema.name": value.name,
        "value.schema.type": value.type.name,
        "value.schema.properties": json.dumps(value.properties, sort_keys=True),
        "kv.encoding.type": encoding,
    }
    return SchemaInfo(SchemaType.KEY_VALUE, _pack_two(key.data, value.data), properties, "KeyValue")


def _part(properties: dict[str, str], prefix: str, data: bytes) -> SchemaInfo:
    type_name = properties.get(f"{prefix}.schema.type", "BYTES")
    try:
        kind = SchemaType[type_name]
    except KeyError:
        raise ValueError(f"unknown {prefix} schema type {type_name!r}") from None
    raw_props = properties.get(f"{prefix}.schema.properties") or "{}"
    try:
        loaded: Any = json.loads(raw_props)
    except ValueError:
        raise ValueError(f"{prefix}.schema.properties is not JSON") from None
    props = {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
    return SchemaInfo(kind, data, props, properties.get(f"{prefix}.schema.name", ""))


def unpack_key_value_schema(schema: SchemaInfo) -> tuple[SchemaInfo, SchemaInfo, str]:
    """Key schema, value schema and encoding of a KEY_VALUE schema (ValueError when malformed)."""
    key_data, value_data = _unpack_two(schema.data)
    props = schema.properties
    encoding = props.get("kv.encoding.type", KeyValueEncoding.INLINE)
    return _part(props, "key", key_data), _part(props, "value", value_data), encoding
