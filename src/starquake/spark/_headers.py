"""Kafka's ``headers`` column: read with the option ``includeHeaders``, and written.

Kafka's ``headers`` is ``array<struct<key: string, value: binary>>``, null for a record
without headers. Here a message's properties are its headers, in the order stored, each value
the UTF-8 bytes of the property's string (``CAST(value AS STRING)`` gives it back). The
column comes after all the others; ``__messageProperties`` stays.

A write takes the column too (its values binary or string): a row's message properties are
its ``__messageProperties``, then its headers, a key given twice keeping its last value. A
header's value must be UTF-8 text and not null, since properties are strings.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

__all__ = ["HEADERS_FIELD", "add_headers", "properties_to_write", "with_headers"]

HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)
PROPERTIES = "__messageProperties"

_ARROW: pa.ListType | None = None


def with_headers(schema: StructType) -> StructType:
    """``schema`` with the ``headers`` column at the end."""
    return StructType([*schema.fields, HEADERS_FIELD])


def _arrow_type() -> pa.ListType:
    global _ARROW
    if _ARROW is None:
        from starquake.spark._rows import arrow_schema_of

        found = arrow_schema_of(StructType([HEADERS_FIELD])).field(0).type
        assert isinstance(found, pa.ListType)
        _ARROW = found
    return _ARROW


def _headers(props: pa.MapArray) -> pa.Array:
    kind = _arrow_type()
    offsets = props.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    keys = props.keys.slice(first, last - first)
    values = props.items.slice(first, last - first).cast(pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(kind.value_type))
    lengths = pc.subtract(offsets.slice(1), offsets.slice(0, len(props)))
    empty = pc.or_(pc.equal(lengths, 0), props.is_null())
    return pa.ListArray.from_arrays(pc.subtract(offsets, first), entries, type=kind, mask=empty)


def add_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with a ``headers`` column made from its message properties."""
    props = batch.column(batch.schema.get_field_index(PROPERTIES))
    assert isinstance(props, pa.MapArray)
    field = pa.field("headers", _arrow_type())
    return pa.RecordBatch.from_arrays(
        [*batch.columns, _headers(props)], schema=batch.schema.append(field)
    )


Pairs = list[tuple[str, str]]


def _text(row: int, key: Any, value: Any) -> tuple[str, str]:
    if key is None or value is None:
        what = "key" if key is None else f"value for key {key!r}"
        raise ValueError(f"row {row}: column 'headers' holds a null {what} (properties are text)")
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise ValueError(
                f"row {row}: header {key!r} is not UTF-8 text (message properties are text)"
            ) from None
    return key, value


def properties_to_write(
    props: list[Pairs | None] | None, headers: list[list[dict[str, Any]] | None] | None, first: int
) -> list[Pairs | None] | None:
    """Each row's message properties: its ``__messageProperties`` (``props``) then its
    ``headers`` entries (``{"key": ..., "value": ...}``); None when neither column is there.
    ``first`` numbers the rows for errors (ValueError)."""
    if headers is None:
        return props
    out: list[Pairs | None] = []
    for i, entries in enumerate(headers):
        own = props[i] if props is not None else None
        if not entries:
            out.append(own)
            continue
        merged = dict(own or ())
        for entry in entries:
            key, value = _text(first + i, entry["key"], entry["value"])
            merged[key] = value
        out.append(list(merged.items()))
    return out
