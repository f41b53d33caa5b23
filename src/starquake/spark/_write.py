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
checkpoint), the topic's partition count unchanged, and the topic and the broker's
deduplication state kept for as long as the query may be down: the sink keeps a durable
subscription (option ``sinkSubscription``) on the topics it writes, since Pulsar deletes an
inactive topic without subscriptions, by default after a minute.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from starquake.client import MessageId
from starquake.client.asyncio import Client, OutgoingMessage, Producer, Transaction
from starquake.client.bulk import PackedBatch, pack_rows
from starquake.client.exceptions import ProducerQueueIsFull, PulsarException
from starquake.client.topics import partition_for_key
from starquake.spark._encode import RowEncoder, WriteSchema, write_schema
from starquake.spark._headers import properties_to_write
from starquake.spark._options import PulsarOptionError, WriteOptions, write_options
from starquake.spark._pack import PackColumns
from starquake.spark._producers import Targets
from starquake.spark._runtime import Session
from starquake.spark._sink import (
    PulsarSinkError,
    check_schema,
    ensure_deduplication,
    hold_topic,
)
from starquake.spark._txn_sink import (
    TxnCommitMessage,
    abort_batch,
    check_transactions,
    commit_batch,
    write_task,
)

log = logging.getLogger("starquake.spark")


@dataclass
class PulsarCommitMessage(WriterCommitMessage):
    """What one task wrote."""

    partition_id: int
    rows: int
    skipped: int


def _column(
    batch: pa.RecordBatch, name: str, as_type: pa.DataType | None = None
) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    array = batch.column(index)
    if pa.types.is_timestamp(array.type):
        return [None if v is None else v // 1000 for v in array.cast(pa.int64()).to_pylist()]
    if as_type is not None and array.type != as_type:
        try:
            array = array.cast(as_type)
        except pa.ArrowInvalid as exc:
            raise PulsarSinkError(f"column {name!r}: {exc}") from exc
    return list(array.to_pylist())


class _Outbox:
    """What goes out, sent as one batch entry per producer and packed batch; receipts are
    collected as they complete."""

    def __init__(self, opts: WriteOptions, txn: Transaction | None = None) -> None:
        self._txn = txn  # every row goes in this transaction (a transactional write)
        args = opts.producer_args
        self.batching = bool(args.get("batching_enabled", True)) and not args.get(
            "chunking_enabled", False
        )
        self.max_rows = max(1, int(args.get("batching_max_messages", 1000)))
        self.max_bytes = int(args.get("batching_max_allowed_size_in_bytes", 128 * 1024))
        self._futures: collections.deque[asyncio.Future[MessageId]] = collections.deque()

    async def send_message(self, producer: Producer, msg: OutgoingMessage) -> None:
        txn = self._txn
        if txn is None:
            await self._send(lambda: producer.send_nowait(msg))
            return
        msg.txn = txn

        def send() -> asyncio.Future[MessageId]:
            sent = producer.send_nowait(msg)
            txn.track(sent)
            return sent

        await self._send(send)

    async def send_packed(self, producer: Producer, batch: PackedBatch) -> None:
        await self._send(lambda: producer.send_packed(batch, self._txn))

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
        while self._futures:
            await self._futures.popleft()


@dataclass
class _Rows:
    """One Arrow batch of rows to write, as Python lists (None: the column is absent)."""

    values: list[bytes | None]
    keys: list[str | None] | None
    event_times: list[int | None] | None
    properties: list[list[tuple[str, str]] | None] | None
    topics: list[str | None] | None

    @classmethod
    def of(
        cls, batch: pa.RecordBatch, with_topics: bool, encoder: RowEncoder | None, first: int
    ) -> _Rows:
        return cls(
            encoder.encode(batch, first) if encoder else _column(batch, "value", pa.binary()) or [],
            _column(batch, "__key", pa.string()),
            _column(batch, "__eventTime"),
            _properties(batch, first),
            _column(batch, "__topic") if with_topics else None,
        )


def _properties(batch: pa.RecordBatch, first: int) -> list[list[tuple[str, str]] | None] | None:
    """The rows' message properties: ``__messageProperties`` and Kafka's ``headers``."""
    try:
        return properties_to_write(
            _column(batch, "__messageProperties"), _column(batch, "headers"), first
        )
    except ValueError as exc:
        raise PulsarSinkError(str(exc)) from None


class _Writer:
    """The rows of one task: routed to producers, then sent in packed batches (or one by
    one when batching is off), skipping rows a broker already holds."""

    def __init__(self, targets: Targets, outbox: _Outbox, opts: WriteOptions, base: int) -> None:
        self._targets = targets
        self._outbox = outbox
        self._opts = opts
        self.next_seq = base  # the sequence id of the next row
        self.sent = 0
        self.skipped = 0

    async def write(self, rows: _Rows) -> None:
        first = self.next_seq
        self.next_seq += len(rows.values)
        groups = await self._route(rows, first)
        for producer, indices in groups.values():
            last = producer.last_sequence_id()
            if last >= first:  # stored by an earlier attempt (sequence ids only grow)
                kept = [i for i in indices if first + i > last]
                self.skipped += len(indices) - len(kept)
                indices = kept
            if indices and self._targets.unverified(producer):
                producer = await self._first_row(producer, rows, indices[0], first)
                indices = indices[1:]
            if not indices:
                continue
            if self._outbox.batching:
                await self._send_packed(producer, rows, indices, first)
            else:
                await self._send_each(producer, rows, indices, first)
            self.sent += len(indices)

    async def write_columns(self, cols: PackColumns) -> None:
        """As :meth:`write`, for rows the packed path takes (one topic, batching on)."""
        first = self.next_seq
        self.next_seq += cols.count
        assert self._opts.topic is not None
        producers = await self._targets.producers(self._opts.topic)
        every = np.arange(cols.count, dtype=np.int64)
        if len(producers) == 1:
            groups = [(producers[0], every)]
        else:
            where = cols.partitions(first, len(producers))
            order = np.unique(where, return_index=True)[1]  # by first row, as write() does
            groups = [(producers[int(where[i])], every[where == where[i]]) for i in sorted(order)]
        outbox = self._outbox
        for producer, rows in groups:
            last = producer.last_sequence_id()
            if last >= first:  # stored by an earlier attempt (sequence ids only grow)
                kept = rows[first + rows > last]
                self.skipped += len(rows) - len(kept)
                rows = kept
            if len(rows) and self._targets.unverified(producer):
                for batch in cols.batches(rows[:1], first, 1, outbox.max_bytes):
                    await outbox.send_packed(producer, batch)
                self.sent += 1
                await outbox.finish()
                producer = await self._targets.verify(producer, first + int(rows[0]))
                rows = rows[1:]
            if not len(rows):
                continue
            for batch in cols.batches(rows, first, outbox.max_rows, outbox.max_bytes):
                await outbox.send_packed(producer, batch)
            self.sent += len(rows)

    async def _first_row(self, producer: Producer, rows: _Rows, index: int, first: int) -> Producer:
        """Send row ``index`` alone, wait for every receipt, and check deduplication through
        ``producer`` (see :meth:`Targets.verify`); the producer to go on with."""
        if self._outbox.batching:
            await self._send_packed(producer, rows, [index], first)
        else:
            await self._send_each(producer, rows, [index], first)
        self.sent += 1
        await self._outbox.finish()
        return await self._targets.verify(producer, first + index)

    async def _route(self, rows: _Rows, first: int) -> dict[int, tuple[Producer, list[int]]]:
        groups: dict[int, tuple[Producer, list[int]]] = {}
        count = len(rows.values)
        keys = rows.keys
        topics = rows.topics
        if topics is None:
            assert self._opts.topic is not None
            producers = await self._targets.producers(self._opts.topic)
            if len(producers) == 1:
                return {id(producers[0]): (producers[0], list(range(count)))}
        for i in range(count):
            if topics is not None:
                topic = topics[i]
                if topic is None:
                    raise PulsarSinkError(f"row {first + i}: no topic (null '__topic')")
                producers = await self._targets.producers(topic)
            n = len(producers)
            if n == 1:
                producer = producers[0]
            else:
                key = keys[i] if keys is not None else None
                producer = producers[partition_for_key(key, n) if key else (first + i) % n]
            group = groups.get(id(producer))
            if group is None:
                group = groups[id(producer)] = (producer, [])
            group[1].append(i)
        return groups

    async def _send_packed(
        self, producer: Producer, rows: _Rows, indices: list[int], first: int
    ) -> None:
        values = rows.values
        max_rows, max_bytes = self._outbox.max_rows, self._outbox.max_bytes
        start = 0
        size = 0
        for pos, i in enumerate(indices):
            value = values[i]
            value_size = len(value) if value is not None else 0
            if pos > start and (pos - start >= max_rows or size + value_size > max_bytes):
                await self._outbox.send_packed(producer, _pack(rows, indices[start:pos], first))
                start, size = pos, 0
            size += value_size
        await self._outbox.send_packed(producer, _pack(rows, indices[start:], first))

    async def _send_each(
        self, producer: Producer, rows: _Rows, indices: list[int], first: int
    ) -> None:
        for i in indices:
            props = rows.properties[i] if rows.properties is not None else None
            msg = OutgoingMessage(
                rows.values[i],
                properties=dict(props) if props else {},
                partition_key=rows.keys[i] if rows.keys is not None else None,
                sequence_id=first + i,
                event_timestamp=rows.event_times[i] if rows.event_times is not None else None,
            )
            await self._outbox.send_message(producer, msg)


def _pack(rows: _Rows, indices: list[int], first: int) -> PackedBatch:
    def pick(column: list[Any] | None) -> list[Any] | None:
        return None if column is None else [column[i] for i in indices]

    try:
        return pack_rows(
            [rows.values[i] for i in indices],
            [first + i for i in indices],
            pick(rows.keys),
            pick(rows.event_times),
            pick(rows.properties),
        )
    except ValueError as exc:
        raise PulsarSinkError(f"rows {first + indices[0]}..{first + indices[-1]}: {exc}") from exc


async def _write_rows(
    client: Client,
    opts: WriteOptions,
    spec: WriteSchema | None,
    batches: Iterator[pa.RecordBatch],
    name: str,
    base: int,
    dedup_checked: bool = False,
    txn: Transaction | None = None,
) -> tuple[int, int]:
    """Write ``batches`` as producer ``name`` (sequence ids from ``base``), in ``txn`` if
    given; (rows sent, rows an earlier attempt had stored)."""
    targets = Targets(
        client, opts, name, spec.producer_schema() if spec else None, dedup_checked, txn
    )
    encoder = RowEncoder(spec) if spec is not None and spec.kind != "string" else None
    outbox = _Outbox(opts, txn)
    writer = _Writer(targets, outbox, opts, base)
    packed = encoder is None and opts.topic is not None and outbox.batching
    try:
        for batch in batches:
            cols = PackColumns.of(batch) if packed else None
            if cols is not None:
                await writer.write_columns(cols)
                continue
            rows = _Rows.of(batch, opts.topic is None, encoder, writer.next_seq)
            await writer.write(rows)
        await outbox.finish()
        if txn is not None:
            targets.check_not_resent()
    finally:
        await targets.close()
    return writer.sent, writer.skipped


def _run_txn_task(
    job: _Job, batches: Iterator[pa.RecordBatch], write: str | None, batch: int, pid: int
) -> TxnCommitMessage:
    async def write_rows(
        client: Client, rows: Iterator[pa.RecordBatch], name: str, txn: Transaction
    ) -> int:
        sent, _ = await _write_rows(client, job.opts, job.spec, rows, name, 0, txn=txn)
        return sent

    return write_task(job.opts, write, batch, pid, batches, write_rows)


def _run_task(job: _Job, batches: Iterator[pa.RecordBatch], name: str, base: int) -> int:
    opts = job.opts
    with Session(opts.service_url, opts.client_args) as session:
        try:
            sent, skipped = session.run(
                _write_rows(session.client, opts, job.spec, batches, name, base, job.dedup_checked)
            )
        except PulsarException as exc:
            raise PulsarSinkError(f"writing as producer {name} failed: {exc}") from exc
    if skipped:
        log.info("producer %s: %d rows were stored by an earlier attempt", name, skipped)
    return sent + skipped


@dataclass(frozen=True)
class _Job:
    """A write's checked options, and how it encodes values (None: as the column holds them)."""

    opts: WriteOptions
    spec: WriteSchema | None
    dedup_checked: bool = False  # deduplication known on (through admin.url) for the topic


def _prepare(options: Mapping[str, str], schema: StructType, overwrite: bool) -> _Job:
    opts = write_options(options)
    if overwrite:
        raise PulsarOptionError("the pulsar sink only appends (mode 'overwrite' is not possible)")
    spec = write_schema(options, schema)
    check_schema(schema, opts, set(spec.columns) if spec and spec.kind != "string" else set())
    if opts.sink_subscription and opts.topic is not None:
        with Session(opts.service_url, opts.client_args) as session:
            session.run(hold_topic(session.client, opts.topic, opts.sink_subscription))
    if opts.transactional:
        check_transactions(opts)
    checked = False
    if opts.exactly_once and opts.topic is not None and opts.admin_url is not None:
        checked = ensure_deduplication(
            opts.admin_url, opts.topic, opts.poll_timeout_s, opts.admin_args
        )
    return _Job(opts, spec, checked)


class PulsarBatchWriter(DataSourceArrowWriter):
    """A batch write; each task produces as ``spark-<writeId>-<partition>``."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self._job = _prepare(options, schema, overwrite)
        self._write_id = self._job.opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx is not None else 0
        if self._job.opts.transactional:  # a log only for a writeId (a write run again)
            return _run_txn_task(self._job, iterator, self._job.opts.write_id, 0, pid)
        rows = _run_task(self._job, iterator, f"spark-{self._write_id}-{pid}", 0)
        return PulsarCommitMessage(pid, rows, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self._job.opts.transactional:
            commit_batch(self._job.opts, self._job.opts.write_id, 0, list(messages))
        rows = sum(
            m.rows for m in messages if isinstance(m, PulsarCommitMessage | TxnCommitMessage)
        )
        log.info("write %s committed: %d rows", self._write_id, rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self._job.opts.transactional:
            abort_batch(self._job.opts, list(messages))


class PulsarStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write; each task produces as ``spark-<queryId>-<partition>``."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self._job = _prepare(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise PulsarSinkError("the streaming writer runs inside Spark tasks only")
        query = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if not query or batch is None:
            raise PulsarSinkError("no streaming query id / batch id in the task context")
        pid = ctx.partitionId()
        if self._job.opts.transactional:
            return _run_txn_task(self._job, iterator, query, int(batch), pid)
        rows = _run_task(self._job, iterator, f"spark-{query}-{pid}", int(batch) << 32)
        return PulsarCommitMessage(pid, rows, 0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._job.opts.transactional:
            query = next((m.write for m in messages if isinstance(m, TxnCommitMessage)), None)
            commit_batch(self._job.opts, query, batchId, list(messages))
        rows = sum(
            m.rows for m in messages if isinstance(m, PulsarCommitMessage | TxnCommitMessage)
        )
        log.info("micro-batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._job.opts.transactional:
            abort_batch(self._job.opts, list(messages))
            log.warning("micro-batch %d aborted: its transactions with it", batchId)
            return
        log.warning("micro-batch %d aborted; a replay stores only what is missing", batchId)
