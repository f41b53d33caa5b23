"""Our compressed output must decode with independent decoders, the way other clients read it.

Decoding payloads produced by the official client itself needs a broker, so it lives in the
compat suite; here each format is checked against a second implementation.
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol.compression import CompressionCodec, compress, decompress

payloads = st.one_of(
    st.binary(max_size=4096),
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=16), st.integers(1, 500)),
)


@given(payloads)
def test_lz4_is_a_raw_block(data: bytes) -> None:
    packed = compress(CompressionCodec.LZ4, data)
    assert lz4.block.decompress(packed, uncompressed_size=len(data)) == data


@given(payloads)
def test_zlib_is_a_zlib_stream(data: bytes) -> None:
    assert zlib.decompress(compress(CompressionCodec.ZLIB, data)) == data


@given(payloads)
def test_zstd_is_one_standard_frame(data: bytes) -> None:
    packed = compress(CompressionCodec.ZSTD, data)
    assert zstandard.frame_content_size(packed) == len(data)
    assert zstandard.ZstdDecompressor().decompress(packed) == data
    # A fresh streaming decoder consumes exactly one frame and nothing else.
    dobj = zstandard.ZstdDecompressor().decompressobj()
    assert dobj.decompress(packed) == data
    assert dobj.unused_data == b""


@given(payloads)
def test_snappy_is_a_raw_block(data: bytes) -> None:
    packed = compress(CompressionCodec.SNAPPY, data)
    assert bytes(cramjam.snappy.decompress_raw(packed)) == data


@given(payloads)
def test_we_decode_independent_encoders(data: bytes) -> None:
    n = len(data)
    assert decompress(CompressionCodec.LZ4, lz4.block.compress(data, store_size=False), n) == data
    assert (
        decompress(
            CompressionCodec.LZ4,
            lz4.block.compress(data, mode="high_compression", store_size=False),
            n,
        )
        == data
    )
    assert decompress(CompressionCodec.ZLIB, zlib.compress(data, 9), n) == data
    assert (
        decompress(CompressionCodec.ZSTD, zstandard.ZstdCompressor(level=19).compress(data), n)
        == data
    )
    assert decompress(CompressionCodec.SNAPPY, bytes(cramjam.snappy.compress_raw(data)), n) == data
