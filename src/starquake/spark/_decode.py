"""Executor side of ``schema.decode``: message columns decoded into Arrow batches.

Each message is decoded with the schema version it was written with, resolved to the reader
schema (the topic's latest when the query was planned): Avro rows written before a field was
added get that field's default, fields the reader does not know are dropped. Writer schemas
are fetched once per version and task. A payload that does not decode fails the task with an
error naming the message; nothing is silently turned into nulls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from starquake.client import MessageId
from starquake.client.bulk import MessageColumns
from starquake.client.schema import (
    AvroSchema,
    BooleanSchema,
    DoubleSchema,
    FloatSchema,
    Int8Schema,
    Int16Schema,
    Int32Schema,
    Int64Schema,
    Schema,
    SchemaInfo,
    SchemaType,
)
from starquake.spark._plan import PulsarSourceError
from starquake.spark._rows import arrow_schema_of, metadata_arrays
from starquake.spark._typed import RowLayout
from starquake.spark._values import avro_fixer, json_reader

__all__ = ["Decoder", "PulsarDecodeError"]

_FIXED: dict[SchemaType, Callable[[], Schema]] = {
    SchemaType.BOOLEAN: BooleanSchema,
    SchemaType.INT8: Int8Schema,
    SchemaType.INT16: Int16Schema,
    SchemaType.INT32: Int32Schema,
    SchemaType.INT64: Int64Schema,
    SchemaType.FLOAT: FloatSchema,
    SchemaType.DOUBLE: DoubleSchema,
}
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)

# Fetches schema version ``n`` of the partition being read (None: the broker has none).
FetchWriter = Callable[[int], SchemaInfo | None]


class PulsarDecodeError(PulsarSourceError):
    """A message's value does not decode with the topic's schema (``schema.decode``)."""

    __module__ = "starquake.spark"  # as users import it


def _version_number(raw: bytes) -> int | None:
    """The number of a schema version as messages carry it (8 bytes, big-endian)."""
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else None


def _message_id(raw: bytes) -> str:
    try:
        return str(MessageId.deserialize(raw))
    except Exception:  # only for the error message
        return raw.hex()


class Decoder:
    """Decodes the values of one partition's messages for a ``record`` or ``value`` layout."""

    def __init__(self, layout: RowLayout, topic: str, fetch_writer: FetchWriter) -> None:
        assert layout.info is not None
        self._layout = layout
        self._info: SchemaInfo = layout.info
        self._topic = topic
        self._fetch = fetch_writer
        self._arrow = arrow_schema_of(layout.schema)
        values = len(layout.value_fields)
        self._value_fields = list(self._arrow)[:values]
        self._writers: dict[bytes, SchemaInfo | None] = {}
        self._avro: AvroSchema | None = None
        self._convert: Callable[[Any], Any] | None = None
        self._fixed: Schema | None = None
        kind = self._info.type
        if kind.is_struct:
            definition = json.loads(self._info.data)
            if kind is SchemaType.AVRO:
                self._avro = AvroSchema(None, schema_definition=definition)
                self._convert = avro_fixer(definition)
            else:
                self._convert = json_reader(definition)
        elif kind in _FIXED:
            self._fixed = _FIXED[kind]()

    @property
    def needs_versions(self) -> bool:
        """Whether the message columns must carry schema versions (Avro resolution)."""
        return self._avro is not None

    # --- per message ----------------------------------------------------------------------

    def _writer(self, version: bytes) -> SchemaInfo | None:
        """The writer schema of ``version``; None when it is the reader schema (or none)."""
        if version in self._writers:
            return self._writers[version]
        number = _version_number(version) if version else None
        found: SchemaInfo | None = None
        if number is not None:
            found = self._fetch(number)
            if found is None:
                raise PulsarDecodeError(
                    f"{self._topic}: schema version {number} is unknown to the broker"
                )
            if found.data == self._info.data and found.type == self._info.type:
                found = None
        elif version:
            raise PulsarDecodeError(f"{self._topic}: malformed schema version {version.hex()}")
        self._writers[version] = found
        return found

    def _fail(self, cols: MessageColumns, i: int, exc: BaseException) -> PulsarDecodeError:
        version = ""
        if cols.schema_versions and cols.schema_versions[i]:
            version = f" (schema version {_version_number(cols.schema_versions[i])})"
        return PulsarDecodeError(
            f"{self._topic}: message {_message_id(cols.message_ids[i])} does not decode with "
            f"the topic's {self._info.type.name} schema{version}: {exc}"
        )

    def _decode_all(self, cols: MessageColumns) -> list[Any]:
        values = cols.values
        if self._avro is not None:
            return self._decode_avro(cols)
        out: list[Any] = []
        append = out.append
        if self._convert is not None:  # JSON
            read = self._convert
            for i, value in enumerate(values):
                try:
                    append(None if value is None else read(json.loads(value)))
                except (ValueError, TypeError, RecursionError) as exc:
                    raise self._fail(cols, i, exc) from None
            return out
        assert self._fixed is not None
        decode = self._fixed.decode
        for i, value in enumerate(values):
            try:
                append(None if value is None else decode(value))
            except (ValueError, TypeError) as exc:
                raise self._fail(cols, i, exc) from None
        return out

    def _decode_avro(self, cols: MessageColumns) -> list[Any]:
        avro = self._avro
        assert avro is not None
        versions = cols.schema_versions
        fix = self._convert
        out: list[Any] = []
        append = out.append
        for i, value in enumerate(cols.values):
            if value is None:
                append(None)
                continue
            writer = self._writer(versions[i])
            try:
                record = (
                    avro.decode(value) if writer is None else avro.decode_with_writer(value, writer)
                )
                append(record if fix is None else fix(record))
            except Exception as exc:  # the Avro decoder's errors have no common base
                raise self._fail(cols, i, exc) from None
        return out

    # --- per batch ------------------------------------------------------------------------

    def _strings(self, cols: MessageColumns) -> pa.Array:
        raw = pa.array(cols.values, pa.binary())
        try:
            return raw.cast(pa.string())
        except pa.ArrowInvalid:
            for i, value in enumerate(cols.values):
                try:
                    if value is not None:
                        value.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise self._fail(cols, i, exc) from None
            raise

    def _to_arrow(self, decoded: list[Any], kind: pa.DataType, cols: MessageColumns) -> pa.Array:
        try:
            return pa.array(decoded, kind)
        except _CONVERSION_ERRORS as exc:
            for i, value in enumerate(decoded):  # find the message at fault
                try:
                    pa.array([value], kind)
                except _CONVERSION_ERRORS as one:
                    raise self._fail(cols, i, one) from None
            raise PulsarDecodeError(f"{self._topic}: {exc}") from exc

    def value_arrays(self, cols: MessageColumns) -> list[pa.Array]:
        """The value columns of the rows in ``cols``."""
        if self._layout.kind == "value" and self._info.type is SchemaType.STRING:
            return [self._strings(cols)]
        decoded = self._decode_all(cols)
        if self._layout.kind == "value":
            return [self._to_arrow(decoded, self._value_fields[0].type, cols)]
        struct = self._to_arrow(decoded, pa.struct(self._value_fields), cols)
        assert isinstance(struct, pa.StructArray)
        return list(struct.flatten())

    def record_batch(self, cols: MessageColumns) -> pa.RecordBatch:
        """One Arrow record batch of the rows in ``cols``, typed as Spark expects them."""
        arrays = [*self.value_arrays(cols), *metadata_arrays(cols, self._topic, self._arrow)]
        return pa.RecordBatch.from_arrays(arrays, schema=self._arrow)
