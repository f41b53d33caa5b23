"""Schemas of single values: bytes, strings, booleans and fixed-size numbers.

The number schemas encode big-endian, as Pulsar's Java client does: INT8/INT16/INT32/INT64 as
two's complement of 1, 2, 4 and 8 bytes, FLOAT and DOUBLE as IEEE 754 binary32 and binary64, and
BOOLEAN as one byte (0 or 1; any nonzero byte reads as true). They declare empty schema data and
the names the Java client uses.
"""

from __future__ import annotations

import struct
from typing import Any

from starquake.client.schema._base import Schema
from starquake.common.schema_info import SchemaInfo, SchemaType

__all__ = [
    "BooleanSchema",
    "BytesSchema",
    "DoubleSchema",
    "FloatSchema",
    "Int8Schema",
    "Int16Schema",
    "Int32Schema",
    "Int64Schema",
    "StringSchema",
]


class BytesSchema(Schema):
    """Payloads as they are: ``bytes`` in, ``bytes`` out (no schema is announced)."""

    def __init__(self) -> None:
        super().__init__(bytes, SchemaType.BYTES, None, "BYTES")

    def encode(self, data: Any) -> bytes:
        self._validate_object_type(data)
        return bytes(data)

    def decode(self, data: bytes) -> Any:
        return data


class StringSchema(Schema):
    """``str`` values as UTF-8 payloads.

    The declared schema data is ``null`` (the JSON of no definition), as the official Python
    client declares it.
    """

    def __init__(self) -> None:
        super().__init__(str, SchemaType.STRING, None, "STRING")

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        return str(obj).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return bytes(data).decode("utf-8")


class _FixedSchema(Schema):
    """A value packed with one ``struct`` format."""

    _kind: SchemaType
    _name: str
    _format: struct.Struct
    _accepts: type | tuple[type, ...]

    def __init__(self) -> None:
        self._setup(self._accepts, SchemaInfo(self._kind, b"", {}, self._name))

    def _check(self, obj: Any) -> None:
        # bool is an int subclass: only BooleanSchema takes bools, and it takes nothing else
        wants_bool = self._accepts is bool
        if isinstance(obj, bool) != wants_bool or not isinstance(obj, self._accepts):
            raise TypeError(f"{type(self).__name__} cannot encode a {type(obj).__name__}")

    def encode(self, obj: Any) -> bytes:
        self._check(obj)
        try:
            return self._format.pack(obj)
        except (struct.error, OverflowError) as exc:
            raise ValueError(f"{obj!r} is out of range for {self._kind.name}") from exc

    def decode(self, data: bytes) -> Any:
        if len(data) != self._format.size:
            raise ValueError(
                f"{self._kind.name} data must be {self._format.size} bytes, not {len(data)}"
            )
        return self._format.unpack(data)[0]


class BooleanSchema(_FixedSchema):
    """``bool`` values as one byte."""

    _kind = SchemaType.BOOLEAN
    _name = "Boolean"
    _format = struct.Struct(">?")
    _accepts = bool

    def decode(self, data: bytes) -> Any:
        if len(data) != 1:
            raise ValueError(f"BOOLEAN data must be 1 byte, not {len(data)}")
        return data[0] != 0


class Int8Schema(_FixedSchema):
    """``int`` values in [-128, 127] as one byte."""

    _kind = SchemaType.INT8
    _name = "INT8"
    _format = struct.Struct(">b")
    _accepts = int


class Int16Schema(_FixedSchema):
    """``int`` values as 2 bytes."""

    _kind = SchemaType.INT16
    _name = "INT16"
    _format = struct.Struct(">h")
    _accepts = int


class Int32Schema(_FixedSchema):
    """``int`` values as 4 bytes."""

    _kind = SchemaType.INT32
    _name = "INT32"
    _format = struct.Struct(">i")
    _accepts = int


class Int64Schema(_FixedSchema):
    """``int`` values as 8 bytes."""

    _kind = SchemaType.INT64
    _name = "INT64"
    _format = struct.Struct(">q")
    _accepts = int


class FloatSchema(_FixedSchema):
    """Numbers as IEEE 754 single precision (4 bytes)."""

    _kind = SchemaType.FLOAT
    _name = "Float"
    _format = struct.Struct(">f")
    _accepts = (float, int)


class DoubleSchema(_FixedSchema):
    """Numbers as IEEE 754 double precision (8 bytes)."""

    _kind = SchemaType.DOUBLE
    _name = "Double"
    _format = struct.Struct(">d")
    _accepts = (float, int)
