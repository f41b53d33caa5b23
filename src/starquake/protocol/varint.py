"""Protobuf varints encoded by hand, for the few encoders that skip protobuf objects.

Varints of 0..16383 (one or two bytes) are precomputed: ids, counts and sizes on the hot path
are mostly that small, and building them byte by byte in Python costs more than the rest.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SMALL_VARINTS", "SMALL_VARINT_LIMIT", "read_u32", "varint"]

_U64_MASK: Final = (1 << 64) - 1

SMALL_VARINTS: Final[list[bytes]] = [bytes((i,)) for i in range(128)] + [
    bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 1 << 14)
]
SMALL_VARINT_LIMIT: Final = 1 << 14
_MINUS_ONE: Final = b"\xff" * 9 + b"\x01"
"""-1 (as its 64-bit two's complement): the "none" of several fields (a receipt's
``highest_sequence_id`` when the producer declared none), written once per entry."""


def varint(value: int) -> bytes:
    """The varint of ``value`` (a negative value as its 64-bit two's complement)."""
    if 0 <= value < SMALL_VARINT_LIMIT:
        return SMALL_VARINTS[value]
    if 0 < value < 1 << 21:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value == -1:
        return _MINUS_ONE
    value &= _U64_MASK
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_u32(data: bytes, pos: int) -> int:
    """The big-endian u32 at ``data[pos:pos + 4]`` (the frame sizes; compiled, it makes no
    tuple as a Struct's unpack does)."""
    return (data[pos] << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3]
