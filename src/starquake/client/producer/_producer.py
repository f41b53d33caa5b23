"""Producer of one topic partition: pending queue, batching, compression, receipts, resend.

Every message enqueued is "pending" until its receipt (or failure); ``max_pending_messages``
bounds them. Batched messages wait in a batch container first; a flushed batch becomes one
SEND (first sequence id, ``num_messages``). The SEND frames of pending ops are kept so that after
a reconnect they are written again, unchanged, in order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time

from starquake.client.base._config import ProducerConfig, declared_schema
from starquake.client.base._enums import BatchingType
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import MessageId
from starquake.client.core._chunks import chunk_count, chunk_metadata
from starquake.client.core._handler import ClientCore, HandlerBase
from starquake.client.core._transaction import Transaction
from starquake.client.crypto._crypto import make_encryptor
from starquake.client.exceptions import (
    AlreadyClosed,
    MessageTooBig,
    ProducerBlockedQuotaExceededException,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarException,
    Timeout,
    TopicTerminated,
    from_server_error,
)
from starquake.client.producer._outgoing import (
    Batch,
    BatchContainers,
    OutgoingMessage,
    batch_metadata,
    entry_metadata,
    message_metadata,
    single_metadata,
)
from starquake.client.producer._send_ops import SendOp, chunk_parts, chunk_size, take_refused
from starquake.client.wire._connection import ClientConnection
from starquake.protocol import client_commands
from starquake.protocol.batch import pack_batch
from starquake.protocol.batch_rows import PackedBatch
from starquake.protocol.compression import compress
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_entry, encode_payload_command
from starquake.protocol.wire import pb

log = logging.getLogger(CLIENT_LOGGER_NAME)


class ProducerImpl(HandlerBase):
    """Producer for a single (non-partitioned) topic or one partition."""

    def __init__(
        self, core: ClientCore, topic: str, config: ProducerConfig, partition: int = -1
    ) -> None:
        super().__init__(core, topic)
        self._config = config
        self.partition = partition
        self.producer_id = next(core.producer_ids)
        self.producer_name = config.producer_name or ""
        self._user_named = bool(config.producer_name)
        initial = config.initial_sequence_id
        self.last_sequence_id = initial if initial is not None else -1
        self.registrations = 0  # accepted by a broker: more than once means resends happened
        self._next_sequence_id = self.last_sequence_id + 1
        self._pending: collections.deque[SendOp] = collections.deque()
        self._pending_messages = 0
        self._space_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._batches = BatchContainers(config, self._send_batched)
        self._timeout_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._fatal: PulsarException | None = None  # why the producer can never send again
        self._max_message_size = 5 * 1024 * 1024
        self.schema_version = b""  # from PRODUCER_SUCCESS; set in every message's metadata
        self._encryptor = make_encryptor(config.encryption_key, config.crypto_key_reader)

    def __repr__(self) -> str:
        return f"Producer({self.topic}, {self.producer_name or '?'})"

    # --- connection -------------------------------------------------------------------------

    async def _register(self, cnx: ClientConnection) -> None:
        rid = self._core.next_request_id()
        cmd = client_commands.producer(
            self.topic,
            self.producer_id,
            rid,
            producer_name=self.producer_name or None,
            user_provided_name=self._user_named,
            epoch=self._epoch,
            access_mode=int(self._config.access_mode),
            metadata=self._config.properties,
            initial_subscription_name=self._config.initial_subscription_name,
            schema=declared_schema(self._config.schema),
        )
        close = client_commands.close_producer
        resp = await self._register_on(cnx, cnx.producers, self.producer_id, (cmd, rid), close)
        success = resp.producer_success
        self.producer_name = success.producer_name
        self.schema_version = success.schema_version
        fresh = self._config.initial_sequence_id is None and self._next_sequence_id == 0
        if fresh and success.last_sequence_id >= 0:
            self.last_sequence_id = success.last_sequence_id
            self._next_sequence_id = success.last_sequence_id + 1
        self._max_message_size = cnx.max_message_size
        self._cnx = cnx
        self.registrations += 1
        log.info("%r registered on the broker", self)
        for op in self._pending:  # resend, in order, whatever was not confirmed
            cnx.write(op.frame)

    def _fail(self, exc: PulsarException) -> None:
        """Never back (e.g. fenced): pending and later sends fail with ``exc`` at once."""
        self._fatal = exc
        self._fail_pending(exc)

    def _reconnect_failed(self, exc: PulsarException) -> None:
        """As the official client over a backlog quota: ``producer_exception`` fails the
        pending sends (it keeps reconnecting; later sends fail likewise until it is back);
        with ``producer_request_hold`` they stay pending (until timeout or reconnection)."""
        if isinstance(exc, ProducerBlockedQuotaExceededException):
            self._fail_pending(exc)

    # --- enqueue ----------------------------------------------------------------------------

    async def send(self, msg: OutgoingMessage) -> MessageId:
        """Send and wait for the broker's receipt."""
        fut = await self.send_async(msg)
        return await fut

    async def send_async(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue a message; wait for space if ``block_if_queue_full``, else raise when full.
        A message of a transaction first registers this partition with the transaction."""
        if msg.txn is not None:
            await msg.txn.register_produced_topic(self.topic)
        while (
            self._config.block_if_queue_full
            and not self._closed
            and (self._space_waiters or self._pending_messages >= self._config.max_pending_messages)
        ):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._space_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._space_waiters:
                    self._space_waiters.remove(waiter)
            if self._pending_messages < self._config.max_pending_messages:
                break
        fut = self.send_nowait(msg)
        if msg.txn is not None:
            msg.txn.track(fut)
        return fut

    def _check_can_send(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed or self._closing or self._core.closed:
            raise AlreadyClosed("producer is closed")

    def send_nowait(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue a message without waiting; raises :class:`ProducerQueueIsFull` when full."""
        self._check_can_send()
        if self._pending_messages >= self._config.max_pending_messages:
            raise ProducerQueueIsFull("producer queue is full")
        if msg.size > self._max_message_size and not self._chunking:
            raise MessageTooBig(f"message of {msg.size} bytes exceeds {self._max_message_size}")
        if self._encryptor is not None:
            self._encryptor.check()
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        if msg.sequence_id is not None:
            seq = msg.sequence_id
            self._next_sequence_id = max(self._next_sequence_id, seq + 1)
        else:
            seq = self._next_sequence_id
            self._next_sequence_id += 1
        self._pending_messages += 1
        if self._config.batching_enabled and msg.deliver_at is None and msg.txn is None:
            self._batches.add(msg, seq, fut)
        else:
            self.flush_batches()
            meta = self._metadata(msg, seq)
            payload = self._compress(meta, msg.content or b"")
            if self._chunking:
                self._send_chunks(meta, payload, seq, fut)
            else:
                self._send_op(meta, payload, seq, seq, 1, [fut], batched=False)
        return fut

    @property
    def _chunking(self) -> bool:
        return self._config.chunking_enabled and not self._config.batching_enabled

    def _send_chunks(
        self, meta: pb.MessageMetadata, payload: bytes, seq: int, fut: asyncio.Future[MessageId]
    ) -> None:
        """Send ``payload`` (already compressed) whole, or in chunks if it is too large."""
        uuid = f"{self.producer_name}-{seq}"
        chunked = chunk_metadata(meta, uuid, 2, len(payload))
        enc = self._encryptor  # each chunk is encrypted on its own, as the official clients do
        if enc is not None:
            enc.describe(chunked)
        size = chunk_size(chunked, self._max_message_size, enc)
        total = chunk_count(len(payload), size)
        if total == 1:
            if enc is not None:
                payload = enc.encrypt(meta, payload)
            self._send_op(meta, payload, seq, seq, 1, [fut], batched=False)
            return
        chunked.num_chunks_from_msg = total
        holder: list[MessageId] = []
        for chunk_id, part in enumerate(chunk_parts(chunked, payload, size, total, enc)):
            last = chunk_id == total - 1
            self._write_op(
                SendOp(
                    seq,
                    seq,
                    1,
                    self._frame(chunked, part, seq, seq, 1, is_chunk=True),
                    [fut] if last else [],
                    time.monotonic(),
                    False,
                    1 if last else 0,
                    holder,
                    last,
                )
            )

    def _metadata(self, msg: OutgoingMessage, seq: int) -> pb.MessageMetadata:
        return message_metadata(self.producer_name, self.schema_version, msg, seq)

    def flush_batches(self) -> None:
        """Turn every open batch into a SEND now."""
        self._batches.flush()

    def _send_batched(self, batch: Batch) -> None:
        """(Batch containers) Send a complete or due batch as one entry."""
        seq = batch.sequence_ids[0]
        count = len(batch.items)
        meta = batch_metadata(
            self.producer_name, self.schema_version, batch.items[0][2], seq, count
        )
        highest = max(batch.sequence_ids)
        meta.highest_sequence_id = highest  # recovery reads it: ids may have gaps
        payload = self._compress(
            meta, pack_batch([(single, data) for single, data, _ in batch.items])
        )
        if self._config.batching_type == BatchingType.KeyBased:
            seq = highest  # the batches of the keys interleave: see BatchContainers
        self._send_op(meta, payload, seq, highest, count, batch.futures, True)

    def send_batch(self, msgs: list[OutgoingMessage]) -> asyncio.Future[MessageId]:
        """Send ``msgs`` now as one batch entry; the future completes with the first one's id.

        The messages need explicit, increasing sequence ids. Raises
        :class:`ProducerQueueIsFull` when they do not fit in ``max_pending_messages`` (unless
        nothing is pending) and :class:`MessageTooBig` when the batch exceeds the broker's limit.
        """
        self._check_can_send()
        count = len(msgs)
        if not count:
            raise ValueError("send_batch needs at least one message")
        pending = self._pending_messages
        if pending and pending + count > self._config.max_pending_messages:
            raise ProducerQueueIsFull("producer queue is full")
        sequence_ids = [m.sequence_id for m in msgs]
        if None in sequence_ids or sequence_ids != sorted(set(sequence_ids)):  # type: ignore[type-var]
            raise ValueError("send_batch needs explicit, increasing sequence ids")
        first_seq = msgs[0].sequence_id
        last_seq = msgs[-1].sequence_id
        assert first_seq is not None and last_seq is not None
        items = []
        total = 0
        for msg, seq in zip(msgs, sequence_ids, strict=True):
            size = msg.size
            total += size
            items.append((single_metadata(msg, seq, size), msg.content or b""))  # type: ignore[arg-type]
        if total > self._max_message_size:
            raise MessageTooBig(f"a batch of {total} bytes exceeds {self._max_message_size}")
        meta = batch_metadata(self.producer_name, self.schema_version, msgs[0], first_seq, count)
        return self._send_whole_batch(meta, pack_batch(items), first_seq, last_seq, count)

    def send_packed(
        self, batch: PackedBatch, txn: Transaction | None = None
    ) -> asyncio.Future[MessageId]:
        """Send packed rows (:func:`pack_rows`) as one entry now, in ``txn`` if given (the
        caller registered the partition in it); gives the first id. Raises as :meth:`send_batch`."""
        self._check_can_send()
        count = batch.count
        pending = self._pending_messages
        if pending and pending + count > self._config.max_pending_messages:
            raise ProducerQueueIsFull("producer queue is full")
        if batch.size > self._max_message_size:
            raise MessageTooBig(f"a batch of {batch.size} bytes exceeds {self._max_message_size}")
        first, last = batch.first_sequence_id, batch.last_sequence_id
        meta = entry_metadata(self.producer_name, self.schema_version, first, count)
        if batch.partition_key is not None:
            meta.partition_key = batch.partition_key
        if txn is not None:
            txn.check_open()
            meta.txnid_most_bits, meta.txnid_least_bits = txn.txn_id
        fut = self._send_whole_batch(meta, batch.payload, first, last, count)
        if txn is not None:
            txn.track(fut)
        return fut

    def _send_whole_batch(
        self, meta: pb.MessageMetadata, payload: bytes, first: int, last: int, count: int
    ) -> asyncio.Future[MessageId]:
        if self._encryptor is not None:
            self._encryptor.check()
        self.flush_batches()  # what was batched before goes first
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self._next_sequence_id = max(self._next_sequence_id, last + 1)
        self._pending_messages += count
        # As Pulsar's clients do for a batch: the broker's deduplication recovery reads the
        # entry's highest sequence id from its metadata (explicit ids may have gaps).
        meta.highest_sequence_id = last
        payload = self._compress(meta, payload)
        self._send_op(meta, payload, first, last, count, [fut], True)
        return fut

    def _send_op(
        self,
        meta: pb.MessageMetadata,
        payload: bytes,
        seq: int,
        highest: int,
        num_messages: int,
        futures: list[asyncio.Future[MessageId]],
        batched: bool,
    ) -> None:
        frame = self._frame(meta, payload, seq, highest, num_messages)
        now = time.monotonic()
        self._write_op(
            SendOp(seq, highest, num_messages, frame, futures, now, batched, num_messages)
        )

    def _compress(self, meta: pb.MessageMetadata, payload: bytes) -> bytes:
        codec = int(self._config.compression_type)
        if codec:
            meta.compression = codec  # type: ignore[assignment]
            meta.uncompressed_size = len(payload)
            payload = compress(codec, payload)
        if self._encryptor is not None and not self._chunking:  # chunks: in _send_chunks
            payload = self._encryptor.encrypt(meta, payload)
        return payload

    def _frame(
        self,
        meta: pb.MessageMetadata,
        payload: bytes,
        seq: int,
        highest: int,
        num_messages: int,
        *,
        is_chunk: bool = False,
    ) -> bytes:
        cmd = client_commands.send(
            self.producer_id,
            seq,
            num_messages,
            highest,
            is_chunk=is_chunk,
            declare_highest=num_messages > 1,  # a key-based batch may go under its highest id
        )
        if meta.HasField("txnid_most_bits"):  # a message of a transaction: the SEND names it
            cmd.send.txnid_most_bits = meta.txnid_most_bits
            cmd.send.txnid_least_bits = meta.txnid_least_bits
        return encode_payload_command(cmd, encode_entry(meta, payload))

    def _write_op(self, op: SendOp) -> None:
        self._pending.append(op)
        if self._cnx is not None:
            self._cnx.write(op.frame)
        self._arm_send_timeout()

    # --- receipts and failures --------------------------------------------------------------

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        if not self._pending:
            return
        op = self._pending[0]
        if receipt.sequence_id != op.sequence_id:
            expected = op.sequence_id
            log.warning("%r: receipt for %d, not %d; ignored", self, receipt.sequence_id, expected)
            return
        self._pending.popleft()
        self.last_sequence_id = op.highest_sequence_id
        op.complete(receipt.message_id, self.partition)
        self._release(op.permits)

    def on_send_error(self, error: pb.CommandSendError) -> None:
        log.warning("%r: send error %s: %s", self, error.error, error.message)
        if int(error.error) == ServerError.TopicTerminatedError:
            self._fail_pending(TopicTerminated(error.message))
            return
        if int(error.error) == ServerError.NotAllowedError:  # never stored: fails, as in Java
            self._release(take_refused(self._pending, error))
            return
        cnx = self._cnx
        if cnx is not None:  # as the C++ client does: reconnect and resend
            cnx.close()

    def _release(self, count: int) -> None:
        self._pending_messages -= count
        while self._space_waiters and self._pending_messages < self._config.max_pending_messages:
            waiter = self._space_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def _fail_pending(self, exc: PulsarException) -> None:
        ops = list(self._pending)
        self._pending.clear()
        batches = self._batches.take_all()
        failed = [(op.futures, op.permits) for op in ops]
        failed += [(batch.futures, len(batch.futures)) for batch in batches]
        for futures, permits in failed:
            for fut in futures:
                if not fut.done():
                    fut.set_exception(exc)
            self._release(permits)

    def _arm_send_timeout(self) -> None:
        timeout = self._config.send_timeout_millis / 1000
        if timeout <= 0 or self._timeout_timer is not None or not self._pending:
            return
        due = self._pending[0].created + timeout - time.monotonic()
        loop = asyncio.get_running_loop()
        self._timeout_timer = loop.call_later(max(due, 0.001), self._on_send_timeout)

    def _on_send_timeout(self) -> None:
        self._timeout_timer = None
        timeout = self._config.send_timeout_millis / 1000
        if self._pending and time.monotonic() - self._pending[0].created >= timeout:
            self._fail_pending(Timeout("send timed out"))
        self._arm_send_timeout()

    # --- flush / close ----------------------------------------------------------------------

    async def flush(self) -> None:
        """Send open batches and wait until everything pending so far is confirmed or failed."""
        self.flush_batches()
        if not self._pending:
            return
        last = self._pending[-1].futures
        await asyncio.wait(last)

    async def close(self) -> None:
        """Flush, then close the producer on the broker. A fenced producer is closed already
        (the broker dropped it): as in the official client, that raises AlreadyClosed."""
        if self._closed:
            return
        if isinstance(self._fatal, ProducerFenced):
            self._closed = True
            self._core.handlers.discard(self)
            raise AlreadyClosed("the producer was fenced and is closed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), self._core.operation_timeout)
        self._closed = True
        self._stop_reconnecting()
        self._fail_pending(AlreadyClosed("producer closed"))
        if self._timeout_timer is not None:
            self._timeout_timer.cancel()
        self._core.handlers.discard(self)
        log.info("%r closed", self)
        cnx, self._cnx = self._cnx, None
        if cnx is not None and cnx.is_open:
            cnx.producers.pop(self.producer_id, None)
            rid = self._core.next_request_id()
            try:
                await cnx.request(
                    client_commands.close_producer(self.producer_id, rid),
                    rid,
                    self._core.operation_timeout,
                )
            except PulsarException as exc:
                log.debug("%r: close: %s", self, exc)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def max_pending_messages(self) -> int:
        """How many messages may wait for the broker's receipt at once (0: no limit)."""
        return self._config.max_pending_messages


__all__ = ["OutgoingMessage", "ProducerImpl", "from_server_error"]
