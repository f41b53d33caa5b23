"""``KeyValueSchema``: a (key, value) pair, each part with its own schema.

The declared schema is Pulsar's KEY_VALUE schema (name ``KeyValue``): both parts' schema data
packed together, the parts' names, types and properties, and the encoding, in properties (see
:mod:`starquake.common.schema_info`).

With the ``INLINE`` encoding the payload holds both parts: the key's bytes and the value's bytes,
each after its 4-byte big-endian length. With ``SEPARATED`` the payload holds only the value's
bytes, and the key travels as the message key: the producer sets the message key to the base64
of :meth:`KeyValueSchema.encode_key` (flagging the key as base64-encoded), and the consumer
reads the key back with :meth:`KeyValueSchema.decode_key` from the base64-decoded message key.
"""

from __future__ import annotations

from typing import Any

from starquake.client.schema._base import Schema
from starquake.common.schema_info import (
    KeyValueEncoding,
    SchemaInfo,
    SchemaType,
    pack_key_value,
    pack_key_value_schema,
    unpack_key_value,
    unpack_key_value_schema,
)

__all__ = ["KeyValueSchema"]

_ENCODINGS = (KeyValueEncoding.INLINE, KeyValueEncoding.SEPARATED)


class KeyValueSchema(Schema):
    """Pairs ``(key, value)`` encoded with ``key_schema`` and ``value_schema``.

    :meth:`encode` takes a 2-tuple (or 2-list); :meth:`decode` returns a tuple. With the
    ``SEPARATED`` encoding the payload is the value's alone: :meth:`encode` drops the key and
    :meth:`decode` returns ``(None, value)``; see the module documentation for the key.
    """

    def __init__(
        self,
        key_schema: Schema,
        value_schema: Schema,
        encoding: str = KeyValueEncoding.INLINE,
    ) -> None:
        if not isinstance(key_schema, Schema) or not isinstance(value_schema, Schema):
            raise TypeError("KeyValueSchema needs two Schema instances")
        if encoding not in _ENCODINGS:
            raise ValueError(f"unknown key/value encoding {encoding!r}")
        self._key = key_schema
        self._value = value_schema
        self._encoding = encoding
        info = pack_key_value_schema(key_schema.schema_info(), value_schema.schema_info(), encoding)
        self._setup(tuple, info)

    @property
    def key_schema(self) -> Schema:
        """The schema of the keys."""
        return self._key

    @property
    def value_schema(self) -> Schema:
        """The schema of the values."""
        return self._value

    @property
    def encoding(self) -> str:
        """``INLINE`` or ``SEPARATED`` (see :class:`KeyValueEncoding`)."""
        return self._encoding

    @property
    def needs_writer_schema(self) -> bool:
        return self._key.needs_writer_schema or self._value.needs_writer_schema

    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, tuple | list) or len(obj) != 2:
            raise TypeError(f"KeyValueSchema encodes (key, value) pairs, not {type(obj)}")
        key, value = obj
        value_bytes = self._value.encode(value)
        if self._encoding == KeyValueEncoding.SEPARATED:
            return value_bytes
        return pack_key_value(self._key.encode(key), value_bytes)

    def encode_key(self, key: Any) -> bytes:
        """The bytes of ``key`` (the message key's content with the SEPARATED encoding)."""
        return self._key.encode(key)

    def decode_key(self, data: bytes) -> Any:
        """The key in ``data``, bytes made by :meth:`encode_key`."""
        return self._key.decode(data)

    def decode(self, data: bytes) -> Any:
        if self._encoding == KeyValueEncoding.SEPARATED:
            return None, self._value.decode(data)
        key_bytes, value_bytes = unpack_key_value(data)
        return self._key.decode(key_bytes), self._value.decode(value_bytes)

    def decode_with_writer(self, data: bytes, writer: SchemaInfo) -> Any:
        """The pair in ``data`` written with the KEY_VALUE schema ``writer``: each part read
        with its own part of ``writer`` (any other ``writer`` is ignored)."""
        if writer.type is not SchemaType.KEY_VALUE:
            return self.decode(data)
        key_writer, value_writer, _ = unpack_key_value_schema(writer)
        if self._encoding == KeyValueEncoding.SEPARATED:
            return None, self._value.decode_with_writer(data, value_writer)
        key_bytes, value_bytes = unpack_key_value(data)
        return (
            self._key.decode_with_writer(key_bytes, key_writer),
            self._value.decode_with_writer(value_bytes, value_writer),
        )

    def decode_key_with_writer(self, data: bytes, writer: SchemaInfo) -> Any:
        """The key in ``data`` written with the KEY_VALUE schema ``writer``'s key schema."""
        if writer.type is not SchemaType.KEY_VALUE:
            return self.decode_key(data)
        key_writer, _, _ = unpack_key_value_schema(writer)
        return self._key.decode_with_writer(data, key_writer)

    def __repr__(self) -> str:
        return f"KeyValueSchema({self._key!r}, {self._value!r}, {self._encoding})"
