"""Batch payloads built straight from columns, for bulk writers.

:func:`pack_rows` gives the same bytes as :func:`starquake.protocol.batch.pack_batch` over
``SingleMessageMetadata`` messages with the same fields, without building a protobuf message
per row: each row's metadata is written by hand, fields in ascending number as protobuf
serializes them (1 properties, 2 partition_key, 3 payload_size, 5 event_time, 8 sequence_id,
9 null_value).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from starquake.protocol.varint import SMALL_VARINT_LIMIT, SMALL_VARINTS, varint

__all__ = ["PackedBatch", "pack_rows"]

_U32 = struct.Struct(">I")


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return varint(len(raw)) + raw


@dataclass(frozen=True, slots=True)
class PackedBatch:
    """A batch payload ready to send: ``count`` messages with sequence ids ``first_sequence_id``
    to ``last_sequence_id`` (increasing), ``size`` bytes of values; ``partition_key`` is the
    first message's (the batch entry's own key, as a producer's batch container gives it)."""

    payload: bytes
    count: int
    first_sequence_id: int
    last_sequence_id: int
    size: int
    partition_key: str | None = None


def pack_rows(
    values: Sequence[bytes | None],
    sequence_ids: Sequence[int],
    keys: Sequence[str | None] | None = None,
    event_times: Sequence[int | None] | None = None,
    properties: Sequence[Sequence[tuple[str, str]] | None] | None = None,
) -> PackedBatch:
    """The batch payload of rows ``i`` of the columns (a None value is a null value).

    ``sequence_ids`` must increase; ``event_times`` are ms (None or 0: none).
    """
    count = len(values)
    if not count or len(sequence_ids) != count:
        raise ValueError("pack_rows needs as many sequence ids as values, and at least one")
    parts: list[bytes] = []
    append = parts.append
    pack_u32 = _U32.pack
    small = SMALL_VARINTS
    total = 0
    previous = -1
    for i in range(count):
        value = values[i]
        seq = sequence_ids[i]
        if seq <= previous:
            raise ValueError("pack_rows needs increasing sequence ids")
        previous = seq
        size = len(value) if value is not None else 0
        total += size
        head = b""
        if properties is not None:
            pairs = properties[i]
            if pairs:
                for k, v in pairs:
                    if k is None or v is None:
                        raise ValueError(f"message property {k!r} has no value (null)")
                    body = b"\x0a" + _text(k) + b"\x12" + _text(v)
                    head += b"\x0a" + varint(len(body)) + body
        if keys is not None:
            key = keys[i]
            if key is not None:
                head += b"\x12" + _text(key)
        meta = head + b"\x18" + (small[size] if size < SMALL_VARINT_LIMIT else varint(size))
        if event_times is not None:
            event = event_times[i]
            if event:
                meta += b"\x28" + varint(event)
        meta += b"\x40" + (small[seq] if 0 <= seq < SMALL_VARINT_LIMIT else varint(seq))
        if value is None:
            meta += b"\x48\x01"
            value = b""
        append(pack_u32(len(meta)))
        append(meta)
        append(value)
    first_key = keys[0] if keys is not None else None
    return PackedBatch(b"".join(parts), count, sequence_ids[0], sequence_ids[-1], total, first_key)
