from __future__ import annotations

import zlib

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol.compression import (
    CompressionCodec,
    CompressionError,
    compress,
    decompress,
)

CODECS = list(CompressionCodec)
COMPRESSING = [c for c in CODECS if c is not CompressionCodec.NONE]

# Compressible and incompressible payloads, including empty.
payloads = st.one_of(
    st.binary(max_size=4096),
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=16), st.integers(1, 500)),
)


def test_wire_values() -> None:
    assert [(c.name, int(c)) for c in CompressionCodec] == [
        ("NONE", 0),
        ("LZ4", 1),
        ("ZLIB", 2),
        ("ZSTD", 3),
        ("SNAPPY", 4),
    ]


@pytest.mark.parametrize("codec", CODECS)
@given(data=payloads)
def test_round_trip(codec: CompressionCodec, data: bytes) -> None:
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed, len(data)) == data
    assert decompress(int(codec), memoryview(packed), len(data)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_input(codec: CompressionCodec) -> None:
    data = b"abc" * 1000
    view = memoryview(b"__" + data)[2:]
    assert decompress(codec, compress(codec, view), len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSING)
def test_compresses_repetitive_data(codec: CompressionCodec) -> None:
    data = b"pulsar " * 2000
    assert len(compress(codec, data)) < len(data) // 10


def test_magic_bytes() -> None:
    data = b"hello hello hello"
    assert compress(CompressionCodec.ZLIB, data)[:2] == b"\x78\x9c"
    assert compress(CompressionCodec.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"
    assert compress(CompressionCodec.SNAPPY, data)[0] == len(data)  # varint length preamble


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.binary(min_size=1, max_size=512), delta=st.sampled_from([-1, 1, 1000]))
def test_wrong_size_raises(codec: CompressionCodec, data: bytes, delta: int) -> None:
    packed = compress(codec, data)
    with pytest.raises(CompressionError):
        decompress(codec, packed, len(data) + delta)


@pytest.mark.parametrize("codec", CODECS)
def test_negative_size_raises(codec: CompressionCodec) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, compress(codec, b""), -1)


@pytest.mark.parametrize("codec", COMPRESSING)
@given(data=st.binary(min_size=1, max_size=2048), cut=st.integers(min_value=1))
def test_truncated_raises(codec: CompressionCodec, data: bytes, cut: int) -> None:
    packed = compress(codec, data)
    truncated = packed[: len(packed) - 1 - cut % len(packed)]
    with pytest.raises(CompressionError):
        decompress(codec, truncated, len(data))


@pytest.mark.parametrize("codec", COMPRESSING)
@given(garbage=st.binary(max_size=300), size=st.integers(min_value=0, max_value=1 << 20))
def test_garbage_raises_only_compression_error(
    codec: CompressionCodec, garbage: bytes, size: int
) -> None:
    try:
        out = decompress(codec, garbage, size)
    except CompressionError:
        return
    assert len(out) == size


@pytest.mark.parametrize("codec", COMPRESSING)
@given(
    data=st.binary(min_size=1, max_size=1024),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_bit_flips_raise_only_compression_error(
    codec: CompressionCodec, data: bytes, position: int, flip: int
) -> None:
    packed = bytearray(compress(codec, data))
    packed[position % len(packed)] ^= flip
    try:
        out = decompress(codec, bytes(packed), len(data))
    except CompressionError:
        return
    assert len(out) == len(data)  # some flips (e.g. in literals) still decode


@pytest.mark.parametrize("codec", COMPRESSING)
def test_forged_huge_size_is_rejected_cheaply(codec: CompressionCodec) -> None:
    packed = compress(codec, b"x" * 100)
    with pytest.raises(CompressionError):
        decompress(codec, packed, 2**31)


def test_zlib_trailing_data_raises() -> None:
    packed = compress(CompressionCodec.ZLIB, b"abc")
    with pytest.raises(CompressionError, match="trailing"):
        decompress(CompressionCodec.ZLIB, packed + b"\x00", 3)


def test_zstd_frame_without_content_size() -> None:
    # The C++ client's frames may omit the content size; max_output_size covers that case.
    data = b"no content size " * 100
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(CompressionCodec.ZSTD, frame, len(data)) == data
    with pytest.raises(CompressionError):
        decompress(CompressionCodec.ZSTD, frame, len(data) - 1)
    empty = zstandard.ZstdCompressor(write_content_size=False).compress(b"")
    assert decompress(CompressionCodec.ZSTD, empty, 0) == b""


def test_zlib_from_other_levels_decodes() -> None:
    data = b"level " * 300
    for level in (0, 1, 9):
        assert decompress(CompressionCodec.ZLIB, zlib.compress(data, level), len(data)) == data


@pytest.mark.parametrize("codec", [5, -1, 99])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(CompressionError, match="unknown compression codec"):
        compress(codec, b"x")
    with pytest.raises(CompressionError, match="unknown compression codec"):
        decompress(codec, b"x", 1)


def test_compression_error_is_value_error() -> None:
    assert issubclass(CompressionError, ValueError)
