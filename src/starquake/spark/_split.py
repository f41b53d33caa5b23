"""Batched entries split into Arrow columns in bulk, without a Python object per message.

A batch payload is a run of ``[u32 size][SingleMessageMetadata][value]`` messages. Their
metadata is read either by the compiled one-pass loop of :mod:`starquake.spark._smm_walk`
(the compiled build) or with numpy: the chain of messages found in bulk, then every field
of every message of many entries read in one pass per field slot. Either way the value, key
and property bytes are then copied into Arrow buffers with boolean masks. The result is the same
rows, columns and values as :func:`starquake.client.bulk.split_batch` gives; whatever this
path does not handle exactly the same way (malformed or unusual metadata, invalid UTF-8,
times out of range) raises :class:`Unsplittable` and the caller uses the per-message splitter.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from starquake.client.bulk import BatchEntry, payload_size_of
from starquake.spark import _smm_walk
from starquake.spark._arrow_bytes import Unsplittable, gather, message_ids, timestamps

__all__ = ["Unsplittable", "split_to_arrays"]

_U32 = struct.Struct(">I")
_PAD = bytes(16)  # lets the vectorised varint reads run past the last byte safely
_I32_MAX = (1 << 31) - 1
_U32_MAX = (1 << 32) - 1
# Wire types of the SingleMessageMetadata fields (number -> type): a field met with another
# type is left to the per-message splitter.
_SMM_TYPES = {1: 2, 2: 2, 3: 0, 4: 0, 5: 0, 6: 0, 7: 2, 8: 0, 9: 0, 10: 0}
_KV_TYPES = {1: 2, 2: 2}

WALK_COMPILED = not str(_smm_walk.__file__).endswith(".py")
"""Whether this process runs the compiled message walk (then batches are split with it)."""


def _small_varint(buf: bytes, p: int, end: int) -> int:
    """The varint of at most 2 bytes at ``p`` (before ``end``), else -1."""
    if p >= end:
        return -1
    first = buf[p]
    if first < 0x80:
        return first
    if p + 1 >= end or buf[p + 1] >= 0x80:
        return -1
    return (first & 0x7F) | (buf[p + 1] << 7)


def _walk(buf: bytes, spans: Sequence[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """For every message of the batches ``(offset, length, count)`` in ``buf``: where its
    metadata starts and its value size. The fields before ``payload_size`` (properties and
    key) are skipped by hand; any other layout is parsed with protobuf."""
    starts: list[int] = []
    sizes: list[int] = []
    unpack = _U32.unpack_from
    for base, length, count in spans:
        off, stop = base, base + length
        for _ in range(count):
            if off + 4 > stop:
                raise Unsplittable("a message runs past the end of its batch")
            (meta_size,) = unpack(buf, off)
            p = start = off + 4
            meta_end = start + meta_size
            if meta_end > stop:
                raise Unsplittable("a message runs past the end of its batch")
            tag = buf[p] if p < meta_end else 0
            while tag == 0x0A or tag == 0x12:
                n = _small_varint(buf, p + 1, meta_end)
                if n < 0:
                    break
                p += 2 + n + (n >= 0x80)
                tag = buf[p] if p < meta_end else 0
            size = _small_varint(buf, p + 1, meta_end) if tag == 0x18 else -1
            if size < 0:
                try:
                    size = payload_size_of(buf[start:meta_end])
                except ValueError as exc:
                    raise Unsplittable(str(exc)) from None
            starts.append(start)
            sizes.append(size)
            off = meta_end + size
        if off != stop:
            raise Unsplittable("a batch does not end where its last message does")
    return starts, sizes


def _chain(
    b: np.ndarray, spans: Sequence[tuple[int, int, int]]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Where every message of the batches starts (its u32 size), found in bulk, or None
    when the usual layout (metadata under 64 KiB, properties and key before
    ``payload_size``) does not hold for them.

    Every position that could start a message is a candidate; each candidate's successor
    (the position after its value) is computed for all at once, and the batches' chains
    are then followed through the successors, one step per message index."""
    n = len(b) - len(_PAD)
    m = n - 4
    if m <= 0 or not spans:
        return None
    zeros = np.flatnonzero(b[:m] == 0)
    tag = b[zeros + 4]
    cand = zeros[(b[zeros + 1] == 0) & ((tag == 0x0A) | (tag == 0x12) | (tag == 0x18))]
    if len(cand) > 4 * sum(count for _, _, count in spans) + 64:
        return None  # values full of look-alikes: the per-message walk is cheaper
    meta = cand + 4
    meta_end = meta + ((b[cand + 2].astype(np.int64) << 8) | b[cand + 3])
    at = meta.copy()
    try:
        while True:
            sel = np.nonzero((at < meta_end) & ((b[np.minimum(at, n)] | 8) == 0x1A))[0]
            if not sel.size:
                break
            length, length_size = _varint(b, at[sel] + 1)
            at[sel] += 1 + length_size + np.minimum(length, np.uint64(n)).astype(np.int64)
        good = (at < meta_end) & (meta_end <= n) & (b[np.minimum(at, n)] == 0x18)
        size, size_len = _varint(b, np.where(good, at + 1, 0))
    except Unsplittable:
        return None
    good &= at + size_len < meta_end + 1
    after = meta_end + np.minimum(size, np.uint64(n)).astype(np.int64)
    succ = np.searchsorted(cand, after)
    succ[(succ >= len(cand)) | ~good] = len(cand)
    cand_ext = np.append(cand, -1)
    succ[cand_ext[succ] != after] = -1
    out = _follow(cand_ext, succ, good, after, spans)
    if out is None:
        return None
    return cand[out], size.astype(np.int64)[out]


def _follow(
    cand_ext: np.ndarray,
    succ: np.ndarray,
    good: np.ndarray,
    after: np.ndarray,
    spans: Sequence[tuple[int, int, int]],
) -> np.ndarray | None:
    """The candidate indexes of every batch's messages, in order, following each batch's
    chain of successors from its base; None when a chain breaks or misses its batch's end.
    ``cand_ext`` is the candidates followed by -1 (the dead end)."""
    cand = cand_ext[:-1]
    bases = np.array([base for base, _, _ in spans], np.int64)
    stops = bases + np.array([length for _, length, _ in spans], np.int64)
    counts = np.array([count for _, _, count in spans], np.int64)
    cur = np.searchsorted(cand, bases)
    if (cur >= len(cand)).any() or (cand_ext[cur] != bases).any():
        return None
    sentinel = len(cand)
    succ[succ < 0] = sentinel
    # every message's candidate: the count-th successor of its batch's base, found for all
    # messages at once by binary lifting (``links`` jumps 1, 2, 4, ... messages ahead)
    links = np.append(succ, sentinel)  # a dead end leads to itself
    first = np.cumsum(counts) - counts
    steps = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first, counts)
    out = np.repeat(cur, counts)
    bit = 0
    while steps.size and (steps >> bit).any():
        jump = np.nonzero((steps >> bit) & 1)[0]
        out[jump] = links[out[jump]]
        links = links[links]
        bit += 1
    if (out == sentinel).any() or not good[out].all():
        return None
    last = out[np.cumsum(counts) - 1]
    if (after[last] != stops).any():
        return None
    return out


def _varint(b: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varints at ``pos``: values (uint64) and lengths in bytes."""
    val = b[pos].astype(np.uint64)
    more = val >= 0x80
    val &= np.uint64(0x7F)
    size = np.ones(len(pos), np.int64)
    k = 1
    while more.any():
        if k >= 10:
            raise Unsplittable("a varint longer than 10 bytes")
        idx = np.nonzero(more)[0]
        byte = b[pos[idx] + k].astype(np.uint64)
        val[idx] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
        size[idx] += 1
        more[idx] = byte >= 0x80
        k += 1
    return val, size


@dataclass(slots=True)
class _Fields:
    """Per message: where each field's last occurrence is (-1: absent) and its varint value
    or length; plus every occurrence of one repeated field."""

    pos: dict[int, np.ndarray]
    val: dict[int, np.ndarray]
    rep_row: np.ndarray
    rep_pos: np.ndarray
    rep_len: np.ndarray


def _scan(
    b: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    types: dict[int, int],
    repeated: int,
    wanted: tuple[int, ...],
) -> _Fields:
    """Read the protobuf fields of the messages ``b[starts[i]:ends[i]]``: the ``wanted`` ones
    (the others are checked for their wire type and skipped)."""
    n = len(starts)
    pos = {f: np.full(n, -1, np.int64) for f in wanted}
    val = {f: np.zeros(n, np.uint64) for f in wanted}
    reps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    table = np.full(max(types) + 2, -1, np.int64)
    for number, kind in types.items():
        table[number] = kind
    cursor = starts.copy()
    live = np.nonzero(cursor < ends)[0]
    while live.size:
        at = cursor[live]
        tag, tag_size = _varint(b, at)
        if ((tag_size > 5) | (tag > np.uint64(_U32_MAX))).any():  # protobuf refuses them
            raise Unsplittable("a field tag out of range")
        wire = (tag & np.uint64(7)).astype(np.int64)
        field = (tag >> np.uint64(3)).astype(np.int64)
        body = at + tag_size
        nxt = np.empty_like(body)
        expected = table[np.minimum(field, len(table) - 1)]
        if ((wire >= 3) & (wire != 5)).any() or ((expected >= 0) & (expected != wire)).any():
            raise Unsplittable("a group, an invalid wire type or a field of another type")
        fixed = wire == 1
        nxt[fixed] = body[fixed] + 8
        fixed = wire == 5
        nxt[fixed] = body[fixed] + 4
        var = (wire == 0) | (wire == 2)
        value, value_size = _varint(b, body[var])
        data_at = body[var] + value_size
        step = np.where(wire[var] == 2, value_size + value.astype(np.int64), value_size)
        if (value[wire[var] == 2] > np.uint64(_I32_MAX)).any():
            raise Unsplittable("a length out of range")
        nxt[var] = body[var] + step
        rows, fields = live[var], field[var]
        seen = np.bincount(np.minimum(fields, len(table) - 1), minlength=len(table))
        for number in np.nonzero(seen[:-1])[0].tolist():
            if number not in pos and number != repeated:
                continue
            hit = fields == number
            if number == repeated:
                reps.append((rows[hit], data_at[hit], value[hit].astype(np.int64)))
                continue
            pos[number][rows[hit]] = data_at[hit]
            val[number][rows[hit]] = value[hit]
        if (nxt > ends[live]).any() or (field == 0).any():
            raise Unsplittable("a field runs past the end of its message")
        cursor[live] = nxt
        live = live[nxt < ends[live]]
    rep = _by_row(reps)
    return _Fields(pos, val, rep[0], rep[1], rep[2])


def _by_row(reps: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """The occurrences of the repeated field (rows, positions, lengths), gathered from the
    scan's rounds and ordered by row (in field order within a row)."""
    if not reps:
        return [np.zeros(0, np.int64)] * 3
    rep_row = np.concatenate([r[0] for r in reps])
    order = np.argsort(rep_row, kind="stable")
    return [np.concatenate([r[i] for r in reps])[order] for i in range(3)]


@dataclass(slots=True)
class _Meta:
    """Per message: where its value is, its key (position -1: none), event time (0: none),
    ``compacted_out`` and ``null_value``."""

    value_pos: np.ndarray
    value_len: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    event: np.ndarray
    compacted: np.ndarray
    null_value: np.ndarray


# (row, key position, key length, value position, value length) of each property, in order
_Props = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def split_to_arrays(
    batches: Sequence[BatchEntry], schema: pa.Schema, *, compiled_walk: bool | None = None
) -> list[pa.Array]:
    """The rows of ``batches`` (in range, not compacted out) as the arrays of ``schema``'s
    columns ``value, __key, __messageId, __publishTime, __eventTime, __messageProperties``.

    The metadata is read by :func:`starquake.spark._smm_walk.walk` where that is compiled
    (``compiled_walk`` None: as this process's build), else with numpy."""
    buf = b"".join([*(batch.data for batch in batches), _PAD])
    spans, base = [], 0
    for batch in batches:
        spans.append((base, len(batch.data), batch.count))
        base += len(batch.data)
    b = np.frombuffer(buf, np.uint8)
    if compiled_walk is None:
        compiled_walk = WALK_COMPILED
    if compiled_walk:
        meta, props_of = _walked(buf, spans)
    else:
        meta, props_of = _scanned(b, buf, spans)
    counts = np.array([batch.count for batch in batches], np.int64)
    entry = np.repeat(np.arange(len(batches)), counts)
    first = np.zeros(len(batches), np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    index = np.arange(len(meta.value_pos)) - first[entry]
    lo = np.array([batch.lo for batch in batches], np.int64)[entry]
    hi = np.array([batch.hi for batch in batches], np.int64)[entry]
    kept = (index >= lo) & (index < hi) & (meta.compacted == 0)
    rows = np.nonzero(kept)[0]
    return _columns(b, batches, meta, props_of(rows), rows, entry, index, schema)


def _walked(
    buf: bytes, spans: list[tuple[int, int, int]]
) -> tuple[_Meta, Callable[[np.ndarray], _Props]]:
    """The metadata read in one pass, message by message (the compiled loop)."""
    try:
        w = _smm_walk.walk(buf, spans)
    except ValueError as exc:
        raise Unsplittable(str(exc)) from None

    def ints(values: list[int]) -> np.ndarray:
        return np.array(values, np.int64)

    n = len(w.value_at)
    # the messages are back to back from the buffer's start: each one's start is the sum
    # of the sizes before it, and the walk gave its value's and key's offsets from it
    value_at, value_len, key_at = ints(w.value_at), ints(w.value_len), ints(w.key_at)
    start = np.zeros(n, np.int64)
    np.cumsum((value_at + value_len)[:-1], out=start[1:])
    event = np.zeros(n, np.uint64)
    event[ints(w.event_row)] = np.array(w.event_time, np.uint64)
    compacted = np.zeros(n, np.uint64)
    compacted[ints(w.compacted)] = 1
    null_value = np.zeros(n, np.uint64)
    null_value[ints(w.null_value)] = 1
    meta = _Meta(
        start + value_at,
        value_len,
        np.where(key_at >= 0, start + key_at, -1),
        ints(w.key_len),
        event,
        compacted,
        null_value,
    )
    lists = (w.prop_row, w.prop_key_pos, w.prop_key_len, w.prop_value_pos, w.prop_value_len)
    props = tuple(ints(values) for values in lists)

    def props_of(rows: np.ndarray) -> _Props:
        keep = np.isin(props[0], rows)
        row, kpos, klen, vpos, vlen = (column[keep] for column in props)
        return row, kpos, klen, vpos, vlen

    return meta, props_of


def _scanned(
    b: np.ndarray, buf: bytes, spans: list[tuple[int, int, int]]
) -> tuple[_Meta, Callable[[np.ndarray], _Props]]:
    """The metadata read with numpy, one field slot of every message at a time."""
    found = _chain(b, spans) if all(count > 0 for _, _, count in spans) else None
    if found is not None:
        starts, sizes = found[0] + 4, found[1]
    else:
        start_list, size_list = _walk(buf, spans)
        starts = np.array(start_list, np.int64)
        sizes = np.array(size_list, np.int64)
    meta_ends = starts + _meta_sizes(b, starts)
    smm = _scan(b, starts, meta_ends, _SMM_TYPES, repeated=1, wanted=(2, 3, 4, 5, 9))
    if (smm.pos[3] < 0).any() or (smm.val[3].astype(np.int64) != sizes).any():
        raise Unsplittable("payload sizes disagree")
    meta = _Meta(
        meta_ends,
        sizes,
        smm.pos[2],
        smm.val[2].astype(np.int64),
        smm.val[5],
        smm.val[4],
        smm.val[9],
    )

    def props_of(rows: np.ndarray) -> _Props:
        # every property is read, also those of messages left out (compacted out, out of
        # range): a damaged one fails the batch, as it fails the per-message splitter
        kv_pos, kv_len = smm.rep_pos, smm.rep_len
        kv = _scan(b, kv_pos, kv_pos + kv_len, _KV_TYPES, repeated=0, wanted=(1, 2))
        if (kv.pos[1] < 0).any() or (kv.pos[2] < 0).any():
            raise Unsplittable("a property without key or value")
        keep = np.isin(smm.rep_row, rows)
        return (
            smm.rep_row[keep],
            kv.pos[1][keep],
            kv.val[1].astype(np.int64)[keep],
            kv.pos[2][keep],
            kv.val[2].astype(np.int64)[keep],
        )

    return meta, props_of


def _meta_sizes(b: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The big-endian u32 metadata size before each of ``starts``."""
    size = np.zeros(len(starts), np.int64)
    for k in range(4):
        size = (size << 8) | b[starts - 4 + k].astype(np.int64)
    return size


def _columns(
    b: np.ndarray,
    batches: Sequence[BatchEntry],
    meta: _Meta,
    props: _Props,
    rows: np.ndarray,
    entry: np.ndarray,
    index: np.ndarray,
    schema: pa.Schema,
) -> list[pa.Array]:
    null_value = meta.null_value[rows] != 0
    value = gather(b, meta.value_pos[rows], meta.value_len[rows], ~null_value, pa.binary())
    key_pos = meta.key_pos[rows]
    key = gather(b, key_pos, meta.key_len[rows], key_pos >= 0, pa.string())
    publish = np.array([batch.publish_time for batch in batches], np.uint64)[entry[rows]]
    event = meta.event[rows]
    kv_row, key_at, key_size, text_at, text_size = props
    per_row = np.zeros(len(rows) + 1, np.int64)
    np.add.at(per_row, np.searchsorted(rows, kv_row) + 1, 1)
    offsets = pa.array(np.cumsum(per_row).astype(np.int32))
    props_type = schema.field("__messageProperties").type
    names = gather(b, key_at, key_size, None, pa.string())
    texts = gather(b, text_at, text_size, None, pa.string())
    properties = pa.MapArray.from_arrays(offsets, names, texts, type=props_type)
    return [
        value,
        key,
        message_ids(batches, entry[rows], index[rows]),
        timestamps(publish, None, schema.field("__publishTime").type),
        timestamps(event, event != 0, schema.field("__eventTime").type),
        properties,
    ]
