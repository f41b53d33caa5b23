"""Key hashes that Pulsar brokers and clients agree on.

* :func:`murmur3_32` / :func:`murmur3_32_masked`: MurmurHash3 x86_32. The masked form is Pulsar's
  ``Murmur3_32Hash``; the broker uses it for Key_Shared sticky keys, and clients may opt into it
  for partition routing. They run the ``mmh3`` C extension (a dependency, about 20 times faster
  on the Key_Shared hot path); :func:`murmur3_32_pure` is the same hash in Python, used where
  ``mmh3`` cannot be imported and cross-checked against it by the tests.
* :func:`java_string_hash`: the Java client's default router hash (``String.hashCode()``).
* :func:`java_string_hash_cpp`: the C++ client's port of it, which walks UTF-8 bytes instead.
* :func:`boost_hash`: the C++ (and therefore official Python) client's default router hash.

Every routing hash returns a non-negative 31-bit int, so ``hash % num_partitions`` is the
partition index.
"""

from __future__ import annotations

import struct

try:
    from mmh3 import hash as _mmh3_hash
except ImportError:  # pragma: no cover - mmh3 is a dependency; the pure version stands in
    _mmh3_hash = None  # type: ignore[assignment]

__all__ = [
    "boost_hash",
    "java_string_hash",
    "java_string_hash_cpp",
    "murmur3_32",
    "murmur3_32_masked",
    "murmur3_32_pure",
]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_INT32_MAX = 0x7FFFFFFF


def murmur3_32_pure(data: bytes, seed: int = 0) -> int:
    """Return the unsigned 32-bit MurmurHash3 (x86_32 variant) of ``data``, in Python."""
    # Hot path when mmh3 is missing (Key_Shared hashes every entry): constants are inlined and
    # the steps fused, which measurably beats the textbook form in CPython.
    # c1 = 0xCC9E2D51, c2 = 0x1B873593.
    h = seed & 0xFFFFFFFF
    length = len(data)
    nblocks = length >> 2
    if nblocks:
        for k in struct.unpack_from(f"<{nblocks}I", data):
            k = (k * 0xCC9E2D51) & 0xFFFFFFFF
            h ^= ((((k << 15) | (k >> 17)) & 0xFFFFFFFF) * 0x1B873593) & 0xFFFFFFFF
            h = ((((h << 13) | (h >> 19)) & 0xFFFFFFFF) * 5 + 0xE6546B64) & 0xFFFFFFFF
    tail = length & 3
    if tail:
        k = (int.from_bytes(data[length - tail :], "little") * 0xCC9E2D51) & 0xFFFFFFFF
        h ^= ((((k << 15) | (k >> 17)) & 0xFFFFFFFF) * 0x1B873593) & 0xFFFFFFFF
    h ^= length
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _murmur3_32_mmh3(data: bytes, seed: int = 0) -> int:
    """Return the unsigned 32-bit MurmurHash3 (x86_32 variant) of ``data``."""
    return _mmh3_hash(data, seed & _M32, signed=False)


def _murmur3_32_masked_mmh3(data: bytes) -> int:
    """Return Pulsar's ``Murmur3_32Hash``: seed-0 MurmurHash3 x86_32 with the top bit cleared."""
    return _mmh3_hash(data, 0, signed=False) & _INT32_MAX


def _murmur3_32_masked_pure(data: bytes) -> int:
    """Return Pulsar's ``Murmur3_32Hash``: seed-0 MurmurHash3 x86_32 with the top bit cleared."""
    return murmur3_32_pure(data) & _INT32_MAX


if _mmh3_hash is not None:
    murmur3_32 = _murmur3_32_mmh3
    murmur3_32_masked = _murmur3_32_masked_mmh3
else:  # pragma: no cover
    murmur3_32 = murmur3_32_pure
    murmur3_32_masked = _murmur3_32_masked_pure


def java_string_hash(key: str) -> int:
    """Return Java's ``key.hashCode() & Integer.MAX_VALUE``.

    ``String.hashCode`` runs over UTF-16 code units, so characters outside the BMP count as
    two (a surrogate pair). Wrapping to signed 32 bits and then masking keeps the same low 31
    bits as working modulo 2**32 throughout.
    """
    h = 0
    if key.isascii():
        units: bytes | tuple[int, ...] = key.encode("ascii")
    else:
        raw = key.encode("utf-16-le", "surrogatepass")
        units = struct.unpack(f"<{len(raw) >> 1}H", raw)
    for unit in units:
        h = (31 * h + unit) & _M32
    return h & _INT32_MAX


def java_string_hash_cpp(key: str) -> int:
    """Return the C++ client's ``JavaStringHash``: the same loop over UTF-8 bytes as signed char.

    Equal to :func:`java_string_hash` for ASCII keys only.
    """
    h = 0
    for byte in key.encode("utf-8", "surrogatepass"):
        if byte >= 0x80:
            byte -= 0x100
        h = (31 * h + byte) & _M32
    return h & _INT32_MAX


# Boost >= 1.81 ``boost::hash<std::string>`` on 64-bit platforms
# (boost/container_hash/detail/hash_range.hpp, the 64-bit char-range overload):
#
#   mulx(a, b) = lo64(a*b) ^ hi64(a*b)
#   w = mulx(seed + Q, K); h = w ^ len
#   for each full 8-byte little-endian word v:   w += Q; h ^= mulx(v + w, K)
#   tail (0..7 bytes, always one round, v = 0 when empty):
#     n >= 4:   v = read32le(p + n - 4) << (n - 4) * 8 | read32le(p)
#     n in 1-3: v = p[x1] << x1*8 | p[x2] << x2*8 | p[0]   with x1 = (n-1) & 2, x2 = n >> 1
#     w += Q; h ^= mulx(v + w, K)
#   result = mulx(h + w, K)
_BOOST_Q = 0x9E3779B97F4A7C15
_BOOST_K = 0xDF442D22CE4859B9


def _mulx(a: int, b: int) -> int:
    r = (a & _M64) * b
    return (r & _M64) ^ (r >> 64)


_BOOST_W0 = _mulx(_BOOST_Q, _BOOST_K)  # w before the first round (seed 0)


def boost_hash(key: str) -> int:
    """Return ``boost::hash<std::string>(utf8(key)) & INT32_MAX`` for Boost >= 1.81, 64-bit.

    This is the partition-routing hash of the official C++ and Python clients (their default
    ``BoostHash`` scheme), with seed 0. Writers route every row through it, so the
    multiply-xor steps are written out inline.
    """
    data = key.encode("utf-8", "surrogatepass")
    q = _BOOST_Q
    k = _BOOST_K
    m = _M64
    n = len(data)
    w = _BOOST_W0
    h = w ^ n
    nwords = n >> 3
    if nwords:
        for v in struct.unpack_from(f"<{nwords}Q", data):
            w = (w + q) & m
            r = ((v + w) & m) * k
            h ^= (r & m) ^ (r >> 64)
    p = nwords << 3
    rest = n - p
    if rest >= 4:
        v = (int.from_bytes(data[n - 4 : n], "little") << ((rest - 4) * 8)) | int.from_bytes(
            data[p : p + 4], "little"
        )
    elif rest:
        x1 = (rest - 1) & 2
        x2 = rest >> 1
        v = (data[p + x1] << (x1 * 8)) | (data[p + x2] << (x2 * 8)) | data[p]
    else:
        v = 0
    w = (w + q) & m
    r = ((v + w) & m) * k
    h ^= (r & m) ^ (r >> 64)
    r = ((h + w) & m) * k
    return ((r & m) ^ (r >> 64)) & _INT32_MAX
