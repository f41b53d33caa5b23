"""CRC32C (Castagnoli), the checksum after the 0x0e01 magic in payload frames.

Reflected polynomial 0x82F63B78, init and xorout 0xFFFFFFFF. Computed by the ``crc32c`` package
(C, hardware accelerated where the CPU allows).
"""

from __future__ import annotations

import crc32c as _crc32c

__all__ = ["crc32c"]


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return the CRC32C of ``data`` as an unsigned 32-bit int.

    ``value`` is the CRC of preceding data, so checksums can be computed piecewise:
    ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    result: int = _crc32c.crc32c(data, value)
    return result
