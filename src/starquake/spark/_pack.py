"""Rows to write, packed from their Arrow columns in bulk: no Python object per row.

The writer's usual path turns each column into a Python list, routes every keyed row through
the Boost string hash one by one and builds each message's ``SingleMessageMetadata`` by hand
(:func:`starquake.client.bulk.pack_rows`). For the common rows (raw binary values,
optional string keys and event times, no properties, one topic) this module does the same
work with numpy over whole columns:

* :func:`boost_hashes` is :func:`starquake.common.hashes.boost_hash` for every string of an
  Arrow array at once (the 64x64 -> 128-bit multiplies done on 32-bit halves);
* :class:`PackColumns` encodes the rows of one producer into consecutive
  ``[u32 size][SingleMessageMetadata][value]`` segments, the bytes :func:`pack_rows` gives,
  and cuts them into batch payloads by the same row and byte limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from starquake.client.bulk import PackedBatch
from starquake.spark._views import concat_ranges

__all__ = ["PackColumns", "boost_hashes"]

_Q = np.uint64(0x9E3779B97F4A7C15)
_K = np.uint64(0xDF442D22CE4859B9)
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_INT32_MAX = np.uint64(0x7FFFFFFF)


def _mulx(a: np.ndarray, b: np.uint64) -> np.ndarray:
    """``lo64(a * b) ^ hi64(a * b)`` of 64-bit unsigned ``a`` and ``b`` (wrapping)."""
    a_lo, a_hi = a & _M32, a >> _S32
    b_lo, b_hi = b & _M32, b >> _S32
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    cross = (lo_lo >> _S32) + (hi_lo & _M32) + (lo_hi & _M32)
    low = (cross << _S32) | (lo_lo & _M32)
    high = a_hi * b_hi + (hi_lo >> _S32) + (lo_hi >> _S32) + (cross >> _S32)
    result: np.ndarray = low ^ high
    return result


_W0 = _mulx(np.array([_Q], np.uint64), _K)[0]


def _bytes_of(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the start offsets of a binary/string array's n + 1 items, its data bytes padded by
    8 zero bytes)."""
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64), np.concatenate((data, np.zeros(8, np.uint8)))


def _read_le(data: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """The ``size``-byte little-endian unsigned integers at ``at``."""
    value = np.zeros(len(at), np.uint64)
    for k in range(size):
        value |= data[at + k].astype(np.uint64) << np.uint64(8 * k)
    return value


def boost_hashes(keys: pa.Array) -> np.ndarray:
    """``boost_hash(key)`` (Boost >= 1.81, 64-bit, seed 0, masked to 31 bits) of every item
    of a string array, as int64 (a null item hashes as the empty string)."""
    offsets, data = _bytes_of(keys)
    start = offsets[:-1]
    n = (offsets[1:] - start).astype(np.int64)
    w = np.full(len(n), _W0, np.uint64)
    h = w ^ n.astype(np.uint64)
    words = n >> 3
    for j in range(int(words.max()) if len(words) else 0):
        live = np.nonzero(words > j)[0]
        w[live] += _Q
        v = _read_le(data, start[live] + 8 * j, 8)
        h[live] ^= _mulx(v + w[live], _K)
    p = start + (words << 3)
    rest = n - (words << 3)
    v = np.zeros(len(n), np.uint64)
    four = np.nonzero(rest >= 4)[0]
    shift = ((rest[four] - 4) * 8).astype(np.uint64)
    v[four] = (_read_le(data, start[four] + n[four] - 4, 4) << shift) | _read_le(data, p[four], 4)
    few = np.nonzero((rest > 0) & (rest < 4))[0]
    x1 = (rest[few] - 1) & 2
    x2 = rest[few] >> 1
    v[few] = (
        (data[p[few] + x1].astype(np.uint64) << (x1 * 8).astype(np.uint64))
        | (data[p[few] + x2].astype(np.uint64) << (x2 * 8).astype(np.uint64))
        | data[p[few]].astype(np.uint64)
    )
    w += _Q
    h ^= _mulx(v + w, _K)
    return (_mulx(h + w, _K) & _INT32_MAX).astype(np.int64)


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each unsigned value's varint."""
    size = np.ones(len(values), np.int64)
    for k in range(1, 10):
        size += values >= np.uint64(1 << (7 * k))
    return size


def _put_varints(out: np.ndarray, at: np.ndarray, values: np.ndarray, sizes: np.ndarray) -> None:
    for k in range(int(sizes.max()) if len(sizes) else 0):
        rows = np.nonzero(sizes > k)[0]
        byte = (values[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(sizes[rows] > k + 1, np.uint64(0x80), np.uint64(0))
        out[at[rows] + k] = byte.astype(np.uint8)


def _copy_ranges(
    out: np.ndarray, to: np.ndarray, data: np.ndarray, start: np.ndarray, size: np.ndarray
) -> None:
    """``out[to[i]:to[i] + size[i]] = data[start[i]:start[i] + size[i]]`` for every i."""
    total = int(size.sum())
    if not total:
        return
    before = np.cumsum(size) - size
    step = np.arange(total, dtype=np.int64)
    out[np.repeat(to - before, size) + step] = data[np.repeat(start - before, size) + step]


@dataclass(frozen=True)
class _Encoded:
    """Rows' segments, back to back: the bytes and where each row's segment starts (n + 1)."""

    data: np.ndarray
    bounds: np.ndarray


class PackColumns:
    """The columns of one Arrow batch of rows to write: ``value`` (binary, null allowed),
    ``__key`` (string or None) and ``__eventTime`` milliseconds (or None); see
    :meth:`of` for which batches this path takes."""

    def __init__(self, values: pa.Array, keys: pa.Array | None, event_ms: pa.Array | None) -> None:
        self.count = len(values)
        self._value_at, self._value_data = _bytes_of(values)
        self._value_null = _nulls(values)
        self.value_sizes = np.where(self._value_null, 0, np.diff(self._value_at))
        self._keys = keys
        self._key_at, self._key_data = _bytes_of(keys if keys is not None else pa.array([""]))
        # a row's key size; -1: no key (no key column, or a null key)
        self._key_size = np.full(self.count, -1, np.int64)
        if keys is not None:
            self._key_size = np.where(_nulls(keys), -1, np.diff(self._key_at))
        self._events: np.ndarray | None = None
        if event_ms is not None:
            events = event_ms.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            self._events = events.astype(np.uint64)

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> PackColumns | None:
        """The batch's columns, or None when this path does not take them: values that are
        not raw bytes (or more than 1 GiB of them), keys that are not strings, properties,
        headers, topics per row, a negative event time."""
        schema = batch.schema
        if any(schema.get_field_index(name) >= 0 for name in _PER_ROW_COLUMNS):
            return None
        columns = {name: _column(batch, name) for name in ("value", "__key", "__eventTime")}
        value, key, event = columns["value"], columns["__key"], columns["__eventTime"]
        if value is None or not pa.types.is_binary(value.type) or value.nbytes > _MAX_BYTES:
            return None
        if key is not None and not pa.types.is_string(key.type):
            return None
        if event is not None:
            if not pa.types.is_timestamp(event.type) or event.type.unit != "us":
                return None
            micros = event.cast(pa.int64())
            if pc.any(pc.less(micros, 0)).as_py():
                return None
            event = pc.divide(micros, 1000)  # non-negative: truncation is the floor
        return cls(value, key, event)

    def partitions(self, first: int, partitions: int) -> np.ndarray:
        """Each row's partition as the writer routes it: a keyed row (non-empty key) by
        the Boost hash of its key, another row ``(first + i) % partitions``."""
        spread = (first + np.arange(self.count, dtype=np.int64)) % partitions
        keyed = self._key_size > 0
        if self._keys is None or not keyed.any():
            return spread
        return np.where(keyed, boost_hashes(self._keys) % partitions, spread)

    def encode(self, rows: np.ndarray, first: int) -> _Encoded:
        """The segments of ``rows`` (ascending), with sequence ids ``first + row``."""
        sizes = self.value_sizes[rows]
        size_len = _varint_sizes(sizes.astype(np.uint64))
        seqs = (first + rows).astype(np.uint64)
        seq_len = _varint_sizes(seqs)
        meta = 1 + size_len + 1 + seq_len
        null = self._value_null[rows]
        meta += 2 * null
        key_size = self._key_size[rows]
        keyed = np.nonzero(key_size >= 0)[0]
        key_len = _varint_sizes(key_size[keyed].astype(np.uint64))
        meta[keyed] += 1 + key_len + key_size[keyed]
        events = event_len = None
        if self._events is not None:
            events = self._events[rows]
            event_len = np.where(events > 0, 1 + _varint_sizes(events), 0)
            meta += event_len
        head_bounds = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(4 + meta, out=head_bounds[1:])
        out = np.zeros(int(head_bounds[-1]), np.uint8)  # every row's size and metadata
        at = head_bounds[:-1].copy()
        for k in range(4):  # the big-endian u32 metadata size
            out[at + k] = ((meta >> (8 * (3 - k))) & 0xFF).astype(np.uint8)
        at += 4
        if len(keyed):
            out[at[keyed]] = 0x12
            _put_varints(out, at[keyed] + 1, key_size[keyed].astype(np.uint64), key_len)
            body = at[keyed] + 1 + key_len
            _copy_ranges(out, body, self._key_data, self._key_at[rows[keyed]], key_size[keyed])
            at[keyed] = body + key_size[keyed]
        out[at] = 0x18
        _put_varints(out, at + 1, sizes.astype(np.uint64), size_len)
        at += 1 + size_len
        if events is not None and event_len is not None:
            timed = np.nonzero(event_len)[0]
            out[at[timed]] = 0x28
            _put_varints(out, at[timed] + 1, events[timed], event_len[timed] - 1)
            at += event_len
        out[at] = 0x40
        _put_varints(out, at + 1, seqs, seq_len)
        at += 1 + seq_len
        nulls = np.nonzero(null)[0]
        out[at[nulls]] = 0x48
        out[at[nulls] + 1] = 0x01
        # each row's metadata then its value, copied back to back by Arrow
        count = len(rows)
        which = np.tile(np.array([0, 1], np.int64), count)
        pos = np.empty(2 * count, np.int64)
        pos[0::2], pos[1::2] = head_bounds[:-1], self._value_at[rows]
        length = np.empty(2 * count, np.int64)
        length[0::2], length[1::2] = 4 + meta, sizes
        joined = concat_ranges([out, self._value_data], which, pos, length)
        offsets = np.frombuffer(joined.buffers()[1], np.int32)[: 2 * count + 1]
        data = joined.buffers()[2]
        whole = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        bounds = offsets[0::2].astype(np.int64)
        return _Encoded(whole, bounds)

    def batches(
        self, rows: np.ndarray, first: int, max_rows: int, max_bytes: int
    ) -> Iterator[PackedBatch]:
        """``rows`` (ascending) in batch payloads of at most ``max_rows`` rows and, past
        their first row, ``max_bytes`` bytes of values (the producer's batching limits)."""
        encoded = self.encode(rows, first)
        sizes = self.value_sizes[rows]
        start = 0
        while start < len(rows):
            window = np.cumsum(sizes[start : start + max_rows])
            end = start + max(int(np.searchsorted(window, max_bytes, side="right")), 1)
            yield self._batch(encoded, rows, first, start, end, int(window[end - start - 1]))
            start = end

    def _batch(
        self, encoded: _Encoded, rows: np.ndarray, first: int, start: int, end: int, size: int
    ) -> PackedBatch:
        payload = encoded.data[encoded.bounds[start] : encoded.bounds[end]].tobytes()
        key = None
        if self._keys is not None:
            key = self._keys[int(rows[start])].as_py()
        return PackedBatch(
            payload,
            end - start,
            first + int(rows[start]),
            first + int(rows[end - 1]),
            size,
            key,
        )


# Values of more bytes in one Arrow batch go the per-row way (Arrow's binary arrays, which
# the packed path builds, hold up to 2 GiB).
_MAX_BYTES = 1 << 30

# Columns the packed path leaves to the per-row writer.
_PER_ROW_COLUMNS = ("__messageProperties", "headers", "__topic")


def _nulls(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.zeros(len(array), np.bool_)
    mask: np.ndarray = pc.is_null(array).to_numpy(zero_copy_only=False)
    return mask


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return batch.column(index) if index >= 0 else None
