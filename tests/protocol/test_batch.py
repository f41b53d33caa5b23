from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.batch import BatchFormatError, iter_batch, pack_batch, unpack_batch
from starquake.protocol.compression import CompressionCodec, compress, decompress


def _meta(
    key: str | None, seq: int, props: dict[str, str], ordering_key: bytes | None
) -> pb.SingleMessageMetadata:
    meta = pb.SingleMessageMetadata(sequence_id=seq)
    if key is not None:
        meta.partition_key = key
    if ordering_key is not None:
        meta.ordering_key = ordering_key
    for k, v in props.items():
        meta.properties.add(key=k, value=v)
    return meta


entries = st.lists(
    st.tuples(
        st.builds(
            _meta,
            st.none() | st.text(max_size=20),
            st.integers(0, 2**64 - 1),
            st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
            st.none() | st.binary(max_size=8),
        ),
        st.binary(max_size=200),
    ),
    max_size=20,
)


def test_layout() -> None:
    meta = pb.SingleMessageMetadata(partition_key="k", sequence_id=7)
    packed = pack_batch([(meta, b"hi"), (pb.SingleMessageMetadata(), b"")])
    first = pb.SingleMessageMetadata(partition_key="k", payload_size=2, sequence_id=7)
    first_bytes = first.SerializeToString()
    second_bytes = pb.SingleMessageMetadata(payload_size=0).SerializeToString()
    assert packed == (
        struct.pack(">I", len(first_bytes))
        + first_bytes
        + b"hi"
        + struct.pack(">I", len(second_bytes))
        + second_bytes
    )
    assert meta.payload_size == 2  # filled in by pack_batch


def test_payload_size_is_overwritten() -> None:
    meta = pb.SingleMessageMetadata(payload_size=99)
    (got,) = unpack_batch(pack_batch([(meta, b"abc")]), 1)
    assert got[0].payload_size == 3
    assert bytes(got[1]) == b"abc"


@given(entries)
def test_round_trip(batch: list[tuple[pb.SingleMessageMetadata, bytes]]) -> None:
    packed = pack_batch(batch)
    unpacked = unpack_batch(packed, len(batch))
    assert [(m, bytes(p)) for m, p in unpacked] == batch
    assert all(isinstance(p, memoryview) for _, p in unpacked)
    # Same through a memoryview into a bigger buffer, and lazily.
    view = memoryview(b"pad" + packed + b"pad")[3:-3]
    assert [(m, bytes(p)) for m, p in iter_batch(view, len(batch))] == batch


@pytest.mark.parametrize("codec", list(CompressionCodec))
@given(batch=entries)
def test_round_trip_through_every_codec(
    codec: CompressionCodec, batch: list[tuple[pb.SingleMessageMetadata, bytes]]
) -> None:
    packed = pack_batch(batch)
    restored = decompress(codec, compress(codec, packed), len(packed))
    assert [(m, bytes(p)) for m, p in unpack_batch(restored, len(batch))] == batch


@given(entries.filter(bool), st.integers(min_value=1))
def test_truncated_raises(batch: list[tuple[pb.SingleMessageMetadata, bytes]], cut: int) -> None:
    packed = pack_batch(batch)
    with pytest.raises(BatchFormatError):
        unpack_batch(packed[: len(packed) - 1 - cut % len(packed)], len(batch))


@given(entries, st.integers(min_value=1, max_value=5))
def test_wrong_count_raises(
    batch: list[tuple[pb.SingleMessageMetadata, bytes]], extra: int
) -> None:
    packed = pack_batch(batch)
    with pytest.raises(BatchFormatError):
        unpack_batch(packed, len(batch) + extra)
    if batch:
        with pytest.raises(BatchFormatError, match="left after"):
            unpack_batch(packed, len(batch) - 1)


def test_negative_count_raises() -> None:
    with pytest.raises(BatchFormatError):
        unpack_batch(b"", -1)
    assert unpack_batch(b"", 0) == []


def test_metadata_size_past_the_end() -> None:
    with pytest.raises(BatchFormatError, match="overruns"):
        unpack_batch(struct.pack(">I", 100) + b"\x18\x00", 1)


def test_payload_size_past_the_end() -> None:
    meta = pb.SingleMessageMetadata(payload_size=10).SerializeToString()
    with pytest.raises(BatchFormatError, match="does not fit"):
        unpack_batch(struct.pack(">I", len(meta)) + meta + b"short", 1)


def test_negative_payload_size() -> None:
    meta = pb.SingleMessageMetadata(payload_size=-1).SerializeToString()
    with pytest.raises(BatchFormatError, match="does not fit"):
        unpack_batch(struct.pack(">I", len(meta)) + meta, 1)


def test_missing_payload_size() -> None:
    meta = pb.SingleMessageMetadata(partition_key="k").SerializePartialToString()
    with pytest.raises(BatchFormatError, match="lacks payload_size"):
        unpack_batch(struct.pack(">I", len(meta)) + meta, 1)


def test_corrupt_metadata() -> None:
    with pytest.raises(BatchFormatError, match="bad SingleMessageMetadata"):
        unpack_batch(struct.pack(">I", 2) + b"\xff\xff", 1)


def test_iter_batch_yields_good_entries_before_the_fault() -> None:
    packed = pack_batch([(pb.SingleMessageMetadata(), b"a")])
    it = iter_batch(packed + b"\x00", 2)
    _, payload = next(it)
    assert bytes(payload) == b"a"
    with pytest.raises(BatchFormatError):
        next(it)


def test_accepts_non_byte_memoryview() -> None:
    payload = b"abcd"
    while len(packed := pack_batch([(pb.SingleMessageMetadata(), payload)])) % 4:
        payload += b"x"
    ((_, got),) = unpack_batch(memoryview(packed).cast("I"), 1)  # sizes still count bytes
    assert bytes(got) == payload


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=50))
def test_garbage_raises_only_batch_format_error(garbage: bytes, count: int) -> None:
    try:
        result = unpack_batch(garbage, count)
    except BatchFormatError:
        return
    assert len(result) == count
