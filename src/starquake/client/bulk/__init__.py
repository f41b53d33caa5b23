"""Bulk reading of one topic partition for data pipelines: stored entries decoded into columns.

A :class:`BulkReader` reads the messages of a position range ``[start, end)`` of one partition
through a non-durable subscription (as a reader does), but hands them out as
:class:`MessageColumns` (one list per field) instead of one ``Message`` object per message:
the per-message work is what limits a Python reader, and columns are what a data frame needs.
The messages come out as single rows whatever the producer did: batches are split,
compressed payloads decompressed and chunked messages reassembled.

Positions are ``(ledger_id, entry_id, batch_index)`` triples ordered as tuples, with the batch
index of an unbatched message counted as 0. ``start`` is the first message to read and ``end``
the first one not to read; neither needs to hold a message (``(ledger, last_entry + 1, 0)`` is
"after everything in that ledger"), and the end is usually the position after the last
message when the range was planned.

A chunked message belongs to the range that holds its *first* chunk: the reader reads past
``end`` until the messages it started are complete, and skips the chunks of messages that
began before ``start``. A range read twice therefore gives the same rows in the same order.

Writers have the column-wise counterpart: :func:`pack_rows` builds one batch payload from
columns, which ``Producer.send_packed`` sends as one entry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starquake.client.base._enums import ConsumerCryptoFailureAction
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.bulk._crypto import EntryDecryption, is_chunk
from starquake.client.bulk._entries import EntryStream
from starquake.client.bulk._rows import (
    BatchEntry,
    MessageColumns,
    RowSegments,
    batch_suffixes,
    payload_size_of,
    split_batch,
)
from starquake.client.crypto._crypto import CryptoKeyReader
from starquake.client.exceptions import (
    PulsarException,
    Timeout,
)
from starquake.common.topic_name import TopicName
from starquake.protocol.batch_rows import PackedBatch, pack_rows
from starquake.protocol.commands import encode_message_id
from starquake.protocol.compression import decompress
from starquake.protocol.framing import entry_rows, parse_entry
from starquake.protocol.varint import varint
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.asyncio import Client

__all__ = [
    "EARLIEST",
    "BatchEntry",
    "BulkReader",
    "CryptoKeyReader",
    "DataLossError",
    "EntryCount",
    "MessageColumns",
    "PackedBatch",
    "Position",
    "RowSegments",
    "batch_suffixes",
    "pack_rows",
    "payload_size_of",
    "split_batch",
]

log = logging.getLogger(CLIENT_LOGGER_NAME)

Position = tuple[int, int, int]
EARLIEST: Position = (-1, -1, -1)
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


class DataLossError(PulsarException):
    """Messages of the requested range are gone (deleted by retention, or never existed)."""


def _signed(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value


@dataclass(frozen=True, slots=True)
class EntryCount:
    """One stored entry and how many rows it holds (a chunk counts on its first chunk only);
    ``size``: its stored bytes (metadata and payload; 0 where not known)."""

    ledger_id: int
    entry_id: int
    rows: int
    size: int = 0


class _Chunk:
    __slots__ = ("first", "num_chunks", "parts", "publish_time", "single")

    def __init__(self, meta: pb.MessageMetadata, first: tuple[int, int]) -> None:
        self.first = first
        self.num_chunks = meta.num_chunks_from_msg
        self.parts: list[bytes] = []
        self.publish_time = meta.publish_time


class BulkReader:
    """Reads ``[start, end)`` of one partition as :class:`MessageColumns` (see the module doc).

    Create it with :meth:`create`; ``end=None`` reads on without an end (for counting with
    :meth:`count_entries`). ``wait_timeout`` bounds how long one call waits for the broker.
    """

    def __init__(
        self,
        stream: EntryStream,
        topic: str,
        start: Position,
        end: Position | None,
        wait_timeout: float,
    ) -> None:
        self._stream = stream
        self.topic = topic
        self.start = start
        self.end = end
        self._wait = wait_timeout
        name = TopicName.parse(topic)
        self._partition = name.partition_index if name.is_partition else -1
        self._chunks: dict[str, _Chunk] = {}
        self._skipped_uuids: set[str] = set()
        self._first_seen = False
        self._done = end is not None and end <= start
        self.last_position: tuple[int, int] | None = None
        self.fail_on_data_loss = True
        self.with_schema_versions = False
        self.decryption = EntryDecryption(topic)

    @classmethod
    async def create(
        cls,
        client: Client,
        topic: str,
        start: Position = EARLIEST,
        end: Position | None = None,
        *,
        receiver_queue_size: int = 10000,
        wait_timeout: float = 120.0,
        fail_on_data_loss: bool = True,
        with_schema_versions: bool = False,
        crypto_key_reader: CryptoKeyReader | None = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        subscription_prefix: str = "bulk-reader",
        consumer_name: str | None = None,
        max_queue_bytes: int = 0,
    ) -> BulkReader:
        """Subscribe to ``topic`` (one partition or a non-partitioned topic) at ``start``.

        With ``fail_on_data_loss=False`` a range whose first messages are gone is read from
        the first available message on, with a warning, instead of raising
        :class:`DataLossError`. With ``with_schema_versions=True`` the columns read include
        :attr:`MessageColumns.schema_versions`. Messages encrypted end to end are decrypted
        with ``crypto_key_reader``. A message that cannot be decrypted (no key reader, or no
        key of it opens the message) is handled as the official reader's
        ``crypto_failure_action`` says: FAIL (the default) raises :class:`CryptoError`, DISCARD
        skips it, CONSUME hands it out as stored (compressed and encrypted; a batch as one
        row, at its first position). A chunked message cannot be handed out encrypted: it
        raises :class:`CryptoError` unless discarded. ``subscription_prefix`` begins the name
        of the (non-durable) subscription, as a reader's ``subscription_role_prefix`` does;
        ``consumer_name`` names the consumer. ``receiver_queue_size`` is in messages, as
        the official reader's; with ``max_queue_bytes`` the queue grows past it to what that
        many bytes hold at the mean message size read so far."""
        stream = EntryStream(
            client.core,
            topic,
            start,
            receiver_queue_size,
            subscription_prefix,
            consumer_name,
            max_queue_bytes,
        )
        await stream.start()
        reader = cls(stream, topic, start, end, wait_timeout)
        reader.fail_on_data_loss = fail_on_data_loss
        reader.with_schema_versions = with_schema_versions
        reader.decryption = EntryDecryption(topic, crypto_key_reader, crypto_failure_action)
        if not reader.done and end is not None and start[0] >= 0:
            try:
                await reader._check_range_stored()
            except BaseException:
                await reader.close()
                raise
        return reader

    async def _check_range_stored(self) -> None:
        """A range planned earlier whose messages are all gone: the topic now ends before the
        range's first entry (its ledgers were trimmed: without a durable subscription and
        with no retention, a broker deletes every ledger but the current one, and a restart
        starts a new ledger). The broker would place the subscription at its first stored
        entry, and the read would wait for entries that never come."""
        last = await self.get_last_position()
        if last is not None and last[:2] >= self.start[:2]:
            return
        where = "holds no message" if last is None else f"ends at {last[0]}:{last[1]}"
        self._lost(f"the topic now {where}")

    async def get_last_position(self) -> Position | None:
        """The last message's position in the topic, or None if it holds no message."""
        data = await self._stream.get_last_message_id()
        ledger, entry = _signed(data.ledgerId), _signed(data.entryId)
        if ledger < 0 or entry < 0:
            return None
        batch = data.batch_index if data.HasField("batch_index") else -1
        return (ledger, entry, max(batch, 0))

    async def close(self) -> None:
        """Close the subscription."""
        await self._stream.close()

    @property
    def done(self) -> bool:
        """True once the whole range was read."""
        return self._done

    # --- counting (planning) ------------------------------------------------------------------

    async def count_entries(self, max_rows: int, last: tuple[int, int]) -> list[EntryCount]:
        """Entries from the current position on, until they hold ``max_rows`` rows or the
        entry ``last`` (which must exist) was counted."""
        counts: list[EntryCount] = []
        rows = 0
        while rows < max_rows and (
            not counts or (counts[-1].ledger_id, counts[-1].entry_id) < last
        ):
            item = await self._stream.take(self._wait)
            if item is None:
                raise Timeout(f"{self.topic}: no entry arrived within {self._wait:.0f}s")
            ledger, entry_id, entry = item
            meta = parse_entry(entry, verify_checksum=False).metadata
            n = entry_rows(meta)
            self._stream.release(int(meta.num_messages_in_batch) or 1, len(entry))
            counts.append(EntryCount(ledger, entry_id, n, len(entry)))
            rows += n
        return counts

    # --- reading ------------------------------------------------------------------------------

    def _finished_after(self, ledger: int, entry_id: int) -> bool:
        end = self.end
        if end is None:
            return False
        here = (ledger, entry_id)
        return here >= (end[0], end[1]) or (end[2] <= 0 and here == (end[0], end[1] - 1))

    async def read(self, max_rows: int = 65536) -> MessageColumns:
        """Up to about ``max_rows`` more rows (fewer at the end: an empty result means done).

        Raises :class:`DataLossError` when the first entry is not where the range starts,
        and :class:`Timeout` when the broker sends nothing for ``wait_timeout`` seconds.
        """
        out = RowSegments(split=self.topic, with_schema_versions=self.with_schema_versions)
        await self._read_into(out, max_rows)
        return out.rows

    async def read_segments(self, max_rows: int = 65536) -> RowSegments:
        """As :meth:`read`, but batched entries are handed out whole (not split into rows):
        :attr:`RowSegments.segments` holds, in order, :class:`BatchEntry` items and
        :class:`MessageColumns` of the other rows, for a caller that splits batches in bulk."""
        out = RowSegments(split=None, with_schema_versions=self.with_schema_versions)
        await self._read_into(out, max_rows)
        out.seal()
        return out

    async def _read_into(self, out: RowSegments, max_rows: int) -> None:
        while not self._done and out.count < max_rows:
            item = await self._stream.take(self._wait)
            if item is None:
                raise Timeout(
                    f"{self.topic}: no message arrived within {self._wait:.0f}s "
                    f"after position {self.last_position or self.start[:2]}"
                )
            ledger, entry_id, entry = item
            self._check_start(ledger, entry_id)
            self.last_position = (ledger, entry_id)
            released = self._decode(ledger, entry_id, entry, out)
            self._stream.release(released, len(entry))
            past_end = self.end is not None and (ledger, entry_id) >= (self.end[0], self.end[1])
            if (self._finished_after(ledger, entry_id) or past_end) and not self._pending_chunks():
                self._done = True

    def _pending_chunks(self) -> bool:
        return bool(self._chunks)

    def _check_start(self, ledger: int, entry_id: int) -> None:
        if self._first_seen:
            return
        self._first_seen = True
        start = self.start
        if start[0] < 0:
            return
        if (ledger, entry_id) < (start[0], start[1]):
            return  # an earlier entry (cannot happen with a broker that starts where asked)
        if ledger == start[0] and entry_id > start[1]:
            problem = (
                f"{self.topic}: messages from position {start[0]}:{start[1]} are gone; "
                f"the first available one is {ledger}:{entry_id}"
            )
            if self.fail_on_data_loss:
                raise DataLossError(problem)
            log.warning("%s (reading on from there)", problem)
            return
        end = self.end
        if ledger > start[0] and end is not None and end[0] == start[0]:
            # every entry of the range is in ledger start[0], and the first one stored is
            # past that ledger: the range's entries were trimmed
            self._lost(f"the first available one is {ledger}:{entry_id}")

    def _lost(self, found: str) -> None:
        """Every message of the range is gone (``found``: what the topic holds instead):
        DataLossError, or with ``fail_on_data_loss=False`` a warning and nothing to read."""
        start = self.start
        problem = f"{self.topic}: messages from position {start[0]}:{start[1]} are gone; {found}"
        if self.fail_on_data_loss:
            raise DataLossError(problem)
        log.warning("%s (nothing to read)", problem)
        self._done = True

    def _in_range(self, position: Position) -> bool:
        if position < self.start:
            return False
        return self.end is None or position < self.end

    def _decode(self, ledger: int, entry_id: int, entry: bytes, out: RowSegments) -> int:
        """Append the entry's rows that fall in the range; return its message count."""
        cols = out.rows
        parsed = parse_entry(entry)
        meta = parsed.metadata
        payload: bytes | memoryview = parsed.payload
        if meta.encryption_keys:  # each chunk of a chunked message is encrypted on its own
            plain = self.decryption.open(f"{ledger}:{entry_id}", meta, payload)
            if plain is None:
                return self._undecrypted(ledger, entry_id, meta, payload, cols)
            payload = plain
        if meta.num_chunks_from_msg > 1 and not meta.HasField("num_messages_in_batch"):
            self._on_chunk(ledger, entry_id, meta, payload, cols)
            return 1
        count = int(meta.num_messages_in_batch) if meta.HasField("num_messages_in_batch") else 0
        first = (ledger, entry_id, 0)
        last = (ledger, entry_id, max(count - 1, 0))
        if last < self.start or (self.end is not None and first >= self.end):
            return count or 1  # no row of this entry is in the range
        if meta.compression:
            payload = decompress(meta.compression, payload, meta.uncompressed_size)
        prefix = encode_message_id(ledger, entry_id, self._partition)
        publish_time = meta.publish_time
        if not count:
            _append_one(cols, meta, bytes(payload), publish_time, prefix)
            if self.with_schema_versions:
                cols.schema_versions.append(meta.schema_version)
            return 1
        lo = self.start[2] if (ledger, entry_id) == self.start[:2] else 0
        hi = count
        if self.end is not None and (ledger, entry_id) == self.end[:2]:
            hi = min(count, max(self.end[2], 0))
        out.add_batch(
            BatchEntry(
                ledger,
                entry_id,
                bytes(payload),
                count,
                lo,
                hi,
                publish_time,
                prefix,
                meta.schema_version,
            )
        )
        return count

    def _undecrypted(
        self,
        ledger: int,
        entry_id: int,
        meta: pb.MessageMetadata,
        payload: bytes | memoryview,
        cols: MessageColumns,
    ) -> int:
        """An entry that cannot be decrypted: skipped (DISCARD) or one row as stored
        (CONSUME); return its message count."""
        if is_chunk(meta):
            return 1  # a discarded chunk
        count = int(meta.num_messages_in_batch) if meta.HasField("num_messages_in_batch") else 1
        consume = self.decryption.action == ConsumerCryptoFailureAction.CONSUME
        if consume and self._in_range((ledger, entry_id, 0)):
            prefix = encode_message_id(ledger, entry_id, self._partition)
            _append_one(cols, meta, bytes(payload), meta.publish_time, prefix)
            if self.with_schema_versions:
                cols.schema_versions.append(meta.schema_version)
        return count

    def _on_chunk(
        self,
        ledger: int,
        entry_id: int,
        meta: pb.MessageMetadata,
        payload: bytes | memoryview,
        cols: MessageColumns,
    ) -> None:
        uuid = meta.uuid
        pending = self._chunks.get(uuid)
        if meta.chunk_id == 0:
            if not self._in_range((ledger, entry_id, 0)):
                self._skipped_uuids.add(uuid)
                return
            pending = self._chunks[uuid] = _Chunk(meta, (ledger, entry_id))
        elif pending is None or meta.chunk_id != len(pending.parts):
            if pending is not None:  # out of order: the message cannot be rebuilt
                log.warning("%s: chunked message %s is incomplete; skipped", self.topic, uuid)
                del self._chunks[uuid]
            return
        pending.parts.append(bytes(payload))
        if len(pending.parts) < pending.num_chunks:
            return
        del self._chunks[uuid]
        whole = b"".join(pending.parts)
        if meta.compression:
            whole = decompress(meta.compression, whole, meta.uncompressed_size)
        first = pending.first
        prefix = encode_message_id(ledger, entry_id, self._partition)
        chunk_id = encode_message_id(first[0], first[1], self._partition)
        # the official client's chunked id: the last chunk's, with the first chunk's inside
        suffix = b"\x3a" + varint(len(chunk_id)) + chunk_id
        _append_one(cols, meta, whole, pending.publish_time, prefix + suffix)
        if self.with_schema_versions:
            cols.schema_versions.append(meta.schema_version)


def _append_one(
    cols: MessageColumns, meta: pb.MessageMetadata, data: bytes, publish_time: int, mid: bytes
) -> None:
    cols.values.append(None if meta.null_value else data)
    cols.keys.append(
        meta.partition_key
        if meta.HasField("partition_key") and not meta.null_partition_key
        else None
    )
    cols.publish_times.append(publish_time)
    cols.event_times.append(meta.event_time or None)
    cols.properties.append([(kv.key, kv.value) for kv in meta.properties])
    cols.message_ids.append(mid)
