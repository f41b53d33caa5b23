"""Payload compression codecs (``MessageMetadata.compression``).

Compression covers the whole payload after the metadata (for a batch, the whole concatenated
batch) and ``MessageMetadata.uncompressed_size`` carries the original length. Formats, as the
official clients write them:

    NONE    0  the bytes as they are
    LZ4     1  raw LZ4 block, no frame and no size prefix
    ZLIB    2  zlib stream (2-byte header 0x78 .., deflate, adler32 trailer)
    ZSTD    3  one standard zstd frame (magic 28 b5 2f fd); the content size may be absent
    SNAPPY  4  raw snappy block (varint uncompressed length, then the elements)

Decompression never allocates much more than ``uncompressed_size``: sizes a codec cannot reach
from the given input are rejected before any work is done.
"""

from __future__ import annotations

import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.block
import zstandard

__all__ = ["CompressionCodec", "CompressionError", "compress", "decompress"]

ZSTD_LEVEL = 3  # what the Java and C++ clients use

# Upper bounds on uncompressed/compressed for each format (plus a small constant), so a forged
# uncompressed_size cannot make us allocate gigabytes for a few input bytes.
_LZ4_MAX_RATIO = 255
_ZLIB_MAX_RATIO = 1032
_SNAPPY_MAX_RATIO = 22
_SLACK = 64


class CompressionCodec(IntEnum):
    """Wire values of ``CompressionType``."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


class CompressionError(ValueError):
    """Unknown codec, corrupt compressed data, or a size that does not match the metadata."""


class _ZstdContexts(threading.local):
    """zstandard contexts are reusable but not thread safe: keep one pair per thread."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _ZstdContexts()


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` with ``codec`` (a :class:`CompressionCodec` value) in its wire format."""
    if codec == CompressionCodec.NONE:
        return bytes(data)
    if codec == CompressionCodec.LZ4:
        out: bytes = lz4.block.compress(data, store_size=False)
        return out
    if codec == CompressionCodec.ZLIB:
        return zlib.compress(data)
    if codec == CompressionCodec.ZSTD:
        out = _zstd.compressor.compress(data)
        return out
    if codec == CompressionCodec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise CompressionError(f"unknown compression codec {codec!r}")


def decompress(codec: int, data: bytes | bytearray | memoryview, uncompressed_size: int) -> bytes:
    """Decompress ``data``, which must expand to exactly ``uncompressed_size`` bytes.

    Raises :class:`CompressionError` for an unknown codec, corrupt input, trailing garbage
    (where the format can tell) or any size mismatch.
    """
    if uncompressed_size < 0:
        raise CompressionError(f"negative uncompressed size {uncompressed_size}")
    if codec == CompressionCodec.NONE:
        out = bytes(data)
    elif codec == CompressionCodec.LZ4:
        out = _lz4_decompress(data, uncompressed_size)
    elif codec == CompressionCodec.ZLIB:
        out = _zlib_decompress(data, uncompressed_size)
    elif codec == CompressionCodec.ZSTD:
        out = _zstd_decompress(data, uncompressed_size)
    elif codec == CompressionCodec.SNAPPY:
        out = _snappy_decompress(data, uncompressed_size)
    else:
        raise CompressionError(f"unknown compression codec {codec!r}")
    if len(out) != uncompressed_size:
        name = CompressionCodec(codec).name
        raise CompressionError(
            f"{name}: decompressed {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out


def _lz4_decompress(data: bytes | bytearray | memoryview, size: int) -> bytes:
    if size > len(data) * _LZ4_MAX_RATIO + _SLACK:
        raise CompressionError(f"LZ4: {len(data)} bytes cannot expand to {size}")
    try:
        out: bytes = lz4.block.decompress(data, uncompressed_size=size)
    except lz4.block.LZ4BlockError as exc:
        raise CompressionError(f"LZ4: {exc}") from None
    return out


def _zlib_decompress(data: bytes | bytearray | memoryview, size: int) -> bytes:
    if size > len(data) * _ZLIB_MAX_RATIO + _SLACK:
        raise CompressionError(f"ZLIB: {len(data)} bytes cannot expand to {size}")
    d = zlib.decompressobj()
    try:
        # One byte more than expected, so an oversized stream shows up as a length mismatch.
        out = d.decompress(data, size + 1)
    except zlib.error as exc:
        raise CompressionError(f"ZLIB: {exc}") from None
    if len(out) > size:
        raise CompressionError(f"ZLIB: stream expands past {size} bytes")
    if not d.eof:
        raise CompressionError("ZLIB: truncated stream")
    if d.unused_data:
        raise CompressionError("ZLIB: trailing data after the stream")
    return out


def _zstd_decompress(data: bytes | bytearray | memoryview, size: int) -> bytes:
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CompressionError(f"ZSTD: {exc}") from None
    if declared >= 0 and declared != size:
        raise CompressionError(f"ZSTD: frame declares {declared} bytes, metadata says {size}")
    try:
        # max_output_size only matters when the frame omits its content size; 0 would mean
        # "unknown" to zstandard, hence the floor of 1.
        out: bytes = _zstd.decompressor.decompress(data, max_output_size=max(size, 1))
    except zstandard.ZstdError as exc:
        raise CompressionError(f"ZSTD: {exc}") from None
    return out


def _snappy_preamble(data: bytes | bytearray | memoryview) -> int:
    """Read the varint uncompressed length that starts a raw snappy block."""
    result = 0
    for i in range(5):
        if i >= len(data):
            raise CompressionError("SNAPPY: truncated length preamble")
        byte = data[i]
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return result
    raise CompressionError("SNAPPY: length preamble too long")


def _snappy_decompress(data: bytes | bytearray | memoryview, size: int) -> bytes:
    if size > len(data) * _SNAPPY_MAX_RATIO + _SLACK:
        raise CompressionError(f"SNAPPY: {len(data)} bytes cannot expand to {size}")
    declared = _snappy_preamble(data)
    if declared != size:
        raise CompressionError(f"SNAPPY: block declares {declared} bytes, metadata says {size}")
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"SNAPPY: {exc}") from None
