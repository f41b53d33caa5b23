"""The bulk batch splitter gives exactly the rows of the per-message splitter.

Stored entries are built as producers write them (batches of random keys, properties, event
times, null values, compacted-out messages; every compression codec) and read through the
bulk reader's entry decoding, once split message by message and once handed out whole and
split in bulk into Arrow arrays. The record batches must be equal. Every test runs with each
way of reading the metadata: the one-pass message walk (compiled in the compiled build) and
numpy's field slots; damaged batches either split as message by message or are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starquake.client.bulk import EARLIEST, BatchEntry, BulkReader, Position, RowSegments
from starquake.protocol.batch import pack_batch
from starquake.protocol.compression import CompressionCodec, compress
from starquake.protocol.framing import encode_entry
from starquake.protocol.wire import pb
from starquake.spark import _split
from starquake.spark._arrow_bytes import gather
from starquake.spark._rows import arrow_schema, segments_to_record_batches, to_record_batch
from starquake.spark._split import Unsplittable, split_to_arrays

TOPIC = "persistent://public/default/split-partition-3"

texts = st.text(max_size=12)
messages = st.fixed_dictionaries(
    {
        "value": st.one_of(st.none(), st.binary(max_size=300)),
        "key": st.one_of(st.none(), st.text(max_size=200)),
        "event_time": st.one_of(st.none(), st.integers(1, 2**45)),
        "properties": st.lists(st.tuples(texts, texts), max_size=4),
        "sequence_id": st.one_of(st.none(), st.integers(0, 2**63)),
        "compacted_out": st.booleans(),
        "ordering_key": st.one_of(st.none(), st.binary(max_size=8)),
    }
)
entries = st.lists(
    st.tuples(
        st.lists(messages, min_size=1, max_size=40),
        st.sampled_from(list(CompressionCodec)),
        st.booleans(),  # batched (else one message per entry)
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture(autouse=True, scope="module", params=["message walk", "numpy slots"])
def metadata_reader(request: pytest.FixtureRequest) -> Iterator[str]:
    """The splitter reads the metadata with the message walk, then with numpy."""
    before = _split.WALK_COMPILED
    _split.WALK_COMPILED = request.param == "message walk"
    try:
        yield str(request.param)
    finally:
        _split.WALK_COMPILED = before


class _Stream:
    def release(self, messages: int) -> None:
        """No flow control in these tests."""


def _fill(meta: Any, message: dict[str, Any]) -> None:
    """The fields a single message's metadata and an entry's metadata share."""
    if message["key"] is not None:
        meta.partition_key = message["key"]
    if message["event_time"] is not None:
        meta.event_time = message["event_time"]
    if message["value"] is None:
        meta.null_value = True
    for name, text in message["properties"]:
        meta.properties.add(key=name, value=text)


def _single(message: dict[str, Any]) -> pb.SingleMessageMetadata:
    meta = pb.SingleMessageMetadata()
    _fill(meta, message)
    if message["sequence_id"] is not None:
        meta.sequence_id = message["sequence_id"]
    if message["ordering_key"] is not None:
        meta.ordering_key = message["ordering_key"]
    if message["compacted_out"]:
        meta.compacted_out = True
    return meta


def _entry(batch: list[dict[str, Any]], codec: int, batched: bool, seq: int) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1_700_000 + seq)
    if batched:
        payload = pack_batch([(_single(m), m["value"] or b"") for m in batch])
        meta.num_messages_in_batch = len(batch)
    else:
        payload = batch[0]["value"] or b""
        _fill(meta, batch[0])
    if codec:
        meta.compression = codec  # type: ignore[assignment]
        meta.uncompressed_size = len(payload)
        payload = compress(codec, payload)
    return encode_entry(meta, payload)


def _read(stored: list[bytes], start: Position, end: Position | None, whole: bool) -> RowSegments:
    reader = BulkReader(_Stream(), TOPIC, start, end, 1.0)  # type: ignore[arg-type]
    out = RowSegments(split=None if whole else TOPIC)
    for entry_id, entry in enumerate(stored):
        reader._decode(7, entry_id, entry, out)
    out.seal()
    return out


def _both(stored: list[bytes], start: Position, end: Position | None) -> None:
    expected = _read(stored, start, end, whole=False)
    rows = expected.segments[0] if expected.segments else None
    got = segments_to_record_batches(_read(stored, start, end, whole=True), TOPIC)
    table = pa.Table.from_batches(got, schema=got[0].schema) if got else None
    if rows is None:
        assert not got
        return
    want = to_record_batch(rows, TOPIC)
    assert table is not None
    assert table.combine_chunks().to_batches()[0].equals(want)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, st.data())
def test_bulk_split_equals_per_message_split(
    spec: list[tuple[list[dict[str, Any]], int, bool]], data: st.DataObject
) -> None:
    stored = [_entry(batch, codec, batched, i) for i, (batch, codec, batched) in enumerate(spec)]
    start: Position = EARLIEST
    end: Position | None = None
    if data.draw(st.booleans()):
        first = data.draw(st.integers(0, len(stored) - 1))
        start = (7, first, data.draw(st.integers(0, 40)))
    if data.draw(st.booleans()):
        last = data.draw(st.integers(0, len(stored)))
        end = (7, last, data.draw(st.integers(0, 40)))
    walk = _split.WALK_COMPILED
    try:  # the metadata read by the one-pass loop (compiled or not) or by numpy
        _split.WALK_COMPILED = data.draw(st.booleans())
        _both(stored, start, end)
    finally:
        _split.WALK_COMPILED = walk


def _batch_entry(payload: bytes, count: int) -> BatchEntry:
    return BatchEntry(7, 0, payload, count, 0, count, 1, b"\x08\x07\x10\x00", b"")


def test_bulk_split_refuses_damaged_batches_for_the_per_message_splitter() -> None:
    good = pack_batch([(pb.SingleMessageMetadata(partition_key="k"), b"value")] * 3)
    schema = to_record_batch(_read([], EARLIEST, None, False).rows, TOPIC).schema
    assert len(split_to_arrays([_batch_entry(good, 3)], schema)[0]) == 3
    for payload, count in ((good[:-1], 3), (good + b"x", 3), (good, 4), (good, 2)):
        with pytest.raises(Unsplittable):
            split_to_arrays([_batch_entry(payload, count)], schema)


def test_bulk_split_refuses_invalid_utf8_keys() -> None:
    meta = pb.SingleMessageMetadata(payload_size=1).SerializeToString() + b"\x12\x02\xff\xfe"
    payload = len(meta).to_bytes(4, "big") + meta + b"v"
    schema = to_record_batch(_read([], EARLIEST, None, False).rows, TOPIC).schema
    with pytest.raises(Unsplittable):
        split_to_arrays([_batch_entry(payload, 1)], schema)


def test_bulk_split_of_fields_out_of_the_usual_order() -> None:
    """Metadata written in another field order (event time and key after the payload size,
    a property last) is split the same way as message by message."""
    parts = []
    for i in range(5):
        value = f"value-{i}".encode()
        meta = (
            b"\x28"
            + bytes([100 + i])  # event_time
            + b"\x18"
            + bytes([len(value)])  # payload_size
            + b"\x12\x02k"
            + str(i).encode()  # partition_key
            + b"\x0a\x06\x0a\x01a\x12\x01"
            + str(i).encode()  # properties: a = i
        )
        parts.append(len(meta).to_bytes(4, "big") + meta + value)
    batch = _batch_entry(b"".join(parts), 5)
    segments = RowSegments(split=None)
    segments.add_batch(batch)
    got = segments_to_record_batches(segments, TOPIC)
    per_message = RowSegments(split=TOPIC)
    per_message.add_batch(batch)
    assert len(got) == 1 and got[0].equals(to_record_batch(per_message.rows, TOPIC))
    assert got[0].column("__key").to_pylist() == [f"k{i}" for i in range(5)]


def test_bulk_split_takes_the_last_of_repeated_scalar_fields() -> None:
    """A payload size written twice counts with its last value, as protobuf reads it."""
    parts = []
    for i in range(4):
        value = b"x" * (3 + i)
        meta = b"\x18\x01\x12\x01k\x18" + bytes([len(value)])
        parts.append(len(meta).to_bytes(4, "big") + meta + value)
    batch = _batch_entry(b"".join(parts), 4)
    segments = RowSegments(split=None)
    segments.add_batch(batch)
    got = segments_to_record_batches(segments, TOPIC)
    per_message = RowSegments(split=TOPIC)
    per_message.add_batch(batch)
    assert got[0].equals(to_record_batch(per_message.rows, TOPIC))
    assert got[0].column("value").to_pylist() == [b"x" * (3 + i) for i in range(4)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=24), st.binary(max_size=80), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    st.binary(max_size=8),
)
def test_byte_ranges_are_gathered_whatever_share_of_the_buffer_they_take(
    pieces: list[tuple[bytes, bytes, bool]], tail: bytes
) -> None:
    """The columns' bytes: copied through Arrow views when the ranges are most of the buffer
    (values), gathered by index otherwise (keys, properties); nulls and empty ranges too."""
    buf, pos, length = b"", [], []
    for gap, piece, _valid in pieces:
        buf += gap
        pos.append(len(buf))
        length.append(len(piece))
        buf += piece
    b = np.frombuffer(buf + tail + bytes(16), np.uint8)
    valid = np.array([v for _, _, v in pieces])
    got = gather(b, np.array(pos, np.int64), np.array(length, np.int64), valid, pa.binary())
    got.validate(full=True)
    assert got.to_pylist() == [piece if v else None for _, piece, v in pieces]


def test_bulk_split_ids_of_large_batches() -> None:
    """Batch indexes past the first table of batch_index fields (1,024) and batch sizes of
    two and three varint bytes: the ids are the per-message splitter's."""
    one = {"value": b"v", "key": None, "event_time": None, "properties": []}
    messages = [{**one, "sequence_id": None, "ordering_key": None, "compacted_out": False}] * 20000
    stored = [
        _entry(messages[:3000], 0, True, 0),
        _entry(messages[:5], 0, True, 3000),
        _entry(messages, 0, True, 3005),
    ]
    _both(stored, EARLIEST, None)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(messages, min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.booleans(),
)
def test_a_damaged_batch_splits_as_message_by_message_or_is_refused(
    batch: list[dict[str, Any]], flips: list[tuple[int, int]], walk: bool
) -> None:
    """Bytes of a batch overwritten: the bulk splitter gives the per-message splitter's rows
    or refuses the batch (the caller then splits it message by message); never other rows.
    Either way of reading the metadata (``walk``: the one-pass loop, compiled or not; else
    numpy)."""
    payload = bytearray(pack_batch([(_single(m), m["value"] or b"") for m in batch]))
    for at, byte in flips:
        payload[at % len(payload)] = byte
    entry = BatchEntry(7, 0, bytes(payload), len(batch), 0, len(batch), 1, b"\x08\x07\x10\x00", b"")
    try:
        per_message = RowSegments(split=TOPIC)
        per_message.add_batch(entry)
        want: pa.RecordBatch | None = to_record_batch(per_message.rows, TOPIC)
    except Exception:
        want = None
    schema = arrow_schema()
    try:
        value, key, ids, publish, event, props = split_to_arrays(
            [entry], schema, compiled_walk=walk
        )
    except Unsplittable:
        return
    name = pa.repeat(pa.scalar(TOPIC, pa.string()), len(value))
    got = pa.RecordBatch.from_arrays([value, key, name, ids, publish, event, props], schema=schema)
    assert want is not None, "split in bulk what the per-message splitter refuses"
    assert got.equals(want)


@pytest.mark.parametrize(
    "tag",
    [
        bytes([0xF2, 0x92, 0x98, 0xB2, 0x12]),  # five bytes, over 2**32
        bytes([0x98, 0x80, 0x80, 0x80, 0x80, 0x00]),  # payload_size's tag in six bytes
    ],
)
@pytest.mark.parametrize("walk", [True, False])
def test_a_field_tag_protobuf_refuses_is_refused_in_bulk(tag: bytes, walk: bool) -> None:
    """A message's metadata with a tag protobuf does not read (over 32 bits, or longer than
    five bytes): both splitters refuse the batch (found by the damaged-batch test)."""
    meta = bytes([0x18, 0x02]) + tag + bytes([0x00])  # payload_size 2, then the odd field
    payload = len(meta).to_bytes(4, "big") + meta + b"ab"
    entry = BatchEntry(7, 0, payload, 1, 0, 1, 1, b"\x08\x07\x10\x00", b"")
    with pytest.raises(Exception, match="damaged batch"):
        RowSegments(split=TOPIC).add_batch(entry)
    with pytest.raises(Unsplittable):
        split_to_arrays([entry], arrow_schema(), compiled_walk=walk)
