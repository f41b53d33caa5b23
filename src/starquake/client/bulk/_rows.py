"""Rows of a bulk read: message columns, batched entries not split yet, and the splitter.

A batch payload is a sequence of ``[u32 size][SingleMessageMetadata][payload]`` messages.
:func:`split_batch` turns one into rows of :class:`MessageColumns`, one message at a time;
a reader that splits many batches in one vectorised call takes them whole as
:class:`BatchEntry` items from :class:`RowSegments` instead.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field

from starquake.protocol.batch import BatchFormatError, DecodeError
from starquake.protocol.varint import varint
from starquake.protocol.wire import pb

__all__ = [
    "BatchEntry",
    "MessageColumns",
    "RowSegments",
    "batch_suffixes",
    "payload_size_of",
    "split_batch",
]

_U32 = struct.Struct(">I")
# Shared by every row without properties (never modified).
_NO_PROPERTIES: list[tuple[str, str]] = []


@functools.lru_cache(maxsize=64)
def batch_suffixes(size: int) -> tuple[bytes, ...]:
    """For each index of a batch of ``size`` messages: the fields batch_index and batch_size."""
    tail = b"\x30" + varint(size)
    return tuple(b"\x20" + varint(i) + tail for i in range(size))


def payload_size_of(metadata: bytes) -> int:
    """The ``payload_size`` of a serialized SingleMessageMetadata (ValueError if it does
    not parse, or the size is negative)."""
    try:
        size = int(pb.SingleMessageMetadata.FromString(metadata).payload_size)
    except DecodeError as exc:
        raise ValueError(f"a message's metadata does not parse: {exc}") from None
    if size < 0:
        raise ValueError("a negative payload size")
    return size


@dataclass(slots=True)
class MessageColumns:
    """Decoded messages, one list per field (row ``i`` of every list is message ``i``).

    ``keys`` is None for a message without a key, ``event_times`` None without an event time
    (ms otherwise), ``properties`` holds ``(key, value)`` pairs, ``message_ids`` the serialized
    message ids (:meth:`MessageId.deserialize` of either client reads them back).
    ``schema_versions`` holds each message's schema version as sent (8 bytes, or empty when
    the message names none), and only when the reader was created ``with_schema_versions``
    (it stays empty otherwise).
    """

    values: list[bytes | None] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    publish_times: list[int] = field(default_factory=list)
    event_times: list[int | None] = field(default_factory=list)
    properties: list[list[tuple[str, str]]] = field(default_factory=list)
    message_ids: list[bytes] = field(default_factory=list)
    schema_versions: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """A batched entry whose rows ``lo`` to ``hi - 1`` (batch indexes) are in the range read.

    ``data`` is the uncompressed (and decrypted) batch payload of ``count`` messages,
    ``prefix`` the serialized message id of the entry (ledger, entry, partition) that each
    row's id starts with."""

    ledger_id: int
    entry_id: int
    data: bytes
    count: int
    lo: int
    hi: int
    publish_time: int
    prefix: bytes
    schema_version: bytes


def split_batch(
    topic: str, batch: BatchEntry, cols: MessageColumns, with_schema_versions: bool = False
) -> None:
    """Append the rows of ``batch`` in its range (skipping compacted-out ones) to ``cols``.

    Raises :class:`BatchFormatError` when the payload does not hold ``count`` messages."""
    count, lo, hi, data = batch.count, batch.lo, batch.hi, batch.data
    publish_time, prefix = batch.publish_time, batch.prefix
    suffixes = batch_suffixes(count)
    values, keys, pubs = cols.values, cols.keys, cols.publish_times
    events, props, ids = cols.event_times, cols.properties, cols.message_ids
    size = len(data)
    offset = 0
    parse = pb.SingleMessageMetadata.FromString
    unpack = _U32.unpack_from
    no_props = _NO_PROPERTIES
    rows_before = len(values)
    where = f"{topic}: entry {batch.ledger_id}:{batch.entry_id}"
    try:
        for index in range(count):
            (meta_size,) = unpack(data, offset)
            meta_end = offset + 4 + meta_size
            single = parse(data[offset + 4 : meta_end])
            offset = meta_end + single.payload_size
            if offset > size or meta_end > size:
                raise ValueError("a message runs past the end of the batch")
            if index < lo or index >= hi or single.compacted_out:
                continue
            values.append(None if single.null_value else data[meta_end:offset])
            key = single.partition_key
            keys.append(key if key or single.HasField("partition_key") else None)
            pubs.append(publish_time)
            events.append(single.event_time or None)
            kvs = single.properties
            props.append([(kv.key, kv.value) for kv in kvs] if kvs else no_props)
            ids.append(prefix + suffixes[index])
    except (struct.error, DecodeError, ValueError) as exc:
        raise BatchFormatError(f"{where} holds a damaged batch: {exc}") from None
    if offset != size:
        raise BatchFormatError(
            f"{where}: {size - offset} bytes after the {count} messages of its batch"
        )
    if with_schema_versions:  # one version for the whole batch
        cols.schema_versions.extend([batch.schema_version] * (len(values) - rows_before))


class RowSegments:
    """The rows of one read, in order: :attr:`rows` collects decoded rows; a batched entry
    is split into it at once (``split`` names the topic for errors) or, with ``split`` None,
    kept whole in :attr:`segments` between the decoded rows before and after it."""

    __slots__ = ("_sealed", "rows", "segments", "split", "with_schema_versions")

    def __init__(self, split: str | None, with_schema_versions: bool = False) -> None:
        self.split = split
        self.with_schema_versions = with_schema_versions
        self.rows = MessageColumns()
        self.segments: list[MessageColumns | BatchEntry] = []
        self._sealed = 0  # rows in segments

    @property
    def count(self) -> int:
        """Rows so far (those of whole batches included)."""
        return self._sealed + len(self.rows)

    def add_batch(self, batch: BatchEntry) -> None:
        """Split ``batch`` into :attr:`rows`, or keep it whole."""
        if self.split is not None:
            split_batch(self.split, batch, self.rows, self.with_schema_versions)
            return
        self.seal()
        self.segments.append(batch)
        self._sealed += max(batch.hi - batch.lo, 0)

    def seal(self) -> None:
        """Close the current run of decoded rows (it becomes a segment)."""
        if len(self.rows):
            self._sealed += len(self.rows)
            self.segments.append(self.rows)
            self.rows = MessageColumns()
