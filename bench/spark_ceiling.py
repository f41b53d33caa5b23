"""An Arrow data source that does no work, for ``spark_io.py``: what Spark takes from a Python
source, and hands a Python sink, on this machine, under this load.

Format ``ceiling`` yields the rows of the ``pulsar`` source's raw layout (100-byte values,
keys, topic, message ids, publish times, no event times or properties) from record batches
built with numpy once per task, in ``parts`` partitions of ``rows / parts`` rows. A read of the
``pulsar`` source cannot be faster than a read of this one: the ratio of the two is the share
of the time that is the data source's own (the broker, the client, splitting batches).
Written to, it drops the Arrow batches Spark hands it: the ceiling of a write. Read as a
stream (``readStream``, offsets ``{"row": n}``, ``maxRecordsPerTrigger`` honoured) it gives the
same rows in micro-batches: what Spark's own per-trigger work (planning, checkpoint writes,
scheduling) leaves of a streaming read here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

ROWS_PER_BATCH = 65536


def _fixed(count: int, item: bytes, kind: pa.DataType) -> pa.Array:
    """``count`` copies of ``item`` as a binary or string array, built without a loop."""
    offsets = (np.arange(count + 1, dtype=np.int64) * len(item)).astype(np.int32)
    data = np.tile(np.frombuffer(item, np.uint8), count)
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def record_batch(count: int, size: int) -> pa.RecordBatch:
    """``count`` rows of the pulsar source's raw layout with ``size``-byte values."""
    from starquake.spark._rows import arrow_schema

    schema = arrow_schema()
    keys = pa.array([f"user-{i}" for i in range(5000)], pa.string())
    micros = np.full(count, 1_795_000_000_000_000, np.int64)
    empty = pa.array([], pa.string())
    return pa.RecordBatch.from_arrays(
        [
            _fixed(count, b"v" * size, pa.binary()),
            keys.take(pa.array(np.arange(count) % 5000)),
            _fixed(count, b"persistent://public/default/ceiling-partition-0", pa.string()),
            _fixed(count, b"\x08\x07\x10\x2a\x18\x00\x20\x03\x30\xe8\x07", pa.binary()),
            pa.array(micros, pa.int64()).cast(schema.field("__publishTime").type),
            pa.nulls(count, schema.field("__eventTime").type),
            pa.MapArray.from_arrays(
                pa.array(np.zeros(count + 1, np.int32)),
                empty,
                empty,
                type=schema.field("__messageProperties").type,
            ),
        ],
        schema=schema,
    )


class CeilingReader(DataSourceReader):
    """``parts`` partitions of ``rows / parts`` rows each."""

    def __init__(self, parts: int, rows: int, size: int) -> None:
        self.parts, self.rows, self.size = parts, rows, size

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        left = self.rows // self.parts
        batch = record_batch(min(left, ROWS_PER_BATCH), self.size)
        while left > 0:
            out = batch if left >= batch.num_rows else batch.slice(0, left)
            left -= out.num_rows
            yield out


class CeilingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``rows`` rows as a stream, each micro-batch's rows in ``parts`` partitions."""

    def __init__(self, parts: int, rows: int, size: int, limit: int) -> None:
        self.parts, self.rows, self.size, self.limit = parts, rows, size, limit

    def initialOffset(self) -> dict[str, Any]:
        return {"row": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.limit) if self.limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Every row is there from the start."""

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        at = int(start["row"]) if start else 0
        if isinstance(limit, ReadMaxRows):
            return {"row": min(self.rows, at + limit.max_rows)}
        return {"row": self.rows}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, stop = int(start["row"]), int(end["row"])
        bounds = np.linspace(first, stop, self.parts + 1).astype(np.int64)
        return [InputPartition((int(a), int(b))) for a, b in itertools.pairwise(bounds) if b > a]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        first, stop = partition.value
        left = stop - first
        batch = record_batch(min(left, ROWS_PER_BATCH), self.size)
        while left > 0:
            out = batch if left >= batch.num_rows else batch.slice(0, left)
            left -= out.num_rows
            yield out

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge."""


class CeilingWriter(DataSourceArrowWriter):
    """Takes the rows' Arrow batches and drops them."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()


class CeilingDataSource(DataSource):
    """``spark.read.format("ceiling").option("parts", "4").option("rows", "1000000")``."""

    @classmethod
    def name(cls) -> str:
        return "ceiling"

    def schema(self) -> StructType:
        from starquake.spark._rows import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options: Any = self.options
        return CeilingReader(
            int(options.get("parts", "1")),
            int(options.get("rows", "1000000")),
            int(options.get("size", "100")),
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = {str(k).lower(): v for k, v in self.options.items()}
        return CeilingStreamReader(
            int(options.get("parts", "1")),
            int(options.get("rows", "1000000")),
            int(options.get("size", "100")),
            int(options.get("maxrecordspertrigger", "0")),
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return CeilingWriter()


def register(spark: Any) -> None:
    """Register ``ceiling`` with ``spark``; the classes travel to the workers by value (this
    module is not on their path)."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(CeilingDataSource)


def read(spark: Any, parts: int, rows: int, size: int) -> None:
    """Read ``rows`` rows in ``parts`` partitions into the ``noop`` sink."""
    df = (
        spark.read.format("ceiling")
        .option("parts", str(parts))
        .option("rows", str(rows))
        .option("size", str(size))
        .load()
    )
    df.write.format("noop").mode("overwrite").save()


def stream(spark: Any, parts: int, rows: int, size: int, checkpoint: str, limit: int) -> Any:
    """Read ``rows`` rows as an availableNow stream (micro-batches of ``limit`` rows, 0: one)
    into the ``noop`` sink; the finished query."""
    reader = (
        spark.readStream.format("ceiling")
        .option("parts", str(parts))
        .option("rows", str(rows))
        .option("size", str(size))
    )
    query = available_now(reader, checkpoint, limit)
    query.awaitTermination()
    return query


def available_now(reader: Any, checkpoint: str, limit: int) -> Any:
    """Start the stream of ``reader`` (a DataStreamReader) with Trigger.AvailableNow into the
    ``noop`` sink, ``limit`` rows per micro-batch at most (0: no limit); the started query."""
    if limit:
        reader = reader.option("maxRecordsPerTrigger", str(limit))
    return (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
