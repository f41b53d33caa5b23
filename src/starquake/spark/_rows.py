"""The row layout of the ``pulsar`` source, and message columns turned into Arrow batches."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from starquake.client.bulk import MessageColumns

__all__ = ["SOURCE_SCHEMA", "arrow_schema", "to_record_batch"]

SOURCE_SCHEMA = StructType(
    [
        StructField("value", BinaryType()),
        StructField("__key", StringType()),
        StructField("__topic", StringType()),
        StructField("__messageId", BinaryType()),
        StructField("__publishTime", TimestampType()),
        StructField("__eventTime", TimestampType()),
        StructField("__messageProperties", MapType(StringType(), StringType())),
    ]
)

_ARROW: pa.Schema | None = None


def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for :data:`SOURCE_SCHEMA` (it checks it exactly)."""
    global _ARROW
    if _ARROW is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        _ARROW = to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")
    return _ARROW


def _millis_to_timestamps(values: list[Any], kind: pa.DataType) -> pa.Array:
    millis = pa.array(values, pa.int64())
    return pc.multiply(millis, 1000).cast(kind)


def to_record_batch(cols: MessageColumns, topic: str) -> pa.RecordBatch:
    """One Arrow record batch of the rows in ``cols``, all from ``topic``."""
    schema = arrow_schema()
    n = len(cols)
    arrays = [
        pa.array(cols.values, pa.binary()),
        pa.array(cols.keys, pa.string()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(cols.message_ids, pa.binary()),
        _millis_to_timestamps(cols.publish_times, schema.field("__publishTime").type),
        _millis_to_timestamps(cols.event_times, schema.field("__eventTime").type),
        pa.array(cols.properties, schema.field("__messageProperties").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
