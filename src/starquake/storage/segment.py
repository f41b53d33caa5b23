"""On-disk format of one ledger: the ``<ledgerId>.log`` data file and its ``<ledgerId>.idx`` index.

Data file ``<ledgerId>.log`` (all integers little-endian)::

    file header, 16 bytes
      0  magic       4 bytes   b"SQLF"
      4  version     u16       1
      6  flags       u16       0
      8  ledger_id   u64
    records, back to back from offset 16; entry ids are implicit (0, 1, 2, ...)
      0  length      u32       number of data bytes
      4  crc         u32       zlib.crc32 over the 4 length bytes followed by the data
      8  data        `length` bytes, opaque

The CRC covers the length so that a zero-filled tail never parses as valid empty records. Recovery
walks the records and stops at the first one that is partial or whose CRC does not match; everything
from there on is truncated.

Index file ``<ledgerId>.idx``, written (tmp + fsync + rename + fsync dir) for sealed ledgers only so
that startup does not scan them::

      0  magic       4 bytes   b"SQIX"
      4  version     u16       1
      6  flags       u16       0
      8  ledger_id   u64
     16  entries     u64       number of records N
     24  data_end    u64       file size covered (offset after the last record)
     32  created_at  f64       creation time of the ledger (seconds since the epoch)
     40  offsets     N x u64   file offset of each record
    40+8N crc        u32       zlib.crc32 of every preceding byte
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .position import StorageError

__all__ = [
    "HEADER_SIZE",
    "RECORD_HEADER_SIZE",
    "ScanResult",
    "encode_file_header",
    "encode_records",
    "fsync_dir",
    "parse_records",
    "pwrite_all",
    "read_index",
    "scan_ledger_file",
    "sync_fd",
    "truncate_file",
    "write_index",
]

_MAGIC = b"SQLF"
_INDEX_MAGIC = b"SQIX"
_VERSION = 1
_FILE_HEADER = struct.Struct("<4sHHQ")
_RECORD = struct.Struct("<II")
_U32 = struct.Struct("<I")
_INDEX_HEADER = struct.Struct("<4sHHQQQd")
HEADER_SIZE = _FILE_HEADER.size
RECORD_HEADER_SIZE = _RECORD.size
_SCAN_CHUNK = 4 * 1024 * 1024

sync_fd = getattr(os, "fdatasync", os.fsync)
"""Flush a file's data (and the metadata needed to read it back) to stable storage."""


def encode_file_header(ledger_id: int) -> bytes:
    """The 16-byte header that starts every ledger file."""
    return _FILE_HEADER.pack(_MAGIC, _VERSION, 0, ledger_id)


def encode_records(datas: Sequence[bytes], parts: list[bytes]) -> None:
    """Append the framed records of ``datas`` to ``parts`` (header, data, header, data, ...)."""
    pack = _RECORD.pack
    pack_len = _U32.pack
    crc32 = zlib.crc32
    append = parts.append
    for data in datas:
        n = len(data)
        append(pack(n, crc32(data, crc32(pack_len(n)))))
        append(data)


def parse_records(buf: bytes, count: int, ledger_id: int, first_entry: int) -> list[bytes]:
    """Split ``count`` consecutive records out of ``buf``, checking each CRC."""
    out: list[bytes] = []
    view = memoryview(buf)
    pos = 0
    unpack = _RECORD.unpack_from
    crc32 = zlib.crc32
    for i in range(count):
        if pos + RECORD_HEADER_SIZE > len(buf):
            raise StorageError(f"short read in ledger {ledger_id} at entry {first_entry + i}")
        n, crc = unpack(buf, pos)
        start = pos + RECORD_HEADER_SIZE
        data = bytes(view[start : start + n])
        if len(data) != n or crc32(data, crc32(view[pos : pos + 4])) != crc:
            raise StorageError(f"corrupt record in ledger {ledger_id} at entry {first_entry + i}")
        out.append(data)
        pos = start + n
    return out


def pwrite_all(fd: int, buf: bytes, offset: int) -> None:
    """Write all of ``buf`` at ``offset`` (retrying short writes)."""
    view = memoryview(buf)
    while view:
        n = os.pwrite(fd, view, offset)
        if n <= 0:
            raise OSError("pwrite wrote nothing")
        view = view[n:]
        offset += n


def fsync_dir(path: Path) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def truncate_file(path: Path, size: int) -> None:
    """Cut ``path`` to ``size`` bytes and fsync it."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


class ScanResult(NamedTuple):
    """Outcome of scanning a ledger file: record offsets and where the valid data ends."""

    offsets: array[int]
    valid_end: int
    file_size: int


def scan_ledger_file(path: Path, ledger_id: int) -> ScanResult:
    """Walk the records of a ledger file, stopping at the first partial or corrupt one.

    ``valid_end`` is 0 if even the file header is missing or wrong (the file holds no entries).
    """
    offsets: array[int] = array("q")
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        header = f.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            return ScanResult(offsets, 0, size)
        magic, version, flags, lid = _FILE_HEADER.unpack(header)
        if magic != _MAGIC or version != _VERSION or flags != 0 or lid != ledger_id:
            return ScanResult(offsets, 0, size)
        buf = bytearray()
        base = HEADER_SIZE  # file offset of buf[0]
        i = 0
        eof = False
        unpack = _RECORD.unpack_from
        crc32 = zlib.crc32
        while True:
            avail = len(buf) - i
            need = RECORD_HEADER_SIZE
            if avail >= RECORD_HEADER_SIZE:
                n, crc = unpack(buf, i)
                if base + i + RECORD_HEADER_SIZE + n > size:
                    break
                need = RECORD_HEADER_SIZE + n
                if avail >= need:
                    start = i + RECORD_HEADER_SIZE
                    with memoryview(buf) as view:
                        ok = crc32(view[start : start + n], crc32(view[i : i + 4])) == crc
                    if not ok:
                        break
                    offsets.append(base + i)
                    i += need
                    continue
            if eof:
                break
            chunk = f.read(max(_SCAN_CHUNK, need - avail))
            if not chunk:
                eof = True
                continue
            del buf[:i]
            base += i
            i = 0
            buf += chunk
        return ScanResult(offsets, base + i, size)


def write_index(
    directory: Path, ledger_id: int, offsets: bytes, data_end: int, created_at: float
) -> None:
    """Durably write the index of a sealed ledger (tmp file, fsync, rename, fsync directory).

    ``offsets`` is the machine representation of an ``array('q')`` (converted to little-endian).
    """
    arr: array[int] = array("q")
    arr.frombytes(offsets)
    if arr.itemsize != 8:  # pragma: no cover - every supported platform has 64-bit 'q'
        raise StorageError("array('q') is not 64-bit")
    if struct.pack("=H", 1) != struct.pack("<H", 1):  # pragma: no cover - big-endian hosts
        arr.byteswap()
    body = _INDEX_HEADER.pack(_INDEX_MAGIC, _VERSION, 0, ledger_id, len(arr), data_end, created_at)
    body += arr.tobytes()
    body += _U32.pack(zlib.crc32(body))
    final = directory / f"{ledger_id}.idx"
    tmp = directory / f"{ledger_id}.idx.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        pwrite_all(fd, body, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_dir(directory)


def read_index(path: Path, ledger_id: int, file_size: int) -> tuple[array[int], float] | None:
    """Load an index written by :func:`write_index`; None if missing, damaged or stale."""
    try:
        body = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(body) < _INDEX_HEADER.size + 4:
        return None
    (crc,) = _U32.unpack_from(body, len(body) - 4)
    if zlib.crc32(memoryview(body)[:-4]) != crc:
        return None
    magic, version, _flags, lid, count, data_end, created_at = _INDEX_HEADER.unpack_from(body)
    if magic != _INDEX_MAGIC or version != _VERSION or lid != ledger_id:
        return None
    if len(body) != _INDEX_HEADER.size + 8 * count + 4 or data_end != file_size:
        return None
    arr: array[int] = array("q")
    arr.frombytes(body[_INDEX_HEADER.size : -4])
    if struct.pack("=H", 1) != struct.pack("<H", 1):  # pragma: no cover - big-endian hosts
        arr.byteswap()
    return arr, created_at
