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

from starquake.client.bulk import BatchEntry, MessageColumns, RowSegments, split_batch

__all__ = [
    "METADATA_FIELDS",
    "SOURCE_SCHEMA",
    "arrow_schema",
    "arrow_schema_of",
    "metadata_arrays",
    "segments_to_record_batches",
    "to_record_batch",
]

# The columns every layout ends with (after the value column or the decoded value's columns).
METADATA_FIELDS: tuple[StructField, ...] = (
    StructField("__key", StringType()),
    StructField("__topic", StringType()),
    StructField("__messageId", BinaryType()),
    StructField("__publishTime", TimestampType()),
    StructField("__eventTime", TimestampType()),
    StructField("__messageProperties", MapType(StringType(), StringType())),
)

SOURCE_SCHEMA = StructType([StructField("value", BinaryType()), *METADATA_FIELDS])

_ARROW: pa.Schema | None = None


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for rows of ``schema`` (it checks it exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for :data:`SOURCE_SCHEMA`."""
    global _ARROW
    if _ARROW is None:
        _ARROW = arrow_schema_of(SOURCE_SCHEMA)
    return _ARROW


def _millis_to_timestamps(values: list[Any], kind: pa.DataType) -> pa.Array:
    millis = pa.array(values, pa.int64())
    return pc.multiply(millis, 1000).cast(kind)


def metadata_arrays(cols: MessageColumns, topic: str, schema: pa.Schema) -> list[pa.Array]:
    """The metadata columns of the rows in ``cols`` (all from ``topic``), typed as ``schema``
    types them."""
    n = len(cols)
    return [
        pa.array(cols.keys, pa.string()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.array(cols.message_ids, pa.binary()),
        _millis_to_timestamps(cols.publish_times, schema.field("__publishTime").type),
        _millis_to_timestamps(cols.event_times, schema.field("__eventTime").type),
        pa.array(cols.properties, schema.field("__messageProperties").type),
    ]


def to_record_batch(cols: MessageColumns, topic: str) -> pa.RecordBatch:
    """One Arrow record batch of the rows in ``cols``, all from ``topic`` (raw layout)."""
    schema = arrow_schema()
    arrays = [pa.array(cols.values, pa.binary()), *metadata_arrays(cols, topic, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _batches_to_record_batch(batches: list[BatchEntry], topic: str) -> pa.RecordBatch:
    """The rows of whole batched entries, split in bulk (or one message at a time where the
    bulk splitter does not take them)."""
    from starquake.spark._split import Unsplittable, split_to_arrays

    schema = arrow_schema()
    try:
        value, key, ids, publish, event, props = split_to_arrays(batches, schema)
    except Unsplittable:
        cols = MessageColumns()
        for batch in batches:
            split_batch(topic, batch, cols)
        return to_record_batch(cols, topic)
    name = pa.repeat(pa.scalar(topic, pa.string()), len(value))
    arrays = [value, key, name, ids, publish, event, props]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def segments_to_record_batches(segments: RowSegments, topic: str) -> list[pa.RecordBatch]:
    """The rows of one bulk read (raw layout), in order; runs of whole batched entries are
    split together."""
    out: list[pa.RecordBatch] = []
    run: list[BatchEntry] = []
    for segment in segments.segments:
        if isinstance(segment, BatchEntry):
            run.append(segment)
            continue
        if run:
            out.append(_batches_to_record_batch(run, topic))
            run = []
        out.append(to_record_batch(segment, topic))
    if run:
        out.append(_batches_to_record_batch(run, topic))
    return [batch for batch in out if batch.num_rows]
