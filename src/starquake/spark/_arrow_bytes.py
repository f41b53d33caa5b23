"""Arrow arrays of byte ranges, times and message ids, built in bulk for the batch splitter
(:mod:`starquake.spark._split`) without a Python object per row."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute

from starquake.client.bulk import BatchEntry
from starquake.spark._views import concat_ranges

__all__ = ["Unsplittable", "gather", "message_ids", "timestamps"]

_I32_MAX = (1 << 31) - 1
_I64_MAX = (1 << 63) - 1


class Unsplittable(ValueError):
    """These batches need the per-message splitter (it also reports damage precisely)."""


def gather(
    b: np.ndarray, pos: np.ndarray, length: np.ndarray, valid: np.ndarray | None, kind: pa.DataType
) -> pa.Array:
    """A binary/string array of the byte ranges ``[pos, pos + length)`` (ascending and
    disjoint) of ``b``; null where ``valid`` is False."""
    n = len(pos)
    length = length if valid is None else np.where(valid, length, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    if offsets[-1] > _I32_MAX:
        raise Unsplittable("more than 2 GiB of bytes in one column")
    total = int(offsets[-1])
    used = length > 0
    first, size = pos[used], length[used]
    if total > 4 * (len(b) - total) and len(b) <= _I32_MAX:  # most of the buffer
        copied = concat_ranges([b], np.zeros(n, np.int64), pos, length)
        offsets_buffer, data_buffer = copied.buffers()[1:]
    else:  # few bytes: gather them by index
        data = b[np.repeat(first - offsets[:-1][used], size) + np.arange(total)]
        offsets_buffer, data_buffer = pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)
    bitmap = None
    nulls = 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = int(n - np.count_nonzero(valid))
    buffers = [bitmap, offsets_buffer, data_buffer]
    array = pa.Array.from_buffers(kind, n, buffers, null_count=nulls)
    if kind == pa.string():
        try:
            array.validate(full=True)
        except pa.ArrowInvalid:
            raise Unsplittable("a string that is not UTF-8") from None
    return array


def timestamps(millis: np.ndarray, valid: np.ndarray | None, kind: pa.DataType) -> pa.Array:
    if (millis > np.uint64(_I64_MAX)).any():
        raise Unsplittable("a time out of range")
    micros = millis.astype(np.int64) * 1000  # wraps as Arrow's unchecked multiply does
    bitmap, nulls = None, 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = int(len(micros) - np.count_nonzero(valid))
    return pa.Array.from_buffers(kind, len(micros), [bitmap, pa.py_buffer(micros)], nulls)


# The field batch_index (b"\x20" + varint) of the indexes 0, 1, ...: grown on demand.
_index_fields: pa.Array = pa.array([], pa.binary())


def _index_field_array(count: int) -> pa.Array:
    """The batch_index fields of the indexes 0 to at least ``count - 1``."""
    global _index_fields
    if len(_index_fields) < count:
        size = 1 << max(count - 1, 1023).bit_length()
        _index_fields = pa.array([b"\x20" + _varint_of(i) for i in range(size)], pa.binary())
    return _index_fields


def _varint_of(value: int) -> bytes:
    """The protobuf varint of a non-negative ``value`` (the Spark package stays off the
    protocol package: it reads what the client hands it)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def message_ids(batches: Sequence[BatchEntry], entry: np.ndarray, index: np.ndarray) -> pa.Array:
    """Each row's id: its entry's serialized id followed by its batch index and size (the
    fields batch_index and batch_size), joined by Arrow."""
    heads = pa.array([batch.prefix for batch in batches], pa.binary())
    tails = pa.array([b"\x30" + _varint_of(batch.count) for batch in batches], pa.binary())
    fields = _index_field_array(int(index.max()) + 1 if len(index) else 1)
    at = pa.array(entry)
    joined: pa.Array = pa.compute.binary_join_element_wise(
        heads.take(at), fields.take(pa.array(index)), tails.take(at), b""
    )
    return joined
