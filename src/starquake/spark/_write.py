"""Writes: ``df.write.format("pulsar")`` and ``writeStream.format("pulsar")``, exactly once.

Each Spark task produces with a producer name derived from the query (streaming: the query id,
which survives restarts) or the write (batch: ``writeId``), plus the task's partition id, and
gives row ``i`` of micro-batch ``b`` the sequence id ``(b << 32) | i``. With broker
deduplication on, a retried task or a replayed micro-batch sends the same names and sequence
ids again and the broker stores nothing twice; sequence ids grow from batch to batch, so new
rows are never mistaken for old ones. To a partitioned topic, each task writes to every
partition with its own producer; a keyed row goes where the client routes that key, an
unkeyed row to partition ``i % partitions``, so a replay routes every row as before.

The guarantee holds when a replayed task sees the same rows in the same order: a
deterministic query over a replayable source (Spark pins the shuffle partitioning in the
checkpoint), the topic's partition count unchanged, and the broker's deduplication state kept
for as long as the query may be down (see the README).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from starquake.client import CompressionType, MessageId
from starquake.client.asyncio import Client, OutgoingMessage, Producer
from starquake.client.exceptions import ProducerBusy, ProducerQueueIsFull, PulsarException
from starquake.client.topics import namespace_of, normalize_topic, partition_for_key
from starquake.spark._options import PulsarOptionError, WriteOptions, write_options
from starquake.spark._runtime import Session

log = logging.getLogger("starquake.spark")

_ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "value": (BinaryType, StringType),
    "__key": (StringType, BinaryType),
    "__eventTime": (TimestampType, TimestampNTZType, LongType),
    "__messageProperties": (MapType,),
    "__topic": (StringType,),
}
# Columns of the source that a write ignores, so that a read can be written back as it is.
_IGNORED = {"__messageId", "__publishTime"}
_CODECS = {
    "none": CompressionType.NONE,
    "lz4": CompressionType.LZ4,
    "zlib": CompressionType.ZLib,
    "zstd": CompressionType.ZSTD,
    "snappy": CompressionType.SNAPPY,
}


class PulsarSinkError(RuntimeError):
    """A write cannot go ahead (deduplication cannot be turned on, a topic is missing...)."""


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """Refuse, at planning time, columns the sink does not know or cannot write."""
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise PulsarOptionError("the DataFrame to write needs a 'value' column (binary or string)")
    for f in schema.fields:
        if f.name in _IGNORED:
            continue
        accepted = _ACCEPTED.get(f.name)
        if accepted is None:
            raise PulsarOptionError(
                f"column {f.name!r} cannot be written: the sink takes value, __key, __eventTime, "
                "__messageProperties and __topic (encode other fields into value)"
            )
        if not isinstance(f.dataType, accepted):
            raise PulsarOptionError(
                f"column {f.name!r} has type {f.dataType.simpleString()}; expected "
                + " or ".join(t.typeName() for t in accepted)
            )
        if isinstance(f.dataType, MapType) and not (
            isinstance(f.dataType.keyType, StringType)
            and isinstance(f.dataType.valueType, StringType)
        ):
            raise PulsarOptionError("column '__messageProperties' must be map<string,string>")
    if opts.topic is None and "__topic" not in names:
        raise PulsarOptionError("give the option 'topic' or a '__topic' column")


def ensure_deduplication(admin_url: str, topic: str, timeout: float = 30.0) -> None:
    """Turn broker deduplication on for ``topic``'s namespace unless it is on already."""
    namespace = namespace_of(topic)
    url = f"{admin_url}/admin/v2/namespaces/{namespace}/deduplication"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read()
        if body.strip() == b"true":
            return
        request = urllib.request.Request(
            url, data=b"true", method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise PulsarSinkError(
            f"exactly-once writes to {topic} need broker deduplication on namespace "
            f"{namespace}, and it could not be checked or turned on through {admin_url} "
            f"({exc}). Turn it on yourself (POST true to {url}, or "
            "'namespaces set-deduplication --enable'), or write with the option "
            "exactlyOnce=false (at-least-once)."
        ) from exc
    log.warning("turned on deduplication for namespace %s (exactly-once writes)", namespace)


@dataclass
class PulsarCommitMessage(WriterCommitMessage):
    """What one task wrote."""

    partition_id: int
    rows: int
    skipped: int


class _Targets:
    """The producers of one task: one per partition of every topic it writes to."""

    def __init__(self, client: Client, opts: WriteOptions, name: str) -> None:
        self._client = client
        self._opts = opts
        self._name = name
        self._producers: dict[str, list[Producer]] = {}
        self._checked: set[str] = set()

    async def producers(self, topic: str) -> list[Producer]:
        """The producers for ``topic`` (as the row names it: normalized once per name)."""
        found = self._producers.get(topic)
        if found is not None:
            return found
        name = normalize_topic(topic)
        found = self._producers.get(name)
        if found is not None:
            self._producers[topic] = found
            return found
        found = await self._open_all(name)
        self._producers[name] = self._producers[topic] = found
        return found

    async def _open_all(self, topic: str) -> list[Producer]:
        if self._opts.exactly_once and topic != self._opts.topic:
            ensure_deduplication(self._opts.admin_url, topic, self._opts.poll_timeout_s)
        names = await self._client.get_topic_partitions(topic)
        return [await self._open(p) for p in names]

    async def _open(self, partition: str) -> Producer:
        args: dict[str, Any] = {
            "batching_max_messages": 1000,
            "max_pending_messages": 10000,
            "batching_max_publish_delay_ms": 5,
            **self._opts.producer_args,
        }
        if "compression_type" in args:
            args["compression_type"] = _CODECS[args["compression_type"]]
        args["block_if_queue_full"] = True
        deadline = asyncio.get_running_loop().time() + self._opts.poll_timeout_s
        while True:
            try:
                return await self._client.create_producer(
                    partition, producer_name=self._name, **args
                )
            except ProducerBusy:  # an earlier attempt of this task is still connected
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        closed: set[int] = set()
        for producers in self._producers.values():
            for producer in producers:
                if id(producer) not in closed:
                    closed.add(id(producer))
                    await producer.close()


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    array = batch.column(index)
    if pa.types.is_timestamp(array.type):
        return [None if v is None else v // 1000 for v in array.cast(pa.int64()).to_pylist()]
    return list(array.to_pylist())


class _Outbox:
    """Rows waiting to go out, per producer, sent as one batch entry each (``send_batch``);
    receipts are collected as they complete."""

    def __init__(self, opts: WriteOptions) -> None:
        args = opts.producer_args
        self.batching = bool(args.get("batching_enabled", True)) and not args.get(
            "chunking_enabled", False
        )
        self.max_rows = int(args.get("batching_max_messages", 1000))
        self.max_bytes = int(args.get("batching_max_allowed_size_in_bytes", 128 * 1024))
        self._rows: dict[int, tuple[Producer, list[OutgoingMessage]]] = {}
        self._sizes: dict[int, int] = {}
        self._futures: collections.deque[asyncio.Future[MessageId]] = collections.deque()

    async def add(self, producer: Producer, msg: OutgoingMessage) -> None:
        if not self.batching or msg.size >= self.max_bytes:
            await self._flush(producer)
            await self._send(lambda: producer.send_nowait(msg))
            return
        key = id(producer)
        entry = self._rows.get(key)
        if entry is None:
            entry = self._rows[key] = (producer, [])
            self._sizes[key] = 0
        entry[1].append(msg)
        self._sizes[key] += msg.size
        if len(entry[1]) >= self.max_rows or self._sizes[key] >= self.max_bytes:
            await self._flush(producer)

    async def _flush(self, producer: Producer) -> None:
        entry = self._rows.pop(id(producer), None)
        self._sizes.pop(id(producer), None)
        if entry is not None and entry[1]:
            rows = entry[1]
            await self._send(lambda: producer.send_batch(rows))

    async def _send(self, send: Callable[[], asyncio.Future[MessageId]]) -> None:
        futures = self._futures
        while True:
            try:
                futures.append(send())
                break
            except ProducerQueueIsFull:  # wait for the oldest receipts
                if not futures:
                    await asyncio.sleep(0.01)
                for _ in range(min(len(futures), 10)):
                    await futures.popleft()
        while futures and futures[0].done():
            futures.popleft().result()  # raises the send's error, if it failed

    async def finish(self) -> None:
        for producer, _rows in list(self._rows.values()):
            await self._flush(producer)
        while self._futures:
            await self._futures.popleft()


async def _write_rows(
    client: Client, opts: WriteOptions, batches: Iterator[pa.RecordBatch], name: str, base: int
) -> tuple[int, int]:
    targets = _Targets(client, opts, name)
    outbox = _Outbox(opts)
    sent = skipped = 0
    row = 0
    try:
        for batch in batches:
            values = _column(batch, "value") or []
            keys = _column(batch, "__key")
            events = _column(batch, "__eventTime")
            props = _column(batch, "__messageProperties")
            topics = None if opts.topic is not None else _column(batch, "__topic")
            for i, value in enumerate(values):
                seq = base + row
                row += 1
                topic = opts.topic if topics is None else topics[i]
                if topic is None:
                    raise PulsarSinkError(f"row {row - 1}: no topic (null '__topic')")
                producers = await targets.producers(topic)
                key = keys[i] if keys is not None else None
                if isinstance(key, bytes):
                    key = key.decode("utf-8")
                count = len(producers)
                if count == 1:
                    producer = producers[0]
                else:
                    producer = producers[partition_for_key(key, count) if key else seq % count]
                if seq <= producer.last_sequence_id():
                    skipped += 1  # stored by an earlier attempt
                    continue
                msg = OutgoingMessage(
                    value.encode() if isinstance(value, str) else value,
                    properties=dict(props[i]) if props is not None and props[i] else {},
                    partition_key=key,
                    sequence_id=seq,
                    event_timestamp=events[i] if events is not None else None,
                )
                await outbox.add(producer, msg)
                sent += 1
        await outbox.finish()
    finally:
        await targets.close()
    return sent, skipped


def _run_task(opts: WriteOptions, batches: Iterator[pa.RecordBatch], name: str, base: int) -> int:
    with Session(opts.service_url, opts.client_args) as session:
        try:
            sent, skipped = session.run(_write_rows(session.client, opts, batches, name, base))
        except PulsarException as exc:
            raise PulsarSinkError(f"writing as producer {name} failed: {exc}") from exc
    if skipped:
        log.info("producer %s: %d rows were stored by an earlier attempt", name, skipped)
    return sent + skipped


def _prepare(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    opts = write_options(options)
    if overwrite:
        raise PulsarOptionError("the pulsar sink only appends (mode 'overwrite' is not possible)")
    check_schema(schema, opts)
    if opts.exactly_once and opts.topic is not None:
        ensure_deduplication(opts.admin_url, opts.topic, opts.poll_timeout_s)
    return opts


class PulsarBatchWriter(DataSourceArrowWriter):
    """A batch write; each task produces as ``spark-<writeId>-<partition>``."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self._opts = _prepare(options, schema, overwrite)
        self._write_id = self._opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx is not None else 0
        rows = _run_task(self._opts, iterator, f"spark-{self._write_id}-{pid}", 0)
        return PulsarCommitMessage(pid, rows, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, PulsarCommitMessage))
        log.info("write %s committed: %d rows", self._write_id, rows)


class PulsarStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write; each task produces as ``spark-<queryId>-<partition>``."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self._opts = _prepare(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise PulsarSinkError("the streaming writer runs inside Spark tasks only")
        query = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if not query or batch is None:
            raise PulsarSinkError("no streaming query id / batch id in the task context")
        pid = ctx.partitionId()
        rows = _run_task(self._opts, iterator, f"spark-{query}-{pid}", int(batch) << 32)
        return PulsarCommitMessage(pid, rows, 0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, PulsarCommitMessage))
        log.info("micro-batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; a replay stores only what is missing", batchId)
