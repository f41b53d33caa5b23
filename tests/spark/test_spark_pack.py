"""The sink's packed path gives the bytes, batches and routes of the per-row path.

Rows of random shape (null and empty values, values of every varint size, null, empty and
non-ASCII keys, event times or none) are packed from their Arrow columns in bulk and, as the
per-row writer does, one row at a time with ``pack_rows`` cut by the same row and byte limits;
the payloads, counts, sequence ids and keys must be equal. Routing must equal the Boost hash
of every key (the official client's default routing, checked against it in
``tests/common/test_hashes.py``). No Spark here: the columns are what Spark hands a writer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.common.hashes import boost_hash
from starquake.protocol.batch_rows import PackedBatch, pack_rows
from starquake.spark._pack import PackColumns, boost_hashes

keys = st.one_of(st.none(), st.text(max_size=40))
values = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.integers(120, 17000).map(lambda n: bytes(n % 251 for _ in range(n))),
)
events = st.one_of(st.none(), st.just(0), st.integers(1, 2**50))
rows_of = st.lists(st.tuples(values, keys, events), min_size=1, max_size=50)


@given(st.lists(st.text(max_size=70), max_size=60))
def test_boost_hashes_equal_the_per_key_hash(texts: list[str]) -> None:
    array = pa.array(texts, pa.string())
    assert boost_hashes(array).tolist() == [boost_hash(t) for t in texts]
    if texts:  # a slice starts its offsets part way in
        assert boost_hashes(array.slice(1)).tolist() == [boost_hash(t) for t in texts[1:]]


def _batch(rows: list[tuple[Any, Any, Any]], with_keys: bool, with_events: bool) -> pa.RecordBatch:
    columns = {"value": pa.array([r[0] for r in rows], pa.binary())}
    if with_keys:
        columns["__key"] = pa.array([r[1] for r in rows], pa.string())
    if with_events:
        micros = [None if r[2] is None else r[2] * 1000 for r in rows]
        columns["__eventTime"] = pa.array(micros, pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_pydict(columns)


def _per_row(
    rows: list[tuple[Any, Any, Any]],
    picked: list[int],
    first: int,
    limits: tuple[int, int],
    with_keys: bool,
    with_events: bool,
) -> list[PackedBatch]:
    """The per-row writer's batches: ``pack_rows`` over runs cut as ``_send_packed`` cuts."""
    max_rows, max_bytes = limits

    def pack(run: list[int]) -> PackedBatch:
        return pack_rows(
            [rows[i][0] for i in run],
            [first + i for i in run],
            [rows[i][1] for i in run] if with_keys else None,
            [rows[i][2] for i in run] if with_events else None,
        )

    out: list[PackedBatch] = []
    start = size = 0
    for pos, i in enumerate(picked):
        value_size = len(rows[i][0]) if rows[i][0] is not None else 0
        if pos > start and (pos - start >= max_rows or size + value_size > max_bytes):
            out.append(pack(picked[start:pos]))
            start, size = pos, 0
        size += value_size
    out.append(pack(picked[start:]))
    return out


@settings(max_examples=150, deadline=None)
@given(
    rows_of,
    st.booleans(),
    st.booleans(),
    st.sampled_from([0, 7, 1 << 32, (5 << 32) + 3, 1 << 62]),
    st.sampled_from([(1000, 128 * 1024), (3, 200), (1, 1), (1000, 1)]),
    st.data(),
)
def test_packed_batches_equal_the_per_row_batches(
    rows: list[tuple[Any, Any, Any]],
    with_keys: bool,
    with_events: bool,
    first: int,
    limits: tuple[int, int],
    data: st.DataObject,
) -> None:
    picked = sorted(data.draw(st.sets(st.integers(0, len(rows) - 1), min_size=1)))
    cols = PackColumns.of(_batch(rows, with_keys, with_events))
    assert cols is not None
    got = list(cols.batches(np.array(picked, np.int64), first, *limits))
    assert got == _per_row(rows, picked, first, limits, with_keys, with_events)


@given(rows_of, st.integers(0, 1 << 40), st.integers(1, 9))
def test_rows_route_as_the_per_row_writer(
    rows: list[tuple[Any, Any, Any]], first: int, partitions: int
) -> None:
    cols = PackColumns.of(_batch(rows, True, False))
    assert cols is not None
    want = [
        boost_hash(key) % partitions if key else (first + i) % partitions
        for i, (_value, key, _event) in enumerate(rows)
    ]
    assert cols.partitions(first, partitions).tolist() == want


def test_rows_the_packed_path_leaves_to_the_per_row_writer() -> None:
    """Properties, headers, per-row topics, non-binary values, non-string keys and times
    before 1970 go the per-row way (which casts, checks and reports them)."""
    value = pa.array([b"v"], pa.binary())
    others = {
        "__messageProperties": pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string())),
        "__topic": pa.array(["t"], pa.string()),
        "__key": pa.array([b"k"], pa.binary()),
        "__eventTime": pa.array([-1000], pa.timestamp("us", tz="UTC")),
    }
    for name, column in others.items():
        assert PackColumns.of(pa.RecordBatch.from_pydict({"value": value, name: column})) is None
    assert PackColumns.of(pa.RecordBatch.from_pydict({"value": pa.array(["v"])})) is None
    assert PackColumns.of(pa.RecordBatch.from_pydict({"value": value})) is not None


@given(rows_of, st.booleans())
def test_a_sliced_batch_packs_as_its_rows(
    rows: list[tuple[Any, Any, Any]], with_events: bool
) -> None:
    """Arrow batches that are slices of bigger ones (their buffers start before their rows)."""
    whole = _batch([(b"x" * 300, "before", 5), *rows], True, with_events).slice(1)
    alone = _batch(rows, True, with_events)
    every = np.arange(len(rows), dtype=np.int64)
    sliced, fresh = PackColumns.of(whole), PackColumns.of(alone)
    assert sliced is not None and fresh is not None
    assert list(sliced.batches(every, 3, 7, 500)) == list(fresh.batches(every, 3, 7, 500))
    assert sliced.partitions(3, 5).tolist() == fresh.partitions(3, 5).tolist()
