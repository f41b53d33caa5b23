"""On-disk format of one ledger: the ``<ledgerId>.log`` data file and its ``<ledgerId>.idx`` index.

Data file ``<ledgerId>.log`` (all integers little-endian)::

    file header, 16 bytes
      0  magic       4 bytes   b"SQLF"
      4  version     u16       3 (1 and 2: earlier formats, still read)
      6  flags       u16       0
      8  ledger_id   u64
    records, back to back from offset 16, entry ids 0, 1, 2, ...; version 3:
      0  length      u32       number of data bytes
      4  crc         u32       CRC32C over bytes 0-3 and 8-15 of the record, then the data
      8  entry_id    u64       the record's entry id
     16  data        `length` bytes, opaque
    version 2 records are the same but for their crc, zlib.crc32 (several times slower than the
    CPU's CRC32C instruction on large entries); version 1 records have no entry id either: an
    8-byte header (length, zlib.crc32 over the length and data).

The CRC covers the length so that a zero-filled tail never parses as valid empty records. Recovery
walks the records. At a record that is partial or whose CRC does not match it looks for the next
trustworthy record: if there is none, the bad bytes are a torn tail, cut off (and kept in the
ledger directory's ``quarantine/`` folder). If there is one, the bad bytes are *damaged* and the
entry ids never move: from version 2 the next record's entry id says how many entries the damaged
bytes held, and each of them keeps its id as a lost entry (reads skip it). Version 1 records
carry no id: one damaged record whose own length leads to the next record is one lost entry;
damage whose extent is unknown stops the recovery with an error (the ids after it are unknown).

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
import re
import struct
import zlib
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import crc32c as _crc32c

from .position import StorageError

__all__ = [
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "LEDGER_RECORD_HEADER_SIZE",
    "RECORD_HEADER_SIZE",
    "ScanResult",
    "encode_file_header",
    "encode_ledger_records",
    "encode_records",
    "file_version",
    "fsync_dir",
    "next_nonzero",
    "parse_records",
    "pwrite_all",
    "read_index",
    "record_header_size",
    "scan_ledger_file",
    "sync_fd",
    "truncate_file",
    "write_file",
    "write_index",
]

_MAGIC = b"SQLF"
_INDEX_MAGIC = b"SQIX"
_INDEX_VERSION = 1
FORMAT_VERSION = 3
"""Version of the ledger files written now (records carry their entry ids; CRC32C)."""
_FILE_HEADER = struct.Struct("<4sHHQ")
_RECORD = struct.Struct("<II")
_RECORD_V2 = struct.Struct("<IIQ")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_LENGTH_AND_ID = struct.Struct("<IQ")
_INDEX_HEADER = struct.Struct("<4sHHQQQd")
HEADER_SIZE = _FILE_HEADER.size
RECORD_HEADER_SIZE = _RECORD.size
"""Header of a record without entry id: version 1 ledgers and compacted ledgers."""
LEDGER_RECORD_HEADER_SIZE = _RECORD_V2.size
"""Header of a record of the ledger files written now (from version 2: with its entry id)."""


def record_header_size(version: int) -> int:
    """Bytes of a record header in a ledger file of ``version``."""
    return LEDGER_RECORD_HEADER_SIZE if version >= 2 else RECORD_HEADER_SIZE


def _record_crc(view: memoryview | bytes, pos: int, start: int, stop: int, version: int) -> int:
    """CRC of the record at ``pos`` whose data is ``view[start:stop]`` in a ledger file of
    ``version`` (1: records of compacted ledgers too)."""
    crc_of = _crc32c.crc32c if version >= 3 else zlib.crc32
    crc: int = crc_of(view[pos : pos + 4])
    if start - pos == LEDGER_RECORD_HEADER_SIZE:
        crc = crc_of(view[pos + 8 : start], crc)
    result: int = crc_of(view[start:stop], crc)
    return result


sync_fd = getattr(os, "fdatasync", os.fsync)
"""Flush a file's data (and the metadata needed to read it back) to stable storage."""


def encode_file_header(ledger_id: int) -> bytes:
    """The 16-byte header that starts every ledger file (written in :data:`FORMAT_VERSION`)."""
    return _FILE_HEADER.pack(_MAGIC, FORMAT_VERSION, 0, ledger_id)


def encode_ledger_records(datas: Sequence[bytes], first_id: int, parts: list[bytes]) -> None:
    """Append the records of ``datas`` (entry ids from ``first_id``) to ``parts``, in the
    format written now (:data:`FORMAT_VERSION`)."""
    pack = _RECORD_V2.pack
    covered = _LENGTH_AND_ID.pack  # the header bytes the CRC covers, in order
    crc32 = _crc32c.crc32c
    append = parts.append
    for entry_id, data in enumerate(datas, first_id):
        n = len(data)
        append(pack(n, crc32(data, crc32(covered(n, entry_id))), entry_id))
        append(data)


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


def parse_records(
    buf: bytes, starts: Sequence[int], end: int, first_id: int | None = None, version: int = 1
) -> list[memoryview | None]:
    """Split the records at offsets ``starts`` (relative to ``buf``; the last one ends at
    ``end``) out of ``buf``, checking each one's length and CRC. The records are views into
    ``buf`` (not copies: a read hands them straight to the connection).

    ``first_id`` is the entry id of the first record of a ledger of ``version`` 2 or later (the
    records carry their ids, which must match); None for records without ids (version 1, and
    compacted ledgers). A damaged record is returned as
    None (the caller decides what that means); the others are found at their own offsets
    whatever the damaged one's length field says.
    """
    out: list[memoryview | None] = []
    view = memoryview(buf)
    header = RECORD_HEADER_SIZE if first_id is None else LEDGER_RECORD_HEADER_SIZE
    unpack = _RECORD.unpack_from
    last = len(starts) - 1
    for i, pos in enumerate(starts):
        stop = starts[i + 1] if i < last else end
        if stop > len(buf):
            raise StorageError("short read of a ledger file")
        if stop - pos < header:
            out.append(None)
            continue
        n, crc = unpack(buf, pos)
        start = pos + header
        if (
            start + n != stop
            or _record_crc(view, pos, start, stop, version) != crc
            or (first_id is not None and _U64.unpack_from(buf, pos + 8)[0] != first_id + i)
        ):
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
    """Cut ``path`` to ``size`` bytes and fsync it (nothing to do if it is not longer)."""
    fd = os.open(path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
            os.fsync(fd)
    finally:
        os.close(fd)


class ScanResult(NamedTuple):
    """Outcome of scanning a ledger file.

    ``offsets``: file offset of each entry (lost ones included: the first entry of a damaged
    region starts where it does, the others at the region's end); ``damaged``: entry ids of
    lost entries, in order; ``regions``: each damaged region as (start offset, end offset,
    first entry id, number of entries lost); ``valid_end``: where the last whole record ends
    (what follows is a torn tail); ``header_ok``: the file header is right; ``version``: the
    file's format version.
    """

    offsets: array[int]
    valid_end: int
    file_size: int
    damaged: list[int]
    header_ok: bool
    version: int = FORMAT_VERSION
    regions: list[tuple[int, int, int, int]] = []


def _record_ok(mm: mmap.mmap | bytes, pos: int, size: int, version: int) -> int:
    """End offset of a valid record of a ``version`` file at ``pos``, or -1."""
    header = record_header_size(version)
    if pos + header > size:
        return -1
    n, crc = _RECORD.unpack_from(mm, pos)
    end = pos + header + n
    if end > size:
        return -1
    with memoryview(mm) as view:
        ok = _record_crc(view, pos, pos + header, end, version)
    return end if ok == crc else -1


def _record_id(mm: mmap.mmap | bytes, pos: int) -> int:
    entry_id: int = _U64.unpack_from(mm, pos + 8)[0]
    return entry_id


def _resync(
    mm: mmap.mmap | bytes, bad: int, size: int, version: int, bad_id: int | None = None
) -> tuple[int, bool]:
    """Offset of the first trustworthy record after a bad one at ``bad`` (-1: a torn tail), and
    whether the bad record's own length field led there.

    A record is trusted when it is valid and is either the last in the file (only zeros, the
    file's preallocation, may follow it) or followed by another valid record (a random match
    of both CRCs is practically impossible). The bad record's own length is tried first: with
    a flipped data byte it is still right. With ``bad_id`` (the entry id the bad record must
    hold, files that record ids), the record it leads to must be entry ``bad_id + 1``: a
    damaged length can point to a later record, over intact ones.
    """

    header = record_header_size(version)

    def trusted(pos: int) -> bool:
        end = _record_ok(mm, pos, size, version)
        if end < 0:
            return False
        return end == size or _record_ok(mm, end, size, version) > 0 or next_nonzero(mm, end) < 0

    if bad + header <= size:
        n: int = _U32.unpack_from(mm, bad)[0]
        guess = bad + header + n
        if (
            guess < size
            and trusted(guess)
            and (bad_id is None or _record_id(mm, guess) == bad_id + 1)
        ):
            return guess, True
    pos = bad + 1
    nonzero = -1
    while pos <= size - header:
        if nonzero < pos:
            # A header of zeros is never a valid record: skip zero runs (a preallocated tail
            # is megabytes of them) to where the next non-zero byte can be in a header.
            nonzero = next_nonzero(mm, pos)
            if nonzero < 0:
                break
            pos = max(pos, nonzero - header + 1)
            continue
        (n,) = _U32.unpack_from(mm, pos)
        if pos + header + n <= size and trusted(pos):
            return pos, False
        pos += 1
    return -1, False


_NONZERO = re.compile(rb"[^\x00]")


def next_nonzero(data: mmap.mmap | bytes, pos: int) -> int:
    """Offset of the first byte that is not zero at or after ``pos``; -1 if there is none."""
    found = _NONZERO.search(data, pos)
    return -1 if found is None else found.start()


def _lost_entries(
    path: Path, mm: mmap.mmap | bytes, version: int, region: tuple[int, int, bool], expected: int
) -> int:
    """How many entries the damaged bytes ``region`` = (start, end, found by the bad record's
    length) held, ``expected`` being the entry id of the first; raises if that is unknowable."""
    bad, nxt, by_length = region
    if version >= 2:
        next_id = _record_id(mm, nxt)
        lost = next_id - expected
        # every record takes at least a header: the region cannot hold more than that many
        if lost < 0 or lost > max(1, (nxt - bad) // LEDGER_RECORD_HEADER_SIZE):
            raise StorageError(
                f"ledger file {path}: the record at offset {nxt} has entry id {next_id}, which "
                f"cannot follow entry {expected - 1} and {nxt - bad} damaged bytes; not loaded "
                "(the file is left as it is)"
            )
        return lost
    if by_length:
        return 1
    raise StorageError(
        f"ledger file {path}: bytes {bad} to {nxt} after entry {expected - 1} are damaged, and "
        "its format (version 1) does not record entry ids, so neither how many entries they "
        "held nor the ids of the entries after them are known; not loaded (the file is left "
        "as it is)"
    )


def scan_ledger_file(path: Path, ledger_id: int) -> ScanResult:
    """Walk the records of a ledger file (see the module docstring for damaged records).

    A damaged file header does not hide the records after it: they are scanned all the same.
    Raises :class:`StorageError` where entry ids cannot be known (see the module docstring).
    """
    offsets: array[int] = array("q")
    damaged: list[int] = []
    regions: list[tuple[int, int, int, int]] = []
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size <= HEADER_SIZE:
            version = _header_version(f.read(HEADER_SIZE), ledger_id)
            return ScanResult(offsets, 0, size, damaged, version is not None)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            version = _header_version(mm[:HEADER_SIZE], ledger_id)
            header_ok = version is not None
            if version is None:
                version = _guess_version(mm, size)
            elif _record_ok(mm, HEADER_SIZE, size, version) < 0:
                # a damaged version field can name another format: the first record says
                other = _guess_version(mm, size)
                if other != version and _record_ok(mm, HEADER_SIZE, size, other) >= 0:
                    version, header_ok = other, False
            pos = HEADER_SIZE
            while pos < size:
                end = _record_ok(mm, pos, size, version)
                if end >= 0 and version >= 2 and _record_id(mm, pos) != len(offsets):
                    raise StorageError(
                        f"ledger file {path}: the record at offset {pos} has entry id "
                        f"{_record_id(mm, pos)} where entry {len(offsets)} belongs; not loaded"
                    )
                if end >= 0:
                    offsets.append(pos)
                    pos = end
                    continue
                if next_nonzero(mm, pos) < 0:
                    break  # the zero-filled tail of a file preallocated ahead of its writes
                nxt, by_length = _resync(
                    mm, pos, size, version, len(offsets) if version >= 2 else None
                )
                if nxt < 0:
                    break
                first = len(offsets)
                lost = _lost_entries(path, mm, version, (pos, nxt, by_length), first)
                for k in range(lost):
                    damaged.append(first + k)
                    offsets.append(pos if k == 0 else nxt)
                regions.append((pos, nxt, first, lost))
                pos = nxt
            return ScanResult(offsets, pos, size, damaged, header_ok, version, regions)


def _header_version(header: bytes, ledger_id: int) -> int | None:
    """The format version of a right file header, None if it is damaged."""
    if len(header) < HEADER_SIZE:
        return None
    magic, version, flags, lid = _FILE_HEADER.unpack(header)
    if magic == _MAGIC and version in (1, 2, 3) and flags == 0 and lid == ledger_id:
        return int(version)
    return None


def file_version(path: Path, ledger_id: int) -> int | None:
    """The format version in the header of a ledger file; None if the header is damaged."""
    with open(path, "rb", buffering=0) as f:
        return _header_version(f.read(HEADER_SIZE), ledger_id)


def _guess_version(mm: mmap.mmap | bytes, size: int) -> int:
    """The format of a file whose header is damaged, from its records."""
    for version in (FORMAT_VERSION, 2, 1):
        if _record_ok(mm, HEADER_SIZE, size, version) >= 0:
            return version
    for version in (FORMAT_VERSION, 2):
        if _resync(mm, HEADER_SIZE, size, version)[0] >= 0:
            return version
    return 1


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
    body = _INDEX_HEADER.pack(
        _INDEX_MAGIC, _INDEX_VERSION, 0, ledger_id, len(arr), data_end, created_at
    )
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
    if magic != _INDEX_MAGIC or version != _INDEX_VERSION or lid != ledger_id:
        return None
    if len(body) != _INDEX_HEADER.size + 8 * count + 4 or data_end != file_size:
        return None
    arr: array[int] = array("q")
    arr.frombytes(body[_INDEX_HEADER.size : -4])
    if struct.pack("=H", 1) != struct.pack("<H", 1):  # pragma: no cover - big-endian hosts
        arr.byteswap()
    return arr, created_at
