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
walks the records. At a record that is partial or whose CRC does not match it looks for the next
valid record: if there is one, the bad record is *damaged* (it keeps its entry id, reads skip it)
and the walk goes on from there; if there is none, the bad bytes are a torn tail, cut off (and kept
in the ledger directory's ``quarantine/`` folder).

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

import mmap
import os
import struct
import time
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
    "quarantine",
    "read_index",
    "scan_ledger_file",
    "sync_fd",
    "truncate_file",
    "write_file",
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


def parse_records(buf: bytes, starts: Sequence[int], end: int) -> list[memoryview | None]:
    """Split the records at offsets ``starts`` (relative to ``buf``; the last one ends at
    ``end``) out of ``buf``, checking each one's length and CRC. The records are views into
    ``buf`` (not copies: a read hands them straight to the connection).

    A damaged record is returned as None (the caller decides what that means); the others are
    found at their own offsets whatever the damaged one's length field says.
    """
    out: list[memoryview | None] = []
    view = memoryview(buf)
    unpack = _RECORD.unpack_from
    crc32 = zlib.crc32
    last = len(starts) - 1
    for i, pos in enumerate(starts):
        stop = starts[i + 1] if i < last else end
        if stop > len(buf) or stop - pos < RECORD_HEADER_SIZE:
            raise StorageError("short read of a ledger file")
        n, crc = unpack(buf, pos)
        start = pos + RECORD_HEADER_SIZE
        if start + n != stop or crc32(view[start:stop], crc32(view[pos : pos + 4])) != crc:
            out.append(None)
        else:
            out.append(view[start:stop])
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


def write_file(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` as the whole content of ``path`` and fsync it (the caller fsyncs the
    directory when the file is new); with ``exclusive`` the file must not exist yet."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_EXCL if exclusive else os.O_TRUNC
    fd = os.open(path, flags, 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


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
    """Outcome of scanning a ledger file.

    ``offsets``: file offset of each record (damaged ones included); ``damaged``: entry ids of
    records that failed their CRC but were followed by valid records; ``valid_end``: where the
    last whole record ends (what follows is a torn tail); ``header_ok``: the file header is right.
    """

    offsets: array[int]
    valid_end: int
    file_size: int
    damaged: list[int]
    header_ok: bool


def _record_ok(mm: mmap.mmap | bytes, pos: int, size: int) -> int:
    """End offset of a valid record at ``pos``, or -1."""
    if pos + RECORD_HEADER_SIZE > size:
        return -1
    n, crc = _RECORD.unpack_from(mm, pos)
    end = pos + RECORD_HEADER_SIZE + n
    if end > size:
        return -1
    with memoryview(mm) as view:
        ok = zlib.crc32(view[pos + RECORD_HEADER_SIZE : end], zlib.crc32(view[pos : pos + 4]))
    return end if ok == crc else -1


def _resync(mm: mmap.mmap | bytes, bad: int, size: int) -> int:
    """Offset of the first trustworthy record after a bad one at ``bad``, or -1 (a torn tail).

    A record is trusted when it is valid and is either the last in the file or followed by
    another valid record (a random match of both CRCs is practically impossible). The bad
    record's own length is tried first: with a flipped data byte it is still right.
    """

    def trusted(pos: int) -> bool:
        end = _record_ok(mm, pos, size)
        return end == size or (end > 0 and _record_ok(mm, end, size) > 0)

    if bad + RECORD_HEADER_SIZE <= size:
        n: int = _U32.unpack_from(mm, bad)[0]
        guess = bad + RECORD_HEADER_SIZE + n
        if guess < size and trusted(guess):
            return guess
    for pos in range(bad + 1, size - RECORD_HEADER_SIZE + 1):
        (n,) = _U32.unpack_from(mm, pos)
        if pos + RECORD_HEADER_SIZE + n <= size and trusted(pos):
            return pos
    return -1


def scan_ledger_file(path: Path, ledger_id: int) -> ScanResult:
    """Walk the records of a ledger file (see the module docstring for damaged records).

    A damaged file header does not hide the records after it: they are scanned all the same.
    """
    offsets: array[int] = array("q")
    damaged: list[int] = []
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size <= HEADER_SIZE:
            header = f.read(HEADER_SIZE)
            return ScanResult(offsets, 0, size, damaged, _header_ok(header, ledger_id))
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            header_ok = _header_ok(mm[:HEADER_SIZE], ledger_id)
            pos = HEADER_SIZE
            while pos < size:
                end = _record_ok(mm, pos, size)
                if end < 0:
                    nxt = _resync(mm, pos, size)
                    if nxt < 0:
                        break
                    damaged.append(len(offsets))
                    offsets.append(pos)
                    pos = nxt
                    continue
                offsets.append(pos)
                pos = end
            return ScanResult(offsets, pos, size, damaged, header_ok)


def _header_ok(header: bytes, ledger_id: int) -> bool:
    if len(header) < HEADER_SIZE:
        return False
    fields: tuple[bytes, int, int, int] = _FILE_HEADER.unpack(header)
    return fields == (_MAGIC, _VERSION, 0, ledger_id)


def quarantine(
    directory: Path, name: str, data: bytes | None = None, source: Path | None = None
) -> Path:
    """Keep damaged bytes in ``directory/quarantine/`` instead of deleting them.

    Either writes ``data`` to a new file or moves ``source`` there; returns the new path.
    """
    folder = directory / "quarantine"
    if not folder.exists():
        folder.mkdir()
        fsync_dir(directory)
    target = folder / f"{name}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    if source is not None:
        os.replace(source, target)
    else:
        write_file(target, data or b"", exclusive=True)
    fsync_dir(folder)
    fsync_dir(directory)
    return target


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
    write_file(tmp, body)
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
